/*
 * fake_logits.h: logits mode of the runtime test double (part of
 * fake_rkllmrt.c, which includes it once, after the run machinery it uses:
 * fake_handle, run_args, emit, abort_due).
 *
 * A run with RKLLM_INFER_GET_LOGITS hands out, per callback, rows of
 * logits over the vocabulary the model file names (fake_vocab.h), and the
 * runtime's own pick from the last row; see README.md beside this file.
 */
#ifndef FAKE_LOGITS_H
#define FAKE_LOGITS_H

/* Each token's logit before the step's own part: a model that, once off
 * its own text, wants to be done: the end token first, then a lone quote
 * (closing a string), `}` and `]`, digits, a comma, then the shorter
 * tokens. Ids past the vocabulary (a padded row) are never likely. */
static float *make_base_logits(const fake_vocab *v, int width) {
    float *base = malloc(sizeof(float) * (size_t)width);
    for (int id = 0; id < width; id++) {
        if (id >= v->n) {
            base[id] = -30.0f;
            continue;
        }
        const fake_token *t = &v->tokens[id];
        unsigned char first = t->len ? t->bytes[0] : 0;
        if (id == v->eos) base[id] = 18.0f;
        else if (t->len == 1 && first == '"') base[id] = 15.0f;
        else if (t->len == 1 && (first == '}' || first == ']')) base[id] = 12.0f;
        else if (t->len && first >= '0' && first <= '9') base[id] = 6.0f;
        else if (t->len && memchr(t->bytes, ',', (size_t)t->len)) base[id] = 3.0f;
        else if (t->len == 0 || t->special) base[id] = -30.0f;
        else base[id] = -(float)t->len;
    }
    return base;
}

/* splitmix64: the step noise, a pure function of its input. */
static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The logits row of a generation's step `step` (the distribution of its
 * token number `step`): the token the model wants to say there far above
 * all (it has its own text in mind), the base preferences under it, and a
 * little noise of the generation's seed. */
static void fill_row(const fake_handle *h, float *row, int step) {
    int want = step >= 0 && step < h->want_n ? h->want[step] : h->vocab->eos;
    for (int id = 0; id < h->logits_width; id++) {
        uint64_t r = mix64(h->gen_seed ^ ((uint64_t)(step + 1) << 32) ^ (uint64_t)id);
        row[id] = h->base_logits[id] + (float)(r >> 11) / (float)(1ull << 53) * 0.5f;
    }
    if (want >= 0 && want < h->logits_width) row[want] += 40.0f;
}

/* Logits mode (RKLLM_INFER_GET_LOGITS), as RKLLM_ABI.md 3.5c describes it:
 * the first callback holds one row per prefilled token (the prompt's, or
 * the tokens fed), the last of which is the next token's distribution;
 * then one row per step. Each callback also carries the runtime's own pick
 * from its last row (the best token; token_id -1 with
 * FAKE_RKLLM_LOGITS_PICK=none) and that token's text. Returning 1 pauses:
 * the pick is not taken, the KV keeps what came before it, no FINISH. The
 * rows are valid during the callback only (the buffer is reused). */
static void *logits_generate(void *arg) {
    run_args *a = arg;
    fake_handle *h = a->h;
    double start = now_ms();
    sleep_ms(h->prefill_ms);
    {
        /* As in text mode: prefill time grows with the prompt bytes a
         * loaded prompt cache does not cover, and a run asked to save its
         * prefill saves it once the prefill is done. */
        long us = (long)(strlen(a->prompt) - a->cached) * h->prefill_us_per_byte;
        if (us > 0) {
            struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (a->save_cache) save_prompt_cache(h, a->save_cache, a->held);
    prefilled(h, a->continues, a->keep_history, a->positions);
    double first = now_ms();
    int width = h->logits_width;
    int rows_n = a->first_rows > 0 ? a->first_rows : 1;
    size_t room = 0;
    float *rows = NULL;
    int steps = 0;
    long rows_total = 0;
    const char *how = "finish";
    a->rc = 0;
    for (;;) {
        if (abort_due(h)) {
            how = "abort";
            break;
        }
        if (a->cap > 0 && steps >= a->cap) {
            how = "cap";
            break;
        }
        sleep_ms(h->token_ms);
        size_t need = (size_t)rows_n * (size_t)width;
        if (need > room) {
            free(rows);
            rows = malloc(sizeof(float) * need);
            room = need;
        }
        for (int r = 0; r < rows_n; r++) fill_row(h, rows + (size_t)r * width, h->step - (rows_n - 1 - r));
        const float *last = rows + (size_t)(rows_n - 1) * width;
        int pick = 0;
        for (int id = 1; id < width; id++)
            if (last[id] > last[pick]) pick = id;
        if (h->break_pick_not_argmax) {
            /* "pick_not_argmax": the runtime's pick is not its row's best. */
            int second = pick == 0 ? 1 : 0;
            for (int id = 0; id < width; id++)
                if (id != pick && last[id] > last[second]) second = id;
            pick = second;
        }
        char text[256] = "";
        if (pick < h->vocab->n && !h->vocab->tokens[pick].special) {
            int len = h->vocab->tokens[pick].len < 255 ? h->vocab->tokens[pick].len : 255;
            memcpy(text, h->vocab->tokens[pick].bytes, (size_t)len);
            text[len] = '\0';
        }
        RKLLMResult result;
        memset(&result, 0, sizeof result);
        result.text = text;
        result.token_id = h->report_pick ? pick : -1;
        result.logits.logits = rows;
        result.logits.vocab_size = width;
        result.logits.num_tokens = rows_n;
        steps++;
        rows_total += rows_n;
        int answer = h->callback(&result, a->userdata, RKLLM_RUN_NORMAL);
        if (answer == 1) {
            how = "pause";
            h->prefilled_only = steps == 1 && a->cap == 1;
            if (h->break_paused_token_in_kv) h->step++;
            paused_kv(h, text);
            break;
        }
        if (pick == h->vocab->eos) {
            how = "eos";
            break;
        }
        /* The pick is decoded: the KV holds it, the next row follows it. */
        h->step++;
        h->decoded++;
        h->kv_cache += 1;
        rows_n = 1;
    }
    free(rows);
    h->total_runs++;
    h->total_fed += a->fed;
    h->total_rows += rows_total;
    fake_log(h, "logits-end how=%s steps=%d rows=%ld step=%d total-runs=%ld total-fed=%ld total-rows=%ld", how,
             steps, rows_total, h->step, h->total_runs, h->total_fed, h->total_rows);
    if (strcmp(how, "pause") == 0) {
        h->paused = 1;
        return NULL;
    }
    h->paused = 0;
    if (!a->keep_history) h->kv_cache = 0;
    RKLLMPerfStat perf;
    memset(&perf, 0, sizeof perf);
    perf.prefill_tokens = a->first_rows;
    perf.prefill_time_ms = (float)(first - start);
    perf.generate_time_ms = (float)(now_ms() - first);
    perf.generate_tokens = steps;
    perf.memory_usage_mb = 700.0f;
    if (strcmp(how, "abort") == 0) {
        if (h->after_abort == AFTER_ABORT_FINISH) {
            emit(h, a->userdata, NULL, -1, RKLLM_RUN_FINISH, &perf);
        } else if (h->after_abort == AFTER_ABORT_ERROR) {
            emit(h, a->userdata, NULL, -1, RKLLM_RUN_ERROR, NULL);
        }
        return NULL;
    }
    emit(h, a->userdata, NULL, -1, RKLLM_RUN_FINISH, &perf);
    return NULL;
}

/* The text of token ids (token input), for markers and the log. */
static char *tokens_text(const fake_handle *h, const int32_t *ids, size_t n) {
    size_t len = 0;
    for (size_t i = 0; h->vocab && i < n; i++)
        if (ids[i] >= 0 && ids[i] < h->vocab->n) len += (size_t)h->vocab->tokens[ids[i]].len;
    char *text = malloc(len + 1);
    len = 0;
    for (size_t i = 0; h->vocab && i < n; i++) {
        if (ids[i] < 0 || ids[i] >= h->vocab->n) continue;
        memcpy(text + len, h->vocab->tokens[ids[i]].bytes, (size_t)h->vocab->tokens[ids[i]].len);
        len += (size_t)h->vocab->tokens[ids[i]].len;
    }
    text[len] = '\0';
    return text;
}

/* A new logits-mode generation: what the model wants to say is the reply
 * (thinking first when asked) cut into the vocabulary's tokens; its noise
 * comes from the prompt and FAKE_RKLLM_SEED. */
static void start_logits_generation(fake_handle *h, run_args *a, const char *prompt) {
    free(h->want);
    int n = 0;
    h->want = vocab_tokenize(h->vocab, (const unsigned char *)a->text, a->text_len, &n);
    h->want_n = n;
    h->step = 0;
    h->decoded = 0;
    h->gen_seed = mix64(h->seed ^ fnv1a(prompt, strlen(prompt)));
}

#endif
