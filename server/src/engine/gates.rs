//! Requests that rest on what a model's runtime was probed to do
//! ([`crate::plan::probe`]): a thinking budget, log probabilities (and a
//! reranker's judgement), a format or forced tool call. Where the probe a
//! feature rests on failed, the feature is off for that model and such a
//! request is refused before it is queued, with the probe and what it saw.
//! A model not probed yet (never loaded since the server started, and no
//! verdicts kept) is checked by the service once it has loaded it.

use super::lifecycle::ModelSlot;
use super::{EngineError, ValidationError};
use crate::backend::ValidRunRequest;
use crate::plan::profile::{Feature, Profile};
use crate::plan::start::{MAX_ROWS_AT_ONCE, rows_fit};

/// Refuses `request` when it needs a feature `slot`'s model has off.
///
/// # Errors
/// A [`ValidationError::Invalid`] naming the request's field, the feature
/// and why it is off.
pub(super) fn gate(slot: &ModelSlot, request: &ValidRunRequest) -> Result<(), EngineError> {
    let verdicts = slot.verdicts.lock();
    let Some(features) = verdicts.as_ref().map(|v| &v.features) else {
        return Ok(());
    };
    // Without a tokenizer these are refused, or a budget left out, for
    // that reason, and said so, by the engine's own checks.
    if slot.spec.tokenizer.is_none() {
        return Ok(());
    }
    let needs: [(bool, &'static str, &Feature, &str); 3] = [
        (
            request.sampling.thinking_budget.is_some() && slot.spec.reasoning.thinks(slot.name()),
            "thinking",
            &features.thinking_budget,
            "a thinking budget",
        ),
        (
            request.sampling.logprobs.is_some(),
            "logprobs",
            &features.logprobs,
            "log probabilities (and a reranker's judgements)",
        ),
        (
            request.constraint.is_some(),
            "format",
            &features.constrained,
            "a format or a forced tool call",
        ),
    ];
    for (asked, field, feature, what) in needs {
        if asked && !feature.on {
            return Err(refusal(slot.name(), field, what, feature).into());
        }
    }
    let reads_rows = request.sampling.logprobs.is_some() || request.constraint.is_some();
    let profile = Profile {
        reasoning: slot.spec.reasoning,
        server_template: slot.spec.template.is_server_side() && features.server_template.on,
        renders_template: slot.spec.template.is_server_side(),
        tokenizer: slot.spec.tokenizer.is_some(),
        chunk_tokens: slot.spec.settings.prefill_chunk(),
        features: features.clone(),
    };
    if reads_rows && let Err(rows) = rows_fit(&profile, &request.prompt.text, request.prompt.tokens)
    {
        let field = if request.constraint.is_some() {
            "format"
        } else {
            "logprobs"
        };
        let width = features.row_width.unwrap_or(0);
        return Err(ValidationError::Invalid {
            field,
            message: format!(
                "model `{}`'s runtime hands over a prompt's logits rows all at once, and this prompt of {rows} tokens cannot be cut into chunks on it ({}): {rows} rows of {width} values would be held at once; at most {MAX_ROWS_AT_ONCE} tokens of prompt go with `{field}` on this model",
                slot.name(),
                why_not_chunked(&profile)
            ),
        }
        .into());
    }
    Ok(())
}

/// Why `profile`'s prompts are not cut into chunks.
fn why_not_chunked(profile: &Profile) -> String {
    if !profile.server_template {
        "it uses the runtime's own template".into()
    } else if !profile.tokenizer {
        "it has no tokenizer".into()
    } else if profile.chunk_tokens == 0 {
        "prefill_chunk_tokens = 0".into()
    } else {
        format!(
            "chunked prefill is off: {}",
            profile.features.chunked_prefill.reason
        )
    }
}

/// The refusal of `what` for model `model`, whose `feature` is off.
pub fn refusal(model: &str, field: &'static str, what: &str, feature: &Feature) -> ValidationError {
    ValidationError::Invalid {
        field,
        message: format!(
            "model `{model}` cannot take {what}: its runtime failed the check this rests on, so it is off for this model ({}); `rkllm-server doctor --probe` reports what the board does",
            feature.reason
        ),
    }
}
