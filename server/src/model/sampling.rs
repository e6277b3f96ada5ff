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
    /// Mirostat: 0 (off), 1 or 2 (Mirostat 2.0).
    pub mirostat: Option<u8>,
    /// Mirostat's target surprise, above 0 up to 20.
    pub mirostat_tau: Option<f64>,
    /// Mirostat's learning rate, above 0 up to 1.
    pub mirostat_eta: Option<f64>,
    /// The most tokens a reasoning model may think: when its thinking
    /// block has taken them, the runner closes the block and the answer
    /// follows. `None`: no limit but the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<ThinkingBudget>,
    /// Report each answer token's log probability, with this many of the
    /// likeliest tokens at its place (0: the token's own only); `None`:
    /// none are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u8>,
    /// The seed of the sampler's random choices: the same seed, prompt and
    /// settings give the same text. `None`: the backend's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// A thinking budget and how it was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkingBudget {
    /// The most tokens the thinking block may take.
    pub tokens: u32,
    /// Named in tokens by the client (Anthropic's `budget_tokens`): a
    /// model that cannot keep it refuses the request. Otherwise it stands
    /// for an effort level, which such a model runs without.
    pub named: bool,
}

impl ThinkingBudget {
    /// A budget the client named in tokens.
    pub fn named(tokens: u32) -> Self {
        Self {
            tokens,
            named: true,
        }
    }

    /// The budget an effort level stands for, if any.
    pub fn of_effort(level: &str) -> Option<Self> {
        super::reasoning::effort_budget(level).map(|tokens| Self {
            tokens,
            named: false,
        })
    }
}

impl Sampling {
    /// A client's seed: -1 (llama.cpp's and Ollama's "random") is none;
    /// another negative one is its two's-complement bits.
    pub fn client_seed(seed: Option<i64>) -> Option<u64> {
        seed.filter(|&s| s != -1).map(|s| s as u64)
    }

    /// Whether this request's own temperature makes sampling greedy (the
    /// likeliest token each step, whatever the seed); `None`: it sets none.
    pub fn greedy(&self) -> Option<bool> {
        self.temperature.map(|t| t == 0.0)
    }

    /// The per-request parameter names this request sets (as in
    /// `ALL_OVERRIDES`), for refusing those a backend cannot apply.
    pub fn set_fields(&self) -> Vec<&'static str> {
        [
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("top_k", self.top_k.is_some()),
            ("repeat_penalty", self.repeat_penalty.is_some()),
            ("frequency_penalty", self.frequency_penalty.is_some()),
            ("presence_penalty", self.presence_penalty.is_some()),
            ("mirostat", self.mirostat.is_some()),
            ("mirostat_tau", self.mirostat_tau.is_some()),
            ("mirostat_eta", self.mirostat_eta.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}
