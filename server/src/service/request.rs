//! [`Generate`]: one generation request, whatever API it came from, with
//! every option an API may set. Each API translates its request into this;
//! an option the server cannot honour is refused here, once, for all.

use serde_json::Value;

use super::chat::Message;
use super::images::ImageSource;
use crate::engine::{KeepAlive, Role, Sampling};

/// What the model is given.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A conversation (chat APIs).
    Chat(Vec<Message>),
    /// A prompt (completion APIs, JSON-RPC), with its own images and an
    /// optional system text before it.
    Prompt {
        /// The text.
        text: String,
        /// System text put before it (Ollama's `system`).
        system: Option<String>,
        /// Who speaks it.
        role: Role,
        /// Images, placed where its `<image>` tags are (or before it).
        images: Vec<ImageSource>,
    },
}

impl Default for Input {
    fn default() -> Self {
        Self::Prompt {
            text: String::new(),
            system: None,
            role: Role::User,
            images: Vec::new(),
        }
    }
}

/// Which tool the model must call, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// No tool: the tools are not offered and the reply is not read for calls.
    None,
    /// Some tool must be called.
    Required,
    /// This tool must be called.
    Function(String),
}

/// The shape the answer must have.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum OutputFormat {
    /// Free text (the default).
    #[default]
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against a schema.
    JsonSchema {
        /// Its name, where the API gives one.
        name: Option<String>,
        /// The schema.
        schema: Value,
        /// Whether the API asked for strict adherence.
        strict: bool,
    },
}

/// One generation request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generate {
    /// The model (the default model when absent).
    pub model: Option<String>,
    /// The conversation or prompt.
    pub input: Input,
    /// Sampling overrides.
    pub sampling: Sampling,
    /// Cap on generated tokens.
    pub max_tokens: Option<u64>,
    /// Strings that end the answer (not shown).
    pub stop: Vec<String>,
    /// Function tools the model may call, in OpenAI's shape
    /// (`{"type": "function", "function": {name, description, parameters}}`).
    pub tools: Vec<Value>,
    /// Which tool must be called.
    pub tool_choice: ToolChoice,
    /// A LoRA adapter of the model.
    pub lora: Option<String>,
    /// How long the model stays loaded after this request.
    pub keep_alive: Option<KeepAlive>,
    /// Thinking on or off (reasoning models); `None`: the model's default.
    pub thinking: Option<bool>,
    /// The answer's shape.
    pub format: OutputFormat,
    /// The API's name for the format field (for its errors).
    pub format_field: &'static str,
}

impl Generate {
    /// The name of each offered tool.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools
            .iter()
            .filter_map(|t| {
                t.pointer("/function/name")
                    .or_else(|| t.get("name"))
                    .and_then(Value::as_str)
            })
            .collect()
    }
}
