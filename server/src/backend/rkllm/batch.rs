//! Raw batched runs (`n_batch` sequences in one `rkllm_run`, the documented
//! static batching of `RKLLM_ABI.md` §3.2 and §3.4), measured by `doctor
//! --probe`, not served: whether a batch runs at all on the board, and
//! its decode tokens a second per sequence against one sequence's. The
//! handle is a model's own, made for the measurement with its own
//! callback (each callback hands over an array of results, one per
//! sequence) and destroyed after it; the measurement loads the model alone
//! (no other handle of it is alive), as a second copy could exhaust the
//! NPU's memory, which runtime 1.3.0 answers with a crash (rknn-llm #522).

use std::ffi::{CStr, CString, c_int, c_void};
use std::time::Instant;

use parking_lot::Mutex;
use rkllm_sys::v1_3_0;

use super::abi::{InitSettings, fill_params};
use super::runtime::{Api, Runtime};
use crate::plan::probe::Batch;

/// The most sequences a measured batch has (the runtime recommends ≤ 8).
pub(super) const MAX_BATCH: usize = 8;

/// What the batch callback counts.
#[derive(Debug, Default)]
struct Tally {
    /// Tokens each sequence has been handed.
    tokens: [u32; MAX_BATCH],
    /// When the first and the last step came.
    first: Option<Instant>,
    last: Option<Instant>,
    failed: bool,
}

/// The callback of a batched run: counts each sequence's tokens (an entry
/// that has finished carries a negative id).
unsafe extern "C" fn batch_callback(
    result: *mut v1_3_0::RKLLMResult,
    userdata: *mut c_void,
    state: v1_3_0::LLMCallState,
) -> c_int {
    if userdata.is_null() || result.is_null() {
        return 0;
    }
    // SAFETY: `userdata` is the `(usize, Mutex<Tally>)` the measurement
    // keeps alive for the handle's life.
    let (n, tally) = unsafe { &*userdata.cast_const().cast::<(usize, Mutex<Tally>)>() };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut tally = tally.lock();
        match state {
            v1_3_0::RKLLM_RUN_NORMAL | v1_3_0::RKLLM_RUN_WAITING => {
                let now = Instant::now();
                tally.first.get_or_insert(now);
                tally.last = Some(now);
                for i in 0..(*n).min(MAX_BATCH) {
                    // SAFETY: with `n_batch` sequences the runtime hands an
                    // array of `n_batch` results, valid for this call.
                    let entry = unsafe { &*result.add(i) };
                    if entry.token_id >= 0 {
                        tally.tokens[i] += 1;
                    }
                }
            }
            v1_3_0::RKLLM_RUN_ERROR => tally.failed = true,
            _ => {}
        }
    }));
    if outcome.is_err() {
        tally.lock().failed = true;
    }
    0
}

/// Decode tokens a second of one sequence in a run of `n` sequences of
/// `prompt`, generating `steps` tokens each; `Err` with what happened when
/// it did not run.
pub(super) fn measure(
    runtime: &Runtime,
    init: &InitSettings,
    model_path: &CStr,
    n: usize,
    prompt: &str,
    steps: u32,
) -> Result<f64, String> {
    let Api::V1_3(api) = &runtime.api else {
        return Err("not measured: runtime 1.2's batch ABI is not bound by this build".into());
    };
    let n = n.clamp(1, MAX_BATCH);
    let tally: Box<(usize, Mutex<Tally>)> = Box::new((n, Mutex::new(Tally::default())));
    let userdata = std::ptr::from_ref(&*tally).cast_mut().cast::<c_void>();
    // SAFETY: declared (rkllm-sys) as returning the struct by value, which
    // is the runtime's signature; every field is an integer, float, u8 or
    // pointer, so any bit pattern it leaves is a valid value.
    let mut param = unsafe { api.rkllm_createDefaultParam() };
    fill_params!(param, init, model_path);
    param.ignore_eos_token = 0;
    param.extend_param.n_batch = u8::try_from(n).unwrap_or(1);
    let mut callbacks = v1_3_0::RKLLMCallback {
        result_callback: Some(batch_callback),
        result_userdata: userdata,
        tokenizer_callback: None,
        tokenizer_userdata: std::ptr::null_mut(),
        embed_callback: None,
        embed_userdata: std::ptr::null_mut(),
    };
    let mut handle: v1_3_0::LLMHandle = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; `model_path` and the
    // tally behind `userdata` outlive the handle, destroyed below.
    let rc = unsafe { api.rkllm_init(&raw mut handle, &raw mut param, &raw mut callbacks) };
    if rc != 0 || handle.is_null() {
        return Err(format!("rkllm_init with n_batch = {n} failed (code {rc})"));
    }
    let prompt = CString::new(prompt).map_err(|_| "a NUL in the prompt".to_owned())?;
    let role = c"user";
    // SAFETY: every field of RKLLMInput is an integer or a raw pointer,
    // valid when zeroed; the ones used are set below.
    let mut inputs: Vec<v1_3_0::RKLLMInput> = (0..n)
        .map(|_| {
            let mut input: v1_3_0::RKLLMInput = unsafe { std::mem::zeroed() };
            input.role = role.as_ptr();
            input.input_type = v1_3_0::RKLLM_INPUT_PROMPT;
            input.__bindgen_anon_1.prompt_input = prompt.as_ptr();
            input
        })
        .collect();
    let mut sampling = v1_3_0::RKLLMSamplingParam {
        top_k: 1,
        top_p: 0.9,
        temperature: 0.0,
        repeat_penalty: 1.0,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        mirostat: 0,
        mirostat_tau: 5.0,
        mirostat_eta: 0.1,
    };
    let mut params = v1_3_0::RKLLMInferParam {
        mode: v1_3_0::RKLLM_INFER_GENERATE,
        lora_params: std::ptr::null_mut(),
        prompt_cache_params: std::ptr::null_mut(),
        sampling_params: &raw mut sampling,
        keep_history: 0,
        max_new_tokens: i32::try_from(steps).unwrap_or(i32::MAX),
    };
    // SAFETY: the handle is live and used by this thread only; the inputs
    // (an array of `n_batch`, as a batched run takes), their strings and
    // the params outlive this blocking call.
    let rc = unsafe { api.rkllm_run(handle, inputs.as_mut_ptr(), &raw mut params, userdata) };
    // SAFETY: the handle came from the successful `rkllm_init` above and no
    // run is in progress.
    unsafe { api.rkllm_destroy(handle) };
    let tally = tally.1.lock();
    if rc != 0 || tally.failed {
        return Err(format!("the batched run failed (rkllm_run returned {rc})"));
    }
    let tokens = tally.tokens[0];
    match (tally.first, tally.last) {
        (Some(first), Some(last)) if tokens > 1 => {
            let seconds = last.duration_since(first).as_secs_f64();
            if seconds <= 0.0 {
                return Err("the batched run's steps took no measurable time".into());
            }
            Ok(f64::from(tokens - 1) / seconds)
        }
        _ => Err(format!("the batched run gave {tokens} tokens a sequence")),
    }
}

/// A model loaded to measure a batch, serving nothing: its report is the
/// batch's figures.
#[derive(Debug)]
pub(super) struct BatchRunner(pub Batch);

impl crate::backend::Runner for BatchRunner {
    fn generate(
        &mut self,
        _request: &crate::backend::ValidRunRequest,
        _sink: &mut crate::backend::TokenSink<'_>,
    ) -> Result<crate::backend::Generation, crate::backend::BackendError> {
        Err(super::runtime_error(
            None,
            "a model loaded to measure a batch serves nothing",
        ))
    }

    fn verdicts(&self) -> Option<crate::plan::probe::Verdicts> {
        Some(crate::plan::probe::Verdicts {
            runtime_version: None,
            checks: Vec::new(),
            features: crate::plan::profile::Features::default(),
            cost: crate::plan::probe::Cost::default(),
            probed_at: 0,
            kept: false,
            measured: Some(crate::plan::probe::Measured {
                batch: vec![self.0.clone()],
                ..crate::plan::probe::Measured::default()
            }),
        })
    }
}

/// A batch of `n` sequences, as measured, against `single` decode tokens a
/// second of one.
pub(super) fn report(n: usize, measured: Result<f64, String>, single: f64) -> Batch {
    match measured {
        Ok(per_stream) => Batch {
            n_batch: u32::try_from(n).unwrap_or(0),
            ran: true,
            decode_tokens_per_s_per_stream: per_stream,
            per_stream_vs_single: if single > 0.0 {
                per_stream / single
            } else {
                0.0
            },
            detail: format!(
                "ran: {per_stream:.1} decode tokens/s a sequence ({:.2}x one sequence's {single:.1}), {:.1} in all",
                if single > 0.0 {
                    per_stream / single
                } else {
                    0.0
                },
                per_stream * n as f64
            ),
        },
        Err(why) => Batch {
            n_batch: u32::try_from(n).unwrap_or(0),
            ran: false,
            decode_tokens_per_s_per_stream: 0.0,
            per_stream_vs_single: 0.0,
            detail: why,
        },
    }
}
