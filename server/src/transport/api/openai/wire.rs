//! OpenAI's request bodies (`/v1/chat/completions`, `/v1/completions`)
//! and their translation into a [`Generate`]. Every field OpenAI defines
//! is read with its type (a wrong type is a 400 naming the field); options
//! the server honours are passed on, the ones it cannot are refused by
//! the service; fields it does not know are ignored, as OpenAI does.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::service::{
    Generate, ImageSource, Input, Message, Part, ServiceError, Speaker, ToolCall, ToolChoice,
    parse_source,
};
use crate::service::{Role, Sampling};

use super::options::{self, CHAT};

/// The most stop strings OpenAI takes.
const MAX_STOP: usize = 4;

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// A usage chunk before `[DONE]`.
    #[serde(default)]
    pub include_usage: bool,
}

/// A chat or text completion request (one type: the two share every
/// option; `messages` and `prompt` say which).
#[derive(Debug, Deserialize)]
pub struct Request {
    pub model: Option<String>,
    pub messages: Option<Vec<WireMessage>>,
    pub prompt: Option<Value>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub repeat_penalty: Option<f64>,
    /// Best effort in OpenAI too; read for its type, not applied.
    pub seed: Option<i64>,
    /// Read for its type; not used.
    pub user: Option<String>,
    pub stop: Option<Value>,
    pub n: Option<u32>,
    /// Chat: a boolean; text completions: a number of log probabilities.
    pub logprobs: Option<Value>,
    pub top_logprobs: Option<u32>,
    /// Text completions: the prompt repeated before the answer.
    pub echo: Option<bool>,
    /// Text completions: text after the insertion point.
    pub suffix: Option<String>,
    /// Text completions: answers to choose the best of.
    pub best_of: Option<u32>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    /// `false`: one call at most (the answer after it is dropped).
    pub parallel_tool_calls: Option<bool>,
    /// Refused unless empty: the runtime's sampler takes no bias.
    pub logit_bias: Option<Map<String, Value>>,
    /// `"auto"` or `"default"`: this server has one tier.
    pub service_tier: Option<String>,
    /// Predicted output: refused.
    pub prediction: Option<Value>,
    /// Only `["text"]`.
    pub modalities: Option<Vec<String>>,
    /// Audio output: refused.
    pub audio: Option<Value>,
    /// `true` refused: chat completions are not stored.
    pub store: Option<bool>,
    /// Tags of a stored completion: read for its type, nothing is stored.
    pub metadata: Option<Map<String, Value>>,
    /// A hint to OpenAI's own models: read for its type and not applied,
    /// as on the Responses API, where Codex sends it with every request.
    pub verbosity: Option<String>,
    /// Web search: refused.
    pub web_search_options: Option<Value>,
    /// The functions API before `tools`: refused, naming `tools`.
    pub functions: Option<Value>,
    pub function_call: Option<Value>,
    /// Read for their types: they identify the caller to OpenAI's own
    /// abuse monitoring and prompt caching, and change no answer.
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub response_format: Option<Value>,
    pub reasoning_effort: Option<String>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// rkllm-server's own: a LoRA adapter of the model.
    pub lora: Option<String>,
}

/// One message as OpenAI sends it.
#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: Value,
    pub tool_calls: Option<Vec<WireToolCall>>,
    pub tool_call_id: Option<String>,
}

/// A call in an assistant message.
#[derive(Debug, Deserialize)]
pub struct WireToolCall {
    pub id: Option<String>,
    pub function: WireFunction,
}

/// A call's function: its name and its arguments as JSON text.
#[derive(Debug, Deserialize)]
pub struct WireFunction {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ServiceError {
    ServiceError::invalid(field, message)
}

/// `stop`: a string or up to four strings.
fn stop(value: Option<Value>) -> Result<Vec<String>, ServiceError> {
    let stops = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(s) => Ok(s),
                _ => Err(invalid(
                    "stop",
                    "`stop` must be a string or an array of strings",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(invalid(
                "stop",
                "`stop` must be a string or an array of strings",
            ));
        }
    };
    if stops.len() > MAX_STOP {
        return Err(invalid(
            "stop",
            format!("`stop` takes up to {MAX_STOP} strings, got {}", stops.len()),
        ));
    }
    Ok(stops)
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"` or
/// `{"type": "function", "function": {"name": …}}`.
fn tool_choice(value: Option<Value>) -> Result<ToolChoice, ServiceError> {
    let bad = || {
        invalid(
            "tool_choice",
            "`tool_choice` must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \
             \"function\": {\"name\": …}}",
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
        Some(Value::Object(map)) => map
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|_| map.get("type").and_then(Value::as_str) == Some("function"))
            .map(|name| ToolChoice::Function(name.to_owned()))
            .ok_or_else(bad),
        Some(_) => Err(bad()),
    }
}

/// `tools`: function tools, each with a name.
fn tools(value: Option<Vec<Value>>) -> Result<Vec<Value>, ServiceError> {
    let tools = value.unwrap_or_default();
    for (i, tool) in tools.iter().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str);
        let name = tool.pointer("/function/name").and_then(Value::as_str);
        if kind != Some("function") || name.is_none_or(str::is_empty) {
            return Err(invalid(
                format!("tools[{i}]"),
                format!(
                    "`tools[{i}]` must be {{\"type\": \"function\", \"function\": {{\"name\": …, \
                     \"parameters\": …}}}}"
                ),
            ));
        }
    }
    Ok(tools)
}

/// Thinking on or off: `reasoning_effort` (`"none"` is off; the levels
/// are on) or `chat_template_kwargs.enable_thinking`.
fn thinking(
    effort: Option<&str>,
    kwargs: Option<&Map<String, Value>>,
) -> Result<Option<bool>, ServiceError> {
    let from_kwargs = match kwargs.and_then(|k| k.get("enable_thinking")) {
        None | Some(Value::Null) => None,
        Some(Value::Bool(on)) => Some(*on),
        Some(_) => {
            return Err(invalid(
                "chat_template_kwargs.enable_thinking",
                "`chat_template_kwargs.enable_thinking` must be true or false",
            ));
        }
    };
    let from_effort = options::thinking(effort, &CHAT)?;
    Ok(from_kwargs.or(from_effort))
}

/// A message's content: a string, or parts (`text`, `image_url`).
fn content(value: Value, field: &str) -> Result<Vec<Part>, ServiceError> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::String(text) => Ok(vec![Part::Text(text)]),
        Value::Array(parts) => parts
            .into_iter()
            .enumerate()
            .map(|(i, part)| {
                let at = format!("{field}[{i}]");
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => part
                        .get("text")
                        .and_then(Value::as_str)
                        .map(|t| Part::Text(t.to_owned()))
                        .ok_or_else(|| invalid(&at, format!("`{at}.text` must be a string"))),
                    Some("image_url") => {
                        let url = part.get("image_url").and_then(|u| {
                            u.as_str().or_else(|| u.get("url").and_then(Value::as_str))
                        });
                        let url = url.ok_or_else(|| {
                            invalid(&at, format!("`{at}.image_url.url` must be a string"))
                        })?;
                        parse_source(url, i + 1)
                            .map(Part::Image)
                            .map_err(|m| invalid(&at, m))
                    }
                    Some(other) => Err(ServiceError::unsupported(
                        at.clone(),
                        format!(
                            "`{at}`: content parts of type {other:?} are not supported (text and \
                             image_url are)"
                        ),
                    )),
                    None => Err(invalid(&at, format!("`{at}.type` is required"))),
                }
            })
            .collect(),
        _ => Err(invalid(
            field,
            format!("`{field}` must be a string or an array of content parts"),
        )),
    }
}

/// A conversation in OpenAI's shape as neutral messages.
fn messages(wire: Vec<WireMessage>) -> Result<Vec<Message>, ServiceError> {
    wire.into_iter()
        .enumerate()
        .map(|(i, m)| {
            let speaker = match m.role.as_str() {
                "system" | "developer" => Speaker::System,
                "user" => Speaker::User,
                "assistant" => Speaker::Assistant,
                "tool" | "function" => Speaker::Tool,
                other => {
                    return Err(invalid(
                        format!("messages[{i}].role"),
                        format!(
                            "`messages[{i}].role` must be system, developer, user, assistant or \
                             tool, got {other:?}"
                        ),
                    ));
                }
            };
            let parts = content(m.content, &format!("messages[{i}].content"))?;
            let tool_calls = m
                .tool_calls
                .unwrap_or_default()
                .into_iter()
                .map(|call| ToolCall {
                    id: call.id.unwrap_or_default(),
                    name: call.function.name,
                    arguments: call.function.arguments,
                })
                .collect();
            let _ = m.tool_call_id;
            Ok(Message {
                speaker,
                parts,
                tool_calls,
            })
        })
        .collect()
}

impl Request {
    /// Whether the client wants a usage chunk at the end of a stream.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }

    /// The service's request: a chat (`chat`) or a prompt.
    ///
    /// # Errors
    /// A field that is malformed, or an option no backend honours (`n`
    /// over 1, `logprobs`).
    pub fn generate(self, chat: bool) -> Result<Generate, ServiceError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ServiceError::unsupported(
                "n",
                "only `n: 1` is supported: one answer per request",
            ));
        }
        let logprobs = self.logprobs(chat)?;
        for (field, given, why) in [
            (
                "echo",
                self.echo == Some(true),
                "the answer does not repeat the prompt",
            ),
            (
                "suffix",
                chat && self.suffix.as_deref().is_some_and(|s| !s.is_empty()),
                "a chat has no gap to fill; fill-in-the-middle is `/v1/completions` with \
                 `prompt` and `suffix`",
            ),
            (
                "best_of",
                self.best_of.is_some_and(|n| n > 1),
                "one answer is made per request",
            ),
        ] {
            if given {
                return Err(ServiceError::unsupported(
                    field,
                    format!("`{field}` is not supported: {why}"),
                ));
            }
        }
        self.refuse_unsupported()?;
        let _ = (
            &self.user,
            &self.metadata,
            &self.verbosity,
            &self.safety_identifier,
        );
        let max_tool_calls = (self.parallel_tool_calls == Some(false)).then_some(1);
        let input = if chat {
            let wire = self
                .messages
                .ok_or_else(|| invalid("messages", "`messages` is required"))?;
            Input::Chat(messages(wire)?)
        } else {
            let text = match self.prompt {
                Some(Value::String(s)) => s,
                Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
                    items[0].as_str().unwrap_or_default().to_owned()
                }
                _ => return Err(invalid("prompt", "`prompt` must be a string")),
            };
            Input::Prompt {
                text,
                system: None,
                role: Role::User,
                images: Vec::<ImageSource>::new(),
            }
        };
        Ok(Generate {
            model: self.model,
            input,
            sampling: Sampling {
                temperature: self.temperature,
                top_p: self.top_p,
                top_k: self.top_k,
                repeat_penalty: self.repeat_penalty,
                frequency_penalty: self.frequency_penalty,
                presence_penalty: self.presence_penalty,
                logprobs,
                thinking_budget: self
                    .reasoning_effort
                    .as_deref()
                    .and_then(crate::service::ThinkingBudget::of_effort),
                seed: Sampling::client_seed(self.seed),
                ..Sampling::default()
            },
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            stop: stop(self.stop)?,
            tools: tools(self.tools)?,
            tool_choice: tool_choice(self.tool_choice)?,
            lora: self.lora,
            keep_alive: None,
            thinking: thinking(
                self.reasoning_effort.as_deref(),
                self.chat_template_kwargs.as_ref(),
            )?,
            format: options::format(self.response_format.as_ref(), &CHAT)?,
            format_field: "response_format",
            context: None,
            max_tool_calls,
            suffix: self.suffix.filter(|s| !s.is_empty()),
            session: self.prompt_cache_key,
        })
    }

    /// The log probabilities asked for: chat's `logprobs: true` with
    /// `top_logprobs` (0 to 20) alternatives, or text completions'
    /// `logprobs: N` (0 to 5).
    ///
    /// # Errors
    /// A value of the wrong type or out of range; `top_logprobs` without
    /// `logprobs: true`.
    fn logprobs(&self, chat: bool) -> Result<Option<u8>, ServiceError> {
        let top = self.top_logprobs.filter(|_| chat);
        let asked = match (&self.logprobs, chat) {
            (None | Some(Value::Null | Value::Bool(false)), _) => None,
            (Some(Value::Bool(true)), true) => Some(top.unwrap_or(0)),
            (Some(Value::Number(n)), false) if n.as_u64().is_some_and(|n| n <= 5) => {
                n.as_u64().and_then(|n| u32::try_from(n).ok())
            }
            (Some(_), true) => {
                return Err(invalid("logprobs", "`logprobs` must be true or false"));
            }
            (Some(_), false) => {
                return Err(invalid(
                    "logprobs",
                    "`logprobs` must be a number of alternatives from 0 to 5",
                ));
            }
        };
        if asked.is_none() && top.is_some_and(|n| n > 0) {
            return Err(invalid(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            ));
        }
        if top.is_some_and(|n| n > 20) {
            return Err(invalid(
                "top_logprobs",
                "`top_logprobs` must be between 0 and 20",
            ));
        }
        Ok(asked.map(|n| u8::try_from(n).unwrap_or(20)))
    }

    /// Refuses the options of OpenAI's own service this server cannot
    /// honour: a logit bias, a tier other than the one it has, predicted
    /// output, audio, storing the completion, web search and the functions
    /// API.
    fn refuse_unsupported(&self) -> Result<(), ServiceError> {
        let refusals: [(&str, bool, &str); 8] = [
            (
                "logit_bias",
                self.logit_bias.as_ref().is_some_and(|b| !b.is_empty()),
                "the runtime's sampler takes no per-token bias",
            ),
            (
                "service_tier",
                self.service_tier
                    .as_deref()
                    .is_some_and(|t| !matches!(t, "auto" | "default")),
                "this server has one tier: \"auto\" and \"default\" are accepted",
            ),
            (
                "prediction",
                self.prediction.as_ref().is_some_and(|p| !p.is_null()),
                "predicted outputs are not used",
            ),
            (
                "modalities",
                self.modalities
                    .as_ref()
                    .is_some_and(|m| m.iter().any(|m| m != "text")),
                "the answer is text only: `[\"text\"]` is accepted",
            ),
            (
                "audio",
                self.audio.as_ref().is_some_and(|a| !a.is_null()),
                "the answer is text only",
            ),
            (
                "store",
                self.store == Some(true),
                "chat completions are not stored (the Responses API stores responses)",
            ),
            (
                "web_search_options",
                self.web_search_options
                    .as_ref()
                    .is_some_and(|w| !w.is_null()),
                "the server does not search the web",
            ),
            (
                if self.functions.is_some() {
                    "functions"
                } else {
                    "function_call"
                },
                self.functions.as_ref().is_some_and(|f| !f.is_null())
                    || self.function_call.as_ref().is_some_and(|f| !f.is_null()),
                "the functions API before `tools` is not read: offer the functions as `tools`",
            ),
        ];
        match refusals.into_iter().find(|(_, given, _)| *given) {
            Some((field, _, why)) => Err(ServiceError::unsupported(
                field,
                format!("`{field}` is not supported: {why}"),
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::OutputFormat;
    use serde_json::json;

    fn generate(body: Value) -> Result<Generate, ServiceError> {
        let request: Request = crate::service::parse_body(body.to_string().as_bytes())?;
        request.generate(true)
    }

    fn chat(extra: Value) -> Value {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    }

    #[test]
    fn every_option_is_read_or_refused_naming_its_field() {
        for (extra, field) in [
            (json!({"tool_choice": 5}), "tool_choice"),
            (json!({"tool_choice": "sometimes"}), "tool_choice"),
            (json!({"seed": "x"}), "seed"),
            (json!({"stop": 5}), "stop"),
            (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
            (json!({"user": 5}), "user"),
            (json!({"n": 2}), "n"),
            (json!({"logprobs": "yes"}), "logprobs"),
            (json!({"top_logprobs": 2}), "top_logprobs"),
            (
                json!({"logprobs": true, "top_logprobs": 21}),
                "top_logprobs",
            ),
            (json!({"reasoning_effort": "maximal"}), "reasoning_effort"),
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"tools": [{"type": "function"}]}), "tools[0]"),
            (
                json!({"chat_template_kwargs": {"enable_thinking": "yes"}}),
                "chat_template_kwargs.enable_thinking",
            ),
        ] {
            let err = generate(chat(extra.clone())).unwrap_err();
            assert_eq!(err.field(), Some(field), "{extra}: {err}");
            assert_eq!(err.status(), 400);
        }
        let err = generate(json!({"messages": [{"role": "robot", "content": "x"}]})).unwrap_err();
        assert_eq!(err.field(), Some("messages[0].role"));
        let err =
            generate(json!({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}))
                .unwrap_err();
        assert_eq!(err.field(), Some("messages[0].content[0]"));
    }

    #[test]
    fn options_reach_the_service() {
        let g = generate(chat(json!({
            "stop": "END", "reasoning_effort": "none", "tool_choice": "none",
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "response_format": {"type": "json_object"}, "max_completion_tokens": 9,
            "seed": 1, "user": "u", "unknown_field": {"ignored": true}
        })))
        .unwrap();
        assert_eq!(g.stop, vec!["END".to_owned()]);
        assert_eq!(g.thinking, Some(false));
        assert_eq!(g.tool_choice, ToolChoice::None);
        assert_eq!(g.format, OutputFormat::JsonObject);
        assert_eq!(g.max_tokens, Some(9));
        let on = generate(chat(
            json!({"chat_template_kwargs": {"enable_thinking": true}}),
        ))
        .unwrap();
        assert_eq!(on.thinking, Some(true));
        let named = generate(chat(
            json!({"tool_choice": {"type": "function", "function": {"name": "f"}}}),
        ))
        .unwrap();
        assert_eq!(named.tool_choice, ToolChoice::Function("f".into()));
    }

    #[test]
    fn a_json_schema_must_be_a_schema_that_admits_something() {
        let format = |spec: Value| {
            generate(chat(
                json!({"response_format": {"type": "json_schema", "json_schema": spec}}),
            ))
        };
        for spec in [
            json!({"name": "n", "schema": false}),
            json!({"name": "n", "schema": 5}),
            json!({"name": "n", "schema": "object"}),
            json!({"name": "n", "schema": [{"type": "object"}]}),
            json!("n"),
        ] {
            let err = format(spec.clone()).unwrap_err();
            assert_eq!(err.field(), Some("response_format"), "{spec}");
        }
        let object = json!({"type": "object"});
        let g = format(json!({"name": "n", "schema": object, "strict": true})).unwrap();
        assert_eq!(
            g.format,
            OutputFormat::JsonSchema {
                name: Some("n".into()),
                schema: object,
                strict: true
            }
        );
        // Absent or `true`: any JSON value.
        for spec in [json!({"name": "n"}), json!({"name": "n", "schema": true})] {
            let g = format(spec).unwrap();
            assert!(matches!(
                g.format,
                OutputFormat::JsonSchema {
                    schema: Value::Null,
                    ..
                }
            ));
        }
    }

    #[test]
    fn options_of_openais_own_service_are_refused_naming_them_or_read_when_harmless() {
        let chat = |extra: Value| {
            let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let request: Request = crate::service::parse_body(body.to_string().as_bytes())?;
            request.generate(true)
        };
        for (extra, field) in [
            (json!({"logit_bias": {"50256": -100}}), "logit_bias"),
            (json!({"service_tier": "priority"}), "service_tier"),
            (
                json!({"prediction": {"type": "content", "content": "x"}}),
                "prediction",
            ),
            (json!({"modalities": ["text", "audio"]}), "modalities"),
            (
                json!({"audio": {"voice": "alloy", "format": "wav"}}),
                "audio",
            ),
            (json!({"store": true}), "store"),
            (json!({"web_search_options": {}}), "web_search_options"),
            (json!({"functions": [{"name": "f"}]}), "functions"),
            (json!({"function_call": "auto"}), "function_call"),
        ] {
            let err = chat(extra.clone()).unwrap_err();
            assert_eq!(err.field(), Some(field), "{extra}: {err}");
        }
        let g = chat(json!({
            "logit_bias": {}, "service_tier": "auto", "modalities": ["text"], "store": false,
            "metadata": {"k": "v"}, "verbosity": "low", "safety_identifier": "s",
            "prompt_cache_key": "p", "parallel_tool_calls": false
        }))
        .unwrap();
        assert_eq!(g.max_tool_calls, Some(1));
        assert_eq!(chat(json!({})).unwrap().max_tool_calls, None);
    }
}
