//! Conversations as every API sends them, in one neutral shape: messages
//! with a role, text and image parts, the tool calls an assistant made,
//! and the result a tool gave. Each API translates its own message shape
//! into these; this module turns them into the model's input.
//!
//! The runtime's built-in chat template is applied to what the server
//! sends. A single user (or tool) message is sent as it is, with a system
//! message, if any, before it. A longer conversation is sent as one
//! transcript (`role: text` lines) ending with the new message, unless the
//! model's runtime still holds all but its last message: then only that
//! one is sent (see [`crate::engine::ConversationState`]).

use super::images::ImageSource;
use super::tools::ToolCall;
use crate::backend::{IMAGE_TAG, JinjaTemplate, RenderJob, TemplateCall, TemplateMessage};
use crate::engine::{Role, Turn};

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

/// The render of a conversation (its system messages first) in the
/// model's own template, with the tools offered and the thinking switch:
/// what the sandbox runs.
pub fn render_job(
    template: &JinjaTemplate,
    messages: &[Message],
    tools: Option<String>,
    enable_thinking: Option<bool>,
) -> RenderJob {
    let messages: Vec<TemplateMessage> = messages
        .iter()
        .map(|m| TemplateMessage {
            role: m.speaker.as_str().to_owned(),
            content: m
                .parts
                .iter()
                .map(|part| match part {
                    Part::Text(text) => text.as_str(),
                    Part::Image(_) => IMAGE_TAG,
                })
                .collect(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|call| TemplateCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                })
                .collect(),
        })
        .collect();
    RenderJob {
        template: template.clone(),
        messages,
        tools,
        enable_thinking,
        now_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    }
}

/// The conversation as the engine keeps it, for history reuse.
pub fn turns(messages: &[Message]) -> Vec<Turn> {
    messages
        .iter()
        .map(|m| Turn {
            role: m.speaker.as_str().to_owned(),
            text: m.rendered(),
        })
        .collect()
}

/// A conversation with its system messages first: instructions may come
/// anywhere (an agent appends one after the first user message), and are
/// gathered, in order, into one system message before the turns.
pub fn system_first(messages: Vec<Message>) -> Vec<Message> {
    let (system, turns): (Vec<Message>, Vec<Message>) = messages
        .into_iter()
        .partition(|m| m.speaker == Speaker::System);
    if system.len() <= 1 && turns.is_empty() {
        return system;
    }
    let mut out = Vec::with_capacity(turns.len() + 1);
    if !system.is_empty() {
        let text: Vec<String> = system.iter().map(Message::rendered).collect();
        out.push(Message::text(Speaker::System, text.join("\n\n")));
    }
    out.extend(turns);
    out
}

/// The prompt and role to send for a conversation (its system messages
/// first, see [`system_first`]).
///
/// # Errors
/// When there is no message, or the last one is not from the user or a tool.
pub fn prompt_of(messages: &[Message]) -> Result<(String, Role), String> {
    let last = messages.last().ok_or("`messages` must not be empty")?;
    let role = match last.speaker {
        Speaker::User => Role::User,
        Speaker::Tool => Role::Tool,
        other => {
            return Err(format!(
                "the last message must be from `user` or `tool`, got `{}`",
                other.as_str()
            ));
        }
    };
    let earlier = &messages[..messages.len() - 1];
    let prompt = match earlier {
        [] => last.rendered(),
        [system] if system.speaker == Speaker::System => {
            format!("{}\n\n{}", system.rendered(), last.rendered())
        }
        _ => messages
            .iter()
            .map(|m| format!("{}: {}", m.speaker.as_str(), m.rendered()))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    Ok((prompt, role))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_become_one_prompt() {
        let one = [Message::text(Speaker::User, "hi")];
        assert_eq!(prompt_of(&one).unwrap(), ("hi".into(), Role::User));
        let parts = [
            Message::text(Speaker::System, "be brief"),
            Message {
                parts: vec![Part::Text("a".into()), Part::Text("b".into())],
                ..Message::text(Speaker::User, "")
            },
        ];
        assert_eq!(prompt_of(&parts).unwrap().0, "be brief\n\nab");
        let turns = [
            Message::text(Speaker::User, "q1"),
            Message::text(Speaker::Assistant, "a1"),
            Message::text(Speaker::Tool, "{}"),
        ];
        assert_eq!(
            prompt_of(&turns).unwrap(),
            ("user: q1\nassistant: a1\ntool: {}".into(), Role::Tool)
        );
        assert!(prompt_of(&[]).is_err());
        assert!(prompt_of(&[Message::text(Speaker::Assistant, "x")]).is_err());
    }

    #[test]
    fn system_messages_anywhere_are_gathered_first() {
        let messages = system_first(vec![
            Message::text(Speaker::System, "a"),
            Message::text(Speaker::User, "q"),
            Message::text(Speaker::System, "b"),
        ]);
        assert_eq!(
            messages,
            vec![
                Message::text(Speaker::System, "a\n\nb"),
                Message::text(Speaker::User, "q")
            ]
        );
        assert_eq!(
            prompt_of(&messages).unwrap(),
            ("a\n\nb\n\nq".into(), Role::User)
        );
    }

    #[test]
    fn images_become_tags_and_calls_are_written_as_the_model_writes_them() {
        let m = Message {
            parts: vec![
                Part::Text("compare ".into()),
                Part::Image(ImageSource::Inline(vec![1])),
                Part::Text(" and ".into()),
                Part::Image(ImageSource::Remote("https://x/b.png".into())),
            ],
            ..Message::text(Speaker::User, "")
        };
        assert_eq!(m.rendered(), "compare <image> and <image>");
        assert_eq!(m.images().count(), 2);
        let call = Message {
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into(),
            }],
            ..Message::text(Speaker::Assistant, "")
        };
        assert_eq!(
            call.rendered(),
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1}}\n</tool_call>"
        );
    }
}
