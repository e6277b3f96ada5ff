//! What a backend offers the engine (mock, rkllm).
//!
//! A [`Backend`] is a shared factory; [`Backend::load`] runs on the
//! model's own worker thread and returns a [`Runner`] that never leaves
//! that thread. A runner generates one request at a time and reports
//! tokens through a [`TokenSink`], which assembles whole UTF-8 characters
//! and hands them to whatever the engine gave it (a stream).

use std::fmt;
use std::path::{Path, PathBuf};

use super::{ChatTemplate, TokenSink, ValidRunRequest};
use crate::vocab::{FinishReason, Usage};

/// Per-model init settings over the backend's defaults (config
/// `[[models]]` keys); `None` keeps the default.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Context window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context_len: Option<u32>,
    /// Default top-k.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Default nucleus mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Default temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Default repetition penalty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_penalty: Option<f64>,
    /// Default frequency penalty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// Default presence penalty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    /// Whether a chat's next turn reuses the history the runtime holds.
    #[serde(default, skip_serializing_if = "HistoryReuse::is_auto")]
    pub history_reuse: HistoryReuse,
    /// Whether conversations sent whole are kept as snapshots (prompt-cache
    /// files) and restored from them (default true; `[rkllm]
    /// snapshot_dir` and `snapshot_max_mb` say where and how much).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<bool>,
}

/// Whether a chat's next turn sends only its new message, reusing the
/// conversation the runtime's KV cache holds (`history_reuse`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryReuse {
    /// Reused while the runtime is seen to keep it: after each kept-history
    /// run its KV cache is checked against what the history should hold,
    /// and a runtime that drops it switches the model to sending the whole
    /// conversation.
    #[default]
    Auto,
    /// Reused, never checked.
    On,
    /// Never reused: every turn sends the whole conversation.
    Off,
}

impl HistoryReuse {
    /// Whether it is the default.
    pub fn is_auto(&self) -> bool {
        *self == Self::Auto
    }
}

/// A model as the config declares it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelSpec {
    /// Name clients use in `model`.
    pub name: String,
    /// Model file, for backends that load one.
    pub path: Option<PathBuf>,
    /// How chats become input.
    pub template: ChatTemplate,
    /// Init settings over the backend's defaults.
    pub settings: ModelSettings,
    /// The vision encoder, for a vision-language model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<VisionSpec>,
    /// How it embeds, for an embedding model (which generates no text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<EmbeddingSpec>,
    /// LoRA adapters loaded with it, which a request may select by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora: Vec<LoraAdapter>,
    /// A long fixed system prompt whose prefill is kept in a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<PromptCacheSpec>,
    /// How its replies carry a reasoning model's thinking.
    #[serde(default)]
    pub reasoning: super::reasoning::ReasoningMode,
    /// Its Hugging Face tokenizer, for structured output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<super::constraint::TokenizerSource>,
}

/// A model's prompt cache (config `system_prompt_cache`): the prefill of
/// `prompt`, saved by the runtime to `path` once and loaded afterwards.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptCacheSpec {
    /// The text every cached request starts with.
    pub prompt: String,
    /// The cache file (a `.json` beside it records what it was made from).
    pub path: PathBuf,
}

/// A LoRA adapter of a model (config `[[models.lora]]`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraAdapter {
    /// The name requests select it by.
    pub name: String,
    /// The adapter file (converted with Rockchip's toolkit).
    pub path: PathBuf,
    /// Its strength.
    #[serde(default = "one")]
    pub scale: f32,
}

fn one() -> f32 {
    1.0
}

/// An embedding model's settings (config `embedding = true`, `pooling`,
/// `normalize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EmbeddingSpec {
    /// How the last hidden layer's rows become one vector.
    pub pooling: Pooling,
    /// Scale the vector to length 1.
    pub normalize: bool,
}

/// How the rows of the last hidden layer (one per input token) become one
/// vector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The last token's row (models trained for it, such as Qwen3-Embedding).
    #[default]
    Last,
    /// The mean of all rows.
    Mean,
}

impl EmbeddingSpec {
    /// Pools `rows` (`n × width` floats, row by row) into one vector and
    /// normalises it when asked.
    pub fn pool(&self, rows: &[f32], width: usize) -> Vec<f32> {
        if width == 0 || rows.len() < width {
            return Vec::new();
        }
        let n = rows.len() / width;
        let mut out = match self.pooling {
            Pooling::Last => rows[(n - 1) * width..n * width].to_vec(),
            Pooling::Mean => {
                let mut sum = vec![0f64; width];
                for row in rows.chunks_exact(width) {
                    for (s, v) in sum.iter_mut().zip(row) {
                        *s += f64::from(*v);
                    }
                }
                sum.iter().map(|s| (s / n as f64) as f32).collect()
            }
        };
        if self.normalize {
            let norm = out
                .iter()
                .map(|v| f64::from(*v).powi(2))
                .sum::<f64>()
                .sqrt();
            if norm > 0.0 {
                for v in &mut out {
                    *v = (f64::from(*v) / norm) as f32;
                }
            }
        }
        out
    }
}

/// A vision-language model's encoder and image settings (config
/// `vision_encoder` and `vision`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VisionSpec {
    /// The encoder's `.rknn` file.
    pub encoder: PathBuf,
    /// Text the runtime puts before each image's tokens.
    pub img_start: String,
    /// Text it puts after them.
    pub img_end: String,
    /// The token each image token stands in for.
    pub img_content: String,
    /// NPU cores the encoder may use (`rknn_core_mask`: 0 auto, 1, 2, 4,
    /// 3 for cores 0-1, 7 for 0-2).
    pub core_mask: u32,
    /// Colour of the padding that makes a picture square.
    pub background: [u8; 3],
    /// Per-request limits.
    pub limits: super::ImageLimits,
}

impl VisionSpec {
    /// The settings of model `name` with `encoder` when nothing else is
    /// configured: the markers of `family`, or of the family its name (or
    /// its encoder's) suggests, else Qwen's (Rockchip's demo's default);
    /// all NPU cores chosen by the runtime, grey padding, default limits.
    ///
    /// # Errors
    /// An unknown `family`.
    pub fn defaults(name: &str, encoder: &Path, family: Option<&str>) -> Result<Self, String> {
        let guess = |text: &str| {
            let text = text.to_ascii_lowercase();
            VISION_FAMILIES
                .iter()
                .find(|f| text.contains(f.0) || (f.0 == "deepseek-ocr" && text.contains("ocr")))
        };
        let family = match family {
            Some(wanted) => VISION_FAMILIES
                .iter()
                .find(|f| f.0 == wanted)
                .ok_or_else(|| {
                    format!(
                        "unknown vision family {wanted:?}; known: {} (or give img_start, img_end and img_content)",
                        VISION_FAMILIES.iter().map(|f| f.0).collect::<Vec<_>>().join(", ")
                    )
                })?,
            None => guess(name)
                .or_else(|| guess(&encoder.to_string_lossy()))
                .unwrap_or(&VISION_FAMILIES[0]),
        };
        Ok(Self {
            encoder: encoder.to_owned(),
            img_start: family.1.to_owned(),
            img_end: family.2.to_owned(),
            img_content: family.3.to_owned(),
            core_mask: 0,
            background: [128, 128, 128],
            limits: super::ImageLimits::default(),
        })
    }
}

/// Image markers of the vision model families Rockchip's tools convert:
/// `(family, img_start, img_end, img_content)`.
pub const VISION_FAMILIES: &[(&str, &str, &str, &str)] = &[
    (
        "qwen",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|image_pad|>",
    ),
    ("minicpm", "<image>", "</image>", "<unk>"),
    ("internvl", "<img>", "</img>", "<IMG_CONTEXT>"),
    (
        "deepseek-ocr",
        "",
        "",
        "<\u{ff5c}\u{2581}pad\u{2581}\u{ff5c}>",
    ),
];

/// Why a backend failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum BackendError {
    /// The model could not be loaded.
    #[error("model `{model}` could not be loaded: {message}")]
    Load {
        /// Model name.
        model: String,
        /// What went wrong, for the operator.
        message: String,
    },
    /// The backend itself cannot run (for example, no usable runtime library).
    #[error("{0}")]
    Unavailable(String),
    /// A generation failed in the runtime.
    #[error("generation failed in the runtime: {message}")]
    Runtime {
        /// The runtime's own return code, when it gave one.
        code: Option<i32>,
        /// What went wrong, safe to show to a client.
        message: String,
    },
    /// The runner process died or stalled (and was killed): the model is
    /// no longer loaded. The message names the cause, e.g. `runtime
    /// crashed: SIGABRT`.
    #[error("{message}")]
    Lost {
        /// The cause, for the client and the log.
        message: String,
    },
}

/// How a generation ended, as the runner saw it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Generation {
    /// `Stop` or `Length` (the engine turns it into `Abort` when cancelled).
    pub finish_reason: FinishReason,
    /// Counts from the runtime, when it reports them; otherwise the sink's.
    pub usage: Option<Usage>,
    /// Prefill and generation times from the runtime, when it reports them.
    pub runtime_timings: Option<(f64, f64)>,
    /// Peak memory the runtime reported, in MB.
    pub memory_mb: Option<f64>,
    /// The input's embedding, for an embedding run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
    /// Positions the runtime's KV cache holds after the run, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<u32>,
    /// The model's conversation snapshots after the run, when it keeps
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<SnapshotReport>,
}

/// A model's conversation snapshots, as a run leaves them: the hits and
/// misses since the last report, and what is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotReport {
    /// Conversations sent whole that started from a snapshot.
    pub hits: u32,
    /// Conversations sent whole with none to start from.
    pub misses: u32,
    /// Snapshot files kept.
    pub files: u32,
    /// What their folder takes on disk: the snapshots, the `.json` beside
    /// each, the folder itself (what `snapshot_max_mb` bounds).
    pub bytes: u64,
}

impl Generation {
    /// A generation that ended for `finish_reason` with nothing reported:
    /// the counts and timings are then the sink's own.
    pub fn ended(finish_reason: FinishReason) -> Self {
        Self {
            finish_reason,
            usage: None,
            runtime_timings: None,
            memory_mb: None,
            embedding: None,
            kv_cache_tokens: None,
            snapshots: None,
        }
    }
}

/// Which backend to build, with its settings: what start-up chooses from
/// the config, and what a runner process is told to build.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum BackendSettings {
    /// The mock backend.
    Mock(super::MockConfig),
    /// The RKLLM runtime.
    Rkllm(super::RkllmSettings),
}

impl BackendSettings {
    /// Builds the backend (for `rkllm`, loads the runtime library).
    ///
    /// # Errors
    /// [`BackendError::Unavailable`] when the runtime cannot be loaded.
    pub fn build(&self) -> Result<std::sync::Arc<dyn Backend>, BackendError> {
        Ok(match self {
            Self::Mock(config) => std::sync::Arc::new(super::MockBackend::new(*config)),
            Self::Rkllm(settings) => std::sync::Arc::new(
                super::RkllmBackend::new(settings.clone())
                    .map_err(|e| BackendError::Unavailable(e.to_string()))?,
            ),
        })
    }
}

/// Every per-request parameter a backend can apply, for `models`.
pub const ALL_OVERRIDES: &[&str] = &[
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "role",
    "enable_thinking",
];

/// A factory of runners, shared by all models of one backend kind.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The backend's name in `models` (`"mock"`, `"rkllm"`).
    fn kind(&self) -> &'static str;

    /// The per-request parameters this backend applies, for `models`.
    fn overrides(&self) -> &'static [&'static str];

    /// Generations that may run at once per model, each lane on its own
    /// worker thread with its own runner. The NPU runs one at a time; only
    /// the mock offers more, for benchmarks.
    fn lanes(&self) -> usize {
        1
    }

    /// Refuses, before it is queued, a request that this backend can tell
    /// will fail (the mock: a malformed `@mock(...)` directive). The
    /// message names what is wrong.
    ///
    /// # Errors
    /// A message for the client, about the prompt.
    fn check(&self, _request: &ValidRunRequest) -> Result<(), String> {
        Ok(())
    }

    /// The tokenizer structured output works over for `model`: its own
    /// (`tokenizer`), or one the backend brings (the mock's).
    fn tokenizer(&self, model: &ModelSpec) -> Option<super::constraint::TokenizerSource> {
        model.tokenizer.clone()
    }

    /// Tokens `model`'s context holds, when the backend knows.
    fn context_length(&self, model: &ModelSpec) -> Option<u32> {
        model.settings.max_context_len
    }

    /// Why `model` cannot be served, found without loading it: its file or
    /// its vision encoder's is missing (the rkllm backend adds: the RKNN
    /// runtime its encoder needs does not load). The engine lists such a
    /// model as failed with this reason and serves the others.
    ///
    /// # Errors
    /// The reason, for `models` and the log.
    fn preflight(&self, model: &ModelSpec) -> Result<(), String> {
        files_present(model)
    }

    /// Loads a model. Called on the model's worker thread, which then owns
    /// the runner for its whole life.
    ///
    /// # Errors
    /// [`BackendError::Load`] when the model cannot be loaded.
    fn load(&self, model: &ModelSpec) -> Result<Box<dyn Runner>, BackendError>;
}

/// That a model's files (its own, its vision encoder's) exist.
///
/// # Errors
/// Which file is missing.
pub fn files_present(model: &ModelSpec) -> Result<(), String> {
    if let Some(path) = model.path.as_ref().filter(|p| !p.is_file()) {
        return Err(format!("its file {} does not exist", path.display()));
    }
    if let Some(vision) = model.vision.as_ref().filter(|v| !v.encoder.is_file()) {
        return Err(format!(
            "its vision encoder {} does not exist",
            vision.encoder.display()
        ));
    }
    Ok(())
}

/// One loaded model, owned by its worker thread.
pub trait Runner {
    /// Generates text for `request`, reporting tokens to `sink`, until the
    /// model stops, the token cap is reached or `sink` says to stop.
    ///
    /// # Errors
    /// [`BackendError::Runtime`] when the runtime fails.
    fn generate(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError>;

    /// Checks, between generations, that the runner can still generate.
    /// Runners in this process always can; a runner process may have died.
    ///
    /// # Errors
    /// [`BackendError::Lost`] with the cause.
    fn alive(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    /// The runner's process, when it has its own.
    fn process_id(&self) -> Option<u32> {
        None
    }
}
