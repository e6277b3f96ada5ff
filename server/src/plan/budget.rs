//! A thinking budget: how many tokens a reasoning model may think before
//! its thinking block is closed for it, and what closes it.
//!
//! While the model thinks, its tokens are counted; when they reach the
//! budget the run is paused with its KV cache kept (`RKLLM_ABI.md` §3.3,
//! probed as `pause_mid_generation`), the block's end is written to the
//! client as the model would have, and the same text is fed as token input
//! (§3.5c, probed as `token_input`) in a run that goes on from the pause:
//! the model answers after its closed thinking. The closing counts within
//! the request's `max_tokens`: the block is closed early enough for it to
//! fit, so a budgeted answer never has more tokens than asked.

/// What closes a thinking block whose budget is spent.
pub const CLOSE: &str = "\n</think>\n\n";

/// The thinking tokens after which the block is closed: the budget, or
/// fewer when the closing (`close_tokens` long) would not fit in
/// `max_tokens` after it.
pub fn pause_at(budget: u32, max_tokens: u32, close_tokens: u32) -> u32 {
    budget.min(max_tokens.saturating_sub(close_tokens))
}

/// When a budgeted run pauses to close its thinking block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseAt {
    /// Thinking tokens: the budget ([`pause_at`]).
    pub thought: u32,
    /// Tokens of the answer in all (the block's opening included): what
    /// leaves room for the closing within `max_tokens`.
    pub total: u32,
}

impl PauseAt {
    /// The pause for `budget`, within `max_tokens` with the closing
    /// (`close_tokens` long) after it.
    pub fn of(budget: u32, max_tokens: u32, close_tokens: u32) -> Self {
        Self {
            thought: pause_at(budget, max_tokens, close_tokens),
            total: max_tokens.saturating_sub(close_tokens),
        }
    }

    /// Whether a run `thinking` now, having thought `thought` tokens of
    /// the `total` it wrote, pauses here.
    pub fn reached(self, thinking: bool, thought: u32, total: u32) -> bool {
        thinking && (thought >= self.thought || total >= self.total)
    }
}

/// After the block is closed with `close_tokens` tokens, `produced` tokens
/// having been written before it: how many the answer may still take
/// (0: the request's `max_tokens` is reached, a `length` end).
pub fn after_close(max_tokens: u32, produced: u32, close_tokens: u32) -> u32 {
    max_tokens.saturating_sub(produced.saturating_add(close_tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_close_fits_within_max_tokens() {
        // Budget well under the cap: the budget.
        assert_eq!(pause_at(100, 1030, 4), 100);
        // A budget at or over the cap: closed early enough to fit.
        assert_eq!(pause_at(1024, 1030, 8), 1022);
        assert_eq!(pause_at(5000, 262, 8), 254);
        // A cap smaller than the close itself: closed at once.
        assert_eq!(pause_at(10, 3, 8), 0);
        // What the answer may take after it.
        assert_eq!(after_close(1030, 1022, 8), 0);
        assert_eq!(after_close(1030, 100, 4), 926);
        assert_eq!(after_close(3, 0, 8), 0);
    }

    #[test]
    fn the_pause_leaves_room_for_the_close_counting_every_token_written() {
        let at = PauseAt::of(1024, 1030, 8);
        assert_eq!(
            at,
            PauseAt {
                thought: 1022,
                total: 1022
            }
        );
        // The block's opening tag is written but not thought: the total
        // pauses it first.
        assert!(!at.reached(true, 1019, 1021));
        assert!(at.reached(true, 1019, 1022));
        assert!(at.reached(true, 1022, 1022));
        // Only while thinking.
        assert!(!at.reached(false, 2000, 2000));
    }
}
