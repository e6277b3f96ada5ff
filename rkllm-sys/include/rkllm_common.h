/*
 * Declarations shared by both supported RKLLM runtime ABIs (1.2.1-1.2.3 and
 * 1.3.0). Written for rkllm-sys from the documented ABI (field order, C
 * types, sizes, offsets); it is not Rockchip's header.
 *
 * Plain C11. C `bool` fields of the runtime are declared as `rkllm_bool`, a
 * one-byte unsigned integer with the same size and alignment, so that a
 * value the runtime leaves unwritten can never be an invalid Rust `bool`.
 */
#ifndef RKLLM_SYS_COMMON_H
#define RKLLM_SYS_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef uint8_t rkllm_bool;

/* Opaque model instance. */
typedef void *LLMHandle;

/* CPU bit masks for RKLLMExtendParam.enabled_cpus_mask. */
#define CPU0 (1u << 0)
#define CPU1 (1u << 1)
#define CPU2 (1u << 2)
#define CPU3 (1u << 3)
#define CPU4 (1u << 4)
#define CPU5 (1u << 5)
#define CPU6 (1u << 6)
#define CPU7 (1u << 7)

/* State passed to the result callback. */
typedef enum {
    RKLLM_RUN_NORMAL = 0,
    RKLLM_RUN_WAITING = 1,
    RKLLM_RUN_FINISH = 2,
    RKLLM_RUN_ERROR = 3
} LLMCallState;

/* Which member of the RKLLMInput union is used. */
typedef enum {
    RKLLM_INPUT_PROMPT = 0,
    RKLLM_INPUT_TOKEN = 1,
    RKLLM_INPUT_EMBED = 2,
    RKLLM_INPUT_MULTIMODAL = 3
} RKLLMInputType;

/* What a run produces. */
typedef enum {
    RKLLM_INFER_GENERATE = 0,
    RKLLM_INFER_GET_LAST_HIDDEN_LAYER = 1,
    RKLLM_INFER_GET_LOGITS = 2
} RKLLMInferMode;

/* Init-time extension block: 120 bytes on every target. */
typedef struct {
    int32_t base_domain_id;
    int8_t embed_flash;
    int8_t enabled_cpus_num;
    uint32_t enabled_cpus_mask;
    uint8_t n_batch;
    int8_t use_cross_attn;
    uint8_t reserved[104];
} RKLLMExtendParam;

typedef struct {
    const char *lora_adapter_path;
    const char *lora_adapter_name;
    float scale;
} RKLLMLoraAdapter;

typedef struct {
    float *embed;
    size_t n_tokens;
} RKLLMEmbedInput;

typedef struct {
    int32_t *input_ids;
    size_t n_tokens;
} RKLLMTokenInput;

typedef struct {
    const char *lora_adapter_name;
} RKLLMLoraParam;

typedef struct {
    int save_prompt_cache;
    const char *prompt_cache_path;
} RKLLMPromptCacheParam;

typedef struct {
    float *encoder_k_cache;
    float *encoder_v_cache;
    float *encoder_mask;
    int32_t *encoder_pos;
    int num_tokens;
} RKLLMCrossAttnParam;

typedef struct {
    const float *hidden_states;
    int embd_size;
    int num_tokens;
} RKLLMResultLastHiddenLayer;

typedef struct {
    const float *logits;
    int vocab_size;
    int num_tokens;
} RKLLMResultLogits;

/* Filled with the FINISH callback. */
typedef struct {
    float prefill_time_ms;
    int prefill_tokens;
    float generate_time_ms;
    int generate_tokens;
    float memory_usage_mb;
} RKLLMPerfStat;

/* One callback's output; pointers are valid only during the callback. */
typedef struct {
    const char *text;
    int32_t token_id;
    RKLLMResultLastHiddenLayer last_hidden_layer;
    RKLLMResultLogits logits;
    RKLLMPerfStat perf;
} RKLLMResult;

/* Result callback: 0 = continue, 1 = pause, 2 = release the output buffer (1.3.0). */
typedef int (*LLMResultCallback)(RKLLMResult *result, void *userdata, LLMCallState state);

#endif
