/*
 * fake_rkllmrt.c: a TEST DOUBLE of Rockchip's librkllmrt.so.
 *
 * It exports every function of one RKLLM ABI (compile with -DFAKE_ABI_V1_3
 * or -DFAKE_ABI_V1_2) with the signatures of rkllm-sys's headers, and
 * behaves like the runtime as RKLLM_ABI.md describes it, so the server's
 * real FFI path can be tested off the board. It runs no model: the text it
 * "generates" is the content of the model file given to rkllm_init.
 *
 * Behaviour is chosen with environment variables read by rkllm_init (see
 * README.md beside this file): token size, WAITING or split-character
 * mode, pace, abort delay and what follows an abort, callbacks from a
 * runtime thread, and an event log for the tests. A prompt containing
 * "@fake-error=N" fails that run after N tokens; one containing
 * "@fake-think=1" or "=2" makes a reasoning model's reply, thinking first.
 *
 * Logits mode (RKLLM_INFER_GET_LOGITS, in fake_logits.h) needs a
 * vocabulary: a model file whose first line is "@fake-vocab=PATH" names a
 * tokenizer.json (read by fake_vocab.h), and the rest of the file is the
 * text the "model" wants to say. A callback that returns 1 pauses the run with its KV kept: the next
 * rkllm_run continues that generation (token input appends the tokens).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(FAKE_ABI_V1_3)
#include "rkllm_v1_3_0.h"
#ifndef FAKE_VERSION
#define FAKE_VERSION "1.3.0"
#endif
#elif defined(FAKE_ABI_V1_2)
#include "rkllm_v1_2.h"
#ifndef FAKE_VERSION
#define FAKE_VERSION "1.2.3"
#endif
#else
#error "define FAKE_ABI_V1_3 or FAKE_ABI_V1_2"
#endif

#include "fake_vocab.h"

/* The version marker a binding reads from the file, as the real runtime
 * carries one. */
__attribute__((used)) const char fake_rkllm_version_marker[] =
    "RKLLM SDK (version: " FAKE_VERSION " fake runtime for tests)";

#define FAKE_MAX_CONTEXT 8192

enum after_abort { AFTER_ABORT_NONE, AFTER_ABORT_FINISH, AFTER_ABORT_ERROR };

typedef struct {
    char *text;
    size_t text_len;
    LLMResultCallback callback;
    void *default_userdata;
    int32_t max_new_tokens;
    /* configuration from the environment */
    int token_bytes;
    int split_mode;
    int token_ms;
    int prefill_ms;
    int abort_delay_ms;
    enum after_abort after_abort;
    int callback_thread;
    char *log_path;
    /* state */
    atomic_int running;
    atomic_int abort_requested;
    struct timespec abort_time;
    pthread_mutex_t abort_lock;
    int kv_cache;
    /* "@fake-no-history": a model whose KV cache cannot be reused (Qwen3.5,
     * linear attention): a run with keep_history drops every cache itself
     * once it is over, so nothing is held for the next turn */
    int no_history;
    /* the image markers of ABI 1.2.x, given at init */
    char *img_start, *img_end, *img_content;
    /* LoRA adapters loaded (names) */
    char *loras[8];
    int n_loras;
    /* the prompt of the loaded prompt cache, if any */
    char *cached_prompt;
    /* the prompt text the KV cache holds since the generation began: the
     * first run's prompt, then what each run that went on after a pause
     * fed (a prompt cache saved then holds all of it) */
    char *held_text;
    int prefill_us_per_byte;
    /* logits mode: the vocabulary the model file names, the width of a
     * logits row (the vocabulary's size unless "@fake-logits-width=N"),
     * each token's logit before the step's own part, whether callbacks
     * carry the runtime's pick ("FAKE_RKLLM_LOGITS_PICK=none": token_id
     * -1), and the seed of the step noise (FAKE_RKLLM_SEED) */
    fake_vocab *vocab;
    int logits_width;
    float *base_logits;
    int report_pick;
    uint64_t seed;
    /* a generation a callback's return of 1 paused (1: logits mode, 2:
     * text mode), which the next run continues until the KV cache is
     * cleared: in logits mode the tokens the model wants to say and how
     * many of them its KV holds; in text mode the rest of its text */
    int paused;
    int32_t *want;
    int want_n;
    int step;
    /* picks of the generation decoded so far (callbacks that returned 0),
     * and whether its last run only prefilled (it paused at its first
     * callback, allowed one new token at most): tokens fed after such a
     * run, before anything was decoded, are more of its input (a long
     * prompt fed in chunks), not its answer */
    int decoded;
    int prefilled_only;
    uint64_t gen_seed;
    char *paused_text;
    size_t paused_text_len;
    /* totals over the handle's life (logged with each logits run) */
    long total_runs, total_fed, total_rows;
    /* sequences per run (n_batch): more than one, runs take an array of
     * inputs and callbacks hand over an array of results */
    int n_batch;
    /* the length of the first run's prompt in held_text (what a prompt
     * cache saved with "cache_after_tokens_partial" holds) */
    size_t held_first;
    /* behaviours of the runtime this double breaks on purpose, one switch
     * per probe of the server (FAKE_RKLLM_BREAK, a comma-separated list) */
    int break_pause_drops_kv;
    int break_token_input_ignored;
    int break_paused_token_in_kv;
    int break_pick_not_argmax;
    int break_cache_after_tokens_partial;
    int break_template_stays;
} fake_handle;

/* The built-in template a runtime with "template_stays" keeps around every
 * prompt, whatever rkllm_set_chat_template set (ChatML's shape). */
#define FAKE_TEMPLATE_PREFIX "<|im_start|>user\n"
#define FAKE_TEMPLATE_SUFFIX "<|im_end|>\n<|im_start|>assistant\n"

/* Whether the comma-separated list `list` names `name`. */
static int list_has(const char *list, const char *name) {
    if (!list) return 0;
    size_t n = strlen(name);
    for (const char *at = list; (at = strstr(at, name)); at += n) {
        int starts = at == list || at[-1] == ',';
        int ends = at[n] == '\0' || at[n] == ',';
        if (starts && ends) return 1;
    }
    return 0;
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : fallback;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void fake_log(const fake_handle *h, const char *fmt, ...) {
    if (!h || !h->log_path) return;
    FILE *f = fopen(h->log_path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

/* The runtime's own prints go to stdout, as the real one's do. */
static void runtime_print(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Length of the longest prefix of s[0..n) that is complete UTF-8 (the
 * text is valid UTF-8, so only a truncated tail can be incomplete). */
static size_t complete_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
        if (i + len > n) break;
        i += len;
    }
    return i;
}

static float *make_base_logits(const fake_vocab *v, int width);

/* Options a model file gives in its first lines (removed from its text):
 * "@fake-vocab=PATH" (the tokenizer.json of logits mode),
 * "@fake-logits-width=N" (a logits row wider or narrower than the
 * vocabulary) and "@fake-no-history" (a model that keeps no history). Returns -1 (with the runtime's message) when the
 * vocabulary cannot be read. */
static int read_model_options(fake_handle *h) {
    char *vocab_path = NULL;
    for (;;) {
        char *line_end = strchr(h->text, '\n');
        if (!line_end) break;
        size_t line = (size_t)(line_end - h->text);
        if (strncmp(h->text, "@fake-vocab=", 12) == 0) {
            free(vocab_path);
            vocab_path = strndup(h->text + 12, line - 12);
        } else if (strncmp(h->text, "@fake-logits-width=", 19) == 0) {
            h->logits_width = atoi(h->text + 19);
        } else if (line == 16 && strncmp(h->text, "@fake-no-history", 16) == 0) {
            h->no_history = 1;
        } else {
            break;
        }
        memmove(h->text, line_end + 1, h->text_len - line);
        h->text_len -= line + 1;
    }
    h->report_pick = !(getenv("FAKE_RKLLM_LOGITS_PICK") && strcmp(getenv("FAKE_RKLLM_LOGITS_PICK"), "none") == 0);
    h->seed = (uint64_t)env_int("FAKE_RKLLM_SEED", 0);
    if (!vocab_path) return 0;
    const char *why = NULL;
    h->vocab = vocab_load(vocab_path, &why);
    if (!h->vocab) {
        runtime_print("E rkllm: %s %s", why, vocab_path);
        free(vocab_path);
        return -1;
    }
    if (h->logits_width <= 0) h->logits_width = h->vocab->n;
    h->base_logits = make_base_logits(h->vocab, h->logits_width);
    fake_log(h, "vocab tokens=%d eos=%d width=%d path=%s", h->vocab->n, h->vocab->eos, h->logits_width, vocab_path);
    free(vocab_path);
    return 0;
}

RKLLMParam rkllm_createDefaultParam(void) {
    RKLLMParam p;
    memset(&p, 0, sizeof p);
    p.model_path = NULL;
    p.max_context_len = 512;
    p.max_new_tokens = -1;
    p.top_k = 40;
    p.n_keep = -1;
    p.top_p = 0.9f;
    p.temperature = 0.8f;
    p.repeat_penalty = 1.1f;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.mirostat = 0;
    p.mirostat_tau = 5.0f;
    p.mirostat_eta = 0.1f;
    p.skip_special_token = 1;
    p.is_async = 0;
#if defined(FAKE_ABI_V1_2)
    p.img_start = "";
    p.img_end = "";
    p.img_content = "";
#endif
    p.extend_param.base_domain_id = 0;
    p.extend_param.embed_flash = 1;
    p.extend_param.enabled_cpus_num = 4;
    p.extend_param.enabled_cpus_mask = CPU4 | CPU5 | CPU6 | CPU7;
    p.extend_param.n_batch = 1;
    return p;
}

#if defined(FAKE_ABI_V1_3)
int rkllm_init(LLMHandle *handle, RKLLMParam *param, RKLLMCallback *callbacks) {
    LLMResultCallback callback = callbacks ? callbacks->result_callback : NULL;
    void *default_userdata = callbacks ? callbacks->result_userdata : NULL;
#else
int rkllm_init(LLMHandle *handle, RKLLMParam *param, LLMResultCallback callback) {
    void *default_userdata = NULL;
#endif
    runtime_print("I rkllm: rkllm-runtime version: " FAKE_VERSION
                  " (fake), rknpu driver version: 0.9.8, platform: RK3588");
    if (!handle || !param || !callback) {
        runtime_print("E rkllm: invalid arguments to rkllm_init");
        return -1;
    }
    *handle = NULL;
    if (getenv("FAKE_RKLLM_INIT_FAIL")) {
        runtime_print("E rkllm: injected init failure");
        return -1;
    }
    if (!param->model_path) {
        runtime_print("E rkllm: model_path is not set");
        return -1;
    }
    if (param->max_context_len > FAKE_MAX_CONTEXT) {
        runtime_print("E rkllm: max_context[%d] must be less than the model's max_context_limit[%d]",
                      param->max_context_len, FAKE_MAX_CONTEXT);
        return -1;
    }
    if (param->extend_param.n_batch < 1 || param->extend_param.n_batch > 8 ||
        param->extend_param.use_cross_attn != 0) {
        runtime_print("E rkllm: unsupported n_batch/use_cross_attn");
        return -1;
    }
    FILE *f = fopen(param->model_path, "rb");
    if (!f) {
        runtime_print("E rkllm: failed to open model file %s", param->model_path);
        return -1;
    }
    fake_handle *h = calloc(1, sizeof *h);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    h->text = malloc((size_t)size + 1);
    h->text_len = fread(h->text, 1, (size_t)size, f);
    h->text[h->text_len] = '\0';
    fclose(f);
    h->callback = callback;
    h->default_userdata = default_userdata;
    h->n_batch = param->extend_param.n_batch;
    h->max_new_tokens = param->max_new_tokens;
    h->token_bytes = env_int("FAKE_RKLLM_TOKEN_BYTES", 3);
    if (h->token_bytes < 1) h->token_bytes = 1;
    if (h->token_bytes > 16) h->token_bytes = 16;
    const char *mode = getenv("FAKE_RKLLM_MODE");
    h->split_mode = mode && strcmp(mode, "split") == 0;
    h->token_ms = env_int("FAKE_RKLLM_TOKEN_MS", 2);
    h->prefill_ms = env_int("FAKE_RKLLM_PREFILL_MS", 0);
    h->prefill_us_per_byte = env_int("FAKE_RKLLM_PREFILL_US_PER_BYTE", 0);
    h->abort_delay_ms = env_int("FAKE_RKLLM_ABORT_DELAY_MS", 0);
    const char *after = getenv("FAKE_RKLLM_AFTER_ABORT");
    h->after_abort = !after                      ? AFTER_ABORT_NONE
                     : strcmp(after, "finish") == 0 ? AFTER_ABORT_FINISH
                     : strcmp(after, "error") == 0  ? AFTER_ABORT_ERROR
                                                    : AFTER_ABORT_NONE;
    h->callback_thread = env_int("FAKE_RKLLM_CALLBACK_THREAD", 0);
    const char *breaks = getenv("FAKE_RKLLM_BREAK");
    h->break_pause_drops_kv = list_has(breaks, "pause_drops_kv");
    h->break_token_input_ignored = list_has(breaks, "token_input_ignored");
    h->break_paused_token_in_kv = list_has(breaks, "paused_token_in_kv");
    h->break_pick_not_argmax = list_has(breaks, "pick_not_argmax");
    h->break_cache_after_tokens_partial = list_has(breaks, "cache_after_tokens_partial");
    h->break_template_stays = list_has(breaks, "template_stays");
    const char *log_path = getenv("FAKE_RKLLM_LOG");
    h->log_path = log_path ? strdup(log_path) : NULL;
    pthread_mutex_init(&h->abort_lock, NULL);
#if defined(FAKE_ABI_V1_2)
    h->img_start = param->img_start ? strdup(param->img_start) : NULL;
    h->img_end = param->img_end ? strdup(param->img_end) : NULL;
    h->img_content = param->img_content ? strdup(param->img_content) : NULL;
#endif
    if (read_model_options(h) != 0) {
        free(h->text);
        free(h->log_path);
#if defined(FAKE_ABI_V1_2)
        free(h->img_start);
        free(h->img_end);
        free(h->img_content);
#endif
        pthread_mutex_destroy(&h->abort_lock);
        free(h);
        return -1;
    }
    fake_log(h, "init model=%s max_context_len=%d max_new_tokens=%d top_k=%d n_keep=%d cpus=%d mask=0x%x domain=%d",
             param->model_path, param->max_context_len, param->max_new_tokens, param->top_k, param->n_keep,
             param->extend_param.enabled_cpus_num, param->extend_param.enabled_cpus_mask,
             param->extend_param.base_domain_id);
    *handle = h;
    return 0;
}

/* Loads an adapter: the file must exist; its name is remembered so that a
 * run can select it (and one that names another is refused). */
int rkllm_load_lora(LLMHandle handle, RKLLMLoraAdapter *lora_adapter) {
    fake_handle *h = handle;
    if (!h || !lora_adapter || !lora_adapter->lora_adapter_name || !lora_adapter->lora_adapter_path) return -1;
    FILE *f = fopen(lora_adapter->lora_adapter_path, "rb");
    if (!f) {
        runtime_print("E rkllm: failed to open lora adapter %s", lora_adapter->lora_adapter_path);
        return -1;
    }
    fclose(f);
    if (h->n_loras >= 8) return -1;
    h->loras[h->n_loras++] = strdup(lora_adapter->lora_adapter_name);
    fake_log(h, "lora-load name=%s scale=%.2f path=%s", lora_adapter->lora_adapter_name, lora_adapter->scale,
             lora_adapter->lora_adapter_path);
    return 0;
}

static int lora_loaded(const fake_handle *h, const char *name) {
    for (int i = 0; i < h->n_loras; i++)
        if (strcmp(h->loras[i], name) == 0) return 1;
    return 0;
}

#define CACHE_MAGIC "FAKE-RKLLM-PROMPT-CACHE\n"
#define CACHE_END "FAKE-RKLLM-PROMPT-CACHE-END\n"

/* Refuses a prompt cache file as the runtime does (-1), saying why. */
static int refuse_prompt_cache(const fake_handle *h, const char *path, const char *why) {
    runtime_print("E rkllm: failed to load prompt cache %s: %s", path, why);
    fake_log(h, "prompt-cache-refused why=%s", why);
    return -1;
}

/* A prompt cache file is the magic line, `bytes=N`, the N bytes of the
 * prompt whose prefill it holds, and an end line. A file that is empty,
 * cut short, longer, or anything else is refused, as the runtime refuses
 * a file it cannot read. Loading one makes later prompts that start with
 * that prompt prefill only the rest. */
int rkllm_load_prompt_cache(LLMHandle handle, const char *prompt_cache_path) {
    fake_handle *h = handle;
    if (!h || !prompt_cache_path) return -1;
    FILE *f = fopen(prompt_cache_path, "rb");
    if (!f) return refuse_prompt_cache(h, prompt_cache_path, "cannot open it");
    char *buf = NULL;
    size_t size = 0, n = 0;
    for (;;) {
        if (n == size) {
            size = size ? size * 2 : 65536;
            char *bigger = realloc(buf, size + 1);
            if (!bigger) {
                free(buf);
                fclose(f);
                return refuse_prompt_cache(h, prompt_cache_path, "out of memory");
            }
            buf = bigger;
        }
        size_t got = fread(buf + n, 1, size - n, f);
        if (got == 0) break;
        n += got;
    }
    fclose(f);
    buf[n] = '\0';
    size_t magic = strlen(CACHE_MAGIC), end = strlen(CACHE_END);
    const char *why = NULL, *body = NULL;
    size_t bytes = 0;
    if (n == 0) {
        why = "empty file";
    } else if (n < magic || memcmp(buf, CACHE_MAGIC, magic) != 0) {
        why = "not a prompt cache";
    } else {
        /* "bytes=N\n", N in decimal digits only */
        const char *p = buf + magic;
        char *digits_end = NULL;
        if (strncmp(p, "bytes=", 6) == 0 && p[6] >= '0' && p[6] <= '9') {
            bytes = strtoull(p + 6, &digits_end, 10);
        }
        if (!digits_end || *digits_end != '\n') {
            why = "no length";
        } else {
            body = digits_end + 1;
            size_t rest = n - (size_t)(body - buf);
            if (rest < bytes || rest - bytes < end) {
                why = "truncated";
            } else if (rest - bytes > end || memcmp(body + bytes, CACHE_END, end) != 0) {
                why = "bad end";
            }
        }
    }
    if (why) {
        free(buf);
        return refuse_prompt_cache(h, prompt_cache_path, why);
    }
    free(h->cached_prompt);
    h->cached_prompt = strndup(body, bytes);
    free(buf);
    fake_log(h, "prompt-cache-load bytes=%zu", strlen(h->cached_prompt));
    return 0;
}

int rkllm_release_prompt_cache(LLMHandle handle) {
    fake_handle *h = handle;
    if (!h) return -1;
    free(h->cached_prompt);
    h->cached_prompt = NULL;
    fake_log(h, "prompt-cache-release");
    return 0;
}

/* Bytes of `prompt` the loaded prompt cache covers: the longest common
 * prefix of the two, as the runtime matches a cache (RKLLM_ABI.md 3.5). */
static size_t cached_bytes(const fake_handle *h, const char *prompt) {
    if (!h->cached_prompt) return 0;
    size_t n = 0;
    while (h->cached_prompt[n] && prompt[n] == h->cached_prompt[n]) n++;
    return n;
}

static void save_prompt_cache(fake_handle *h, const char *path, const char *prompt) {
    /* "cache_after_tokens_partial": a save after token input holds only
     * the generation's first prompt, not what was fed after it. */
    char *first = NULL;
    if (h->break_cache_after_tokens_partial && prompt == h->held_text && h->held_first < strlen(prompt)) {
        prompt = first = strndup(prompt, h->held_first);
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        runtime_print("E rkllm: cannot write prompt cache %s", path);
        free(first);
        return;
    }
    fputs(CACHE_MAGIC, f);
    fprintf(f, "bytes=%zu\n", strlen(prompt));
    fputs(prompt, f);
    fputs(CACHE_END, f);
    fclose(f);
    fake_log(h, "prompt-cache-save path=%s bytes=%zu", path, strlen(prompt));
    free(first);
}

/* The KV cache once a run's input is prefilled: a new generation starts
 * from what a kept history holds (nothing without one), a run that goes
 * on after a pause from what the pause left; the input's positions come
 * on top. Logged with what it holds of the prompt text, so that a test
 * sees what an answer is made from. */
static void prefilled(fake_handle *h, int continues, int keep_history, int positions) {
    if (!continues && !keep_history) h->kv_cache = 0;
    h->kv_cache += positions;
    fake_log(h, "prefilled held=%zu kv=%d", h->held_text ? strlen(h->held_text) : (size_t)0, h->kv_cache);
}

/* A run paused by its callback: the KV keeps what it holds, the paused
 * token not decoded (RKLLM_ABI.md 3.3, 3.5c), unless this double breaks
 * that on purpose ("pause_drops_kv", "paused_token_in_kv"). */
static void paused_kv(fake_handle *h, const char *pick_text) {
    if (h->break_pause_drops_kv) {
        h->kv_cache = 0;
        if (h->held_text) h->held_text[0] = '\0';
        h->held_first = 0;
        fake_log(h, "pause-dropped-kv");
    } else if (h->break_paused_token_in_kv) {
        h->kv_cache += 1;
        if (h->held_text && pick_text && *pick_text) {
            size_t was = strlen(h->held_text), more = strlen(pick_text);
            char *held = realloc(h->held_text, was + more + 1);
            if (held) {
                memcpy(held + was, pick_text, more + 1);
                h->held_text = held;
            }
        }
    }
    fake_log(h, "paused kv=%d", h->kv_cache);
}

int rkllm_destroy(LLMHandle handle) {
    fake_handle *h = handle;
    if (!h) return -1;
    fake_log(h, "destroy");
    /* A runtime slow to let go of its model (the runner tests). */
    sleep_ms(env_int("FAKE_RKLLM_DESTROY_MS", 0));
    free(h->text);
    free(h->log_path);
    free(h->img_start);
    free(h->img_end);
    free(h->img_content);
    free(h->cached_prompt);
    free(h->held_text);
    for (int i = 0; i < h->n_loras; i++) free(h->loras[i]);
    vocab_free(h->vocab);
    free(h->base_logits);
    free(h->want);
    free(h->paused_text);
    pthread_mutex_destroy(&h->abort_lock);
    free(h);
    return 0;
}

typedef struct {
    fake_handle *h;
    const char *prompt;
    /* what this run "generates": the model file's text, after a line
     * describing the images of a multimodal input */
    char *text;
    size_t text_len;
    int image_tokens;
    /* prompt bytes the loaded prompt cache covers; where to save one, and
     * the prompt text it then holds (the handle's held_text) */
    size_t cached;
    const char *save_cache;
    const char *held;
    void *userdata;
    int32_t cap;
    long error_after;
    long crash_after;
    long hang_after;
    int keep_history;
    int rc;
    /* logits mode: rows of the first callback (the prefill's, or one per
     * fed token), tokens fed, and the input kind for the log */
    int logits;
    int first_rows;
    int fed;
    const char *input_kind;
    /* whether the run goes on after a pause, and the KV positions its
     * input takes */
    int continues;
    int positions;
} run_args;

/* Calls back; returns what the callback returned (1: pause). */
static int emit(fake_handle *h, void *userdata, const char *text, int32_t token, LLMCallState state,
                const RKLLMPerfStat *perf) {
    RKLLMResult result;
    memset(&result, 0, sizeof result);
    result.text = text;
    result.token_id = token;
    if (perf) result.perf = *perf;
    return h->callback(&result, userdata, state);
}

static int abort_due(fake_handle *h) {
    if (!atomic_load(&h->abort_requested)) return 0;
    pthread_mutex_lock(&h->abort_lock);
    struct timespec at = h->abort_time;
    pthread_mutex_unlock(&h->abort_lock);
    double since = now_ms() - (at.tv_sec * 1000.0 + at.tv_nsec / 1e6);
    return since >= h->abort_delay_ms;
}

static void *generate(void *arg) {
    run_args *a = arg;
    fake_handle *h = a->h;
    double start = now_ms();
    sleep_ms(h->prefill_ms);
    {
        /* Prefill time grows with the prompt bytes the cache does not cover. */
        long us = (long)(strlen(a->prompt) - a->cached) * h->prefill_us_per_byte;
        if (us > 0) {
            struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
    }
    double first = now_ms();
    /* The prefill's state exists from here on: a run asked to save it
     * does so even when it is aborted later. */
    if (a->save_cache) save_prompt_cache(h, a->save_cache, a->held);
    prefilled(h, a->continues, a->keep_history, a->positions);
    RKLLMPerfStat perf;
    memset(&perf, 0, sizeof perf);
    perf.prefill_tokens = (int)((strlen(a->prompt) - a->cached) / 4 + 1) + a->image_tokens;
    perf.memory_usage_mb = 700.0f;
    unsigned char pending[64];
    size_t pending_len = 0;
    size_t at = 0;
    int32_t tokens = 0;
    int stopped_by_abort = 0;
    a->rc = 0;
    while (at < a->text_len) {
        if (abort_due(h)) {
            stopped_by_abort = 1;
            break;
        }
        if (a->cap > 0 && tokens >= a->cap) break;
        if (a->crash_after >= 0 && tokens >= a->crash_after) {
            /* What a GGML_ASSERT in the real library does. */
            fprintf(stderr, "GGML_ASSERT failed (fake): crashing after %d tokens\n", tokens);
            fflush(stderr);
            abort();
        }
        if (a->hang_after >= 0 && tokens >= a->hang_after) {
            /* A run that never returns nor calls back, whatever is aborted. */
            fake_log(h, "hang tokens=%d", tokens);
            for (;;) sleep_ms(3600 * 1000);
        }
        if (a->error_after >= 0 && tokens >= a->error_after) {
            fake_log(h, "error-injected tokens=%d", tokens);
            emit(h, a->userdata, NULL, -1, RKLLM_RUN_ERROR, NULL);
            a->rc = -1;
            return NULL;
        }
        sleep_ms(h->token_ms);
        size_t take = (size_t)h->token_bytes;
        if (at + take > a->text_len) take = a->text_len - at;
        int32_t token_id = 1000 + tokens;
        tokens++;
        int answer;
        if (h->split_mode) {
            /* Raw pieces: a character may be split across NORMAL callbacks. */
            char piece[64];
            memcpy(piece, a->text + at, take);
            piece[take] = '\0';
            answer = emit(h, a->userdata, piece, token_id, RKLLM_RUN_NORMAL, NULL);
        } else {
            memcpy(pending + pending_len, a->text + at, take);
            pending_len += take;
            size_t whole = complete_prefix(pending, pending_len);
            if (whole < pending_len) {
                /* The decoded bytes end inside a character: WAITING, text
                 * alternately NULL and empty, bytes kept for the next piece. */
                answer = emit(h, a->userdata, (tokens % 2) ? NULL : "", token_id, RKLLM_RUN_WAITING, NULL);
            } else {
                char piece[64];
                memcpy(piece, pending, pending_len);
                piece[pending_len] = '\0';
                pending_len = 0;
                answer = emit(h, a->userdata, piece, token_id, RKLLM_RUN_NORMAL, NULL);
            }
        }
        at += take;
        if (answer != 1) h->kv_cache += 1; /* the token is decoded */
        if (answer == 1) {
            /* Paused: no FINISH; the next run goes on with the rest (the
             * bytes of a character still pending come first). */
            size_t rest = a->text_len - at;
            free(h->paused_text);
            h->paused_text = malloc(pending_len + rest + 1);
            memcpy(h->paused_text, pending, pending_len);
            memcpy(h->paused_text + pending_len, a->text + at, rest + 1);
            h->paused_text_len = pending_len + rest;
            h->paused = 2;
            fake_log(h, "pause tokens=%d", tokens);
            char pick[64];
            size_t n = take < sizeof pick ? take : sizeof pick - 1;
            memcpy(pick, a->text + at - take, n);
            pick[n] = '\0';
            paused_kv(h, pick);
            return NULL;
        }
    }
    perf.prefill_time_ms = (float)(first - start);
    perf.generate_time_ms = (float)(now_ms() - first);
    perf.generate_tokens = tokens;
    /* A single-turn run leaves nothing (a kept history: the prompt, the
     * cached prefix's positions and every token, counted as they came). */
    if (!a->keep_history) h->kv_cache = 0;
    if (a->keep_history && h->no_history) {
        runtime_print("W rkllm: this model does not support kv cache reuse, clearing all caches");
        fake_log(h, "no-history cleared kv=%d", h->kv_cache);
        h->kv_cache = 0;
    }
    if (stopped_by_abort) {
        fake_log(h, "aborted tokens=%d", tokens);
        if (h->after_abort == AFTER_ABORT_FINISH) {
            emit(h, a->userdata, NULL, -1, RKLLM_RUN_FINISH, &perf);
        } else if (h->after_abort == AFTER_ABORT_ERROR) {
            emit(h, a->userdata, NULL, -1, RKLLM_RUN_ERROR, NULL);
        }
        return NULL;
    }
    fake_log(h, "finish tokens=%d prefill=%d kv=%d", tokens, perf.prefill_tokens, h->kv_cache);
    emit(h, a->userdata, NULL, -1, RKLLM_RUN_FINISH, &perf);
    return NULL;
}

/* FNV-1a over bytes: the digest of the embeddings a run received. */
static uint32_t fnv1a(const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t hash = 2166136261u;
    for (size_t i = 0; i < n; i++) hash = (hash ^ p[i]) * 16777619u;
    return hash;
}

static size_t count_tags(const char *s, const char *tag) {
    size_t n = 0, len = strlen(tag);
    for (const char *at = strstr(s, tag); at; at = strstr(at + len, tag)) n++;
    return n;
}

/* Checks a multimodal input as the runtime does and describes its images
 * in one line, "[image 1: tokens=16 size=448x448 rgb=191,64,64
 * digest=1a2b3c4d] ... markers=<s>|<e>|<c>\n": the mean of each colour
 * channel over the image's embeddings (elements d % 3 hold channel d % 3,
 * as the fake encoder makes them) times 255, and a digest of its floats.
 * NULL, with the runtime's message, when the input is incomplete. The
 * embedding width is FAKE_RKLLM_EMBED_DIM (default 64), the model's hidden
 * size. */
static char *describe_images(fake_handle *h, const RKLLMMultiModalInput *m, int *image_tokens) {
#if defined(FAKE_ABI_V1_3)
    const float *embed = m->image.image_embed;
    size_t n_image = m->image.n_image, n_tokens = m->image.n_image_tokens;
    size_t width = m->image.image_width, height = m->image.image_height;
    const char *start = m->image.image_start, *end = m->image.image_end, *content = m->image.image_content;
#else
    const float *embed = m->image_embed;
    size_t n_image = m->n_image, n_tokens = m->n_image_tokens;
    size_t width = m->image_width, height = m->image_height;
    const char *start = h->img_start, *end = h->img_end, *content = h->img_content;
#endif
    if (!m->prompt || !embed || n_image == 0 || n_tokens == 0) {
        runtime_print("E rkllm: The n_image/n_image_token of multimodal_input is not set");
        return NULL;
    }
    if (!start || !end || !content || !content[0]) {
        runtime_print("E rkllm: image_start/image_end/image_content are not set");
        return NULL;
    }
    size_t tags = count_tags(m->prompt, "<image>");
    if (tags != n_image) {
        runtime_print("E rkllm: the prompt has %zu <image> tags for %zu images", tags, n_image);
        return NULL;
    }
    double started = now_ms();
    size_t dim = (size_t)env_int("FAKE_RKLLM_EMBED_DIM", 64);
    size_t per_image = n_tokens * dim;
    size_t cap = 160 * n_image + strlen(start) + strlen(end) + strlen(content) + 32;
    char *out = malloc(cap);
    size_t len = 0;
    for (size_t i = 0; i < n_image; i++) {
        const float *e = embed + i * per_image;
        double sum[3] = {0, 0, 0};
        for (size_t k = 0; k < per_image; k++) sum[(k % dim) % 3] += e[k];
        double count[3] = {0, 0, 0};
        for (size_t d = 0; d < dim; d++) count[d % 3] += (double)n_tokens;
        len += (size_t)snprintf(out + len, cap - len, "[image %zu: tokens=%zu size=%zux%zu rgb=%d,%d,%d digest=%08x] ",
                                i + 1, n_tokens, width, height, (int)(sum[0] / count[0] * 255.0 + 0.5),
                                (int)(sum[1] / count[1] * 255.0 + 0.5), (int)(sum[2] / count[2] * 255.0 + 0.5),
                                fnv1a(e, per_image * sizeof(float)));
    }
    snprintf(out + len, cap - len, "markers=%s|%s|%s\n", start, end, content);
    /* Its own time, which a benchmark subtracts. */
    fake_log(h, "multimodal n_image=%zu n_image_tokens=%zu width=%zu height=%zu us=%ld", n_image, n_tokens, width,
             height, (long)((now_ms() - started) * 1000.0));
    *image_tokens = (int)(n_image * n_tokens);
    return out;
}

/* Hidden-layer mode (embeddings): one row per 4 bytes of the prompt (a
 * "token"), FAKE_RKLLM_EMBED_DIM wide; element d of row t is byte
 * (4t + d) mod len of the prompt divided by 255, so a test can compute it.
 * Delivered in one NORMAL callback, then FINISH with the prompt's token
 * count. Prefill takes FAKE_RKLLM_PREFILL_MS. */
static int hidden_layer_run(fake_handle *h, const char *prompt, RKLLMInferParam *params, void *userdata) {
#if defined(FAKE_ABI_V1_3)
    if (!userdata) userdata = h->default_userdata;
#endif
    (void)params;
    size_t len = strlen(prompt);
    int width = env_int("FAKE_RKLLM_EMBED_DIM", 64);
    int rows = (int)((len + 3) / 4);
    if (rows == 0) rows = 1;
    float *states = malloc(sizeof(float) * (size_t)rows * (size_t)width);
    for (int t = 0; t < rows; t++)
        for (int d = 0; d < width; d++)
            states[(size_t)t * width + d] =
                len ? (float)(unsigned char)prompt[((size_t)4 * t + d) % len] / 255.0f : 0.0f;
    double start = now_ms();
    sleep_ms(h->prefill_ms);
    RKLLMResult result;
    memset(&result, 0, sizeof result);
    result.last_hidden_layer.hidden_states = states;
    result.last_hidden_layer.embd_size = width;
    result.last_hidden_layer.num_tokens = rows;
    h->callback(&result, userdata, RKLLM_RUN_NORMAL);
    free(states);
    RKLLMPerfStat perf;
    memset(&perf, 0, sizeof perf);
    perf.prefill_tokens = rows;
    perf.prefill_time_ms = (float)(now_ms() - start);
    perf.memory_usage_mb = 700.0f;
    fake_log(h, "hidden tokens=%d dim=%d prompt=%s", rows, width, prompt);
    emit(h, userdata, NULL, -1, RKLLM_RUN_FINISH, &perf);
    return 0;
}

/* The thinking of a reasoning model's reply ("@fake-think=N"). */
#define FAKE_THINKING "The user asked; 東京 is far, so 🤔 I weigh it step by step."

/* "@fake-think=1" in the prompt: the reply thinks first, in a block it
 * opens itself (Qwen3's shape); "@fake-think=2": the template opened the
 * block, so the reply only closes it (DeepSeek-R1's). With the input's
 * enable_thinking off the block is empty, as the runtime's templates make
 * it. The block goes before everything else the run "generates". Returns
 * the shape (0: no marker, or not 1 or 2). */
static int think_prefix(fake_handle *h, run_args *a, const char *prompt, int enable_thinking) {
    const char *marker = strstr(prompt, "@fake-think=");
    int shape = marker ? atoi(marker + strlen("@fake-think=")) : 0;
    if (shape != 1 && shape != 2) return 0;
    char head[256];
    int n = snprintf(head, sizeof head, "%s%s\n</think>\n\n", shape == 1 ? "<think>\n" : "",
                     enable_thinking ? FAKE_THINKING : "");
    char *text = malloc((size_t)n + a->text_len + 1);
    memcpy(text, head, (size_t)n);
    memcpy(text + n, a->text, a->text_len + 1);
    if (a->text != h->text) free(a->text);
    a->text = text;
    a->text_len = (size_t)n + a->text_len;
    return shape;
}

#include "fake_logits.h"

/* A run of n_batch sequences (RKLLM_ABI.md 3.2: static batching): the
 * inputs are an array, and each callback hands over an array of results,
 * one per sequence; every sequence says the model file's text, a token a
 * step, and an entry that has finished carries a negative token id. A step
 * of the batch takes FAKE_RKLLM_TOKEN_MS, as one sequence's does: the
 * double models a runtime for which a batch is as fast as one sequence.
 * Logged `batch-run n=N steps=S`. */
static int batch_run(fake_handle *h, RKLLMInput *inputs, RKLLMInferParam *params, void *userdata) {
    int n = h->n_batch;
    for (int i = 0; i < n; i++) {
        if (inputs[i].input_type != RKLLM_INPUT_PROMPT || !inputs[i].prompt_input) {
            fake_log(h, "batch-run-refused input=%d", i);
            return -1;
        }
    }
#if defined(FAKE_ABI_V1_3)
    int cap = (params && params->max_new_tokens > 0) ? params->max_new_tokens : h->max_new_tokens;
    void *ud = userdata ? userdata : h->default_userdata;
#else
    (void)params;
    int cap = h->max_new_tokens;
    void *ud = userdata;
#endif
    size_t longest = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(inputs[i].prompt_input);
        if (len > longest) longest = len;
    }
    double start = now_ms();
    sleep_ms(h->prefill_ms);
    {
        long us = (long)longest * h->prefill_us_per_byte;
        if (us > 0) {
            struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
    }
    double first = now_ms();
    RKLLMResult results[8];
    char pieces[8][32];
    int steps = 0;
    size_t at = 0;
    while (at < h->text_len && (cap <= 0 || steps < cap) && !abort_due(h)) {
        sleep_ms(h->token_ms);
        size_t take = (size_t)h->token_bytes;
        if (at + take > h->text_len) take = h->text_len - at;
        memset(results, 0, sizeof results);
        for (int i = 0; i < n; i++) {
            memcpy(pieces[i], h->text + at, take);
            pieces[i][take] = '\0';
            results[i].text = pieces[i];
            results[i].token_id = 1000 + steps;
        }
        at += take;
        steps++;
        h->callback(results, ud, RKLLM_RUN_NORMAL);
    }
    RKLLMPerfStat perf;
    memset(&perf, 0, sizeof perf);
    perf.prefill_tokens = (int)(longest / 4 + 1);
    perf.prefill_time_ms = (float)(first - start);
    perf.generate_time_ms = (float)(now_ms() - first);
    perf.generate_tokens = steps;
    perf.memory_usage_mb = 700.0f;
    memset(results, 0, sizeof results);
    for (int i = 0; i < n; i++) {
        results[i].token_id = -1;
        results[i].perf = perf;
    }
    fake_log(h, "batch-run n=%d steps=%d", n, steps);
    h->callback(results, ud, RKLLM_RUN_FINISH);
    return 0;
}

static int start_run(fake_handle *h, RKLLMInput *input, RKLLMInferParam *params, void *userdata, int async) {
    if (!h) return -1;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&h->running, &idle, 1)) {
        fprintf(stderr, "E rkllm: a run is already in progress on this handle\n");
        fake_log(h, "concurrent-run-refused");
        return -1;
    }
    if (h->n_batch > 1) {
        int rc = input ? batch_run(h, input, params, userdata) : -1;
        atomic_store(&h->running, 0);
        return rc;
    }
    int logits = params && params->mode == RKLLM_INFER_GET_LOGITS;
    if (logits && !h->vocab) {
        runtime_print("E rkllm: logits mode: this model file names no vocabulary (@fake-vocab=)");
        fake_log(h, "logits-refused why=no vocabulary");
        atomic_store(&h->running, 0);
        return -1;
    }
    const char *prompt = NULL;
    char *token_prompt = NULL;
    size_t fed = 0;
    if (input && input->input_type == RKLLM_INPUT_PROMPT) prompt = input->prompt_input;
    if (input && input->input_type == RKLLM_INPUT_MULTIMODAL) prompt = input->multimodal_input.prompt;
    if (input && input->input_type == RKLLM_INPUT_TOKEN && input->token_input.input_ids &&
        input->token_input.n_tokens > 0) {
        fed = input->token_input.n_tokens;
        prompt = token_prompt = tokens_text(h, input->token_input.input_ids, fed);
        char ids[256];
        size_t len = 0;
        ids[0] = '\0';
        for (size_t i = 0; i < fed && len + 16 < sizeof ids; i++)
            len += (size_t)snprintf(ids + len, sizeof ids - len, "%s%d", i ? "," : "", input->token_input.input_ids[i]);
        fake_log(h, "run-tokens n=%zu paused=%d ids=%s", fed, h->paused, ids);
    }
    if (!prompt || !input->role) {
        runtime_print("E rkllm: invalid input");
        fake_log(h, "invalid-input");
        free(token_prompt);
        atomic_store(&h->running, 0);
        return -1;
    }
    const char *lora = params && params->lora_params ? params->lora_params->lora_adapter_name : NULL;
    if (lora && !lora_loaded(h, lora)) {
        runtime_print("E rkllm: lora adapter %s is not loaded", lora);
        fake_log(h, "lora-unknown name=%s", lora);
        free(token_prompt);
        atomic_store(&h->running, 0);
        return -1;
    }
    if (params && params->mode == RKLLM_INFER_GET_LAST_HIDDEN_LAYER) {
        int rc = hidden_layer_run(h, prompt, params, userdata);
        free(token_prompt);
        atomic_store(&h->running, 0);
        return rc;
    }
    char *images = NULL;
    int image_tokens = 0;
    if (input->input_type == RKLLM_INPUT_MULTIMODAL) {
        images = describe_images(h, &input->multimodal_input, &image_tokens);
        if (!images) {
            fake_log(h, "invalid-multimodal-input");
            atomic_store(&h->running, 0);
            return -1;
        }
    }
    atomic_store(&h->abort_requested, 0);
    /* A paused generation goes on, whatever the input (RKLLM_ABI.md 3.3):
     * token input appends its tokens; a prompt is not read at all. A
     * prompt cache is matched against the start of a generation only. */
    int continues = h->paused != 0;
    char *wrapped = NULL;
    if (h->break_template_stays && !fed && !continues) {
        /* "template_stays": the empty template did not turn the built-in
         * one off, so the prompt is wrapped in it once more. */
        size_t n = strlen(FAKE_TEMPLATE_PREFIX) + strlen(prompt) + strlen(FAKE_TEMPLATE_SUFFIX);
        wrapped = malloc(n + 1);
        snprintf(wrapped, n + 1, "%s%s%s", FAKE_TEMPLATE_PREFIX, prompt, FAKE_TEMPLATE_SUFFIX);
        prompt = wrapped;
    }
    run_args *a = calloc(1, sizeof *a);
    a->h = h;
    a->prompt = prompt;
    a->image_tokens = image_tokens;
    a->continues = continues;
    a->cached = continues ? 0 : cached_bytes(h, prompt);
    /* Token input that the runtime takes but does not prefill
     * ("token_input_ignored") adds nothing to the KV. */
    int fed_kept = fed && !h->break_token_input_ignored;
    a->positions = continues ? (fed_kept ? (int)fed : 0)
                             : (fed ? (int)fed : (int)(strlen(prompt) / 4 + 1) + image_tokens);
    a->save_cache = params && params->prompt_cache_params && params->prompt_cache_params->save_prompt_cache
                        ? params->prompt_cache_params->prompt_cache_path
                        : NULL;
    if (a->cached) fake_log(h, "run-cached bytes=%zu", a->cached);
    if (continues && h->held_text && fed_kept) {
        size_t was = strlen(h->held_text), more = strlen(prompt);
        char *held = realloc(h->held_text, was + more + 1);
        if (held) {
            memcpy(held + was, prompt, more + 1);
            h->held_text = held;
        }
    } else if (!continues) {
        free(h->held_text);
        h->held_text = strdup(prompt);
        h->held_first = strlen(prompt);
    }
    a->held = h->held_text ? h->held_text : prompt;
    if (continues && !fed) fake_log(h, "run-continues-paused");
    if (continues && h->paused == 2 && !logits) {
        a->text = h->paused_text;
        a->text_len = h->paused_text_len;
        h->paused_text = NULL;
        h->paused = 0;
        /* Fed the end of a thinking block while thinking: the model
         * answers, so the rest of its thinking is not said. */
        char *close = token_prompt && strstr(token_prompt, "</think>") ? strstr(a->text, "</think>") : NULL;
        if (close) {
            size_t skip = (size_t)(close - a->text) + strlen("</think>");
            while (skip < a->text_len && (a->text[skip] == '\n' || a->text[skip] == ' ')) skip++;
            memmove(a->text, a->text + skip, a->text_len - skip + 1);
            a->text_len -= skip;
            fake_log(h, "run-thinking-closed skipped=%zu", skip);
        }
    } else if (images) {
        size_t n = strlen(images);
        a->text = malloc(n + h->text_len + 1);
        memcpy(a->text, images, n);
        memcpy(a->text + n, h->text, h->text_len + 1);
        a->text_len = n + h->text_len;
        free(images);
        images = NULL;
    } else {
        a->text = h->text;
        a->text_len = h->text_len;
    }
    free(images);
    /* A text run ends any pause (it goes on with a text-mode one). */
    if (!logits) h->paused = 0;
    if (lora && !continues) {
        /* A run with an adapter answers differently: its name first. */
        size_t n = strlen(lora) + 8;
        char *text = malloc(n + a->text_len + 1);
        int head = snprintf(text, n + 1, "[lora %s] ", lora);
        memcpy(text + head, a->text, a->text_len + 1);
        if (a->text != h->text) free(a->text);
        a->text = text;
        a->text_len = (size_t)head + a->text_len;
        fake_log(h, "run-lora name=%s", lora);
    }
    int think_shape = continues ? 0 : think_prefix(h, a, prompt, input->enable_thinking);
    if (logits) {
        a->logits = 1;
        a->fed = (int)fed;
        if (continues && h->paused == 1) {
            /* The tokens fed go into the KV after what it holds: more of
             * its answer once it has begun one, more of its input before. */
            if (h->decoded > 0 || !h->prefilled_only) h->step += (int)fed;
            a->first_rows = fed ? (int)fed : 1;
            a->input_kind = fed ? "tokens" : "prompt-ignored";
        } else {
            start_logits_generation(h, a, prompt);
            a->first_rows = fed ? (int)fed : (int)(strlen(prompt) / 4 + 1) + image_tokens;
            a->input_kind = fed ? "tokens" : "prompt";
        }
        h->paused = 0;
    }
#if defined(FAKE_ABI_V1_3)
    a->userdata = userdata ? userdata : h->default_userdata;
    a->cap = (params && params->max_new_tokens > 0) ? params->max_new_tokens : h->max_new_tokens;
    const RKLLMSamplingParam *s = params ? params->sampling_params : NULL;
    if (!fed)
        fake_log(h,
                 "run role=%s thinking=%d max_new_tokens=%d temperature=%.2f top_p=%.2f top_k=%d mirostat=%d "
                 "mirostat_tau=%.2f mirostat_eta=%.2f keep_history=%d prompt=%s",
                 input->role, input->enable_thinking, a->cap, s ? s->temperature : -1.0, s ? s->top_p : -1.0,
                 s ? s->top_k : -1, s ? s->mirostat : -1, s ? s->mirostat_tau : -1.0, s ? s->mirostat_eta : -1.0,
                 params ? params->keep_history : 0, prompt);
#else
    a->userdata = userdata;
    a->cap = h->max_new_tokens;
    if (!fed)
        fake_log(h, "run role=%s thinking=%d max_new_tokens=%d keep_history=%d prompt=%s", input->role,
                 input->enable_thinking, a->cap, params ? params->keep_history : 0, prompt);
#endif
    if (think_shape) fake_log(h, "think=%d enable_thinking=%d", think_shape, input->enable_thinking ? 1 : 0);
    if (logits)
        fake_log(h, "logits-run input=%s fed=%d rows=%d step=%d", a->input_kind, a->fed, a->first_rows, h->step);
    a->keep_history = params ? params->keep_history : 0;
    /* Error injection for one request: "@fake-error=N" in the prompt fails
     * the run with an ERROR callback after N tokens. */
    const char *inject = strstr(prompt, "@fake-error=");
    a->error_after = inject ? atol(inject + strlen("@fake-error=")) : -1;
    /* "@fake-crash=N" aborts the process after N tokens; "@fake-hang=N"
     * stops calling back after N tokens and never returns. */
    const char *crash = strstr(prompt, "@fake-crash=");
    a->crash_after = crash ? atol(crash + strlen("@fake-crash=")) : -1;
    const char *hang = strstr(prompt, "@fake-hang=");
    a->hang_after = hang ? atol(hang + strlen("@fake-hang=")) : -1;
    runtime_print("I rkllm: fake run started");
    void *(*body)(void *) = logits ? logits_generate : generate;
    if (async) {
        /* rkllm_run_async: the caller keeps the input alive until the end. */
        pthread_t t;
        pthread_create(&t, NULL, body, a);
        pthread_detach(t);
        return 0;
    }
    if (h->callback_thread) {
        pthread_t t;
        pthread_create(&t, NULL, body, a);
        pthread_join(t, NULL);
    } else {
        body(a);
    }
    int rc = a->rc;
    if (a->text != h->text) free(a->text);
    free(a);
    free(token_prompt);
    free(wrapped);
    atomic_store(&h->running, 0);
    return rc;
}

int rkllm_run(LLMHandle handle, RKLLMInput *rkllm_input, RKLLMInferParam *rkllm_infer_params, void *userdata) {
    return start_run(handle, rkllm_input, rkllm_infer_params, userdata, 0);
}

int rkllm_run_async(LLMHandle handle, RKLLMInput *rkllm_input, RKLLMInferParam *rkllm_infer_params,
                    void *userdata) {
    return start_run(handle, rkllm_input, rkllm_infer_params, userdata, 1);
}

#ifndef FAKE_OMIT_ABORT
int rkllm_abort(LLMHandle handle) {
    fake_handle *h = handle;
    if (!h) return -1;
    /* A repeated abort keeps the time of the first one. */
    pthread_mutex_lock(&h->abort_lock);
    if (!atomic_load(&h->abort_requested)) clock_gettime(CLOCK_MONOTONIC, &h->abort_time);
    atomic_store(&h->abort_requested, 1);
    pthread_mutex_unlock(&h->abort_lock);
    fake_log(h, "abort running=%d", atomic_load(&h->running));
    return 0;
}
#endif

int rkllm_is_running(LLMHandle handle) {
    fake_handle *h = handle;
    return h ? atomic_load(&h->running) : -1;
}

int rkllm_clear_kv_cache(LLMHandle handle, int keep_system_prompt, int *start_pos, int *end_pos) {
    fake_handle *h = handle;
    (void)keep_system_prompt;
    (void)start_pos;
    (void)end_pos;
    if (!h) return -1;
    fake_log(h, "clear-kv kv=%d paused=%d", h->kv_cache, h->paused);
    h->kv_cache = 0;
    /* What a pause left is gone with the KV cache (RKLLM_ABI.md 3.3). */
    h->paused = 0;
    free(h->paused_text);
    h->paused_text = NULL;
    return 0;
}

int rkllm_get_kv_cache_size(LLMHandle handle, int *cache_sizes) {
    fake_handle *h = handle;
    if (!h || !cache_sizes) return -1;
    cache_sizes[0] = h->kv_cache;
    return 0;
}

int rkllm_set_chat_template(LLMHandle handle, const char *system_prompt, const char *prompt_prefix,
                            const char *prompt_postfix) {
    if (!handle || !system_prompt || !prompt_prefix || !prompt_postfix) return -1;
    fake_log(handle, "set-chat-template system=[%s] prefix=[%s] postfix=[%s]", system_prompt, prompt_prefix,
             prompt_postfix);
    return 0;
}

int rkllm_set_function_tools(LLMHandle handle, const char *system_prompt, const char *tools,
                             const char *tool_response_str) {
    if (!handle || !system_prompt || !tools || !tool_response_str) return -1;
    fake_log(handle, "set-function-tools tag=%s tools=%s", tool_response_str, tools);
    return 0;
}

int rkllm_set_cross_attn_params(LLMHandle handle, RKLLMCrossAttnParam *cross_attn_params) {
    return (handle && cross_attn_params) ? 0 : -1;
}
