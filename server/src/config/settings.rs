//! The typed settings each part of the server receives, built from the
//! one configuration. No part below `startup` reads [`Config`] itself.

use std::path::Path;
use std::time::Duration;

use super::{Config, DEFAULT_MOCK_MODEL, ModelEntry, RuntimeAbi};
use crate::backend::{
    InitSettings, MockConfig, ProbeSettings, RkllmSettings, SamplingValues, SnapshotSettings,
};
use crate::engine::{Ageing, EngineLimits, KeepAlive, Lifecycle, RequestLimits};
use crate::model::tokenizer::TokenizerSource;
use crate::model::{ModelSpec, ReasoningMode};
use crate::rpc::RpcLimits;
use crate::store::{HubTokenizer, TokenizerSetting};
use crate::stream::StreamLimits;
use crate::transport::Settings;
use crate::transport::lines::LineOptions;
use rkllm_sys::version::Abi;

impl Config {
    /// The line transports' settings.
    pub fn line_options(&self) -> LineOptions {
        LineOptions {
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
                reasoning: ReasoningMode::resolve("auto", &name).unwrap_or_default(),
                path: Some(path.clone()),
                template: self.chat_template.resolve().unwrap_or_default(),
                tokenizer: self.tokenizer.as_deref().map(|t| self.tokenizer_source(t)),
                ..ModelSpec::named(name)
            }];
        }
        if self.models.is_empty() {
            if self.backend == super::BackendKind::Rkllm {
                // The store's models, if any: start-up adds them.
                return Vec::new();
            }
            return vec![ModelSpec {
                template: self.chat_template.resolve().unwrap_or_default(),
                ..ModelSpec::named(DEFAULT_MOCK_MODEL)
            }];
        }
        // The default model goes first.
        let mut entries: Vec<&ModelEntry> = self.models.iter().collect();
        entries.sort_by_key(|m| !m.default);
        entries
            .into_iter()
            .map(|m| ModelSpec {
                name: m.name.clone(),
                path: m.path.clone(),
                template: m
                    .chat_template
                    .as_ref()
                    .unwrap_or(&self.chat_template)
                    .resolve()
                    .unwrap_or_default(),
                settings: m.settings.clone(),
                lora: m.lora.clone(),
                prompt_cache: m.system_prompt_cache.clone(),
                tokenizer: m.tokenizer.as_deref().map(|t| self.tokenizer_source(t)),
                reasoning: ReasoningMode::resolve(
                    m.reasoning.as_deref().unwrap_or("auto"),
                    &m.name,
                )
                .unwrap_or_default(),
                embedding: m.embedding.then(|| crate::model::EmbeddingSpec {
                    pooling: m.pooling.unwrap_or_default(),
                    normalize: m.normalize.unwrap_or(true),
                }),
                reranker: m.reranker,
                vision: m.vision_encoder.as_ref().and_then(|encoder| {
                    m.vision
                        .clone()
                        .unwrap_or_default()
                        .resolve(&m.name, encoder)
                        .ok()
                }),
            })
            .collect()
    }

    /// Where a model's `tokenizer` setting has it read from: the file it
    /// names, or where the store keeps one fetched from the hub.
    fn tokenizer_source(&self, setting: &Path) -> TokenizerSource {
        match tokenizer_setting(setting) {
            Ok(TokenizerSetting::Hub(hub)) => {
                TokenizerSource::File(hub.cached_path(&self.models_dir()))
            }
            _ => TokenizerSource::File(setting.to_owned()),
        }
    }

    /// The configured models whose `tokenizer` is a repository on the hub
    /// (fetched into the store at start), each with it.
    pub fn hub_tokenizers(&self) -> Vec<(String, HubTokenizer)> {
        let settings: Vec<(String, &Path)> = match &self.model {
            Some(path) => self
                .tokenizer
                .as_deref()
                .map(|t| {
                    let name = path
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    (name, t)
                })
                .into_iter()
                .collect(),
            None => self
                .models
                .iter()
                .filter_map(|m| Some((m.name.clone(), m.tokenizer.as_deref()?)))
                .collect(),
        };
        settings
            .into_iter()
            .filter_map(|(name, setting)| match tokenizer_setting(setting) {
                Ok(TokenizerSetting::Hub(hub)) => Some((name, hub)),
                _ => None,
            })
            .collect()
    }

    /// The command that starts a runner process: `engine.runner_prefix`,
    /// then this very binary.
    ///
    /// # Errors
    /// When the binary's path cannot be found.
    pub fn runner_command(&self) -> Result<Vec<std::ffi::OsString>, String> {
        let mut command: Vec<std::ffi::OsString> =
            self.engine.runner_prefix.iter().map(Into::into).collect();
        if command.is_empty() {
            // The running binary itself, even if an upgrade has replaced
            // the file since: runners always speak this server's protocol.
            command.push("/proc/self/exe".into());
        } else {
            // Behind a prefix (an emulator, say) /proc/self/exe would be
            // the prefix's program: name the binary by its path.
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find this program's path for runners: {e}"))?;
            command.push(exe.into());
        }
        Ok(command)
    }

    /// The store's folder.
    pub fn models_dir(&self) -> std::path::PathBuf {
        self.store
            .models_dir
            .clone()
            .unwrap_or_else(crate::store::default_dir)
    }

    /// The Hugging Face endpoint: `[store] endpoint`, `HF_ENDPOINT`, or
    /// `https://huggingface.co`.
    pub fn hub_endpoint(&self) -> String {
        self.store
            .endpoint
            .clone()
            .or_else(|| std::env::var("HF_ENDPOINT").ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| "https://huggingface.co".to_owned())
    }

    /// This board's chip for choosing model files: `[store] platform`, or
    /// read from the device tree when `auto`.
    pub fn platform(&self) -> Option<String> {
        match self.store.platform.as_str() {
            "auto" => std::fs::read("/proc/device-tree/compatible")
                .ok()
                .and_then(|c| {
                    let text = String::from_utf8_lossy(&c).to_ascii_lowercase();
                    ["rk3588", "rk3576", "rk3562"]
                        .into_iter()
                        .find(|chip| text.contains(chip))
                        .map(str::to_owned)
                }),
            "none" | "" => None,
            chip => Some(chip.to_owned()),
        }
    }

    /// The model store and its Hugging Face client (`HF_TOKEN` from the
    /// environment); `runtime_version` helps choose files, and
    /// `vision_runtime` (see [`Config::vision_runtime`]) says whether
    /// vision models may be pulled.
    ///
    /// # Errors
    /// A bad endpoint.
    pub fn store_service(
        &self,
        runtime_version: Option<String>,
        vision_runtime: Result<(), String>,
    ) -> Result<crate::store::Service, String> {
        let token = std::env::var("HF_TOKEN").ok();
        let s = &self.store;
        Ok(crate::store::Service {
            store: crate::store::Store::new(self.models_dir()),
            hub: crate::store::Hub::new(&self.hub_endpoint(), token)?,
            revision: s.revision.clone(),
            platform: self.platform(),
            runtime_version,
            api_pull: s.api_pull,
            vision_runtime,
            limits: crate::store::PullLimits {
                max_file_bytes: s.max_file_bytes,
                min_free_bytes: s.min_free_bytes,
                min_bytes_per_sec: s.min_bytes_per_sec,
                rate_window: Duration::from_secs(s.rate_window_secs),
                timeout: Duration::from_secs(s.pull_timeout_secs),
            },
            sandbox: std::sync::Arc::new(crate::sandbox::Sandbox::new(self.sandbox_settings()?)),
        })
    }

    /// How untrusted input (chat templates, tokenizers) is worked on:
    /// helper processes of this binary, behind `engine.runner_prefix` as
    /// runners are.
    ///
    /// # Errors
    /// When the binary's path cannot be found.
    pub fn sandbox_settings(&self) -> Result<crate::sandbox::SandboxSettings, String> {
        Ok(crate::sandbox::SandboxSettings::new(self.runner_command()?))
    }

    /// Whether this server can run a vision model's encoder: always with
    /// the mock backend; with `rkllm`, when the RKNN runtime
    /// (`rknn_runtime`) loads. `Err` says why not.
    pub fn vision_runtime(&self) -> Result<(), String> {
        match self.backend {
            super::BackendKind::Mock => Ok(()),
            super::BackendKind::Rkllm => {
                crate::backend::rkllm::RknnRuntime::load(&self.rknn_runtime).map(drop)
            }
        }
    }

    /// Mock backend settings.
    pub fn mock_config(&self) -> MockConfig {
        MockConfig {
            tokens_per_second: self.mock.tokens_per_second,
            prefill_ms: self.mock.prefill_ms,
            lanes: self.mock.lanes,
            isolated: self.mock.runner == super::RunnerKind::Process,
        }
    }

    /// Stream manager limits.
    pub fn stream_limits(&self) -> StreamLimits {
        StreamLimits {
            idle_timeout: Duration::from_secs(self.streams.idle_timeout_secs),
            max_stream_bytes: self.streams.max_stream_bytes,
            max_total_bytes: self.streams.max_total_bytes,
            max_streams: self.streams.max_streams,
            resume_grace: Duration::from_secs(self.streams.resume_grace_secs),
        }
    }

    /// Engine limits.
    pub fn engine_limits(&self) -> EngineLimits {
        EngineLimits {
            queue_len: self.engine.queue_len,
            ageing: Ageing {
                max_wait: Duration::from_secs(self.engine.background_max_wait_secs),
                max_overtaken: self.engine.background_max_overtaken,
            },
            request: RequestLimits {
                max_prompt_bytes: self.limits.max_prompt_bytes,
                default_max_tokens: self.limits.default_max_tokens,
                max_tokens_limit: self.limits.max_tokens,
                max_schema_bytes: self.limits.max_schema_bytes,
                max_rerank_tokens: self.limits.max_rerank_tokens,
            },
            lifecycle: Lifecycle {
                max_loaded_models: self.engine.max_loaded_models,
                keep_alive: KeepAlive::from_secs(self.engine.keep_alive_secs),
                load_timeout: Duration::from_secs(self.engine.load_timeout_secs),
                max_crashes: self.engine.max_crashes,
                crash_window: Duration::from_secs(self.engine.crash_window_secs),
                first_domain: self.rkllm.base_domain_id,
            },
        }
    }

    /// The `rkllm` backend's settings: the runtime library, its ABI and
    /// the `[rkllm]` init parameters.
    /// A folder beside the store's `models` folder (the state directory's).
    fn beside_models(&self, name: &str) -> std::path::PathBuf {
        let models = self.models_dir();
        models
            .parent()
            .map_or_else(|| models.join(name), |p| p.join(name))
    }

    pub fn rkllm_settings(&self) -> RkllmSettings {
        let r = &self.rkllm;
        RkllmSettings {
            runtime: self.runtime.clone(),
            rknn_runtime: self.rknn_runtime.clone(),
            abi: match self.runtime_abi {
                RuntimeAbi::Auto => None,
                RuntimeAbi::V1_3 => Some(Abi::V1_3),
                RuntimeAbi::V1_2 => Some(Abi::V1_2),
            },
            init: InitSettings {
                max_context_len: i32::try_from(r.max_context_len).unwrap_or(i32::MAX),
                max_new_tokens: i32::try_from(self.limits.max_tokens).unwrap_or(i32::MAX),
                n_keep: r.n_keep,
                sampling: SamplingValues {
                    top_k: i32::try_from(r.top_k).unwrap_or(0),
                    top_p: r.top_p as f32,
                    temperature: r.temperature as f32,
                    repeat_penalty: r.repeat_penalty as f32,
                    frequency_penalty: r.frequency_penalty as f32,
                    presence_penalty: r.presence_penalty as f32,
                    ..SamplingValues::default()
                },
                skip_special_token: r.skip_special_token,
                cpu_mask: r.cpu_mask,
                cpu_threads: i8::try_from(r.cpu_threads).unwrap_or(4),
                embed_flash: r.embed_flash,
                base_domain_id: r.base_domain_id,
            },
            snapshots: SnapshotSettings {
                dir: Some(
                    r.snapshot_dir
                        .clone()
                        .unwrap_or_else(|| self.beside_models("snapshots")),
                ),
                // Validated: finite and not negative.
                max_bytes: (r.snapshot_max_mb * 1024.0 * 1024.0) as u64,
                min_free_bytes: (r.snapshot_min_free_mb * 1024.0 * 1024.0) as u64,
            },
            probes: ProbeSettings {
                dir: Some(
                    r.probe_dir
                        .clone()
                        .unwrap_or_else(|| self.beside_models("probes")),
                ),
                force: false,
                measure: false,
                only: false,
                batch: None,
            },
        }
    }

    /// The JSON-RPC methods' limits.
    pub fn rpc_limits(&self) -> RpcLimits {
        RpcLimits {
            max_streams_per_connection: self.limits.max_streams_per_connection,
            max_embedding_inputs: self.limits.max_embedding_inputs,
        }
    }

    /// Host names the browser guard accepts besides IP literals and
    /// loopback names: `[http] allowed_hosts` (and the older `[mcp]`
    /// list), this machine's host name and `NAME.local`.
    fn allowed_hosts(&self) -> Vec<String> {
        let mut hosts = [&self.http.allowed_hosts[..], &self.mcp.allowed_hosts[..]].concat();
        if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            let name = name.trim();
            if !name.is_empty() {
                hosts.push(name.to_owned());
                hosts.push(format!("{name}.local"));
            }
        }
        hosts
    }

    /// The transports' settings.
    pub fn transport_settings(&self) -> Settings {
        Settings {
            max_request_bytes: self.limits.max_request_bytes,
            header_read_timeout: Duration::from_secs(self.http.header_read_timeout_secs),
            body_read_timeout: Duration::from_secs(self.http.body_read_timeout_secs),
            cors_origins: self.http.cors_origins.clone(),
            ui: self.ui.enabled,
            node_id: self.node_name(),
            allowed_hosts: self.allowed_hosts(),
            allowed_origins: [
                &self.http.allowed_origins[..],
                &self.mcp.allowed_origins[..],
            ]
            .concat(),
            mcp_session_idle: Duration::from_secs(self.mcp.session_idle_secs),
            ws_ping_interval: Duration::from_secs(self.websocket.ping_interval_secs),
            ws_idle_timeout: Duration::from_secs(self.websocket.idle_timeout_secs),
            ws_max_connections: self.websocket.max_connections,
            ws_max_connections_per_ip: self.websocket.max_connections_per_ip,
            api_keys: self.api_keys.clone(),
            line: self.line_options(),
            responses_store: crate::transport::ResponsesSettings {
                max_entries: self.responses.store_max_entries,
                max_bytes: self.responses.store_max_bytes,
                ttl: Duration::from_secs(self.responses.store_ttl_secs),
            },
            detect_background: self.engine.detect_background,
            remote_images: crate::service::RemoteImages {
                allowed: self.limits.allow_remote_images,
                timeout: Duration::from_secs(self.limits.remote_image_timeout_secs),
                // The largest image any model takes; each model's own
                // limit is checked after.
                max_bytes: self
                    .model_specs()
                    .iter()
                    .filter_map(|m| m.vision.as_ref().map(|v| v.limits.max_image_bytes))
                    .max()
                    .unwrap_or(crate::model::image::ImageLimits::default().max_image_bytes),
                // Checked by `validate`.
                filter: crate::service::address_filter::AddressFilter::new(
                    self.limits
                        .remote_image_allow
                        .iter()
                        .filter_map(|e| crate::service::address_filter::parse_allow_entry(e).ok())
                        .collect(),
                ),
            },
            sys_root: self.board.sys_root.clone(),
            // Filled in by start-up from `doctor`'s findings.
            blocking: Vec::new(),
        }
    }
}

/// Reads a `tokenizer` setting (see [`TokenizerSetting::parse`]); a path
/// that is not UTF-8 is a file.
///
/// # Errors
/// A value that is neither a file nor a repository.
pub(super) fn tokenizer_setting(setting: &Path) -> Result<TokenizerSetting, String> {
    match setting.to_str() {
        Some(text) => TokenizerSetting::parse(text),
        None => Ok(TokenizerSetting::File(setting.to_owned())),
    }
}
