//! Validation of the whole configuration, once at start: every check
//! names the key it refuses.
//!
//! [`Config::validate`] is the list of checks in the order they are made
//! (the first invalid value is the one reported); a key that only has to
//! lie in a range is a row of a table checked by [`in_range`].

use std::ops::RangeInclusive;

use super::{BackendKind, Config, ConfigError, ModelEntry, invalid};
use crate::model::ModelSpec;

/// Refuses `value` of `key` outside `range`, in the words every range check
/// uses.
fn in_range(key: &'static str, value: u64, range: RangeInclusive<u64>) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(invalid(
        key,
        format!(
            "must be between {} and {}, got {value}",
            range.start(),
            range.end()
        ),
    ))
}

/// [`in_range`] for each row of `table`, in order.
fn all_in_range<const N: usize>(
    table: [(&'static str, u64, RangeInclusive<u64>); N],
) -> Result<(), ConfigError> {
    table
        .into_iter()
        .try_for_each(|(key, value, range)| in_range(key, value, range))
}

/// [`in_range`] for a number with a fraction: one that is not finite is
/// refused too.
fn in_range_f64(key: &'static str, value: f64, low: f64, high: f64) -> Result<(), ConfigError> {
    if value.is_finite() && (low..=high).contains(&value) {
        return Ok(());
    }
    Err(invalid(
        key,
        format!("must be between {low} and {high}, got {value}"),
    ))
}

impl Config {
    /// Checks every value once; the error names the offending key.
    ///
    /// # Errors
    /// The first invalid value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        self.tcp_addr()?;
        self.agent_addr()?;
        self.validate_node_id()?;
        in_range(
            "stdio_transport.eof_grace_secs",
            self.stdio_transport.eof_grace_secs,
            1..=3600,
        )?;
        self.validate_api_keys()?;
        all_in_range([
            (
                "http.header_read_timeout_secs",
                self.http.header_read_timeout_secs,
                1..=3600,
            ),
            (
                "http.body_read_timeout_secs",
                self.http.body_read_timeout_secs,
                1..=3600,
            ),
            (
                "websocket.max_connections",
                self.websocket.max_connections as u64,
                1..=1_000_000,
            ),
        ])?;
        self.validate_connections()?;
        in_range(
            "mcp.session_idle_secs",
            self.mcp.session_idle_secs,
            10..=604_800,
        )?;
        self.validate_models()?;
        self.validate_mock()?;
        self.validate_limits()?;
        self.validate_streams()?;
        in_range(
            "engine.queue_len",
            self.engine.queue_len as u64,
            1..=100_000,
        )?;
        self.validate_lifecycle()?;
        self.validate_store_endpoint()?;
        self.validate_board_root()?;
        self.validate_store_platform()?;
        all_in_range([
            (
                "store.max_file_bytes",
                self.store.max_file_bytes,
                1..=u64::MAX,
            ),
            (
                "store.rate_window_secs",
                self.store.rate_window_secs,
                1..=3600,
            ),
            (
                "store.pull_timeout_secs",
                self.store.pull_timeout_secs,
                1..=2_592_000,
            ),
            (
                "responses.store_max_entries",
                self.responses.store_max_entries as u64,
                0..=1_000_000,
            ),
            (
                "responses.store_max_bytes",
                self.responses.store_max_bytes as u64,
                0..=(16 << 30),
            ),
            (
                "responses.store_ttl_secs",
                self.responses.store_ttl_secs,
                1..=604_800,
            ),
        ])?;
        self.validate_log_level()
    }

    fn validate_node_id(&self) -> Result<(), ConfigError> {
        if let Some(node) = self.node_id.as_ref().filter(|n| !super::valid_node_id(n)) {
            return Err(invalid(
                "node_id",
                format!("must be 1 to 63 letters, digits, `.`, `_` or `-`, got `{node}`"),
            ));
        }
        Ok(())
    }

    fn validate_api_keys(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// The WebSocket limits against each other, and the streams one
    /// connection may hold.
    fn validate_connections(&self) -> Result<(), ConfigError> {
        let ws = &self.websocket;
        if ws.max_connections_per_ip > ws.max_connections {
            return Err(invalid(
                "websocket.max_connections_per_ip",
                format!(
                    "must be at most websocket.max_connections ({}), or 0 for no limit per address; got {}",
                    ws.max_connections, ws.max_connections_per_ip
                ),
            ));
        }
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
        Ok(())
    }

    /// `model` or `[[models]]`, each entry's settings, the tokenizers, the
    /// names, and what the rkllm backend needs of them.
    fn validate_models(&self) -> Result<(), ConfigError> {
        if self.model.is_some() && !self.models.is_empty() {
            return Err(invalid(
                "model",
                "give either `model` or `[[models]]`, not both",
            ));
        }
        self.chat_template
            .resolve()
            .map_err(|m| invalid("chat_template", m))?;
        for entry in &self.models {
            if let Some(template) = &entry.chat_template {
                template
                    .resolve()
                    .map_err(|m| invalid("models.chat_template", m))?;
            }
            if let Some(reasoning) = &entry.reasoning {
                crate::model::ReasoningMode::resolve(reasoning, &entry.name)
                    .map_err(|m| invalid("models.reasoning", m))?;
            }
        }
        if self.models.iter().filter(|m| m.default).count() > 1 {
            return Err(invalid(
                "models.default",
                "only one model can be the default",
            ));
        }
        for entry in &self.models {
            self.validate_reranker(entry)?;
            self.validate_vision(entry)?;
            validate_prompt_cache(entry)?;
            validate_lora(entry)?;
            validate_entry_settings(entry)?;
        }
        self.validate_tokenizers()?;
        let models = self.model_specs();
        validate_model_names(&models)?;
        if self.backend == BackendKind::Rkllm {
            // Without a configured model, start-up looks in the store.
            if let Some(m) = models.iter().find(|m| m.path.is_none()) {
                return Err(invalid(
                    "models.path",
                    format!("model `{}` needs a `path` for the rkllm backend", m.name),
                ));
            }
            self.validate_rkllm()?;
        }
        Ok(())
    }

    /// A vision encoder with its settings, on the backend that runs one.
    fn validate_vision(&self, entry: &ModelEntry) -> Result<(), ConfigError> {
        match (&entry.vision_encoder, &entry.vision) {
            (Some(encoder), vision) => {
                vision
                    .clone()
                    .unwrap_or_default()
                    .resolve(&entry.name, encoder)
                    .map_err(|m| {
                        invalid("models.vision", format!("model `{}`: {m}", entry.name))
                    })?;
                if self.backend != BackendKind::Rkllm {
                    return Err(invalid(
                        "models.vision_encoder",
                        format!(
                            "model `{}`: a vision encoder needs the rkllm backend (the mock runs no encoder)",
                            entry.name
                        ),
                    ));
                }
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "models.vision",
                    format!("model `{}`: `vision` needs a `vision_encoder`", entry.name),
                ));
            }
            (None, None) => {}
        }
        Ok(())
    }

    fn validate_mock(&self) -> Result<(), ConfigError> {
        in_range_f64(
            "mock.tokens_per_second",
            self.mock.tokens_per_second,
            0.0,
            1_000_000.0,
        )?;
        if self.mock.prefill_ms > 600_000 {
            return Err(invalid("mock.prefill_ms", "must be at most 600000"));
        }
        in_range("mock.lanes", self.mock.lanes as u64, 1..=4096)
    }

    fn validate_limits(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        all_in_range([
            (
                "limits.max_request_bytes",
                l.max_request_bytes as u64,
                1024..=(64 << 20),
            ),
            (
                "limits.max_embedding_inputs",
                l.max_embedding_inputs as u64,
                1..=4096,
            ),
            (
                "limits.max_rerank_tokens",
                u64::from(l.max_rerank_tokens),
                256..=(1 << 22),
            ),
            (
                "limits.remote_image_timeout_secs",
                l.remote_image_timeout_secs,
                1..=300,
            ),
        ])?;
        for entry in &l.remote_image_allow {
            crate::service::address_filter::parse_allow_entry(entry)
                .map_err(|e| invalid("limits.remote_image_allow", e))?;
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
        all_in_range([
            (
                "limits.max_schema_bytes",
                l.max_schema_bytes as u64,
                1024..=16 << 20,
            ),
            ("limits.max_tokens", u64::from(l.max_tokens), 1..=1_000_000),
        ])?;
        if let Some(cap) = l.default_max_tokens
            && (cap == 0 || cap > l.max_tokens)
        {
            return Err(invalid(
                "limits.default_max_tokens",
                format!(
                    "must be between 1 and limits.max_tokens ({}), got {cap}",
                    l.max_tokens
                ),
            ));
        }
        Ok(())
    }

    fn validate_streams(&self) -> Result<(), ConfigError> {
        let s = &self.streams;
        in_range("streams.idle_timeout_secs", s.idle_timeout_secs, 1..=86_400)?;
        if s.resume_grace_secs > s.idle_timeout_secs {
            return Err(invalid(
                "streams.resume_grace_secs",
                format!(
                    "must be at most streams.idle_timeout_secs ({}), got {}",
                    s.idle_timeout_secs, s.resume_grace_secs
                ),
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
        in_range("streams.max_streams", s.max_streams as u64, 1..=1_000_000)
    }

    fn validate_store_endpoint(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.store.endpoint
            && !(endpoint.starts_with("https://") || endpoint.starts_with("http://"))
        {
            return Err(invalid(
                "store.endpoint",
                format!("must be an https:// (or http:// mirror) URL, got {endpoint:?}"),
            ));
        }
        Ok(())
    }

    fn validate_board_root(&self) -> Result<(), ConfigError> {
        if !self.board.sys_root.is_absolute() {
            return Err(invalid(
                "board.sys_root",
                format!(
                    "must be an absolute path, got {:?}",
                    self.board.sys_root.display().to_string()
                ),
            ));
        }
        Ok(())
    }

    fn validate_store_platform(&self) -> Result<(), ConfigError> {
        if !matches!(
            self.store.platform.as_str(),
            "auto" | "none" | "rk3588" | "rk3576" | "rk3562"
        ) {
            return Err(invalid(
                "store.platform",
                format!(
                    "must be auto, none, rk3588, rk3576 or rk3562, got {:?}",
                    self.store.platform
                ),
            ));
        }
        Ok(())
    }

    fn validate_log_level(&self) -> Result<(), ConfigError> {
        if !log_filter_is_valid(&self.log_level) {
            return Err(invalid(
                "log_level",
                format!(
                    "must be off, error, warn, info, debug or trace, or a list of TARGET=LEVEL \
                     directives such as warn,rkllm_server=debug; got {:?}",
                    self.log_level
                ),
            ));
        }
        Ok(())
    }

    /// Each `tokenizer` is a file or a Hugging Face repository.
    fn validate_tokenizers(&self) -> Result<(), ConfigError> {
        if let Some(tokenizer) = &self.tokenizer {
            if self.model.is_none() {
                return Err(invalid(
                    "tokenizer",
                    "`tokenizer` (--tokenizer) is the tokenizer of `model` (--model), which is \
                     not set: give each [[models]] entry its own `tokenizer`",
                ));
            }
            super::settings::tokenizer_setting(tokenizer)
                .map_err(|e| invalid("tokenizer", format!("`tokenizer`: {e}")))?;
        }
        for model in &self.models {
            if let Some(tokenizer) = &model.tokenizer {
                super::settings::tokenizer_setting(tokenizer).map_err(|e| {
                    invalid(
                        "models.tokenizer",
                        format!("`tokenizer` of model `{}`: {e}", model.name),
                    )
                })?;
            }
        }
        Ok(())
    }

    /// The engine's model lifecycle: how many stay loaded, for how long,
    /// and how long each step may take.
    fn validate_lifecycle(&self) -> Result<(), ConfigError> {
        let e = &self.engine;
        in_range(
            "engine.max_loaded_models",
            e.max_loaded_models as u64,
            1..=64,
        )?;
        if e.keep_alive_secs < -1 {
            return Err(invalid(
                "engine.keep_alive_secs",
                format!(
                    "must be -1 (never unload), 0 (unload at once) or a number of seconds, got {}",
                    e.keep_alive_secs
                ),
            ));
        }
        all_in_range([
            (
                "engine.background_max_wait_secs",
                e.background_max_wait_secs,
                1..=86_400,
            ),
            ("engine.load_timeout_secs", e.load_timeout_secs, 1..=86_400),
            (
                "engine.stall_timeout_secs",
                e.stall_timeout_secs,
                1..=86_400,
            ),
            ("engine.crash_window_secs", e.crash_window_secs, 1..=86_400),
            (
                "engine.background_max_overtaken",
                u64::from(e.background_max_overtaken),
                1..=100_000,
            ),
            ("engine.max_crashes", u64::from(e.max_crashes), 1..=1000),
        ])?;
        // Names are checked at start, against the configured and stored models.
        if e.preload.len() > e.max_loaded_models {
            return Err(invalid(
                "engine.preload",
                format!(
                    "lists {} models but engine.max_loaded_models is {}",
                    e.preload.len(),
                    e.max_loaded_models
                ),
            ));
        }
        if e.runner_prefix.iter().any(String::is_empty) {
            return Err(invalid("engine.runner_prefix", "has an empty word"));
        }
        Ok(())
    }

    fn validate_rkllm(&self) -> Result<(), ConfigError> {
        let r = &self.rkllm;
        in_range(
            "rkllm.max_context_len",
            u64::from(r.max_context_len),
            16..=131_072,
        )?;
        if r.n_keep < -1 {
            return Err(invalid(
                "rkllm.n_keep",
                format!("must be -1 or more, got {}", r.n_keep),
            ));
        }
        in_range("rkllm.top_k", u64::from(r.top_k), 0..=1000)?;
        if !(0..=MAX_DOMAIN).contains(&r.base_domain_id) {
            return Err(invalid(
                "rkllm.base_domain_id",
                format!(
                    "must be between 0 and {MAX_DOMAIN}, got {}",
                    r.base_domain_id
                ),
            ));
        }
        let ranges: [(&'static str, f64, f64, f64); 7] = [
            ("rkllm.snapshot_max_mb", r.snapshot_max_mb, 0.0, 1.0e9),
            (
                "rkllm.snapshot_min_free_mb",
                r.snapshot_min_free_mb,
                0.0,
                1.0e9,
            ),
            ("rkllm.top_p", r.top_p, 0.0, 1.0),
            ("rkllm.temperature", r.temperature, 0.0, 2.0),
            ("rkllm.repeat_penalty", r.repeat_penalty, 0.0, 10.0),
            ("rkllm.frequency_penalty", r.frequency_penalty, -2.0, 2.0),
            ("rkllm.presence_penalty", r.presence_penalty, -2.0, 2.0),
        ];
        for (key, value, low, high) in ranges {
            in_range_f64(key, value, low, high)?;
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
        in_range("rkllm.cpu_threads", u64::from(r.cpu_threads), 1..=8)?;
        if self.limits.max_tokens > i32::MAX as u32 {
            return Err(invalid("limits.max_tokens", "too large for the runtime"));
        }
        Ok(())
    }
}

impl Config {
    /// A reranker generates (one token, whose logits row is read): not an
    /// embedding or vision model, and on the NPU it needs its tokenizer to
    /// find "yes" and "no" in the row.
    fn validate_reranker(&self, entry: &ModelEntry) -> Result<(), ConfigError> {
        if !entry.reranker {
            return Ok(());
        }
        let refused = |what: &str| {
            Err(invalid(
                "models.reranker",
                format!("model `{}`: a reranker {what}", entry.name),
            ))
        };
        if entry.embedding {
            return refused("is not an embedding model too (give one or the other)");
        }
        if entry.vision_encoder.is_some() {
            return refused("takes no vision encoder");
        }
        if self.backend == BackendKind::Rkllm && entry.tokenizer.is_none() {
            return refused(
                "needs its `tokenizer` (the \"yes\" and \"no\" of its logits row are \
                 found with it)",
            );
        }
        Ok(())
    }
}

/// A prompt cache needs its prompt and file, and a model that takes prompts.
fn validate_prompt_cache(entry: &ModelEntry) -> Result<(), ConfigError> {
    if let Some(cache) = &entry.system_prompt_cache {
        if cache.prompt.is_empty() || cache.path.as_os_str().is_empty() {
            return Err(invalid(
                "models.system_prompt_cache",
                format!(
                    "model `{}`: `prompt` and `path` must not be empty",
                    entry.name
                ),
            ));
        }
        if entry.embedding {
            return Err(invalid(
                "models.system_prompt_cache",
                format!(
                    "model `{}`: an embedding model takes no prompt cache",
                    entry.name
                ),
            ));
        }
    }
    Ok(())
}

/// LoRA adapters with distinct names and a scale in range.
fn validate_lora(entry: &ModelEntry) -> Result<(), ConfigError> {
    for (i, adapter) in entry.lora.iter().enumerate() {
        if adapter.name.is_empty() || entry.lora[..i].iter().any(|a| a.name == adapter.name) {
            return Err(invalid(
                "models.lora",
                format!(
                    "model `{}`: LoRA adapter names must be given and distinct",
                    entry.name
                ),
            ));
        }
        if !(adapter.scale.is_finite() && (0.0..=10.0).contains(&adapter.scale)) {
            return Err(invalid(
                "models.lora",
                format!(
                    "model `{}`: adapter `{}`: scale must be between 0 and 10",
                    entry.name, adapter.name
                ),
            ));
        }
    }
    Ok(())
}

/// The highest NPU memory domain a setting may name: 4 GiB each, 16 cover
/// the largest boards' 64 GiB.
const MAX_DOMAIN: i32 = 15;

/// A model's own sampling and context settings. Their messages name the
/// model and not the value, unlike the [`in_range`] ones.
fn validate_entry_settings(entry: &ModelEntry) -> Result<(), ConfigError> {
    let m = &entry.settings;
    if m.max_context_len
        .is_some_and(|n| !(16..=131_072).contains(&n))
    {
        return Err(invalid(
            "models.max_context_len",
            format!("model `{}`: must be between 16 and 131072", entry.name),
        ));
    }
    if m.top_k.is_some_and(|k| k > 1000) {
        return Err(invalid(
            "models.top_k",
            format!("model `{}`: must be between 0 and 1000", entry.name),
        ));
    }
    if m.prefill_chunk_tokens.is_some_and(|n| {
        n != 0 && !(crate::model::MIN_PREFILL_CHUNK_TOKENS..=1_000_000).contains(&n)
    }) {
        return Err(invalid(
            "models.prefill_chunk_tokens",
            format!(
                "model `{}`: must be 0 (one run) or between {} and 1000000",
                entry.name,
                crate::model::MIN_PREFILL_CHUNK_TOKENS
            ),
        ));
    }
    if m.base_domain_id
        .is_some_and(|d| !(0..=MAX_DOMAIN).contains(&d))
    {
        return Err(invalid(
            "models.base_domain_id",
            format!("model `{}`: must be between 0 and {MAX_DOMAIN}", entry.name),
        ));
    }
    let ranges: [(&'static str, Option<f64>, f64, f64); 5] = [
        ("models.top_p", m.top_p, 0.0, 1.0),
        ("models.temperature", m.temperature, 0.0, 2.0),
        ("models.repeat_penalty", m.repeat_penalty, 0.0, 10.0),
        ("models.frequency_penalty", m.frequency_penalty, -2.0, 2.0),
        ("models.presence_penalty", m.presence_penalty, -2.0, 2.0),
    ];
    for (key, value, low, high) in ranges {
        if value.is_some_and(|v| !(v.is_finite() && (low..=high).contains(&v))) {
            return Err(invalid(
                key,
                format!("model `{}`: must be between {low} and {high}", entry.name),
            ));
        }
    }
    Ok(())
}

/// Every model's name is usable and declared once.
fn validate_model_names(models: &[ModelSpec]) -> Result<(), ConfigError> {
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
    Ok(())
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// A level, or comma-separated directives each of which is a level or
/// `TARGET=LEVEL`. A bare word that is no level (`verbose`) would be read
/// by the tracing filter as a target name and silence every log, so it is
/// refused.
fn log_filter_is_valid(filter: &str) -> bool {
    let directive_ok = |d: &str| {
        let level = d.rsplit_once('=').map_or(
            d,
            |(target, level)| {
                if target.trim().is_empty() { "" } else { level }
            },
        );
        LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level.trim()))
    };
    !filter.trim().is_empty()
        && filter.split(',').all(|d| directive_ok(d.trim()))
        && tracing_subscriber::EnvFilter::try_new(filter).is_ok()
}
