//! The calls that differ between the two ABIs: `rkllm_init` (parameters
//! and callback registration) and `rkllm_run` (input and infer
//! parameters), plus one result callback per ABI.

use std::ffi::{CStr, CString, c_int};
use std::os::raw::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use rkllm_sys::{v1_2, v1_3_0};

use super::handle::{CallbackSlot, RawHandle, Report};
use super::tap::Perf;
use crate::plan::steer::Logits;

/// Init parameters (`RKLLMParam`), from the `[rkllm]` config section.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct InitSettings {
    /// Context window.
    pub max_context_len: i32,
    /// Default cap on generated tokens.
    pub max_new_tokens: i32,
    /// Tokens kept when the context window slides.
    pub n_keep: i32,
    /// Default sampling values.
    pub sampling: SamplingValues,
    /// Leave special tokens out of the text.
    pub skip_special_token: bool,
    /// CPUs the runtime's threads may use.
    pub cpu_mask: u32,
    /// Runtime CPU threads.
    pub cpu_threads: i8,
    /// Keep the embedding table in flash.
    pub embed_flash: bool,
    /// NPU memory domain.
    pub base_domain_id: i32,
}

/// Every sampling value, resolved (request override or configured default).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingValues {
    /// Top-k cut-off.
    pub top_k: i32,
    /// Nucleus mass.
    pub top_p: f32,
    /// Temperature.
    pub temperature: f32,
    /// Repetition penalty.
    pub repeat_penalty: f32,
    /// Frequency penalty.
    pub frequency_penalty: f32,
    /// Presence penalty.
    pub presence_penalty: f32,
    /// Mirostat: 0 off, 1, or 2.
    pub mirostat: i32,
    /// Mirostat's target surprise.
    pub mirostat_tau: f32,
    /// Mirostat's learning rate.
    pub mirostat_eta: f32,
}

impl Default for SamplingValues {
    /// The runtime's documented defaults (`rkllm_createDefaultParam`).
    fn default() -> Self {
        Self {
            top_k: 1,
            top_p: 0.9,
            temperature: 0.8,
            repeat_penalty: 1.1,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
        }
    }
}

/// One run's input.
#[derive(Debug)]
pub(super) struct RunSettings<'a> {
    pub prompt: &'a CStr,
    pub role: &'a CStr,
    pub enable_thinking: bool,
    pub sampling: SamplingValues,
    pub max_new_tokens: i32,
    /// Keep this turn in the runtime's history (chats).
    pub keep_history: bool,
    /// The images' embeddings, for a multimodal run.
    pub images: Option<ImageRun<'a>>,
    /// Return the last hidden layer instead of generating (embeddings).
    pub hidden_layer: bool,
    /// Logits mode: each callback carries the next token's distribution
    /// (a constrained answer).
    pub logits: bool,
    /// Token input instead of the prompt: ids that go on from where a
    /// paused run stopped.
    pub tokens: Option<&'a [i32]>,
    /// The loaded LoRA adapter to apply, by name.
    pub lora: Option<&'a CStr>,
    /// Save the prefill of this run's prompt to this file (prompt cache).
    pub save_cache: Option<&'a CStr>,
}

/// The images of a multimodal run: their embeddings, back to back, and
/// how the runtime is to place them.
#[derive(Debug)]
pub(super) struct ImageRun<'a> {
    /// `n_image × tokens × width` floats.
    pub embed: &'a [f32],
    pub n_image: usize,
    /// Embedding tokens per image.
    pub tokens: usize,
    /// The encoder's input size.
    pub width: usize,
    pub height: usize,
    /// The markers (ABI 1.3.0 takes them per run; 1.2.x at init).
    pub markers: &'a ImageMarkers,
}

/// Image markers, as C strings.
#[derive(Debug, Clone)]
pub(super) struct ImageMarkers {
    pub start: CString,
    pub end: CString,
    pub content: CString,
}

static EMPTY: &CStr = c"";

/// Fills the fields both ABIs' `RKLLMParam` share, over the runtime's
/// defaults, and zeroes what a default-param call may leave unwritten.
macro_rules! fill_params {
    ($param:expr, $settings:expr, $model_path:expr) => {{
        let (p, s) = (&mut $param, $settings);
        p.model_path = $model_path.as_ptr();
        p.max_context_len = s.max_context_len;
        p.max_new_tokens = s.max_new_tokens;
        p.n_keep = s.n_keep;
        p.top_k = s.sampling.top_k;
        p.top_p = s.sampling.top_p;
        p.temperature = s.sampling.temperature;
        p.repeat_penalty = s.sampling.repeat_penalty;
        p.frequency_penalty = s.sampling.frequency_penalty;
        p.presence_penalty = s.sampling.presence_penalty;
        p.mirostat = s.sampling.mirostat;
        p.mirostat_tau = s.sampling.mirostat_tau;
        p.mirostat_eta = s.sampling.mirostat_eta;
        p.skip_special_token = u8::from(s.skip_special_token);
        p.is_async = 0;
        let e = &mut p.extend_param;
        e.base_domain_id = s.base_domain_id;
        e.embed_flash = i8::from(s.embed_flash);
        e.enabled_cpus_num = s.cpu_threads;
        e.enabled_cpus_mask = s.cpu_mask;
        e.n_batch = 1;
        e.use_cross_attn = 0;
        e.reserved = [0; 104];
    }};
}
pub(super) use fill_params;

/// Builds a prompt `RKLLMInput` of either ABI (the multimodal member is
/// filled by the caller when the run has images).
macro_rules! prompt_input {
    ($module:ident, $run:expr) => {{
        // SAFETY: every field of RKLLMInput is an integer or a raw pointer,
        // valid when zeroed; the ones used are set below.
        let mut input: $module::RKLLMInput = unsafe { std::mem::zeroed() };
        input.role = $run.role.as_ptr();
        input.enable_thinking = u8::from($run.enable_thinking);
        input.input_type = $module::RKLLM_INPUT_PROMPT;
        input.__bindgen_anon_1.prompt_input = $run.prompt.as_ptr();
        if let Some(tokens) = $run.tokens {
            input.input_type = $module::RKLLM_INPUT_TOKEN;
            // The runtime reads the ids only (the C field is not const).
            input.__bindgen_anon_1.token_input = $module::RKLLMTokenInput {
                input_ids: tokens.as_ptr().cast_mut(),
                n_tokens: tokens.len(),
            };
        }
        input
    }};
}

/// The parts of an `RKLLMInferParam` both ABIs share, for the run: its
/// prompt-cache and LoRA parameters (pointed to only when used) and its mode.
macro_rules! infer_extras {
    ($module:ident, $run:expr) => {{
        let run = $run;
        (
            $module::RKLLMPromptCacheParam {
                save_prompt_cache: i32::from(run.save_cache.is_some()),
                prompt_cache_path: run.save_cache.map_or(std::ptr::null(), CStr::as_ptr),
            },
            $module::RKLLMLoraParam {
                lora_adapter_name: run.lora.map_or(std::ptr::null(), CStr::as_ptr),
            },
            if run.hidden_layer {
                $module::RKLLM_INFER_GET_LAST_HIDDEN_LAYER
            } else if run.logits {
                $module::RKLLM_INFER_GET_LOGITS
            } else {
                $module::RKLLM_INFER_GENERATE
            },
        )
    }};
}

/// `value` as a pointer when `used`, else null (optional run parameters).
fn pointer_if<T>(used: bool, value: &mut T) -> *mut T {
    if used {
        std::ptr::from_mut(value)
    } else {
        std::ptr::null_mut()
    }
}

/// `rkllm_init` for ABI 1.3.0. Returns the handle or the runtime's code.
pub(super) fn init_v1_3(
    api: &v1_3_0::RkllmApi,
    settings: &InitSettings,
    model_path: &CStr,
    userdata: *mut c_void,
) -> Result<RawHandle, c_int> {
    // SAFETY: declared (rkllm-sys) as returning the struct by value, which
    // is the runtime's signature; every field is an integer, float, u8 or
    // pointer, so any bit pattern it leaves is a valid value.
    let mut param = unsafe { api.rkllm_createDefaultParam() };
    fill_params!(param, settings, model_path);
    param.ignore_eos_token = 0;
    let mut callbacks = v1_3_0::RKLLMCallback {
        result_callback: Some(callback_v1_3),
        result_userdata: userdata,
        tokenizer_callback: None,
        tokenizer_userdata: std::ptr::null_mut(),
        embed_callback: None,
        embed_userdata: std::ptr::null_mut(),
    };
    let mut handle: v1_3_0::LLMHandle = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; `model_path` and the
    // callback slot behind `userdata` outlive the handle (ModelHandle).
    let rc = unsafe { api.rkllm_init(&raw mut handle, &raw mut param, &raw mut callbacks) };
    checked_handle(rc, handle)
}

/// `rkllm_init` for ABI 1.2.1-1.2.3.
/// This ABI takes a vision model's image markers at init.
pub(super) fn init_v1_2(
    api: &v1_2::RkllmApi,
    settings: &InitSettings,
    model_path: &CStr,
    markers: Option<&ImageMarkers>,
) -> Result<RawHandle, c_int> {
    // SAFETY: as in `init_v1_3`.
    let mut param = unsafe { api.rkllm_createDefaultParam() };
    fill_params!(param, settings, model_path);
    // The runtime may keep these pointers: the markers live as long as
    // the handle (ModelHandle keeps them).
    param.img_start = markers.map_or(EMPTY.as_ptr(), |m| m.start.as_ptr());
    param.img_end = markers.map_or(EMPTY.as_ptr(), |m| m.end.as_ptr());
    param.img_content = markers.map_or(EMPTY.as_ptr(), |m| m.content.as_ptr());
    let mut handle: v1_2::LLMHandle = std::ptr::null_mut();
    // SAFETY: as in `init_v1_3`; this ABI passes `userdata` per run.
    let rc = unsafe { api.rkllm_init(&raw mut handle, &raw mut param, Some(callback_v1_2)) };
    checked_handle(rc, handle)
}

/// `rkllm_load_lora` for either ABI (the adapter struct is the same).
pub(super) fn load_lora(
    api: &super::runtime::Api,
    handle: RawHandle,
    path: &CStr,
    name: &CStr,
    scale: f32,
) -> c_int {
    use super::runtime::Api;
    macro_rules! load {
        ($module:ident, $api:expr) => {{
            let mut adapter = $module::RKLLMLoraAdapter {
                lora_adapter_path: path.as_ptr(),
                lora_adapter_name: name.as_ptr(),
                scale,
            };
            // SAFETY: the handle is live and owned by this thread; the
            // strings outlive the handle (the runner keeps them).
            unsafe { $api.rkllm_load_lora(handle.0.as_ptr(), &raw mut adapter) }
        }};
    }
    match api {
        Api::V1_3(api) => load!(v1_3_0, api),
        Api::V1_2(api) => load!(v1_2, api),
    }
}

fn checked_handle(rc: c_int, handle: *mut c_void) -> Result<RawHandle, c_int> {
    match (rc, NonNull::new(handle)) {
        (0, Some(handle)) => Ok(RawHandle(handle)),
        // Some runtimes returned 0 from a failed init: a null handle is a failure too.
        (0, None) => Err(-1),
        (rc, _) => Err(rc),
    }
}

/// `rkllm_run` for ABI 1.3.0, with per-run sampling and token cap.
pub(super) fn run_v1_3(
    api: &v1_3_0::RkllmApi,
    handle: RawHandle,
    run: &RunSettings<'_>,
    userdata: *mut c_void,
) -> c_int {
    let mut input = prompt_input!(v1_3_0, run);
    if let Some(images) = &run.images {
        input.input_type = v1_3_0::RKLLM_INPUT_MULTIMODAL;
        // SAFETY: as in `prompt_input!`: integers and pointers, zero is valid.
        let mut video: v1_3_0::RKLLMMultiModalInput__bindgen_ty_2 = unsafe { std::mem::zeroed() };
        video.n_video = 0;
        input.__bindgen_anon_1.multimodal_input = v1_3_0::RKLLMMultiModalInput {
            prompt: run.prompt.as_ptr().cast_mut(),
            image: v1_3_0::RKLLMMultiModalInput__bindgen_ty_1 {
                image_embed: images.embed.as_ptr().cast_mut(),
                n_image_tokens: images.tokens,
                n_image: images.n_image,
                image_start: images.markers.start.as_ptr(),
                image_end: images.markers.end.as_ptr(),
                image_content: images.markers.content.as_ptr(),
                image_width: images.width,
                image_height: images.height,
            },
            video,
        };
    }
    let s = run.sampling;
    let mut sampling = v1_3_0::RKLLMSamplingParam {
        top_k: s.top_k,
        top_p: s.top_p,
        temperature: s.temperature,
        repeat_penalty: s.repeat_penalty,
        frequency_penalty: s.frequency_penalty,
        presence_penalty: s.presence_penalty,
        mirostat: s.mirostat,
        mirostat_tau: s.mirostat_tau,
        mirostat_eta: s.mirostat_eta,
    };
    let (mut cache, mut lora, mode) = infer_extras!(v1_3_0, run);
    let mut params = v1_3_0::RKLLMInferParam {
        mode,
        lora_params: pointer_if(run.lora.is_some(), &mut lora),
        prompt_cache_params: pointer_if(run.save_cache.is_some(), &mut cache),
        sampling_params: &raw mut sampling,
        keep_history: i32::from(run.keep_history),
        max_new_tokens: run.max_new_tokens,
    };
    // SAFETY: the handle is live and used by this thread only; the input,
    // its strings, the image embeddings and the params outlive this
    // blocking call; `userdata` is the handle's callback slot.
    unsafe { api.rkllm_run(handle.0.as_ptr(), &raw mut input, &raw mut params, userdata) }
}

/// `rkllm_run` for ABI 1.2.1-1.2.3 (no per-run sampling or cap).
pub(super) fn run_v1_2(
    api: &v1_2::RkllmApi,
    handle: RawHandle,
    run: &RunSettings<'_>,
    userdata: *mut c_void,
) -> c_int {
    let mut input = prompt_input!(v1_2, run);
    if let Some(images) = &run.images {
        input.input_type = v1_2::RKLLM_INPUT_MULTIMODAL;
        input.__bindgen_anon_1.multimodal_input = v1_2::RKLLMMultiModalInput {
            prompt: run.prompt.as_ptr().cast_mut(),
            image_embed: images.embed.as_ptr().cast_mut(),
            n_image_tokens: images.tokens,
            n_image: images.n_image,
            image_width: images.width,
            image_height: images.height,
        };
    }
    let (mut cache, mut lora, mode) = infer_extras!(v1_2, run);
    let mut params = v1_2::RKLLMInferParam {
        mode,
        lora_params: pointer_if(run.lora.is_some(), &mut lora),
        prompt_cache_params: pointer_if(run.save_cache.is_some(), &mut cache),
        keep_history: i32::from(run.keep_history),
    };
    // SAFETY: as in `run_v1_3`.
    unsafe { api.rkllm_run(handle.0.as_ptr(), &raw mut input, &raw mut params, userdata) }
}

/// Defines the result callback of one ABI: reads the result, hands it to
/// the handle's [`CallbackSlot`], and never lets a panic reach C.
macro_rules! result_callback {
    ($name:ident, $module:ident) => {
        unsafe extern "C" fn $name(
            result: *mut $module::RKLLMResult,
            userdata: *mut c_void,
            state: $module::LLMCallState,
        ) -> c_int {
            if userdata.is_null() {
                return 0;
            }
            // SAFETY: `userdata` is the address of the handle's CallbackSlot,
            // which lives until after `rkllm_destroy`.
            let slot = unsafe { &*userdata.cast_const().cast::<CallbackSlot>() };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: the runtime passes a result valid for this call
                // (or null); `text`, when set, is NUL-terminated.
                let result = unsafe { result.as_ref() };
                let text = result.filter(|r| !r.text.is_null()).map(|r| {
                    // SAFETY: a non-null `text` is a NUL-terminated string
                    // owned by the runtime for the duration of this call.
                    unsafe { CStr::from_ptr(r.text) }.to_bytes()
                });
                // Hidden-layer mode: the rows are valid during this call only.
                let hidden = result
                    .map(|r| r.last_hidden_layer)
                    .filter(|h| !h.hidden_states.is_null() && h.embd_size > 0 && h.num_tokens > 0)
                    .map(|h| {
                        let width = h.embd_size as usize;
                        // SAFETY: the runtime passes `num_tokens × embd_size`
                        // floats at `hidden_states`, valid for this call.
                        let rows = unsafe {
                            std::slice::from_raw_parts(
                                h.hidden_states,
                                width * h.num_tokens as usize,
                            )
                        };
                        (rows, width)
                    });
                // Logits mode: `num_tokens` rows of `vocab_size`, valid
                // during this call only.
                let logits = result
                    .map(|r| r.logits)
                    .filter(|l| !l.logits.is_null() && l.vocab_size > 0 && l.num_tokens > 0)
                    .map(|l| {
                        let (width, count) = (l.vocab_size as usize, l.num_tokens as usize);
                        // SAFETY: the runtime passes `num_tokens × vocab_size`
                        // floats at `logits`, valid for this call.
                        let rows = unsafe { std::slice::from_raw_parts(l.logits, width * count) };
                        Logits { rows, width, count }
                    });
                let perf = result.map(|r| Perf {
                    prefill_time_ms: r.perf.prefill_time_ms,
                    prefill_tokens: r.perf.prefill_tokens,
                    generate_time_ms: r.perf.generate_time_ms,
                    generate_tokens: r.perf.generate_tokens,
                    memory_usage_mb: r.perf.memory_usage_mb,
                });
                slot.on_result(Report {
                    state,
                    text,
                    token: result.map_or(-1, |r| r.token_id),
                    perf,
                    hidden,
                    logits,
                })
            }));
            outcome.unwrap_or_else(|_| {
                slot.mark_panicked();
                0
            })
        }
    };
}

result_callback!(callback_v1_3, v1_3_0);
result_callback!(callback_v1_2, v1_2);
