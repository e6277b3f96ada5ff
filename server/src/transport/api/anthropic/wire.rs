//! Anthropic's request body (`/v1/messages`, `/v1/messages/count_tokens`)
//! and its translation into a [`Generate`]. Every field Anthropic defines
//! that the server reads is read with its type (a wrong type is a 400
//! naming the field); what it cannot honour is refused by the service;
//! what only steers Anthropic's own service (`metadata`, `cache_control`,
//! `context_management`, `output_config.effort`, …) is ignored, as are
//! unknown fields.
//!
//! The conversation is read by [`super::content`]; a tool offered with
//! `defer_loading` is offered only once a `tool_reference` block of the
//! conversation names it.

use serde::Deserialize;
use serde_json::{Value, json};

use super::content::{WireMessage, conversation};
use crate::service::Sampling;
use crate::service::{Generate, Input, OutputFormat, ServiceError, ToolChoice};

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
    /// `"auto"` or `"standard_only"`: this server has one tier.
    pub service_tier: Option<String>,
    /// `user_id` names the caller's session (Claude Code's holds its
    /// session id): read for the conversation's key only.
    pub metadata: Option<Value>,
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
    Auto {
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        name: String,
        disable_parallel_tool_use: Option<bool>,
    },
    None,
}

impl WireToolChoice {
    /// `disable_parallel_tool_use: true`: one call at most.
    fn one_call(&self) -> bool {
        match self {
            Self::Auto {
                disable_parallel_tool_use,
            }
            | Self::Any {
                disable_parallel_tool_use,
            }
            | Self::Tool {
                disable_parallel_tool_use,
                ..
            } => *disable_parallel_tool_use == Some(true),
            Self::None => false,
        }
    }
}

/// `thinking` (`display` is ignored; `budget_tokens` is checked as
/// Anthropic checks it, and ends the thinking once spent).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireThinking {
    Enabled { budget_tokens: Option<i64> },
    Disabled,
    Adaptive,
    BetweenTools { budget_tokens: Option<i64> },
}

/// The least `thinking.budget_tokens` Anthropic takes.
const MIN_THINKING_BUDGET: i64 = 1024;

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

/// `thinking.budget_tokens`: at least 1024, as Anthropic requires. The
/// runner closes the thinking block once it has taken the budget; the
/// thinking and the answer together stay within `max_tokens`, so how the
/// budget compares with `max_tokens` is not checked.
fn check_budget(budget: Option<i64>) -> Result<(), ServiceError> {
    match budget {
        Some(budget) if budget < MIN_THINKING_BUDGET => Err(invalid(
            "thinking.budget_tokens",
            format!(
                "`thinking.budget_tokens` must be at least {MIN_THINKING_BUDGET}, got {budget}"
            ),
        )),
        _ => Ok(()),
    }
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
        let (messages, referenced) = conversation(self.system, wire)?;
        let one_call = self
            .tool_choice
            .as_ref()
            .is_some_and(WireToolChoice::one_call);
        let tool_choice = match self.tool_choice {
            None | Some(WireToolChoice::Auto { .. }) => ToolChoice::Auto,
            Some(WireToolChoice::Any { .. }) => ToolChoice::Required,
            Some(WireToolChoice::Tool { name, .. }) => ToolChoice::Function(name),
            Some(WireToolChoice::None) => ToolChoice::None,
        };
        if let Some(tier) = self
            .service_tier
            .as_deref()
            .filter(|t| !matches!(*t, "auto" | "standard_only"))
        {
            return Err(invalid(
                "service_tier",
                format!("`service_tier` must be \"auto\" or \"standard_only\", got {tier:?}"),
            ));
        }
        let (thinking, budget) = match self.thinking {
            None | Some(WireThinking::Adaptive) => (None, None),
            Some(
                WireThinking::Enabled { budget_tokens }
                | WireThinking::BetweenTools { budget_tokens },
            ) => {
                check_budget(budget_tokens)?;
                (
                    Some(true),
                    budget_tokens.map(|b| {
                        crate::service::ThinkingBudget::named(u32::try_from(b).unwrap_or(u32::MAX))
                    }),
                )
            }
            Some(WireThinking::Disabled) => (Some(false), None),
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
                thinking_budget: budget,
                ..Sampling::default()
            },
            max_tokens,
            stop: self.stop_sequences.unwrap_or_default(),
            tools: tools(self.tools.unwrap_or_default(), &referenced)?,
            tool_choice,
            lora: None,
            keep_alive: None,
            thinking,
            format,
            format_field: "output_config.format",
            context: None,
            max_tool_calls: one_call.then_some(1),
            suffix: None,
            session: self
                .metadata
                .as_ref()
                .and_then(|m| m.get("user_id"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{Message, Speaker};

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

    #[test]
    fn a_thinking_budget_is_checked_as_anthropic_checks_it_and_one_call_is_honoured() {
        for budget in [0, 512, 1023] {
            let body = with(json!({"thinking": {"type": "enabled", "budget_tokens": budget}}));
            let err = generate(body).unwrap_err();
            assert_eq!(err.field(), Some("thinking.budget_tokens"), "{err}");
        }
        let mut body = with(json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}));
        body["max_tokens"] = json!(4096);
        assert_eq!(generate(body).unwrap().thinking, Some(true));
        let err = generate(with(json!({"service_tier": "priority"}))).unwrap_err();
        assert_eq!(err.field(), Some("service_tier"));
        let g = generate(with(json!({
            "service_tier": "standard_only",
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}
        })))
        .unwrap();
        assert_eq!(g.max_tool_calls, Some(1));
    }
}
