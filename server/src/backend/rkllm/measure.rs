//! The board's figures for a model (`doctor --probe`): prefill and decode
//! time per token, the time to the first token, what saving and loading a
//! prompt cache cost, what a second chunk adds, a step in logits mode, and
//! the runner's peak memory. Each comes from runs made here, greedy, on a
//! text of a few hundred tokens. Batches of several sequences need a
//! handle of their own (`batch`), which `doctor --probe` loads alone.

use std::ffi::CString;
use std::io::Read as _;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::RkllmRunner;
use crate::plan::probe::{A, Measured};

/// How often the probes' first text is repeated in the measured prompt.
const REPEAT: usize = 5;

/// Tokens the measuring runs generate.
const STEPS: u32 = 16;

impl RkllmRunner {
    /// Measures the board's figures for this model.
    pub(super) fn measure(&mut self) -> Measured {
        let prompt = A.repeat(REPEAT);
        let mut scratch = crate::plan::probe::Observed::default();
        let mut m = Measured::default();
        self.handle.clear_kv();
        let started = Instant::now();
        if let Some(ran) = self.measure_run(&mut scratch, &prompt, false, STEPS, None) {
            if let Some(perf) = ran.perf() {
                m.prefill_ms_per_token =
                    f64::from(perf.prefill_time_ms) / f64::from(perf.prefill_tokens.max(1));
                m.decode_ms_per_token =
                    f64::from(perf.generate_time_ms) / f64::from(perf.generate_tokens.max(1));
            }
            m.ttft_ms = ran
                .first_at()
                .map_or(0.0, |at| at.duration_since(started).as_secs_f64() * 1000.0);
        }
        self.handle.clear_kv();
        let plain = self
            .measure_run(&mut scratch, &prompt, false, 1, None)
            .map(|r| r.wall_ms());
        let path = std::env::temp_dir().join(format!(
            "rkllm-measure-{}-{}.cache",
            std::process::id(),
            self.next_run.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        if let Ok(c_path) = CString::new(path.to_string_lossy().into_owned()) {
            self.handle.clear_kv();
            let saved = self
                .measure_run(&mut scratch, &prompt, false, 1, Some(&c_path))
                .map(|r| r.wall_ms());
            if let (Some(saved), Some(plain)) = (saved, plain) {
                m.snapshot_save_ms = (saved - plain).max(0.0);
            }
            self.handle.clear_kv();
            if path.is_file() {
                let at = Instant::now();
                if self.handle.load_cache(&c_path).is_ok() {
                    m.snapshot_load_ms = at.elapsed().as_secs_f64() * 1000.0;
                }
                self.handle.release_cache();
            }
        }
        let _ = std::fs::remove_file(&path);
        if let (Some(plain), Some(chunked)) = (plain, self.measure_chunked(&mut scratch)) {
            m.chunk_overhead_ms = (chunked - plain).max(0.0);
        }
        self.handle.clear_kv();
        if let Some(ran) = self.measure_run(&mut scratch, &prompt, true, STEPS, None)
            && let Some(perf) = ran.perf()
        {
            m.logits_step_ms =
                f64::from(perf.generate_time_ms) / f64::from(perf.generate_tokens.max(1));
        }
        self.handle.clear_kv();
        m.runner_peak_mb = peak_memory_mb().unwrap_or(0);
        m
    }

    /// The measured prompt in two runs: `A` paused after its prefill, then
    /// the rest's ids generating one token. Its wall time, in ms.
    fn measure_chunked(&mut self, scratch: &mut crate::plan::probe::Observed) -> Option<f64> {
        let encoder = self.encoder()?.ok()?;
        let rest: Vec<i32> = encoder
            .encode(&A.repeat(REPEAT - 1))
            .ok()?
            .into_iter()
            .map(|id| i32::try_from(id).ok())
            .collect::<Option<_>>()?;
        self.handle.clear_kv();
        let first = self.measure_paused(scratch, A)?;
        let second = self.measure_ids(scratch, &rest)?;
        Some(first + second)
    }
}

/// The process's peak resident memory (`VmHWM` of `/proc/self/status`),
/// in MB; read with a bound, as every file of the kernel's is.
fn peak_memory_mb() -> Option<u64> {
    let file = std::fs::File::open("/proc/self/status").ok()?;
    let mut text = String::new();
    file.take(64 * 1024).read_to_string(&mut text).ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb.div_ceil(1024))
}
