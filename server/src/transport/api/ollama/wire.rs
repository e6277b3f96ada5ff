//! Ollama's request bodies (`/api/generate`, `/api/chat`) and their
//! translation into a [`Generate`]. Every field Ollama defines is read
//! with its type (a wrong type is a 400 naming the field); options the
//! server honours are passed on, the ones it cannot are refused; fields
//! it does not know are ignored, as Ollama does.

use serde::Deserialize;
use serde_json::Value;

use crate::service::KeepAlive;

use crate::service::{
    Generate, Input, Message, OutputFormat, Part, ServiceError, Speaker, ToolCall, ToolChoice,
    parse_source,
};
use crate::service::{Role, Sampling};

/// `options`.
#[derive(Debug, Default, Deserialize)]
pub struct Options {
    pub num_predict: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub repeat_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub stop: Option<Vec<String>>,
    /// Read for its type; sampling on the NPU takes no seed.
    pub seed: Option<i64>,
    /// Read for its type; the context is the model's (`max_context_len`).
    pub num_ctx: Option<u64>,
    /// rkllm-server's own: a LoRA adapter of the model.
    pub lora: Option<String>,
}

/// `POST /api/generate`.
#[derive(Debug, Deserialize)]
pub struct GenerateRequest {
    pub model: Option<String>,
    #[serde(default)]
    pub prompt: String,
    pub suffix: Option<String>,
    pub system: Option<String>,
    pub template: Option<String>,
    pub context: Option<Vec<i64>>,
    pub raw: Option<bool>,
    pub stream: Option<bool>,
    #[serde(default)]
    pub options: Options,
    pub think: Option<Value>,
    pub keep_alive: Option<Value>,
    #[serde(default)]
    pub images: Vec<String>,
    pub format: Option<Value>,
}

/// `POST /api/chat`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    #[serde(default)]
    pub messages: Vec<WireMessage>,
    pub stream: Option<bool>,
    #[serde(default)]
    pub options: Options,
    pub think: Option<Value>,
    pub tools: Option<Vec<Value>>,
    pub keep_alive: Option<Value>,
    pub format: Option<Value>,
}

/// One chat message as Ollama sends it.
#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub images: Vec<String>,
    pub tool_calls: Option<Vec<WireToolCall>>,
    /// An assistant turn's thinking, sent back: not given to the model again.
    pub thinking: Option<String>,
    /// The tool a `tool` message answers for.
    pub tool_name: Option<String>,
}

/// A call in an assistant message: arguments as an object.
#[derive(Debug, Deserialize)]
pub struct WireToolCall {
    pub function: WireFunction,
}

/// A call's function.
#[derive(Debug, Deserialize)]
pub struct WireFunction {
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ServiceError {
    ServiceError::invalid(field, message)
}

/// `think`: true/false, or a level (`"low"`, `"medium"`, `"high"`, `"max"`:
/// on).
pub fn think(value: Option<&Value>) -> Result<Option<bool>, ServiceError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(on)) => Ok(Some(*on)),
        Some(Value::String(level))
            if matches!(level.as_str(), "low" | "medium" | "high" | "max") =>
        {
            Ok(Some(true))
        }
        Some(_) => Err(invalid(
            "think",
            "`think` must be true, false, \"low\", \"medium\", \"high\" or \"max\"",
        )),
    }
}

/// `format`: `""`/absent (text), `"json"`, or a JSON schema.
fn format(value: Option<Value>) -> Result<OutputFormat, ServiceError> {
    match value {
        None | Some(Value::Null) => Ok(OutputFormat::Text),
        Some(Value::String(s)) if s.is_empty() => Ok(OutputFormat::Text),
        Some(Value::String(s)) if s == "json" => Ok(OutputFormat::JsonObject),
        Some(schema @ Value::Object(_)) => Ok(OutputFormat::JsonSchema {
            name: None,
            schema,
            strict: false,
        }),
        Some(_) => Err(invalid(
            "format",
            "`format` must be \"json\" or a JSON schema object",
        )),
    }
}

/// `keep_alive`, when given.
pub fn keep_alive(value: Option<&Value>) -> Result<Option<KeepAlive>, ServiceError> {
    value
        .filter(|v| !v.is_null())
        .map(|v| KeepAlive::parse(v).map_err(|m| invalid("keep_alive", m)))
        .transpose()
}

impl Options {
    fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
        }
    }

    /// `num_predict`: positive caps; -1 (no cap) and -2 (fill the
    /// context) leave the server's limit in force.
    fn max_tokens(&self) -> Option<u64> {
        self.num_predict
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0)
    }
}

/// The images of a message or a request: base64 (or URLs, fetched when
/// allowed).
fn images(images: &[String], field: &str) -> Result<Vec<Part>, ServiceError> {
    images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            parse_source(image, i + 1)
                .map(Part::Image)
                .map_err(|m| invalid(field, m))
        })
        .collect()
}

impl GenerateRequest {
    /// The service's request. `model` is the resolved name.
    ///
    /// # Errors
    /// A malformed field, or an option this server does not implement.
    pub fn generate(self, model: Option<String>) -> Result<Generate, ServiceError> {
        for (field, given) in [
            ("raw", self.raw == Some(true)),
            (
                "suffix",
                self.suffix.as_deref().is_some_and(|s| !s.is_empty()),
            ),
            (
                "template",
                self.template.as_deref().is_some_and(|s| !s.is_empty()),
            ),
            (
                "context",
                self.context.as_ref().is_some_and(|c| !c.is_empty()),
            ),
        ] {
            if given {
                return Err(ServiceError::unsupported(
                    field,
                    format!(
                        "`{field}` is not supported: the model's own chat template is applied to \
                         `prompt` (and `system`)"
                    ),
                ));
            }
        }
        let images = images(&self.images, "images")?
            .into_iter()
            .filter_map(|p| match p {
                Part::Image(source) => Some(source),
                Part::Text(_) => None,
            })
            .collect();
        let _ = (self.options.seed, self.options.num_ctx);
        Ok(Generate {
            model,
            input: Input::Prompt {
                text: self.prompt,
                system: self.system,
                role: Role::User,
                images,
            },
            sampling: self.options.sampling(),
            max_tokens: self.options.max_tokens(),
            stop: self.options.stop.clone().unwrap_or_default(),
            lora: self.options.lora.clone(),
            keep_alive: keep_alive(self.keep_alive.as_ref())?,
            thinking: think(self.think.as_ref())?,
            format: format(self.format)?,
            format_field: "format",
            ..Generate::default()
        })
    }
}

impl ChatRequest {
    /// The service's request. `model` is the resolved name.
    ///
    /// # Errors
    /// A malformed field, or an option this server does not implement.
    pub fn generate(self, model: Option<String>) -> Result<Generate, ServiceError> {
        let messages = self
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                let speaker = match m.role.as_str() {
                    "system" => Speaker::System,
                    "user" => Speaker::User,
                    "assistant" => Speaker::Assistant,
                    "tool" => Speaker::Tool,
                    other => {
                        return Err(invalid(
                            format!("messages[{i}].role"),
                            format!(
                                "`messages[{i}].role` must be system, user, assistant or tool, \
                                 got {other:?}"
                            ),
                        ));
                    }
                };
                // Ollama's images go before the text, unless it places them.
                let mut parts = images(&m.images, &format!("messages[{i}].images"))?;
                if m.content.contains(crate::service::IMAGE_TAG) {
                    let mut placed: Vec<Part> = Vec::new();
                    let mut pictures = parts.into_iter();
                    for (n, piece) in m.content.split(crate::service::IMAGE_TAG).enumerate() {
                        if n > 0 {
                            placed.extend(pictures.next());
                        }
                        placed.push(Part::Text(piece.to_owned()));
                    }
                    placed.extend(pictures);
                    parts = placed;
                } else {
                    parts.push(Part::Text(m.content));
                }
                let tool_calls = m
                    .tool_calls
                    .unwrap_or_default()
                    .into_iter()
                    .map(|call| ToolCall {
                        id: String::new(),
                        name: call.function.name,
                        arguments: call.function.arguments.to_string(),
                    })
                    .collect();
                let _ = (m.thinking, m.tool_name);
                Ok(Message {
                    speaker,
                    parts,
                    tool_calls,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let _ = (self.options.seed, self.options.num_ctx);
        Ok(Generate {
            model,
            input: Input::Chat(messages),
            sampling: self.options.sampling(),
            max_tokens: self.options.max_tokens(),
            stop: self.options.stop.clone().unwrap_or_default(),
            tools: self.tools.unwrap_or_default(),
            tool_choice: ToolChoice::Auto,
            lora: self.options.lora.clone(),
            keep_alive: keep_alive(self.keep_alive.as_ref())?,
            thinking: think(self.think.as_ref())?,
            format: format(self.format)?,
            format_field: "format",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(body: Value) -> Result<Generate, ServiceError> {
        let request: ChatRequest = crate::service::parse_body(body.to_string().as_bytes())?;
        request.generate(None)
    }

    #[test]
    fn options_are_read_or_refused_naming_their_field() {
        let base = |extra: Value| {
            let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        };
        for (extra, field) in [
            (json!({"options": {"stop": "x"}}), "options.stop"),
            (
                json!({"options": {"temperature": "hot"}}),
                "options.temperature",
            ),
            (json!({"options": {"seed": 1.5}}), "options.seed"),
            (json!({"think": "maybe"}), "think"),
            (json!({"format": 5}), "format"),
            (json!({"keep_alive": "soon"}), "keep_alive"),
        ] {
            let err = chat(base(extra.clone())).unwrap_err();
            assert_eq!(err.field(), Some(field), "{extra}: {err}");
        }
        let g = chat(base(
            json!({"options": {"stop": ["END"], "num_predict": -1}, "think": "high"}),
        ))
        .unwrap();
        assert_eq!(g.stop, vec!["END".to_owned()]);
        assert_eq!(g.max_tokens, None);
        assert_eq!(g.thinking, Some(true));
        let generate: GenerateRequest =
            crate::service::parse_body(br#"{"prompt": "x", "raw": true}"#).unwrap();
        assert_eq!(generate.generate(None).unwrap_err().field(), Some("raw"));
    }
}
