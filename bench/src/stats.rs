//! Samples and their percentiles, and the clock they are taken with.

use serde::Serialize;

/// Nanoseconds of the system-wide monotonic clock (`CLOCK_MONOTONIC`): the
/// clock the server stamps chunks with in benchmark mode.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// Percentiles of a set of durations, in microseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Summary {
    /// How many samples.
    pub count: usize,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest sample.
    pub max_us: f64,
}

impl Summary {
    /// Summarises durations given in nanoseconds; `None` without samples.
    pub fn of(mut samples_ns: Vec<u64>) -> Option<Self> {
        if samples_ns.is_empty() {
            return None;
        }
        samples_ns.sort_unstable();
        let at = |q: f64| {
            // Nearest rank: the smallest sample with at least q of them at or below it.
            let rank = (q * samples_ns.len() as f64).ceil() as usize;
            samples_ns[rank.clamp(1, samples_ns.len()) - 1] as f64 / 1000.0
        };
        Some(Self {
            count: samples_ns.len(),
            p50_us: at(0.50),
            p90_us: at(0.90),
            p99_us: at(0.99),
            max_us: samples_ns[samples_ns.len() - 1] as f64 / 1000.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<u64> = (1..=100).map(|us| us * 1000).collect();
        let s = Summary::of(samples).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(
            (s.p50_us, s.p90_us, s.p99_us, s.max_us),
            (50.0, 90.0, 99.0, 100.0)
        );
        let one = Summary::of(vec![7000]).unwrap();
        assert_eq!((one.p50_us, one.p99_us, one.max_us), (7.0, 7.0, 7.0));
        assert!(Summary::of(Vec::new()).is_none());
    }

    #[test]
    fn the_monotonic_clock_does_not_go_back() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
