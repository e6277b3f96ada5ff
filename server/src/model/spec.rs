//! A model as the configuration or the store declares it: its file, its
//! chat template, its init settings, its vision encoder, embedding, LoRA
//! adapters, system-prompt cache, reasoning shape and tokenizer.

use std::path::{Path, PathBuf};

use super::template::ChatTemplate;

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
    /// The NPU memory domain the model starts in (`base_domain_id`);
    /// `None`: the engine gives it one no other loaded model holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_domain_id: Option<i32>,
    /// How many tokens a run prefills of a long prompt the server rendered
    /// (the model's own template, with its tokenizer), so that an abort
    /// lands between two runs; 0 prefills it in one run. `None`: the
    /// default ([`DEFAULT_PREFILL_CHUNK_TOKENS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_chunk_tokens: Option<u32>,
}

/// Tokens a prefill run takes of a long prompt unless a model says
/// otherwise: about half a second for a 1.5B model on an RK3588 (~340
/// tokens a second, `RKLLM_ABI.md` §5), a second or so for a 4B one.
pub const DEFAULT_PREFILL_CHUNK_TOKENS: u32 = 160;

/// The fewest tokens a prefill chunk may have (each chunk is one more run).
pub const MIN_PREFILL_CHUNK_TOKENS: u32 = 16;

impl ModelSettings {
    /// Tokens a prefill run takes of a long prompt; 0: one run.
    pub fn prefill_chunk(&self) -> u32 {
        self.prefill_chunk_tokens
            .unwrap_or(DEFAULT_PREFILL_CHUNK_TOKENS)
    }
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
    /// A reranker: it answers whether a document meets a query with "yes"
    /// or "no" (see [`super::rerank`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reranker: bool,
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
    pub tokenizer: Option<super::tokenizer::TokenizerSource>,
}

impl ModelSpec {
    /// A model called `name` with nothing set: no file, the default chat
    /// template and settings, a text model without a tokenizer.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            path: None,
            template: ChatTemplate::default(),
            settings: ModelSettings::default(),
            vision: None,
            embedding: None,
            reranker: false,
            lora: Vec::new(),
            prompt_cache: None,
            reasoning: super::reasoning::ReasoningMode::default(),
            tokenizer: None,
        }
    }
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
    pub limits: super::image::ImageLimits,
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
            limits: super::image::ImageLimits::default(),
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
