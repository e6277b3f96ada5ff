//! Reasoning models and stop strings end to end. On both ABIs of the
//! runtime's test double (tests/fake-rkllmrt, `@fake-think=N`), through
//! OpenAI, Ollama and JSON-RPC: the thinking arrives apart from the
//! answer in both shapes (Qwen3's block the reply opens, DeepSeek-R1's
//! block the template opened), thinking switched off reaches the runtime
//! as `enable_thinking = 0` and its empty block shows nothing, and a stop
//! string ends the answer right before it and aborts the runtime, whose
//! run ends short of the text's end (`stops`); a chat goes on after a
//! thinking reply with only its new message (`chat`). Through the mock
//! backend: thinking chunks of their own, with their own seq, over polling
//! and WebSocket push (`mock`).

mod chat;
mod mock;
mod stops;

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::{Fake, LIVENESS, ScratchDir, Server, fake_runtime, ndjson, sse};

const ABIS: [(Fake, &str); 2] = [(Fake::V1_3, "1.3"), (Fake::V1_2, "1.2")];

/// The model file's text: the answer (its multi-byte characters split by
/// the double's 3-byte tokens).
const ANSWER: &str = "The answer is 42: 数据 🚀 naïve, done.";

/// What the double thinks before it (tests/fake-rkllmrt/README.md).
const THINKING: &str = "The user asked; 東京 is far, so 🤔 I weigh it step by step.";

/// The double's tokens are 3 bytes.
const TOKEN_BYTES: usize = 3;

/// Read as `opened` by its name (`reasoning = "auto"`).
const QWEN3: &str = "qwen3-fake";
/// Read as `implicit` by its name (`reasoning = "auto"`).
const R1: &str = "deepseek-r1-distill-qwen-1.5b";
/// Read as `implicit` by its setting.
const IMPLICIT: &str = "thinker";

/// Each model with the marker that makes the double think in its shape.
const SHAPES: [(&str, &str); 3] = [
    (QWEN3, "@fake-think=1"),
    (R1, "@fake-think=2"),
    (IMPLICIT, "@fake-think=2"),
];

/// The thinking models' entries, all on one model file.
fn thinking_models(model: &std::path::Path) -> String {
    format!(
        "[[models]]\nname = \"{QWEN3}\"\npath = {model:?}\n\
         [[models]]\nname = \"{R1}\"\npath = {model:?}\n\
         [[models]]\nname = \"{IMPLICIT}\"\npath = {model:?}\nreasoning = \"implicit\"\n"
    )
}

/// A server on the double with the models `models` makes for a model
/// file holding `text`.
struct Board {
    server: Server,
    log: PathBuf,
    /// Holds the model file and the double's log; removed after the server.
    _scratch: ScratchDir,
}

impl Board {
    fn start(fake: Fake, text: &str, models: impl Fn(&std::path::Path) -> String) -> Self {
        Self::start_env(fake, text, models, &[])
    }

    fn start_env(
        fake: Fake,
        text: &str,
        models: impl Fn(&std::path::Path) -> String,
        env: &[(&str, &str)],
    ) -> Self {
        let scratch = ScratchDir::new();
        let model = scratch.0.join("model.rkllm");
        std::fs::write(&model, text).unwrap();
        let log = scratch.0.join("fake.log");
        let runtime = fake_runtime(fake);
        let mut all_env = vec![("FAKE_RKLLM_LOG", log.to_str().unwrap())];
        all_env.extend_from_slice(env);
        let server = Server::start_env(
            &models(&model),
            &["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()],
            &all_env,
        );
        Self {
            server,
            log,
            _scratch: scratch,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The double's log from byte `from` on, once it holds a line that
    /// starts with one of `events` (bounded wait: the runtime logs a run's
    /// end after the server has answered).
    async fn log_until(&self, from: usize, events: &[&str]) -> String {
        let deadline = tokio::time::Instant::now() + LIVENESS;
        loop {
            let log = self.log();
            let since = log.get(from..).unwrap_or_default().to_owned();
            if since
                .lines()
                .any(|l| events.iter().any(|e| l.starts_with(e)))
            {
                return since;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "none of {events:?} in the double's log since byte {from}:\n{since}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// A string field of `body`.
fn string(field: &Value, body: &Value) -> String {
    field
        .as_str()
        .unwrap_or_else(|| panic!("not a string where one was due: {body}"))
        .to_owned()
}

/// What an OpenAI chat stream said: thinking, content, finish reason and
/// usage. Thinking must all come before the content.
struct OpenAiStream {
    thinking: String,
    content: String,
    finish_reason: Option<String>,
    usage: Option<Value>,
}

fn read_openai_stream(events: &[Value]) -> OpenAiStream {
    let mut out = OpenAiStream {
        thinking: String::new(),
        content: String::new(),
        finish_reason: None,
        usage: None,
    };
    for event in events {
        if let Some(usage) = event.get("usage").filter(|u| !u.is_null()) {
            out.usage = Some(usage.clone());
        }
        let Some(choice) = event["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(thinking) = delta.get("reasoning_content").and_then(Value::as_str) {
            assert!(
                out.content.is_empty(),
                "thinking after the answer began: {event}"
            );
            out.thinking.push_str(thinking);
        }
        if let Some(content) = delta.get("content").and_then(Value::as_str) {
            out.content.push_str(content);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            assert!(out.finish_reason.is_none(), "two finish reasons: {event}");
            out.finish_reason = Some(reason.to_owned());
        }
    }
    out
}

/// Checks a JSON-RPC stream's chunks when thinking comes in chunks of its
/// own: seq contiguous from 0 over thinking and text chunks, exactly one
/// end chunk and it is last, a thinking chunk's `delta` empty and its
/// `thinking` not, no text chunk with `thinking`, thinking before the
/// answer. Returns (thinking, text, the end chunk).
fn read_chunks(chunks: &[Value]) -> (String, String, Value) {
    assert!(!chunks.is_empty());
    let (mut thinking, mut text) = (String::new(), String::new());
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(
            chunk["seq"],
            json!(i as u64),
            "seq contiguous from 0: {chunks:?}"
        );
        let last = i + 1 == chunks.len();
        assert_eq!(
            chunk["end"],
            json!(last),
            "one end chunk, the last: {chunk}"
        );
        let delta = chunk["delta"].as_str().expect("delta is a string");
        match chunk.get("thinking") {
            Some(thought) => {
                let thought = thought.as_str().expect("thinking is a string");
                assert!(!thought.is_empty(), "an empty thinking chunk: {chunk}");
                assert_eq!(delta, "", "a thinking chunk carries no answer: {chunk}");
                assert!(text.is_empty(), "thinking after the answer began: {chunk}");
                thinking.push_str(thought);
            }
            None => {
                assert!(last || !delta.is_empty(), "an empty text chunk: {chunk}");
                text.push_str(delta);
            }
        }
        for part in [delta, chunk["thinking"].as_str().unwrap_or_default()] {
            assert!(!part.contains('\u{FFFD}'), "a split character: {chunk}");
        }
    }
    (thinking, text, chunks.last().unwrap().clone())
}

/// The thinking block the double makes in `shape` (`1`: the reply opens
/// it, `2`: the template did).
fn block(shape: &str) -> String {
    let open = if shape == "1" { "<think>\n" } else { "" };
    format!("{open}{THINKING}\n</think>\n\n")
}

/// Usage that counts every token the runtime made, and as reasoning
/// tokens those of the thinking: at least the thinking text's, at most
/// the whole block's (the tokens are 3-byte pieces across the tags).
fn check_usage(reasoning: &Value, completion: &Value, block: &str, at: &str) {
    let reasoning = reasoning
        .as_u64()
        .unwrap_or_else(|| panic!("{at}: no reasoning tokens"));
    let completion = completion.as_u64().expect("completion tokens");
    let all = (block.len() + ANSWER.len()).div_ceil(TOKEN_BYTES) as u64;
    assert_eq!(completion, all, "{at}: every token is counted");
    let least = (THINKING.len() / TOKEN_BYTES) as u64;
    let most = block.len().div_ceil(TOKEN_BYTES) as u64;
    assert!(
        (least..=most).contains(&reasoning),
        "{at}: {reasoning} reasoning tokens, not {least} to {most}"
    );
}

/// The thinking of one model through OpenAI (whole and SSE), Ollama
/// (chat, whole and NDJSON; generate) and JSON-RPC `run` (whole, and
/// streamed with polling), thinking switched on each API's way.
async fn check_thinking_everywhere(
    server: &Server,
    model: &str,
    prompt: &str,
    block: &str,
    at: &str,
) {
    let messages = json!([{"role": "user", "content": prompt}]);

    let whole = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": model, "messages": messages, "reasoning_effort": "high"}),
        )
        .await;
    let message = &whole["choices"][0]["message"];
    assert_eq!(message["content"], ANSWER, "{at}: {whole}");
    assert_eq!(message["reasoning_content"], THINKING, "{at}: {whole}");
    assert_eq!(
        whole["choices"][0]["finish_reason"], "stop",
        "{at}: {whole}"
    );
    check_usage(
        &whole["usage"]["completion_tokens_details"]["reasoning_tokens"],
        &whole["usage"]["completion_tokens"],
        block,
        at,
    );

    let events = sse(
        server,
        "/v1/chat/completions",
        json!({"model": model, "messages": messages, "stream": true,
               "stream_options": {"include_usage": true},
               "chat_template_kwargs": {"enable_thinking": true}}),
    )
    .await;
    let streamed = read_openai_stream(&events);
    assert_eq!(streamed.thinking, THINKING, "{at}: {events:?}");
    assert_eq!(streamed.content, ANSWER, "{at}: {events:?}");
    assert_eq!(streamed.finish_reason.as_deref(), Some("stop"), "{at}");
    let usage = streamed.usage.expect("a usage chunk");
    check_usage(
        &usage["completion_tokens_details"]["reasoning_tokens"],
        &usage["completion_tokens"],
        block,
        at,
    );

    let chat = server
        .post_json(
            "/api/chat",
            json!({"model": model, "messages": messages, "think": true, "stream": false}),
        )
        .await;
    assert_eq!(chat["message"]["thinking"], THINKING, "{at}: {chat}");
    assert_eq!(chat["message"]["content"], ANSWER, "{at}: {chat}");
    assert_eq!(chat["done_reason"], "stop", "{at}: {chat}");

    let lines = ndjson(
        server,
        "/api/chat",
        json!({"model": model, "messages": messages, "think": "high"}),
    )
    .await;
    let (mut thinking, mut content) = (String::new(), String::new());
    for line in &lines {
        if let Some(thought) = line["message"]["thinking"].as_str() {
            assert!(
                content.is_empty(),
                "{at}: thinking after the answer: {line}"
            );
            thinking.push_str(thought);
        }
        content.push_str(line["message"]["content"].as_str().unwrap_or_default());
    }
    assert_eq!(thinking, THINKING, "{at}: {lines:?}");
    assert_eq!(content, ANSWER, "{at}: {lines:?}");

    let generated = server
        .post_json(
            "/api/generate",
            json!({"model": model, "prompt": prompt, "think": true, "stream": false}),
        )
        .await;
    assert_eq!(generated["thinking"], THINKING, "{at}: {generated}");
    assert_eq!(generated["response"], ANSWER, "{at}: {generated}");

    let params = json!({"model": model, "prompt": prompt, "enable_thinking": true});
    let run = server.ok("run", params.clone()).await;
    assert_eq!(run["thinking"], THINKING, "{at}: {run}");
    assert_eq!(run["text"], ANSWER, "{at}: {run}");
    assert_eq!(run["finish_reason"], "stop", "{at}: {run}");
    check_usage(
        &run["usage"]["reasoning_tokens"],
        &run["usage"]["completion_tokens"],
        block,
        at,
    );

    let mut streaming = params;
    streaming["stream"] = json!(true);
    let started = server.ok("run", streaming).await;
    let chunks = server
        .poll_to_end(started["stream_id"].as_str().unwrap())
        .await;
    let (thinking, text, end) = read_chunks(&chunks);
    assert_eq!(thinking, THINKING, "{at}: {chunks:?}");
    assert_eq!(text, ANSWER, "{at}: {chunks:?}");
    assert_eq!(end["finish_reason"], "stop", "{at}: {end}");
    assert_eq!(
        end["usage"], run["usage"],
        "{at}: the same count streamed or not"
    );
}

/// The lines of the double's log that say how a run was asked to think.
fn think_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.starts_with("think=")).collect()
}

#[tokio::test]
async fn thinking_arrives_apart_from_the_answer_on_every_api_in_both_shapes_on_both_abis() {
    for (fake, abi) in ABIS {
        let board = Board::start(fake, ANSWER, thinking_models);
        for (model, marker) in SHAPES {
            let at = format!("ABI {abi}, model {model}");
            let before = board.log().len();
            let shape = &marker["@fake-think=".len()..];
            let prompt = format!("why? {marker}");
            check_thinking_everywhere(&board.server, model, &prompt, &block(shape), &at).await;
            let log = board.log();
            let since = &log[before..];
            // Seven runs, each asked to think in this model's shape.
            let asked = think_lines(since);
            assert_eq!(asked.len(), 7, "{at}: {since}");
            let wanted = format!("think={shape} enable_thinking=1");
            assert!(asked.iter().all(|l| *l == wanted), "{at}: {asked:?}");
        }
    }
}

/// `/api/show` says which models think.
#[tokio::test]
async fn thinking_models_show_the_thinking_capability() {
    let board = Board::start(Fake::V1_3, ANSWER, |model| {
        format!(
            "{}[[models]]\nname = \"plain\"\npath = {model:?}\n",
            thinking_models(model)
        )
    });
    for (model, thinks) in [
        (QWEN3, true),
        (R1, true),
        (IMPLICIT, true),
        ("plain", false),
    ] {
        let show = board
            .server
            .post_json("/api/show", json!({"model": model}))
            .await;
        let capabilities = show["capabilities"].as_array().expect("capabilities");
        assert_eq!(
            capabilities.contains(&json!("thinking")),
            thinks,
            "{model}: {show}"
        );
    }
}

#[tokio::test]
async fn thinking_switched_off_reaches_the_runtime_and_its_empty_block_shows_nothing() {
    for (fake, abi) in ABIS {
        let board = Board::start(fake, ANSWER, thinking_models);
        let server = &board.server;
        for (model, marker) in SHAPES {
            let at = format!("ABI {abi}, model {model}");
            let before = board.log().len();
            let prompt = format!("quick {marker}");
            let messages = json!([{"role": "user", "content": prompt}]);

            let whole = server
                .post_json(
                    "/v1/chat/completions",
                    json!({"model": model, "messages": messages, "reasoning_effort": "none"}),
                )
                .await;
            let message = &whole["choices"][0]["message"];
            assert_eq!(message["content"], ANSWER, "{at}: {whole}");
            assert!(message.get("reasoning_content").is_none(), "{at}: {whole}");

            let events = sse(
                server,
                "/v1/chat/completions",
                json!({"model": model, "messages": messages, "stream": true,
                       "chat_template_kwargs": {"enable_thinking": false}}),
            )
            .await;
            let streamed = read_openai_stream(&events);
            assert_eq!(streamed.content, ANSWER, "{at}: {events:?}");
            assert!(
                events
                    .iter()
                    .all(|e| e["choices"][0]["delta"].get("reasoning_content").is_none()),
                "{at}: {events:?}"
            );

            let chat = server
                .post_json(
                    "/api/chat",
                    json!({"model": model, "messages": messages, "think": false, "stream": false}),
                )
                .await;
            assert_eq!(chat["message"]["content"], ANSWER, "{at}: {chat}");
            assert!(chat["message"].get("thinking").is_none(), "{at}: {chat}");
            let lines = ndjson(
                server,
                "/api/chat",
                json!({"model": model, "messages": messages, "think": false}),
            )
            .await;
            assert!(
                lines.iter().all(|l| l["message"].get("thinking").is_none()),
                "{at}: {lines:?}"
            );
            let content: String = lines
                .iter()
                .filter_map(|l| l["message"]["content"].as_str())
                .collect();
            assert_eq!(content, ANSWER, "{at}: {lines:?}");

            let params = json!({"model": model, "prompt": prompt, "enable_thinking": false});
            let run = server.ok("run", params.clone()).await;
            assert_eq!(run["text"], ANSWER, "{at}: {run}");
            assert!(run.get("thinking").is_none(), "{at}: {run}");
            let mut streaming = params;
            streaming["stream"] = json!(true);
            let started = server.ok("run", streaming).await;
            let chunks = server
                .poll_to_end(started["stream_id"].as_str().unwrap())
                .await;
            let (thinking, text, _) = read_chunks(&chunks);
            assert_eq!((thinking.as_str(), text.as_str()), ("", ANSWER), "{at}");

            // Six runs, each with the runtime's thinking switched off (the
            // double then made the empty block the test saw hidden).
            let log = board.log();
            let since = &log[before..];
            let asked = think_lines(since);
            assert_eq!(asked.len(), 6, "{at}: {since}");
            let shape = &marker["@fake-think=".len()..];
            let wanted = format!("think={shape} enable_thinking=0");
            assert!(asked.iter().all(|l| *l == wanted), "{at}: {asked:?}");
            assert!(
                since
                    .lines()
                    .filter(|l| l.starts_with("run "))
                    .all(|l| l.contains(" thinking=0 ")),
                "{at}: {since}"
            );
        }
    }
}

/// `--model FILE` names the model after its file, and a DeepSeek-R1
/// distill's name makes it `implicit` there too, as in `[[models]]` and
/// the store (`reasoning = "auto"`).
#[tokio::test]
async fn a_deepseek_r1_file_given_with_model_is_implicit_by_its_name() {
    let scratch = ScratchDir::new();
    let model = scratch.0.join(format!("{R1}.rkllm"));
    std::fs::write(&model, ANSWER).unwrap();
    let runtime = fake_runtime(Fake::V1_3);
    let server = Server::start(
        "",
        &[
            "--backend",
            "rkllm",
            "--runtime",
            runtime.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
        ],
    );
    let run = server
        .ok(
            "run",
            json!({"prompt": "why? @fake-think=2", "enable_thinking": true}),
        )
        .await;
    assert_eq!(run["thinking"], THINKING, "{run}");
    assert_eq!(run["text"], ANSWER, "{run}");
}
