//! The one typed configuration.
//!
//! Loaded once at start in three layers: the TOML file (`--config`), then
//! `RKLLM_SERVER_*` environment variables, then command-line flags (the
//! later layer wins; clap reads a flag's environment variable when the
//! flag is absent). [`Config::validate`] then checks every value, and an
//! invalid one stops the start with a message naming its key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::builder::BoolishValueParser;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use serde::{Deserialize, Serialize};

mod given;
mod sections;
mod settings;
mod validate;

pub use sections::{
    BenchSection, BoardSection, EngineSection, HttpSection, LimitsSection, McpSection, MockSection,
    ResponsesSection, RkllmSection, RunnerKind, StdioSection, StoreSection, StreamsSection,
    UiSection, WebSocketSection,
};

pub use crate::transport::lines::Framing;
pub use given::{Given, listen_hint};

/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default mock pace, like a 1.5B model on the RK3588 NPU.
pub const DEFAULT_MOCK_TOKENS_PER_SECOND: f64 = 20.0;
/// Default mock prefill delay.
pub const DEFAULT_MOCK_PREFILL_MS: u64 = 100;
/// Default largest request (HTTP body, WebSocket message, stdio line).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1 << 20;
/// Default longest prompt.
pub const DEFAULT_MAX_PROMPT_BYTES: usize = 256 << 10;
/// Default token cap when a request names none.
/// Default largest `max_tokens` a request may ask for.
pub const DEFAULT_MAX_TOKENS_LIMIT: u32 = 8192;
/// Default idle time before an unconsumed stream expires.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 300;
/// Default buffer limit of one stream.
pub const DEFAULT_MAX_STREAM_BYTES: usize = 1 << 20;
/// Default buffer limit of all streams together.
pub const DEFAULT_MAX_TOTAL_BYTES: usize = 64 << 20;
/// Default limit of queued or generating streams.
pub const DEFAULT_MAX_STREAMS: usize = 256;
/// Default queue length per model.
pub const DEFAULT_QUEUE_LEN: usize = 16;
/// Default name of the mock model.
pub const DEFAULT_MOCK_MODEL: &str = "mock";
/// The config file read when no `--config` is given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/rkllm-server/config.toml";
/// Default runtime library, found by the dynamic loader.
pub const DEFAULT_RUNTIME: &str = "librkllmrt.so";
/// Default RKNN runtime library (vision encoders), found by the dynamic loader.
pub const DEFAULT_RKNN_RUNTIME: &str = "librknnrt.so";

/// Which backend generates text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Deterministic text without an NPU (the default).
    #[default]
    Mock,
    /// Rockchip's RKLLM runtime on the NPU.
    Rkllm,
}

/// Which RKLLM ABI to use with the runtime library.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, ValueEnum)]
pub enum RuntimeAbi {
    /// Read the version the library carries and pick its ABI.
    #[default]
    #[serde(rename = "auto")]
    #[value(name = "auto")]
    Auto,
    /// Runtime 1.3.0.
    #[serde(rename = "1.3")]
    #[value(name = "1.3")]
    V1_3,
    /// Runtimes 1.2.1 to 1.2.3.
    #[serde(rename = "1.2")]
    #[value(name = "1.2")]
    V1_2,
}

/// Command-line flags; each one also reads `RKLLM_SERVER_<FLAG>`.
#[derive(Debug, Default, Parser)]
#[command(
    name = "rkllm-server",
    version,
    about = "Streaming token generation on Rockchip NPUs"
)]
pub struct Cli {
    /// TOML config file. Without it, /etc/rkllm-server/config.toml is read
    /// when it exists (the installed package's); otherwise the defaults.
    #[arg(long, env = "RKLLM_SERVER_CONFIG", value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Address to listen on for HTTP and WebSocket.
    #[arg(long, env = "RKLLM_SERVER_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Backend: mock (default) or rkllm.
    #[arg(long, env = "RKLLM_SERVER_BACKEND", value_enum)]
    pub backend: Option<BackendKind>,
    /// Model file; its file name (without extension) becomes the model name.
    #[arg(long, env = "RKLLM_SERVER_MODEL", value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// The Hugging Face tokenizer.json of --model (structured output): a
    /// file, or OWNER/REPO[:PATH] on the hub, fetched into the store.
    #[arg(long, env = "RKLLM_SERVER_TOKENIZER", value_name = "PATH|OWNER/REPO")]
    pub tokenizer: Option<PathBuf>,
    /// RKLLM runtime library (default: librkllmrt.so, found by the loader).
    #[arg(long, env = "RKLLM_SERVER_RUNTIME", value_name = "PATH")]
    pub runtime: Option<PathBuf>,
    /// ABI of the runtime: auto (read its version), 1.3 or 1.2.
    #[arg(long, env = "RKLLM_SERVER_RUNTIME_ABI", value_enum)]
    pub runtime_abi: Option<RuntimeAbi>,
    /// RKNN runtime library for vision encoders (default: librknnrt.so).
    #[arg(long, env = "RKLLM_SERVER_RKNN_RUNTIME", value_name = "PATH")]
    pub rknn_runtime: Option<PathBuf>,
    /// Serve JSON-RPC/MCP on stdin/stdout instead of HTTP.
    #[arg(long, env = "RKLLM_SERVER_STDIO", value_parser = BoolishValueParser::new())]
    pub stdio: bool,
    /// Framing of the stdio and TCP transports: lines or chunked.
    #[arg(long, env = "RKLLM_SERVER_STDIO_FRAMING", value_enum)]
    pub stdio_framing: Option<Framing>,
    /// Also serve the stdio line protocol on this TCP address.
    #[arg(long, env = "RKLLM_SERVER_TCP", value_name = "ADDR")]
    pub tcp: Option<String>,
    /// This server's name in a cluster (default: the host name); sent in
    /// the `X-Rkllm-Node` header of every HTTP response.
    #[arg(long, env = "RKLLM_SERVER_NODE_ID", value_name = "NAME")]
    pub node_id: Option<String>,
    /// Answer HAProxy's agent check on this TCP address (load as a weight,
    /// `drain` while shutting down).
    #[arg(long, env = "RKLLM_SERVER_AGENT_LISTEN", value_name = "ADDR")]
    pub agent_listen: Option<String>,
    /// API key clients must send as `Authorization: Bearer KEY`
    /// (repeatable; the variable takes a comma-separated list); the store
    /// commands send the first to the running service. Before or after
    /// the subcommand.
    #[arg(
        long = "api-key",
        env = "RKLLM_SERVER_API_KEY",
        value_name = "KEY",
        value_delimiter = ',',
        global = true
    )]
    pub api_keys: Vec<String>,
    /// File with one API key per line (`#` comments and blank lines skipped).
    #[arg(long, env = "RKLLM_SERVER_API_KEY_FILE", value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,
    /// Mock backend pace in tokens per second (0 = as fast as possible).
    #[arg(long, env = "RKLLM_SERVER_MOCK_TOKENS_PER_SECOND", value_name = "N")]
    pub mock_tokens_per_second: Option<f64>,
    /// Mock generations that may run at once per model (benchmarks).
    #[arg(long, env = "RKLLM_SERVER_MOCK_LANES", value_name = "N")]
    pub mock_lanes: Option<usize>,
    /// Folder of the model store ([store] models_dir); before or after
    /// the subcommand.
    #[arg(
        long,
        env = "RKLLM_SERVER_MODELS_DIR",
        value_name = "DIR",
        global = true
    )]
    pub models_dir: Option<PathBuf>,
    /// Models to load at start, before the server reports ready
    /// (engine.preload; repeatable, or comma-separated in the variable).
    #[arg(
        long,
        env = "RKLLM_SERVER_PRELOAD",
        value_name = "MODEL",
        value_delimiter = ','
    )]
    pub preload: Vec<String>,
    /// Where mock models run: thread (in the server) or process (runners).
    #[arg(long, env = "RKLLM_SERVER_MOCK_RUNNER", value_enum)]
    pub mock_runner: Option<RunnerKind>,
    /// Command words put before runner processes (engine.runner_prefix),
    /// space-separated.
    #[arg(long, env = "RKLLM_SERVER_RUNNER_PREFIX", value_name = "WORDS")]
    pub runner_prefix: Option<String>,
    /// Stamp chunks with the time their token was produced (benchmarks).
    #[arg(long, env = "RKLLM_SERVER_BENCH_TIMESTAMPS", value_parser = BoolishValueParser::new())]
    pub bench_timestamps: bool,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive.
    #[arg(long, env = "RKLLM_SERVER_LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Print the effective configuration (API keys masked) and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Check the configuration as start-up would (model files exist, the
    /// runtime loads), without loading a model, and exit.
    #[arg(long)]
    pub check_config: bool,
    /// A model-store command instead of serving.
    #[command(subcommand)]
    pub command: Option<StoreCommand>,
    /// Print a shell completion script (bash, zsh, fish, …) and exit.
    #[arg(long, value_name = "SHELL", hide = true)]
    pub completions: Option<clap_complete::Shell>,
    /// Print the manual page (roff) and exit.
    #[arg(long, hide = true)]
    pub man_page: bool,
    /// The flags and variables given (for messages that name them).
    #[arg(skip)]
    pub given: Vec<Given>,
}

/// The model-store commands.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum StoreCommand {
    /// Download a model into the store (through the service when it runs):
    /// OWNER/REPO (the file for this board is chosen), OWNER/REPO:FILE, or
    /// an https:// URL of a .rkllm file.
    #[command(after_help = "\
When the service runs (at `listen` of the configuration, with its API key when it has one), the
model goes into the service's store, through it. Otherwise, or with --local, into the store
itself: --models-dir (RKLLM_SERVER_MODELS_DIR), else [store] models_dir of the configuration
(/etc/rkllm-server/config.toml when it exists, or --config), else the service's
/var/lib/rkllm-server/models with the installed configuration, else
$XDG_DATA_HOME/rkllm-server/models. A --models-dir that is not the running service's store is
worked on directly.

Environment:
  HF_TOKEN     a Hugging Face token, for gated or private repositories
  HF_ENDPOINT  a mirror of Hugging Face (default https://huggingface.co; [store] endpoint)
  HTTPS_PROXY  the proxy to reach it through")]
    Pull {
        /// What to pull.
        source: String,
        /// The name to store it under (default: from the file's name).
        #[arg(long)]
        name: Option<String>,
        /// Branch, tag or commit ([store] revision).
        #[arg(long)]
        revision: Option<String>,
        /// Store the model even if this server cannot run it (a vision
        /// model without the RKNN runtime).
        #[arg(long)]
        store_only: bool,
        /// Take the model's tokenizer (structured output) from this Hugging
        /// Face repository, OWNER/REPO or OWNER/REPO:PATH, instead of
        /// looking for one in the model's repository and its base model.
        #[arg(long, value_name = "OWNER/REPO")]
        tokenizer: Option<String>,
        /// Work on the store folder itself, even when the service runs.
        #[arg(long)]
        local: bool,
    },
    /// List the models in the store (through the service when it runs).
    List {
        /// Work on the store folder itself, even when the service runs.
        #[arg(long)]
        local: bool,
    },
    /// Show a stored model: its manifest and what its file name says.
    Show {
        /// The model's name.
        name: String,
        /// Work on the store folder itself, even when the service runs.
        #[arg(long)]
        local: bool,
    },
    /// Remove a model from the store (through the service when it runs).
    Rm {
        /// The model's name.
        name: String,
        /// Work on the store folder itself, even when the service runs.
        #[arg(long)]
        local: bool,
    },
    /// Check the board, the NPU driver, the runtime, the models and the
    /// configuration, each with a verdict and its fix; exit status 0 when
    /// nothing blocks serving.
    Doctor {
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
        /// Also hash each stored model file against its manifest's sha256
        /// (slow: seconds per GB).
        #[arg(long)]
        verify: bool,
        /// Probe what each model's runtime does on this board (the
        /// behaviours features rest on) and measure the board's figures:
        /// through the running service when there is one, else by loading
        /// each model here.
        #[arg(long)]
        probe: bool,
        /// With --probe: only this model.
        #[arg(long, requires = "probe")]
        model: Option<String>,
        /// With --probe: the probes without the measurements.
        #[arg(long, requires = "probe")]
        no_measure: bool,
        /// With --probe: load the models here even when the service runs.
        #[arg(long, requires = "probe")]
        local: bool,
    },
}

impl Cli {
    /// The command line's definition, with the defaults in its help.
    pub fn full_command() -> clap::Command {
        given::with_defaults(Self::command())
    }

    /// Writes the completion script for `shell`, made from this definition.
    pub fn write_completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
        clap_complete::generate(shell, &mut Self::full_command(), "rkllm-server", out);
    }

    /// Writes the manual page, made from this definition.
    ///
    /// # Errors
    /// When `out` cannot be written.
    pub fn write_man_page(out: &mut dyn std::io::Write) -> std::io::Result<()> {
        clap_mangen::Man::new(Self::full_command()).render(out)
    }

    /// Parses the command line and the `RKLLM_SERVER_*` variables, or
    /// exits with clap's message (status 2). A bad value that came from a
    /// variable is reported naming the variable, not the flag.
    pub fn parse_or_exit() -> Self {
        let parsed = Self::full_command().try_get_matches().and_then(|matches| {
            let mut cli = Self::from_arg_matches(&matches)?;
            cli.given = given::given(&matches);
            Ok(cli)
        });
        match parsed {
            Ok(cli) => cli,
            Err(err) => {
                if let Some(message) = variable_error(&err) {
                    eprintln!("rkllm-server: {message}");
                    std::process::exit(2);
                }
                err.exit()
            }
        }
    }
}

/// The message for a value clap refused, when the value came from the
/// flag's environment variable (the flag itself is not on the command line).
fn variable_error(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        err.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let on_command_line = std::env::args()
        .skip(1)
        .any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    if on_command_line {
        return None;
    }
    let command = Cli::command();
    let variable = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))?
        .get_env()?
        .to_str()?
        .to_owned();
    let value = std::env::var(&variable).ok()?;
    let detail = match (
        err.get(ContextKind::ValidValue),
        std::error::Error::source(err),
    ) {
        (Some(ContextValue::Strings(valid)), _) => format!("expected one of {}", valid.join(", ")),
        (_, Some(source)) => source.to_string(),
        _ => "not a valid value".to_owned(),
    };
    Some(format!(
        "invalid value {value:?} in the environment variable {variable} (the variable of --{long}): {detail}"
    ))
}

/// A model entry of the config file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Name clients use.
    pub name: String,
    /// Model file (required by the rkllm backend).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Chat template (default: the top-level `chat_template`).
    #[serde(default)]
    pub chat_template: Option<TemplateSetting>,
    /// The model used when a request names none (else the first).
    #[serde(default)]
    pub default: bool,
    /// The vision encoder (`.rknn`) of a vision-language model.
    #[serde(default)]
    pub vision_encoder: Option<PathBuf>,
    /// Image settings of a vision-language model.
    #[serde(default)]
    pub vision: Option<VisionEntry>,
    /// An embedding model: runs in hidden-layer mode and makes vectors.
    #[serde(default)]
    pub embedding: bool,
    /// A reranker (Qwen3-Reranker's kind): judges a query and a document
    /// "yes" or "no", read from the logits row of its first token.
    #[serde(default)]
    pub reranker: bool,
    /// How an embedding model pools its hidden rows: `last` (default) or `mean`.
    #[serde(default)]
    pub pooling: Option<crate::model::Pooling>,
    /// Scale an embedding model's vectors to length 1 (default true).
    #[serde(default)]
    pub normalize: Option<bool>,
    /// LoRA adapters loaded with the model (`[[models.lora]]`).
    #[serde(default)]
    pub lora: Vec<crate::model::LoraAdapter>,
    /// A long fixed system prompt whose prefill is cached in a file.
    #[serde(default)]
    pub system_prompt_cache: Option<crate::model::PromptCacheSpec>,
    /// How its replies carry thinking: `auto` (from the name: the
    /// DeepSeek-R1 distills `implicit`, others `opened`), `opened`,
    /// `implicit` or `off`.
    #[serde(default)]
    pub reasoning: Option<String>,
    /// Its Hugging Face `tokenizer.json`, which structured output needs.
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// Init settings of this model, over `[rkllm]`.
    #[serde(flatten)]
    pub settings: crate::model::ModelSettings,
}

/// A model's `vision` table: image markers, encoder cores, padding colour
/// and per-request limits. Every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VisionEntry {
    /// `qwen`, `minicpm`, `internvl` or `deepseek-ocr`: the markers'
    /// defaults (else guessed from the model's name, else `qwen`).
    pub family: Option<String>,
    /// Text before each image's tokens.
    pub img_start: Option<String>,
    /// Text after them.
    pub img_end: Option<String>,
    /// The token each image token stands in for.
    pub img_content: Option<String>,
    /// NPU cores of the encoder: `auto`, `0`, `1`, `2`, `0-1`, `0-2`.
    pub core_mask: Option<String>,
    /// Padding colour, `[r, g, b]`.
    pub background: Option<[u8; 3]>,
    /// Images per request.
    pub max_images: Option<usize>,
    /// Bytes per image.
    pub max_image_bytes: Option<usize>,
    /// Pixels per image.
    pub max_image_pixels: Option<u64>,
    /// Bytes decoding one image may take.
    pub max_image_decode_bytes: Option<u64>,
}

impl VisionEntry {
    /// The engine's vision spec of model `name` with encoder `encoder`.
    ///
    /// # Errors
    /// An unknown family or core mask, or a limit out of range.
    pub fn resolve(
        &self,
        name: &str,
        encoder: &std::path::Path,
    ) -> Result<crate::model::VisionSpec, String> {
        let defaults = crate::model::VisionSpec::defaults(name, encoder, self.family.as_deref())?;
        let core_mask = match self.core_mask.as_deref().unwrap_or("auto") {
            "auto" => 0,
            "0" => 1,
            "1" => 2,
            "2" => 4,
            "0-1" => 3,
            "0-2" => 7,
            other => {
                return Err(format!(
                    "core_mask must be auto, 0, 1, 2, 0-1 or 0-2, got {other:?}"
                ));
            }
        };
        let limits = crate::model::image::ImageLimits {
            max_images: self.max_images.unwrap_or(defaults.limits.max_images),
            max_image_bytes: self
                .max_image_bytes
                .unwrap_or(defaults.limits.max_image_bytes),
            max_image_pixels: self
                .max_image_pixels
                .unwrap_or(defaults.limits.max_image_pixels),
            max_image_decode_bytes: self
                .max_image_decode_bytes
                .unwrap_or(defaults.limits.max_image_decode_bytes),
        };
        if !(1..=64).contains(&limits.max_images) {
            return Err(format!(
                "max_images must be between 1 and 64, got {}",
                limits.max_images
            ));
        }
        if !(1024..=256 * 1024 * 1024).contains(&limits.max_image_bytes) {
            return Err("max_image_bytes must be between 1024 and 268435456".into());
        }
        if !(1..=400_000_000).contains(&limits.max_image_pixels) {
            return Err("max_image_pixels must be between 1 and 400000000".into());
        }
        if !(2 << 20..=1 << 32).contains(&limits.max_image_decode_bytes) {
            return Err(format!(
                "max_image_decode_bytes must be between 2097152 and 4294967296, got {}",
                limits.max_image_decode_bytes
            ));
        }
        let img_content = self.img_content.clone().unwrap_or(defaults.img_content);
        if img_content.is_empty() {
            return Err("img_content must not be empty".into());
        }
        Ok(crate::model::VisionSpec {
            encoder: encoder.to_owned(),
            img_start: self.img_start.clone().unwrap_or(defaults.img_start),
            img_end: self.img_end.clone().unwrap_or(defaults.img_end),
            img_content,
            core_mask,
            background: self.background.unwrap_or(defaults.background),
            limits,
        })
    }
}

/// A chat template in the config: `"builtin"`, `"chatml"`, `"llama3"`, or a
/// table `{ message = "...{role}...{content}...", assistant = "...", stop = [...] }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum TemplateSetting {
    /// A named template, or a Jinja template: its text (holding `{%` or
    /// `{{`) or the path of a file holding it.
    Named(String),
    /// A Jinja template (text or file) with the model's special tokens.
    Jinja(JinjaSetting),
    /// A custom one.
    Custom(crate::model::CustomTemplate),
}

/// `{ jinja = "text or path", bos_token = "...", eos_token = "..." }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JinjaSetting {
    /// The template's text, or the path of a file holding it.
    pub jinja: String,
    /// The model's `bos_token`.
    #[serde(default)]
    pub bos_token: String,
    /// The model's `eos_token` (the reply ends there).
    #[serde(default)]
    pub eos_token: String,
}

fn jinja_template(
    text_or_path: &str,
    bos_token: &str,
    eos_token: &str,
) -> Result<crate::model::ChatTemplate, String> {
    let source = if text_or_path.contains("{%") || text_or_path.contains("{{") {
        text_or_path.to_owned()
    } else {
        std::fs::read_to_string(text_or_path).map_err(|e| {
            format!(
                "must be builtin, chatml, llama3, a Jinja template or a file holding one; \
                 {text_or_path:?} cannot be read: {e}"
            )
        })?
    };
    let template = crate::model::JinjaTemplate {
        source,
        bos_token: bos_token.to_owned(),
        eos_token: eos_token.to_owned(),
    };
    template.check()?;
    Ok(crate::model::ChatTemplate::Jinja(template))
}

impl TemplateSetting {
    /// The template, or an error naming the bad name.
    ///
    /// # Errors
    /// An unknown name or a custom template without `{content}`.
    pub fn resolve(&self) -> Result<crate::model::ChatTemplate, String> {
        use crate::model::ChatTemplate;
        match self {
            Self::Named(name) => match ChatTemplate::named(name) {
                Some(template) => Ok(template),
                None => jinja_template(name, "", ""),
            },
            Self::Jinja(j) => jinja_template(&j.jinja, &j.bos_token, &j.eos_token),
            Self::Custom(custom) if !custom.message.contains("{content}") => {
                Err("a custom template's `message` must contain {content}".into())
            }
            Self::Custom(custom) => Ok(ChatTemplate::Custom(custom.clone())),
        }
    }
}

/// The whole configuration, as the file spells it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The file this configuration was read from, if any (not a key).
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// The flags and variables given (not a key; for messages).
    #[serde(skip)]
    pub given: Vec<Given>,
    /// HTTP/WebSocket listen address.
    pub listen: String,
    /// Backend kind.
    pub backend: BackendKind,
    /// One model file (shorthand for a single `[[models]]` entry).
    pub model: Option<PathBuf>,
    /// The tokenizer.json of `model` (structured output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PathBuf>,
    /// Models; the first is the default.
    pub models: Vec<ModelEntry>,
    /// Chat template of `model` and the default of `[[models]]` entries.
    pub chat_template: TemplateSetting,
    /// RKLLM runtime library.
    pub runtime: PathBuf,
    /// ABI of the runtime library.
    pub runtime_abi: RuntimeAbi,
    /// RKNN runtime library, loaded when a model has a vision encoder.
    pub rknn_runtime: PathBuf,
    /// Serve stdin/stdout instead of HTTP.
    pub stdio: bool,
    /// Framing of the line transports.
    pub stdio_framing: Framing,
    /// TCP address for the line protocol.
    pub tcp: Option<String>,
    /// This node's name (absent: the host name).
    pub node_id: Option<String>,
    /// TCP address of the HAProxy agent check (absent: none).
    pub agent_listen: Option<String>,
    /// API keys (clients send `Authorization: Bearer KEY`); none: no auth.
    pub api_keys: Vec<String>,
    /// File with more API keys, one per line.
    pub api_key_file: Option<PathBuf>,
    /// Log filter.
    pub log_level: String,
    /// Mock backend settings.
    pub mock: MockSection,
    /// RKLLM runtime settings.
    pub rkllm: RkllmSection,
    /// Line transports.
    pub stdio_transport: StdioSection,
    /// MCP over HTTP.
    pub mcp: McpSection,
    /// The HTTP server.
    pub http: HttpSection,
    /// The chat page.
    pub ui: UiSection,
    /// WebSocket liveness.
    pub websocket: WebSocketSection,
    /// Request limits.
    pub limits: LimitsSection,
    /// Stream manager limits.
    pub streams: StreamsSection,
    /// Scheduler settings.
    pub engine: EngineSection,
    /// Benchmark settings.
    pub bench: BenchSection,
    /// The model store.
    pub store: StoreSection,
    /// The Responses API's kept responses.
    pub responses: ResponsesSection,
    /// Where the board's files are read.
    pub board: BoardSection,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            source: None,
            given: Vec::new(),
            listen: DEFAULT_LISTEN.to_owned(),
            backend: BackendKind::default(),
            model: None,
            tokenizer: None,
            models: Vec::new(),
            chat_template: TemplateSetting::Named("builtin".into()),
            runtime: PathBuf::from(DEFAULT_RUNTIME),
            runtime_abi: RuntimeAbi::default(),
            rknn_runtime: PathBuf::from(DEFAULT_RKNN_RUNTIME),
            stdio: false,
            stdio_framing: Framing::default(),
            tcp: None,
            node_id: None,
            agent_listen: None,
            api_keys: Vec::new(),
            api_key_file: None,
            log_level: "info".to_owned(),
            mock: MockSection::default(),
            rkllm: RkllmSection::default(),
            stdio_transport: StdioSection::default(),
            mcp: McpSection::default(),
            http: HttpSection::default(),
            ui: UiSection::default(),
            websocket: WebSocketSection::default(),
            limits: LimitsSection::default(),
            streams: StreamsSection::default(),
            engine: EngineSection::default(),
            bench: BenchSection::default(),
            store: StoreSection::default(),
            responses: ResponsesSection::default(),
            board: BoardSection::default(),
        }
    }
}

/// A configuration that cannot be used; the message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML or has a wrong key or type.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the key and line).
        message: String,
    },
    /// A value is out of range.
    #[error("invalid configuration value for `{key}`: {message}")]
    Invalid {
        /// The key, as in the config file.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A bad value of a flag or environment variable.
    #[error("invalid value for {named}: {message}")]
    Given {
        /// The flag or variable, in words.
        named: String,
        /// What is wrong.
        message: String,
    },
    /// An error in a configuration that was read from a file.
    #[error("{inner} (configuration read from {path})")]
    InFile {
        /// The file.
        path: PathBuf,
        /// The error.
        inner: Box<ConfigError>,
    },
}

impl ConfigError {
    /// Names `file` in the error, when the configuration came from one.
    #[must_use]
    pub fn in_file(self, file: Option<&Path>) -> Self {
        match (self, file) {
            (
                err @ (Self::Read { .. }
                | Self::Parse { .. }
                | Self::InFile { .. }
                | Self::Given { .. }),
                _,
            )
            | (err, None) => err,
            (err, Some(path)) => Self::InFile {
                path: path.to_owned(),
                inner: Box::new(err),
            },
        }
    }
}

/// `HOST:PORT` or `IP:PORT` as a socket address (the first a host name
/// resolves to).
fn resolve(key: &'static str, value: &str, example: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    let expected = || format!("expected HOST:PORT such as {example}, got {value:?}");
    let Some((host, port)) = value.rsplit_once(':') else {
        return Err(invalid(key, expected()));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(invalid(key, expected()));
    }
    match std::net::ToSocketAddrs::to_socket_addrs(value) {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| invalid(key, format!("host {host:?} has no address"))),
        Err(e) => Err(invalid(key, format!("cannot resolve {host:?}: {e}"))),
    }
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

impl Config {
    /// Loads file → environment → flags and validates the result.
    ///
    /// # Errors
    /// An unreadable file, bad TOML, or an invalid value (named by key).
    pub fn load(cli: Cli) -> Result<Self, ConfigError> {
        let default_file = Path::new(DEFAULT_CONFIG_FILE);
        let file = match &cli.config {
            Some(path) => Some(path.clone()),
            None if default_file.is_file() => Some(default_file.to_owned()),
            None => None,
        };
        let mut config = match &file {
            Some(path) => Self::from_file(path)?,
            None => Self::default(),
        };
        config.source.clone_from(&file);
        let given = cli.given.clone();
        config.given.clone_from(&given);
        config.apply(cli);
        let named = |e: ConfigError| given::rename(e, &given).in_file(file.as_deref());
        config.load_key_file().map_err(named)?;
        config.validate().map_err(named)?;
        Ok(config)
    }

    /// Parses a TOML file (without validating it).
    ///
    /// # Errors
    /// An unreadable file or bad TOML.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })
    }

    /// The configuration as TOML, with API keys masked.
    ///
    /// # Errors
    /// When the configuration cannot be written as TOML.
    pub fn to_masked_toml(&self) -> Result<String, toml::ser::Error> {
        let mut shown = self.clone();
        shown.api_keys = shown
            .api_keys
            .iter()
            .map(|_| "********".to_owned())
            .collect();
        let text = toml::to_string(&shown)?;
        // A CPU mask reads as bits: `cpu_mask = 0xf0`, which TOML parses
        // back to the same integer.
        Ok(text
            .lines()
            .map(|line| match line.strip_prefix("cpu_mask = ") {
                Some(n) => n
                    .parse::<u32>()
                    .map_or_else(|_| line.to_owned(), |n| format!("cpu_mask = {n:#x}")),
                None => line.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n")
            + "\n")
    }

    /// Checks what only the machine can tell: that model files exist.
    ///
    /// # Errors
    /// The first missing model file, naming its model.
    pub fn check_files(&self) -> Result<(), ConfigError> {
        for model in self.model_specs() {
            if let Some(path) = model.path.filter(|p| !p.is_file()) {
                let key = if self.model.as_ref() == Some(&path) {
                    "model"
                } else {
                    "models.path"
                };
                let err = invalid(
                    key,
                    format!(
                        "the file of model `{}`, {}, does not exist",
                        model.name,
                        path.display()
                    ),
                );
                return Err(given::rename(err, &self.given));
            }
        }
        Ok(())
    }

    /// Adds the keys of `api_key_file` to `api_keys`.
    ///
    /// # Errors
    /// An unreadable key file.
    pub fn load_key_file(&mut self) -> Result<(), ConfigError> {
        let Some(path) = &self.api_key_file else {
            return Ok(());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        self.api_keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned),
        );
        Ok(())
    }

    /// Overrides values with the flags (and their environment variables).
    pub fn apply(&mut self, cli: Cli) {
        if let Some(listen) = cli.listen {
            self.listen = listen;
        }
        if let Some(backend) = cli.backend {
            self.backend = backend;
        }
        if let Some(tokenizer) = cli.tokenizer {
            self.tokenizer = Some(tokenizer);
        }
        if let Some(model) = cli.model {
            self.model = Some(model);
        }
        if let Some(runtime) = cli.runtime {
            self.runtime = runtime;
        }
        if let Some(abi) = cli.runtime_abi {
            self.runtime_abi = abi;
        }
        if let Some(rknn) = cli.rknn_runtime {
            self.rknn_runtime = rknn;
        }
        if cli.stdio {
            self.stdio = true;
        }
        if let Some(framing) = cli.stdio_framing {
            self.stdio_framing = framing;
        }
        if let Some(tcp) = cli.tcp {
            self.tcp = Some(tcp);
        }
        if let Some(node) = cli.node_id {
            self.node_id = Some(node);
        }
        if let Some(agent) = cli.agent_listen {
            self.agent_listen = Some(agent);
        }
        if !cli.api_keys.is_empty() {
            self.api_keys = cli.api_keys;
        }
        if let Some(file) = cli.api_key_file {
            self.api_key_file = Some(file);
        }
        if let Some(tps) = cli.mock_tokens_per_second {
            self.mock.tokens_per_second = tps;
        }
        if let Some(dir) = cli.models_dir {
            self.store.models_dir = Some(dir);
        }
        if !cli.preload.is_empty() {
            self.engine.preload = cli.preload;
        }
        if let Some(runner) = cli.mock_runner {
            self.mock.runner = runner;
        }
        if let Some(prefix) = cli.runner_prefix {
            self.engine.runner_prefix = prefix.split_whitespace().map(str::to_owned).collect();
        }
        if let Some(lanes) = cli.mock_lanes {
            self.mock.lanes = lanes;
        }
        if cli.bench_timestamps {
            self.bench.timestamps = true;
        }
        if let Some(level) = cli.log_level {
            self.log_level = level;
        }
    }

    /// The listen address; a host name (`localhost:8080`) is resolved,
    /// and its first address is used.
    ///
    /// # Errors
    /// When `listen` is not `HOST:PORT` or the host does not resolve.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        resolve("listen", &self.listen, "127.0.0.1:8080")
    }

    /// The TCP address of the line protocol, if any (host names resolved).
    ///
    /// # Errors
    /// When `tcp` is not `HOST:PORT` or the host does not resolve.
    pub fn tcp_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        self.tcp
            .as_deref()
            .map(|tcp| resolve("tcp", tcp, "127.0.0.1:7070"))
            .transpose()
    }

    /// The address of the HAProxy agent check, if any.
    ///
    /// # Errors
    /// When `agent_listen` is not `HOST:PORT` or the host does not resolve.
    pub fn agent_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        self.agent_listen
            .as_deref()
            .map(|addr| resolve("agent_listen", addr, "0.0.0.0:8081"))
            .transpose()
    }

    /// This node's name: `node_id`, else the host name, else
    /// `rkllm-server`.
    pub fn node_name(&self) -> String {
        self.node_id.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|name| name.trim().to_owned())
                .filter(|name| valid_node_id(name))
                .unwrap_or_else(|| "rkllm-server".to_owned())
        })
    }
}

/// A node name: 1–63 letters, digits, `.`, `_` or `-` (it goes into an
/// HTTP header and names a server in HAProxy's config).
pub fn valid_node_id(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests;
