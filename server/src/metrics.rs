//! Prometheus metrics (text format), one process-wide set. A leaf: any
//! layer records into it, and it knows none of them.
//!
//! Counters and histograms are updated where things happen (requests,
//! rejections, aborts, finished generations); gauges of current state
//! (streams, queue, buffered bytes) are handed in at scrape time
//! ([`Gauges`]) by the `/metrics` handler.

use std::sync::LazyLock;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    transport: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    api: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    lane: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    model: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefreshLabels {
    model: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnloadLabels {
    model: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    model: String,
    state: &'static str,
}

/// The HTTP APIs counted by [`api_request`].
const HTTP_APIS: [&str; 4] = ["openai", "ollama", "anthropic", "responses"];

/// The states a model may be in, each a series of `rkllm_model_state`.
const MODEL_STATES: [&str; 4] = ["available", "loading", "loaded", "failed"];

struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    http_requests: Family<ApiLabels, Counter>,
    queued: Family<LaneLabels, Counter>,
    rejected: Family<ReasonLabels, Counter>,
    aborts: Family<CauseLabels, Counter>,
    generations: Counter,
    generated_tokens: Counter,
    time_to_first_token: Histogram,
    queue_wait: Histogram,
    decode_tokens_per_second: Gauge<f64, std::sync::atomic::AtomicU64>,
    model_generated_tokens: Family<ModelLabels, Counter>,
    model_decode_tokens_per_second: Family<ModelLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    runtime_memory_bytes: Gauge<f64, std::sync::atomic::AtomicU64>,
    active_streams: Gauge,
    queued_requests: Gauge,
    buffered_bytes: Gauge,
    mcp_sessions: Gauge,
    model_loads: Family<ModelLabels, Counter>,
    model_unloads: Family<UnloadLabels, Counter>,
    runner_crashes: Family<ModelLabels, Counter>,
    model_state: Family<StateLabels, Gauge>,
    runner_memory: Family<ModelLabels, Gauge>,
    tokenizer_memory: Family<ModelLabels, Gauge>,
    kv_cache_tokens: Family<ModelLabels, Gauge>,
    kv_cache_utilization: Family<ModelLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    lora_adapters_loaded: Family<ModelLabels, Gauge>,
    snapshot_hits: Family<ModelLabels, Counter>,
    snapshot_misses: Family<ModelLabels, Counter>,
    prompt_tokens_reused: Family<ModelLabels, Counter>,
    prompt_tokens_prefilled: Family<ModelLabels, Counter>,
    prompt_cache_requests: Family<OutcomeLabels, Counter>,
    snapshot_files: Family<ModelLabels, Gauge>,
    snapshot_bytes: Family<ModelLabels, Gauge>,
    snapshot_refreshes: Family<RefreshLabels, Counter>,
    snapshot_refresh_seconds: Family<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("rkllm");
    let requests = Family::<RequestLabels, Counter>::default();
    registry.register(
        "requests",
        "JSON-RPC requests by transport and outcome",
        requests.clone(),
    );
    let http_requests = Family::<ApiLabels, Counter>::default();
    registry.register(
        "http_requests",
        "Generation requests received by each HTTP API, refused ones included",
        http_requests.clone(),
    );
    let queued = Family::<LaneLabels, Counter>::default();
    registry.register(
        "lane_requests",
        "Generation requests admitted to a model's queue, by lane (interactive, background)",
        queued.clone(),
    );
    let rejected = Family::<ReasonLabels, Counter>::default();
    registry.register(
        "rejected_requests",
        "Requests refused before any work, by reason",
        rejected.clone(),
    );
    let aborts = Family::<CauseLabels, Counter>::default();
    registry.register(
        "aborts",
        "Generations stopped early, by cause",
        aborts.clone(),
    );
    let generations = Counter::default();
    registry.register("generations", "Generations that ran", generations.clone());
    let generated_tokens = Counter::default();
    registry.register(
        "generated_tokens",
        "Tokens generated",
        generated_tokens.clone(),
    );
    let time_to_first_token = Histogram::new(exponential_buckets(0.01, 2.0, 14));
    registry.register(
        "time_to_first_token_seconds",
        "Prefill time of each generation",
        time_to_first_token.clone(),
    );
    let queue_wait = Histogram::new(exponential_buckets(0.001, 2.0, 18));
    registry.register(
        "queue_wait_seconds",
        "Time requests waited in their model's queue",
        queue_wait.clone(),
    );
    let decode_tokens_per_second = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    registry.register(
        "decode_tokens_per_second",
        "Decode rate of the last generation",
        decode_tokens_per_second.clone(),
    );
    let model_generated_tokens = Family::<ModelLabels, Counter>::default();
    registry.register(
        "model_generated_tokens",
        "Tokens generated, per model",
        model_generated_tokens.clone(),
    );
    let snapshot_hits = Family::<ModelLabels, Counter>::default();
    registry.register(
        "snapshot_hits",
        "Conversations sent whole that started from a snapshot, per model",
        snapshot_hits.clone(),
    );
    let snapshot_misses = Family::<ModelLabels, Counter>::default();
    registry.register(
        "snapshot_misses",
        "Conversations sent whole with no snapshot to start from, per model",
        snapshot_misses.clone(),
    );
    let prompt_tokens_reused = Family::<ModelLabels, Counter>::default();
    registry.register(
        "prompt_tokens_reused",
        "Prompt tokens a request started from (a snapshot, the prompt cache, the runtime's \
         history), per model",
        prompt_tokens_reused.clone(),
    );
    let prompt_tokens_prefilled = Family::<ModelLabels, Counter>::default();
    registry.register(
        "prompt_tokens_prefilled",
        "Prompt tokens the runtime prefilled, per model",
        prompt_tokens_prefilled.clone(),
    );
    let prompt_cache_requests = Family::<OutcomeLabels, Counter>::default();
    registry.register(
        "prompt_cache_requests",
        "Requests of a conversation by what their prompt started from: hit (at least the \
         conversation's previous prompt), partial (less), miss (nothing), new (a first request \
         prefilled whole), shared (a first request started from a shared opening), per model",
        prompt_cache_requests.clone(),
    );
    let snapshot_files = Family::<ModelLabels, Gauge>::default();
    registry.register(
        "snapshot_files",
        "Conversation snapshot files kept, per model",
        snapshot_files.clone(),
    );
    let snapshot_refreshes = Family::<RefreshLabels, Counter>::default();
    registry.register(
        "snapshot_refreshes",
        "Returning conversations' snapshots brought up to date while the NPU was idle, per model \
         and outcome (done, or yielded: stopped by a request, an unload or shutdown)",
        snapshot_refreshes.clone(),
    );
    let snapshot_refresh_seconds =
        Family::<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
    registry.register(
        "snapshot_refresh_seconds",
        "Time the NPU spent bringing snapshots up to date while idle, per model",
        snapshot_refresh_seconds.clone(),
    );
    let snapshot_bytes = Family::<ModelLabels, Gauge>::default();
    registry.register(
        "snapshot_bytes",
        "Bytes the conversation snapshots take on disk, their fingerprints included, per model",
        snapshot_bytes.clone(),
    );
    let model_decode_tokens_per_second =
        Family::<ModelLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    registry.register(
        "model_decode_tokens_per_second",
        "Decode rate of each model's last generation",
        model_decode_tokens_per_second.clone(),
    );
    let runtime_memory_bytes = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    registry.register(
        "runtime_memory_bytes",
        "Peak memory the runtime reported for the last generation",
        runtime_memory_bytes.clone(),
    );
    let active_streams = Gauge::default();
    registry.register(
        "active_streams",
        "Streams queued or generating",
        active_streams.clone(),
    );
    let queued_requests = Gauge::default();
    registry.register(
        "queued_requests",
        "Requests waiting in model queues",
        queued_requests.clone(),
    );
    let buffered_bytes = Gauge::default();
    registry.register(
        "stream_buffered_bytes",
        "Bytes buffered by all streams",
        buffered_bytes.clone(),
    );
    let mcp_sessions = Gauge::default();
    registry.register(
        "mcp_sessions",
        "Open MCP sessions over HTTP",
        mcp_sessions.clone(),
    );
    let model_loads = Family::<ModelLabels, Counter>::default();
    registry.register(
        "model_loads",
        "Models loaded (a runner started and loaded its model)",
        model_loads.clone(),
    );
    let model_unloads = Family::<UnloadLabels, Counter>::default();
    registry.register(
        "model_unloads",
        "Models unloaded, by reason (idle, evicted, requested, crashed, shutdown)",
        model_unloads.clone(),
    );
    let runner_crashes = Family::<ModelLabels, Counter>::default();
    registry.register(
        "runner_crashes",
        "Runners lost to a crash, an unexpected exit or a stall",
        runner_crashes.clone(),
    );
    let model_state = Family::<StateLabels, Gauge>::default();
    registry.register(
        "model_state",
        "1 for the state each model is in (available, loading, loaded, failed)",
        model_state.clone(),
    );
    let runner_memory = Family::<ModelLabels, Gauge>::default();
    registry.register(
        "runner_memory_bytes",
        "Resident memory of each loaded model's runner processes",
        runner_memory.clone(),
    );
    let tokenizer_memory = Family::<ModelLabels, Gauge>::default();
    registry.register(
        "tokenizer_memory_bytes",
        "Memory of each model's loaded tokenizer vocabulary in the server (0 until loaded)",
        tokenizer_memory.clone(),
    );
    let kv_cache_tokens = Family::<ModelLabels, Gauge>::default();
    registry.register(
        "kv_cache_tokens",
        "Positions each model's KV cache held after its last request (0: not loaded or unknown)",
        kv_cache_tokens.clone(),
    );
    let kv_cache_utilization =
        Family::<ModelLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    registry.register(
        "kv_cache_utilization",
        "Each model's KV cache positions held against its context, 0 to 1 (the Gateway API \
         Inference Extension's KVCacheUtilization)",
        kv_cache_utilization.clone(),
    );
    let lora_adapters_loaded = Family::<ModelLabels, Gauge>::default();
    registry.register(
        "lora_adapters_loaded",
        "LoRA adapters loaded with each model (0 when it is not loaded)",
        lora_adapters_loaded.clone(),
    );
    Metrics {
        registry,
        tokenizer_memory,
        kv_cache_tokens,
        kv_cache_utilization,
        lora_adapters_loaded,
        model_loads,
        model_unloads,
        runner_crashes,
        model_state,
        runner_memory,
        requests,
        http_requests,
        queued,
        rejected,
        aborts,
        generations,
        generated_tokens,
        time_to_first_token,
        queue_wait,
        decode_tokens_per_second,
        model_generated_tokens,
        model_decode_tokens_per_second,
        snapshot_hits,
        snapshot_misses,
        prompt_tokens_reused,
        prompt_tokens_prefilled,
        prompt_cache_requests,
        snapshot_files,
        snapshot_bytes,
        snapshot_refreshes,
        snapshot_refresh_seconds,
        runtime_memory_bytes,
        active_streams,
        queued_requests,
        buffered_bytes,
        mcp_sessions,
    }
});

/// Counts a request.
pub fn request(transport: &'static str, outcome: &'static str) {
    METRICS
        .requests
        .get_or_create(&RequestLabels { transport, outcome })
        .inc();
}

/// Counts a generation request an HTTP API received (`openai`, `ollama`,
/// `anthropic`, `responses`), before it is read: refused ones count too.
pub fn api_request(api: &'static str) {
    METRICS
        .http_requests
        .get_or_create(&ApiLabels { api })
        .inc();
}

/// Counts a generation request admitted to a model's queue in `lane`
/// (`interactive` or `background`).
pub fn queued(lane: &'static str) {
    METRICS.queued.get_or_create(&LaneLabels { lane }).inc();
}

/// Counts a refused request.
pub fn rejected(reason: &'static str) {
    METRICS
        .rejected
        .get_or_create(&ReasonLabels { reason })
        .inc();
}

/// Counts a generation stopped early.
pub fn aborted(cause: &'static str) {
    METRICS.aborts.get_or_create(&CauseLabels { cause }).inc();
}

/// Records a generation that ran.
pub fn generation(
    model: &str,
    queue_ms: f64,
    prefill_ms: f64,
    tokens: u32,
    tokens_per_second: f64,
    memory_mb: Option<f64>,
) {
    let m = &*METRICS;
    m.generations.inc();
    m.generated_tokens.inc_by(u64::from(tokens));
    let labels = ModelLabels {
        model: model.to_owned(),
    };
    m.model_generated_tokens
        .get_or_create(&labels)
        .inc_by(u64::from(tokens));
    m.queue_wait.observe(queue_ms / 1000.0);
    m.time_to_first_token.observe(prefill_ms / 1000.0);
    if tokens_per_second > 0.0 {
        m.decode_tokens_per_second.set(tokens_per_second);
        m.model_decode_tokens_per_second
            .get_or_create(&labels)
            .set(tokens_per_second);
    }
    if let Some(mb) = memory_mb {
        m.runtime_memory_bytes.set(mb * 1024.0 * 1024.0);
    }
}

/// What a run left of its model's conversation snapshots: the hits and
/// misses it adds, and the files and bytes kept.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotCounts {
    pub hits: u32,
    pub misses: u32,
    pub files: u32,
    pub bytes: u64,
}

/// Records what a run left of its model's conversation snapshots.
pub fn snapshots(model: &str, report: SnapshotCounts) {
    let m = &*METRICS;
    let labels = ModelLabels {
        model: model.to_owned(),
    };
    m.snapshot_hits
        .get_or_create(&labels)
        .inc_by(u64::from(report.hits));
    m.snapshot_misses
        .get_or_create(&labels)
        .inc_by(u64::from(report.misses));
    m.snapshot_files
        .get_or_create(&labels)
        .set(i64::from(report.files));
    m.snapshot_bytes
        .get_or_create(&labels)
        .set(i64::try_from(report.bytes).unwrap_or(i64::MAX));
}

/// Records the prompt tokens one request started from (`reused`) and
/// those the runtime prefilled, and its conversation's `outcome` (see
/// `engine::reuse`) when it belongs to one.
pub fn prompt_reuse(model: &str, reused: u32, prefilled: u32, outcome: Option<&'static str>) {
    let m = &*METRICS;
    let labels = ModelLabels {
        model: model.to_owned(),
    };
    m.prompt_tokens_reused
        .get_or_create(&labels)
        .inc_by(u64::from(reused));
    m.prompt_tokens_prefilled
        .get_or_create(&labels)
        .inc_by(u64::from(prefilled));
    if let Some(outcome) = outcome {
        m.prompt_cache_requests
            .get_or_create(&OutcomeLabels {
                model: model.to_owned(),
                outcome,
            })
            .inc();
    }
}

/// Records a lane's idle work (a snapshot brought up to date) that took
/// `took`, and whether it yielded to a request.
pub fn idle_work(model: &str, yielded: bool, took: std::time::Duration) {
    let m = &*METRICS;
    m.snapshot_refreshes
        .get_or_create(&RefreshLabels {
            model: model.to_owned(),
            outcome: if yielded { "yielded" } else { "done" },
        })
        .inc();
    m.snapshot_refresh_seconds
        .get_or_create(&ModelLabels {
            model: model.to_owned(),
        })
        .inc_by(took.as_secs_f64());
}

/// Counts a model load.
pub fn model_loaded(model: &str) {
    METRICS
        .model_loads
        .get_or_create(&ModelLabels {
            model: model.to_owned(),
        })
        .inc();
}

/// Counts a model unload.
pub fn model_unloaded(model: &str, reason: &'static str) {
    METRICS
        .model_unloads
        .get_or_create(&UnloadLabels {
            model: model.to_owned(),
            reason,
        })
        .inc();
}

/// Counts a runner lost.
pub fn runner_crashed(model: &str) {
    METRICS
        .runner_crashes
        .get_or_create(&ModelLabels {
            model: model.to_owned(),
        })
        .inc();
}

/// One model's current state, for the gauges.
#[derive(Debug, Clone, Default)]
pub struct ModelGauge {
    /// Model name.
    pub name: String,
    /// `available`, `loading`, `loaded` or `failed`.
    pub state: &'static str,
    /// Resident memory of its runners, when it has any.
    pub memory_bytes: Option<u64>,
    /// Memory of its loaded tokenizer vocabulary, once loaded.
    pub tokenizer_memory_bytes: Option<u64>,
    /// Positions its KV cache held after its last request, when known.
    pub kv_cache_tokens: Option<u64>,
    /// Tokens its context holds.
    pub context_length: Option<u32>,
    /// Its LoRA adapters loaded with it (none while it is not loaded).
    pub lora_adapters: Vec<String>,
}

/// Current-state gauges, read by the caller at scrape time.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Streams queued or generating.
    pub active_streams: usize,
    /// Requests waiting in the models' queues.
    pub queued_requests: usize,
    /// Bytes buffered by every stream.
    pub buffered_bytes: usize,
    /// Open MCP sessions over HTTP.
    pub mcp_sessions: usize,
    /// Every configured model.
    pub models: Vec<ModelGauge>,
    /// The board's gauges (NPU, clocks, temperatures, memory), each family
    /// present only where the board has its source.
    pub board: Vec<BoardSeries>,
}

/// One labelled value of a board gauge.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardSample {
    /// Label names and values.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: f64,
}

/// A board gauge family, `rkllm_` + `name`, read at scrape time.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardSeries {
    /// The name after `rkllm_`, with its unit (`clock_frequency_hertz`).
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Its samples (at least one).
    pub samples: Vec<BoardSample>,
}

/// The text exposition, with `gauges` as the current state.
pub fn render(gauges: Gauges) -> Result<String, std::fmt::Error> {
    let m = &*METRICS;
    let set = |gauge: &Gauge, value: usize| {
        gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
    };
    set(&m.active_streams, gauges.active_streams);
    set(&m.queued_requests, gauges.queued_requests);
    set(&m.buffered_bytes, gauges.buffered_bytes);
    set(&m.mcp_sessions, gauges.mcp_sessions);
    // Counters start at 0, so that a rate or increase over them has data
    // before the first request or crash.
    for api in HTTP_APIS {
        let _ = m.http_requests.get_or_create(&ApiLabels { api });
    }
    for model in &gauges.models {
        let labels = ModelLabels {
            model: model.name.clone(),
        };
        let _ = m.runner_crashes.get_or_create(&labels);
        let _ = m.model_generated_tokens.get_or_create(&labels);
        // 0 until the model's first generation, as the unlabelled gauge.
        let _ = m.model_decode_tokens_per_second.get_or_create(&labels);
        for state in MODEL_STATES {
            m.model_state
                .get_or_create(&StateLabels {
                    model: model.name.clone(),
                    state,
                })
                .set(i64::from(model.state == state));
        }
        m.runner_memory
            .get_or_create(&ModelLabels {
                model: model.name.clone(),
            })
            .set(i64::try_from(model.memory_bytes.unwrap_or(0)).unwrap_or(i64::MAX));
        m.tokenizer_memory
            .get_or_create(&ModelLabels {
                model: model.name.clone(),
            })
            .set(i64::try_from(model.tokenizer_memory_bytes.unwrap_or(0)).unwrap_or(i64::MAX));
        let held = model.kv_cache_tokens.unwrap_or(0);
        m.kv_cache_tokens
            .get_or_create(&labels)
            .set(i64::try_from(held).unwrap_or(i64::MAX));
        let context = model.context_length.map_or(0, u64::from);
        let used = if context == 0 {
            0.0
        } else {
            (held as f64 / context as f64).min(1.0)
        };
        m.kv_cache_utilization.get_or_create(&labels).set(used);
        m.lora_adapters_loaded
            .get_or_create(&labels)
            .set(i64::try_from(model.lora_adapters.len()).unwrap_or(i64::MAX));
    }
    // Encoding reads the registry only; the lock keeps two scrapes from
    // interleaving their gauge updates and output.
    static ENCODE: Mutex<()> = Mutex::new(());
    let _one = ENCODE.lock();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &m.registry)?;
    // The board's families change with the board (a zone, a clock), so
    // they are written here rather than registered, before the end marker.
    let end = text.rfind("# EOF").unwrap_or(text.len());
    let mut board = String::new();
    write_board(&mut board, &gauges.board)?;
    write_lora_info(&mut board, &gauges.models)?;
    text.insert_str(end, &board);
    Ok(text)
}

/// `rkllm_lora_requests`: the loaded LoRA adapters in the shape the
/// Gateway API Inference Extension reads for adapter affinity (vLLM's
/// `lora_requests_info`): one series whose labels name the adapters
/// loaded (`running_lora_adapters`, comma-separated), none waiting (an
/// adapter is loaded with its model, never per request) and `max_lora`,
/// its value the time of the scrape.
fn write_lora_info(out: &mut String, models: &[ModelGauge]) -> std::fmt::Result {
    use std::fmt::Write;
    let loaded: Vec<&str> = models
        .iter()
        .flat_map(|m| m.lora_adapters.iter().map(String::as_str))
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let name = "rkllm_lora_requests";
    writeln!(
        out,
        "# HELP {name} LoRA adapters loaded (the Gateway API Inference Extension's LoRA \
         affinity); the value is the time of the scrape"
    )?;
    writeln!(out, "# TYPE {name} gauge")?;
    let escaped: String = loaded
        .join(",")
        .chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            '\n' => vec!['\\', 'n'],
            c => vec![c],
        })
        .collect();
    writeln!(
        out,
        "{name}{{running_lora_adapters=\"{escaped}\",waiting_lora_adapters=\"\",max_lora=\"{}\"}} {now}",
        loaded.len()
    )
}

fn write_board(out: &mut String, series: &[BoardSeries]) -> std::fmt::Result {
    use std::fmt::Write;
    for family in series {
        let name = format!("rkllm_{}", family.name);
        writeln!(out, "# HELP {name} {}", family.help)?;
        writeln!(out, "# TYPE {name} gauge")?;
        for sample in &family.samples {
            out.push_str(&name);
            if !sample.labels.is_empty() {
                out.push('{');
                for (i, (key, value)) in sample.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write!(out, "{key}=\"")?;
                    for c in value.chars() {
                        match c {
                            '\\' => out.push_str("\\\\"),
                            '"' => out.push_str("\\\""),
                            '\n' => out.push_str("\\n"),
                            c => out.push(c),
                        }
                    }
                    out.push('"');
                }
                out.push('}');
            }
            if sample.value.fract() == 0.0 && sample.value.abs() < 1e15 {
                writeln!(out, " {}", sample.value as i64)?;
            } else {
                writeln!(out, " {}", sample.value)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn board_families_come_before_the_end_marker_with_escaped_labels() {
        let text = render(Gauges {
            board: vec![BoardSeries {
                name: "thermal_zone_temperature_celsius",
                help: "Temperature",
                samples: vec![BoardSample {
                    labels: vec![("zone", "thermal_zone0".into()), ("type", "a\"b".into())],
                    value: 41.5,
                }],
            }],
            ..Gauges::default()
        })
        .unwrap();
        let at = text
            .find("rkllm_thermal_zone_temperature_celsius{zone=\"thermal_zone0\",type=\"a\\\"b\"} 41.5\n")
            .expect(&text);
        assert!(text.contains("# TYPE rkllm_thermal_zone_temperature_celsius gauge\n"));
        assert!(at < text.rfind("# EOF").unwrap());
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn tokens_and_decode_rate_are_counted_per_model() {
        generation("per-model-a", 1.0, 2.0, 5, 12.5, None);
        generation("per-model-a", 1.0, 2.0, 3, 20.0, None);
        generation("per-model-b", 1.0, 2.0, 4, 0.0, None);
        let text = render(Gauges::default()).unwrap();
        assert!(
            text.contains("rkllm_model_generated_tokens_total{model=\"per-model-a\"} 8\n"),
            "{text}"
        );
        assert!(
            text.contains("rkllm_model_generated_tokens_total{model=\"per-model-b\"} 4\n"),
            "{text}"
        );
        assert!(
            text.contains("rkllm_model_decode_tokens_per_second{model=\"per-model-a\"} 20.0\n"),
            "{text}"
        );
        // A generation without a rate leaves that model's gauge unset.
        assert!(
            !text.contains("rkllm_model_decode_tokens_per_second{model=\"per-model-b\"}"),
            "{text}"
        );
    }
}
