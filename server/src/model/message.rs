//! Conversations as every API sends them, in one neutral shape: messages
//! with a role, text and image parts, the tool calls an assistant made,
//! and the result a tool gave. Each API translates its own message shape
//! into these; [`super::prompt`] turns them into the model's input.

use serde_json::Value;

use super::image::IMAGE_TAG;

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    /// Instructions (OpenAI `system` and `developer`, Anthropic `system`).
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

impl Speaker {
    /// The role's name in a transcript.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text.
    Text(String),
    /// An image (vision models), where an `<image>` tag goes.
    Image(ImageSource),
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who speaks.
    pub speaker: Speaker,
    /// Its content, in order.
    pub parts: Vec<Part>,
    /// The calls an assistant message made.
    pub tool_calls: Vec<ToolCall>,
}

impl Message {
    /// A message of text only.
    pub fn text(speaker: Speaker, text: impl Into<String>) -> Self {
        Self {
            speaker,
            parts: vec![Part::Text(text.into())],
            tool_calls: Vec::new(),
        }
    }

    /// Its text as the model reads it: text parts joined, an `<image>` tag
    /// where each image goes, then the calls it made, as the model writes
    /// them.
    pub fn rendered(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Image(_) => out.push_str(IMAGE_TAG),
            }
        }
        for call in &self.tool_calls {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": {}}}\n</tool_call>",
                serde_json::Value::String(call.name.clone()),
                call.arguments_value()
            ));
        }
        out
    }

    /// Its images, in order.
    pub fn images(&self) -> impl Iterator<Item = &ImageSource> {
        self.parts.iter().filter_map(|p| match p {
            Part::Image(source) => Some(source),
            Part::Text(_) => None,
        })
    }
}

/// One call of a function tool, as an assistant made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Its id (`call_…`), the same in every event and in the result.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// Its arguments: the JSON text of an object.
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as a JSON value (an empty object if they do not
    /// parse).
    pub fn arguments_value(&self) -> Value {
        serde_json::from_str(&self.arguments).unwrap_or_else(|_| Value::Object(Default::default()))
    }
}

/// Where one image of a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// Sent with the request (data URL or base64), already decoded.
    Inline(Vec<u8>),
    /// An http(s) URL to fetch.
    Remote(String),
}

/// One message of a conversation as a runtime's history holds it: its
/// role and its text as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Turn {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text.
    pub text: String,
}
