//! A thinking budget carried out on the NPU (the rule is
//! [`crate::plan::budget`]'s). While a reasoning model thinks, the
//! callback counts the block's tokens; when they reach the point the plan
//! gives, it returns 1, and the runtime pauses with its KV cache kept
//! (RKLLM_ABI.md §3.3). The runner then writes the block's end to the
//! client, as the model would have, and feeds the same text as token input
//! in a second `rkllm_run`, which goes on from the pause (§3.5c): the model
//! answers after its closed thinking. Both runs are single-turn
//! (`keep_history = 0`): a budgeted chat is sent whole, and the runtime's
//! history is cleared before the next request.

use super::abi::RunSettings;
use super::handle::ActiveRun;
use super::{RkllmRunner, runtime_error};
use crate::backend::{BackendError, Generation, TokenSink, ValidRunRequest};
use crate::plan::budget::{CLOSE, PauseAt, after_close};
use crate::vocab::{FinishReason, Usage};

impl RkllmRunner {
    /// The thinking tokens after which `request`'s block is closed.
    ///
    /// # Errors
    /// A model without a usable tokenizer (the engine refuses budgets for
    /// such a model).
    pub(super) fn budget_pause_at(
        &mut self,
        request: &ValidRunRequest,
        budget: u32,
    ) -> Result<PauseAt, BackendError> {
        let close = u32::try_from(self.close_ids()?.len()).unwrap_or(u32::MAX);
        Ok(PauseAt::of(budget, request.max_tokens, close))
    }

    /// After `run` paused at the thinking budget: closes the block and
    /// runs on to the answer.
    ///
    /// # Errors
    /// A model without a usable tokenizer, or the second run's failure.
    pub(super) fn after_budget(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        first: &RunSettings<'_>,
        run: &ActiveRun,
    ) -> Result<Generation, BackendError> {
        // The runtime holds the paused generation: the next request starts
        // from a cleared cache.
        self.held.dirty = true;
        // The second run counts the closing tag as its prompt, and the
        // first paused without counts: the prompt is what the first
        // prefilled (the tokenizer's count of it, which a budget needs), the
        // answer what the sink was given (reasoning tokens are the sink's
        // either way).
        let prompt = super::text::whole_prompt_tokens(request)
            .or_else(|| first_run_prompt(run))
            .or(request.prompt.tokens)
            .unwrap_or(0);
        let ended = |finish: FinishReason, sink: &TokenSink<'_>| Generation {
            usage: Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: sink.tokens(),
                reasoning_tokens: 0,
            }),
            ..Generation::ended(finish)
        };
        if run.pause_ignored {
            tracing::warn!(
                model = %request.model,
                "the runtime went on after the pause at the thinking budget; the run was stopped there"
            );
            return Ok(ended(FinishReason::Length, sink));
        }
        let ids = self.close_ids()?;
        let fed = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        let remaining = after_close(request.max_tokens, sink.tokens(), fed);
        if !sink.tokens_bytes(CLOSE.as_bytes(), fed) {
            return Ok(ended(FinishReason::Stop, sink));
        }
        if remaining == 0 {
            return Ok(ended(FinishReason::Length, sink));
        }
        tracing::debug!(
            model = %request.model,
            thought = sink.thought(),
            "thinking budget spent: the block is closed"
        );
        let settings = RunSettings {
            max_new_tokens: i32::try_from(remaining).unwrap_or(i32::MAX),
            keep_history: false,
            images: None,
            hidden_layer: false,
            tokens: Some(&ids),
            save_cache: None,
            // Log probabilities go on being read after the block.
            ..*first
        };
        let mut generation = self.execute(request, sink, &settings)?;
        generation.usage = ended(generation.finish_reason, sink).usage;
        generation.runtime_timings = None;
        if generation.finish_reason == FinishReason::Length || sink.tokens() >= request.max_tokens {
            generation.finish_reason = FinishReason::Length;
        } else if generation.finish_reason != FinishReason::Abort {
            generation.finish_reason = FinishReason::Stop;
        }
        Ok(generation)
    }

    /// The block's end in the model's tokens.
    fn close_ids(&mut self) -> Result<Vec<i32>, BackendError> {
        let encoder = self.encoder().ok_or_else(|| {
            runtime_error(
                None,
                "the thinking budget needs the model's tokenizer (set `tokenizer` in its [[models]] entry)",
            )
        })??;
        encoder
            .encode(CLOSE)
            .map_err(|e| runtime_error(None, e))?
            .into_iter()
            .map(|id| i32::try_from(id).map_err(|_| runtime_error(None, "a token id out of range")))
            .collect()
    }
}

/// The prompt tokens the paused run reported, if the runtime counted them
/// before the pause.
fn first_run_prompt(run: &ActiveRun) -> Option<u32> {
    run.finished
        .and_then(|perf| u32::try_from(perf.prefill_tokens).ok())
        .filter(|&tokens| tokens > 0)
}
