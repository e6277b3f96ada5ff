//! Anthropic's request body (`/v1/messages`, `/v1/messages/count_tokens`)
//! and its translation into a [`Generate`]. Every field Anthropic defines
//! that the server reads is read with its type (a wrong type is a 400
//! naming the field); what it cannot honour is refused by the service;
//! what only steers Anthropic's own service (`metadata`, `cache_control`,
//! `context_management`, `output_config.effort`, …) is ignored, as are
//! unknown fields.
//!
//! The conversation keeps its order, with two rules of Anthropic's: a
//! user turn's tool results come first, each a tool message, before the
//! rest of the turn; and a tool offered with `defer_loading` is offered
//! only once a `tool_reference` block of the conversation names it.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::engine::Sampling;
use crate::service::{
    Generate, Input, Message, OutputFormat, Part, ServiceError, Speaker, ToolCall, ToolChoice,
    parse_source,
};

/// How Claude Code's first system block starts: attribution that changes
/// on every request (so no two prompts would be the same); dropped.
/// `CLAUDE_CODE_ATTRIBUTION_HEADER=0` stops Claude Code sending it.
const BILLING_HEADER: &str = "x-anthropic-billing-header:";

/// A messages (or count_tokens) request.
#[derive(Debug, Deserialize)]
pub struct Request {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub system: Value,
    pub messages: Option<Vec<WireMessage>>,
    #[serde(default)]
    pub stream: bool,
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub tools: Option<Vec<WireTool>>,
    pub tool_choice: Option<WireToolChoice>,
    pub thinking: Option<WireThinking>,
    pub output_config: Option<OutputConfig>,
}

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

/// A tool: a client tool (`{name, description?, input_schema}`, `type`
/// absent or `custom`) or one of Anthropic's server tools (another
/// `type`), which are skipped.
#[derive(Debug, Deserialize)]
pub struct WireTool {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
    pub defer_loading: Option<bool>,
}

/// `tool_choice` (`disable_parallel_tool_use` is ignored: the model
/// decides how many calls it makes).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireToolChoice {
    Auto,
    Any,
    Tool { name: String },
    None,
}

/// `thinking` (`budget_tokens` and `display` are ignored).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireThinking {
    Enabled,
    Disabled,
    Adaptive,
    BetweenTools,
}

/// `output_config` (`effort` is ignored).
#[derive(Debug, Deserialize)]
pub struct OutputConfig {
    pub format: Option<WireFormat>,
}

/// `output_config.format`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireFormat {
    JsonSchema { schema: Value },
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

/// The tools as the service takes them (OpenAI's function shape): server
/// tools skipped, deferred tools only once `referenced`.
fn tools(wire: Vec<WireTool>, referenced: &[String]) -> Result<Vec<Value>, ServiceError> {
    let mut tools = Vec::with_capacity(wire.len());
    for (i, tool) in wire.into_iter().enumerate() {
        if tool.kind.as_deref().is_some_and(|k| k != "custom") {
            continue;
        }
        let name = tool.name.filter(|n| !n.is_empty()).ok_or_else(|| {
            invalid(
                format!("tools[{i}].name"),
                format!("`tools[{i}].name` is required"),
            )
        })?;
        if tool.defer_loading == Some(true) && !referenced.contains(&name) {
            continue;
        }
        let parameters = tool
            .input_schema
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        let mut function = json!({"name": name, "parameters": parameters});
        if let Some(description) = tool.description {
            function["description"] = json!(description);
        }
        tools.push(json!({"type": "function", "function": function}));
    }
    Ok(tools)
}

impl Request {
    /// The model the request names (Anthropic requires one).
    ///
    /// # Errors
    /// When there is none.
    pub fn model(&self) -> Result<String, ServiceError> {
        self.model
            .clone()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| invalid("model", "`model` is required"))
    }

    /// `max_tokens`, which a messages request must give.
    ///
    /// # Errors
    /// When it is absent.
    pub fn require_max_tokens(&self) -> Result<(), ServiceError> {
        match self.max_tokens {
            Some(_) => Ok(()),
            None => Err(invalid("max_tokens", "`max_tokens` is required")),
        }
    }

    /// The service's request.
    ///
    /// # Errors
    /// A field that is malformed (`max_tokens` under 1, a block without
    /// its fields, a tool without a name, …), naming it.
    pub fn generate(self) -> Result<Generate, ServiceError> {
        let max_tokens = match self.max_tokens {
            None => None,
            Some(n) if n >= 1 => Some(n.unsigned_abs()),
            Some(n) => {
                return Err(invalid(
                    "max_tokens",
                    format!("`max_tokens` must be at least 1, got {n}"),
                ));
            }
        };
        let wire = self
            .messages
            .ok_or_else(|| invalid("messages", "`messages` is required"))?;
        let mut reader = Reader::default();
        let mut messages = Vec::with_capacity(wire.len() + 1);
        if let Some(text) = system(self.system)? {
            messages.push(Message::text(Speaker::System, text));
        }
        for (i, message) in wire.into_iter().enumerate() {
            reader.message(message, i, &mut messages)?;
        }
        let tool_choice = match self.tool_choice {
            None | Some(WireToolChoice::Auto) => ToolChoice::Auto,
            Some(WireToolChoice::Any) => ToolChoice::Required,
            Some(WireToolChoice::Tool { name }) => ToolChoice::Function(name),
            Some(WireToolChoice::None) => ToolChoice::None,
        };
        let thinking = match self.thinking {
            None | Some(WireThinking::Adaptive) => None,
            Some(WireThinking::Enabled | WireThinking::BetweenTools) => Some(true),
            Some(WireThinking::Disabled) => Some(false),
        };
        let format = match self.output_config.and_then(|c| c.format) {
            None => OutputFormat::Text,
            Some(WireFormat::JsonSchema { schema }) => OutputFormat::JsonSchema {
                name: None,
                schema,
                strict: true,
            },
        };
        Ok(Generate {
            model: self.model,
            input: Input::Chat(messages),
            sampling: Sampling {
                temperature: self.temperature,
                top_p: self.top_p,
                top_k: self.top_k,
                ..Sampling::default()
            },
            max_tokens,
            stop: self.stop_sequences.unwrap_or_default(),
            tools: tools(self.tools.unwrap_or_default(), &reader.referenced)?,
            tool_choice,
            lora: None,
            keep_alive: None,
            thinking,
            format,
            format_field: "output_config.format",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::ImageSource as Source;

    fn generate(body: Value) -> Result<Generate, ServiceError> {
        let request: Request = crate::service::parse_body(body.to_string().as_bytes())?;
        request.generate()
    }

    fn with(extra: Value) -> Value {
        let mut body = json!({"model": "m", "max_tokens": 8,
                              "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    }

    fn chat(g: &Generate) -> &[Message] {
        match &g.input {
            Input::Chat(messages) => messages,
            Input::Prompt { .. } => panic!("a chat"),
        }
    }

    fn text(m: &Message) -> String {
        m.rendered()
    }

    #[test]
    fn a_malformed_field_is_refused_naming_it() {
        for (extra, field) in [
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"max_tokens": -3}), "max_tokens"),
            (json!({"max_tokens": "many"}), "max_tokens"),
            (json!({"system": 5}), "system"),
            (json!({"system": [{"type": "text"}]}), "system[0]"),
            (json!({"stop_sequences": "END"}), "stop_sequences"),
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"top_k": -1}), "top_k"),
            (
                json!({"tool_choice": {"type": "sometimes"}}),
                "tool_choice.type",
            ),
            (json!({"tool_choice": {"type": "tool"}}), "tool_choice"),
            (json!({"thinking": {"type": "maybe"}}), "thinking.type"),
            (json!({"tools": [{"input_schema": {}}]}), "tools[0].name"),
            (json!({"tools": [{"name": 5}]}), "tools[0].name"),
            (
                json!({"output_config": {"format": {"type": "xml"}}}),
                "output_config.format.type",
            ),
            (
                json!({"messages": [{"role": "robot", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "user", "content": 5}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "messages[0].content[0]",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}),
                "messages[0].content[0]",
            ),
            (
                json!({"messages": [{"role": "user", "content": [
                    {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}),
                "messages[0].content[0]",
            ),
            (
                json!({"messages": [{"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": "!!"}}]}]}),
                "messages[0].content[0]",
            ),
            (
                json!({"messages": [{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": 5}]}]}),
                "messages[0].content[0].content",
            ),
        ] {
            let err = generate(with(extra.clone())).unwrap_err();
            assert_eq!(err.field(), Some(field), "{extra}: {err}");
            assert_eq!(err.status(), 400, "{extra}");
        }
        let err = generate(json!({"model": "m", "max_tokens": 8})).unwrap_err();
        assert_eq!(err.field(), Some("messages"));
        let request: Request = crate::service::parse_body(br#"{"messages": []}"#).unwrap();
        assert_eq!(
            request.require_max_tokens().unwrap_err().field(),
            Some("max_tokens")
        );
        assert_eq!(request.model().unwrap_err().field(), Some("model"));
    }

    #[test]
    fn options_reach_the_service_and_anthropics_own_are_ignored() {
        let g = generate(with(json!({
            "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9, "top_k": 40,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "metadata": {"user_id": "u"}, "cache_control": {"type": "ephemeral"},
            "context_management": {"edits": []}, "service_tier": "auto",
            "output_config": {"effort": "high"}
        })))
        .unwrap();
        assert_eq!(g.model.as_deref(), Some("m"));
        assert_eq!(g.max_tokens, Some(8));
        assert_eq!(g.stop, vec!["END".to_owned()]);
        assert_eq!(
            (g.sampling.temperature, g.sampling.top_p, g.sampling.top_k),
            (Some(0.5), Some(0.9), Some(40))
        );
        assert_eq!(g.thinking, Some(true));
        assert_eq!(g.tool_choice, ToolChoice::Required);
        assert_eq!(g.format, OutputFormat::Text);
        assert_eq!(
            g.tools,
            vec![json!({"type": "function",
                        "function": {"name": "f", "parameters": {"type": "object"}}})]
        );
        for (thinking, expected) in [
            (json!({"type": "disabled"}), Some(false)),
            (json!({"type": "adaptive", "display": "omitted"}), None),
        ] {
            let g = generate(with(json!({ "thinking": thinking }))).unwrap();
            assert_eq!(g.thinking, expected);
        }
        for (choice, expected) in [
            (json!({"type": "auto"}), ToolChoice::Auto),
            (json!({"type": "none"}), ToolChoice::None),
            (
                json!({"type": "tool", "name": "f"}),
                ToolChoice::Function("f".into()),
            ),
        ] {
            let g = generate(with(json!({ "tool_choice": choice }))).unwrap();
            assert_eq!(g.tool_choice, expected);
        }
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let g = generate(with(json!({"output_config": {
            "format": {"type": "json_schema", "schema": schema}}})))
        .unwrap();
        assert!(
            matches!(&g.format, OutputFormat::JsonSchema { schema: s, .. } if *s == schema),
            "{:?}",
            g.format
        );
        assert_eq!(g.format_field, "output_config.format");
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

    #[test]
    fn server_tools_are_skipped_and_deferred_tools_wait_for_a_reference() {
        let tools = json!([
            {"name": "WebFetch", "input_schema": {"type": "object"}, "defer_loading": true},
            {"name": "Other", "input_schema": {"type": "object"}, "defer_loading": true},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            {"type": "custom", "name": "Bash", "description": "Runs a command",
             "input_schema": {"type": "object"}}
        ]);
        let names = |g: &Generate| -> Vec<String> {
            g.tool_names().into_iter().map(str::to_owned).collect()
        };
        let g = generate(with(json!({ "tools": tools }))).unwrap();
        assert_eq!(names(&g), ["Bash"]);
        assert_eq!(
            g.tools[0].pointer("/function/description"),
            Some(&json!("Runs a command"))
        );
        let g = generate(with(json!({"tools": tools, "messages": [
            {"role": "user", "content": "find a tool"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ToolSearch",
                                               "input": {"query": "fetch"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                          "content": [{"type": "tool_reference",
                                                       "tool_name": "WebFetch"}]}]}
        ]})))
        .unwrap();
        assert_eq!(names(&g), ["WebFetch", "Bash"]);
        assert_eq!(
            chat(&g).last(),
            Some(&Message::text(Speaker::Tool, "Tool WebFetch loaded."))
        );
    }
}
