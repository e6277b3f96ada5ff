//! Requests at the edge of the engine: `RunRequest` as a transport parsed
//! it, checked here into a `ValidRunRequest`, the only kind a backend
//! ever sees.
//!
//! Every check names the field and the bound, e.g.
//! "`max_tokens` must be between 1 and 4096, got 0".

use crate::backend::ValidRunRequest;

use crate::model::{Prompt, Sampling, VisionSpec};

use crate::model::image::{IMAGE_TAG, ImageData};

/// A generation request as a transport parsed it (types checked, values not).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunRequest {
    /// What the model is given (`model::prompt::build`'s).
    pub prompt: Prompt,
    /// Model name; the default model when absent.
    pub model: Option<String>,
    /// Cap on generated tokens.
    pub max_tokens: Option<u64>,
    /// Sampling overrides.
    pub sampling: Sampling,
    /// Images for a vision model, one per `<image>` tag of the prompt, in
    /// order.
    pub images: Vec<ImageData>,
    /// Embed `prompt` (embedding models) instead of generating text.
    pub embed: bool,
    /// Clear the model's KV cache instead of generating (no prompt).
    pub clear_cache: bool,
    /// A LoRA adapter of the model, by name.
    pub lora: Option<String>,
    /// Strings that end the answer (not shown); the generation stops at once.
    pub stop: Vec<String>,
    /// What the answer must be (structured output, a forced tool call).
    pub constraint: Option<crate::model::constraint::Constraint>,
    /// The lane of its model's queue it waits in.
    pub priority: super::Priority,
    /// The context window the request asks to run in, in tokens (Ollama's
    /// `options.num_ctx`): at most the model's; `None` is the model's.
    pub context: Option<u64>,
    /// Probe the model's runtime again instead of generating (no prompt).
    pub probe: Option<crate::backend::ProbeOrder>,
    /// The conversation it belongs to, for the prompt-cache metrics
    /// (`crate::service::conversation`).
    pub conversation: Option<String>,
}

/// The most stop strings a request may give, and the longest one.
pub const MAX_STOP_STRINGS: usize = 16;
/// The longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;

impl RunRequest {
    /// A request for the embedding of `text` by `model` (the default when
    /// `None`).
    pub fn embedding(text: String, model: Option<String>) -> Self {
        Self {
            prompt: Prompt::plain(text),
            model,
            embed: true,
            ..Self::default()
        }
    }
}

/// Limits applied when validating requests (config section `[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Longest prompt accepted, in bytes.
    pub max_prompt_bytes: usize,
    /// Token cap when the request names none (an operator's opt-in);
    /// `None`: until the model ends or its context is full (the engine
    /// sets the cap to the model's context).
    pub default_max_tokens: Option<u32>,
    /// Largest `max_tokens` a request may ask for.
    pub max_tokens_limit: u32,
    /// Largest JSON schema a request may hold, in bytes as JSON.
    pub max_schema_bytes: usize,
    /// Tokens one rerank by a reranker may prefill in all its judgements.
    pub max_rerank_tokens: u32,
}

/// `[limits] max_schema_bytes`: 256 KiB, far above a real answer format
/// or an agent's tools, and about 8 MiB once compiled.
pub const DEFAULT_MAX_SCHEMA_BYTES: usize = 256 << 10;

/// The default bound on the tokens one rerank by a reranker prefills in all
/// its judgements (about 48 s of a 1.5B model's prefill on an RK3588).
pub const DEFAULT_MAX_RERANK_TOKENS: u32 = 16_384;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// A field is out of range or malformed.
    #[error("{message}")]
    Invalid {
        /// The offending parameter.
        field: &'static str,
        /// What is wrong, naming the field and the bound.
        message: String,
    },
    /// The prompt is over its size limit.
    #[error("{message}")]
    TooLarge {
        /// The offending parameter.
        field: &'static str,
        /// What is wrong, naming the limit.
        message: String,
    },
    /// No model has this name.
    #[error("model `{name}` is not available; the models are: {}", available.join(", "))]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The models there are.
        available: Vec<String>,
    },
}

fn invalid(field: &'static str, message: String) -> ValidationError {
    ValidationError::Invalid { field, message }
}

fn check_range(
    field: &'static str,
    value: Option<f64>,
    low: f64,
    high: f64,
    low_open: bool,
) -> Result<(), ValidationError> {
    let Some(v) = value else { return Ok(()) };
    let above_low = if low_open { v > low } else { v >= low };
    if v.is_finite() && above_low && v <= high {
        Ok(())
    } else {
        let from = if low_open { "above" } else { "from" };
        Err(invalid(
            field,
            format!("`{field}` must be {from} {low} up to {high}, got {v}"),
        ))
    }
}

impl RunRequest {
    /// Checks every field against `limits`; `model` is the resolved model
    /// name (the caller looks the requested name up).
    pub fn validate(
        self,
        model: String,
        limits: &RequestLimits,
    ) -> Result<ValidRunRequest, ValidationError> {
        if self.prompt.text.is_empty() && !self.clear_cache && self.probe.is_none() {
            return Err(invalid("prompt", "`prompt` must not be empty".into()));
        }
        // The runtime takes C strings: a NUL would cut the text short.
        let has_nul = self.prompt.text.contains('\0')
            || self
                .prompt
                .turns()
                .into_iter()
                .flatten()
                .any(|turn| turn.text.contains('\0'));
        if has_nul {
            return Err(invalid(
                "prompt",
                "`prompt` (and every message) must not contain NUL characters (U+0000)".into(),
            ));
        }
        if self.prompt.text.len() > limits.max_prompt_bytes {
            return Err(ValidationError::TooLarge {
                field: "prompt",
                message: format!(
                    "`prompt` must be at most {} bytes (limits.max_prompt_bytes), got {}",
                    limits.max_prompt_bytes,
                    self.prompt.text.len()
                ),
            });
        }
        let max_tokens = match self.max_tokens {
            None => limits.default_max_tokens.unwrap_or(limits.max_tokens_limit),
            Some(n) if n >= 1 && n <= u64::from(limits.max_tokens_limit) => n as u32,
            Some(n) => {
                return Err(invalid(
                    "max_tokens",
                    format!(
                        "`max_tokens` must be between 1 and {} (limits.max_tokens), got {n}",
                        limits.max_tokens_limit
                    ),
                ));
            }
        };
        let s = &self.sampling;
        check_range("temperature", s.temperature, 0.0, 2.0, false)?;
        check_range("top_p", s.top_p, 0.0, 1.0, true)?;
        check_range("repeat_penalty", s.repeat_penalty, 0.0, 10.0, true)?;
        check_range("frequency_penalty", s.frequency_penalty, -2.0, 2.0, false)?;
        check_range("presence_penalty", s.presence_penalty, -2.0, 2.0, false)?;
        check_range("mirostat_tau", s.mirostat_tau, 0.0, 20.0, true)?;
        check_range("mirostat_eta", s.mirostat_eta, 0.0, 1.0, true)?;
        if let Some(mode) = s.mirostat.filter(|&m| m > 2) {
            return Err(invalid(
                "mirostat",
                format!("`mirostat` must be 0 (off), 1 or 2, got {mode}"),
            ));
        }
        if self.stop.len() > MAX_STOP_STRINGS {
            return Err(invalid(
                "stop",
                format!(
                    "`stop` may hold at most {MAX_STOP_STRINGS} strings, got {}",
                    self.stop.len()
                ),
            ));
        }
        if let Some(bad) = self
            .stop
            .iter()
            .find(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
        {
            return Err(invalid(
                "stop",
                format!(
                    "each `stop` string must be 1 to {MAX_STOP_BYTES} bytes, got {} bytes",
                    bad.len()
                ),
            ));
        }
        if let Some(k) = s.top_k.filter(|&k| k > 1000) {
            return Err(invalid(
                "top_k",
                format!("`top_k` must be between 0 and 1000, got {k}"),
            ));
        }
        Ok(ValidRunRequest {
            prompt: self.prompt,
            model,
            max_tokens,
            max_tokens_requested: self.max_tokens.is_some(),
            sampling: self.sampling,
            images: self.images,
            embed: None,
            clear_cache: self.clear_cache,
            refresh_snapshot: false,
            probe: self.probe,
            lora: self.lora,
            stop: self.stop,
            constraint: None,
        })
    }
}

pub use crate::model::BYTES_PER_TOKEN;

/// Checks that a request's prompt fits the model's context (`context`
/// tokens, when the backend knows it): a prompt that does not is refused
/// with both sizes, never cut.
///
/// # Errors
/// A [`ValidationError::TooLarge`] on `prompt`, naming the sizes.
pub fn check_context(
    request: &ValidRunRequest,
    context: Option<u32>,
) -> Result<(), ValidationError> {
    let Some(context) = context else {
        return Ok(());
    };
    let (tokens, how) = prompt_tokens(request);
    if tokens <= context as usize {
        return Ok(());
    }
    Err(ValidationError::TooLarge {
        field: "prompt",
        message: format!(
            "the prompt is {tokens} tokens ({how}), more than the {context} tokens the context \
             of model `{}` holds (max_context_len): shorten the conversation, or use a model \
             with a larger context",
            request.model
        ),
    })
}

/// The context a request runs in: the window it asked for (`asked`,
/// Ollama's `options.num_ctx`), clamped to the model's (`model`, when the
/// backend knows it) as Ollama clamps it, with a warning in the log; the
/// model's when it asked for none.
///
/// # Errors
/// A [`ValidationError::Invalid`] on `options.num_ctx` for a window of 0.
pub fn request_context(
    request: &ValidRunRequest,
    asked: Option<u64>,
    model: Option<u32>,
) -> Result<Option<u32>, ValidationError> {
    match (asked, model) {
        (Some(0), _) => Err(invalid(
            "options.num_ctx",
            "`options.num_ctx` must be at least 1".into(),
        )),
        (Some(asked), Some(limit)) if asked > u64::from(limit) => {
            tracing::warn!(
                model = %request.model,
                asked,
                context = limit,
                "requested context size too large for model: `options.num_ctx` {asked} \
                 clamped to the model's {limit} tokens (max_context_len)"
            );
            Ok(Some(limit))
        }
        (Some(asked), _) => Ok(Some(u32::try_from(asked).unwrap_or(u32::MAX))),
        (None, model) => Ok(model),
    }
}

/// A request's prompt in tokens, and how they were counted: by the
/// model's tokenizer, else estimated at [`BYTES_PER_TOKEN`].
pub fn prompt_tokens(request: &ValidRunRequest) -> (usize, String) {
    match request.prompt.tokens {
        Some(counted) => (counted as usize, "by its tokenizer".to_owned()),
        None => (
            request.prompt.text.len().div_ceil(BYTES_PER_TOKEN),
            format!(
                "about, estimated from its {} bytes",
                request.prompt.text.len()
            ),
        ),
    }
}

/// Refuses a sampling parameter the backend cannot apply per request
/// (`applied`, its overrides: runtimes 1.2.x fix sampling when the model
/// loads), naming it.
///
/// # Errors
/// A [`ValidationError::Invalid`] on the first such parameter.
pub fn check_overrides(request: &ValidRunRequest, applied: &[&str]) -> Result<(), ValidationError> {
    match request
        .sampling
        .set_fields()
        .into_iter()
        .find(|field| !applied.contains(field))
    {
        Some(field) => Err(invalid(
            field,
            format!(
                "`{field}` cannot be set per request on this model's runtime: its sampling is \
                 fixed when the model loads (set it in the model's config); `models` lists what \
                 a request may set"
            ),
        )),
        None => Ok(()),
    }
}

/// Checks that a request's `seed` can be kept: by a backend whose sampler
/// takes one, or where sampling is greedy (the request's temperature 0, or
/// the model's when it sets none: `model_greedy`), where the same prompt
/// gives the same text whatever the seed.
///
/// # Errors
/// A [`ValidationError::Invalid`] on `seed` saying how to get the same text.
pub fn check_seed(
    request: &ValidRunRequest,
    seeded: bool,
    model_greedy: impl FnOnce() -> bool,
) -> Result<(), ValidationError> {
    let sampling = &request.sampling;
    if sampling.seed.is_none() || seeded || sampling.greedy().unwrap_or_else(model_greedy) {
        return Ok(());
    }
    Err(invalid(
        "seed",
        format!(
            "`seed` cannot be kept by model `{}`: the NPU runtime's sampler takes no seed, so \
             at a temperature above 0 the same seed would not give the same text; send \
             `temperature: 0` (the same prompt then gives the same text, seed or not), or no \
             `seed`",
            request.model
        ),
    ))
}

/// Checks that a requested LoRA adapter is one of the model's.
///
/// # Errors
/// A [`ValidationError::Invalid`] on `lora` listing the adapters there are.
pub fn check_lora(
    request: &ValidRunRequest,
    adapters: &[crate::model::LoraAdapter],
) -> Result<(), ValidationError> {
    let Some(name) = &request.lora else {
        return Ok(());
    };
    if adapters.iter().any(|a| &a.name == name) {
        return Ok(());
    }
    let known: Vec<&str> = adapters.iter().map(|a| a.name.as_str()).collect();
    Err(invalid(
        "lora",
        if known.is_empty() {
            format!(
                "model `{}` has no LoRA adapters; `lora` {name:?} cannot apply",
                request.model
            )
        } else {
            format!(
                "model `{}` has no LoRA adapter {name:?}; its adapters are: {}",
                request.model,
                known.join(", ")
            )
        },
    ))
}

/// Checks that the request and the model agree on embedding: an embedding
/// model only embeds, other models only generate. Returns the request
/// with the model's embedding settings when it embeds.
///
/// # Errors
/// A [`ValidationError::Invalid`] naming what to use instead.
pub fn check_embedding(
    mut request: ValidRunRequest,
    embedding: Option<crate::model::EmbeddingSpec>,
    wants_embedding: bool,
) -> Result<ValidRunRequest, ValidationError> {
    if request.clear_cache {
        return Ok(request);
    }
    match (embedding, wants_embedding) {
        (Some(spec), true) => {
            if !request.images.is_empty() {
                return Err(invalid(
                    "images",
                    "embedding requests take text only".into(),
                ));
            }
            request.embed = Some(spec);
            Ok(request)
        }
        (None, false) => Ok(request),
        (Some(_), false) => Err(invalid(
            "model",
            format!(
                "model `{}` is an embedding model: it makes vectors, not text; use /v1/embeddings, /api/embed or the JSON-RPC method `embed`",
                request.model
            ),
        )),
        (None, true) => Err(invalid(
            "model",
            format!(
                "model `{}` is not an embedding model (declare one with `embedding = true` in its [[models]] entry)",
                request.model
            ),
        )),
    }
}

/// Checks a request's images against the model: the model takes images,
/// there are no more than its limit, each is a JPEG, PNG or WebP within
/// the limits, and the prompt has one `<image>` tag per image.
///
/// # Errors
/// A [`ValidationError::Invalid`] on `images` (or `TooLarge` for an image
/// over a limit), naming the image by its number.
pub fn check_images(
    request: &ValidRunRequest,
    vision: Option<&VisionSpec>,
) -> Result<(), ValidationError> {
    if request.images.is_empty() {
        return Ok(());
    }
    let Some(vision) = vision else {
        return Err(invalid(
            "images",
            format!(
                "model `{}` does not take images (it has no vision_encoder); send text only or use a vision model",
                request.model
            ),
        ));
    };
    let limits = &vision.limits;
    if request.images.len() > limits.max_images {
        return Err(ValidationError::TooLarge {
            field: "images",
            message: format!(
                "at most {} images per request (vision.max_images), got {}",
                limits.max_images,
                request.images.len()
            ),
        });
    }
    for (i, image) in request.images.iter().enumerate() {
        crate::backend::image::inspect(&image.0, limits).map_err(|e| {
            let message = format!("image {} {e}", i + 1);
            if e.contains("over the limit") {
                ValidationError::TooLarge {
                    field: "images",
                    message,
                }
            } else {
                invalid("images", message)
            }
        })?;
    }
    let tags = request.prompt.text.matches(IMAGE_TAG).count();
    if tags != request.images.len() {
        return Err(invalid(
            "images",
            format!(
                "the prompt has {tags} `{IMAGE_TAG}` tags for {} images; put one tag where each image goes, or none to have them all placed before the text",
                request.images.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RequestLimits = RequestLimits {
        max_prompt_bytes: 16,
        default_max_tokens: Some(100),
        max_tokens_limit: 200,
        max_schema_bytes: DEFAULT_MAX_SCHEMA_BYTES,
        max_rerank_tokens: DEFAULT_MAX_RERANK_TOKENS,
    };

    fn request() -> RunRequest {
        RunRequest {
            prompt: "hi".into(),
            ..RunRequest::default()
        }
    }

    fn field_of(err: ValidationError) -> &'static str {
        match err {
            ValidationError::Invalid { field, .. } | ValidationError::TooLarge { field, .. } => {
                field
            }
            ValidationError::UnknownModel { .. } => "model",
        }
    }

    #[test]
    fn defaults_apply_when_nothing_is_asked() {
        let valid = request().validate("m".into(), &LIMITS).unwrap();
        assert_eq!(valid.max_tokens, 100);
        assert!(!valid.max_tokens_requested);
        assert_eq!(valid.prompt.role, crate::model::Role::User);
    }

    #[test]
    fn each_bound_is_checked_and_named() {
        let cases: Vec<(RunRequest, &str)> = vec![
            (
                RunRequest {
                    prompt: String::new().into(),
                    ..request()
                },
                "prompt",
            ),
            (
                RunRequest {
                    prompt: "a\0b".into(),
                    ..request()
                },
                "prompt",
            ),
            (
                RunRequest {
                    prompt: Prompt {
                        chat: Some(crate::model::Chat {
                            system: None,
                            keeping: crate::model::Keeping::Whole,
                            turns: Some(vec![crate::model::Turn {
                                role: "user".into(),
                                text: "\0".into(),
                            }]),
                        }),
                        ..Prompt::plain("hi")
                    },
                    ..request()
                },
                "prompt",
            ),
            (
                RunRequest {
                    max_tokens: Some(0),
                    ..request()
                },
                "max_tokens",
            ),
            (
                RunRequest {
                    max_tokens: Some(201),
                    ..request()
                },
                "max_tokens",
            ),
            (
                RunRequest {
                    sampling: Sampling {
                        temperature: Some(-0.1),
                        ..Sampling::default()
                    },
                    ..request()
                },
                "temperature",
            ),
            (
                RunRequest {
                    sampling: Sampling {
                        temperature: Some(f64::NAN),
                        ..Sampling::default()
                    },
                    ..request()
                },
                "temperature",
            ),
            (
                RunRequest {
                    sampling: Sampling {
                        top_p: Some(0.0),
                        ..Sampling::default()
                    },
                    ..request()
                },
                "top_p",
            ),
            (
                RunRequest {
                    sampling: Sampling {
                        top_k: Some(5000),
                        ..Sampling::default()
                    },
                    ..request()
                },
                "top_k",
            ),
            (
                RunRequest {
                    sampling: Sampling {
                        repeat_penalty: Some(0.0),
                        ..Sampling::default()
                    },
                    ..request()
                },
                "repeat_penalty",
            ),
            (
                RunRequest {
                    sampling: Sampling {
                        presence_penalty: Some(3.0),
                        ..Sampling::default()
                    },
                    ..request()
                },
                "presence_penalty",
            ),
        ];
        for (req, field) in cases {
            let err = req.validate("m".into(), &LIMITS).unwrap_err();
            assert!(err.to_string().contains(field), "{err}");
            assert_eq!(field_of(err), field);
        }
    }

    #[test]
    fn an_oversized_prompt_is_too_large() {
        let req = RunRequest {
            prompt: "x".repeat(17).into(),
            ..request()
        };
        let err = req.validate("m".into(), &LIMITS).unwrap_err();
        assert!(
            matches!(
                err,
                ValidationError::TooLarge {
                    field: "prompt",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
