//! A thinking budget on the NPU. While a reasoning model thinks, the
//! callback counts the block's tokens; when they reach the request's
//! budget it returns 1, and the runtime pauses with its KV cache kept
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
use crate::vocab::FinishReason;

/// What closes a thinking block whose budget is spent.
const CLOSE: &str = "\n</think>\n\n";

impl RkllmRunner {
    /// After `run` paused at the thinking budget: closes the block and
    /// runs on to the answer.
    ///
    /// # Errors
    /// A model without a usable tokenizer (the engine refuses budgets it
    /// names for such a model), or the second run's failure.
    pub(super) fn after_budget(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        first: &RunSettings<'_>,
        run: &ActiveRun,
    ) -> Result<Generation, BackendError> {
        // The runtime holds the paused generation: the next request starts
        // from a cleared cache.
        self.history_dirty = true;
        if run.pause_ignored {
            tracing::warn!(
                model = %request.model,
                "the runtime went on after the pause at the thinking budget; the run was stopped \
                 there"
            );
            return Ok(Generation::ended(FinishReason::Length));
        }
        let ids = self.close_ids()?;
        let fed = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        if !sink.tokens_bytes(CLOSE.as_bytes(), fed) {
            return Ok(Generation::ended(FinishReason::Stop));
        }
        let remaining = request.max_tokens.saturating_sub(sink.tokens());
        if remaining == 0 {
            return Ok(Generation::ended(FinishReason::Length));
        }
        tracing::debug!(
            model = %request.model,
            thought = sink.thought(),
            "thinking budget spent: the block is closed"
        );
        let settings = RunSettings {
            prompt: first.prompt,
            role: first.role,
            enable_thinking: first.enable_thinking,
            sampling: first.sampling,
            max_new_tokens: i32::try_from(remaining).unwrap_or(i32::MAX),
            keep_history: false,
            images: None,
            hidden_layer: false,
            // Log probabilities go on being read after the block.
            logits: first.logits,
            tokens: Some(&ids),
            lora: first.lora,
            save_cache: None,
        };
        let mut generation = self.execute(request, sink, &settings)?;
        // The first run paused without its counts: the sink's stand.
        generation.usage = None;
        generation.runtime_timings = None;
        if generation.finish_reason == FinishReason::Length || sink.tokens() >= request.max_tokens {
            generation.finish_reason = FinishReason::Length;
        } else if generation.finish_reason != FinishReason::Abort {
            generation.finish_reason = FinishReason::Stop;
        }
        Ok(generation)
    }

    /// The block's end in the model's tokens.
    fn close_ids(&self) -> Result<Vec<i32>, BackendError> {
        let source = self.tokenizer.as_ref().ok_or_else(|| {
            runtime_error(
                None,
                "the thinking budget needs the model's tokenizer (set `tokenizer` in its \
                 [[models]] entry)",
            )
        })?;
        let encoder = crate::backend::vocabularies::load_encoder(source)
            .map_err(|e| runtime_error(None, format!("the model's tokenizer: {e}")))?;
        encoder
            .encode(CLOSE)
            .map_err(|e| runtime_error(None, e))?
            .into_iter()
            .map(|id| i32::try_from(id).map_err(|_| runtime_error(None, "a token id out of range")))
            .collect()
    }
}
