/*
 * RKLLM runtime ABI 1.2.1-1.2.3 (one ABI: 1.2.2 and 1.2.3 changed no
 * layout), written for rkllm-sys from the documented ABI. See
 * rkllm_common.h for the conventions.
 */
#ifndef RKLLM_SYS_V1_2_H
#define RKLLM_SYS_V1_2_H

#include "rkllm_common.h"

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
    rkllm_bool is_async;
    const char *img_start;
    const char *img_end;
    const char *img_content;
    RKLLMExtendParam extend_param;
} RKLLMParam;

typedef struct {
    char *prompt;
    float *image_embed;
    size_t n_image_tokens;
    size_t n_image;
    size_t image_width;
    size_t image_height;
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

typedef struct {
    RKLLMInferMode mode;
    RKLLMLoraParam *lora_params;
    RKLLMPromptCacheParam *prompt_cache_params;
    int keep_history;
} RKLLMInferParam;

RKLLMParam rkllm_createDefaultParam(void);
int rkllm_init(LLMHandle *handle, RKLLMParam *param, LLMResultCallback callback);
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
