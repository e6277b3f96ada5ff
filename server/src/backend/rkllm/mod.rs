//! The `rkllm` backend: Rockchip's RKLLM runtime through `rkllm-sys`.
//!
//! The runner carries out what the plan (`crate::plan`) decides: it keeps
//! the runtime's handle and what the runtime holds, and no policy. Only
//! the files that call the runtime hold `unsafe`: the ABI bindings and
//! the callback (`abi`), the handle's owner and the callback's state
//! (`handle`), the handle's calls (`ops`), the library (`runtime`) and the
//! vision encoder (`encoder`). Each model's handle is created, run and
//! destroyed on that model's worker thread ([`ModelHandle`]); other
//! threads reach it only to abort. Text arrives through the result
//! callback, which may run on any thread, and goes through the sink's
//! UTF-8 assembly, so a delta never holds half a character whatever
//! pieces the runtime sends.

#[allow(unsafe_code)]
mod abi;
#[allow(unsafe_code)]
mod batch;
mod budget;
mod chunked;
mod constrained;
#[allow(unsafe_code)]
mod encoder;
#[allow(unsafe_code)]
mod handle;
mod measure;
#[allow(unsafe_code)]
mod ops;
mod probe;
mod prompt_cache;
mod refresh;
#[allow(unsafe_code)]
mod runtime;
mod snapshots;
mod tap;
mod text;
mod verdicts;

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::backend::image;

use rkllm_sys::version::Abi;

pub use self::abi::{InitSettings, SamplingValues};
pub use encoder::RknnRuntime;
pub use runtime::{LoadError, Runtime};

use self::abi::{ImageMarkers, ImageRun};
use self::encoder::Encoder;
use self::handle::{CallbackSlot, ModelHandle};
use self::prompt_cache::PromptCache;
use self::runtime::Api;
pub use self::snapshots::SnapshotSettings;
use self::snapshots::Snapshots;
use self::text::Once;
use crate::backend::{
    ALL_OVERRIDES, Backend, BackendError, Generation, Runner, TokenSink, ValidRunRequest,
};
use crate::model::image::ImageLimits;
use crate::model::{ModelSpec, VisionSpec};
use crate::plan::ConversationState;
use crate::plan::history::History;
use crate::plan::probe::Verdicts;
use crate::plan::profile::{Features, Profile};
use crate::plan::refresh::Refreshes;
use crate::vocab::FinishReason;

/// Per-request overrides runtimes 1.2.x apply (`max_tokens` by aborting
/// at the count; sampling is fixed at init).
const OVERRIDES_1_2: &[&str] = &["max_tokens", "role", "enable_thinking"];

/// What the `rkllm` backend needs to start (built from the `[rkllm]`
/// config section and the runtime flags).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RkllmSettings {
    /// The runtime library (a bare name is found by the dynamic loader).
    pub runtime: PathBuf,
    /// The RKNN runtime, loaded when a model has a vision encoder.
    pub rknn_runtime: PathBuf,
    /// The ABI to bind; `None` reads it from the library's version.
    #[serde(with = "abi_name")]
    pub abi: Option<Abi>,
    /// Init parameters, before each model's own settings.
    pub init: InitSettings,
    /// Where conversation snapshots are kept, and how many bytes.
    #[serde(default)]
    pub snapshots: SnapshotSettings,
    /// Where the probes' verdicts are kept, and whether to probe again.
    #[serde(default)]
    pub probes: ProbeSettings,
}

/// How a model's runtime is probed at load ([`crate::plan::probe`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProbeSettings {
    /// Where the verdicts are kept (`[rkllm] probe_dir`); `None`: nowhere,
    /// every load probes.
    pub dir: Option<PathBuf>,
    /// Probe again whatever is kept (`doctor --probe`).
    #[serde(default)]
    pub force: bool,
    /// Also measure the board (`doctor --probe`).
    #[serde(default)]
    pub measure: bool,
    /// Load only to probe (`doctor --probe` without a running service):
    /// no prompt cache is built, no snapshot kept.
    #[serde(default)]
    pub only: bool,
    /// Load only to measure a raw batch of this many sequences against
    /// `single` decode tokens a second of one (`doctor --probe`): the
    /// model's handle is made for the batch alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<(u32, f64)>,
}

/// `abi` as `"1.3"`, `"1.2"` or null, for the order to a runner.
mod abi_name {
    use rkllm_sys::version::Abi;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(abi: &Option<Abi>, s: S) -> Result<S::Ok, S::Error> {
        match abi {
            Some(Abi::V1_3) => s.serialize_some("1.3"),
            Some(Abi::V1_2) => s.serialize_some("1.2"),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Abi>, D::Error> {
        match Option::<String>::deserialize(d)?.as_deref() {
            Some("1.3") => Ok(Some(Abi::V1_3)),
            Some("1.2") => Ok(Some(Abi::V1_2)),
            None => Ok(None),
            Some(other) => Err(serde::de::Error::custom(format!("unknown ABI {other}"))),
        }
    }
}

/// The backend factory: the loaded runtime and the init settings.
#[derive(Debug)]
pub struct RkllmBackend {
    runtime: Arc<Runtime>,
    init: InitSettings,
    next_run: Arc<AtomicU64>,
    rknn_path: PathBuf,
    /// The RKNN runtime, loaded with the first vision model.
    rknn: parking_lot::Mutex<Option<Arc<RknnRuntime>>>,
    /// Whether pictures are decoded in the server's own process (models
    /// on its worker threads, `runner = "thread"`).
    decodes_in_server: bool,
    snapshots: SnapshotSettings,
    probes: ProbeSettings,
}

impl RkllmBackend {
    /// Loads the runtime library the settings name.
    ///
    /// # Errors
    /// See [`Runtime::load`].
    pub fn new(settings: RkllmSettings) -> Result<Self, LoadError> {
        let runtime = Runtime::load(&settings.runtime, settings.abi)?;
        Ok(Self {
            runtime: Arc::new(runtime),
            init: settings.init,
            next_run: Arc::new(AtomicU64::new(1)),
            rknn_path: settings.rknn_runtime,
            rknn: parking_lot::Mutex::new(None),
            decodes_in_server: false,
            snapshots: settings.snapshots,
            probes: settings.probes,
        })
    }

    /// Says that pictures are decoded in the server's own process (models
    /// run on its worker threads): a lossless WebP, whose decoding has no
    /// memory bound, is then refused before it is queued.
    #[must_use]
    pub fn decoding_in_server(mut self, yes: bool) -> Self {
        self.decodes_in_server = yes;
        self
    }

    /// Loads the RKNN runtime (once) for vision encoders.
    ///
    /// # Errors
    /// A message naming the library's path.
    pub fn rknn_runtime(&self) -> Result<Arc<RknnRuntime>, String> {
        let mut rknn = self.rknn.lock();
        if let Some(loaded) = &*rknn {
            return Ok(Arc::clone(loaded));
        }
        let loaded = Arc::new(RknnRuntime::load(&self.rknn_path)?);
        *rknn = Some(Arc::clone(&loaded));
        Ok(loaded)
    }

    /// The init settings of `model`: `[rkllm]` with the model's own values over it.
    fn init_for(&self, model: &ModelSpec) -> InitSettings {
        let (mut init, m) = (self.init.clone(), &model.settings);
        if let Some(n) = m.max_context_len {
            init.max_context_len = i32::try_from(n).unwrap_or(i32::MAX);
        }
        let s = &mut init.sampling;
        if let Some(k) = m.top_k {
            s.top_k = i32::try_from(k).unwrap_or(s.top_k);
        }
        s.top_p = m.top_p.map_or(s.top_p, |v| v as f32);
        s.temperature = m.temperature.map_or(s.temperature, |v| v as f32);
        s.repeat_penalty = m.repeat_penalty.map_or(s.repeat_penalty, |v| v as f32);
        s.frequency_penalty = m
            .frequency_penalty
            .map_or(s.frequency_penalty, |v| v as f32);
        s.presence_penalty = m.presence_penalty.map_or(s.presence_penalty, |v| v as f32);
        init.base_domain_id = m.base_domain_id.unwrap_or(init.base_domain_id);
        init
    }

    /// The settings a runner needs to load this same runtime, with the ABI
    /// this process chose.
    pub fn settings(&self) -> RkllmSettings {
        RkllmSettings {
            runtime: self.runtime.path().to_owned(),
            rknn_runtime: self.rknn_path.clone(),
            abi: Some(self.runtime.abi()),
            init: self.init.clone(),
            snapshots: self.snapshots.clone(),
            probes: self.probes.clone(),
        }
    }

    /// The runtime's version, when the library says it (`1.2.1`).
    pub fn version(&self) -> Option<String> {
        self.runtime.version().map(|v| v.to_string())
    }

    /// The runtime's path and version, for messages.
    pub fn describe(&self) -> String {
        format!(
            "runtime {} (version {})",
            self.runtime.path().display(),
            self.runtime
                .version()
                .map_or_else(|| "unknown".into(), |v| v.to_string())
        )
    }
}

impl Backend for RkllmBackend {
    fn kind(&self) -> &'static str {
        "rkllm"
    }

    fn overrides(&self) -> &'static [&'static str] {
        match self.runtime.abi() {
            Abi::V1_3 => ALL_OVERRIDES,
            Abi::V1_2 => OVERRIDES_1_2,
        }
    }

    fn context_length(&self, model: &ModelSpec) -> Option<u32> {
        u32::try_from(self.init_for(model).max_context_len).ok()
    }

    fn greedy(&self, model: &ModelSpec) -> bool {
        self.init_for(model).sampling.temperature == 0.0
    }

    fn probes(&self) -> bool {
        true
    }

    fn check(&self, request: &ValidRunRequest) -> Result<(), String> {
        if request.prompt.prefill.is_some() {
            return Err(format!(
                "model `{}` uses the runtime's built-in chat template, which always opens a new \
                 reply: a conversation whose last message is the assistant's cannot be \
                 continued. Give the model its own chat template (`chat_template` in its \
                 [[models]] entry; a model pulled with its tokenizer has one)",
                request.model
            ));
        }
        // A constraint needs logits mode, a callback's pause and token
        // input: every runtime this build binds (1.2.1 and later) has them.
        if !self.decodes_in_server {
            return Ok(());
        }
        for (i, image) in request.images.iter().enumerate() {
            if crate::backend::image::header::read(&image.0).is_ok_and(|info| info.lossless_webp) {
                return Err(format!(
                    "image {} is a lossless or extended WebP, whose decoding has no memory bound;                      with runner = \"thread\" it would be decoded in the server itself: send it                      as PNG or JPEG, or run models in runner processes (the default)",
                    i + 1
                ));
            }
        }
        Ok(())
    }

    fn preflight(&self, model: &ModelSpec) -> Result<(), String> {
        super::api::files_present(model)?;
        if model.vision.is_some() {
            self.rknn_runtime()?;
        }
        Ok(())
    }

    fn load(&self, model: &ModelSpec) -> Result<Box<dyn Runner>, BackendError> {
        let load_error = |message: String| BackendError::Load {
            model: model.name.clone(),
            message,
        };
        let c_path = model_file(model).map_err(load_error)?;
        if let Some((n, single)) = self.probes.batch {
            let n = usize::try_from(n).unwrap_or(1);
            let measured = batch::measure(
                &self.runtime,
                &self.init_for(model),
                &c_path,
                n,
                &crate::plan::probe::A.repeat(4),
                32,
            );
            return Ok(Box::new(batch::BatchRunner(batch::report(
                n, measured, single,
            ))));
        }
        let vision = match &model.vision {
            Some(spec) => Some(self.open_vision(spec).map_err(load_error)?),
            None => None,
        };
        let init = self.init_for(model);
        let handle = self
            .init_handle(&init, c_path, vision.as_ref())
            .map_err(load_error)?;
        tracing::info!(model = %model.name, "model loaded with {}", self.describe());
        if model.template.is_server_side() {
            // The server renders the chat itself: switch the runtime's off.
            let rc = handle.template_off();
            if rc != 0 {
                return Err(load_error(format!(
                    "rkllm_set_chat_template failed (code {rc})"
                )));
            }
        }
        let lora = self.load_lora(&handle, model).map_err(load_error)?;
        let mut runner = RkllmRunner::new(
            model,
            handle,
            init,
            Arc::clone(&self.next_run),
            lora,
            vision,
        );
        // Probed before anything is loaded into the runtime (the probes
        // clear it).
        runner.probe_store = self
            .probes
            .dir
            .as_deref()
            .zip(model.path.as_deref())
            .map(|(dir, file)| verdicts::Store::new(dir, &model.name, file, self.runtime.path()));
        let verdicts = runner.reprobe(self.probes.force, self.probes.measure);
        runner.verdicts = Some(verdicts);
        if self.probes.only {
            return Ok(Box::new(runner));
        }
        runner.snapshots = Snapshots::open(model, &self.snapshots, &runner.handle.runtime);
        if let Some(spec) = &model.prompt_cache {
            runner.prepare_prompt_cache(model, spec);
        }
        Ok(Box::new(runner))
    }
}

/// The model's file as the runtime takes it, checked: there, without a NUL,
/// and small enough for the memory the board has.
///
/// # Errors
/// What is wrong with it, for the load's error.
fn model_file(model: &ModelSpec) -> Result<CString, String> {
    let path = model
        .path
        .as_ref()
        .ok_or_else(|| "no model file configured".to_owned())?;
    if !path.is_file() {
        return Err(format!("model file {} does not exist", path.display()));
    }
    let c_path = CString::new(path.to_string_lossy().into_owned())
        .map_err(|_| format!("model path {} contains a NUL byte", path.display()))?;
    fits_in_memory(path)?;
    Ok(c_path)
}

impl RkllmBackend {
    /// `rkllm_init` of the model at `c_path` with `init`: its handle, with
    /// the callback's slot.
    ///
    /// # Errors
    /// The runtime's code, and what usually causes it.
    fn init_handle(
        &self,
        init: &InitSettings,
        c_path: CString,
        vision: Option<&Vision>,
    ) -> Result<ModelHandle, String> {
        let slot = Box::new(CallbackSlot::default());
        let userdata = std::ptr::from_ref::<CallbackSlot>(&slot).cast_mut().cast();
        let handle = match &self.runtime.api {
            Api::V1_3(api) => abi::init_v1_3(api, init, &c_path, userdata),
            Api::V1_2(api) => abi::init_v1_2(api, init, &c_path, vision.map(|v| &v.markers)),
        }
        .map_err(|rc| {
            format!(
                "rkllm_init failed (code {rc}) with {}; the runtime's own messages above say why (common causes: NPU driver older than 0.9.8, rkllm.max_context_len over the model's limit, not enough NPU memory, a model converted for another chip)",
                self.describe()
            )
        })?;
        Ok(ModelHandle::new(
            Arc::clone(&self.runtime),
            handle,
            slot,
            c_path,
        ))
    }

    /// Loads the model's LoRA adapters into `handle`: their names and the C
    /// strings the runtime was given (kept for the handle's life).
    ///
    /// # Errors
    /// An adapter's file missing, or the runtime refusing it.
    fn load_lora(
        &self,
        handle: &ModelHandle,
        model: &ModelSpec,
    ) -> Result<Vec<(String, CString, CString)>, String> {
        let mut lora = Vec::new();
        for adapter in &model.lora {
            if !adapter.path.is_file() {
                return Err(format!(
                    "LoRA adapter `{}`: file {} does not exist",
                    adapter.name,
                    adapter.path.display()
                ));
            }
            let c = |s: &str| {
                CString::new(s).map_err(|_| "a LoRA name or path contains a NUL byte".to_owned())
            };
            let (path, name) = (c(&adapter.path.to_string_lossy())?, c(&adapter.name)?);
            let rc = abi::load_lora(
                &self.runtime.api,
                handle.handle,
                &path,
                &name,
                adapter.scale,
            );
            if rc != 0 {
                return Err(format!(
                    "rkllm_load_lora failed (code {rc}) for adapter `{}` ({})",
                    adapter.name,
                    adapter.path.display()
                ));
            }
            tracing::info!(model = %model.name, adapter = %adapter.name, "LoRA adapter loaded");
            lora.push((adapter.name.clone(), name, path));
        }
        Ok(lora)
    }
}

impl RkllmRunner {
    /// A runner of `model` around its `handle`, holding nothing yet.
    fn new(
        model: &ModelSpec,
        handle: ModelHandle,
        init: InitSettings,
        next_run: Arc<AtomicU64>,
        lora: Vec<(String, CString, CString)>,
        vision: Option<Vision>,
    ) -> Self {
        Self {
            handle,
            model: model.name.clone(),
            init,
            next_run,
            lora,
            vision,
            profile: Profile {
                reasoning: model.reasoning,
                server_template: model.template.is_server_side(),
                renders_template: model.template.is_server_side(),
                tokenizer: model.tokenizer.is_some(),
                chunk_tokens: model.settings.prefill_chunk(),
                features: Features::default(),
            },
            held: Held {
                conversation: ConversationState::default(),
                history: History::new(
                    model.settings.history_reuse,
                    history_dropped_before(&model.name),
                ),
                dirty: false,
                tools: None,
                side_prefilled: 0,
            },
            tokens: constrained::Tokens::default(),
            prompt_cache: None,
            snapshots: None,
            refreshes: Refreshes::default(),
            tokenizer: model.tokenizer.clone(),
            verdicts: None,
            probe_store: None,
        }
    }
}

impl RkllmBackend {
    fn open_vision(&self, spec: &VisionSpec) -> Result<Vision, String> {
        let marker =
            |s: &str| CString::new(s).map_err(|_| "an image marker contains a NUL byte".to_owned());
        let markers = ImageMarkers {
            start: marker(&spec.img_start)?,
            end: marker(&spec.img_end)?,
            content: marker(&spec.img_content)?,
        };
        let encoder = Encoder::open(self.rknn_runtime()?, spec)?;
        Ok(Vision {
            encoder,
            markers,
            background: spec.background,
            limits: spec.limits,
        })
    }
}

/// A vision model's encoder and what its runs need.
struct Vision {
    encoder: Encoder,
    /// Kept for the handle's life: ABI 1.2.x takes them at init.
    markers: ImageMarkers,
    background: [u8; 3],
    limits: ImageLimits,
}

impl Vision {
    /// Preprocesses and encodes every image of `request`, in order.
    fn encode(&mut self, request: &ValidRunRequest) -> Result<Vec<f32>, BackendError> {
        let mut embed = Vec::with_capacity(self.encoder.floats_per_image() * request.images.len());
        for (i, image) in request.images.iter().enumerate() {
            let pixels = image::prepare(
                &image.0,
                self.encoder.width,
                self.encoder.height,
                self.background,
                &self.limits,
            )
            .map_err(|e| runtime_error(None, format!("image {} {e}", i + 1)))?;
            self.encoder.encode(&pixels, &mut embed).map_err(|e| {
                runtime_error(
                    None,
                    format!("the vision encoder failed on image {}: {e}", i + 1),
                )
            })?;
        }
        Ok(embed)
    }
}

/// One loaded model, owned by its worker thread.
struct RkllmRunner {
    handle: ModelHandle,
    /// The model's name, for the log.
    model: String,
    init: InitSettings,
    next_run: Arc<AtomicU64>,
    /// Loaded LoRA adapters: name, and the C strings the runtime was
    /// given (kept for the handle's life).
    lora: Vec<(String, CString, CString)>,
    /// The vision encoder, for a vision model. Declared after `handle`, so
    /// the markers outlive the runtime handle that may point at them.
    vision: Option<Vision>,
    /// What the plan knows of the model.
    profile: Profile,
    /// What the runtime holds.
    held: Held,
    /// What is kept of its tokenizer.
    tokens: constrained::Tokens,
    /// The model's prompt cache, when it has one.
    prompt_cache: Option<PromptCache>,
    /// Its conversation snapshots, when it keeps them.
    snapshots: Option<Snapshots>,
    /// Returning conversations whose snapshots wait to be brought up to
    /// date.
    refreshes: Refreshes,
    /// Its tokenizer, when it has one.
    tokenizer: Option<crate::model::tokenizer::TokenizerSource>,
    /// What the probes found of its runtime.
    verdicts: Option<Verdicts>,
    /// Where those are kept.
    probe_store: Option<verdicts::Store>,
}

/// What the runtime holds besides its weights, as the runner knows it.
#[derive(Debug)]
struct Held {
    /// The chat its history holds (runs with `keep_history`).
    conversation: ConversationState,
    /// Whether it is trusted to keep that history.
    history: History,
    /// Whether its history may hold anything (cleared before a chat
    /// restarts or a run without a chat).
    dirty: bool,
    /// The tools last handed to `rkllm_set_function_tools`.
    tools: Option<String>,
    /// Tokens the request in progress prefilled in runs of its own before
    /// its prompt's (a system prompt's snapshot made on the way), for the
    /// prompt-cache counts.
    side_prefilled: u32,
}

/// Models seen to drop their history, by name, for the life of the
/// process: a reloaded runner (`runner = "thread"`) does not trust the
/// runtime again. Short critical sections only.
static HISTORY_DROPPED: std::sync::LazyLock<parking_lot::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

/// Whether `model`'s runtime was seen to drop its history in this process.
fn history_dropped_before(model: &str) -> bool {
    HISTORY_DROPPED.lock().contains(model)
}

impl RkllmRunner {
    fn sampling(&self, request: &ValidRunRequest) -> SamplingValues {
        let (d, s) = (self.init.sampling, &request.sampling);
        SamplingValues {
            top_k: s
                .top_k
                .map_or(d.top_k, |k| i32::try_from(k).unwrap_or(d.top_k)),
            top_p: s.top_p.map_or(d.top_p, |v| v as f32),
            temperature: s.temperature.map_or(d.temperature, |v| v as f32),
            repeat_penalty: s.repeat_penalty.map_or(d.repeat_penalty, |v| v as f32),
            frequency_penalty: s
                .frequency_penalty
                .map_or(d.frequency_penalty, |v| v as f32),
            presence_penalty: s.presence_penalty.map_or(d.presence_penalty, |v| v as f32),
            mirostat: s.mirostat.map_or(d.mirostat, i32::from),
            mirostat_tau: s.mirostat_tau.map_or(d.mirostat_tau, |v| v as f32),
            mirostat_eta: s.mirostat_eta.map_or(d.mirostat_eta, |v| v as f32),
        }
    }
}

/// That the model file at `path` can be loaded in the memory the board
/// has available (`MemAvailable`): a file larger than that cannot, and
/// runtime 1.3.0 may crash in `rkllm_init` when it runs out instead of
/// failing (RKLLM_ABI.md §7). When the memory cannot be read, the load is
/// left to the runtime.
///
/// # Errors
/// The sizes, and what to do.
fn fits_in_memory(path: &std::path::Path) -> Result<(), String> {
    let size = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(memory) = crate::board::memory(std::path::Path::new("/")) else {
        return Ok(());
    };
    let gib = |bytes: u64| bytes as f64 / f64::from(1u32 << 30);
    if size.len() > memory.available_bytes {
        return Err(format!(
            "its file {} is {:.1} GiB, more than the {:.1} GiB of memory the board has available \
             (MemAvailable; {:.1} GiB in all): it cannot be loaded. Unload other models \
             (engine.max_loaded_models), stop what else uses the memory, or use a smaller \
             quantization of the model",
            path.display(),
            gib(size.len()),
            gib(memory.available_bytes),
            gib(memory.total_bytes)
        ));
    }
    Ok(())
}

fn runtime_error(code: Option<i32>, message: impl Into<String>) -> BackendError {
    BackendError::Runtime {
        code,
        message: message.into(),
    }
}

impl Runner for RkllmRunner {
    /// Generates (or embeds, or clears the cache, or brings a snapshot up
    /// to date), then reads how many positions the runtime's KV cache
    /// holds.
    fn generate(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError> {
        if request.clear_cache {
            self.clear_history();
            return Ok(Generation {
                kv_cache_tokens: self.handle.kv_size(),
                idle_work: self.refreshes.any(),
                ..Generation::ended(FinishReason::Stop)
            });
        }
        if let Some(order) = request.probe {
            let verdicts = self.reprobe(true, order.measure);
            self.verdicts = Some(verdicts.clone());
            return Ok(Generation {
                verdicts: Some(Box::new(verdicts)),
                ..Generation::ended(FinishReason::Stop)
            });
        }
        if request.refresh_snapshot {
            let cancel = sink.cancel_token().clone();
            let mut generation = self.refresh_snapshot(&request.model, &cancel);
            generation.idle_work = self.refreshes.any();
            return Ok(generation);
        }
        if request.prompt.turns().is_some() {
            self.refreshes.running(&request.prompt.text);
        }
        let mut result = self.generate_inner(request, sink);
        if let Ok(generation) = &mut result {
            generation.kv_cache_tokens = self.handle.kv_size();
            generation.snapshots = self.snapshots.as_mut().map(Snapshots::report);
            generation.idle_work = self.refreshes.any();
        }
        result
    }

    fn verdicts(&self) -> Option<Verdicts> {
        self.verdicts.clone()
    }
}

impl RkllmRunner {
    /// Probes the runtime (or reads the verdicts kept, unless `force`), and
    /// takes the features they leave on.
    fn reprobe(&mut self, force: bool, measure: bool) -> Verdicts {
        let store = self.probe_store.take();
        let verdicts = self.resolve_probes(store.as_ref(), force, measure);
        self.probe_store = store;
        self.profile.features = verdicts.features.clone();
        // A runtime whose empty template left its own on is given what its
        // own template takes (the engine builds the prompts so).
        self.profile.server_template =
            self.profile.renders_template && verdicts.features.server_template.on;
        verdicts
    }

    /// Hands the request to the path that carries out its kind: a
    /// constrained answer, a run with images, an embedding, or text.
    fn generate_inner(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError> {
        // New tools change the runtime's template and clear its history, so
        // they are set before deciding what to send.
        if let Some(tools) = &request.prompt.tools {
            self.set_tools(request, tools)?;
        }
        if let Some(constrained) = &request.constraint {
            return self.generate_constrained(request, sink, constrained);
        }
        if !request.images.is_empty() {
            return self.generate_with_images(request, sink);
        }
        if request.embed.is_some() {
            if self.held.dirty {
                self.clear_history();
            }
            let (prompt, role) = (request.prompt.text.clone(), request.prompt.role.as_str());
            return self.run_once(request, sink, Once::plain(&prompt, role));
        }
        self.generate_text(request, sink)
    }

    /// The runtime was just seen to drop the history: remembered for the
    /// model, and said once.
    fn history_dropped(&mut self) {
        let Some(why) = self.held.history.take_dropped() else {
            return;
        };
        if HISTORY_DROPPED.lock().insert(self.model.clone()) {
            tracing::warn!(
                model = %self.model,
                why,
                "the model's runtime keeps no chat history: every turn now sends the whole conversation (history_reuse = \"off\" says so from the start)"
            );
        }
    }

    /// A run with images: the whole prompt, outside the runtime's history
    /// (the images' tokens are not kept for a later turn).
    fn generate_with_images(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError> {
        let Some(vision) = self.vision.as_mut() else {
            return Err(runtime_error(None, "this model does not take images"));
        };
        let embed = vision.encode(request)?;
        if self.held.dirty {
            self.clear_history();
        }
        self.sync_prompt_cache(&request.prompt.text, &sink.cancel_token().clone());
        self.held.conversation.reset();
        let Some(vision) = self.vision.as_ref() else {
            return Err(runtime_error(None, "this model does not take images"));
        };
        let markers = vision.markers.clone();
        let images = ImageRun {
            embed: &embed,
            n_image: request.images.len(),
            tokens: vision.encoder.tokens,
            width: vision.encoder.width as usize,
            height: vision.encoder.height as usize,
            markers: &markers,
        };
        let (prompt, role) = (request.prompt.text.clone(), request.prompt.role.as_str());
        let once = Once {
            images: Some(images),
            ..Once::plain(&prompt, role)
        };
        self.run_once(request, sink, once)
    }

    /// Hands the request's tools to the runtime when they changed. The
    /// system prompt is the chat's system message, if any.
    fn set_tools(&mut self, request: &ValidRunRequest, tools: &str) -> Result<(), BackendError> {
        if self.held.tools.as_deref() == Some(tools) {
            return Ok(());
        }
        let system = request
            .prompt
            .turns()
            .and_then(|c| c.iter().find(|t| t.role == "system"))
            .map_or("You are a helpful assistant.", |t| t.text.as_str());
        let c = |s: &str| {
            CString::new(s)
                .map_err(|_| runtime_error(None, "tools or system prompt contain a NUL byte"))
        };
        let (system, tools_c, tag) = (c(system)?, c(tools)?, c("tool_response")?);
        let rc = self.handle.set_tools(&system, &tools_c, &tag);
        if rc != 0 {
            return Err(runtime_error(
                Some(rc),
                format!("rkllm_set_function_tools failed (code {rc})"),
            ));
        }
        self.held.tools = Some(tools.to_owned());
        // The runtime's template changed: what it held no longer applies.
        self.clear_history();
        Ok(())
    }

    /// Clears the runtime's KV cache: it holds no conversation afterwards.
    fn clear_history(&mut self) {
        let rc = self.handle.clear_kv();
        tracing::debug!(rc, "rkllm_clear_kv_cache");
        self.held.dirty = false;
        self.held.conversation.reset();
        self.held.history.forget();
    }
}
