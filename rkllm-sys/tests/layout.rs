//! Every struct size, alignment and field offset of both ABIs, checked
//! against the layout tables in RKLLM_ABI.md and reference/rkllm-layout/
//! (LP64: aarch64 and x86_64; ILP32: armhf, sizes and the offsets listed).

#![allow(unsafe_code)]

use std::mem::{align_of, offset_of, size_of, size_of_val};

use rkllm_sys::{v1_2, v1_3_0};

/// Size of the field a projection borrows (used for union members).
fn field_size<S, F>(project: impl Fn(&S) -> &F) -> usize {
    let value = std::mem::MaybeUninit::<S>::zeroed();
    // SAFETY: every field of these C structs is valid when zeroed (integers,
    // floats and raw pointers), and only the size of the borrow is read.
    let value = unsafe { value.assume_init_ref() };
    size_of_val(project(value))
}

#[test]
#[cfg(target_pointer_width = "64")]
fn abi_1_3_0_matches_the_lp64_tables() {
    assert_eq!(size_of::<v1_3_0::LLMCallState>(), 4, "LLMCallState");
    assert_eq!(size_of::<v1_3_0::RKLLMInputType>(), 4, "RKLLMInputType");
    assert_eq!(size_of::<v1_3_0::RKLLMInferMode>(), 4, "RKLLMInferMode");
    assert_eq!(
        size_of::<v1_3_0::RKLLMExtendParam>(),
        120,
        "RKLLMExtendParam size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMExtendParam>(),
        4,
        "RKLLMExtendParam align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMExtendParam, base_domain_id),
        0,
        "RKLLMExtendParam.base_domain_id"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMExtendParam, embed_flash),
        4,
        "RKLLMExtendParam.embed_flash"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMExtendParam, enabled_cpus_num),
        5,
        "RKLLMExtendParam.enabled_cpus_num"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMExtendParam, enabled_cpus_mask),
        8,
        "RKLLMExtendParam.enabled_cpus_mask"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMExtendParam, n_batch),
        12,
        "RKLLMExtendParam.n_batch"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMExtendParam, use_cross_attn),
        13,
        "RKLLMExtendParam.use_cross_attn"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMExtendParam, reserved),
        14,
        "RKLLMExtendParam.reserved"
    );
    assert_eq!(size_of::<v1_3_0::RKLLMParam>(), 184, "RKLLMParam size");
    assert_eq!(align_of::<v1_3_0::RKLLMParam>(), 8, "RKLLMParam align");
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, model_path),
        0,
        "RKLLMParam.model_path"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, max_context_len),
        8,
        "RKLLMParam.max_context_len"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, max_new_tokens),
        12,
        "RKLLMParam.max_new_tokens"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, top_k),
        16,
        "RKLLMParam.top_k"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, n_keep),
        20,
        "RKLLMParam.n_keep"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, top_p),
        24,
        "RKLLMParam.top_p"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, temperature),
        28,
        "RKLLMParam.temperature"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, repeat_penalty),
        32,
        "RKLLMParam.repeat_penalty"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, frequency_penalty),
        36,
        "RKLLMParam.frequency_penalty"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, presence_penalty),
        40,
        "RKLLMParam.presence_penalty"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, mirostat),
        44,
        "RKLLMParam.mirostat"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, mirostat_tau),
        48,
        "RKLLMParam.mirostat_tau"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, mirostat_eta),
        52,
        "RKLLMParam.mirostat_eta"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, skip_special_token),
        56,
        "RKLLMParam.skip_special_token"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, ignore_eos_token),
        57,
        "RKLLMParam.ignore_eos_token"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, is_async),
        58,
        "RKLLMParam.is_async"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMParam, extend_param),
        60,
        "RKLLMParam.extend_param"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMLoraAdapter>(),
        24,
        "RKLLMLoraAdapter size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMLoraAdapter>(),
        8,
        "RKLLMLoraAdapter align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMLoraAdapter, lora_adapter_path),
        0,
        "RKLLMLoraAdapter.lora_adapter_path"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMLoraAdapter, lora_adapter_name),
        8,
        "RKLLMLoraAdapter.lora_adapter_name"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMLoraAdapter, scale),
        16,
        "RKLLMLoraAdapter.scale"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMEmbedInput>(),
        16,
        "RKLLMEmbedInput size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMEmbedInput>(),
        8,
        "RKLLMEmbedInput align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMEmbedInput, embed),
        0,
        "RKLLMEmbedInput.embed"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMEmbedInput, n_tokens),
        8,
        "RKLLMEmbedInput.n_tokens"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMTokenInput>(),
        16,
        "RKLLMTokenInput size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMTokenInput>(),
        8,
        "RKLLMTokenInput align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMTokenInput, input_ids),
        0,
        "RKLLMTokenInput.input_ids"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMTokenInput, n_tokens),
        8,
        "RKLLMTokenInput.n_tokens"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMMultiModalInput>(),
        144,
        "RKLLMMultiModalInput size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMMultiModalInput>(),
        8,
        "RKLLMMultiModalInput align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, prompt),
        0,
        "RKLLMMultiModalInput.prompt"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image),
        8,
        "RKLLMMultiModalInput.image"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video),
        72,
        "RKLLMMultiModalInput.video"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image.image_embed),
        8,
        "RKLLMMultiModalInput.image.image_embed"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image.n_image_tokens),
        16,
        "RKLLMMultiModalInput.image.n_image_tokens"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image.n_image),
        24,
        "RKLLMMultiModalInput.image.n_image"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image.image_start),
        32,
        "RKLLMMultiModalInput.image.image_start"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image.image_end),
        40,
        "RKLLMMultiModalInput.image.image_end"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image.image_content),
        48,
        "RKLLMMultiModalInput.image.image_content"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image.image_width),
        56,
        "RKLLMMultiModalInput.image.image_width"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, image.image_height),
        64,
        "RKLLMMultiModalInput.image.image_height"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.video_embed),
        72,
        "RKLLMMultiModalInput.video.video_embed"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.n_frame_tokens),
        80,
        "RKLLMMultiModalInput.video.n_frame_tokens"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.n_frame_per_video),
        88,
        "RKLLMMultiModalInput.video.n_frame_per_video"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.n_video),
        96,
        "RKLLMMultiModalInput.video.n_video"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.video_start),
        104,
        "RKLLMMultiModalInput.video.video_start"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.video_end),
        112,
        "RKLLMMultiModalInput.video.video_end"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.video_content),
        120,
        "RKLLMMultiModalInput.video.video_content"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.frame_width),
        128,
        "RKLLMMultiModalInput.video.frame_width"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMMultiModalInput, video.frame_height),
        136,
        "RKLLMMultiModalInput.video.frame_height"
    );
    assert_eq!(size_of::<v1_3_0::RKLLMInput>(), 160, "RKLLMInput size");
    assert_eq!(align_of::<v1_3_0::RKLLMInput>(), 8, "RKLLMInput align");
    assert_eq!(offset_of!(v1_3_0::RKLLMInput, role), 0, "RKLLMInput.role");
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInput, enable_thinking),
        8,
        "RKLLMInput.enable_thinking"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInput, input_type),
        12,
        "RKLLMInput.input_type"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInput, __bindgen_anon_1),
        16,
        "RKLLMInput.<union>"
    );
    assert_eq!(
        // SAFETY: only the union member's size is taken; no value is read.
        field_size(|i: &v1_3_0::RKLLMInput| unsafe { &i.__bindgen_anon_1.prompt_input }),
        8,
        "RKLLMInput.prompt_input size"
    );
    assert_eq!(
        // SAFETY: only the union member's size is taken; no value is read.
        field_size(|i: &v1_3_0::RKLLMInput| unsafe { &i.__bindgen_anon_1.embed_input }),
        16,
        "RKLLMInput.embed_input size"
    );
    assert_eq!(
        // SAFETY: only the union member's size is taken; no value is read.
        field_size(|i: &v1_3_0::RKLLMInput| unsafe { &i.__bindgen_anon_1.token_input }),
        16,
        "RKLLMInput.token_input size"
    );
    assert_eq!(
        // SAFETY: only the union member's size is taken; no value is read.
        field_size(|i: &v1_3_0::RKLLMInput| unsafe { &i.__bindgen_anon_1.multimodal_input }),
        144,
        "RKLLMInput.multimodal_input size"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMLoraParam>(),
        8,
        "RKLLMLoraParam size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMLoraParam>(),
        8,
        "RKLLMLoraParam align"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMPromptCacheParam>(),
        16,
        "RKLLMPromptCacheParam size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMPromptCacheParam>(),
        8,
        "RKLLMPromptCacheParam align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMPromptCacheParam, save_prompt_cache),
        0,
        "RKLLMPromptCacheParam.save_prompt_cache"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMPromptCacheParam, prompt_cache_path),
        8,
        "RKLLMPromptCacheParam.prompt_cache_path"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMCrossAttnParam>(),
        40,
        "RKLLMCrossAttnParam size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMCrossAttnParam>(),
        8,
        "RKLLMCrossAttnParam align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCrossAttnParam, encoder_k_cache),
        0,
        "RKLLMCrossAttnParam.encoder_k_cache"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCrossAttnParam, encoder_v_cache),
        8,
        "RKLLMCrossAttnParam.encoder_v_cache"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCrossAttnParam, encoder_mask),
        16,
        "RKLLMCrossAttnParam.encoder_mask"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCrossAttnParam, encoder_pos),
        24,
        "RKLLMCrossAttnParam.encoder_pos"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCrossAttnParam, num_tokens),
        32,
        "RKLLMCrossAttnParam.num_tokens"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMSamplingParam>(),
        36,
        "RKLLMSamplingParam size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMSamplingParam>(),
        4,
        "RKLLMSamplingParam align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, top_k),
        0,
        "RKLLMSamplingParam.top_k"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, top_p),
        4,
        "RKLLMSamplingParam.top_p"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, temperature),
        8,
        "RKLLMSamplingParam.temperature"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, repeat_penalty),
        12,
        "RKLLMSamplingParam.repeat_penalty"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, frequency_penalty),
        16,
        "RKLLMSamplingParam.frequency_penalty"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, presence_penalty),
        20,
        "RKLLMSamplingParam.presence_penalty"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, mirostat),
        24,
        "RKLLMSamplingParam.mirostat"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, mirostat_tau),
        28,
        "RKLLMSamplingParam.mirostat_tau"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMSamplingParam, mirostat_eta),
        32,
        "RKLLMSamplingParam.mirostat_eta"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMInferParam>(),
        40,
        "RKLLMInferParam size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMInferParam>(),
        8,
        "RKLLMInferParam align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInferParam, mode),
        0,
        "RKLLMInferParam.mode"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInferParam, lora_params),
        8,
        "RKLLMInferParam.lora_params"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInferParam, prompt_cache_params),
        16,
        "RKLLMInferParam.prompt_cache_params"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInferParam, sampling_params),
        24,
        "RKLLMInferParam.sampling_params"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInferParam, keep_history),
        32,
        "RKLLMInferParam.keep_history"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMInferParam, max_new_tokens),
        36,
        "RKLLMInferParam.max_new_tokens"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMResultLastHiddenLayer>(),
        16,
        "RKLLMResultLastHiddenLayer size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMResultLastHiddenLayer>(),
        8,
        "RKLLMResultLastHiddenLayer align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResultLastHiddenLayer, hidden_states),
        0,
        "RKLLMResultLastHiddenLayer.hidden_states"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResultLastHiddenLayer, embd_size),
        8,
        "RKLLMResultLastHiddenLayer.embd_size"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResultLastHiddenLayer, num_tokens),
        12,
        "RKLLMResultLastHiddenLayer.num_tokens"
    );
    assert_eq!(
        size_of::<v1_3_0::RKLLMResultLogits>(),
        16,
        "RKLLMResultLogits size"
    );
    assert_eq!(
        align_of::<v1_3_0::RKLLMResultLogits>(),
        8,
        "RKLLMResultLogits align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResultLogits, logits),
        0,
        "RKLLMResultLogits.logits"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResultLogits, vocab_size),
        8,
        "RKLLMResultLogits.vocab_size"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResultLogits, num_tokens),
        12,
        "RKLLMResultLogits.num_tokens"
    );
    assert_eq!(size_of::<v1_3_0::RKLLMPerfStat>(), 20, "RKLLMPerfStat size");
    assert_eq!(
        align_of::<v1_3_0::RKLLMPerfStat>(),
        4,
        "RKLLMPerfStat align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMPerfStat, prefill_time_ms),
        0,
        "RKLLMPerfStat.prefill_time_ms"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMPerfStat, prefill_tokens),
        4,
        "RKLLMPerfStat.prefill_tokens"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMPerfStat, generate_time_ms),
        8,
        "RKLLMPerfStat.generate_time_ms"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMPerfStat, generate_tokens),
        12,
        "RKLLMPerfStat.generate_tokens"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMPerfStat, memory_usage_mb),
        16,
        "RKLLMPerfStat.memory_usage_mb"
    );
    assert_eq!(size_of::<v1_3_0::RKLLMResult>(), 72, "RKLLMResult size");
    assert_eq!(align_of::<v1_3_0::RKLLMResult>(), 8, "RKLLMResult align");
    assert_eq!(offset_of!(v1_3_0::RKLLMResult, text), 0, "RKLLMResult.text");
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResult, token_id),
        8,
        "RKLLMResult.token_id"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResult, last_hidden_layer),
        16,
        "RKLLMResult.last_hidden_layer"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResult, logits),
        32,
        "RKLLMResult.logits"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMResult, perf),
        48,
        "RKLLMResult.perf"
    );
    assert_eq!(size_of::<v1_3_0::RKLLMCallback>(), 48, "RKLLMCallback size");
    assert_eq!(
        align_of::<v1_3_0::RKLLMCallback>(),
        8,
        "RKLLMCallback align"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCallback, result_callback),
        0,
        "RKLLMCallback.result_callback"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCallback, result_userdata),
        8,
        "RKLLMCallback.result_userdata"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCallback, tokenizer_callback),
        16,
        "RKLLMCallback.tokenizer_callback"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCallback, tokenizer_userdata),
        24,
        "RKLLMCallback.tokenizer_userdata"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCallback, embed_callback),
        32,
        "RKLLMCallback.embed_callback"
    );
    assert_eq!(
        offset_of!(v1_3_0::RKLLMCallback, embed_userdata),
        40,
        "RKLLMCallback.embed_userdata"
    );
}

#[test]
#[cfg(target_pointer_width = "64")]
fn abi_1_2_matches_the_lp64_tables() {
    assert_eq!(
        size_of::<v1_2::RKLLMExtendParam>(),
        120,
        "RKLLMExtendParam size"
    );
    assert_eq!(
        align_of::<v1_2::RKLLMExtendParam>(),
        4,
        "RKLLMExtendParam align"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMExtendParam, base_domain_id),
        0,
        "RKLLMExtendParam.base_domain_id"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMExtendParam, embed_flash),
        4,
        "RKLLMExtendParam.embed_flash"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMExtendParam, enabled_cpus_num),
        5,
        "RKLLMExtendParam.enabled_cpus_num"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMExtendParam, enabled_cpus_mask),
        8,
        "RKLLMExtendParam.enabled_cpus_mask"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMExtendParam, n_batch),
        12,
        "RKLLMExtendParam.n_batch"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMExtendParam, use_cross_attn),
        13,
        "RKLLMExtendParam.use_cross_attn"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMExtendParam, reserved),
        14,
        "RKLLMExtendParam.reserved"
    );
    assert_eq!(size_of::<v1_2::RKLLMParam>(), 208, "RKLLMParam size");
    assert_eq!(align_of::<v1_2::RKLLMParam>(), 8, "RKLLMParam align");
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, model_path),
        0,
        "RKLLMParam.model_path"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, max_context_len),
        8,
        "RKLLMParam.max_context_len"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, max_new_tokens),
        12,
        "RKLLMParam.max_new_tokens"
    );
    assert_eq!(offset_of!(v1_2::RKLLMParam, top_k), 16, "RKLLMParam.top_k");
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, n_keep),
        20,
        "RKLLMParam.n_keep"
    );
    assert_eq!(offset_of!(v1_2::RKLLMParam, top_p), 24, "RKLLMParam.top_p");
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, temperature),
        28,
        "RKLLMParam.temperature"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, repeat_penalty),
        32,
        "RKLLMParam.repeat_penalty"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, frequency_penalty),
        36,
        "RKLLMParam.frequency_penalty"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, presence_penalty),
        40,
        "RKLLMParam.presence_penalty"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, mirostat),
        44,
        "RKLLMParam.mirostat"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, mirostat_tau),
        48,
        "RKLLMParam.mirostat_tau"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, mirostat_eta),
        52,
        "RKLLMParam.mirostat_eta"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, skip_special_token),
        56,
        "RKLLMParam.skip_special_token"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, is_async),
        57,
        "RKLLMParam.is_async"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, img_start),
        64,
        "RKLLMParam.img_start"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, img_end),
        72,
        "RKLLMParam.img_end"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, img_content),
        80,
        "RKLLMParam.img_content"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMParam, extend_param),
        88,
        "RKLLMParam.extend_param"
    );
    assert_eq!(
        size_of::<v1_2::RKLLMMultiModalInput>(),
        48,
        "RKLLMMultiModalInput size"
    );
    assert_eq!(
        align_of::<v1_2::RKLLMMultiModalInput>(),
        8,
        "RKLLMMultiModalInput align"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMMultiModalInput, prompt),
        0,
        "RKLLMMultiModalInput.prompt"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMMultiModalInput, image_embed),
        8,
        "RKLLMMultiModalInput.image_embed"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMMultiModalInput, n_image_tokens),
        16,
        "RKLLMMultiModalInput.n_image_tokens"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMMultiModalInput, n_image),
        24,
        "RKLLMMultiModalInput.n_image"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMMultiModalInput, image_width),
        32,
        "RKLLMMultiModalInput.image_width"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMMultiModalInput, image_height),
        40,
        "RKLLMMultiModalInput.image_height"
    );
    assert_eq!(size_of::<v1_2::RKLLMInput>(), 64, "RKLLMInput size");
    assert_eq!(align_of::<v1_2::RKLLMInput>(), 8, "RKLLMInput align");
    assert_eq!(offset_of!(v1_2::RKLLMInput, role), 0, "RKLLMInput.role");
    assert_eq!(
        offset_of!(v1_2::RKLLMInput, enable_thinking),
        8,
        "RKLLMInput.enable_thinking"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMInput, input_type),
        12,
        "RKLLMInput.input_type"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMInput, __bindgen_anon_1),
        16,
        "RKLLMInput.<union>"
    );
    assert_eq!(
        // SAFETY: only the union member's size is taken; no value is read.
        field_size(|i: &v1_2::RKLLMInput| unsafe { &i.__bindgen_anon_1.prompt_input }),
        8,
        "RKLLMInput.prompt_input size"
    );
    assert_eq!(
        size_of::<v1_2::RKLLMInferParam>(),
        32,
        "RKLLMInferParam size"
    );
    assert_eq!(
        align_of::<v1_2::RKLLMInferParam>(),
        8,
        "RKLLMInferParam align"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMInferParam, mode),
        0,
        "RKLLMInferParam.mode"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMInferParam, lora_params),
        8,
        "RKLLMInferParam.lora_params"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMInferParam, prompt_cache_params),
        16,
        "RKLLMInferParam.prompt_cache_params"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMInferParam, keep_history),
        24,
        "RKLLMInferParam.keep_history"
    );
    assert_eq!(size_of::<v1_2::RKLLMResult>(), 72, "RKLLMResult size");
    assert_eq!(align_of::<v1_2::RKLLMResult>(), 8, "RKLLMResult align");
    assert_eq!(offset_of!(v1_2::RKLLMResult, text), 0, "RKLLMResult.text");
    assert_eq!(
        offset_of!(v1_2::RKLLMResult, token_id),
        8,
        "RKLLMResult.token_id"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMResult, last_hidden_layer),
        16,
        "RKLLMResult.last_hidden_layer"
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMResult, logits),
        32,
        "RKLLMResult.logits"
    );
    assert_eq!(offset_of!(v1_2::RKLLMResult, perf), 48, "RKLLMResult.perf");
}

#[test]
#[cfg(target_pointer_width = "32")]
fn abi_1_3_0_matches_the_ilp32_table() {
    use v1_3_0::*;
    assert_eq!(size_of::<RKLLMExtendParam>(), 120);
    assert_eq!(size_of::<RKLLMParam>(), 176);
    assert_eq!(offset_of!(RKLLMParam, extend_param), 56);
    assert_eq!(offset_of!(RKLLMParam, skip_special_token), 52);
    assert_eq!(offset_of!(RKLLMParam, ignore_eos_token), 53);
    assert_eq!(offset_of!(RKLLMParam, is_async), 54);
    assert_eq!(size_of::<RKLLMLoraAdapter>(), 12);
    assert_eq!(size_of::<RKLLMEmbedInput>(), 8);
    assert_eq!(size_of::<RKLLMTokenInput>(), 8);
    assert_eq!(size_of::<RKLLMMultiModalInput>(), 72);
    assert_eq!(size_of::<RKLLMInput>(), 84);
    assert_eq!(offset_of!(RKLLMInput, role), 0);
    assert_eq!(offset_of!(RKLLMInput, enable_thinking), 4);
    assert_eq!(offset_of!(RKLLMInput, input_type), 8);
    assert_eq!(offset_of!(RKLLMInput, __bindgen_anon_1), 12);
    assert_eq!(size_of::<RKLLMPromptCacheParam>(), 8);
    assert_eq!(size_of::<RKLLMCrossAttnParam>(), 20);
    assert_eq!(size_of::<RKLLMSamplingParam>(), 36);
    assert_eq!(size_of::<RKLLMInferParam>(), 24);
    assert_eq!(offset_of!(RKLLMInferParam, lora_params), 4);
    assert_eq!(offset_of!(RKLLMInferParam, prompt_cache_params), 8);
    assert_eq!(offset_of!(RKLLMInferParam, sampling_params), 12);
    assert_eq!(offset_of!(RKLLMInferParam, keep_history), 16);
    assert_eq!(offset_of!(RKLLMInferParam, max_new_tokens), 20);
    assert_eq!(size_of::<RKLLMResultLastHiddenLayer>(), 12);
    assert_eq!(size_of::<RKLLMResultLogits>(), 12);
    assert_eq!(size_of::<RKLLMPerfStat>(), 20);
    assert_eq!(size_of::<RKLLMResult>(), 52);
    assert_eq!(offset_of!(RKLLMResult, token_id), 4);
    assert_eq!(offset_of!(RKLLMResult, last_hidden_layer), 8);
    assert_eq!(offset_of!(RKLLMResult, logits), 20);
    assert_eq!(offset_of!(RKLLMResult, perf), 32);
    assert_eq!(size_of::<RKLLMCallback>(), 24);
}

#[test]
fn structs_unchanged_since_1_2_1_are_the_same_in_both_abis() {
    assert_eq!(
        size_of::<v1_2::RKLLMExtendParam>(),
        size_of::<v1_3_0::RKLLMExtendParam>()
    );
    assert_eq!(size_of::<v1_2::RKLLMPerfStat>(), 20);
    assert_eq!(
        size_of::<v1_2::RKLLMLoraAdapter>(),
        size_of::<v1_3_0::RKLLMLoraAdapter>()
    );
    assert_eq!(
        size_of::<v1_2::RKLLMPromptCacheParam>(),
        size_of::<v1_3_0::RKLLMPromptCacheParam>()
    );
    assert_eq!(
        size_of::<v1_2::RKLLMCrossAttnParam>(),
        size_of::<v1_3_0::RKLLMCrossAttnParam>()
    );
    assert_eq!(
        offset_of!(v1_2::RKLLMResult, perf),
        offset_of!(v1_3_0::RKLLMResult, perf)
    );
}

#[test]
fn enum_values_are_the_documented_ones() {
    use v1_3_0::*;
    assert_eq!(
        [
            RKLLM_RUN_NORMAL,
            RKLLM_RUN_WAITING,
            RKLLM_RUN_FINISH,
            RKLLM_RUN_ERROR
        ],
        [0, 1, 2, 3]
    );
    assert_eq!(
        [
            RKLLM_INPUT_PROMPT,
            RKLLM_INPUT_TOKEN,
            RKLLM_INPUT_EMBED,
            RKLLM_INPUT_MULTIMODAL
        ],
        [0, 1, 2, 3]
    );
    assert_eq!(
        [
            RKLLM_INFER_GENERATE,
            RKLLM_INFER_GET_LAST_HIDDEN_LAYER,
            RKLLM_INFER_GET_LOGITS
        ],
        [0, 1, 2]
    );
    assert_eq!(v1_2::RKLLM_RUN_FINISH, 2);
    assert_eq!(CPU4 | CPU5 | CPU6 | CPU7, 0xF0);
}
