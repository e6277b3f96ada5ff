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
/// whose probes let it be chunked. Requests that read rows after the
/// prompt or pause for a thinking budget run as they do without chunks.
/// `None`: one run (a prompt of at most `size` bytes never needs the
/// tokenizer: bytes bound tokens).
pub fn chunk_size(profile: &Profile, ask: &Ask<'_>, send: Send<'_>) -> Option<usize> {
    let size = usize::try_from(profile.chunk_tokens).unwrap_or(usize::MAX);
    let whole = matches!(
        send,
        Send::Whole {
            keep_history: false
        }
    );
    let simple = !ask.special && !ask.rows && !ask.budget;
    (size > 0
        && profile.server_template
        && profile.tokenizer
        && profile.features.chunked_prefill.on
        && whole
        && simple
        && ask.text.len() > size)
        .then_some(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::profile::{Feature, Features};

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
        for odd in [
            Ask {
                rows: true,
                ..ask("a long prompt", None)
            },
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
