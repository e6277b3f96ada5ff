//! The sections of the config file (`[mock]`, `[rkllm]`, `[limits]`, …),
//! each with its documented defaults.

use serde::{Deserialize, Serialize};

use super::{
    DEFAULT_IDLE_TIMEOUT_SECS, DEFAULT_MAX_PROMPT_BYTES, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_STREAM_BYTES, DEFAULT_MAX_STREAMS, DEFAULT_MAX_TOKENS_LIMIT,
    DEFAULT_MAX_TOTAL_BYTES, DEFAULT_MOCK_PREFILL_MS, DEFAULT_MOCK_TOKENS_PER_SECOND,
    DEFAULT_QUEUE_LEN,
};

/// `[mock]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockSection {
    /// Tokens per second; 0 = unthrottled.
    pub tokens_per_second: f64,
    /// Delay before the first token.
    pub prefill_ms: u64,
    /// Generations that may run at once per model (each on its own
    /// thread); the NPU runs one at a time, so this exists for benchmarks.
    pub lanes: usize,
    /// Where each model runs: `thread` (in the server, the default) or
    /// `process` (a runner process, as the rkllm backend does).
    pub runner: RunnerKind,
}

/// Where a model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    /// On a thread of the server process.
    Thread,
    /// In its own runner process, supervised by the server.
    Process,
}

impl Default for MockSection {
    fn default() -> Self {
        Self {
            tokens_per_second: DEFAULT_MOCK_TOKENS_PER_SECOND,
            prefill_ms: DEFAULT_MOCK_PREFILL_MS,
            lanes: 1,
            runner: RunnerKind::Thread,
        }
    }
}

/// `[rkllm]`: init parameters of the real runtime.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
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
    /// Where each model runs: `process` (a runner process the server
    /// restarts when the runtime crashes, the default) or `thread` (in the
    /// server, which a runtime crash then takes down).
    pub runner: RunnerKind,
    /// Folder of conversation snapshots (prompt-cache files of chats sent
    /// whole), one folder per model in it; absent: `snapshots` beside the
    /// store's `models` folder.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// Megabytes each model's snapshots may take on disk, their `.json`
    /// files included (least recently used evicted first); 0 keeps none.
    pub snapshot_max_mb: f64,
    /// Megabytes the snapshot folder's disk keeps free: no snapshot is
    /// saved when the save would leave less; 0: no reserve.
    pub snapshot_min_free_mb: f64,
    /// Folder of the probes' verdicts on each model's runtime (kept per
    /// runtime and model file); absent: `probes` beside the store's
    /// `models` folder.
    pub probe_dir: Option<std::path::PathBuf>,
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
            runner: RunnerKind::Process,
            snapshot_dir: None,
            snapshot_max_mb: 2048.0,
            snapshot_min_free_mb: 512.0,
            probe_dir: None,
        }
    }
}

/// `[stdio]`: the stdio and TCP line transports.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSection {
    /// Seconds after which an unused MCP session is ended.
    pub session_idle_secs: u64,
    /// Older name of `[http] allowed_hosts` (merged into it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// Older name of `[http] allowed_origins` (merged into it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
}

impl Default for McpSection {
    fn default() -> Self {
        Self {
            session_idle_secs: 1800,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// `[http]`: the HTTP server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSection {
    /// Origins allowed by CORS (`scheme://host:port` as browsers send it);
    /// empty: no CORS headers, browsers on other origins are refused.
    pub cors_origins: Vec<String>,
    /// Seconds a client may take to send a request's headers.
    pub header_read_timeout_secs: u64,
    /// Seconds a client may take to send a request's body, counted from
    /// its headers.
    pub body_read_timeout_secs: u64,
    /// Host names (without port) accepted in `Host` besides IP literals,
    /// loopback names and this machine's host name; `"*"` accepts any.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`; no port: any) whose pages may call
    /// the server, besides its own; `"*"` accepts any.
    pub allowed_origins: Vec<String>,
}

impl Default for HttpSection {
    fn default() -> Self {
        Self {
            cors_origins: Vec::new(),
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 30,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// `[ui]`: the chat page served at `/`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UiSection {
    /// Serve the page (`GET /` and `/ui/...`); false: those paths are 404.
    pub enabled: bool,
}

impl Default for UiSection {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// `[websocket]`: liveness and number of WebSocket connections.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSocketSection {
    /// Seconds between the server's pings.
    pub ping_interval_secs: u64,
    /// A connection that sends nothing (not even a pong) for this long is closed.
    pub idle_timeout_secs: u64,
    /// WebSocket connections open at once; more are refused with 503.
    pub max_connections: usize,
    /// WebSocket connections open at once from one client address; 0: no
    /// limit per address (behind a balancer, every client has its address).
    pub max_connections_per_ip: usize,
}

impl Default for WebSocketSection {
    fn default() -> Self {
        Self {
            ping_interval_secs: 30,
            idle_timeout_secs: 90,
            max_connections: 4096,
            max_connections_per_ip: 256,
        }
    }
}

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSection {
    /// Largest HTTP body / WebSocket message.
    pub max_request_bytes: usize,
    /// Longest prompt.
    pub max_prompt_bytes: usize,
    /// Token cap when a request names none; `None` (the default): none,
    /// the answer runs until the model ends it or its context is full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_max_tokens: Option<u32>,
    /// Largest `max_tokens` a request may ask for.
    pub max_tokens: u32,
    /// Streams one connection (WebSocket, stdio, TCP, MCP session) may
    /// have unfinished at once.
    pub max_streams_per_connection: usize,
    /// Fetch http(s) image URLs of the OpenAI API (off: images must come
    /// as data URLs or base64).
    pub allow_remote_images: bool,
    /// Time allowed for fetching one image URL.
    pub remote_image_timeout_secs: u64,
    /// Addresses and CIDR blocks image URLs may be fetched from although
    /// they are not public (a LAN image server); empty by default.
    pub remote_image_allow: Vec<String>,
    /// Texts one embedding request may hold.
    pub max_embedding_inputs: usize,
    /// Largest JSON schema (a format, or a forced call's tools) a request
    /// may hold, in bytes as JSON.
    pub max_schema_bytes: usize,
    /// Tokens a rerank by a reranker may prefill in all its judgements.
    pub max_rerank_tokens: u32,
}

impl Default for LimitsSection {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_prompt_bytes: DEFAULT_MAX_PROMPT_BYTES,
            default_max_tokens: None,
            max_tokens: DEFAULT_MAX_TOKENS_LIMIT,
            max_streams_per_connection: 32,
            allow_remote_images: false,
            remote_image_timeout_secs: 10,
            remote_image_allow: Vec::new(),
            max_embedding_inputs: 64,
            max_schema_bytes: crate::engine::DEFAULT_MAX_SCHEMA_BYTES,
            max_rerank_tokens: crate::engine::DEFAULT_MAX_RERANK_TOKENS,
        }
    }
}

/// `[streams]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
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
    /// Seconds a stream started on a WebSocket (or TCP) connection
    /// survives that connection, to be resumed with `subscribe`; 0 aborts
    /// it when the connection closes.
    pub resume_grace_secs: u64,
}

impl Default for StreamsSection {
    fn default() -> Self {
        Self {
            idle_timeout_secs: DEFAULT_IDLE_TIMEOUT_SECS,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            max_streams: DEFAULT_MAX_STREAMS,
            resume_grace_secs: 0,
        }
    }
}

/// `[engine]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSection {
    /// Requests that may wait per model.
    pub queue_len: usize,
    /// Seconds during which interactive requests that arrive after a
    /// background request go ahead of it.
    pub background_max_wait_secs: u64,
    /// Interactive requests that arrive after a background request and
    /// may start ahead of it.
    pub background_max_overtaken: u32,
    /// Models loaded at once; loading another unloads the least recently
    /// used idle one (or waits for one to become idle).
    pub max_loaded_models: usize,
    /// Seconds an idle model stays loaded (a request may ask otherwise);
    /// -1 keeps models loaded, 0 unloads after each request.
    pub keep_alive_secs: i64,
    /// Models loaded at start, before the server reports ready.
    pub preload: Vec<String>,
    /// Seconds a request may wait for its model to load (including the
    /// wait for room under `max_loaded_models`).
    pub load_timeout_secs: u64,
    /// Seconds a generation in a runner process may go without output
    /// before the runner is killed.
    pub stall_timeout_secs: u64,
    /// Runner crashes within `crash_window_secs` that mark a model failed.
    pub max_crashes: u32,
    /// The window for `max_crashes`.
    pub crash_window_secs: u64,
    /// Program and arguments put before runner processes' command line
    /// (for example `["taskset", "-c", "4-7"]`).
    pub runner_prefix: Vec<String>,
    /// Whether a request that names no lane goes to the background lane
    /// when its prompt is a known client's background task (Open WebUI's
    /// titles, tags, follow-ups, queries; Home Assistant's AI tasks).
    pub detect_background: bool,
}

impl Default for EngineSection {
    fn default() -> Self {
        Self {
            queue_len: DEFAULT_QUEUE_LEN,
            background_max_wait_secs: 15,
            background_max_overtaken: 4,
            max_loaded_models: 1,
            keep_alive_secs: 300,
            preload: Vec::new(),
            load_timeout_secs: 120,
            stall_timeout_secs: 180,
            max_crashes: 3,
            crash_window_secs: 300,
            runner_prefix: Vec::new(),
            detect_background: true,
        }
    }
}

/// `[bench]`: settings for benchmarks only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchSection {
    /// Stamp every chunk with `produced_ns`: when the backend produced its
    /// last token, in nanoseconds of the system-wide monotonic clock.
    pub timestamps: bool,
}

/// `[store]`: models pulled into the store (`rkllm-server pull`, `/api/pull`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSection {
    /// Folder of the store; absent: `$XDG_DATA_HOME/rkllm-server/models`
    /// (the service sets `/var/lib/rkllm-server/models`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models_dir: Option<std::path::PathBuf>,
    /// The Hugging Face endpoint; absent: `HF_ENDPOINT`, else
    /// `https://huggingface.co`. An `http://` mirror allows plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Revision pulled when none is named.
    pub revision: String,
    /// This board's chip, to choose among a repository's files: `auto`
    /// (read from the device tree), `rk3588`, `rk3576`, or `none`.
    pub platform: String,
    /// Whether `/api/pull` and `/api/delete` may change the store (they
    /// need an API key when keys are set).
    pub api_pull: bool,
    /// Largest file a pull takes, whether its host declares its size or not.
    pub max_file_bytes: u64,
    /// Free space a pull leaves on the store's disk: it stops before less
    /// is left.
    pub min_free_bytes: u64,
    /// Slowest host a pull accepts, in bytes per second over
    /// `rate_window_secs` (0: any); a slower one is cut, to resume later.
    pub min_bytes_per_sec: u64,
    /// The window over which `min_bytes_per_sec` is measured.
    pub rate_window_secs: u64,
    /// Longest time a pull may take once it holds its model's lock; it is
    /// then cut, to resume later.
    pub pull_timeout_secs: u64,
}

/// `[store] max_file_bytes`: 32 GiB, above any model the NPUs run.
pub const DEFAULT_STORE_MAX_FILE_BYTES: u64 = 32 << 30;
/// `[store] min_free_bytes`: 512 MiB.
pub const DEFAULT_STORE_MIN_FREE_BYTES: u64 = 512 << 20;
/// `[store] min_bytes_per_sec`: 16 KiB/s.
pub const DEFAULT_STORE_MIN_BYTES_PER_SEC: u64 = 16 << 10;
/// `[store] rate_window_secs`.
pub const DEFAULT_STORE_RATE_WINDOW_SECS: u64 = 60;
/// `[store] pull_timeout_secs`: a day.
pub const DEFAULT_STORE_PULL_TIMEOUT_SECS: u64 = 86_400;

impl Default for StoreSection {
    fn default() -> Self {
        Self {
            models_dir: None,
            endpoint: None,
            revision: "main".into(),
            platform: "auto".into(),
            api_pull: true,
            max_file_bytes: DEFAULT_STORE_MAX_FILE_BYTES,
            min_free_bytes: DEFAULT_STORE_MIN_FREE_BYTES,
            min_bytes_per_sec: DEFAULT_STORE_MIN_BYTES_PER_SEC,
            rate_window_secs: DEFAULT_STORE_RATE_WINDOW_SECS,
            pull_timeout_secs: DEFAULT_STORE_PULL_TIMEOUT_SECS,
        }
    }
}

/// `[responses]`: the OpenAI Responses API's store of finished responses,
/// which `previous_response_id` continues (kept in memory only).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponsesSection {
    /// Responses kept at once (the oldest go first); 0: none are kept and
    /// `previous_response_id` is refused.
    pub store_max_entries: usize,
    /// Bytes the kept conversations may take together (text and images,
    /// plus a little per message); a larger conversation is not kept.
    pub store_max_bytes: usize,
    /// Seconds a response is kept after it finished.
    pub store_ttl_secs: u64,
}

impl Default for ResponsesSection {
    fn default() -> Self {
        use crate::transport::api::responses as r;
        Self {
            store_max_entries: r::DEFAULT_STORE_MAX_ENTRIES,
            store_max_bytes: r::DEFAULT_STORE_MAX_BYTES,
            store_ttl_secs: r::DEFAULT_STORE_TTL_SECS,
        }
    }
}

/// `[board]`: where the board's files are read (metrics, `doctor`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BoardSection {
    /// The root under which `sys/`, `proc/` and `dev/` are read: `/` on a
    /// board, a copy of the tree in tests. Its files are bounded where they
    /// are read (`board`: regular files, 16 KiB, symlinks inside it, 2 s).
    pub sys_root: std::path::PathBuf,
}

impl Default for BoardSection {
    fn default() -> Self {
        Self {
            sys_root: std::path::PathBuf::from("/"),
        }
    }
}
