/*
 * fake_rknnrt.c: a TEST DOUBLE of Rockchip's librknnrt.so, the RKNN
 * runtime that runs a vision encoder.
 *
 * It exports the functions of rknn-sys's header with their exact
 * signatures. It runs no network: its "model file" is a line of text
 * describing the encoder,
 *
 *     fake-rknn width=448 height=448 channels=3 fmt=NHWC type=UINT8 tokens=16 dim=64 outputs=1
 *
 * and it reports those tensor attributes, checks that the input it is
 * given has exactly the size, type and layout the attributes ask for, and
 * returns embeddings computed from the pixels: token t, element d is the
 * mean of channel d % 3 over one cell of a grid laid on the image (row
 * band t of `tokens` bands, column band (d / 3) % (dim / 3)), divided by
 * 255. A test can therefore tell from the embeddings which picture
 * arrived, where its padding is and whether its rows or channels were
 * mixed up. See README.md beside this file.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rknn_api.h"

typedef struct {
    uint32_t width, height, channels, tokens, dim, outputs;
    rknn_tensor_format fmt;
    rknn_tensor_type type;
    uint32_t core_mask;
    unsigned char *pixels; /* NHWC, set by rknn_inputs_set */
    float *embed;          /* tokens x dim, made by rknn_run */
    int ran;
} fake_ctx;

static void fake_log(const char *fmt, ...) {
    const char *path = getenv("FAKE_RKNN_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static fake_ctx *ctx_of(rknn_context context) { return (fake_ctx *)(uintptr_t)context; }

static uint32_t field(const char *text, const char *key, uint32_t fallback) {
    const char *at = strstr(text, key);
    return at ? (uint32_t)strtoul(at + strlen(key), NULL, 10) : fallback;
}

int rknn_init(rknn_context *context, void *model, uint32_t size, uint32_t flag, rknn_init_extend *extend) {
    (void)flag;
    (void)extend;
    if (!context || !model) return RKNN_ERR_PARAM_INVALID;
    char text[512] = {0};
    if (size == 0) {
        FILE *f = fopen((const char *)model, "rb");
        if (!f) {
            fprintf(stderr, "E RKNN: failed to open rknn model %s\n", (const char *)model);
            return RKNN_ERR_MODEL_INVALID;
        }
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    } else {
        memcpy(text, model, size < sizeof text - 1 ? size : sizeof text - 1);
    }
    if (strncmp(text, "fake-rknn", 9) != 0) {
        fprintf(stderr, "E RKNN: invalid rknn model (not a fake-rknn description)\n");
        return RKNN_ERR_MODEL_INVALID;
    }
    fake_ctx *c = calloc(1, sizeof *c);
    c->width = field(text, "width=", 448);
    c->height = field(text, "height=", 448);
    c->channels = field(text, "channels=", 3);
    c->tokens = field(text, "tokens=", 16);
    c->dim = field(text, "dim=", 64);
    c->outputs = field(text, "outputs=", 1);
    c->fmt = strstr(text, "fmt=NCHW") ? RKNN_TENSOR_NCHW : RKNN_TENSOR_NHWC;
    c->type = strstr(text, "type=FLOAT16") ? RKNN_TENSOR_FLOAT16 : RKNN_TENSOR_UINT8;
    if (c->channels != 3 || c->tokens == 0 || c->dim < 3 || c->outputs == 0 || c->height < c->tokens) {
        free(c);
        fprintf(stderr, "E RKNN: unsupported fake model description\n");
        return RKNN_ERR_MODEL_INVALID;
    }
    *context = (rknn_context)(uintptr_t)c;
    fake_log("init %ux%ux%u tokens=%u dim=%u outputs=%u", c->width, c->height, c->channels, c->tokens, c->dim,
             c->outputs);
    return RKNN_SUCC;
}

int rknn_destroy(rknn_context context) {
    fake_ctx *c = ctx_of(context);
    if (!c) return RKNN_ERR_CTX_INVALID;
    free(c->pixels);
    free(c->embed);
    free(c);
    fake_log("destroy");
    return RKNN_SUCC;
}

int rknn_query(rknn_context context, rknn_query_cmd cmd, void *info, uint32_t size) {
    fake_ctx *c = ctx_of(context);
    if (!c || !info) return RKNN_ERR_PARAM_INVALID;
    switch (cmd) {
    case RKNN_QUERY_IN_OUT_NUM: {
        if (size != sizeof(rknn_input_output_num)) return RKNN_ERR_PARAM_INVALID;
        rknn_input_output_num *n = info;
        n->n_input = 1;
        n->n_output = c->outputs;
        return RKNN_SUCC;
    }
    case RKNN_QUERY_INPUT_ATTR: {
        if (size != sizeof(rknn_tensor_attr)) return RKNN_ERR_PARAM_INVALID;
        rknn_tensor_attr *a = info;
        if (a->index != 0) return RKNN_ERR_PARAM_INVALID;
        memset(a, 0, sizeof *a);
        a->n_dims = 4;
        a->dims[0] = 1;
        if (c->fmt == RKNN_TENSOR_NCHW) {
            a->dims[1] = c->channels, a->dims[2] = c->height, a->dims[3] = c->width;
        } else {
            a->dims[1] = c->height, a->dims[2] = c->width, a->dims[3] = c->channels;
        }
        snprintf(a->name, sizeof a->name, "pixel_values");
        a->n_elems = c->width * c->height * c->channels;
        a->type = c->type;
        a->size = a->n_elems * (c->type == RKNN_TENSOR_FLOAT16 ? 2 : 1);
        a->fmt = c->fmt;
        a->qnt_type = RKNN_TENSOR_QNT_NONE;
        a->scale = 1.0f;
        return RKNN_SUCC;
    }
    case RKNN_QUERY_OUTPUT_ATTR: {
        if (size != sizeof(rknn_tensor_attr)) return RKNN_ERR_PARAM_INVALID;
        rknn_tensor_attr *a = info;
        uint32_t index = a->index;
        if (index >= c->outputs) return RKNN_ERR_PARAM_INVALID;
        memset(a, 0, sizeof *a);
        a->index = index;
        a->n_dims = 3;
        a->dims[0] = 1;
        a->dims[1] = c->tokens;
        a->dims[2] = c->dim;
        snprintf(a->name, sizeof a->name, "image_embeds_%u", index);
        a->n_elems = c->tokens * c->dim;
        a->size = a->n_elems * 2;
        a->fmt = RKNN_TENSOR_UNDEFINED;
        a->type = RKNN_TENSOR_FLOAT16;
        a->scale = 1.0f;
        return RKNN_SUCC;
    }
    case RKNN_QUERY_SDK_VERSION: {
        if (size != sizeof(rknn_sdk_version)) return RKNN_ERR_PARAM_INVALID;
        rknn_sdk_version *v = info;
        snprintf(v->api_version, sizeof v->api_version, "2.3.2 (fake runtime for tests)");
        snprintf(v->drv_version, sizeof v->drv_version, "0.9.8");
        return RKNN_SUCC;
    }
    }
    return RKNN_ERR_PARAM_INVALID;
}

int rknn_set_core_mask(rknn_context context, rknn_core_mask core_mask) {
    fake_ctx *c = ctx_of(context);
    if (!c) return RKNN_ERR_CTX_INVALID;
    switch ((uint32_t)core_mask) {
    case 0: case 1: case 2: case 4: case 3: case 7: case 0xffff:
        c->core_mask = (uint32_t)core_mask;
        fake_log("core_mask %u", c->core_mask);
        return RKNN_SUCC;
    }
    return RKNN_ERR_PARAM_INVALID;
}

/* The runtime converts a uint8 input of either layout to the model's own;
 * the size must be exactly the picture's. */
int rknn_inputs_set(rknn_context context, uint32_t n_inputs, rknn_input inputs[]) {
    fake_ctx *c = ctx_of(context);
    if (!c) return RKNN_ERR_CTX_INVALID;
    if (n_inputs != 1 || !inputs || inputs[0].index != 0 || !inputs[0].buf) {
        fprintf(stderr, "E RKNN: expected one input, index 0\n");
        return RKNN_ERR_PARAM_INVALID;
    }
    rknn_input *in = &inputs[0];
    uint32_t want = c->width * c->height * c->channels;
    if (in->pass_through || in->type != RKNN_TENSOR_UINT8 ||
        (in->fmt != RKNN_TENSOR_NHWC && in->fmt != RKNN_TENSOR_NCHW) || in->size != want) {
        fprintf(stderr, "E RKNN: input size/type/fmt mismatch: size=%u (want %u) type=%d fmt=%d pass_through=%d\n",
                in->size, want, in->type, in->fmt, in->pass_through);
        fake_log("inputs_set refused size=%u type=%d fmt=%d", in->size, in->type, in->fmt);
        return RKNN_ERR_PARAM_INVALID;
    }
    free(c->pixels);
    c->pixels = malloc(want);
    const unsigned char *src = in->buf;
    if (in->fmt == RKNN_TENSOR_NHWC) {
        memcpy(c->pixels, src, want);
    } else {
        uint32_t plane = c->width * c->height;
        for (uint32_t i = 0; i < plane; i++)
            for (uint32_t ch = 0; ch < 3; ch++) c->pixels[i * 3 + ch] = src[ch * plane + i];
    }
    c->ran = 0;
    fake_log("inputs_set size=%u fmt=%s", in->size, in->fmt == RKNN_TENSOR_NHWC ? "NHWC" : "NCHW");
    return RKNN_SUCC;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000.0 + t.tv_nsec / 1e6;
}

int rknn_run(rknn_context context, rknn_run_extend *extend) {
    (void)extend;
    fake_ctx *c = ctx_of(context);
    if (!c) return RKNN_ERR_CTX_INVALID;
    if (!c->pixels) {
        fprintf(stderr, "E RKNN: rknn_run without input\n");
        return RKNN_ERR_INPUT_INVALID;
    }
    double started = now_ms();
    free(c->embed);
    c->embed = calloc((size_t)c->tokens * c->dim, sizeof(float));
    uint32_t cols = c->dim / 3;
    for (uint32_t t = 0; t < c->tokens; t++) {
        uint32_t y0 = t * c->height / c->tokens, y1 = (t + 1) * c->height / c->tokens;
        for (uint32_t d = 0; d < c->dim; d++) {
            uint32_t ch = d % 3, j = (d / 3) % cols;
            uint32_t x0 = j * c->width / cols, x1 = (j + 1) * c->width / cols;
            double sum = 0;
            for (uint32_t y = y0; y < y1; y++)
                for (uint32_t x = x0; x < x1; x++) sum += c->pixels[(y * c->width + x) * 3 + ch];
            double n = (double)(y1 - y0) * (x1 - x0);
            c->embed[t * c->dim + d] = n > 0 ? (float)(sum / n / 255.0) : 0.0f;
        }
    }
    const char *delay = getenv("FAKE_RKNN_RUN_MS");
    if (delay) {
        double until = now_ms() + atof(delay);
        while (now_ms() < until) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    c->ran = 1;
    /* The fake's own time, which a benchmark subtracts. */
    fake_log("run us=%ld", (long)((now_ms() - started) * 1000.0));
    return RKNN_SUCC;
}

/* Output j is the embeddings plus j (a stand-in for deepstack outputs). */
int rknn_outputs_get(rknn_context context, uint32_t n_outputs, rknn_output outputs[], rknn_output_extend *extend) {
    (void)extend;
    fake_ctx *c = ctx_of(context);
    if (!c) return RKNN_ERR_CTX_INVALID;
    if (!c->ran || !outputs || n_outputs != c->outputs) return RKNN_ERR_OUTPUT_INVALID;
    size_t n = (size_t)c->tokens * c->dim;
    for (uint32_t j = 0; j < n_outputs; j++) {
        if (!outputs[j].want_float || outputs[j].is_prealloc) {
            fprintf(stderr, "E RKNN: the fake only gives float outputs it allocates\n");
            return RKNN_ERR_PARAM_INVALID;
        }
        float *buf = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) buf[i] = c->embed[i] + (float)j;
        outputs[j].index = j;
        outputs[j].buf = buf;
        outputs[j].size = (uint32_t)(n * sizeof(float));
    }
    return RKNN_SUCC;
}

int rknn_outputs_release(rknn_context context, uint32_t n_outputs, rknn_output outputs[]) {
    if (!ctx_of(context) || !outputs) return RKNN_ERR_PARAM_INVALID;
    for (uint32_t j = 0; j < n_outputs; j++) {
        if (!outputs[j].is_prealloc) free(outputs[j].buf);
        outputs[j].buf = NULL;
    }
    return RKNN_SUCC;
}
