//! A constrained answer on the NPU: the runs of one generation in logits
//! mode, each row answered by [`Steering`] from inside the callback.
//!
//! The first run prefills the whole prompt (no chat history is kept: the
//! pauses follow the runtime's single-turn mode, `keep_history = 0`); each
//! later run feeds, as token input, the tokens the runner chose when it
//! paused the one before. When the answer is over the runtime may still be
//! paused in the middle of it, which the next run would continue
//! (RKLLM_ABI.md §3.3): clearing its KV cache ends that generation.
//!
//! The model's vocabulary is loaded once per runner and kept; the width of
//! the runtime's logits rows is checked against it on the first row, and a
//! mismatch fails every constrained request of the model with a message
//! naming its `tokenizer` setting (free text is not affected).

use std::ffi::{CStr, CString};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::abi::{ImageMarkers, ImageRun, RunSettings, SamplingValues};
use super::chunked::Prefilled;
use super::handle::{ActiveRun, CallbackMode};
use super::ops::Watch;
use super::{RkllmRunner, runtime_error};
use crate::backend::{BackendError, Constrained, Generation, TokenSink, ValidRunRequest};
use crate::model::constraint::SamplingParams;
use crate::model::tokenizer::{Encoder, TokenizerSource, Vocabulary};
use crate::plan::chunks::Chunks;
use crate::plan::steer::{Ending, Outcome, SteerSettings, Steering, check_width};
use crate::vocab::FinishReason;

/// What a runner keeps of its model's tokenizer: for constrained answers,
/// log probabilities, chunks and a budget's close.
#[derive(Debug, Default)]
pub(super) struct Tokens {
    /// The model's vocabulary, loaded with the first request that reads
    /// rows.
    vocabulary: Option<(TokenizerSource, Arc<Vocabulary>)>,
    /// Its encoder, loaded with the first request that needs ids.
    pub encoder: Option<Arc<Encoder>>,
    /// The logits rows' width found on the first row, when it did not fit
    /// the vocabulary.
    mismatch: Option<usize>,
    /// Runtime picks found implausible so far.
    implausible: u32,
}

/// The tokenizer, as the model's settings name it.
fn describe(source: &TokenizerSource) -> String {
    match source {
        TokenizerSource::File(path) => path.display().to_string(),
        TokenizerSource::Mock => "the mock's built-in tokenizer".into(),
    }
}

impl RkllmRunner {
    /// The model's vocabulary, loaded once per runner.
    pub(super) fn vocabulary(
        &mut self,
        source: &TokenizerSource,
    ) -> Result<Arc<Vocabulary>, BackendError> {
        if let Some((loaded, vocabulary)) = &self.tokens.vocabulary
            && loaded == source
        {
            return Ok(Arc::clone(vocabulary));
        }
        let vocabulary =
            crate::backend::vocabularies::load(source).map_err(|e| runtime_error(None, e))?;
        tracing::info!(
            tokenizer = %describe(source),
            tokens = vocabulary.len(),
            memory_mb = vocabulary.memory_bytes() as f64 / 1e6,
            "tokenizer loaded for structured output"
        );
        self.tokens.vocabulary = Some((source.clone(), Arc::clone(&vocabulary)));
        self.tokens.mismatch = None;
        self.tokens.implausible = 0;
        Ok(vocabulary)
    }

    /// The vocabulary log probabilities are read with: the model's
    /// tokenizer's.
    ///
    /// # Errors
    /// A model without a tokenizer (the engine refuses log probabilities
    /// for one), or one that cannot be read.
    pub(super) fn logprob_vocabulary(&mut self) -> Result<Arc<Vocabulary>, BackendError> {
        let source = self.tokenizer.clone().ok_or_else(|| {
            runtime_error(
                None,
                "log probabilities need the model's tokenizer (set `tokenizer` in its [[models]] entry)",
            )
        })?;
        self.vocabulary(&source)
    }

    /// The model's encoder, loaded once per runner; `None` without a
    /// tokenizer.
    pub(super) fn encoder(&mut self) -> Option<Result<Arc<Encoder>, BackendError>> {
        if let Some(encoder) = &self.tokens.encoder {
            return Some(Ok(Arc::clone(encoder)));
        }
        let source = self.tokenizer.as_ref()?;
        Some(
            crate::backend::vocabularies::load_encoder(source)
                .inspect(|encoder| self.tokens.encoder = Some(Arc::clone(encoder)))
                .map_err(|e| runtime_error(None, format!("the model's tokenizer: {e}"))),
        )
    }

    /// Why the runtime's rows do not fit the vocabulary, for the client.
    fn mismatch_error(
        request: &ValidRunRequest,
        source: &TokenizerSource,
        width: usize,
        tokens: usize,
    ) -> BackendError {
        let why = check_width(width, tokens).err().unwrap_or_default();
        runtime_error(
            None,
            format!(
                "model `{}`: its tokenizer ({}) does not fit the model: {why}; set `tokenizer` in \
                 its [[models]] entry to the tokenizer.json of the model the .rkllm file was \
                 converted from",
                request.model,
                describe(source)
            ),
        )
    }

    /// Generates an answer held to `constrained` (thinking first, freely,
    /// for a reasoning model).
    pub(super) fn generate_constrained(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        constrained: &Constrained,
    ) -> Result<Generation, BackendError> {
        let vocabulary = self.vocabulary(&constrained.tokenizer)?;
        if let Some(width) = self.tokens.mismatch {
            return Err(Self::mismatch_error(
                request,
                &constrained.tokenizer,
                width,
                vocabulary.len(),
            ));
        }
        let embed = match self.vision.as_mut() {
            Some(vision) if !request.images.is_empty() => Some(vision.encode(request)?),
            None if !request.images.is_empty() => {
                return Err(runtime_error(None, "this model does not take images"));
            }
            _ => None,
        };
        if self.held.dirty {
            self.clear_history();
        }
        self.sync_prompt_cache(&request.prompt.text, &sink.cancel_token().clone());
        self.held.conversation.reset();
        let result = self.steered_runs(request, sink, constrained, &vocabulary, embed.as_deref());
        // The runtime may be paused mid-answer: end that generation.
        self.clear_history();
        result
    }

    /// The runs of one constrained answer: the first prefills the prompt,
    /// each later one feeds the tokens the runner chose when the one
    /// before paused, until the answer ends.
    fn steered_runs(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        constrained: &Constrained,
        vocabulary: &Arc<Vocabulary>,
        embed: Option<&[f32]>,
    ) -> Result<Generation, BackendError> {
        let sampling = self.sampling(request);
        let Some(start) = self.steer_start(request, sink, embed.is_some())? else {
            return Ok(Generation::ended(FinishReason::Abort));
        };
        let SteerStart {
            prompt,
            role,
            mut feed,
            chunked_total,
        } = start;
        let run_id = self.next_run.fetch_add(1, Ordering::Relaxed);
        let mut steering = self.steering(request, constrained, vocabulary, sampling, run_id)?;
        let markers = self.vision.as_ref().map(|v| v.markers.clone());
        let abort = Arc::clone(&self.handle.abort);
        let hook_abort = Arc::clone(&abort);
        // One id for every run of the generation: an abort stops whichever
        // is in progress.
        sink.cancel_token()
            .on_cancel(move || hook_abort.abort(run_id));
        let mut runs: u64 = 0;
        let ending = loop {
            if !sink.is_open() {
                break Ending::Closed;
            }
            let remaining = request.max_tokens.saturating_sub(steering.emitted());
            let settings = RunSettings {
                prompt: &prompt,
                role: &role,
                enable_thinking: request.prompt.thinking,
                sampling,
                // One more than the answer may take, so that the cap is
                // the runner's to apply (and the runtime pauses, not ends).
                max_new_tokens: i32::try_from(remaining.saturating_add(1)).unwrap_or(i32::MAX),
                keep_history: false,
                // The images go with the prompt, in the first run.
                images: feed
                    .is_none()
                    .then(|| self.image_run(request, embed, markers.as_ref()))
                    .flatten(),
                hidden_layer: false,
                logits: true,
                tokens: feed.as_deref(),
                lora: self.lora_name(request),
                save_cache: None,
            };
            abort.set_running(run_id);
            if sink.cancel_token().is_cancelled() {
                abort.set_running(0);
                break Ending::Closed;
            }
            let watch = Watch {
                run_id,
                cap: None,
                mode: CallbackMode::Steered(&mut steering),
            };
            let (rc, run) = self.handle.run(&settings, sink, watch)?;
            runs += 1;
            if runs == 1
                && let Some(rows) = chunked_total
                    .map(|total| total as usize)
                    .or_else(|| steering.prompt_rows())
            {
                sink.set_prompt_tokens(u32::try_from(rows).unwrap_or(u32::MAX));
            }
            self.tokens.implausible = steering.implausible();
            match steering.take_outcome() {
                Some(Outcome::Feed(tokens)) => {
                    steering.counts.feeds += 1;
                    feed = Some(
                        tokens
                            .into_iter()
                            .map(|t| i32::try_from(t).unwrap_or(i32::MAX))
                            .collect(),
                    );
                }
                Some(Outcome::End(ending)) => break ending,
                Some(Outcome::Mismatch(width)) => {
                    return Err(self.mismatch_found(request, constrained, vocabulary, width));
                }
                Some(Outcome::Failed(message)) => return Err(runtime_error(Some(rc), message)),
                None => break undecided_end(sink, rc, &run)?,
            }
        };
        log_answer(request, &steering, runs);
        Ok(Generation::ended(match ending {
            Ending::Complete => FinishReason::Stop,
            Ending::Length => FinishReason::Length,
            Ending::Closed => FinishReason::Abort,
        }))
    }

    /// How a constrained answer's runs begin: a long prompt without images
    /// is prefilled in chunks first, so that no callback hands over more
    /// than a chunk's rows, and the first steered run feeds the last chunk;
    /// otherwise the first steered run takes the prompt. `None`: the client
    /// left during the chunks.
    ///
    /// # Errors
    /// A NUL in the prompt, or a chunk the runtime did not pause after.
    fn steer_start(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        images: bool,
    ) -> Result<Option<SteerStart>, BackendError> {
        let text = request.prompt.text.as_str();
        let role = request.prompt.role.as_str();
        let chunks = crate::plan::start::chunkable(&self.profile, text)
            .filter(|_| !images)
            .and_then(|size| self.chunks_for(request, text, size));
        let Some(chunks) = chunks else {
            let (prompt, role) = super::chunked::head_of(text, &Chunks::whole(text), role)?;
            return Ok(Some(SteerStart {
                prompt,
                role,
                feed: None,
                chunked_total: None,
            }));
        };
        let (head, role_c) = super::chunked::head_of(text, &chunks, role)?;
        Ok(
            match self.prefill_chunks(request, sink, &head, &role_c, &chunks)? {
                Prefilled::Last(last) => Some(SteerStart {
                    prompt: head,
                    role: role_c,
                    feed: Some(last.to_vec()),
                    chunked_total: Some(chunks.total),
                }),
                Prefilled::Left => None,
                // Prefilled in one run by the first steered run.
                Prefilled::Refused => {
                    let (prompt, role) = super::chunked::head_of(text, &Chunks::whole(text), role)?;
                    Some(SteerStart {
                        prompt,
                        role,
                        feed: None,
                        chunked_total: None,
                    })
                }
            },
        )
    }

    /// What answers each logits row of the generation.
    fn steering(
        &self,
        request: &ValidRunRequest,
        constrained: &Constrained,
        vocabulary: &Arc<Vocabulary>,
        sampling: SamplingValues,
        run_id: u64,
    ) -> Result<Steering, BackendError> {
        Steering::new(
            vocabulary,
            &constrained.constraint,
            &SteerSettings {
                mode: self.profile.reasoning,
                params: SamplingParams {
                    temperature: sampling.temperature,
                    top_p: sampling.top_p,
                    top_k: usize::try_from(sampling.top_k).unwrap_or(0),
                    repeat_penalty: sampling.repeat_penalty,
                    frequency_penalty: sampling.frequency_penalty,
                    presence_penalty: sampling.presence_penalty,
                },
                runtime_top_k: sampling.top_k,
                seed: std::collections::hash_map::RandomState::new().hash_one(run_id),
                cap: request.max_tokens,
                implausible: self.tokens.implausible,
            },
        )
        .map_err(|e| runtime_error(None, format!("the format cannot be followed: {e}")))
    }

    /// The request's images as the runtime takes them, when this is a
    /// vision model and they are encoded.
    fn image_run<'a>(
        &'a self,
        request: &ValidRunRequest,
        embed: Option<&'a [f32]>,
        markers: Option<&'a ImageMarkers>,
    ) -> Option<ImageRun<'a>> {
        match (embed, markers, &self.vision) {
            (Some(embed), Some(markers), Some(vision)) => Some(ImageRun {
                embed,
                n_image: request.images.len(),
                tokens: vision.encoder.tokens,
                width: vision.encoder.width as usize,
                height: vision.encoder.height as usize,
                markers,
            }),
            _ => None,
        }
    }

    /// The loaded LoRA adapter the request names, by its runtime name.
    pub(super) fn lora_name(&self, request: &ValidRunRequest) -> Option<&CStr> {
        request
            .lora
            .as_deref()
            .and_then(|wanted| self.lora.iter().find(|(name, ..)| name == wanted))
            .map(|(_, name, _)| name.as_c_str())
    }

    /// The first logits row was not as wide as the vocabulary: remembered,
    /// so that every later constrained request of the model fails at once.
    fn mismatch_found(
        &mut self,
        request: &ValidRunRequest,
        constrained: &Constrained,
        vocabulary: &Vocabulary,
        width: usize,
    ) -> BackendError {
        self.tokens.mismatch = Some(width);
        tracing::error!(
            model = %request.model,
            width,
            tokens = vocabulary.len(),
            "the model's tokenizer does not fit its logits rows"
        );
        Self::mismatch_error(request, &constrained.tokenizer, width, vocabulary.len())
    }
}

/// The beginning of a constrained answer's runs.
struct SteerStart {
    /// The prompt's text the first run takes (its first chunk, or all).
    prompt: CString,
    role: CString,
    /// The last chunk's ids, which the first steered run feeds.
    feed: Option<Vec<i32>>,
    /// A chunked prompt's tokens in all.
    chunked_total: Option<u32>,
}

/// How a run ended that its steering did not end: the request went away,
/// the runtime failed, or it stopped at its own token cap.
///
/// # Errors
/// The runtime's failure, or a stop without a reason.
fn undecided_end(sink: &TokenSink<'_>, rc: i32, run: &ActiveRun) -> Result<Ending, BackendError> {
    if !sink.is_open() {
        Ok(Ending::Closed)
    } else if rc != 0 || run.failed {
        Err(runtime_error(
            Some(rc),
            format!("the runtime reported an error (rkllm_run returned {rc})"),
        ))
    } else if run.finished.is_some() {
        // The runtime ended the run by itself: its own token cap.
        Ok(Ending::Length)
    } else {
        Err(runtime_error(
            Some(rc),
            "the runtime stopped a constrained run without a reason",
        ))
    }
}

/// What a constrained answer cost: its runs and how its tokens were had.
fn log_answer(request: &ValidRunRequest, steering: &Steering, runs: u64) {
    let counts = &steering.counts;
    let tokens = steering.emitted();
    tracing::info!(
        model = %request.model,
        runs,
        tokens,
        stood = counts.stood,
        corrected = counts.corrected,
        forced = counts.forced,
        rows = counts.rows,
        implausible = counts.implausible,
        "constrained answer: {:.2} runtime runs per token",
        runs as f64 / f64::from(tokens.max(1))
    );
}
