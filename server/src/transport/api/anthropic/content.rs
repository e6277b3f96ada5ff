//! Anthropic's conversation — `system` and `messages`, each message's
//! content a string or blocks — as the service's neutral messages. A
//! user turn's `tool_result` blocks become tool messages placed before the
//! rest of the turn, in order (a failed result says so: "Error: …"); an
//! assistant's `tool_use` blocks become its calls, with their ids;
//! thinking sent back is not sent again; a `tool_reference` becomes a
//! short text naming the tool, and the names are gathered (a deferred
//! tool is offered once one names it); Claude Code's billing block, first
//! in `system` and different on every request, is dropped so the prompt
//! stays the same; block types with no use here are skipped.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::service::{Message, Part, ServiceError, Speaker, ToolCall, parse_source};

/// How Claude Code's first system block starts: attribution that changes
/// on every request (so no two prompts would be the same); dropped.
/// `CLAUDE_CODE_ATTRIBUTION_HEADER=0` stops Claude Code sending it.
const BILLING_HEADER: &str = "x-anthropic-billing-header:";

/// One message: `user`, `assistant` or `system`, its content a string or
/// blocks.
#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: Value,
}

/// A content block. Types the server has no use for (`thinking` and
/// `redacted_thinking` sent back, `document`, `search_result`, …) are
/// skipped.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    Image {
        source: ImageSource,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    ToolResult {
        #[serde(default)]
        content: Value,
        is_error: Option<bool>,
    },
    ToolReference {
        tool_name: String,
    },
    #[serde(other)]
    Other,
}

/// Where an image block's picture is.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImageSource {
    Base64 { data: String },
    Url { url: String },
}

/// The conversation: the system text first, then the messages in order;
/// and the tools its `tool_reference` blocks name.
///
/// # Errors
/// A malformed message or block, naming it (`messages[2].content[0]`).
pub fn conversation(
    system_value: Value,
    wire: Vec<WireMessage>,
) -> Result<(Vec<Message>, Vec<String>), ServiceError> {
    let mut reader = Reader::default();
    let mut messages = Vec::with_capacity(wire.len() + 1);
    if let Some(text) = system(system_value)? {
        messages.push(Message::text(Speaker::System, text));
    }
    for (i, message) in wire.into_iter().enumerate() {
        reader.message(message, i, &mut messages)?;
    }
    Ok((messages, reader.referenced))
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ServiceError {
    ServiceError::invalid(field, message)
}

/// A content value's blocks, each with its path: a string is one text
/// block.
fn blocks(content: Value, at: &str) -> Result<Vec<(String, Block)>, ServiceError> {
    match content {
        Value::Null => Ok(Vec::new()),
        Value::String(text) => Ok(vec![(at.to_owned(), Block::Text { text })]),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(j, item)| {
                let at = format!("{at}[{j}]");
                match serde_json::from_value(item) {
                    Ok(block) => Ok((at, block)),
                    Err(err) => Err(invalid(&at, format!("`{at}`: {err}"))),
                }
            })
            .collect(),
        _ => Err(invalid(
            at,
            format!("`{at}` must be a string or an array of content blocks"),
        )),
    }
}

/// Reads a conversation, gathering the tools its `tool_reference` blocks
/// name.
#[derive(Debug, Default)]
struct Reader {
    /// Images so far (their number names them in errors).
    images: usize,
    /// Tools named by a `tool_reference`.
    referenced: Vec<String>,
}

/// Appends `part`; adjacent texts are joined by a line break, as separate
/// blocks read.
fn push_part(parts: &mut Vec<Part>, part: Part) {
    match (parts.last_mut(), part) {
        (Some(Part::Text(last)), Part::Text(text)) => {
            last.push('\n');
            last.push_str(&text);
        }
        (_, part) => parts.push(part),
    }
}

impl Reader {
    /// The part a text, image or tool-reference block gives; `None` for
    /// the blocks that give none.
    fn part(&mut self, block: Block, at: &str) -> Result<Option<Part>, ServiceError> {
        Ok(match block {
            Block::Text { text } => Some(Part::Text(text)),
            Block::Image { source } => {
                self.images += 1;
                let text = match &source {
                    ImageSource::Base64 { data } => data,
                    ImageSource::Url { url } => url,
                };
                let image = parse_source(text, self.images).map_err(|m| invalid(at, m))?;
                Some(Part::Image(image))
            }
            Block::ToolReference { tool_name } => {
                let text = format!("Tool {tool_name} loaded.");
                self.referenced.push(tool_name);
                Some(Part::Text(text))
            }
            Block::ToolUse { .. } | Block::ToolResult { .. } | Block::Other => None,
        })
    }

    /// A `tool_result` block as a tool message: its content (a string or
    /// blocks), after "Error: " when `is_error`.
    fn tool_result(
        &mut self,
        content: Value,
        is_error: bool,
        at: &str,
    ) -> Result<Message, ServiceError> {
        let mut parts = Vec::new();
        for (at, block) in blocks(content, &format!("{at}.content"))? {
            if let Some(part) = self.part(block, &at)? {
                push_part(&mut parts, part);
            }
        }
        if is_error {
            match parts.first_mut() {
                Some(Part::Text(text)) => text.insert_str(0, "Error: "),
                _ => parts.insert(0, Part::Text("Error".into())),
            }
        }
        Ok(Message {
            speaker: Speaker::Tool,
            parts,
            tool_calls: Vec::new(),
        })
    }

    /// One wire message as neutral messages (a user turn with tool
    /// results gives a tool message for each, then the rest of the turn).
    fn message(
        &mut self,
        wire: WireMessage,
        i: usize,
        out: &mut Vec<Message>,
    ) -> Result<(), ServiceError> {
        let speaker = match wire.role.as_str() {
            "user" => Speaker::User,
            "assistant" => Speaker::Assistant,
            "system" => Speaker::System,
            other => {
                return Err(invalid(
                    format!("messages[{i}].role"),
                    format!(
                        "`messages[{i}].role` must be user, assistant or system, got {other:?}"
                    ),
                ));
            }
        };
        let mut message = Message {
            speaker,
            parts: Vec::new(),
            tool_calls: Vec::new(),
        };
        let mut results = 0;
        for (at, block) in blocks(wire.content, &format!("messages[{i}].content"))? {
            match block {
                Block::ToolResult { content, is_error } if speaker == Speaker::User => {
                    out.push(self.tool_result(content, is_error == Some(true), &at)?);
                    results += 1;
                }
                Block::ToolUse { id, name, input } if speaker == Speaker::Assistant => {
                    let input = if input.is_null() { json!({}) } else { input };
                    message.tool_calls.push(ToolCall {
                        id,
                        name,
                        arguments: input.to_string(),
                    });
                }
                block => {
                    if let Some(part) = self.part(block, &at)? {
                        push_part(&mut message.parts, part);
                    }
                }
            }
        }
        // A turn of tool results alone is those results.
        if results == 0 || !message.parts.is_empty() {
            out.push(message);
        }
        Ok(())
    }
}

/// `system`: a string or text blocks, joined; Claude Code's billing block
/// dropped.
fn system(value: Value) -> Result<Option<String>, ServiceError> {
    let texts: Vec<String> = match value {
        Value::Null => return Ok(None),
        Value::String(text) => vec![text],
        Value::Array(items) => {
            let mut texts = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let Some(Value::String(text)) = item.get("text").cloned() else {
                    return Err(invalid(
                        format!("system[{i}]"),
                        format!(
                            "`system[{i}]` must be a text block ({{\"type\": \"text\", \"text\": …}})"
                        ),
                    ));
                };
                if i == 0 && text.starts_with(BILLING_HEADER) {
                    continue;
                }
                texts.push(text);
            }
            texts
        }
        _ => {
            return Err(invalid(
                "system",
                "`system` must be a string or an array of text blocks",
            ));
        }
    };
    let text = texts.join("\n\n");
    Ok((!text.is_empty()).then_some(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::ImageSource as Source;

    /// The messages of a request body's `system` and `messages`.
    fn generate(body: Value) -> Result<Vec<Message>, ServiceError> {
        let wire = serde_json::from_value(body["messages"].clone()).unwrap();
        Ok(conversation(body["system"].clone(), wire)?.0)
    }

    /// A body with one user message, and `extra`.
    fn with(extra: Value) -> Value {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    }

    fn chat(messages: &[Message]) -> &[Message] {
        messages
    }

    fn text(m: &Message) -> String {
        m.rendered()
    }

    #[test]
    fn the_billing_block_is_dropped_and_system_messages_are_system_text() {
        let g = generate(with(json!({
            "system": [
                {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=12345;"},
                {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Be kind."}
            ],
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "system", "content": [{"type": "text", "text": "Later."}]}]
        })))
        .unwrap();
        let messages = chat(&g);
        assert_eq!(
            messages,
            [
                Message::text(Speaker::System, "Be brief.\n\nBe kind."),
                Message::text(Speaker::User, "hi"),
                Message::text(Speaker::System, "Later."),
            ]
        );
        // Only as the first block: elsewhere it is text like any other.
        let g = generate(with(json!({"system": [
            {"type": "text", "text": "A."},
            {"type": "text", "text": "x-anthropic-billing-header: b"}]})))
        .unwrap();
        assert_eq!(text(&chat(&g)[0]), "A.\n\nx-anthropic-billing-header: b");
        let g = generate(with(json!({"system": "Plain."}))).unwrap();
        assert_eq!(chat(&g)[0], Message::text(Speaker::System, "Plain."));
    }

    #[test]
    fn tool_use_and_tool_results_become_calls_and_tool_messages_in_order() {
        let g = generate(with(json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "<reminder>"},
                                         {"type": "text", "text": "list files"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "a"}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "and then?"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b",
                 "cache_control": {"type": "ephemeral"}},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                 "content": [{"type": "text", "text": "no such file"},
                             {"type": "text", "text": "(a)"}]}]}
        ]})))
        .unwrap();
        let messages = chat(&g);
        assert_eq!(messages.len(), 5, "{messages:?}");
        assert_eq!(text(&messages[0]), "<reminder>\nlist files");
        assert_eq!(messages[1].speaker, Speaker::Assistant);
        assert_eq!(messages[1].parts, [Part::Text("Looking.".into())]);
        assert_eq!(
            messages[1].tool_calls,
            [
                ToolCall {
                    id: "toolu_1".into(),
                    name: "Bash".into(),
                    arguments: r#"{"command":"ls"}"#.into()
                },
                ToolCall {
                    id: "toolu_2".into(),
                    name: "Read".into(),
                    arguments: r#"{"path":"a"}"#.into()
                }
            ]
        );
        // The results first, in order, then the rest of the turn.
        assert_eq!(messages[2], Message::text(Speaker::Tool, "a b"));
        assert_eq!(
            messages[3],
            Message::text(Speaker::Tool, "Error: no such file\n(a)")
        );
        assert_eq!(messages[4], Message::text(Speaker::User, "and then?"));
        // A turn of results alone gives no empty user message; an empty
        // failed result still says it failed.
        let g = generate(with(json!({"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": true}]}
        ]})))
        .unwrap();
        assert_eq!(
            chat(&g).last(),
            Some(&Message::text(Speaker::Tool, "Error"))
        );
        assert_eq!(chat(&g).len(), 3);
    }

    #[test]
    fn images_are_read_from_base64_or_a_url_and_unknown_blocks_are_skipped() {
        let png = "iVBORw0KGgo=";
        let g = generate(with(json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
            {"type": "document", "source": {"type": "text", "data": "skipped"}},
            {"type": "text", "text": "and"},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "search_result", "content": []}
        ]}]})))
        .unwrap();
        let parts = &chat(&g)[0].parts;
        assert_eq!(parts.len(), 3, "{parts:?}");
        assert!(
            matches!(&parts[0], Part::Image(Source::Inline(bytes)) if bytes.starts_with(b"\x89PNG"))
        );
        assert_eq!(parts[1], Part::Text("and".into()));
        assert_eq!(
            parts[2],
            Part::Image(Source::Remote("https://example.com/a.png".into()))
        );
    }
}
