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
    /// Best effort, as OpenAI documents its `seed`: the mock is
    /// deterministic whatever the seed, and the runtime's sampler takes
    /// none.
    pub seed: Option<i64>,
    /// The request's context window: at most the model's, else refused.
    pub num_ctx: Option<u64>,
    pub mirostat: Option<u8>,
    pub mirostat_tau: Option<f64>,
    pub mirostat_eta: Option<f64>,
    /// Refused unless 0 (off): the runtime has no min-p cut.
    pub min_p: Option<f64>,
    /// Refused unless 1 (off): the runtime has no typical sampling.
    pub typical_p: Option<f64>,
    /// Refused: the runtime's repetition window is its own.
    pub repeat_last_n: Option<i64>,
    /// Refused: set when the model loads (`[rkllm] n_keep`).
    pub num_keep: Option<i64>,
    /// Ollama's load options for its runner, refused: the NPU runner is
    /// set up by the server's config.
    pub num_batch: Option<i64>,
    pub num_gpu: Option<i64>,
    pub main_gpu: Option<i64>,
    pub use_mmap: Option<bool>,
    pub num_thread: Option<i64>,
    /// rkllm-server's own: a LoRA adapter of the model.
    pub lora: Option<String>,
    /// Every other option. Ollama no longer reads `tfs_z`,
    /// `penalize_newline`, `numa`, `low_vram`, `f16_kv`, `logits_all`,
    /// `vocab_only` and `use_mlock`, nor any option it does not know: it
    /// logs "invalid option provided" and goes on. So does this server.
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
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
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
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
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
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

/// The thinking budget of a `think` level (`"low"`, `"medium"`, `"high"`;
/// `"max"` and `true` have none).
fn think_budget(value: Option<&Value>) -> Option<crate::service::ThinkingBudget> {
    value
        .and_then(Value::as_str)
        .and_then(crate::service::ThinkingBudget::of_effort)
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

/// `logprobs` and `top_logprobs` (0 to 20 alternatives per token): the
/// log probabilities asked for.
fn logprobs(logprobs: Option<bool>, top: Option<u32>) -> Result<Option<u8>, ServiceError> {
    if top.is_some_and(|n| n > 20) {
        return Err(invalid(
            "top_logprobs",
            "`top_logprobs` must be between 0 and 20",
        ));
    }
    if logprobs != Some(true) {
        if top.is_some_and(|n| n > 0) {
            return Err(invalid(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            ));
        }
        return Ok(None);
    }
    Ok(Some(top.map_or(0, |n| u8::try_from(n).unwrap_or(20))))
}

impl Options {
    /// The sampling overrides. `mirostat: 0` is the runtime's own default
    /// (off), with which `mirostat_tau` and `mirostat_eta` do nothing:
    /// none of the three is passed on then.
    fn sampling(&self) -> Sampling {
        let mirostat = self.mirostat.filter(|&mode| mode != 0);
        Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            mirostat,
            mirostat_tau: self.mirostat_tau.filter(|_| mirostat.is_some()),
            mirostat_eta: self.mirostat_eta.filter(|_| mirostat.is_some()),
            thinking_budget: None,
            logprobs: None,
            seed: Sampling::client_seed(self.seed),
        }
    }

    /// Refuses the options Ollama honours and this server cannot; logs
    /// the ones Ollama ignores, ignoring them too.
    fn check(&self) -> Result<(), ServiceError> {
        let refused = |name: &str, why: &str| {
            Err(ServiceError::unsupported(
                format!("options.{name}"),
                format!("`options.{name}` is not supported: {why}"),
            ))
        };
        if self.min_p.is_some_and(|p| p != 0.0) {
            return refused(
                "min_p",
                "the runtime samples with top_k, top_p and temperature and has no min-p cut \
                 (0, off, is accepted)",
            );
        }
        if self.typical_p.is_some_and(|p| p != 1.0) {
            return refused(
                "typical_p",
                "the runtime has no locally typical sampling (1, off, is accepted)",
            );
        }
        if self.repeat_last_n.is_some() {
            return refused(
                "repeat_last_n",
                "the runtime applies repeat_penalty over a window of its own, which cannot be set",
            );
        }
        if self.num_keep.is_some() {
            return refused(
                "num_keep",
                "the tokens kept when the context slides are set when the model loads \
                 (`[rkllm] n_keep` in the server's config)",
            );
        }
        for (name, given) in [
            ("num_batch", self.num_batch.is_some()),
            ("num_gpu", self.num_gpu.is_some()),
            ("main_gpu", self.main_gpu.is_some()),
            ("use_mmap", self.use_mmap.is_some()),
            ("num_thread", self.num_thread.is_some()),
        ] {
            if given {
                return refused(
                    name,
                    "it sets up Ollama's own runner; the NPU runner is set up by the server's \
                     config (`[rkllm]`: cpu_threads, cpu_mask, embed_flash)",
                );
            }
        }
        for name in self.other.keys() {
            tracing::warn!(
                option = %name,
                "an Ollama option Ollama does not read either: ignored"
            );
        }
        Ok(())
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
                .map_err(|m| invalid(field, format!("`{field}`: {m}")))
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
            // A fill-in-the-middle prompt is sent raw, as Ollama sends it.
            (
                "raw",
                self.raw == Some(true) && self.suffix.as_deref().is_none_or(str::is_empty),
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
        self.options.check()?;
        let logprobs = logprobs(self.logprobs, self.top_logprobs)?;
        Ok(Generate {
            model,
            input: Input::Prompt {
                text: self.prompt,
                system: self.system,
                role: Role::User,
                images,
            },
            sampling: Sampling {
                thinking_budget: think_budget(self.think.as_ref()),
                logprobs,
                ..self.options.sampling()
            },
            max_tokens: self.options.max_tokens(),
            stop: self.options.stop.clone().unwrap_or_default(),
            lora: self.options.lora.clone(),
            keep_alive: keep_alive(self.keep_alive.as_ref())?,
            thinking: think(self.think.as_ref())?,
            format: format(self.format)?,
            format_field: "format",
            context: self.options.num_ctx,
            suffix: self.suffix.filter(|s| !s.is_empty()),
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
        self.options.check()?;
        let logprobs = logprobs(self.logprobs, self.top_logprobs)?;
        Ok(Generate {
            model,
            input: Input::Chat(messages),
            sampling: Sampling {
                thinking_budget: think_budget(self.think.as_ref()),
                logprobs,
                ..self.options.sampling()
            },
            max_tokens: self.options.max_tokens(),
            stop: self.options.stop.clone().unwrap_or_default(),
            tools: self.tools.unwrap_or_default(),
            tool_choice: ToolChoice::Auto,
            lora: self.options.lora.clone(),
            keep_alive: keep_alive(self.keep_alive.as_ref())?,
            thinking: think(self.think.as_ref())?,
            format: format(self.format)?,
            format_field: "format",
            context: self.options.num_ctx,
            max_tool_calls: None,
            suffix: None,
            session: None,
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

    /// A one-message chat with `extra`'s fields.
    fn base(extra: Value) -> Value {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    }

    #[test]
    fn options_are_read_or_refused_naming_their_field() {
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

    #[test]
    fn options_ollama_honours_and_the_runtime_cannot_are_refused_naming_them() {
        for (extra, field) in [
            (json!({"options": {"min_p": 0.05}}), "options.min_p"),
            (json!({"options": {"typical_p": 0.7}}), "options.typical_p"),
            (
                json!({"options": {"repeat_last_n": 64}}),
                "options.repeat_last_n",
            ),
            (json!({"options": {"num_keep": 4}}), "options.num_keep"),
            (json!({"options": {"num_gpu": 1}}), "options.num_gpu"),
            (json!({"options": {"num_thread": 4}}), "options.num_thread"),
            (json!({"options": {"use_mmap": false}}), "options.use_mmap"),
            (
                json!({"logprobs": true, "top_logprobs": 21}),
                "top_logprobs",
            ),
            (json!({"top_logprobs": 3}), "top_logprobs"),
        ] {
            let err = chat(base(extra.clone())).unwrap_err();
            assert_eq!(err.field(), Some(field), "{extra}: {err}");
            assert!(err.to_string().contains(&format!("`{field}`")), "{err}");
        }
        // Their "off" values change nothing and are taken; what Ollama no
        // longer reads is ignored as Ollama ignores it.
        let g = chat(base(json!({"options": {
            "min_p": 0.0, "typical_p": 1.0, "tfs_z": 1.0, "penalize_newline": true,
            "mirostat": 0, "mirostat_tau": 5.0, "num_ctx": 2048, "seed": 42
        }})))
        .unwrap();
        // The seed is read: the sampler's choices follow it.
        assert_eq!(
            g.sampling,
            Sampling {
                seed: Some(42),
                ..Sampling::default()
            }
        );
        assert_eq!(g.context, Some(2048));
        let g = chat(base(json!({"options": {"mirostat": 2, "mirostat_tau": 3.0,
                                              "mirostat_eta": 0.2}})))
        .unwrap();
        assert_eq!(
            (
                g.sampling.mirostat,
                g.sampling.mirostat_tau,
                g.sampling.mirostat_eta
            ),
            (Some(2), Some(3.0), Some(0.2))
        );
    }
}
