//! How a model is asked to sample, and who speaks in its prompt.

use serde::{Deserialize, Serialize};

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
