//! Whether a conversation's request started from what its previous one
//! left: the truth the prompt-cache metrics tell. A runner reports, per
//! request, the prompt tokens it started from (a snapshot, the model's
//! prompt cache, the runtime's history) and those it prefilled; this
//! remembers, per conversation (the service's key), how long its previous
//! prompt was, and names the outcome:
//! - `hit`: it started from at least its previous prompt;
//! - `partial`: from less (only a system prompt's snapshot, or one of an
//!   earlier turn: the latest was evicted, or the conversation was edited);
//! - `miss`: from nothing, though it had been seen before;
//! - `new` / `shared`: a conversation's first request, prefilled whole or
//!   started from a shared opening (another conversation's, a system
//!   prompt's).

use std::collections::{BTreeMap, HashMap};

use crate::backend::PromptReuse;

/// Conversations remembered per model; past it the least recent goes.
const MAX_CONVERSATIONS: usize = 512;

/// What a request's prompt started from, against its conversation's past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    Partial,
    Miss,
    New,
    Shared,
}

impl Outcome {
    /// Its label in the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Partial => "partial",
            Self::Miss => "miss",
            Self::New => "new",
            Self::Shared => "shared",
        }
    }
}

/// The previous prompt's length of each conversation seen lately.
#[derive(Debug, Default)]
pub struct Conversations {
    /// Per conversation: its previous prompt's length and when it was seen.
    last: HashMap<String, (u32, u64)>,
    /// The conversations by when they were seen, the least recent first.
    by_use: BTreeMap<u64, String>,
    clock: u64,
}

impl Conversations {
    /// Records a request of conversation `key` that ran as `reuse`, and
    /// names its outcome.
    pub fn record(&mut self, key: &str, reuse: PromptReuse) -> Outcome {
        let whole = reuse.reused.saturating_add(reuse.prefilled);
        let outcome = match self.last.get(key) {
            None if reuse.reused == 0 => Outcome::New,
            None => Outcome::Shared,
            Some(_) if reuse.reused == 0 => Outcome::Miss,
            Some(&(previous, _)) if reuse.reused < previous => Outcome::Partial,
            Some(_) => Outcome::Hit,
        };
        self.clock += 1;
        match self.last.get_mut(key) {
            Some(seen) => {
                self.by_use.remove(&seen.1);
                *seen = (whole, self.clock);
            }
            None => {
                if self.last.len() >= MAX_CONVERSATIONS
                    && let Some((_, oldest)) = self.by_use.pop_first()
                {
                    self.last.remove(&oldest);
                }
                self.last.insert(key.to_owned(), (whole, self.clock));
            }
        }
        self.by_use.insert(self.clock, key.to_owned());
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(reused: u32, prefilled: u32) -> PromptReuse {
        PromptReuse { reused, prefilled }
    }

    #[test]
    fn a_turn_that_starts_from_less_than_its_previous_prompt_is_a_partial_miss() {
        let mut seen = Conversations::default();
        assert_eq!(seen.record("a", ran(0, 1000)), Outcome::New);
        assert_eq!(seen.record("a", ran(1000, 40)), Outcome::Hit);
        // Only the system prompt's snapshot: not what the last turn left.
        assert_eq!(seen.record("a", ran(300, 800)), Outcome::Partial);
        assert_eq!(seen.record("a", ran(0, 1200)), Outcome::Miss);
        assert_eq!(seen.record("b", ran(300, 700)), Outcome::Shared);
    }

    #[test]
    fn the_least_recently_seen_conversation_is_the_one_forgotten() {
        let mut seen = Conversations::default();
        for i in 0..MAX_CONVERSATIONS {
            seen.record(&i.to_string(), ran(0, 10));
        }
        // The first is seen again: the second is now the least recent.
        assert_eq!(seen.record("0", ran(10, 1)), Outcome::Hit);
        seen.record("new", ran(0, 10));
        assert_eq!(seen.last.len(), MAX_CONVERSATIONS);
        assert_eq!(seen.by_use.len(), MAX_CONVERSATIONS);
        assert!(seen.last.contains_key("0"));
        assert!(!seen.last.contains_key("1"));
        assert_eq!(seen.record("1", ran(0, 10)), Outcome::New);
    }

    #[test]
    fn the_memory_is_bounded() {
        let mut seen = Conversations::default();
        for i in 0..(MAX_CONVERSATIONS * 2) {
            seen.record(&i.to_string(), ran(0, 10));
        }
        assert_eq!(seen.last.len(), MAX_CONVERSATIONS);
        // The most recent are the ones kept.
        assert_eq!(
            seen.record(&(MAX_CONVERSATIONS * 2 - 1).to_string(), ran(10, 1)),
            Outcome::Hit
        );
    }
}
