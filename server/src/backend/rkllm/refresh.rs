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

use super::RkllmRunner;
use super::prompt_cache::NotBuilt;
use super::snapshots::Snapshots;
use crate::backend::{Generation, ValidRunRequest};
use crate::model::BYTES_PER_TOKEN;
use crate::model::prompt::{Turn, transcript};
use crate::vocab::{CancelToken, FinishReason, Usage};

/// Conversations waiting to be brought up to date, at most.
const MAX_PENDING: usize = 4;

/// One conversation to bring up to date.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    /// The transcript of the conversation and its reply.
    text: String,
    /// Its system message's text (empty without one).
    system: String,
    /// How its own turn ran, which the runtime's template follows.
    voice: Voice,
}

/// What the runtime's template around a transcript depends on besides
/// its text: the role it was sent as, the thinking switch and the tools
/// handed to the runtime. An update made otherwise would not share its
/// snapshot's prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Voice {
    role: String,
    thinking: bool,
    tools: Option<String>,
}

/// What the runner has to bring up to date, newest first, and the last
/// chat it answered.
#[derive(Debug, Default)]
pub(super) struct Refreshes {
    pending: VecDeque<Pending>,
    /// The transcript of the last chat turn answered, with its reply.
    last: Option<String>,
}

/// Bytes of text an update may prefill: a chunk's tokens' worth.
fn reply_bound(chunk_tokens: u32) -> usize {
    usize::try_from(chunk_tokens)
        .unwrap_or(usize::MAX)
        .saturating_mul(BYTES_PER_TOKEN)
}

impl Refreshes {
    /// Whether a conversation waits to be brought up to date.
    pub fn any(&self) -> bool {
        !self.pending.is_empty()
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
    fn answered(
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

    fn add(&mut self, pending: Pending) {
        self.pending.retain(|p| !pending.text.starts_with(&p.text));
        self.pending.push_front(pending);
        self.pending.truncate(MAX_PENDING);
    }
}

impl RkllmRunner {
    /// After a chat turn in the runtime's own template that went well:
    /// remembers what to bring up to date (see the module's text).
    pub(super) fn chat_answered(
        &mut self,
        request: &ValidRunRequest,
        reply: &str,
        sent_whole: bool,
    ) {
        let Some(turns) = request.prompt.turns() else {
            return;
        };
        if self.snapshots.is_none() || request.lora.is_some() {
            return;
        }
        if let Some(mut pending) =
            self.refreshes
                .answered(turns, reply, sent_whole, self.chunk_tokens)
        {
            pending.voice = Voice {
                role: request.prompt.role.as_str().to_owned(),
                thinking: request.prompt.thinking,
                tools: self.tools_set.clone(),
            };
            self.refreshes.add(pending);
        }
    }

    /// The engine's idle work: brings the newest conversation waiting up
    /// to date, unless `cancel` stops it first. The generation has usage
    /// (empty) when the NPU was put to work, none when nothing was to be
    /// done (see [`crate::engine`]'s idle work, which counts them).
    pub(super) fn refresh_snapshot(&mut self, model: &str, cancel: &CancelToken) -> Generation {
        let Some(pending) = self.refreshes.pending.pop_front() else {
            return self.refreshed(FinishReason::Stop, false);
        };
        if pending.voice.tools != self.tools_set {
            // Another chat's tools are set now: the runtime's template
            // differs from the one the snapshot was made with.
            return self.refreshed(FinishReason::Stop, false);
        }
        let Some(snapshots) = self.snapshots.as_mut() else {
            return self.refreshed(FinishReason::Stop, false);
        };
        // Nothing to save (one of exactly it is kept, no room, saves fail):
        // the runtime's history is left as it is.
        if !snapshots.would_save(&pending.text) {
            return self.refreshed(FinishReason::Stop, false);
        }
        // The snapshot it starts from must leave no more than the reply.
        let covered = snapshots
            .best(&pending.text)
            .map_or(0, |(_, shared)| shared);
        if pending.text.len() - covered > reply_bound(self.chunk_tokens) {
            tracing::debug!(
                model,
                bytes = pending.text.len() - covered,
                "snapshot not brought up to date: too much of it is not in a snapshot"
            );
            return self.refreshed(FinishReason::Stop, false);
        }
        let started = std::time::Instant::now();
        if self.history_dirty {
            self.clear_history();
        }
        self.sync_prompt_cache(&pending.text, cancel);
        // Not a conversation sent whole: its restore counts no hit or miss.
        let tally = self.snapshots.as_mut().map(Snapshots::take_tally);
        let save_to = self.restore_snapshot(model, &pending.system, &pending.text, cancel);
        if let (Some(snapshots), Some(tally)) = (self.snapshots.as_mut(), tally) {
            snapshots.put_tally(tally);
        }
        let Some(tmp) = save_to else {
            if cancel.is_cancelled() {
                self.refreshes.add(pending);
                return self.refreshed(FinishReason::Abort, true);
            }
            return self.refreshed(FinishReason::Stop, false);
        };
        let voice = (pending.voice.role.as_str(), pending.voice.thinking);
        let built = self.prefill_and_save_as(&pending.text, voice, model, &tmp, cancel);
        let ran = built.is_ok();
        let finish = match built {
            Ok(()) => FinishReason::Stop,
            Err(NotBuilt::Aborted) => {
                // Tried again the next time nothing waits, unless its
                // conversation comes back first.
                self.refreshes.add(pending.clone());
                FinishReason::Abort
            }
            Err(NotBuilt::Failed(why)) => {
                tracing::debug!(model, cause = %why, "snapshot not brought up to date");
                FinishReason::Stop
            }
        };
        self.keep_snapshot(&pending.text, &tmp, ran);
        tracing::debug!(
            model,
            yielded = finish == FinishReason::Abort,
            ms = started.elapsed().as_millis() as u64,
            bytes = pending.text.len() - covered,
            "conversation snapshot brought up to date"
        );
        self.refreshed(finish, ran || finish == FinishReason::Abort)
    }

    /// The idle work's report: how it ended, whether it was an update made
    /// or stopped (`worked`), and the snapshots now.
    fn refreshed(&mut self, finish: FinishReason, worked: bool) -> Generation {
        Generation {
            usage: worked.then(Usage::default),
            snapshots: self.snapshots.as_mut().map(Snapshots::report),
            ..Generation::ended(finish)
        }
    }
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
