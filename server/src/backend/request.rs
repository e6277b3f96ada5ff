//! What a backend is asked to run: a request that passed the engine's
//! validation, with its prompt (built once, by `model::prompt::build`) and
//! the sampling overrides.

use serde::{Deserialize, Serialize};

use crate::model::image::ImageData;
use crate::model::{EmbeddingSpec, Prompt, Sampling};

/// A request that passed validation; backends accept nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidRunRequest {
    /// What the model is given (its text non-empty and within the prompt
    /// limit).
    pub prompt: Prompt,
    /// Resolved model name.
    pub model: String,
    /// Token cap in force (the request's, or the configured default).
    pub max_tokens: u32,
    /// Whether the client asked for `max_tokens` itself.
    pub max_tokens_requested: bool,
    /// Validated sampling overrides.
    pub sampling: Sampling,
    /// Images, in the order of the prompt's `<image>` tags (vision models).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageData>,
    /// Embed `prompt` instead of generating (embedding models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed: Option<EmbeddingSpec>,
    /// The LoRA adapter to run with (one of the model's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<String>,
    /// Clear the runtime's KV cache (its chat history) instead of
    /// generating; `prompt` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_cache: bool,
    /// Bring a returning conversation's snapshot up to date with the reply
    /// it was given, while nothing else waits, instead of generating (the
    /// engine's idle work; `prompt` is empty, and the runner knows which
    /// conversation). A cancelled token stops it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refresh_snapshot: bool,
    /// Probe the model's runtime again instead of generating (`doctor
    /// --probe` through the running service); `prompt` is empty. The
    /// verdicts come back with the generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeOrder>,
    /// Strings that end the answer (applied by the server's sink).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// What the answer must be (structured output, a forced tool call),
    /// with the tokenizer to hold it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<Constrained>,
}

impl ValidRunRequest {
    /// What the run plan reads of this request (`crate::plan::start`): the
    /// same for the NPU runner and the mock.
    pub fn ask(&self) -> crate::plan::start::Ask<'_> {
        crate::plan::start::Ask {
            text: &self.prompt.text,
            turns: self.prompt.turns(),
            rows: self.sampling.logprobs.is_some(),
            budget: self.sampling.thinking_budget.is_some(),
            special: !self.images.is_empty() || self.embed.is_some() || self.constraint.is_some(),
        }
    }
}

/// What a probe order asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOrder {
    /// Measure the board's figures too.
    pub measure: bool,
}

/// A request's constraint with the tokenizer of its model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Constrained {
    /// What the answer must be.
    pub constraint: crate::model::constraint::Constraint,
    /// The model's tokenizer.
    pub tokenizer: crate::model::tokenizer::TokenizerSource,
}
