//! A long prompt prefilled in chunks, as [`crate::plan::chunks`] cuts it:
//! every run but the last only prefills (its first callback, the
//! prefill's rows, pauses it with the KV cache kept); the last feeds the
//! final chunk and generates. Between two runs the request's cancellation
//! is looked at, so a client that leaves is noticed within one chunk and
//! the runtime is never killed for it.

use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::abi::RunSettings;
use super::handle::CallbackMode;
use super::ops::Watch;
use super::text::Once;
use super::{RkllmRunner, runtime_error};
use crate::backend::{BackendError, Generation, TokenSink, ValidRunRequest};
use crate::plan::chunks::Chunks;
use crate::plan::snapshots::common_prefix;
use crate::vocab::{FinishReason, Usage};

impl RkllmRunner {
    /// How `prompt` is cut into chunks of `size` tokens; `None`: one run
    /// takes it (the tokenizer cannot be had, or says it is short, or its
    /// pieces are not the prompt's text).
    pub(super) fn chunks_for(
        &mut self,
        request: &ValidRunRequest,
        prompt: &str,
        size: usize,
    ) -> Option<Chunks> {
        let encoder = match self.encoder()? {
            Ok(encoder) => encoder,
            Err(e) => {
                tracing::debug!(model = %request.model, "prefill in one run: the tokenizer: {e}");
                return None;
            }
        };
        let ids = encoder.encode(prompt).ok()?;
        if ids.len() <= size {
            return None;
        }
        let pieces = encoder.pieces(&ids).ok()?;
        let chunks = Chunks::cut(prompt, &ids, &pieces, size, self.reused_bytes(prompt));
        if chunks.is_none() {
            tracing::debug!(
                model = %request.model,
                "prefill in one run: the tokenizer's pieces are not the prompt's text"
            );
        }
        chunks
    }

    /// Bytes at the start of `prompt` a loaded prompt cache (the system
    /// prompt's, or a snapshot) covers.
    fn reused_bytes(&self, prompt: &str) -> usize {
        let system = self
            .prompt_cache
            .as_ref()
            .and_then(super::prompt_cache::PromptCache::loaded_prompt)
            .map_or(0, |cached| common_prefix(cached, prompt));
        let snapshot = self
            .snapshots
            .as_ref()
            .map_or(0, |s| s.loaded_shared(prompt));
        system.max(snapshot)
    }

    /// Prefills all chunks but the last, one run each, then runs the last
    /// and generates (reading its rows when the request asks for log
    /// probabilities); that run saves the whole prefill at `save` (a
    /// snapshot).
    pub(super) fn run_chunked(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        prompt: &str,
        role: &str,
        chunks: &Chunks,
        save: Option<&CStr>,
    ) -> Result<Generation, BackendError> {
        let (text, role_c) = head_of(prompt, chunks, role)?;
        let last = match self.prefill_chunks(request, sink, &text, &role_c, chunks)? {
            Prefilled::Left => return Ok(Generation::ended(FinishReason::Abort)),
            Prefilled::Refused => {
                let once = Once {
                    save,
                    ..Once::plain(prompt, role)
                };
                return self.run_once(request, sink, once);
            }
            Prefilled::Last(last) => last,
        };
        let lora = self.lora_name(request).map(ToOwned::to_owned);
        let settings = RunSettings {
            prompt: &text,
            role: &role_c,
            enable_thinking: request.prompt.thinking,
            sampling: self.sampling(request),
            max_new_tokens: i32::try_from(request.max_tokens).unwrap_or(i32::MAX),
            keep_history: false,
            images: None,
            hidden_layer: false,
            // Log probabilities are read from the last chunk's rows on.
            logits: request.sampling.logprobs.is_some(),
            tokens: Some(last),
            lora: lora.as_deref(),
            save_cache: save,
        };
        let mut generation = self.execute(request, sink, &settings)?;
        // The runtime counted the last chunk only: the prompt's tokens are
        // the tokenizer's, and the times the engine's own.
        generation.usage = generation.usage.map(|u| Usage {
            prompt_tokens: chunks.total,
            ..u
        });
        generation.prompt_reuse = Some(crate::backend::PromptReuse {
            reused: chunks.covered,
            prefilled: chunks.total.saturating_sub(chunks.covered),
        });
        generation.runtime_timings = None;
        Ok(generation)
    }

    /// Prefills every chunk but the last, a run each, its first callback
    /// pausing it (nothing is reported, no rows are kept: one callback
    /// holds at most a chunk's rows). Between two runs the request's
    /// cancellation is looked at. Returns the last chunk's ids, for the
    /// run that takes them.
    ///
    /// # Errors
    /// A run that did not pause after its prefill (after the first).
    pub(super) fn prefill_chunks<'c>(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        text: &CStr,
        role: &CStr,
        chunks: &'c Chunks,
    ) -> Result<Prefilled<'c>, BackendError> {
        let Some((last, middle)) = chunks.rest.split_last() else {
            return Err(runtime_error(None, "a chunked prompt without chunks"));
        };
        // What a pause leaves in the runtime is cleared before the next
        // request whatever happens here.
        self.held.dirty = true;
        let sampling = self.sampling(request);
        let lora = self.lora_name(request).map(ToOwned::to_owned);
        let run_id = self.next_run.fetch_add(1, Ordering::Relaxed);
        let abort = Arc::clone(&self.handle.abort);
        let hook_abort = Arc::clone(&abort);
        sink.cancel_token()
            .on_cancel(move || hook_abort.abort(run_id));
        let started = std::time::Instant::now();
        let mut fed: Option<&[i32]> = None;
        let mut runs = 0u32;
        let mut done = 0u32;
        sink.prefill_progress(done, chunks.total);
        for next in std::iter::once(None).chain(middle.iter().map(|c| Some(c.as_slice()))) {
            if let Some(ids) = next {
                fed = Some(ids);
            }
            abort.set_running(run_id);
            if !sink.is_open() {
                abort.set_running(0);
                self.clear_history();
                return Ok(Prefilled::Left);
            }
            let settings = RunSettings {
                prompt: text,
                role,
                enable_thinking: request.prompt.thinking,
                sampling,
                // It only prefills: it pauses before its one token.
                max_new_tokens: 1,
                keep_history: false,
                images: None,
                hidden_layer: false,
                logits: true,
                tokens: fed,
                lora: lora.as_deref(),
                save_cache: None,
            };
            let watch = Watch {
                run_id,
                cap: None,
                mode: CallbackMode::PrefillOnly,
            };
            let (rc, run) = self.handle.run(&settings, sink, watch)?;
            runs += 1;
            if !run.prefill_paused {
                if !sink.is_open() {
                    self.clear_history();
                    return Ok(Prefilled::Left);
                }
                if runs == 1 {
                    // Refused before it prefilled anything (a runtime
                    // without logits for this model): one run from now on.
                    tracing::warn!(
                        model = %request.model,
                        code = rc,
                        "the runtime refused a prefill-only run (logits mode); this model's long prompts are prefilled in one run until it loads again"
                    );
                    self.profile.chunk_tokens = 0;
                    self.clear_history();
                    return Ok(Prefilled::Refused);
                }
                return Err(runtime_error(
                    Some(rc),
                    format!(
                        "the runtime did not pause after prefilling part {runs} of the prompt (rkllm_run returned {rc}); set prefill_chunk_tokens = 0 for this model to prefill in one run"
                    ),
                ));
            }
            let took = fed.map_or(chunks.first_tokens, |ids| {
                u32::try_from(ids.len()).unwrap_or(u32::MAX)
            });
            done = done.saturating_add(took);
            sink.prefill_progress(done, chunks.total);
        }
        tracing::debug!(
            model = %request.model,
            runs,
            tokens = chunks.total,
            ms = started.elapsed().as_millis() as u64,
            "prompt prefilled in chunks; the last one goes on"
        );
        Ok(Prefilled::Last(last))
    }
}

/// How the chunks before the last went.
pub(super) enum Prefilled<'c> {
    /// All prefilled: the last chunk's ids are left to run.
    Last(&'c [i32]),
    /// The client left (the runtime's history is cleared).
    Left,
    /// The runtime refused the first chunk's run: the prompt is to go in
    /// one run (chunks are off for the model from now on).
    Refused,
}

/// The first chunk's text and the role, as the runtime takes them.
///
/// # Errors
/// A NUL in either.
pub(super) fn head_of(
    prompt: &str,
    chunks: &Chunks,
    role: &str,
) -> Result<(CString, CString), BackendError> {
    let text = CString::new(&prompt[..chunks.first]).map_err(|_| {
        runtime_error(
            None,
            "the prompt contains a NUL character, which the runtime cannot take",
        )
    })?;
    let role = CString::new(role).map_err(|_| runtime_error(None, "bad role"))?;
    Ok((text, role))
}
