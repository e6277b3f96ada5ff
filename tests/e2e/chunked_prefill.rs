//! Chunked prefill on the runtime test double of both ABIs. A long prompt
//! the server renders (its own template, with the model's tokenizer) is
//! prefilled a chunk a run: the first run takes its beginning as text, the
//! later ones the next chunk's token ids, each paused at its first
//! callback with the KV cache kept, and the last generates. The double
//! notices an abort only once a run's prefill is done, as the runtime does
//! (rknn-llm #400), so in one run a client that leaves holds the NPU for
//! the whole prefill; in chunks the abort lands at the next chunk's end and
//! the runner is neither killed nor loaded again. A snapshot saved at the
//! end of a chunked prefill holds the whole prompt, and the returning
//! conversation prefills only what follows it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{
    CHATML_JINJA, Fake, ScratchDir, Server, mock_tokenizer, ndjson, post_text,
    render_chatml as render,
};

const ANSWER: &str = "Chunked answer.";

/// Microseconds the double takes to prefill a prompt byte: the long
/// message's 8 s, or a quick prefill.
const SLOW_US_PER_BYTE: u64 = 2300;
const QUICK_US_PER_BYTE: u64 = 10;

/// A user message of about 3,500 bytes (as many of the mock tokenizer's
/// tokens, within the model's 4,096).
fn long_message() -> String {
    "Please read this log line of the board and keep it in mind. ".repeat(57)
}

/// The model's own chat template (ChatML, in Jinja): a chat sent whole,
/// which conversation snapshots keep.
const TEMPLATE: &str = CHATML_JINJA;

struct Board {
    server: Server,
    log: PathBuf,
    _dir: ScratchDir,
}

impl Board {
    /// Model `chat` (its own ChatML template, the mock tokenizer) with `settings` lines in
    /// its entry, and `whole`, the same prefilling in one run, on a double
    /// prefilling a byte in `us_per_byte` microseconds.
    fn start(fake: Fake, settings: &str, us_per_byte: u64) -> Self {
        let dir = ScratchDir::new();
        let tokenizer = mock_tokenizer().display().to_string();
        let model = dir.0.join("chat.rkllm");
        std::fs::write(&model, format!("@fake-vocab={tokenizer}\n{ANSWER}")).unwrap();
        let snapshots = dir.0.join("snapshots");
        let config = format!(
            "[rkllm]\nsnapshot_dir = {snapshots:?}\nsnapshot_max_mb = 64\n\
             [[models]]\nname = \"chat\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
             chat_template = {TEMPLATE:?}\n{settings}\n\
             [[models]]\nname = \"whole\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
             chat_template = {TEMPLATE:?}\nprefill_chunk_tokens = 0\nsnapshots = false\n"
        );
        let log = dir.0.join("fake.log");
        let server = Server::start_on_fake(
            &config,
            fake,
            &log,
            &[],
            &[("FAKE_RKLLM_PREFILL_US_PER_BYTE", &us_per_byte.to_string())],
        );
        Self {
            server,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    async fn chat(&self, model: &str, messages: Value) -> Value {
        self.server
            .post_json(
                "/v1/chat/completions",
                json!({"model": model, "messages": messages}),
            )
            .await
    }
}

/// The numbers after `key=` in the lines starting with `event`.
fn numbers(log: &[String], event: &str, key: &str) -> Vec<usize> {
    log.iter()
        .filter(|l| l.starts_with(event))
        .filter_map(|l| {
            let at = l.find(&format!("{key}="))? + key.len() + 1;
            l[at..].split([' ', ',']).next()?.parse().ok()
        })
        .collect()
}

#[tokio::test]
async fn a_long_prompt_is_prefilled_in_chunks_and_answered_as_in_one_run() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let board = Board::start(
            fake,
            "prefill_chunk_tokens = 256\nsnapshots = false",
            QUICK_US_PER_BYTE,
        );
        let message = long_message();
        let messages = json!([{"role": "user", "content": message}]);
        let chunked = board.chat("chat", messages.clone()).await;
        let log = board.log();
        let whole = board.chat("whole", messages).await;
        let text = |r: &Value| {
            r["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(text(&chunked), ANSWER, "{chunked}");
        assert_eq!(text(&whole), ANSWER, "{whole}");
        // The prompt's tokens are the tokenizer's, whichever way it went.
        let tokens = |r: &Value| r["usage"]["prompt_tokens"].as_u64().unwrap();
        let counted = board
            .server
            .post_json(
                "/tokenize",
                json!({"model": "chat", "content": render(&[("user", &message)])}),
            )
            .await;
        let expected = counted["tokens"].as_array().map(|t| t.len() as u64);
        assert_eq!(Some(tokens(&chunked)), expected, "{counted}");
        // Each chunk after the first went in as 256 token ids or fewer
        // (the last), each run but the last paused at its first callback.
        let fed = numbers(&log, "run-tokens", "n");
        assert!(fed.len() >= 10, "{fed:?}");
        assert!(fed.iter().all(|&n| n <= 256), "{fed:?}");
        assert!(fed[..fed.len() - 1].iter().all(|&n| n == 256), "{fed:?}");
        let paused = log
            .iter()
            .filter(|l| l.starts_with("logits-end how=pause steps=1"))
            .count();
        assert_eq!(
            paused,
            fed.len(),
            "every chunk but the last paused:\n{log:#?}"
        );
        // The first run took the prompt's beginning as text.
        assert_eq!(
            log.iter().filter(|l| l.starts_with("run role=")).count(),
            1,
            "{log:#?}"
        );
        let after = board.log();
        let whole_runs = after[log.len()..]
            .iter()
            .filter(|l| l.starts_with("run-tokens"))
            .count();
        assert_eq!(whole_runs, 0, "with 0 the prompt goes in one run");
    }
}

#[tokio::test]
async fn a_client_that_leaves_during_a_long_prefill_frees_the_npu_at_the_next_chunk_edge() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let board = Board::start(
            fake,
            "prefill_chunk_tokens = 256\nsnapshots = false",
            SLOW_US_PER_BYTE,
        );
        let body = json!({"model": "chat", "stream": true,
                          "messages": [{"role": "user", "content": long_message()}]});
        let response = board
            .server
            .send(
                reqwest::Method::POST,
                "/v1/chat/completions",
                Some(body),
                None,
            )
            .await;
        assert_eq!(response.status(), 200);
        // The client leaves 1 s into the prefill (its first run begun; the
        // template's render before it takes longer under an emulator).
        let until = Instant::now() + Duration::from_secs(60);
        while !board.log().iter().any(|l| l.starts_with("logits-run")) {
            assert!(Instant::now() < until, "the prefill never began");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(response);
        let left = Instant::now();
        let next = board
            .chat(
                "chat",
                json!([{"role": "user", "content": "Short question."}]),
            )
            .await;
        let freed = left.elapsed();
        assert_eq!(next["choices"][0]["message"]["content"], ANSWER, "{next}");
        let log = board.log();
        // The runtime was loaded once: nothing was killed for the abort.
        assert_eq!(
            log.iter().filter(|l| l.starts_with("init ")).count(),
            1,
            "{log:#?}"
        );
        // The abort came during a chunk's run; that run ended at its
        // prefill's end, and no other chunk of the long prompt ran.
        let abort = log
            .iter()
            .position(|l| l.starts_with("abort running=1"))
            .unwrap_or_else(|| panic!("no abort during a run: {log:#?}"));
        let short = log
            .iter()
            .rposition(|l| l.starts_with("run role="))
            .unwrap();
        assert!(short > abort, "{log:#?}");
        let between = &log[abort..short];
        assert!(
            between
                .iter()
                .any(|l| l.starts_with("logits-end how=abort")),
            "{between:#?}"
        );
        assert!(
            !between.iter().any(|l| l.starts_with("run-tokens")),
            "a chunk ran after the abort: {between:#?}"
        );
        assert!(
            between.iter().any(|l| l.starts_with("clear-kv")),
            "{between:#?}"
        );
        // Of the long prompt's 14 chunks, the first few ran.
        let begun = log[..abort]
            .iter()
            .filter(|l| l.starts_with("logits-run"))
            .count();
        assert!(
            (1..10).contains(&begun),
            "chunks begun before the abort: {begun}"
        );
        eprintln!("{fake:?}: the next chat was answered {freed:?} after the client left");
    }
}

#[tokio::test]
async fn a_snapshot_saved_after_a_chunked_prefill_holds_the_whole_prompt() {
    let board = Board::start(Fake::V1_3, "prefill_chunk_tokens = 256", QUICK_US_PER_BYTE);
    let message = long_message();
    let first = json!([{"role": "user", "content": message}]);
    let reply = board.chat("chat", first).await;
    assert_eq!(reply["choices"][0]["message"]["content"], ANSWER, "{reply}");
    let prompt = render(&[("user", &message)]);
    let log = board.log();
    assert!(
        numbers(&log, "run-tokens", "n").len() > 1,
        "the first turn was prefilled in chunks: {log:#?}"
    );
    assert_eq!(
        numbers(&log, "prompt-cache-save", "bytes"),
        vec![prompt.len()],
        "{log:#?}\n{}",
        board.server.log().join("\n")
    );
    // The conversation comes back: the snapshot covers its first prompt,
    // and only what follows is prefilled, in one run.
    let again = json!([
        {"role": "user", "content": message},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": "And then?"},
    ]);
    let reply = board.chat("chat", again).await;
    assert_eq!(reply["choices"][0]["message"]["content"], ANSWER, "{reply}");
    let later = board.log()[log.len()..].to_vec();
    assert_eq!(
        numbers(&later, "run-cached", "bytes"),
        vec![prompt.len()],
        "{later:#?}"
    );
    assert!(
        !later.iter().any(|l| l.starts_with("run-tokens")),
        "{later:#?}"
    );
}

#[tokio::test]
async fn stream_status_says_how_far_a_chunked_prefill_has_come() {
    let board = Board::start(
        Fake::V1_3,
        "prefill_chunk_tokens = 256\nsnapshots = false",
        SLOW_US_PER_BYTE,
    );
    let started = board
        .server
        .ok(
            "run",
            json!({"model": "chat", "stream": true, "prompt": long_message()}),
        )
        .await;
    let stream_id = started["stream_id"].as_str().unwrap().to_owned();
    // Polled while the 8 s prefill goes on: the tokens prefilled grow a
    // chunk at a time, of the whole prompt's.
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while seen.len() < 3 && Instant::now() < until {
        let status = board
            .server
            .ok("stream_status", json!({"stream_id": stream_id}))
            .await;
        if let Some(prefill) = status.get("prefill") {
            assert_eq!(status["state"], "initializing", "{status}");
            let at = (
                prefill["tokens"].as_u64().unwrap(),
                prefill["of"].as_u64().unwrap(),
            );
            if seen.last() != Some(&at) {
                seen.push(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen.len() >= 3, "{seen:?}");
    let total = seen[0].1;
    assert!(total > 3000, "{seen:?}");
    assert!(seen.iter().all(|&(_, of)| of == total), "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0 && w[1].0 < total),
        "{seen:?}"
    );
    // Steps of one chunk (256 tokens) after the first.
    assert!(
        seen.windows(2)
            .skip(1)
            .all(|w| (w[1].0 - w[0].0) % 256 == 0),
        "{seen:?}"
    );
    board
        .server
        .ok("abort", json!({"stream_id": stream_id}))
        .await;
    let status = board
        .server
        .ok("stream_status", json!({"stream_id": stream_id}))
        .await;
    assert!(status.get("prefill").is_none(), "{status}");
}

/// Microseconds a prompt byte takes for a prefill of about 1.4 s in
/// chunks of about 0.1 s: long enough for a reader to see each chunk.
const STEADY_US_PER_BYTE: u64 = 400;

/// The prefill steps an SSE body's comments tell, as (tokens, of); none
/// after the answer's first text.
fn prefill_comments(body: &str) -> Vec<(u64, u64)> {
    let mut seen = Vec::new();
    let mut answered = false;
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix(": prefill ") {
            assert!(
                !answered,
                "a prefill comment after the answer began: {body}"
            );
            let (tokens, of) = rest.split_once('/').expect("tokens/of");
            seen.push((tokens.parse().unwrap(), of.parse().unwrap()));
        } else if line.starts_with("data:") && line.contains(&ANSWER[..3]) {
            // The answer's first token, "Chu", is out.
            answered = true;
        }
    }
    assert!(answered, "{body}");
    seen
}

/// Prefill steps seen by a client: at least three, rising, each below the
/// prompt's `total` tokens.
fn check_steps(seen: &[(u64, u64)], total: u64) {
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(
        seen.iter().all(|&(_, of)| of == total),
        "{seen:?} of {total}"
    );
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0) && seen.iter().all(|&(t, _)| t < total),
        "{seen:?}"
    );
}

#[tokio::test]
async fn mcp_progress_tells_the_prefill_below_one_then_the_tokens_generated() {
    let board = Board::start(
        Fake::V1_3,
        "prefill_chunk_tokens = 256\nsnapshots = false",
        STEADY_US_PER_BYTE,
    );
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "generate", "arguments": {"prompt": long_message(), "model": "chat", "max_tokens": 40},
        "_meta": {"progressToken": "long-1"}}});
    let response = board
        .server
        .http
        .post(board.server.mcp_url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let messages: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    let (result, notes) = messages.split_last().unwrap();
    assert_eq!(result["id"], 5, "{body}");
    let structured = &result["result"]["structuredContent"];
    assert_eq!(structured["text"], ANSWER, "{body}");
    let prompt_tokens = structured["usage"]["prompt_tokens"].as_u64().unwrap();
    // One rising sequence: the prefill's share (below 1, no message, its
    // position in `_meta.prefill`), then the tokens generated.
    let mut last = -1.0;
    let mut steps = Vec::new();
    let mut joined = String::new();
    for note in notes {
        assert_eq!(note["method"], "notifications/progress", "{note}");
        let params = &note["params"];
        assert_eq!(params["progressToken"], "long-1");
        let progress = params["progress"].as_f64().unwrap();
        assert!(progress > last, "progress rises: {body}");
        last = progress;
        if let Some(prefill) = params["_meta"].get("prefill") {
            assert!(
                joined.is_empty(),
                "the prefill is told before the answer: {body}"
            );
            assert!(
                params.get("message").is_none() && params.get("total").is_none(),
                "{note}"
            );
            let at = (
                prefill["tokens"].as_u64().unwrap(),
                prefill["of"].as_u64().unwrap(),
            );
            assert!(progress < 1.0, "{note}");
            assert!(
                (progress - at.0 as f64 / at.1 as f64).abs() < 1e-9,
                "{note}"
            );
            steps.push(at);
        } else {
            assert!(progress >= 1.0, "{note}");
            assert_eq!(params["total"], 40, "{note}");
            joined.push_str(params["message"].as_str().unwrap());
        }
    }
    check_steps(&steps, prompt_tokens);
    assert_eq!(joined, ANSWER);
}

#[tokio::test]
async fn sse_apis_carry_the_prefill_in_comments_and_ndjson_leaves_it_out() {
    let board = Board::start(
        Fake::V1_3,
        "prefill_chunk_tokens = 256\nsnapshots = false",
        STEADY_US_PER_BYTE,
    );
    let messages = json!([{"role": "user", "content": long_message()}]);
    let requests = [
        (
            "/v1/chat/completions",
            json!({"model": "chat", "stream": true,
            "stream_options": {"include_usage": true}, "messages": messages}),
        ),
        (
            "/v1/messages",
            json!({"model": "chat", "stream": true, "max_tokens": 40,
            "messages": messages}),
        ),
        (
            "/v1/responses",
            json!({"model": "chat", "stream": true, "input": messages}),
        ),
    ];
    for (path, body) in requests {
        let text = post_text(&board.server, path, body).await;
        let seen = prefill_comments(&text);
        let total = seen.first().map_or(0, |s| s.1);
        assert!(total > 3000, "{path}: {seen:?}");
        check_steps(&seen, total);
        // The answer streams as before, its events all JSON.
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .collect();
        assert!(
            data.iter()
                .all(|d| serde_json::from_str::<Value>(d).is_ok()),
            "{path}: {text}"
        );
    }
    // Ollama's NDJSON has no comments: every line is one of its objects.
    let lines = ndjson(
        &board.server,
        "/api/chat",
        json!({"model": "chat", "messages": messages}),
    )
    .await;
    let answer: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(answer, ANSWER, "{lines:?}");
}
