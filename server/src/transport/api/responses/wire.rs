//! The Responses API's request body (`POST /v1/responses`, and
//! `/v1/responses/input_tokens`) and its translation into a [`Generate`].
//!
//! `input` is a string (one user message) or a list of items: messages
//! (`user`, `assistant`, `system`, `developer`; content a string or
//! `input_text`, `input_image`, `output_text`, `refusal` parts),
//! `function_call` items (merged into the assistant turn before them, so a
//! run of calls is one assistant message) and `function_call_output` items
//! (a tool turn each); `reasoning` items are accepted and not sent again.
//! `id` and `status` on items are ignored. Any other item type is refused
//! with a 400 naming its index. Only function tools are offered to the
//! model; other tool types (`web_search`, `namespace`, `custom`, `mcp`, …)
//! are left out, since the model could not make their calls. Options no
//! backend honours are refused naming their field; fields that only
//! describe the caller are accepted and ignored.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::super::openai::options::{self, RESPONSES};
use crate::service::Sampling;
use crate::service::{
    Generate, Input, Message, Part, ServiceError, Speaker, ToolCall, ToolChoice, parse_source,
};

/// `text`: the answer's format and verbosity.
#[derive(Debug, Default, Deserialize)]
pub struct TextConfig {
    pub format: Option<Value>,
    pub verbosity: Option<String>,
}

/// `reasoning`: the effort and the summary asked for.
#[derive(Debug, Default, Deserialize)]
pub struct ReasoningConfig {
    pub effort: Option<String>,
    /// Accepted: the model's thinking is given whole, as reasoning text.
    pub summary: Option<String>,
    /// Older name of `summary`.
    pub generate_summary: Option<String>,
}

/// A Responses request, every field typed (a wrong type is a 400 naming
/// it); unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
pub struct Request {
    pub model: Option<String>,
    pub input: Option<Value>,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
    pub conversation: Option<Value>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<Map<String, Value>>,
    pub text: Option<TextConfig>,
    pub reasoning: Option<ReasoningConfig>,
    pub store: Option<bool>,
    pub background: Option<bool>,
    pub prompt: Option<Value>,
    pub include: Option<Vec<String>>,
    pub metadata: Option<Map<String, Value>>,
    pub truncation: Option<String>,
    /// Read for their types; they describe the caller, not the answer.
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    pub service_tier: Option<String>,
    pub client_metadata: Option<Map<String, Value>>,
}

/// A request translated: the service's request (its input still to be
/// completed with any earlier conversation), and what the response
/// repeats of it.
#[derive(Debug)]
pub struct Translated {
    /// The service's request; `input` is set by [`Translated::conversation`].
    pub generate: Generate,
    /// `instructions`, sent as the first system message (not kept for a
    /// later `previous_response_id`, as in OpenAI's API).
    pub instructions: Option<String>,
    /// This request's input items, as messages.
    pub input: Vec<Message>,
    /// `previous_response_id`.
    pub previous: Option<String>,
    /// Whether to keep the response (`store`, true when absent).
    pub store: bool,
    /// Whether to stream.
    pub stream: bool,
    /// `truncation: "auto"`: the oldest messages are dropped until the
    /// conversation fits the model's context.
    pub truncate: bool,
    /// Whether the answer's text parts and deltas carry log probabilities.
    pub logprobs: bool,
    /// The response object's fields that repeat the request.
    pub echo: Map<String, Value>,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ServiceError {
    ServiceError::invalid(field, message)
}

fn unsupported(field: &str, message: impl Into<String>) -> ServiceError {
    ServiceError::unsupported(field, message)
}

/// A part's text field.
fn text_of(part: &Value, key: &str, at: &str) -> Result<String, ServiceError> {
    part.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| invalid(at, format!("`{at}.{key}` must be a string")))
}

/// Content: a string, or a list of parts.
fn content(value: &Value, field: &str) -> Result<Vec<Part>, ServiceError> {
    let parts = match value {
        Value::Null => return Ok(Vec::new()),
        Value::String(text) => return Ok(vec![Part::Text(text.clone())]),
        Value::Array(parts) => parts,
        _ => {
            return Err(invalid(
                field,
                format!("`{field}` must be a string or a list of content parts"),
            ));
        }
    };
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let at = format!("{field}[{i}]");
            match part.get("type").and_then(Value::as_str) {
                Some("input_text" | "output_text" | "text") => {
                    text_of(part, "text", &at).map(Part::Text)
                }
                Some("refusal") => text_of(part, "refusal", &at).map(Part::Text),
                Some("input_image") => {
                    let url = part
                        .get("image_url")
                        .and_then(|u| u.as_str().or_else(|| u.get("url").and_then(Value::as_str)));
                    let Some(url) = url else {
                        let message = if part.get("file_id").is_some_and(|f| !f.is_null()) {
                            format!(
                                "`{at}`: images by `file_id` are not supported (there is no file \
                                 store); send `image_url` as a data URL or an http(s) URL"
                            )
                        } else {
                            format!("`{at}.image_url` must be a string")
                        };
                        return Err(invalid(&at, message));
                    };
                    parse_source(url, i + 1)
                        .map(Part::Image)
                        .map_err(|m| invalid(&at, m))
                }
                Some(other) => Err(unsupported(
                    &at,
                    format!(
                        "`{at}`: content parts of type {other:?} are not supported (input_text, \
                         input_image, output_text and refusal are)"
                    ),
                )),
                None => Err(invalid(&at, format!("`{at}.type` is required"))),
            }
        })
        .collect()
}

/// A required string field of item `at`.
fn field<'a>(item: &'a Value, key: &str, at: &str) -> Result<&'a str, ServiceError> {
    item.get(key).and_then(Value::as_str).ok_or_else(|| {
        invalid(
            format!("{at}.{key}"),
            format!("`{at}.{key}` must be a string"),
        )
    })
}

/// `input` as messages.
pub fn input_messages(input: Option<&Value>) -> Result<Vec<Message>, ServiceError> {
    let items = match input {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(text)) => return Ok(vec![Message::text(Speaker::User, text.clone())]),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(invalid(
                "input",
                "`input` must be a string or a list of input items",
            ));
        }
    };
    let mut messages: Vec<Message> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        match item_type(item, &at)? {
            "message" => messages.push(message_item(item, &at)?),
            "function_call" => {
                let call = function_call_item(item, &at)?;
                // A run of calls (with the text before them) is one
                // assistant turn.
                match messages.last_mut() {
                    Some(last) if last.speaker == Speaker::Assistant => last.tool_calls.push(call),
                    _ => messages.push(Message {
                        speaker: Speaker::Assistant,
                        parts: Vec::new(),
                        tool_calls: vec![call],
                    }),
                }
            }
            "function_call_output" => messages.push(function_call_output_item(item, &at)?),
            // The model's earlier thinking is not sent again.
            "reasoning" => {}
            other => {
                return Err(unsupported(
                    &at,
                    format!(
                        "`{at}`: input items of type {other:?} are not supported (message, \
                         function_call, function_call_output and reasoning are)"
                    ),
                ));
            }
        }
    }
    Ok(messages)
}

/// An input item's type: `message` when it has none.
fn item_type<'a>(item: &'a Value, at: &str) -> Result<&'a str, ServiceError> {
    if !item.is_object() {
        return Err(invalid(at, format!("`{at}` must be an object")));
    }
    match item.get("type") {
        None | Some(Value::Null) => Ok("message"),
        Some(Value::String(kind)) => Ok(kind.as_str()),
        Some(_) => Err(invalid(
            format!("{at}.type"),
            format!("`{at}.type` must be a string"),
        )),
    }
}

/// A `message` item: its role and content.
fn message_item(item: &Value, at: &str) -> Result<Message, ServiceError> {
    let speaker = match field(item, "role", at)? {
        "user" => Speaker::User,
        "assistant" => Speaker::Assistant,
        "system" | "developer" => Speaker::System,
        other => {
            return Err(invalid(
                format!("{at}.role"),
                format!("`{at}.role` must be user, assistant, system or developer, got {other:?}"),
            ));
        }
    };
    let parts = content(
        item.get("content").unwrap_or(&Value::Null),
        &format!("{at}.content"),
    )?;
    Ok(Message {
        speaker,
        parts,
        tool_calls: Vec::new(),
    })
}

/// A `function_call` item: the call the model made.
fn function_call_item(item: &Value, at: &str) -> Result<ToolCall, ServiceError> {
    let arguments = match item.get("arguments") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => {
            return Err(invalid(
                format!("{at}.arguments"),
                format!("`{at}.arguments` must be a string (the arguments' JSON text)"),
            ));
        }
    };
    Ok(ToolCall {
        id: field(item, "call_id", at)?.to_owned(),
        name: field(item, "name", at)?.to_owned(),
        arguments,
    })
}

/// A `function_call_output` item: a tool turn.
fn function_call_output_item(item: &Value, at: &str) -> Result<Message, ServiceError> {
    field(item, "call_id", at)?;
    let output = item.get("output").unwrap_or(&Value::Null);
    if output.is_null() {
        return Err(invalid(
            format!("{at}.output"),
            format!("`{at}.output` is required"),
        ));
    }
    let parts = content(output, &format!("{at}.output"))?;
    Ok(Message {
        speaker: Speaker::Tool,
        parts,
        tool_calls: Vec::new(),
    })
}

/// `tools`: function tools in the service's shape; other tool types are
/// left out. Returns them and the function tools as given (for the echo).
fn tools(value: Option<Vec<Value>>) -> Result<(Vec<Value>, Vec<Value>), ServiceError> {
    let mut offered = Vec::new();
    let mut echoed = Vec::new();
    for (i, tool) in value.unwrap_or_default().into_iter().enumerate() {
        let at = format!("tools[{i}]");
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(_) => continue,
            None => return Err(invalid(&at, format!("`{at}.type` is required"))),
        }
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let Some(name) = name else {
            return Err(invalid(
                &at,
                format!(
                    "`{at}` must be {{\"type\": \"function\", \"name\": …, \"parameters\": …}} \
                     (flat: not under `function`)"
                ),
            ));
        };
        let mut function = json!({"name": name});
        for key in ["description", "parameters"] {
            if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
                function[key] = v.clone();
            }
        }
        offered.push(json!({"type": "function", "function": function}));
        echoed.push(tool);
    }
    Ok((offered, echoed))
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"` or
/// `{"type": "function", "name": …}`.
fn tool_choice(value: Option<&Value>) -> Result<ToolChoice, ServiceError> {
    let bad = || {
        invalid(
            "tool_choice",
            "`tool_choice` must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \
             \"name\": …}",
        )
    };
    match value {
        None | Some(Value::Null) => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            _ => Err(bad()),
        },
        Some(Value::Object(map)) => match map.get("type").and_then(Value::as_str) {
            Some("function") => map
                .get("name")
                .and_then(Value::as_str)
                .map(|name| ToolChoice::Function(name.to_owned()))
                .ok_or_else(bad),
            Some(kind) => Err(unsupported(
                "tool_choice",
                format!(
                    "`tool_choice` of type {kind:?} is not supported; use \"auto\" or \"none\""
                ),
            )),
            None => Err(bad()),
        },
        Some(_) => Err(bad()),
    }
}

/// What `include` asks for beyond the answer: each answer token's log
/// probability.
const LOGPROBS: &str = "message.output_text.logprobs";

/// One `include` value: the reasoning's encrypted content (nothing is
/// encrypted: a reasoning item carries its thinking as text), and the
/// results of hosted tools, which are never called (only function tools
/// are offered), are accepted; so are log probabilities (see
/// [`Request::logprobs`]); anything else is not a value OpenAI takes.
fn check_include(value: &str) -> Result<(), ServiceError> {
    const ACCEPTED: &[&str] = &[
        "reasoning.encrypted_content",
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        LOGPROBS,
    ];
    if ACCEPTED.contains(&value) {
        return Ok(());
    }
    Err(invalid(
        "include",
        format!(
            "`include` takes {}; got {value:?}",
            ACCEPTED
                .iter()
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

impl Request {
    /// The log probabilities asked for: `include` with
    /// `"message.output_text.logprobs"`, with `top_logprobs` (0 to 20)
    /// alternatives at each token.
    ///
    /// # Errors
    /// `top_logprobs` over 20, or above 0 without the `include` value.
    fn logprobs(&self) -> Result<Option<u8>, ServiceError> {
        let asked = self.include.iter().flatten().any(|v| v == LOGPROBS);
        let top = self.top_logprobs.unwrap_or(0);
        if top > 20 {
            return Err(invalid(
                "top_logprobs",
                "`top_logprobs` must be between 0 and 20",
            ));
        }
        if top > 0 && !asked {
            return Err(invalid(
                "top_logprobs",
                format!("`top_logprobs` needs `include: [\"{LOGPROBS}\"]`"),
            ));
        }
        Ok(asked.then_some(top as u8))
    }

    /// Refuses the options no backend honours (`background`, a stored
    /// `prompt` template, a `conversation`) and a
    /// malformed `truncation`; the fields that describe the caller are
    /// read for their types only.
    fn refuse_unsupported(&self) -> Result<(), ServiceError> {
        if self.background == Some(true) {
            return Err(unsupported(
                "background",
                "`background` responses are not supported: send the request without it (and \
                 `stream: true` to read the answer as it is made)",
            ));
        }
        if self.prompt.as_ref().is_some_and(|p| !p.is_null()) {
            return Err(unsupported(
                "prompt",
                "`prompt` (a stored prompt template) is not supported: send the instructions and \
                 input themselves",
            ));
        }
        if self.conversation.as_ref().is_some_and(|c| !c.is_null()) {
            return Err(unsupported(
                "conversation",
                "`conversation` is not supported (this server keeps no conversation objects): \
                 send the whole conversation in `input`, or continue a response with \
                 `previous_response_id`",
            ));
        }
        if let Some(tier) = self
            .service_tier
            .as_deref()
            .filter(|t| !matches!(*t, "auto" | "default"))
        {
            return Err(unsupported(
                "service_tier",
                format!(
                    "`service_tier` {tier:?} is not supported: this server has one tier \
                     (\"auto\" and \"default\" are accepted)"
                ),
            ));
        }
        for value in self.include.iter().flatten() {
            check_include(value)?;
        }
        if let Some(truncation) = self.truncation.as_deref()
            && !matches!(truncation, "auto" | "disabled")
        {
            return Err(invalid(
                "truncation",
                format!("`truncation` must be \"auto\" or \"disabled\", got {truncation:?}"),
            ));
        }
        let _ = (
            &self.user,
            &self.safety_identifier,
            &self.prompt_cache_key,
            &self.prompt_cache_retention,
            &self.client_metadata,
            &self.stream_options,
            self.max_tool_calls,
        );
        Ok(())
    }

    /// The response object's fields that repeat the request: `tools` the
    /// function tools offered, `text` and `reasoning` as given.
    fn echo(
        &self,
        tools: Vec<Value>,
        text: TextConfig,
        reasoning: ReasoningConfig,
    ) -> Map<String, Value> {
        let mut echo = Map::new();
        echo.insert(
            "instructions".into(),
            self.instructions.clone().map_or(Value::Null, Value::String),
        );
        echo.insert(
            "max_output_tokens".into(),
            self.max_output_tokens.map_or(Value::Null, Value::from),
        );
        echo.insert(
            "previous_response_id".into(),
            self.previous_response_id
                .clone()
                .map_or(Value::Null, Value::String),
        );
        echo.insert(
            "parallel_tool_calls".into(),
            Value::Bool(self.parallel_tool_calls.unwrap_or(true)),
        );
        echo.insert(
            "tool_choice".into(),
            self.tool_choice
                .clone()
                .filter(|c| !c.is_null())
                .unwrap_or_else(|| json!("auto")),
        );
        echo.insert("tools".into(), Value::Array(tools));
        let mut text_echo = json!({"format": text.format.filter(|f| !f.is_null())
            .unwrap_or_else(|| json!({"type": "text"}))});
        if let Some(verbosity) = text.verbosity {
            text_echo["verbosity"] = json!(verbosity);
        }
        echo.insert("text".into(), text_echo);
        echo.insert(
            "reasoning".into(),
            json!({"effort": reasoning.effort,
                   "summary": reasoning.summary.or(reasoning.generate_summary)}),
        );
        echo.insert("temperature".into(), json!(self.temperature));
        echo.insert("top_p".into(), json!(self.top_p));
        echo.insert(
            "truncation".into(),
            json!(self.truncation.as_deref().unwrap_or("disabled")),
        );
        echo.insert(
            "metadata".into(),
            Value::Object(self.metadata.clone().unwrap_or_default()),
        );
        echo.insert("store".into(), json!(self.store.unwrap_or(true)));
        echo.insert("user".into(), json!(self.user));
        echo
    }

    /// The service's request and what the response repeats.
    ///
    /// # Errors
    /// A malformed field, or an option no backend honours (`background`,
    /// a stored `prompt` template, a `conversation`).
    pub fn translate(mut self) -> Result<Translated, ServiceError> {
        self.refuse_unsupported()?;
        let logprobs = self.logprobs()?;
        let input = input_messages(self.input.as_ref())?;
        let (offered, echoed_tools) = tools(self.tools.take())?;
        let choice = tool_choice(self.tool_choice.as_ref())?;
        let text = self.text.take().unwrap_or_default();
        let output_format = options::format(text.format.as_ref(), &RESPONSES)?;
        let reasoning = self.reasoning.take().unwrap_or_default();
        let enable_thinking = options::thinking(reasoning.effort.as_deref(), &RESPONSES)?;
        let budget = reasoning
            .effort
            .as_deref()
            .and_then(crate::service::ThinkingBudget::of_effort);
        let echo = self.echo(echoed_tools, text, reasoning);
        Ok(Translated {
            generate: Generate {
                model: self.model,
                input: Input::Chat(Vec::new()),
                sampling: Sampling {
                    temperature: self.temperature,
                    top_p: self.top_p,
                    thinking_budget: budget,
                    logprobs,
                    ..Sampling::default()
                },
                max_tokens: self.max_output_tokens,
                stop: Vec::new(),
                tools: offered,
                tool_choice: choice,
                lora: None,
                keep_alive: None,
                thinking: enable_thinking,
                format: output_format,
                format_field: "text.format",
                context: None,
                max_tool_calls: (self.parallel_tool_calls == Some(false)).then_some(1),
                suffix: None,
                session: self.prompt_cache_key.clone(),
            },
            instructions: self.instructions.filter(|i| !i.is_empty()),
            input,
            previous: self.previous_response_id,
            store: self.store.unwrap_or(true),
            stream: self.stream,
            truncate: self.truncation.as_deref() == Some("auto"),
            logprobs: logprobs.is_some(),
            echo,
        })
    }
}

impl Translated {
    /// The conversation to send: the instructions, then `earlier` (the
    /// conversation of `previous_response_id`), then this request's input.
    /// Returns it with the part to keep for a later request (all but the
    /// instructions).
    pub fn conversation(&self, earlier: &[Message]) -> (Vec<Message>, Vec<Message>) {
        let mut kept = Vec::with_capacity(earlier.len() + self.input.len());
        kept.extend_from_slice(earlier);
        kept.extend(self.input.iter().cloned());
        let mut sent = Vec::with_capacity(kept.len() + 1);
        if let Some(instructions) = &self.instructions {
            sent.push(Message::text(Speaker::System, instructions.clone()));
        }
        sent.extend(kept.iter().cloned());
        (sent, kept)
    }
}

#[cfg(test)]
mod tests;
