//! How a request's prompt reaches the runtime: the new message alone on
//! top of the history the runtime holds, or the prompt whole; and whether
//! a prompt sent whole is prefilled in chunks.

use super::conversation::{ConversationState, Plan};
use super::profile::Profile;
use crate::model::prompt::Turn;

/// What the planner reads of a request.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The prompt's text.
    pub text: &'a str,
    /// A chat in the runtime's template: its turns (the runtime's history
    /// may hold all but the last).
    pub turns: Option<&'a [Turn]>,
    /// The request reads logits rows (log probabilities, a judgement).
    pub rows: bool,
    /// It carries a thinking budget.
    pub budget: bool,
    /// It has images, an embedding, or a constraint: runs of their own.
    pub special: bool,
}

/// What to send for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Send<'a> {
    /// The runtime holds everything but this message: send it alone, and
    /// keep the history.
    Continue(&'a Turn),
    /// Send the prompt whole; keep the history it leaves (a chat whose
    /// next turn may continue it) or not.
    Whole {
        /// Run with `keep_history`.
        keep_history: bool,
    },
}

/// What to send for `ask` while the runtime's history holds `held` and is
/// trusted to keep it (`reuses`). A budgeted run pauses, which the runtime
/// documents for single-turn runs: its chat is sent whole, keeping
/// nothing.
pub fn send<'a>(ask: &Ask<'a>, held: &ConversationState, reuses: bool) -> Send<'a> {
    match ask.turns {
        Some(turns) if reuses && !ask.budget => match held.plan(turns) {
            Plan::Continue(turn) => Send::Continue(turn),
            Plan::Restart => Send::Whole { keep_history: true },
        },
        _ => Send::Whole {
            keep_history: false,
        },
    }
}

/// The chunk size, in tokens, a prompt sent as `send` is cut with, when it
/// is: a long prompt the server rendered (the runtime adds nothing around
/// it), sent whole without a history to keep, on a model with a tokenizer
/// whose probes let it be chunked. A request that reads rows (log
/// probabilities, a judgement) is chunked too: each callback then hands
/// over at most a chunk's rows, not the whole prompt's. A thinking budget
/// pauses the run that generates, which cannot be one that goes on from
/// chunks: such a request runs in one. `None`: one run (a prompt of at
/// most `size` bytes never needs the tokenizer: bytes bound tokens).
pub fn chunk_size(profile: &Profile, ask: &Ask<'_>, send: Send<'_>) -> Option<usize> {
    let whole = matches!(
        send,
        Send::Whole {
            keep_history: false
        }
    );
    (whole && !ask.special && !ask.budget)
        .then(|| chunkable(profile, ask.text))
        .flatten()
}

/// The chunk size `text` is prefilled with on `profile`'s model, when it
/// is long and the model's prompts may be chunked at all (the server's
/// template, a tokenizer, `prefill_chunk_tokens`, and the probes chunks
/// rest on): also the prompt of a constrained answer, before its steered
/// runs.
pub fn chunkable(profile: &Profile, text: &str) -> Option<usize> {
    let size = usize::try_from(profile.chunk_tokens).unwrap_or(usize::MAX);
    (size > 0
        && profile.server_template
        && profile.tokenizer
        && profile.features.chunked_prefill.on
        && text.len() > size)
        .then_some(size)
}

/// The most logits rows a request may have handed over at once when its
/// prompt cannot be cut into chunks, on a runtime that hands a prompt's
/// rows in its first callback: about 233 MB of rows for a vocabulary of
/// 151,936 (Qwen's).
pub const MAX_ROWS_AT_ONCE: u32 = 384;

/// Whether a request that reads rows, of a prompt of `tokens`, keeps the
/// rows it is handed at once within [`MAX_ROWS_AT_ONCE`]: always on a
/// runtime that hands one row a callback, or where the prompt is cut into
/// chunks; otherwise only a short prompt.
///
/// # Errors
/// The rows it would be handed, when over the bound.
pub fn rows_fit(profile: &Profile, text: &str, tokens: Option<u32>) -> Result<(), u32> {
    if profile.features.rows_at_once.is_none() || chunkable(profile, text).is_some() {
        return Ok(());
    }
    let rows = tokens.unwrap_or_else(|| {
        u32::try_from(text.len().div_ceil(crate::model::BYTES_PER_TOKEN)).unwrap_or(u32::MAX)
    });
    if rows > MAX_ROWS_AT_ONCE {
        Err(rows)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::profile::{Feature, Features};

    #[test]
    fn rows_handed_at_once_are_bounded_where_a_prompt_cannot_be_chunked() {
        let long = "x".repeat(4 * 4096);
        let at_once = Profile {
            features: Features {
                rows_at_once: Some(20),
                ..Features::all_on("test")
            },
            ..profile()
        };
        // Chunked: bounded by the chunk.
        assert_eq!(rows_fit(&at_once, &long, Some(4096)), Ok(()));
        // Not chunkable (the runtime's template): bounded or refused.
        let builtin = Profile {
            server_template: false,
            ..at_once.clone()
        };
        assert_eq!(rows_fit(&builtin, &long, Some(4096)), Err(4096));
        assert_eq!(rows_fit(&builtin, "short", Some(3)), Ok(()));
        assert_eq!(rows_fit(&builtin, &long, None), Err(4096));
        // One row a callback: nothing to bound.
        let one = Profile {
            server_template: false,
            ..profile()
        };
        assert_eq!(rows_fit(&one, &long, Some(4096)), Ok(()));
    }

    fn turn(role: &str, text: &str) -> Turn {
        Turn {
            role: role.into(),
            text: text.into(),
        }
    }

    fn profile() -> Profile {
        Profile {
            reasoning: crate::model::ReasoningMode::Off,
            server_template: true,
            renders_template: true,
            tokenizer: true,
            chunk_tokens: 4,
            features: Features::all_on("test"),
        }
    }

    fn ask<'a>(text: &'a str, turns: Option<&'a [Turn]>) -> Ask<'a> {
        Ask {
            text,
            turns,
            rows: false,
            budget: false,
            special: false,
        }
    }

    #[test]
    fn a_chat_that_extends_the_held_one_sends_its_new_message_alone() {
        let mut held = ConversationState::default();
        let first = [turn("user", "hi")];
        assert_eq!(
            send(&ask("hi", Some(&first)), &held, true),
            Send::Whole { keep_history: true }
        );
        held.commit(&first, "hello");
        let second = [
            turn("user", "hi"),
            turn("assistant", "hello"),
            turn("user", "more"),
        ];
        assert_eq!(
            send(&ask("", Some(&second)), &held, true),
            Send::Continue(&second[2])
        );
        // A runtime not trusted to keep it, or a budget: whole, keeping nothing.
        assert_eq!(
            send(&ask("", Some(&second)), &held, false),
            Send::Whole {
                keep_history: false
            }
        );
        let budgeted = Ask {
            budget: true,
            ..ask("", Some(&second))
        };
        assert_eq!(
            send(&budgeted, &held, true),
            Send::Whole {
                keep_history: false
            }
        );
        // A prompt without turns: whole.
        assert_eq!(
            send(&ask("x", None), &held, true),
            Send::Whole {
                keep_history: false
            }
        );
    }

    #[test]
    fn only_a_long_simple_prompt_sent_whole_is_chunked_where_the_probes_allow() {
        let p = profile();
        let whole = Send::Whole {
            keep_history: false,
        };
        assert_eq!(chunk_size(&p, &ask("a long prompt", None), whole), Some(4));
        assert_eq!(chunk_size(&p, &ask("abc", None), whole), None, "short");
        let kept = Send::Whole { keep_history: true };
        assert_eq!(chunk_size(&p, &ask("a long prompt", None), kept), None);
        // One that reads rows is chunked: each callback then hands over a
        // chunk's rows at most.
        let rows = Ask {
            rows: true,
            ..ask("a long prompt", None)
        };
        assert_eq!(chunk_size(&p, &rows, whole), Some(4));
        for odd in [
            Ask {
                budget: true,
                ..ask("a long prompt", None)
            },
            Ask {
                special: true,
                ..ask("a long prompt", None)
            },
        ] {
            assert_eq!(chunk_size(&p, &odd, whole), None);
        }
        let off = Profile {
            features: Features {
                chunked_prefill: Feature::off("pause_keeps_kv failed"),
                ..Features::all_on("test")
            },
            ..profile()
        };
        assert_eq!(chunk_size(&off, &ask("a long prompt", None), whole), None);
        for p in [
            Profile {
                chunk_tokens: 0,
                ..profile()
            },
            Profile {
                server_template: false,
                ..profile()
            },
            Profile {
                tokenizer: false,
                ..profile()
            },
        ] {
            assert_eq!(chunk_size(&p, &ask("a long prompt", None), whole), None);
        }
    }
}
