//! Whether a model's runtime really keeps a chat's history.
//!
//! A chat's next turn sends only its new message when the runtime holds
//! the rest (`keep_history`). Some models cannot keep it: Qwen3.5 (linear
//! attention) on runtime 1.3.0 drops every cache itself (RKLLM_ABI.md
//! §3.5b), and a turn sent alone would be answered without the
//! conversation. With `history_reuse = "auto"` the runtime's KV cache
//! (`rkllm_get_kv_cache_size`, runtimes 1.2.1 and later, which are all
//! this server drives) is checked before a continuing turn and after each
//! kept-history run against what the history must at least hold; a model
//! whose runtime falls short is switched, for good and logged once, to
//! sending the whole conversation. `on` never checks; `off` always sends
//! the whole conversation. What was seen is the runner's to remember
//! ([`History::take_dropped`]): a model seen to drop its history is not
//! trusted again by a runner loaded later.

use crate::model::HistoryReuse;

/// A run's counts, for the check after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCounts {
    /// KV positions held when the run started.
    pub before: u32,
    /// KV positions held after it (`None`: the runtime could not tell).
    pub after: Option<u32>,
    /// Tokens it prefilled, as the runtime counted them (0: unknown).
    pub prefilled: u32,
    /// Tokens it generated.
    pub generated: u32,
    /// The model's context length.
    pub context: u32,
}

/// One runner's view of its model's history.
#[derive(Debug)]
pub struct History {
    mode: HistoryReuse,
    /// The runtime was seen to drop the history.
    dropped: bool,
    /// Why it was seen to, until the runner takes it.
    newly_dropped: Option<String>,
    /// KV positions after the last kept-history run (`None`: nothing is
    /// held, or unknown).
    held: Option<u32>,
}

impl History {
    /// A view for a model in `mode`, whose runtime was seen before to drop
    /// its history when `dropped_before`.
    pub fn new(mode: HistoryReuse, dropped_before: bool) -> Self {
        Self {
            mode,
            dropped: mode == HistoryReuse::Auto && dropped_before,
            newly_dropped: None,
            held: None,
        }
    }

    /// Why the runtime was just seen to drop the history (once): the
    /// runner remembers the model and says so.
    pub fn take_dropped(&mut self) -> Option<String> {
        self.newly_dropped.take()
    }

    /// Whether a chat's next turn may send only its new message.
    pub fn reuses(&self) -> bool {
        self.mode != HistoryReuse::Off && !self.dropped
    }

    /// Whether the runtime's KV cache is checked.
    pub fn checks(&self) -> bool {
        self.mode == HistoryReuse::Auto && !self.dropped
    }

    /// Nothing is held any more (a cleared cache, a run without history).
    pub fn forget(&mut self) {
        self.held = None;
    }

    /// Before a turn that continues the held chat: whether the runtime
    /// still holds at least what the last run left (`now`: its KV size).
    /// When it does not, the model is switched to whole conversations.
    pub fn still_held(&mut self, now: Option<u32>) -> bool {
        if !self.checks() {
            return self.reuses();
        }
        if let (Some(now), Some(held)) = (now, self.held)
            && now < held
        {
            self.drop_for_good(&format!(
                "its KV cache held {now} positions before a turn, {held} after the last one"
            ));
            return false;
        }
        true
    }

    /// After a run with `keep_history`: the KV cache must hold at least
    /// what it held before plus every token generated (the prompt's tokens
    /// come on top, so the bound never wrongs a runtime that keeps the
    /// history). A run that reached the context's end is not judged: the
    /// runtime may have shifted it out. Returns whether the history is
    /// still reused.
    pub fn after_run(&mut self, run: RunCounts) -> bool {
        if !self.checks() {
            return self.reuses();
        }
        let Some(after) = run.after else {
            self.held = None;
            return true;
        };
        let added = u64::from(run.prefilled) + u64::from(run.generated);
        let overflowed = u64::from(run.before) + added >= u64::from(run.context);
        let least = u64::from(run.before) + u64::from(run.generated);
        if !overflowed && u64::from(after) < least {
            self.drop_for_good(&format!(
                "its KV cache held {after} positions after a turn that should have left at least \
                 {least}"
            ));
            return false;
        }
        self.held = Some(after);
        true
    }

    fn drop_for_good(&mut self, why: &str) {
        self.dropped = true;
        self.held = None;
        self.newly_dropped = Some(why.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(before: u32, after: u32, prefilled: u32, generated: u32) -> RunCounts {
        RunCounts {
            before,
            after: Some(after),
            prefilled,
            generated,
            context: 4096,
        }
    }

    #[test]
    fn a_runtime_that_keeps_the_history_stays_trusted() {
        let mut history = History::new(HistoryReuse::Auto, false);
        assert!(history.after_run(run(0, 30, 20, 10)));
        assert!(history.still_held(Some(30)));
        // The last token generated may not be in the cache.
        assert!(history.after_run(run(30, 54, 15, 10)));
        assert!(history.reuses());
    }

    #[test]
    fn a_cache_that_holds_less_than_the_turn_generated_switches_to_whole_conversations() {
        let mut history = History::new(HistoryReuse::Auto, false);
        assert!(!history.after_run(run(0, 0, 20, 10)));
        assert!(!history.reuses());
        // Said once, for the runner to remember.
        assert!(history.take_dropped().is_some());
        assert!(history.take_dropped().is_none());
        // A runner loaded again that remembers does not trust it (`on`
        // still does: the operator said so).
        assert!(!History::new(HistoryReuse::Auto, true).reuses());
        assert!(History::new(HistoryReuse::On, true).reuses());
    }

    #[test]
    fn a_cache_dropped_between_turns_is_seen_before_the_next_one() {
        let mut history = History::new(HistoryReuse::Auto, false);
        assert!(history.after_run(run(0, 30, 20, 10)));
        assert!(!history.still_held(Some(0)));
        assert!(!history.reuses());
    }

    #[test]
    fn a_run_at_the_contexts_end_is_not_judged() {
        let mut history = History::new(HistoryReuse::Auto, false);
        let full = RunCounts {
            context: 100,
            ..run(90, 40, 20, 10)
        };
        assert!(history.after_run(full));
        assert!(history.reuses());
    }

    #[test]
    fn on_never_checks_and_off_never_reuses() {
        let mut on = History::new(HistoryReuse::On, false);
        assert!(on.after_run(run(0, 0, 20, 10)));
        assert!(on.still_held(Some(0)));
        assert!(on.reuses() && !on.checks());
        let off = History::new(HistoryReuse::Off, false);
        assert!(!off.reuses() && !off.checks());
    }
}
