//! What a backend is asked to run: a request that passed the engine's
//! validation, with the sampling overrides and the speaker's role.

use serde::{Deserialize, Serialize};

use super::Turn;

/// Who speaks in the prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A user message (the default).
    #[default]
    User,
    /// A tool's result, fed back to the model.
    Tool,
}

impl Role {
    /// The runtime's name for the role.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Tool => "tool",
        }
    }
}

/// Per-run sampling overrides; `None` keeps the model's configured value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Softmax temperature, 0 to 2.
    pub temperature: Option<f64>,
    /// Nucleus sampling mass, above 0 up to 1.
    pub top_p: Option<f64>,
    /// Top-k cut-off, 0 (off) to 1000.
    pub top_k: Option<u32>,
    /// Repetition penalty, above 0 up to 10.
    pub repeat_penalty: Option<f64>,
    /// Frequency penalty, -2 to 2.
    pub frequency_penalty: Option<f64>,
    /// Presence penalty, -2 to 2.
    pub presence_penalty: Option<f64>,
}

/// A request that passed validation; backends accept nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidRunRequest {
    /// The user input (non-empty, within the prompt limit).
    pub prompt: String,
    /// Resolved model name.
    pub model: String,
    /// Token cap in force (the request's, or the configured default).
    pub max_tokens: u32,
    /// Whether the client asked for `max_tokens` itself.
    pub max_tokens_requested: bool,
    /// Validated sampling overrides.
    pub sampling: Sampling,
    /// Input role.
    pub role: Role,
    /// Thinking switch (false when not asked for).
    pub enable_thinking: bool,
    /// The chat, for history reuse.
    pub conversation: Option<Vec<Turn>>,
    /// A chat rendered whole by the server (the model's own template): its
    /// system message's text, empty without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole_chat: Option<String>,
    /// Function tools (a JSON array), when the request offers some.
    pub tools: Option<String>,
    /// Images, in the order of the prompt's `<image>` tags (vision models).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<super::ImageData>,
    /// Embed `prompt` instead of generating (embedding models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed: Option<super::EmbeddingSpec>,
    /// The LoRA adapter to run with (one of the model's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<String>,
    /// Clear the runtime's KV cache (its chat history) instead of
    /// generating; `prompt` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_cache: bool,
    /// Strings that end the answer (applied by the server's sink).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// What the answer must be (structured output, a forced tool call),
    /// with the tokenizer to hold it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<Constrained>,
}

/// A request's constraint with the tokenizer of its model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Constrained {
    /// What the answer must be.
    pub constraint: super::constraint::Constraint,
    /// The model's tokenizer.
    pub tokenizer: super::constraint::TokenizerSource,
}
