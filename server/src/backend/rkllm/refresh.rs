//! A returning conversation's snapshot brought up to date while the NPU is
//! idle, as [`crate::plan::refresh`] decides: after a turn of chats that
//! take turns the runner keeps the conversation and its reply as one
//! transcript, and once nothing waits the engine asks for it; the runtime
//! prefills it from the snapshot just saved (the reply alone) and saves
//! that. A request that arrives meanwhile stops it.

use super::RkllmRunner;
use super::prompt_cache::NotBuilt;
use super::snapshots::Snapshots;
use crate::backend::{Generation, ValidRunRequest};
use crate::plan::refresh::{Voice, worth};
use crate::vocab::{CancelToken, FinishReason, Usage};

impl RkllmRunner {
    /// After a chat turn in the runtime's own template that went well:
    /// remembers what to bring up to date.
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
                .answered(turns, reply, sent_whole, self.profile.chunk_tokens)
        {
            pending.voice = Voice {
                role: request.prompt.role.as_str().to_owned(),
                thinking: request.prompt.thinking,
                tools: self.held.tools.clone(),
            };
            self.refreshes.add(pending);
        }
    }

    /// The engine's idle work: brings the newest conversation waiting up
    /// to date, unless `cancel` stops it first. The generation has usage
    /// (empty) when the NPU was put to work, none when nothing was to be
    /// done (see [`crate::engine`]'s idle work, which counts them).
    pub(super) fn refresh_snapshot(&mut self, model: &str, cancel: &CancelToken) -> Generation {
        let Some(pending) = self.refreshes.take_newest() else {
            return self.refreshed(FinishReason::Stop, false);
        };
        let Some(snapshots) = self.snapshots.as_mut() else {
            return self.refreshed(FinishReason::Stop, false);
        };
        // Nothing to save leaves the runtime's history as it is (asked only
        // in the turn's own voice: asking marks a kept one used).
        let would_save =
            pending.voice.tools == self.held.tools && snapshots.would_save(&pending.text);
        let covered = snapshots
            .best(&pending.text)
            .map_or(0, |(_, shared)| shared);
        let worth = worth(
            &pending,
            self.held.tools.as_deref(),
            would_save,
            covered,
            self.profile.chunk_tokens,
        );
        if let Err(why) = worth {
            tracing::debug!(model, why, "snapshot not brought up to date");
            return self.refreshed(FinishReason::Stop, false);
        }
        let started = std::time::Instant::now();
        if self.held.dirty {
            self.clear_history();
        }
        self.sync_prompt_cache(&pending.text, cancel);
        // Not a conversation sent whole: its restore counts no hit or miss.
        let tally = self.snapshots.as_mut().map(Snapshots::take_tally);
        let save_to = self.restore_snapshot(
            model,
            &pending.system,
            &pending.text,
            crate::model::Keeping::Whole,
            cancel,
        );
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
        self.keep_snapshot(&pending.text, crate::model::Keeping::Whole, &tmp, ran);
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
