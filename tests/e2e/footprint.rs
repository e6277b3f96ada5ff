//! What the surfaces that answer from a tokenizer or with log
//! probabilities cost the server in memory, read from `/proc` around each
//! request on the mock: a megabyte tokenized with its pieces, prompts over
//! `max_prompt_bytes` (refused before any tokenizer runs), non-streamed
//! answers of 8,192 tokens with 20 alternatives each (kept compactly, and
//! never refused because the mock outpaces the collector), and the log
//! probabilities of an answer cut by a stop string joining to exactly its
//! text on every API that reports them.
//!
//! The bounds are the server's resident memory, which qemu-user's own
//! would hide: under an emulator these tests say so and do not run.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{ScratchDir, Server, emulated, mock_config, mock_tokenizer};

const MIB: u64 = 1 << 20;

/// A line of `/proc/PID/status`, in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("{key} in {status}"))
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib << 10
}

/// Starts counting the process's peak resident memory (`VmHWM`) afresh.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

fn skipped(test: &str) -> bool {
    if emulated() {
        eprintln!(
            "{test}: skipped under an emulator, whose own memory is the process's resident set"
        );
        return true;
    }
    false
}

/// A mock server whose model `talker` has the mock's tokenizer.
fn tokenizing_server() -> (Server, ScratchDir) {
    let dir = ScratchDir::new();
    let model = dir.0.join("talker.rkllm");
    std::fs::write(&model, "the mock's model").unwrap();
    let config = mock_config(
        0.0,
        0,
        &format!(
            "[[models]]\nname = \"talker\"\npath = {model:?}\ntokenizer = {:?}\n",
            mock_tokenizer()
        ),
    );
    (Server::start(&config, &[]), dir)
}

/// About `bytes` bytes of text, words of several scripts on one long line.
fn text_of(bytes: usize) -> String {
    let words = [
        "board", "streams", "東京", "café", "🦀", "naïve", "NPU", "rock",
    ];
    let mut text = String::with_capacity(bytes + 16);
    let mut i = 0usize;
    while text.len() + 16 < bytes {
        text.push_str(words[i * 7 % words.len()]);
        text.push(' ');
        i += 1;
    }
    text
}

/// The server's resident memory once it is quiet: after `settle`.
async fn settled_rss(pid: u32) -> u64 {
    tokio::time::sleep(Duration::from_millis(500)).await;
    status_bytes(pid, "VmRSS")
}

#[tokio::test]
async fn a_megabyte_tokenized_with_its_pieces_stays_within_its_memory_bound() {
    if skipped("a_megabyte_tokenized_with_its_pieces_stays_within_its_memory_bound") {
        return;
    }
    let (server, _dir) = tokenizing_server();
    let pid = server.pid();
    let warm = server
        .post_json(
            "/tokenize",
            json!({"model": "talker", "content": "warm up", "with_pieces": true}),
        )
        .await;
    assert!(warm["tokens"].is_array(), "{warm}");
    let idle = settled_rss(pid).await;
    reset_peak(pid);

    let content = text_of(1_000_000);
    let response = server
        .send(
            reqwest::Method::POST,
            "/tokenize",
            Some(json!({"model": "talker", "content": content, "with_pieces": true})),
            None,
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let peak = status_bytes(pid, "VmHWM");
    let tokens = body["tokens"].as_array().unwrap();
    assert!(tokens.len() > 100_000, "{} tokens", tokens.len());
    // The pieces joined are the text.
    let mut joined = Vec::with_capacity(content.len());
    for token in tokens {
        match &token["piece"] {
            Value::String(text) => joined.extend_from_slice(text.as_bytes()),
            Value::Array(bytes) => joined.extend(bytes.iter().map(|b| b.as_u64().unwrap() as u8)),
            other => panic!("a piece of {other}"),
        }
    }
    assert!(
        joined == content.as_bytes(),
        "the pieces joined are not the text"
    );
    let after = settled_rss(pid).await;
    eprintln!(
        "1 MB with pieces ({} tokens): idle {:.1} MiB, peak +{:.1} MiB, after +{:.1} MiB",
        tokens.len(),
        idle as f64 / MIB as f64,
        peak.saturating_sub(idle) as f64 / MIB as f64,
        after.saturating_sub(idle) as f64 / MIB as f64
    );
    assert!(peak < idle + 64 * MIB, "peak {peak} against idle {idle}");
    assert!(after < idle + 16 * MIB, "after {after} against idle {idle}");

    // Detokenizing is bounded by its ids.
    let ids = vec![1u32; (1 << 18) + 1];
    let response = server
        .send(
            reqwest::Method::POST,
            "/detokenize",
            Some(json!({"model": "talker", "tokens": ids})),
            None,
        )
        .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "tokens", "{body}");
}

#[tokio::test]
async fn prompts_over_their_bound_are_refused_before_any_tokenizer_runs() {
    if skipped("prompts_over_their_bound_are_refused_before_any_tokenizer_runs") {
        return;
    }
    let (server, _dir) = tokenizing_server();
    let pid = server.pid();
    // The tokenizer loaded and used once, as a running server's is.
    let warm = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "talker", "max_tokens": 4,
                   "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert!(
        warm["usage"]["prompt_tokens"].as_u64().unwrap() > 0,
        "{warm}"
    );
    let idle = settled_rss(pid).await;
    reset_peak(pid);

    // Eight at once, each under the body's bound and over the prompt's.
    let content = text_of(978_000);
    let server = std::sync::Arc::new(server);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (server, content) = (std::sync::Arc::clone(&server), content.clone());
            tokio::spawn(async move {
                let response = server
                    .send(
                        reqwest::Method::POST,
                        "/v1/chat/completions",
                        Some(json!({"model": "talker",
                                    "messages": [{"role": "user", "content": content}]})),
                        None,
                    )
                    .await;
                let status = response.status().as_u16();
                (status, response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("max_prompt_bytes"), "{body}");
    }
    let peak = status_bytes(pid, "VmHWM");
    let after = settled_rss(pid).await;
    eprintln!(
        "8 prompts of 978 kB refused: idle {:.1} MiB, peak +{:.1} MiB, after +{:.1} MiB",
        idle as f64 / MIB as f64,
        peak.saturating_sub(idle) as f64 / MIB as f64,
        after.saturating_sub(idle) as f64 / MIB as f64
    );
    assert!(peak < idle + 64 * MIB, "peak {peak} against idle {idle}");
}

/// The bytes of OpenAI-shaped entries (`bytes` of each), joined.
fn joined_bytes(entries: &[Value]) -> Vec<u8> {
    entries
        .iter()
        .flat_map(|e| {
            e["bytes"]
                .as_array()
                .unwrap_or_else(|| panic!("{e}"))
                .iter()
                .map(|b| u8::try_from(b.as_u64().unwrap()).unwrap())
                .collect::<Vec<u8>>()
        })
        .collect()
}

#[tokio::test]
async fn long_non_streamed_answers_keep_their_log_probabilities_compactly() {
    if skipped("long_non_streamed_answers_keep_their_log_probabilities_compactly") {
        return;
    }
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let pid = server.pid();
    let warm = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "mock", "max_tokens": 8, "logprobs": true, "top_logprobs": 2,
                   "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert!(
        warm["choices"][0]["logprobs"]["content"].is_array(),
        "{warm}"
    );
    let idle = settled_rss(pid).await;
    let prompt = "@mock(length=8192) tell me everything";

    // Chat completions: 8,192 tokens, 20 alternatives each, as fast as the
    // mock makes them.
    reset_peak(pid);
    let chat = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "mock", "max_tokens": 8192, "logprobs": true, "top_logprobs": 20,
                   "messages": [{"role": "user", "content": prompt}]}),
        )
        .await;
    let chat_peak = status_bytes(pid, "VmHWM");
    let choice = &chat["choices"][0];
    assert_eq!(
        chat["usage"]["completion_tokens"],
        8192,
        "{:.300}",
        chat.to_string()
    );
    let entries = choice["logprobs"]["content"].as_array().unwrap();
    assert_eq!(entries.len(), 8192);
    assert_eq!(entries[100]["top_logprobs"].as_array().unwrap().len(), 20);
    let text = choice["message"]["content"].as_str().unwrap();
    assert!(
        joined_bytes(entries) == text.as_bytes(),
        "the tokens join to the answer"
    );

    // Responses: the same answer's tokens in its output text.
    reset_peak(pid);
    let response = server
        .post_json(
            "/v1/responses",
            json!({"model": "mock", "max_output_tokens": 8192, "top_logprobs": 20,
                   "include": ["message.output_text.logprobs"], "input": prompt}),
        )
        .await;
    let responses_peak = status_bytes(pid, "VmHWM");
    assert_eq!(
        response["usage"]["output_tokens"],
        8192,
        "{:.300}",
        response.to_string()
    );
    let part = &response["output"][0]["content"][0];
    let entries = part["logprobs"].as_array().unwrap();
    assert_eq!(entries.len(), 8192);
    assert!(joined_bytes(entries) == part["text"].as_str().unwrap().as_bytes());
    let after = settled_rss(pid).await;
    eprintln!(
        "8,192 tokens × 20 alternatives, non-streamed: idle {:.1} MiB, chat peak +{:.1} MiB, \
         responses peak +{:.1} MiB, after +{:.1} MiB",
        idle as f64 / MIB as f64,
        chat_peak.saturating_sub(idle) as f64 / MIB as f64,
        responses_peak.saturating_sub(idle) as f64 / MIB as f64,
        after.saturating_sub(idle) as f64 / MIB as f64
    );
    assert!(
        chat_peak < idle + 128 * MIB,
        "chat peak {chat_peak}, idle {idle}"
    );
    assert!(
        responses_peak < idle + 128 * MIB,
        "responses peak {responses_peak}, idle {idle}"
    );
}

#[tokio::test]
async fn the_tokens_of_an_answer_cut_by_a_stop_string_join_to_exactly_its_text() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    // The mock says the text after the directive; its tokens are pieces of
    // a few bytes, so the stop string falls inside a token.
    let said = "@mock(echo=1) alpha beta gamma delta";
    let stop = "ta ga";
    let expected = "alpha be";

    let chat = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "mock", "logprobs": true, "top_logprobs": 2, "stop": [stop],
                   "messages": [{"role": "user", "content": said}]}),
        )
        .await;
    let text = chat["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(text, expected, "{chat}");
    let entries = chat["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(
        String::from_utf8(joined_bytes(entries)).unwrap(),
        text,
        "{chat}"
    );

    let completion = server
        .post_json(
            "/v1/completions",
            json!({"model": "mock", "logprobs": 2, "stop": stop, "prompt": said}),
        )
        .await;
    let choice = &completion["choices"][0];
    let tokens: String = choice["logprobs"]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tokens, choice["text"].as_str().unwrap(), "{completion}");

    let ollama = server
        .post_json(
            "/api/chat",
            json!({"model": "mock", "stream": false, "logprobs": true, "top_logprobs": 2,
                   "options": {"stop": [stop]},
                   "messages": [{"role": "user", "content": said}]}),
        )
        .await;
    let entries = ollama["logprobs"].as_array().unwrap();
    assert_eq!(
        String::from_utf8(joined_bytes(entries)).unwrap(),
        ollama["message"]["content"].as_str().unwrap(),
        "{ollama}"
    );

    // Streamed: the chunks' tokens join to the chunks' text.
    let chunks = crate::harness::sse(
        &server,
        "/v1/chat/completions",
        json!({"model": "mock", "stream": true, "logprobs": true, "stop": [stop],
               "messages": [{"role": "user", "content": said}]}),
    )
    .await;
    let mut streamed_text = String::new();
    let mut streamed_tokens = Vec::new();
    for chunk in &chunks {
        let choice = &chunk["choices"][0];
        if let Some(delta) = choice["delta"]["content"].as_str() {
            streamed_text.push_str(delta);
        }
        if let Some(entries) = choice["logprobs"]["content"].as_array() {
            streamed_tokens.extend(joined_bytes(entries));
        }
    }
    assert_eq!(streamed_text, expected);
    assert_eq!(String::from_utf8(streamed_tokens).unwrap(), expected);
}
