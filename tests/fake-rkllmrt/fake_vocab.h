/*
 * fake_vocab.h: the vocabulary of the runtime test double's logits mode,
 * read from a Hugging Face tokenizer.json (included by fake_rkllmrt.c only).
 *
 * A real .rkllm file carries its model's vocabulary; the double's "model
 * file" names a tokenizer.json instead ("@fake-vocab=PATH", see README.md),
 * so the double's token ids are the ids the server's tokenizer gives. What
 * is read: `model.vocab` (a byte-level BPE vocabulary, each token's text in
 * GPT-2's byte-to-character alphabet) and `added_tokens` (special tokens,
 * their text as it is). A token whose text is not in that alphabet keeps
 * its UTF-8 text. Ids with no token are empty and never "wanted".
 */
#ifndef FAKE_VOCAB_H
#define FAKE_VOCAB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *bytes;
    int len;
    int special;
} fake_token;

typedef struct {
    fake_token *tokens;
    int n;
    /* the end-of-text token, chosen as the server chooses it */
    int eos;
} fake_vocab;

/* GPT-2's byte-level alphabet, backwards: the byte a character stands for
 * (-1: none). Bytes 33-126, 161-172 and 174-255 stand for themselves; the
 * others, in order, for U+0100 upwards. */
static int vocab_byte_of(uint32_t cp) {
    int kept = (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255);
    if (kept) return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int is_kept = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (is_kept) continue;
        if (256 + n == (int)cp) return b;
        n++;
    }
    return -1;
}

static const char *vocab_skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static void vocab_put_utf8(unsigned char *out, int *len, uint32_t cp) {
    if (cp < 0x80) {
        out[(*len)++] = (unsigned char)cp;
    } else if (cp < 0x800) {
        out[(*len)++] = (unsigned char)(0xC0 | (cp >> 6));
        out[(*len)++] = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*len)++] = (unsigned char)(0xE0 | (cp >> 12));
        out[(*len)++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*len)++] = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        out[(*len)++] = (unsigned char)(0xF0 | (cp >> 18));
        out[(*len)++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*len)++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*len)++] = (unsigned char)(0x80 | (cp & 0x3F));
    }
}

static int vocab_hex4(const char *p, const char *end, uint32_t *v) {
    if (end - p < 4) return 0;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        *v = *v * 16 + (uint32_t)d;
    }
    return 1;
}

/* A JSON string at p (at its opening quote) into UTF-8 (malloc'd, its
 * length in *len); returns the position after it, or NULL. */
static const char *vocab_string(const char *p, const char *end, unsigned char **out, int *len) {
    if (p >= end || *p != '"') return NULL;
    p++;
    const char *q = p;
    while (q < end && *q != '"') q += (*q == '\\') ? 2 : 1;
    if (q >= end) return NULL;
    unsigned char *buf = malloc((size_t)(q - p) * 2 + 4);
    int n = 0;
    while (p < q) {
        if (*p != '\\') {
            buf[n++] = (unsigned char)*p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'n': buf[n++] = '\n'; break;
        case 't': buf[n++] = '\t'; break;
        case 'r': buf[n++] = '\r'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'u': {
            uint32_t cp;
            if (!vocab_hex4(p, q, &cp)) {
                free(buf);
                return NULL;
            }
            p += 4;
            uint32_t low;
            if (cp >= 0xD800 && cp < 0xDC00 && p + 1 < q && p[0] == '\\' && p[1] == 'u' &&
                vocab_hex4(p + 2, q, &low) && low >= 0xDC00 && low < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                p += 6;
            }
            vocab_put_utf8(buf, &n, cp);
            break;
        }
        default: buf[n++] = (unsigned char)c; break;
        }
    }
    *out = buf;
    *len = n;
    return q + 1;
}

/* A token's text in the byte-level alphabet, as the bytes it stands for
 * (in place); left as it is when a character is not in the alphabet. */
static void vocab_decode_bytes(unsigned char *s, int *len) {
    unsigned char out[1024];
    int n = 0, i = 0;
    while (i < *len) {
        unsigned char c = s[i];
        int w = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
        if (i + w > *len || n >= (int)sizeof out) return;
        uint32_t cp = w == 1 ? c : w == 2 ? (uint32_t)(c & 0x1F) : w == 3 ? (uint32_t)(c & 0x0F) : (uint32_t)(c & 0x07);
        for (int k = 1; k < w; k++) cp = (cp << 6) | (s[i + k] & 0x3F);
        int b = vocab_byte_of(cp);
        if (b < 0) return;
        out[n++] = (unsigned char)b;
        i += w;
    }
    memcpy(s, out, (size_t)n);
    *len = n;
}

static void vocab_set(fake_vocab *v, long id, unsigned char *bytes, int len, int special) {
    if (id < 0 || id > 10000000) {
        free(bytes);
        return;
    }
    if (id >= v->n) {
        v->tokens = realloc(v->tokens, sizeof(fake_token) * (size_t)(id + 1));
        memset(v->tokens + v->n, 0, sizeof(fake_token) * (size_t)(id + 1 - v->n));
        v->n = (int)id + 1;
    }
    free(v->tokens[id].bytes);
    v->tokens[id].bytes = bytes;
    v->tokens[id].len = len;
    v->tokens[id].special = special;
}

/* "model": {"vocab": {"text": id, ...}} */
static int vocab_read_model(fake_vocab *v, const char *json, const char *end) {
    const char *at = strstr(json, "\"vocab\"");
    if (!at) return 0;
    const char *p = vocab_skip_ws(at + 7, end);
    if (p >= end || *p != ':') return 0;
    p = vocab_skip_ws(p + 1, end);
    if (p >= end || *p != '{') return 0;
    p = vocab_skip_ws(p + 1, end);
    while (p < end && *p != '}') {
        unsigned char *text;
        int len;
        p = vocab_string(p, end, &text, &len);
        if (!p) return 0;
        p = vocab_skip_ws(p, end);
        if (p >= end || *p != ':') {
            free(text);
            return 0;
        }
        char *num_end;
        long id = strtol(p + 1, &num_end, 10);
        vocab_decode_bytes(text, &len);
        vocab_set(v, id, text, len, 0);
        p = vocab_skip_ws(num_end, end);
        if (p < end && *p == ',') p = vocab_skip_ws(p + 1, end);
    }
    return 1;
}

/* "added_tokens": [{"id": N, "content": "...", "special": true, ...}] */
static void vocab_read_added(fake_vocab *v, const char *json, const char *end) {
    const char *at = strstr(json, "\"added_tokens\"");
    if (!at) return;
    const char *p = vocab_skip_ws(at + 14, end);
    if (p >= end || *p != ':') return;
    p = vocab_skip_ws(p + 1, end);
    if (p >= end || *p != '[') return;
    p = vocab_skip_ws(p + 1, end);
    while (p < end && *p == '{') {
        long id = -1;
        int special = 0;
        unsigned char *content = NULL;
        int content_len = 0;
        p = vocab_skip_ws(p + 1, end);
        while (p < end && *p != '}') {
            unsigned char *key;
            int key_len;
            p = vocab_string(p, end, &key, &key_len);
            if (!p) return;
            p = vocab_skip_ws(p, end);
            if (p < end && *p == ':') p = vocab_skip_ws(p + 1, end);
            if (p < end && *p == '"') {
                unsigned char *value;
                int value_len;
                p = vocab_string(p, end, &value, &value_len);
                if (!p) {
                    free(key);
                    return;
                }
                if (key_len == 7 && memcmp(key, "content", 7) == 0) {
                    free(content);
                    content = value;
                    content_len = value_len;
                } else {
                    free(value);
                }
            } else {
                const char *value = p;
                while (p < end && *p != ',' && *p != '}') p++;
                if (key_len == 2 && memcmp(key, "id", 2) == 0) id = strtol(value, NULL, 10);
                if (key_len == 7 && memcmp(key, "special", 7) == 0) special = strncmp(value, "true", 4) == 0;
            }
            free(key);
            p = vocab_skip_ws(p, end);
            if (p < end && *p == ',') p = vocab_skip_ws(p + 1, end);
        }
        if (content && id >= 0) {
            vocab_set(v, id, content, content_len, special);
        } else {
            free(content);
        }
        p = vocab_skip_ws(p + 1, end);
        if (p < end && *p == ',') p = vocab_skip_ws(p + 1, end);
    }
}

static void vocab_free(fake_vocab *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) free(v->tokens[i].bytes);
    free(v->tokens);
    free(v);
}

/* The vocabulary of the tokenizer.json at `path`, or NULL (with why). */
static fake_vocab *vocab_load(const char *path, const char **why) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *why = "cannot open the tokenizer";
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *json = malloc((size_t)size + 1);
    size_t n = fread(json, 1, (size_t)size, f);
    json[n] = '\0';
    fclose(f);
    fake_vocab *v = calloc(1, sizeof *v);
    int ok = vocab_read_model(v, json, json + n);
    vocab_read_added(v, json, json + n);
    free(json);
    if (!ok || v->n == 0) {
        vocab_free(v);
        *why = "no model.vocab in the tokenizer";
        return NULL;
    }
    /* The end-of-text token: by name, in the server's order of preference,
     * else the last special token. */
    static const char *const eos_names[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "<｜end▁of▁sentence｜>",
                                            "<|endoftext|>", "</s>", "<eos>"};
    v->eos = -1;
    for (size_t k = 0; k < sizeof eos_names / sizeof *eos_names && v->eos < 0; k++) {
        int len = (int)strlen(eos_names[k]);
        for (int i = 0; i < v->n; i++) {
            const fake_token *t = &v->tokens[i];
            if (t->special && t->len == len && memcmp(t->bytes, eos_names[k], (size_t)len) == 0) {
                v->eos = i;
                break;
            }
        }
    }
    for (int i = v->n - 1; i >= 0 && v->eos < 0; i--)
        if (v->tokens[i].special) v->eos = i;
    if (v->eos < 0) {
        vocab_free(v);
        *why = "no special end-of-text token in the tokenizer";
        return NULL;
    }
    return v;
}

/* `text` cut into the vocabulary's tokens, longest match first (special
 * tokens never match); malloc'd, the count in *count. */
static int32_t *vocab_tokenize(const fake_vocab *v, const unsigned char *text, size_t len, int *count) {
    int32_t *ids = malloc(sizeof(int32_t) * (len + 1));
    int n = 0;
    size_t at = 0;
    while (at < len) {
        int best = -1, best_len = 0;
        for (int i = 0; i < v->n; i++) {
            const fake_token *t = &v->tokens[i];
            if (t->special || t->len <= best_len || (size_t)t->len > len - at) continue;
            if (memcmp(t->bytes, text + at, (size_t)t->len) == 0) {
                best = i;
                best_len = t->len;
            }
        }
        if (best < 0) {
            /* A byte no token has: skipped (a byte-level vocabulary has all). */
            at++;
            continue;
        }
        ids[n++] = best;
        at += (size_t)best_len;
    }
    *count = n;
    return ids;
}

#endif
