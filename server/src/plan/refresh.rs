//! A returning conversation's snapshot, brought up to date while the NPU is
//! idle.
//!
//! With the runtime's own template, a chat that continues the one the
//! runtime holds sends only its new message. One that comes back after
//! another chat ran is sent whole and starts from its snapshot, the
//! prefill of its last prompt; the reply the model then wrote is not in it
//! (the runtime saves a run's prefill, `RKLLM_ABI.md` §3.5), so the
//! returning turn prefills that reply again before its new message.
//!
//! So after a turn of chats that take turns, the runner keeps the
//! conversation and its reply as one transcript, which begins the
//! conversation's next prompt, and once nothing waits the engine asks for
//! it: the runtime prefills it from the snapshot just saved (the reply
//! alone) and saves that. The conversation's next return prefills only its
//! new message. A request that arrives meanwhile stops it (`rkllm_abort`,
//! which the runtime notices at the prefill's end); to bound that wait as a
//! chunk of a long prompt's is, a reply is brought up to date only when it
//! is at most `prefill_chunk_tokens` tokens' worth of text.

use std::collections::VecDeque;

use crate::model::BYTES_PER_TOKEN;
use crate::model::prompt::{Turn, transcript};

/// Conversations waiting to be brought up to date, at most.
const MAX_PENDING: usize = 4;

/// One conversation to bring up to date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The transcript of the conversation and its reply.
    pub text: String,
    /// Its system message's text (empty without one).
    pub system: String,
    /// How its own turn ran, which the runtime's template follows.
    pub voice: Voice,
}

/// What the runtime's template around a transcript depends on besides
/// its text: the role it was sent as, the thinking switch and the tools
/// handed to the runtime. An update made otherwise would not share its
/// snapshot's prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Voice {
    /// The role its turn was sent as.
    pub role: String,
    /// Its thinking switch.
    pub thinking: bool,
    /// The tools handed to the runtime when it ran.
    pub tools: Option<String>,
}

/// What the runner has to bring up to date, newest first, and the last
/// chat it answered.
#[derive(Debug, Default)]
pub struct Refreshes {
    pending: VecDeque<Pending>,
    /// The transcript of the last chat turn answered, with its reply.
    last: Option<String>,
}

/// Bytes of text an update may prefill: a chunk's tokens' worth.
pub fn reply_bound(chunk_tokens: u32) -> usize {
    usize::try_from(chunk_tokens)
        .unwrap_or(usize::MAX)
        .saturating_mul(BYTES_PER_TOKEN)
}

impl Refreshes {
    /// Whether a conversation waits to be brought up to date.
    pub fn any(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The newest conversation waiting, taken (put back with
    /// [`Refreshes::add`] when its update is stopped).
    pub fn take_newest(&mut self) -> Option<Pending> {
        self.pending.pop_front()
    }

    /// A chat's prompt (`text`, its whole transcript) is about to run: an
    /// update of its own earlier turns is of no use any more.
    pub fn running(&mut self, text: &str) {
        self.pending.retain(|p| !text.starts_with(&p.text));
    }

    /// After a chat turn answered with `reply`: whether it came back after
    /// another chat ran (it was `sent_whole` with earlier replies in it,
    /// and the last chat answered was another), and then what to bring up
    /// to date, when the reply is short enough for `chunk_tokens`.
    pub fn answered(
        &mut self,
        turns: &[Turn],
        reply: &str,
        sent_whole: bool,
        chunk_tokens: u32,
    ) -> Option<Pending> {
        let prompt = transcript(turns);
        // The transcript of the turns and the reply: the reply's line after
        // the prompt's.
        let line = transcript(&[Turn {
            role: "assistant".into(),
            text: reply.to_owned(),
        }]);
        let text = format!("{prompt}\n{line}");
        let returning = sent_whole
            && turns.iter().any(|t| t.role == "assistant")
            && self
                .last
                .as_ref()
                .is_some_and(|last| !prompt.starts_with(last.as_str()));
        self.last = Some(text.clone());
        let added = text.len() - prompt.len();
        (returning && added <= reply_bound(chunk_tokens)).then(|| Pending {
            system: turns
                .first()
                .filter(|t| t.role == "system")
                .map_or_else(String::new, |t| t.text.clone()),
            text,
            voice: Voice::default(),
        })
    }

    pub fn add(&mut self, pending: Pending) {
        self.pending.retain(|p| !pending.text.starts_with(&p.text));
        self.pending.push_front(pending);
        self.pending.truncate(MAX_PENDING);
    }
}

/// Whether `pending` is brought up to date now, or why not: the tools the
/// runtime holds now (`tools_now`) must be those its turn ran with (the
/// runtime's template around it depends on them), a snapshot of it would
/// be saved (`would_save`: none of exactly it is kept, there is room,
/// saves work), and the snapshot it starts from, covering `covered` bytes
/// of it, leaves no more than the reply to prefill (`chunk_tokens`' worth).
///
/// # Errors
/// Why it is left alone.
pub fn worth(
    pending: &Pending,
    tools_now: Option<&str>,
    would_save: bool,
    covered: usize,
    chunk_tokens: u32,
) -> Result<(), &'static str> {
    if pending.voice.tools.as_deref() != tools_now {
        return Err("another chat's tools are set now");
    }
    if !would_save {
        return Err("nothing to save");
    }
    if pending.text.len().saturating_sub(covered) > reply_bound(chunk_tokens) {
        return Err("too much of it is not in a snapshot");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(role: &str, text: &str) -> Turn {
        Turn {
            role: role.into(),
            text: text.into(),
        }
    }

    #[test]
    fn only_a_conversation_that_came_back_after_another_is_brought_up_to_date() {
        let mut refreshes = Refreshes::default();
        let a1 = [turn("system", "S"), turn("user", "a1")];
        // A first turn, and a chat alone, continuing: nothing to do.
        assert_eq!(refreshes.answered(&a1, "r1", true, 160), None);
        let a2 = [
            turn("system", "S"),
            turn("user", "a1"),
            turn("assistant", "r1"),
            turn("user", "a2"),
        ];
        assert_eq!(refreshes.answered(&a2, "r2", false, 160), None);
        let b1 = [turn("user", "b1")];
        assert_eq!(refreshes.answered(&b1, "q1", true, 160), None);
        // a comes back after b, sent whole: its transcript with the reply.
        let a3 = [
            turn("system", "S"),
            turn("user", "a1"),
            turn("assistant", "r1"),
            turn("user", "a2"),
            turn("assistant", "r2"),
            turn("user", "a3"),
        ];
        let pending = refreshes.answered(&a3, "r3", true, 160).unwrap();
        assert_eq!(
            pending.text,
            "system: S\nuser: a1\nassistant: r1\nuser: a2\nassistant: r2\nuser: a3\nassistant: r3"
        );
        assert_eq!(pending.system, "S");
        refreshes.add(pending.clone());
        // Its next turn makes the update useless.
        refreshes.running(&format!("{}\nuser: a4", pending.text));
        assert!(!refreshes.any());
        // A reply longer than a chunk's tokens is not brought up to date.
        let b2 = [
            turn("user", "b1"),
            turn("assistant", "q1"),
            turn("user", "b2"),
        ];
        assert_eq!(refreshes.answered(&b2, &"x".repeat(641), true, 160), None);
        let b3 = [
            turn("user", "b1"),
            turn("assistant", "q1"),
            turn("user", "b3"),
        ];
        refreshes.answered(&a3, "r3", true, 160);
        assert!(
            refreshes
                .answered(&b3, &"x".repeat(600), true, 160)
                .is_some()
        );
        // Nor any with chunks off.
        refreshes.answered(&a3, "r3", true, 160);
        assert_eq!(refreshes.answered(&b3, "q3", true, 0), None);
    }

    #[test]
    fn an_update_is_made_only_in_its_own_voice_with_little_left_to_prefill() {
        let pending = Pending {
            text: "x".repeat(1000),
            system: String::new(),
            voice: Voice {
                tools: Some("[t]".into()),
                ..Voice::default()
            },
        };
        assert_eq!(worth(&pending, Some("[t]"), true, 900, 160), Ok(()));
        assert!(
            worth(&pending, None, true, 900, 160).is_err(),
            "other tools"
        );
        assert!(
            worth(&pending, Some("[t]"), false, 900, 160).is_err(),
            "no save"
        );
        assert!(
            worth(&pending, Some("[t]"), true, 0, 160).is_err(),
            "too much left"
        );
        assert!(
            worth(&pending, Some("[t]"), true, 900, 0).is_err(),
            "chunks off"
        );
    }

    #[test]
    fn a_later_turn_of_a_conversation_replaces_its_earlier_one() {
        let mut refreshes = Refreshes::default();
        let pending = |text: &str| Pending {
            text: text.into(),
            system: String::new(),
            voice: Voice::default(),
        };
        refreshes.add(pending("user: a1\nassistant: r1"));
        refreshes.add(pending("user: b1\nassistant: q1"));
        refreshes.add(pending("user: a1\nassistant: r1\nuser: a2\nassistant: r2"));
        let texts: Vec<&str> = refreshes.pending.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "user: a1\nassistant: r1\nuser: a2\nassistant: r2",
                "user: b1\nassistant: q1"
            ]
        );
        for i in 0..6 {
            refreshes.add(pending(&format!("user: c{i}")));
        }
        assert_eq!(refreshes.pending.len(), MAX_PENDING);
    }
}
