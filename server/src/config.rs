//! The one typed configuration.
//!
//! Loaded once at start in three layers: the TOML file (`--config`), then
//! `RKLLM_SERVER_*` environment variables, then command-line flags (the
//! later layer wins; clap reads a flag's environment variable when the
//! flag is absent). [`Config::validate`] then checks every value, and an
//! invalid one stops the start with a message naming its key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::Deserialize;

use crate::backend::MockConfig;
use crate::engine::{EngineLimits, ModelSpec, RequestLimits};
use crate::stream::StreamLimits;

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
pub const DEFAULT_MAX_TOKENS: u32 = 512;
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
/// Default runtime library, found by the dynamic loader.
pub const DEFAULT_RUNTIME: &str = "librkllmrt.so";

/// Which backend generates text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Deterministic text without an NPU (the default).
    #[default]
    Mock,
    /// Rockchip's RKLLM runtime on the NPU.
    Rkllm,
}

/// Which RKLLM ABI to use with the runtime library.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ValueEnum)]
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

/// How the stdio and TCP line transports frame messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Framing {
    /// One message per line.
    #[default]
    Lines,
    /// Lines, plus `{id}:{index}:{total}:{data}` frames for large messages.
    Chunked,
}

/// Command-line flags; each one also reads `RKLLM_SERVER_<FLAG>`.
#[derive(Debug, Default, Parser)]
#[command(
    name = "rkllm-server",
    version,
    about = "Streaming token generation on Rockchip NPUs"
)]
pub struct Cli {
    /// TOML config file (see config/rkllm-server.toml).
    #[arg(long, env = "RKLLM_SERVER_CONFIG", value_name = "FILE")]
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
    /// RKLLM runtime library (default: librkllmrt.so, found by the loader).
    #[arg(long, env = "RKLLM_SERVER_RUNTIME", value_name = "PATH")]
    pub runtime: Option<PathBuf>,
    /// ABI of the runtime: auto (read its version), 1.3 or 1.2.
    #[arg(long, env = "RKLLM_SERVER_RUNTIME_ABI", value_enum)]
    pub runtime_abi: Option<RuntimeAbi>,
    /// Serve JSON-RPC/MCP on stdin/stdout instead of HTTP.
    #[arg(long, env = "RKLLM_SERVER_STDIO")]
    pub stdio: bool,
    /// Framing of the stdio and TCP transports: lines or chunked.
    #[arg(long, env = "RKLLM_SERVER_STDIO_FRAMING", value_enum)]
    pub stdio_framing: Option<Framing>,
    /// Also serve the stdio line protocol on this TCP address.
    #[arg(long, env = "RKLLM_SERVER_TCP", value_name = "ADDR")]
    pub tcp: Option<String>,
    /// API key clients must send as `Authorization: Bearer KEY`
    /// (repeatable; the variable takes a comma-separated list).
    #[arg(
        long = "api-key",
        env = "RKLLM_SERVER_API_KEY",
        value_name = "KEY",
        value_delimiter = ','
    )]
    pub api_keys: Vec<String>,
    /// File with one API key per line (`#` comments and blank lines skipped).
    #[arg(long, env = "RKLLM_SERVER_API_KEY_FILE", value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,
    /// Mock backend pace in tokens per second (0 = as fast as possible).
    #[arg(long, env = "RKLLM_SERVER_MOCK_TOKENS_PER_SECOND", value_name = "N")]
    pub mock_tokens_per_second: Option<f64>,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive.
    #[arg(long, env = "RKLLM_SERVER_LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<String>,
}

/// A model entry of the config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Name clients use.
    pub name: String,
    /// Model file (required by the rkllm backend).
    #[serde(default)]
    pub path: Option<PathBuf>,
}

/// `[mock]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockSection {
    /// Tokens per second; 0 = unthrottled.
    pub tokens_per_second: f64,
    /// Delay before the first token.
    pub prefill_ms: u64,
}

impl Default for MockSection {
    fn default() -> Self {
        Self {
            tokens_per_second: DEFAULT_MOCK_TOKENS_PER_SECOND,
            prefill_ms: DEFAULT_MOCK_PREFILL_MS,
        }
    }
}

/// `[rkllm]`: init parameters of the real runtime.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RkllmSection {
    /// Context window (must not exceed the model's limit).
    pub max_context_len: u32,
    /// Tokens kept at the start when the context shifts (-1 = runtime default).
    pub n_keep: i32,
    /// Default top-k.
    pub top_k: u32,
    /// Default nucleus mass.
    pub top_p: f64,
    /// Default temperature.
    pub temperature: f64,
    /// Default repetition penalty.
    pub repeat_penalty: f64,
    /// Default frequency penalty.
    pub frequency_penalty: f64,
    /// Default presence penalty.
    pub presence_penalty: f64,
    /// CPU cores the runtime may use, as a bit mask (0xF0: big cores of RK3588/RK3576).
    pub cpu_mask: u32,
    /// CPU threads of the runtime.
    pub cpu_threads: u32,
    /// Keep the embedding table in the model file instead of RAM.
    pub embed_flash: bool,
    /// NPU memory domain to start in.
    pub base_domain_id: i32,
    /// Hide special tokens (EOS and the like) from the text.
    pub skip_special_token: bool,
}

impl Default for RkllmSection {
    fn default() -> Self {
        Self {
            max_context_len: 4096,
            n_keep: -1,
            top_k: 40,
            top_p: 0.9,
            temperature: 0.8,
            repeat_penalty: 1.1,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            cpu_mask: 0xF0,
            cpu_threads: 4,
            embed_flash: true,
            base_domain_id: 0,
            skip_special_token: true,
        }
    }
}

/// `[stdio]`: the stdio and TCP line transports.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StdioSection {
    /// After end of input, seconds the accepted requests may still run.
    pub eof_grace_secs: u64,
}

impl Default for StdioSection {
    fn default() -> Self {
        Self { eof_grace_secs: 10 }
    }
}

/// `[mcp]`: MCP over Streamable HTTP.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSection {
    /// Seconds after which an unused MCP session is ended.
    pub session_idle_secs: u64,
    /// Host names (without port) accepted in the `Host` header; `"*"` accepts any.
    pub allowed_hosts: Vec<String>,
    /// Origins accepted in the `Origin` header (scheme://host, any port);
    /// `"*"` accepts any. Requests without `Origin` are accepted.
    pub allowed_origins: Vec<String>,
}

impl Default for McpSection {
    fn default() -> Self {
        let loopback = ["localhost", "127.0.0.1", "[::1]"];
        Self {
            session_idle_secs: 1800,
            allowed_hosts: loopback.iter().map(|h| (*h).to_owned()).collect(),
            allowed_origins: loopback
                .iter()
                .flat_map(|h| [format!("http://{h}"), format!("https://{h}")])
                .collect(),
        }
    }
}

/// `[http]`: the HTTP server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSection {
    /// Origins allowed by CORS (`scheme://host:port` as browsers send it);
    /// empty: no CORS headers, browsers on other origins are refused.
    pub cors_origins: Vec<String>,
    /// Seconds a client may take to send a request's headers.
    pub header_read_timeout_secs: u64,
}

impl Default for HttpSection {
    fn default() -> Self {
        Self {
            cors_origins: Vec::new(),
            header_read_timeout_secs: 10,
        }
    }
}

/// `[websocket]`: liveness of WebSocket connections.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSocketSection {
    /// Seconds between the server's pings.
    pub ping_interval_secs: u64,
    /// A connection that sends nothing (not even a pong) for this long is closed.
    pub idle_timeout_secs: u64,
}

impl Default for WebSocketSection {
    fn default() -> Self {
        Self {
            ping_interval_secs: 30,
            idle_timeout_secs: 90,
        }
    }
}

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSection {
    /// Largest HTTP body / WebSocket message.
    pub max_request_bytes: usize,
    /// Longest prompt.
    pub max_prompt_bytes: usize,
    /// Token cap when a request names none.
    pub default_max_tokens: u32,
    /// Largest `max_tokens` a request may ask for.
    pub max_tokens: u32,
    /// Streams one connection (WebSocket, stdio, TCP, MCP session) may
    /// have unfinished at once.
    pub max_streams_per_connection: usize,
}

impl Default for LimitsSection {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_prompt_bytes: DEFAULT_MAX_PROMPT_BYTES,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            max_tokens: DEFAULT_MAX_TOKENS_LIMIT,
            max_streams_per_connection: 32,
        }
    }
}

/// `[streams]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamsSection {
    /// Seconds without a consumer before a stream expires.
    pub idle_timeout_secs: u64,
    /// Buffer limit of one stream, in bytes.
    pub max_stream_bytes: usize,
    /// Buffer limit of all streams, in bytes.
    pub max_total_bytes: usize,
    /// Streams queued or generating at once.
    pub max_streams: usize,
}

impl Default for StreamsSection {
    fn default() -> Self {
        Self {
            idle_timeout_secs: DEFAULT_IDLE_TIMEOUT_SECS,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            max_streams: DEFAULT_MAX_STREAMS,
        }
    }
}

/// `[engine]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSection {
    /// Requests that may wait per model.
    pub queue_len: usize,
}

impl Default for EngineSection {
    fn default() -> Self {
        Self {
            queue_len: DEFAULT_QUEUE_LEN,
        }
    }
}

/// The whole configuration, as the file spells it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// HTTP/WebSocket listen address.
    pub listen: String,
    /// Backend kind.
    pub backend: BackendKind,
    /// One model file (shorthand for a single `[[models]]` entry).
    pub model: Option<PathBuf>,
    /// Models; the first is the default.
    pub models: Vec<ModelEntry>,
    /// RKLLM runtime library.
    pub runtime: PathBuf,
    /// ABI of the runtime library.
    pub runtime_abi: RuntimeAbi,
    /// Serve stdin/stdout instead of HTTP.
    pub stdio: bool,
    /// Framing of the line transports.
    pub stdio_framing: Framing,
    /// TCP address for the line protocol.
    pub tcp: Option<String>,
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
    /// WebSocket liveness.
    pub websocket: WebSocketSection,
    /// Request limits.
    pub limits: LimitsSection,
    /// Stream manager limits.
    pub streams: StreamsSection,
    /// Scheduler settings.
    pub engine: EngineSection,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.to_owned(),
            backend: BackendKind::default(),
            model: None,
            models: Vec::new(),
            runtime: PathBuf::from(DEFAULT_RUNTIME),
            runtime_abi: RuntimeAbi::default(),
            stdio: false,
            stdio_framing: Framing::default(),
            tcp: None,
            api_keys: Vec::new(),
            api_key_file: None,
            log_level: "info".to_owned(),
            mock: MockSection::default(),
            rkllm: RkllmSection::default(),
            stdio_transport: StdioSection::default(),
            mcp: McpSection::default(),
            http: HttpSection::default(),
            websocket: WebSocketSection::default(),
            limits: LimitsSection::default(),
            streams: StreamsSection::default(),
            engine: EngineSection::default(),
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
        let mut config = match &cli.config {
            Some(path) => Self::from_file(path)?,
            None => Self::default(),
        };
        config.apply(cli);
        config.load_key_file()?;
        config.validate()?;
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
        if let Some(model) = cli.model {
            self.model = Some(model);
        }
        if let Some(runtime) = cli.runtime {
            self.runtime = runtime;
        }
        if let Some(abi) = cli.runtime_abi {
            self.runtime_abi = abi;
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
        if !cli.api_keys.is_empty() {
            self.api_keys = cli.api_keys;
        }
        if let Some(file) = cli.api_key_file {
            self.api_key_file = Some(file);
        }
        if let Some(tps) = cli.mock_tokens_per_second {
            self.mock.tokens_per_second = tps;
        }
        if let Some(level) = cli.log_level {
            self.log_level = level;
        }
    }

    /// Checks every value once; the error names the offending key.
    ///
    /// # Errors
    /// The first invalid value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        self.tcp_addr()?;
        if !(1..=3600).contains(&self.stdio_transport.eof_grace_secs) {
            return Err(invalid(
                "stdio_transport.eof_grace_secs",
                format!(
                    "must be between 1 and 3600, got {}",
                    self.stdio_transport.eof_grace_secs
                ),
            ));
        }
        if self
            .api_keys
            .iter()
            .any(|k| k.is_empty() || k.chars().any(char::is_whitespace))
        {
            return Err(invalid(
                "api_keys",
                "API keys must be non-empty and contain no spaces",
            ));
        }
        if !(1..=3600).contains(&self.http.header_read_timeout_secs) {
            return Err(invalid(
                "http.header_read_timeout_secs",
                format!(
                    "must be between 1 and 3600, got {}",
                    self.http.header_read_timeout_secs
                ),
            ));
        }
        let ws = &self.websocket;
        if ws.ping_interval_secs == 0 || ws.idle_timeout_secs <= ws.ping_interval_secs {
            return Err(invalid(
                "websocket.idle_timeout_secs",
                format!(
                    "must be above websocket.ping_interval_secs ({}), which must be at least 1; got {}",
                    ws.ping_interval_secs, ws.idle_timeout_secs
                ),
            ));
        }
        if self.limits.max_streams_per_connection == 0 {
            return Err(invalid(
                "limits.max_streams_per_connection",
                "must be at least 1",
            ));
        }
        if !(10..=604_800).contains(&self.mcp.session_idle_secs) {
            return Err(invalid(
                "mcp.session_idle_secs",
                format!(
                    "must be between 10 and 604800, got {}",
                    self.mcp.session_idle_secs
                ),
            ));
        }
        if self.model.is_some() && !self.models.is_empty() {
            return Err(invalid(
                "model",
                "give either `model` or `[[models]]`, not both",
            ));
        }
        let models = self.model_specs();
        for (i, model) in models.iter().enumerate() {
            if model.name.is_empty()
                || model.name.len() > 128
                || model.name.chars().any(char::is_whitespace)
            {
                return Err(invalid(
                    "models.name",
                    format!(
                        "model names must be 1 to 128 characters without spaces, got {:?}",
                        model.name
                    ),
                ));
            }
            if models[..i].iter().any(|m| m.name == model.name) {
                return Err(invalid(
                    "models.name",
                    format!("model `{}` is declared twice", model.name),
                ));
            }
        }
        if self.backend == BackendKind::Rkllm {
            if self.model.is_none() && self.models.is_empty() {
                return Err(invalid(
                    "model",
                    "the rkllm backend needs a model file: pass --model PATH or declare [[models]]",
                ));
            }
            if let Some(m) = models.iter().find(|m| m.path.is_none()) {
                return Err(invalid(
                    "models.path",
                    format!("model `{}` needs a `path` for the rkllm backend", m.name),
                ));
            }
            self.validate_rkllm()?;
        }
        let tps = self.mock.tokens_per_second;
        if !(tps.is_finite() && (0.0..=1_000_000.0).contains(&tps)) {
            return Err(invalid(
                "mock.tokens_per_second",
                format!("must be between 0 and 1000000, got {tps}"),
            ));
        }
        if self.mock.prefill_ms > 600_000 {
            return Err(invalid("mock.prefill_ms", "must be at most 600000"));
        }
        let l = &self.limits;
        if !(1024..=(64 << 20)).contains(&l.max_request_bytes) {
            return Err(invalid(
                "limits.max_request_bytes",
                format!(
                    "must be between 1024 and {}, got {}",
                    64 << 20,
                    l.max_request_bytes
                ),
            ));
        }
        if l.max_prompt_bytes == 0 || l.max_prompt_bytes > l.max_request_bytes {
            return Err(invalid(
                "limits.max_prompt_bytes",
                format!(
                    "must be between 1 and limits.max_request_bytes ({}), got {}",
                    l.max_request_bytes, l.max_prompt_bytes
                ),
            ));
        }
        if !(1..=1_000_000).contains(&l.max_tokens) {
            return Err(invalid(
                "limits.max_tokens",
                format!("must be between 1 and 1000000, got {}", l.max_tokens),
            ));
        }
        if l.default_max_tokens == 0 || l.default_max_tokens > l.max_tokens {
            return Err(invalid(
                "limits.default_max_tokens",
                format!(
                    "must be between 1 and limits.max_tokens ({}), got {}",
                    l.max_tokens, l.default_max_tokens
                ),
            ));
        }
        let s = &self.streams;
        if !(1..=86_400).contains(&s.idle_timeout_secs) {
            return Err(invalid(
                "streams.idle_timeout_secs",
                format!("must be between 1 and 86400, got {}", s.idle_timeout_secs),
            ));
        }
        if s.max_stream_bytes < 1024 {
            return Err(invalid(
                "streams.max_stream_bytes",
                format!("must be at least 1024, got {}", s.max_stream_bytes),
            ));
        }
        if s.max_total_bytes < s.max_stream_bytes {
            return Err(invalid(
                "streams.max_total_bytes",
                format!(
                    "must be at least streams.max_stream_bytes ({}), got {}",
                    s.max_stream_bytes, s.max_total_bytes
                ),
            ));
        }
        if !(1..=1_000_000).contains(&s.max_streams) {
            return Err(invalid(
                "streams.max_streams",
                format!("must be between 1 and 1000000, got {}", s.max_streams),
            ));
        }
        if !(1..=100_000).contains(&self.engine.queue_len) {
            return Err(invalid(
                "engine.queue_len",
                format!(
                    "must be between 1 and 100000, got {}",
                    self.engine.queue_len
                ),
            ));
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log_level).is_err() {
            return Err(invalid(
                "log_level",
                format!(
                    "must be error, warn, info, debug, trace or a tracing filter, got {:?}",
                    self.log_level
                ),
            ));
        }
        Ok(())
    }

    fn validate_rkllm(&self) -> Result<(), ConfigError> {
        let r = &self.rkllm;
        if !(16..=131_072).contains(&r.max_context_len) {
            return Err(invalid(
                "rkllm.max_context_len",
                format!("must be between 16 and 131072, got {}", r.max_context_len),
            ));
        }
        if r.n_keep < -1 {
            return Err(invalid(
                "rkllm.n_keep",
                format!("must be -1 or more, got {}", r.n_keep),
            ));
        }
        if r.top_k > 1000 {
            return Err(invalid(
                "rkllm.top_k",
                format!("must be between 0 and 1000, got {}", r.top_k),
            ));
        }
        let ranges: [(&'static str, f64, f64, f64); 5] = [
            ("rkllm.top_p", r.top_p, 0.0, 1.0),
            ("rkllm.temperature", r.temperature, 0.0, 2.0),
            ("rkllm.repeat_penalty", r.repeat_penalty, 0.0, 10.0),
            ("rkllm.frequency_penalty", r.frequency_penalty, -2.0, 2.0),
            ("rkllm.presence_penalty", r.presence_penalty, -2.0, 2.0),
        ];
        for (key, value, low, high) in ranges {
            if !(value.is_finite() && (low..=high).contains(&value)) {
                return Err(invalid(
                    key,
                    format!("must be between {low} and {high}, got {value}"),
                ));
            }
        }
        if !(1..=0xFF).contains(&r.cpu_mask) {
            return Err(invalid(
                "rkllm.cpu_mask",
                format!(
                    "must be a mask of CPUs 0 to 7 (1 to 0xFF), got {:#x}",
                    r.cpu_mask
                ),
            ));
        }
        if !(1..=8).contains(&r.cpu_threads) {
            return Err(invalid(
                "rkllm.cpu_threads",
                format!("must be between 1 and 8, got {}", r.cpu_threads),
            ));
        }
        if self.limits.max_tokens > i32::MAX as u32 {
            return Err(invalid("limits.max_tokens", "too large for the runtime"));
        }
        Ok(())
    }

    /// The listen address.
    ///
    /// # Errors
    /// When `listen` is not `IP:PORT`.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.listen.parse().map_err(|_| {
            invalid(
                "listen",
                format!(
                    "expected IP:PORT such as 127.0.0.1:8080, got {:?}",
                    self.listen
                ),
            )
        })
    }

    /// The TCP address of the line protocol, if any.
    ///
    /// # Errors
    /// When `tcp` is not `IP:PORT`.
    pub fn tcp_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        self.tcp
            .as_deref()
            .map(|tcp| {
                tcp.parse().map_err(|_| {
                    invalid(
                        "tcp",
                        format!("expected IP:PORT such as 127.0.0.1:7070, got {tcp:?}"),
                    )
                })
            })
            .transpose()
    }

    /// The line transports' settings.
    pub fn line_options(&self) -> crate::transport::line_session::LineOptions {
        crate::transport::line_session::LineOptions {
            transport: "stdio",
            framing: self.stdio_framing,
            max_line: self.limits.max_request_bytes,
            eof_grace: Duration::from_secs(self.stdio_transport.eof_grace_secs),
        }
    }

    /// The models to load; the first is the default.
    pub fn model_specs(&self) -> Vec<ModelSpec> {
        if let Some(path) = &self.model {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            return vec![ModelSpec {
                name,
                path: Some(path.clone()),
            }];
        }
        if self.models.is_empty() {
            return vec![ModelSpec {
                name: DEFAULT_MOCK_MODEL.to_owned(),
                path: None,
            }];
        }
        self.models
            .iter()
            .map(|m| ModelSpec {
                name: m.name.clone(),
                path: m.path.clone(),
            })
            .collect()
    }

    /// Mock backend settings.
    pub fn mock_config(&self) -> MockConfig {
        MockConfig {
            tokens_per_second: self.mock.tokens_per_second,
            prefill_ms: self.mock.prefill_ms,
        }
    }

    /// Stream manager limits.
    pub fn stream_limits(&self) -> StreamLimits {
        StreamLimits {
            idle_timeout: Duration::from_secs(self.streams.idle_timeout_secs),
            max_stream_bytes: self.streams.max_stream_bytes,
            max_total_bytes: self.streams.max_total_bytes,
            max_streams: self.streams.max_streams,
        }
    }

    /// Engine limits.
    pub fn engine_limits(&self) -> EngineLimits {
        EngineLimits {
            queue_len: self.engine.queue_len,
            request: RequestLimits {
                max_prompt_bytes: self.limits.max_prompt_bytes,
                default_max_tokens: self.limits.default_max_tokens,
                max_tokens_limit: self.limits.max_tokens,
            },
        }
    }
}

#[cfg(test)]
mod tests;
