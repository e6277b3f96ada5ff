//! Which lane of its model's queue a request waits in, and the order in
//! which the queue's jobs are taken.
//!
//! A model's queue holds two lanes: interactive (a person waits for the
//! answer) and background (a client's housekeeping: a chat's title, its
//! tags, suggested follow-ups, search queries). Each lane is first come,
//! first served, and interactive jobs that arrive after a background job
//! go ahead of it, but not for ever: once it has waited
//! [`Ageing::max_wait`], or [`Ageing::max_overtaken`] of them have
//! started while it waited, it is aged and takes its place by arrival
//! again, ahead of every interactive job that came after it (a running
//! job is never interrupted). So a background job is never taken before a
//! job that arrived before it, and later interactive ones pass it only
//! within its bound. The queue's bound counts both lanes. [`Queue`] keeps
//! its jobs in the order they will be taken, so a job's place in it is its
//! queue position.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A request's lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// A person waits for it (the default).
    #[default]
    Interactive,
    /// Interactive requests that arrive later go ahead of it, up to its
    /// [`Ageing`] bound; it runs with thinking off.
    Background,
}

impl Priority {
    /// Its name on the wire and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interactive => "interactive",
            Self::Background => "background",
        }
    }

    /// The lane `value` names (`interactive` or `background`, any case,
    /// surrounding spaces ignored); `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("interactive") {
            Some(Self::Interactive)
        } else if value.eq_ignore_ascii_case("background") {
            Some(Self::Background)
        } else {
            None
        }
    }
}

/// How long interactive jobs that arrive after a background job may go
/// ahead of it (`[engine] background_max_wait_secs` and
/// `background_max_overtaken`): until it reaches either bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ageing {
    /// Time in the queue after which later interactive jobs no longer go
    /// ahead of it.
    pub max_wait: Duration,
    /// Later interactive jobs that may start ahead of it.
    pub max_overtaken: u32,
}

/// A waiting interactive job and its place in the order of arrival.
#[derive(Debug)]
struct Arrived<T> {
    job: T,
    seq: u64,
}

/// A waiting background job and what its ageing is measured by.
#[derive(Debug)]
struct Held<T> {
    job: T,
    seq: u64,
    /// When it was queued.
    since: Instant,
    /// Interactive jobs that arrived after it and have started.
    overtaken: u32,
}

/// A model's queue: two lanes, each first come, first served. The jobs
/// are taken in this order: the aged background jobs and the interactive
/// ones by arrival, then the other background jobs.
#[derive(Debug)]
pub(super) struct Queue<T> {
    interactive: VecDeque<Arrived<T>>,
    background: VecDeque<Held<T>>,
    /// The first `aged` background jobs are aged.
    aged: usize,
    /// The next job's place in the order of arrival.
    next_seq: u64,
    ageing: Ageing,
}

impl<T> Queue<T> {
    pub fn new(ageing: Ageing) -> Self {
        Self {
            interactive: VecDeque::new(),
            background: VecDeque::new(),
            aged: 0,
            next_seq: 0,
            ageing,
        }
    }

    /// Jobs in the queue (ended ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.interactive.len() + self.background.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `job`, arrived at `now`, at the end of its lane.
    pub fn push(&mut self, job: T, priority: Priority, now: Instant) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match priority {
            Priority::Interactive => self.interactive.push_back(Arrived { job, seq }),
            Priority::Background => self.background.push_back(Held {
                job,
                seq,
                since: now,
                overtaken: 0,
            }),
        }
    }

    /// The jobs in the order they will be taken, as it stood when the
    /// clock was last read ([`Queue::ordered`] reads it).
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let mut aged = self.background.range(..self.aged).peekable();
        let mut interactive = self.interactive.iter().peekable();
        let by_arrival = std::iter::from_fn(move || match (aged.peek(), interactive.peek()) {
            (Some(b), Some(i)) if b.seq < i.seq => aged.next().map(|b| &b.job),
            (_, Some(_)) => interactive.next().map(|i| &i.job),
            (Some(_), None) => aged.next().map(|b| &b.job),
            (None, None) => None,
        });
        by_arrival.chain(self.background.range(self.aged..).map(|b| &b.job))
    }

    /// The jobs in the order they will be taken, as it stands at `now`.
    pub fn ordered(&mut self, now: Instant) -> impl Iterator<Item = &T> {
        self.age(now);
        self.iter()
    }

    /// Ages the background jobs that have reached a bound by `now`, and
    /// every one before them (the lane stays first come, first served).
    fn age(&mut self, now: Instant) {
        let ageing = self.ageing;
        let due = |held: &Held<T>| {
            now.saturating_duration_since(held.since) >= ageing.max_wait
                || held.overtaken >= ageing.max_overtaken
        };
        if let Some(last) = self.background.iter().rposition(due) {
            self.aged = self.aged.max(last + 1);
        }
    }

    /// Removes the first job in the order; with the arrival of an
    /// interactive one.
    fn pop_next(&mut self) -> Option<(T, Option<u64>)> {
        let aged_first = self.aged > 0
            && self
                .interactive
                .front()
                .is_none_or(|i| self.background.front().is_some_and(|b| b.seq < i.seq));
        if aged_first {
            self.aged -= 1;
            return self.background.pop_front().map(|b| (b.job, None));
        }
        match self.interactive.pop_front() {
            Some(i) => Some((i.job, Some(i.seq))),
            None => self.background.pop_front().map(|b| (b.job, None)),
        }
    }

    /// Takes the next job to run at `now`. Jobs that are no longer `live`
    /// (their stream ended while they waited) are dropped on the way and
    /// start nothing; an interactive job taken overtakes the young
    /// background jobs that arrived before it.
    pub fn take(&mut self, now: Instant, live: impl Fn(&T) -> bool) -> Option<T> {
        self.age(now);
        loop {
            let (job, interactive) = self.pop_next()?;
            if !live(&job) {
                continue;
            }
            if let Some(seq) = interactive {
                for held in self.background.range_mut(self.aged..) {
                    if held.seq < seq {
                        held.overtaken = held.overtaken.saturating_add(1);
                    }
                }
                self.age(now);
            }
            return Some(job);
        }
    }

    /// Keeps only the jobs `keep` accepts, in their order.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.interactive.retain(|i| keep(&i.job));
        let (mut index, mut aged) = (0, 0);
        let was_aged = self.aged;
        self.background.retain(|held| {
            let kept = keep(&held.job);
            if kept && index < was_aged {
                aged += 1;
            }
            index += 1;
            kept
        });
        self.aged = aged;
    }

    /// Empties the queue; its jobs in the order they would have run.
    pub fn drain(&mut self) -> Vec<T> {
        std::iter::from_fn(|| self.pop_next().map(|(job, _)| job)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Priority::{Background as B, Interactive as I};

    const AGEING: Ageing = Ageing {
        max_wait: Duration::from_secs(15),
        max_overtaken: 4,
    };

    fn queue(jobs: &[(&'static str, Priority)], at: Instant) -> Queue<&'static str> {
        let mut queue = Queue::new(AGEING);
        for &(name, priority) in jobs {
            queue.push(name, priority, at);
        }
        queue
    }

    fn order(queue: &mut Queue<&'static str>, now: Instant) -> Vec<&'static str> {
        queue.ordered(now).copied().collect()
    }

    fn take(queue: &mut Queue<&'static str>, now: Instant) -> Option<&'static str> {
        queue.take(now, |_| true)
    }

    #[test]
    fn an_interactive_job_goes_before_every_waiting_young_background_job() {
        let t0 = Instant::now();
        let mut queue = queue(&[("i1", I), ("b1", B), ("i2", I), ("b2", B)], t0);
        queue.push("i3", I, t0);
        assert_eq!(order(&mut queue, t0), ["i1", "i2", "i3", "b1", "b2"]);
    }

    #[test]
    fn a_background_job_goes_last() {
        let t0 = Instant::now();
        let mut queue = queue(&[("i1", I), ("b1", B)], t0);
        queue.push("b2", B, t0);
        assert_eq!(order(&mut queue, t0), ["i1", "b1", "b2"]);
        let mut empty = Queue::new(AGEING);
        empty.push("b", B, t0);
        assert_eq!(order(&mut empty, t0), ["b"]);
    }

    #[test]
    fn a_young_background_job_waits_while_interactive_ones_do() {
        let t0 = Instant::now();
        let mut queue = queue(&[("b", B), ("i1", I), ("i2", I)], t0);
        let just_young = t0 + AGEING.max_wait - Duration::from_millis(1);
        assert_eq!(take(&mut queue, just_young), Some("i1"));
        assert_eq!(take(&mut queue, just_young), Some("i2"));
        assert_eq!(take(&mut queue, just_young), Some("b"));
        assert_eq!(take(&mut queue, just_young), None);
    }

    #[test]
    fn a_background_job_that_has_waited_max_wait_is_taken_ahead_of_later_interactive_ones() {
        let t0 = Instant::now();
        let mut queue = queue(&[("b", B), ("i1", I), ("i2", I)], t0);
        let aged = t0 + AGEING.max_wait;
        assert_eq!(order(&mut queue, aged), ["b", "i1", "i2"]);
        assert_eq!(take(&mut queue, aged), Some("b"));
        // Once: the interactive lane goes on in its order.
        assert_eq!(take(&mut queue, aged), Some("i1"));
        assert_eq!(take(&mut queue, aged), Some("i2"));
    }

    #[test]
    fn an_aged_background_job_never_goes_ahead_of_an_interactive_one_that_came_before_it() {
        let t0 = Instant::now();
        let mut queue = queue(&[("i1", I), ("b", B), ("i2", I)], t0);
        let aged = t0 + AGEING.max_wait * 10;
        assert_eq!(order(&mut queue, aged), ["i1", "b", "i2"]);
        let taken: Vec<_> = std::iter::from_fn(|| take(&mut queue, aged)).collect();
        assert_eq!(taken, ["i1", "b", "i2"]);
    }

    #[test]
    fn a_background_job_overtaken_by_max_overtaken_later_interactive_ones_goes_next() {
        let t0 = Instant::now();
        let mut queue = queue(&[("i1", I), ("i2", I), ("b", B)], t0);
        // A continuous interactive load: a new one arrives as one starts.
        let mut started = Vec::new();
        for n in 3..9 {
            started.push(take(&mut queue, t0).unwrap());
            queue.push(["i3", "i4", "i5", "i6", "i7", "i8"][n - 3], I, t0);
        }
        // i1 and i2 came before it; i3 to i6 overtook it.
        assert_eq!(started, ["i1", "i2", "i3", "i4", "i5", "i6"]);
        // Its queue position says so before it is taken.
        assert_eq!(order(&mut queue, t0), ["b", "i7", "i8"]);
        assert_eq!(take(&mut queue, t0), Some("b"));
        assert_eq!(take(&mut queue, t0), Some("i7"));
    }

    #[test]
    fn interactive_jobs_that_came_before_a_background_one_do_not_age_it() {
        let t0 = Instant::now();
        let mut queue = queue(&[("i1", I), ("i2", I), ("i3", I), ("i4", I)], t0);
        queue.push("b", B, t0);
        for _ in 0..4 {
            take(&mut queue, t0).unwrap();
        }
        queue.push("i5", I, t0);
        assert_eq!(order(&mut queue, t0), ["i5", "b"]);
    }

    #[test]
    fn aged_background_jobs_keep_their_order_of_arrival_among_interactive_ones() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(5);
        let mut queue = queue(&[("b1", B), ("i1", I), ("b2", B)], t0);
        queue.push("i2", I, t1);
        queue.push("b3", B, t1);
        // b1 and b2 have waited long enough; b3, queued later, has not.
        let now = t0 + AGEING.max_wait;
        assert_eq!(order(&mut queue, now), ["b1", "i1", "b2", "i2", "b3"]);
        let taken: Vec<_> = std::iter::from_fn(|| take(&mut queue, now)).collect();
        assert_eq!(taken, ["b1", "i1", "b2", "i2", "b3"]);
    }

    #[test]
    fn a_job_dropped_on_the_way_does_not_count_as_an_interactive_start() {
        let t0 = Instant::now();
        let mut queue = queue(&[("b", B), ("gone", I), ("i1", I)], t0);
        for name in ["i2", "i3", "i4"] {
            queue.push(name, I, t0);
        }
        let live = |job: &&str| *job != "gone";
        let started: Vec<_> = (0..4).map(|_| queue.take(t0, live).unwrap()).collect();
        assert_eq!(started, ["i1", "i2", "i3", "i4"]);
        assert_eq!(queue.take(t0, live), Some("b"));
    }

    #[test]
    fn removing_jobs_keeps_the_aged_ones_in_place_and_draining_gives_the_order() {
        let t0 = Instant::now();
        let mut queue = queue(&[("b1", B), ("b2", B), ("i1", I)], t0);
        queue.push("b3", B, t0 + AGEING.max_wait);
        let now = t0 + AGEING.max_wait;
        assert_eq!(order(&mut queue, now), ["b1", "b2", "i1", "b3"]);
        queue.retain(|job| *job != "b1");
        assert_eq!(
            queue.iter().copied().collect::<Vec<_>>(),
            ["b2", "i1", "b3"]
        );
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.drain(), ["b2", "i1", "b3"]);
        assert!(queue.is_empty());
    }

    #[test]
    fn lane_names_parse_in_any_case_and_nothing_else_does() {
        assert_eq!(Priority::parse(" Background "), Some(B));
        assert_eq!(Priority::parse("interactive"), Some(I));
        assert_eq!(Priority::parse("low"), None);
        assert_eq!(Priority::parse(""), None);
    }
}
