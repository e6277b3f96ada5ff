//! A text request carried out: what the plan says to send (the new
//! message on the runtime's history, or the prompt whole from the best
//! snapshot, in chunks where it is long), the run or runs, and what the
//! runtime holds afterwards.

use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rkllm_sys::version::Abi;

use super::abi::{ImageRun, RunSettings};
use super::handle::{ActiveRun, CallbackMode};
use super::ops::Watch;
use super::{RkllmRunner, runtime_error};
use crate::backend::{BackendError, Generation, TokenSink, ValidRunRequest};
use crate::plan::history::RunCounts;
use crate::plan::start::{self, Send};
use crate::vocab::{FinishReason, Usage};

/// A prompt as one run takes it: its text and role, the history kept,
/// images, and where its prefill is saved.
pub(super) struct Once<'a> {
    pub prompt: &'a str,
    pub role: &'a str,
    pub keep_history: bool,
    pub images: Option<ImageRun<'a>>,
    pub save: Option<&'a CStr>,
}

impl<'a> Once<'a> {
    /// `prompt` spoken as `role`, nothing kept, saved nowhere.
    pub fn plain(prompt: &'a str, role: &'a str) -> Self {
        Self {
            prompt,
            role,
            keep_history: false,
            images: None,
            save: None,
        }
    }
}

impl RkllmRunner {
    /// A request with neither images, a constraint nor an embedding: its
    /// prompt sent as the plan says, then the history committed (a chat
    /// that may continue) or forgotten.
    pub(super) fn generate_text(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError> {
        let ask = request.ask();
        self.held.side_prefilled = 0;
        let mut send = start::send(&ask, &self.held.conversation, self.held.history.reuses());
        if matches!(send, Send::Continue(_)) {
            let now = self.handle.kv_size();
            if !self.held.history.still_held(now) {
                // The runtime dropped the history: the whole conversation goes.
                self.history_dropped();
                self.held.conversation.reset();
                send = start::send(&ask, &self.held.conversation, false);
            }
        }
        let (prompt, role) = match send {
            Send::Continue(turn) => (
                turn.text.as_str(),
                if turn.role == "tool" { "tool" } else { "user" },
            ),
            Send::Whole { .. } => (request.prompt.text.as_str(), request.prompt.role.as_str()),
        };
        let keep_history = !matches!(
            send,
            Send::Whole {
                keep_history: false
            }
        );
        let mut snapshot_to = None;
        if !matches!(send, Send::Continue(_)) {
            let cancel = sink.cancel_token().clone();
            snapshot_to = self.start_whole(request, prompt, &cancel);
        }
        self.held.dirty |= keep_history;
        let checked = keep_history && self.held.history.checks();
        let before = if checked { self.handle.kv_size() } else { None };
        let continued = matches!(send, Send::Continue(_));
        let chunks = start::chunk_size(&self.profile, &ask, send)
            .and_then(|size| self.chunks_for(request, prompt, size));
        if chunks.is_some() && !self.profile.features.snapshots.on {
            // A save after token input was not found to hold the whole
            // prompt: a chunked prompt saves none.
            if let Some(tmp) = snapshot_to.take() {
                let _ = std::fs::remove_file(tmp);
            }
        }
        let save = snapshot_to
            .as_deref()
            .and_then(|p| CString::new(p.to_string_lossy().into_owned()).ok());
        let result = match &chunks {
            Some(chunks) => self.run_chunked(request, sink, prompt, role, chunks, save.as_deref()),
            None => self.run_once(
                request,
                sink,
                Once {
                    keep_history,
                    save: save.as_deref(),
                    ..Once::plain(prompt, role)
                },
            ),
        };
        let mut result = result;
        self.account_reuse(&mut result, continued, before);
        if let Some(tmp) = snapshot_to {
            let ran = matches!(&result, Ok(g) if g.finish_reason != FinishReason::Abort)
                && !sink.cancel_token().is_cancelled();
            self.keep_snapshot(prompt, request.prompt.keeping(), &tmp, ran);
        }
        match (request.prompt.turns(), &result) {
            (Some(conversation), Ok(g))
                if keep_history && g.finish_reason != FinishReason::Abort && sink.is_open() =>
            {
                let answer =
                    crate::model::reasoning::answer_of(sink.produced(), self.profile.reasoning);
                self.held.conversation.commit(conversation, &answer);
                if checked && !self.check_history(before.unwrap_or(0), g) {
                    self.held.conversation.reset();
                }
                if request.prompt.whole_chat().is_none() {
                    let sent_whole = !matches!(send, Send::Continue(_));
                    self.chat_answered(request, &answer, sent_whole);
                }
            }
            _ => {
                self.held.conversation.reset();
                self.held.history.forget();
            }
        }
        result
    }

    /// Tells what a run's prompt started from: on the history the runtime
    /// held (`continued`, its `before` positions), the new message was
    /// prefilled; otherwise what a snapshot made on the way holds was
    /// prefilled by this request too, not reused.
    fn account_reuse(
        &mut self,
        result: &mut Result<Generation, BackendError>,
        continued: bool,
        before: Option<u32>,
    ) {
        let side = std::mem::take(&mut self.held.side_prefilled);
        let Ok(generation) = result.as_mut() else {
            return;
        };
        generation.prompt_reuse = generation.prompt_reuse.map(|r| {
            if continued {
                crate::backend::PromptReuse {
                    reused: before.unwrap_or(0),
                    ..r
                }
            } else {
                crate::backend::PromptReuse {
                    reused: r.reused.saturating_sub(side),
                    prefilled: r.prefilled.saturating_add(side),
                }
            }
        });
    }

    /// Before `prompt` is sent whole: the runtime's history cleared, the
    /// model's prompt cache loaded or released for it, and the snapshot it
    /// starts from held. Returns where its run saves its own snapshot.
    fn start_whole(
        &mut self,
        request: &ValidRunRequest,
        prompt: &str,
        cancel: &crate::vocab::CancelToken,
    ) -> Option<std::path::PathBuf> {
        if self.held.dirty {
            self.clear_history();
        }
        self.sync_prompt_cache(prompt, cancel);
        // A chat sent whole: the server's render, or the transcript.
        let system = match (request.prompt.whole_chat(), request.prompt.turns()) {
            (Some(system), _) => system,
            (None, Some(conversation)) => conversation
                .first()
                .filter(|t| t.role == "system")
                .map_or("", |t| t.text.as_str()),
            (None, None) => return None,
        };
        // A LoRA adapter changes the state a prompt leaves: such runs
        // neither use nor make snapshots.
        if request.lora.is_some() {
            return None;
        }
        self.restore_snapshot(
            &request.model,
            system,
            prompt,
            request.prompt.keeping(),
            cancel,
        )
    }

    /// After a kept-history run that started with `before` KV positions:
    /// whether the runtime still holds the history.
    fn check_history(&mut self, before: u32, generation: &Generation) -> bool {
        let usage = generation.usage.unwrap_or_default();
        let kept = self.held.history.after_run(RunCounts {
            before,
            after: self.handle.kv_size(),
            prefilled: usage.prompt_tokens,
            generated: usage.completion_tokens,
            context: u32::try_from(self.init.max_context_len).unwrap_or(0),
        });
        if !kept {
            self.history_dropped();
        }
        kept
    }

    /// Runs `once` as one run.
    pub(super) fn run_once(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        once: Once<'_>,
    ) -> Result<Generation, BackendError> {
        let prompt = CString::new(once.prompt).map_err(|_| {
            runtime_error(
                None,
                "the prompt contains a NUL character, which the runtime cannot take",
            )
        })?;
        let role = CString::new(once.role).map_err(|_| runtime_error(None, "bad role"))?;
        let lora = self.lora_name(request).map(ToOwned::to_owned);
        let settings = RunSettings {
            prompt: &prompt,
            role: &role,
            enable_thinking: request.prompt.thinking,
            sampling: self.sampling(request),
            max_new_tokens: i32::try_from(request.max_tokens).unwrap_or(i32::MAX),
            keep_history: once.keep_history,
            images: once.images,
            hidden_layer: request.embed.is_some(),
            // Log probabilities are read from the logits rows.
            logits: request.sampling.logprobs.is_some() && request.embed.is_none(),
            tokens: None,
            save_cache: once.save,
            lora: lora.as_deref(),
        };
        self.execute(request, sink, &settings)
    }

    /// Runs `settings` once, reporting to `sink`, and reads how it ended;
    /// a run paused at the thinking budget goes on with the block closed.
    pub(super) fn execute(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        settings: &RunSettings<'_>,
    ) -> Result<Generation, BackendError> {
        let logprobs = if settings.logits {
            let top = usize::from(request.sampling.logprobs.unwrap_or(0));
            Some((self.logprob_vocabulary()?, top))
        } else {
            None
        };
        let run_id = self.next_run.fetch_add(1, Ordering::Relaxed);
        let abi = self.handle.runtime.abi();
        let cap = (abi == Abi::V1_2).then(|| u32::try_from(settings.max_new_tokens).unwrap_or(0));
        let abort = Arc::clone(&self.handle.abort);
        abort.set_running(run_id);
        let hook_abort = Arc::clone(&abort);
        sink.cancel_token()
            .on_cancel(move || hook_abort.abort(run_id));
        if !sink.is_open() {
            abort.set_running(0);
            return Ok(Generation::ended(FinishReason::Abort));
        }
        let budget = match request.sampling.thinking_budget {
            Some(b) if settings.tokens.is_none() => Some(self.budget_pause_at(request, b.tokens)?),
            _ => None,
        };
        if budget.is_some() {
            sink.watch_thinking(self.profile.reasoning);
        }
        let mode = if request.embed.is_some() {
            CallbackMode::Hidden
        } else {
            CallbackMode::Text { budget, logprobs }
        };
        let (rc, run) = self
            .handle
            .run(settings, sink, Watch { run_id, cap, mode })?;
        if sink.cancel_token().is_cancelled() {
            return Ok(Generation::ended(FinishReason::Abort));
        }
        if sink.hit_stop() {
            // The server stopped the run at a stop string: a normal end,
            // whatever the runtime reported after the abort.
            return Ok(Generation::ended(FinishReason::Stop));
        }
        if run.capped {
            return Ok(Generation::ended(FinishReason::Length));
        }
        if run.budget_paused {
            return self.after_budget(request, sink, settings, &run);
        }
        if rc != 0 || run.failed {
            return Err(runtime_error(
                Some(rc),
                format!("the runtime reported an error (rkllm_run returned {rc})"),
            ));
        }
        generation_of(request, &run, rc)
    }
}

/// What a run that ended by itself generated (or embedded), from the
/// runtime's counts where it reported them.
///
/// # Errors
/// An embedding run without the hidden layer it asked for.
fn generation_of(
    request: &ValidRunRequest,
    run: &ActiveRun,
    rc: i32,
) -> Result<Generation, BackendError> {
    let perf = run.finished;
    if let Some(spec) = request.embed {
        let Some((rows, width)) = &run.hidden else {
            return Err(runtime_error(
                Some(rc),
                "the runtime returned no hidden layer for the embedding",
            ));
        };
        return Ok(Generation {
            finish_reason: FinishReason::Stop,
            usage: Some(Usage {
                prompt_tokens: perf.map_or(u32::try_from(rows.len() / width).unwrap_or(0), |p| {
                    u32::try_from(p.prefill_tokens).unwrap_or(0)
                }),
                completion_tokens: 0,
                reasoning_tokens: 0,
            }),
            runtime_timings: perf.map(|p| (f64::from(p.prefill_time_ms), 0.0)),
            memory_mb: perf.map(|p| f64::from(p.memory_usage_mb)),
            embedding: Some(spec.pool(rows, *width)),
            ..Generation::ended(FinishReason::Stop)
        });
    }
    let generated = perf.map_or(run.tokens, |p| {
        u32::try_from(p.generate_tokens).unwrap_or(run.tokens)
    });
    let finish_reason = if generated >= request.max_tokens {
        FinishReason::Length
    } else {
        FinishReason::Stop
    };
    Ok(Generation {
        usage: perf.map(|p| Usage {
            prompt_tokens: whole_prompt_tokens(request)
                .unwrap_or_else(|| u32::try_from(p.prefill_tokens).unwrap_or(0)),
            completion_tokens: generated,
            reasoning_tokens: 0,
        }),
        // What the runtime prefilled is its own count; the rest of the
        // prompt's tokens it started from.
        prompt_reuse: perf.map(|p| {
            let prefilled = u32::try_from(p.prefill_tokens).unwrap_or(0);
            crate::backend::PromptReuse {
                reused: whole_prompt_tokens(request).map_or(0, |w| w.saturating_sub(prefilled)),
                prefilled,
            }
        }),
        runtime_timings: perf
            .map(|p| (f64::from(p.prefill_time_ms), f64::from(p.generate_time_ms))),
        memory_mb: perf.map(|p| f64::from(p.memory_usage_mb)),
        ..Generation::ended(finish_reason)
    })
}

/// The prompt's tokens by the model's tokenizer, when the runtime is given
/// its whole text and nothing else (no turns of its own template, no
/// images): what the request's usage reports, however much of it the
/// runtime prefilled (a snapshot may have held the rest, a pause may have
/// left no count).
pub(super) fn whole_prompt_tokens(request: &ValidRunRequest) -> Option<u32> {
    request
        .prompt
        .tokens
        .filter(|_| request.prompt.turns().is_none() && request.images.is_empty())
}
