/*
 * RKLLM runtime ABI 1.3.0, written for rkllm-sys from the documented ABI.
 * See rkllm_common.h for the conventions.
 */
#ifndef RKLLM_SYS_V1_3_0_H
#define RKLLM_SYS_V1_3_0_H

#include "rkllm_common.h"

typedef int (*LLMTokenizerCallback)(void *userdata, const char *text, int32_t text_len,
                                    int32_t *tokens, int32_t n_tokens_max);
typedef int (*LLMGetEmbedCallback)(void *userdata, int32_t *tokens, uint64_t num_tokens,
                                   void *embed, uint64_t len);

typedef struct {
    const char *model_path;
    int32_t max_context_len;
    int32_t max_new_tokens;
    int32_t top_k;
    int32_t n_keep;
    float top_p;
    float temperature;
    float repeat_penalty;
    float frequency_penalty;
    float presence_penalty;
    int32_t mirostat;
    float mirostat_tau;
    float mirostat_eta;
    rkllm_bool skip_special_token;
    rkllm_bool ignore_eos_token;
    rkllm_bool is_async;
    RKLLMExtendParam extend_param;
} RKLLMParam;

typedef struct {
    char *prompt;
    struct {
        float *image_embed;
        size_t n_image_tokens;
        size_t n_image;
        const char *image_start;
        const char *image_end;
        const char *image_content;
        size_t image_width;
        size_t image_height;
    } image;
    struct {
        float *video_embed;
        size_t n_frame_tokens;
        size_t n_frame_per_video;
        size_t n_video;
        const char *video_start;
        const char *video_end;
        const char *video_content;
        size_t frame_width;
        size_t frame_height;
    } video;
} RKLLMMultiModalInput;

typedef struct {
    const char *role;
    rkllm_bool enable_thinking;
    RKLLMInputType input_type;
    union {
        const char *prompt_input;
        RKLLMEmbedInput embed_input;
        RKLLMTokenInput token_input;
        RKLLMMultiModalInput multimodal_input;
    };
} RKLLMInput;

/* Per-run sampling override (replaces the init values for one run). */
typedef struct {
    int32_t top_k;
    float top_p;
    float temperature;
    float repeat_penalty;
    float frequency_penalty;
    float presence_penalty;
    int32_t mirostat;
    float mirostat_tau;
    float mirostat_eta;
} RKLLMSamplingParam;

typedef struct {
    RKLLMInferMode mode;
    RKLLMLoraParam *lora_params;
    RKLLMPromptCacheParam *prompt_cache_params;
    RKLLMSamplingParam *sampling_params;
    int keep_history;
    int32_t max_new_tokens;
} RKLLMInferParam;

/* Callbacks handed to rkllm_init. */
typedef struct {
    LLMResultCallback result_callback;
    void *result_userdata;
    LLMTokenizerCallback tokenizer_callback;
    void *tokenizer_userdata;
    LLMGetEmbedCallback embed_callback;
    void *embed_userdata;
} RKLLMCallback;

RKLLMParam rkllm_createDefaultParam(void);
int rkllm_init(LLMHandle *handle, RKLLMParam *param, RKLLMCallback *callback);
int rkllm_load_lora(LLMHandle handle, RKLLMLoraAdapter *lora_adapter);
int rkllm_load_prompt_cache(LLMHandle handle, const char *prompt_cache_path);
int rkllm_release_prompt_cache(LLMHandle handle);
int rkllm_destroy(LLMHandle handle);
int rkllm_run(LLMHandle handle, RKLLMInput *rkllm_input, RKLLMInferParam *rkllm_infer_params, void *userdata);
int rkllm_run_async(LLMHandle handle, RKLLMInput *rkllm_input, RKLLMInferParam *rkllm_infer_params, void *userdata);
int rkllm_abort(LLMHandle handle);
int rkllm_is_running(LLMHandle handle);
int rkllm_clear_kv_cache(LLMHandle handle, int keep_system_prompt, int *start_pos, int *end_pos);
int rkllm_get_kv_cache_size(LLMHandle handle, int *cache_sizes);
int rkllm_set_chat_template(LLMHandle handle, const char *system_prompt, const char *prompt_prefix, const char *prompt_postfix);
int rkllm_set_function_tools(LLMHandle handle, const char *system_prompt, const char *tools, const char *tool_response_str);
int rkllm_set_cross_attn_params(LLMHandle handle, RKLLMCrossAttnParam *cross_attn_params);

#endif
