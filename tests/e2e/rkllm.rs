//! The real `rkllm` backend, driven end to end against the fake runtime
//! (tests/fake-rkllmrt) for both ABIs: the real binary loads the library
//! with dlopen, calls it through rkllm-sys and receives its callbacks.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::{
    Fake, LIVENESS, Server, Ws, check_chunks, fake_runtime, mock_config, start_failure,
};

/// The fake generates the model file's content: multi-byte characters
/// included, so 1-, 2- and 3-byte tokens split many of them.
const TEXT: &str = "Hello 東京 🦀 naïve café 👋🏽 — ü. Zürich 数据 🚀 Привет, done.";

const ABIS: [(Fake, &str); 2] = [(Fake::V1_3, "1.3"), (Fake::V1_2, "1.2")];

struct Board {
    server: Server,
    log: PathBuf,
    /// Holds the model file and the fake's log; removed after the server.
    _scratch: crate::harness::ScratchDir,
}

impl Board {
    /// A server on the fake runtime with `env` for the fake and a model
    /// file holding `text`.
    fn start(fake: Fake, text: &str, config: &str, env: &[(&str, &str)]) -> Self {
        let scratch = crate::harness::ScratchDir::new();
        let model = scratch.0.join("fake-model.rkllm");
        std::fs::write(&model, text).unwrap();
        let log = scratch.0.join("fake.log");
        let runtime = fake_runtime(fake);
        let mut all_env: Vec<(&str, &str)> = vec![("FAKE_RKLLM_LOG", log.to_str().unwrap())];
        all_env.extend_from_slice(env);
        let args = [
            "--backend",
            "rkllm",
            "--runtime",
            runtime.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            // Loaded at start, so the fake's log holds its init at once.
            "--preload",
            "fake-model",
        ];
        let server = Server::start_env(config, &args, &all_env);
        Self {
            server,
            log,
            _scratch: scratch,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn count(&self, event: &str) -> usize {
        self.log().lines().filter(|l| l.starts_with(event)).count()
    }

    /// Waits (bounded) until the fake logged `event` more than `before` times.
    async fn wait_event(&self, event: &str, before: usize) {
        let deadline = tokio::time::Instant::now() + LIVENESS;
        while self.count(event) <= before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no `{event}` in the fake's log:\n{}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test]
async fn streamed_text_equals_the_runtime_text_byte_for_byte_for_both_abis_and_modes() {
    let modes: [&[(&str, &str)]; 4] = [
        &[("FAKE_RKLLM_TOKEN_BYTES", "3")],
        &[("FAKE_RKLLM_TOKEN_BYTES", "1")],
        &[
            ("FAKE_RKLLM_MODE", "split"),
            ("FAKE_RKLLM_TOKEN_BYTES", "2"),
        ],
        &[
            ("FAKE_RKLLM_CALLBACK_THREAD", "1"),
            ("FAKE_RKLLM_MODE", "split"),
        ],
    ];
    for (fake, abi) in ABIS {
        for env in modes {
            let board = Board::start(fake, TEXT, &mock_config(0.0, 0, ""), env);
            let server = &board.server;
            let whole = server.ok("run", json!({"prompt": "hi"})).await;
            assert_eq!(whole["text"], TEXT, "{abi} {env:?}");
            assert_eq!(whole["finish_reason"], "stop");
            assert!(whole["usage"]["completion_tokens"].as_u64().unwrap() > 0);

            let started = server
                .ok("run", json!({"prompt": "hi", "stream": true}))
                .await;
            let polled = check_chunks(
                &server
                    .poll_to_end(started["stream_id"].as_str().unwrap())
                    .await,
            );
            assert_eq!(polled, TEXT, "{abi} {env:?}");

            let mut ws = Ws::connect(server).await;
            let (stream_id, notes) = ws.start_stream(json!({"prompt": "hi"})).await;
            let pushed = check_chunks(&ws.chunks_to_end(&stream_id, notes).await);
            assert_eq!(pushed, TEXT, "{abi} {env:?}");
            if env.iter().any(|(_, v)| *v == "1") && env[0].0 == "FAKE_RKLLM_TOKEN_BYTES" {
                assert!(board.log().contains("run role=user"), "{}", board.log());
            }
        }
    }
}

fn long_text() -> String {
    TEXT.repeat(400)
}

#[tokio::test]
async fn abort_a_closed_websocket_and_expiry_each_reach_rkllm_abort() {
    for (fake, abi) in ABIS {
        let config = mock_config(0.0, 0, "[streams]\nidle_timeout_secs = 1\n");
        let board = Board::start(fake, &long_text(), &config, &[("FAKE_RKLLM_TOKEN_MS", "5")]);
        let server = &board.server;

        // 1. `abort`.
        let started = server
            .ok("run", json!({"prompt": "one", "stream": true}))
            .await;
        let stream_id = started["stream_id"].as_str().unwrap();
        server.wait_state(stream_id, "active").await;
        server.ok("abort", json!({"stream_id": stream_id})).await;
        board.wait_event("abort running=1", 0).await;
        board.wait_event("aborted", 0).await;

        // 2. A closed WebSocket.
        let mut ws = Ws::connect(server).await;
        let (_, mut notes) = ws.start_stream(json!({"prompt": "two"})).await;
        while notes.is_empty() {
            notes.push(ws.recv().await);
        }
        ws.close().await;
        board.wait_event("abort running=1", 1).await;
        board.wait_event("aborted", 1).await;

        // 3. Expiry: nobody polls this stream.
        let started = server
            .ok("run", json!({"prompt": "three", "stream": true}))
            .await;
        board.wait_event("abort running=1", 2).await;
        board.wait_event("aborted", 2).await;
        let code = server
            .error_code("stream_status", json!({"stream_id": started["stream_id"]}))
            .await;
        assert_eq!(code, -32005, "{abi}");

        // The handle serves the next request in full.
        let next = server
            .ok("run", json!({"prompt": "after", "max_tokens": 8}))
            .await;
        assert_eq!(next["finish_reason"], "length", "{abi}");
        assert!(
            !board.log().contains("concurrent-run-refused"),
            "{}",
            board.log()
        );
    }
}

#[tokio::test]
async fn every_after_abort_behaviour_of_the_runtime_ends_the_stream_cleanly() {
    for after in ["none", "finish", "error"] {
        for (fake, abi) in ABIS {
            let env = [
                ("FAKE_RKLLM_TOKEN_MS", "5"),
                ("FAKE_RKLLM_ABORT_DELAY_MS", "50"),
                ("FAKE_RKLLM_AFTER_ABORT", after),
            ];
            let board = Board::start(fake, &long_text(), &mock_config(0.0, 0, ""), &env);
            let server = &board.server;
            let started = server
                .ok("run", json!({"prompt": "x", "stream": true}))
                .await;
            let stream_id = started["stream_id"].as_str().unwrap();
            server.wait_state(stream_id, "active").await;
            server.ok("abort", json!({"stream_id": stream_id})).await;
            let chunks = server.poll_to_end(stream_id).await;
            check_chunks(&chunks);
            assert_eq!(
                chunks.last().unwrap()["finish_reason"],
                "abort",
                "{abi} after={after}"
            );
            board.wait_event("aborted", 0).await;
            let next = server
                .ok("run", json!({"prompt": "y", "max_tokens": 5}))
                .await;
            assert_eq!(
                next["finish_reason"], "length",
                "{abi} after={after}: {next}"
            );
            assert_eq!(next["usage"]["completion_tokens"], 5);
        }
    }
}

#[tokio::test]
async fn a_runtime_error_ends_the_stream_with_an_error_chunk_and_the_next_request_works() {
    for (fake, abi) in ABIS {
        let board = Board::start(fake, TEXT, &mock_config(0.0, 0, ""), &[]);
        let server = &board.server;
        let started = server
            .ok(
                "run",
                json!({"prompt": "boom @fake-error=4", "stream": true}),
            )
            .await;
        let chunks = server
            .poll_to_end(started["stream_id"].as_str().unwrap())
            .await;
        let partial = check_chunks(&chunks);
        let end = chunks.last().unwrap();
        assert_eq!(end["finish_reason"], "error", "{abi}: {end}");
        assert_eq!(end["error"]["code"], -32004);
        assert!(TEXT.starts_with(&partial), "{abi}: {partial:?}");
        let failed = server
            .call("run", json!({"prompt": "again @fake-error=0"}))
            .await;
        assert_eq!(failed["error"]["code"], -32004, "{abi}: {failed}");
        let next = server.ok("run", json!({"prompt": "fine"})).await;
        assert_eq!(next["text"], TEXT, "{abi}");
    }
}

#[tokio::test]
async fn token_caps_and_sampling_reach_the_runtime_as_each_abi_allows() {
    for (fake, abi) in ABIS {
        let board = Board::start(fake, TEXT, &mock_config(0.0, 0, ""), &[]);
        let server = &board.server;
        let sampled = json!({"prompt": "cap", "max_tokens": 6, "temperature": 0.3, "top_k": 5});
        let capped = if fake == Fake::V1_3 {
            server.ok("run", sampled).await
        } else {
            // Sampling is fixed at init on 1.2.x: a per-run value is
            // refused, naming it, never dropped in silence.
            let refused = server.call("run", sampled).await;
            assert_eq!(refused["error"]["code"], -32602, "{abi}: {refused}");
            let message = refused["error"]["message"].as_str().unwrap();
            assert!(message.contains("`temperature`"), "{abi}: {message}");
            server
                .ok("run", json!({"prompt": "cap", "max_tokens": 6}))
                .await
        };
        assert_eq!(capped["finish_reason"], "length", "{abi}: {capped}");
        assert_eq!(capped["usage"]["completion_tokens"], 6, "{abi}: {capped}");
        let text = capped["text"].as_str().unwrap();
        assert!(
            TEXT.starts_with(text) && text.len() < TEXT.len(),
            "{abi}: {text:?}"
        );
        let models = server.ok("models", json!({})).await;
        let overrides: Vec<&str> = models["models"][0]["overrides"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(models["models"][0]["backend"], "rkllm");
        let log = board.log();
        if fake == Fake::V1_3 {
            // A per-run cap and sampling override, handed to the runtime.
            assert!(
                log.contains("max_new_tokens=6 temperature=0.30 top_p=0.90 top_k=5"),
                "{log}"
            );
            assert!(overrides.contains(&"temperature"), "{overrides:?}");
        } else {
            // No per-run fields: the server stops the run with rkllm_abort.
            assert!(log.contains("abort running=1"), "{log}");
            assert!(!overrides.contains(&"temperature"), "{overrides:?}");
        }
        assert!(overrides.contains(&"max_tokens"), "{overrides:?}");
        let init = log.lines().find(|l| l.starts_with("init")).unwrap();
        assert!(
            init.contains("max_context_len=4096") && init.contains("mask=0xf0"),
            "{init}"
        );
    }
}

#[tokio::test]
async fn concurrent_requests_never_run_at_once_on_one_handle() {
    let config = mock_config(0.0, 0, "[engine]\nqueue_len = 32\n");
    let board = Board::start(
        Fake::V1_3,
        TEXT,
        &config,
        &[("FAKE_RKLLM_CALLBACK_THREAD", "1")],
    );
    let server = &board.server;
    let requests =
        (0..20).map(|i| async move { server.ok("run", json!({"prompt": format!("p{i}")})).await });
    for result in futures_util::future::join_all(requests).await {
        assert_eq!(result["text"], TEXT);
    }
    assert_eq!(board.count("finish"), 20);
    assert!(
        !board.log().contains("concurrent-run-refused"),
        "{}",
        board.log()
    );
}

#[tokio::test]
async fn shutdown_destroys_the_handle_and_exits_zero() {
    let mut board = Board::start(Fake::V1_2, TEXT, &mock_config(0.0, 0, ""), &[]);
    board.server.ok("run", json!({"prompt": "hi"})).await;
    board.server.terminate();
    let status = board.server.wait_exit();
    assert!(status.success(), "{status:?}");
    assert_eq!(board.count("destroy"), 1, "{}", board.log());
}

fn model_file(dir: &std::path::Path) -> PathBuf {
    let model = dir.join("m.rkllm");
    std::fs::write(&model, TEXT).unwrap();
    model
}

fn rkllm_args<'a>(runtime: &'a str, model: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--backend", "rkllm", "--runtime", runtime, "--model", model];
    args.extend_from_slice(extra);
    args
}

#[test]
fn start_failures_name_the_cause_and_exit_non_zero() {
    let dir = crate::harness::ScratchDir::new();
    let model = model_file(&dir.0);
    let model = model.to_str().unwrap();
    let v13 = fake_runtime(Fake::V1_3);
    let v13 = v13.to_str().unwrap();
    // (flags, environment, what stderr must name)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, Vec<&'a str>);
    let cases: Vec<Case<'_>> = vec![
        (
            rkllm_args(v13, model, &["--runtime-abi", "1.2"]),
            vec![],
            vec!["--runtime-abi", "1.3.0", v13],
        ),
        (
            rkllm_args("/nonexistent/librkllmrt.so", model, &[]),
            vec![],
            vec!["/nonexistent/librkllmrt.so", "does not exist"],
        ),
        (
            rkllm_args("librkllmrt-absent.so", model, &[]),
            vec![],
            vec!["librkllmrt-absent.so", "cannot load"],
        ),
    ];
    for (args, env, expected) in cases {
        let (code, stderr) = start_failure(&args, &env, None);
        assert_ne!(code, 0, "{args:?}");
        for needle in expected {
            assert!(
                stderr.contains(needle),
                "{args:?}: missing {needle:?} in\n{stderr}"
            );
        }
    }
    let no_abort = fake_runtime(Fake::V1_3WithoutAbort);
    let (code, stderr) = start_failure(
        &rkllm_args(no_abort.to_str().unwrap(), model, &[]),
        &[],
        None,
    );
    assert_ne!(code, 0);
    assert!(
        stderr.contains("rkllm_abort") && stderr.contains("lacks"),
        "{stderr}"
    );
    let unknown = fake_runtime(Fake::UnknownVersion);
    for abi in ["auto", "1.3"] {
        let (code, stderr) = start_failure(
            &rkllm_args(unknown.to_str().unwrap(), model, &["--runtime-abi", abi]),
            &[],
            None,
        );
        assert_ne!(code, 0);
        assert!(
            stderr.contains("9.9.9") && stderr.contains("not support"),
            "{stderr}"
        );
    }
}

/// What a model needs (its file, a runtime that loads it) is the model's
/// own affair: the server starts, lists the model as failed with why, and
/// is not ready only when no model can serve.
#[tokio::test]
async fn a_model_that_cannot_load_is_failed_with_its_reason_and_the_server_starts() {
    let dir = crate::harness::ScratchDir::new();
    let model = model_file(&dir.0);
    let model = model.to_str().unwrap();
    let v13 = fake_runtime(Fake::V1_3);
    let v13 = v13.to_str().unwrap();
    // (flags, environment, what the model's error must name)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, Vec<&'a str>);
    let cases: Vec<Case<'_>> = vec![
        (
            rkllm_args(v13, "/nonexistent/model.rkllm", &[]),
            vec![],
            vec!["/nonexistent/model.rkllm", "does not exist"],
        ),
        (
            rkllm_args(v13, model, &["--preload", "m"]),
            vec![("FAKE_RKLLM_INIT_FAIL", "1")],
            vec!["rkllm_init failed", v13, "1.3.0"],
        ),
    ];
    for (args, env, expected) in cases {
        let server = Server::start_env(&mock_config(0.0, 0, ""), &args, &env);
        let models = server.ok("models", json!({})).await;
        let only = &models["models"][0];
        assert_eq!(only["state"], "failed", "{args:?}: {only}");
        for needle in &expected {
            assert!(
                only["error"].as_str().unwrap().contains(needle),
                "{args:?}: missing {needle:?} in {only}"
            );
        }
        let ready = server
            .send(reqwest::Method::GET, "/ready", None, None)
            .await;
        assert_eq!(ready.status(), 503, "{args:?}");
        let ready: Value = ready.json().await.unwrap();
        assert!(
            ready["reason"].as_str().unwrap().contains(expected[0]),
            "{ready}"
        );
        assert_eq!(
            server.call("run", json!({"prompt": "hi"})).await["error"]["code"],
            -32003
        );
        let health = server
            .send(reqwest::Method::GET, "/health", None, None)
            .await;
        assert_eq!(health.status(), 200);
    }
    // No model at all (an empty store, nothing configured): the server
    // starts and says what to do, rather than exiting.
    let empty = crate::harness::ScratchDir::new();
    let models_dir = empty.0.to_str().unwrap();
    let server = Server::start(
        &mock_config(0.0, 0, ""),
        &[
            "--backend",
            "rkllm",
            "--runtime",
            v13,
            "--models-dir",
            models_dir,
        ],
    );
    let ready = server
        .send(reqwest::Method::GET, "/ready", None, None)
        .await;
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert!(
        ready["reason"].as_str().unwrap().contains("no model"),
        "{ready}"
    );
}

/// On a board: set `RKLLM_TEST_RUNTIME` (librkllmrt.so) and
/// `RKLLM_TEST_MODEL` (a .rkllm file); `scripts/test` then runs this
/// against the real NPU. Elsewhere it is reported as skipped (ignored).
#[tokio::test]
#[ignore = "board test: set RKLLM_TEST_RUNTIME and RKLLM_TEST_MODEL, then run scripts/test"]
async fn a_real_runtime_on_a_board_streams_text() {
    let (Ok(runtime), Ok(model)) = (
        std::env::var("RKLLM_TEST_RUNTIME"),
        std::env::var("RKLLM_TEST_MODEL"),
    ) else {
        panic!("the board test needs RKLLM_TEST_RUNTIME and RKLLM_TEST_MODEL");
    };
    let server = Server::start(&mock_config(0.0, 0, ""), &rkllm_args(&runtime, &model, &[]));
    let whole = server
        .ok(
            "run",
            json!({"prompt": "Say hello in one short sentence.", "max_tokens": 32}),
        )
        .await;
    assert!(!whole["text"].as_str().unwrap().is_empty(), "{whole}");
    let started = server
        .ok(
            "run",
            json!({"prompt": "Count from one to five.", "max_tokens": 32, "stream": true}),
        )
        .await;
    let chunks: Vec<Value> = server
        .poll_to_end(started["stream_id"].as_str().unwrap())
        .await;
    check_chunks(&chunks);
}

#[tokio::test]
async fn a_chat_that_continues_prefills_only_its_new_message_and_others_clear_the_history() {
    let board = Board::start(Fake::V1_3, TEXT, &mock_config(0.0, 0, ""), &[]);
    let server = &board.server;
    let chat = |messages: Value| async move {
        let url = format!("http://{}/v1/chat/completions", server.addr);
        let response = server
            .http
            .post(url)
            .json(&json!({"model": "fake-model", "messages": messages}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()
    };
    let first = chat(json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "first question"}])).await;
    let reply = first["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(reply, TEXT);
    let second = chat(json!([
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "first question"},
        {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}
    ]))
    .await;
    // The fake counts prompt bytes / 4 + 1 prefill tokens: only "and then?" was sent.
    assert_eq!(second["usage"]["prompt_tokens"], 3, "{second}");
    let log = board.log();
    let runs: Vec<&str> = log.lines().filter(|l| l.starts_with("run ")).collect();
    // The first turn sends the whole chat (the fake logs the prompt up to its first newline).
    assert!(
        runs[0].contains("keep_history=1") && runs[0].ends_with("prompt=be brief"),
        "{log}"
    );
    assert!(
        runs[1].contains("keep_history=1") && runs[1].ends_with("prompt=and then?"),
        "{log}"
    );
    let kv: Vec<u32> = log
        .lines()
        .filter_map(|l| {
            l.strip_prefix("finish ")
                .and_then(|r| r.rsplit("kv=").next())
                .and_then(|v| v.parse().ok())
        })
        .collect();
    assert!(
        kv[1] > kv[0],
        "the runtime's cache grew with the kept history: {kv:?}"
    );
    assert!(!log.contains("clear-kv"), "{log}");

    // A chat that does not continue the held one clears the history first.
    chat(json!([{"role": "user", "content": "something else"}])).await;
    assert_eq!(board.count("clear-kv"), 1, "{}", board.log());
    // So does a plain prompt, which runs without history.
    server.ok("run", json!({"prompt": "plain"})).await;
    assert_eq!(board.count("clear-kv"), 2, "{}", board.log());
    assert!(
        board
            .log()
            .lines()
            .rfind(|l| l.starts_with("run "))
            .unwrap()
            .contains("keep_history=0")
    );
}

#[tokio::test]
async fn tools_reach_the_runtime_once_and_its_tool_call_comes_back_parsed() {
    let call = r#"<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>"#;
    let board = Board::start(Fake::V1_2, call, &mock_config(0.0, 0, ""), &[]);
    let server = &board.server;
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let url = format!("http://{}/v1/chat/completions", server.addr);
    for _ in 0..2 {
        let body = json!({"model": "fake-model", "messages": [{"role": "user", "content": "weather?"}], "tools": tools});
        let response: Value = server
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let choice = &response["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{response}");
        assert_eq!(
            choice["message"]["tool_calls"][0]["function"]["name"],
            "get_weather"
        );
        // The arguments as the model wrote them: JSON text of the object.
        let arguments = choice["message"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(arguments).unwrap(),
            json!({"city": "Paris"})
        );
    }
    assert_eq!(
        board.count("set-function-tools"),
        1,
        "set once while the tools stay the same: {}",
        board.log()
    );
    assert!(board.log().contains("tag=tool_response"), "{}", board.log());
}

#[tokio::test]
async fn a_server_side_template_renders_the_chat_and_stops_at_its_stop_string() {
    // The fake "generates" its model file: a reply, ChatML's end marker (split
    // across 3-byte tokens), then text that must never be shown.
    let text = "Bonjour 東京!<|im_end|><|im_start|>user\nleaked";
    let config = format!("chat_template = \"chatml\"\n{}", mock_config(0.0, 0, ""));
    let board = Board::start(Fake::V1_3, text, &config, &[]);
    let server = &board.server;
    let log = board.log();
    assert!(
        log.contains("set-chat-template system=[] prefix=[] postfix=[]"),
        "the runtime's template is off: {log}"
    );
    let url = format!("http://{}/v1/chat/completions", server.addr);
    let body = json!({"model": "fake-model", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]});
    let whole: Value = server
        .http
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        whole["choices"][0]["message"]["content"], "Bonjour 東京!",
        "{whole}"
    );
    assert_eq!(whole["choices"][0]["finish_reason"], "stop");
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let events = server
        .http
        .post(&url)
        .json(&streaming)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let content: String = events
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(content, "Bonjour 東京!", "{events}");
    let log = board.log();
    assert!(
        log.contains("prompt=<|im_start|>system"),
        "the server rendered the chat: {log}"
    );
    assert!(
        log.contains("aborted"),
        "the runtime was stopped at the stop string: {log}"
    );
}

#[tokio::test]
async fn mirostat_reaches_the_runtime_per_run_on_1_3_and_is_refused_on_1_2() {
    for (fake, abi) in ABIS {
        let board = Board::start(fake, TEXT, &mock_config(0.0, 0, ""), &[]);
        let server = &board.server;
        let body = json!({"model": "fake-model", "prompt": "m", "stream": false,
                          "options": {"num_predict": 3, "mirostat": 2, "mirostat_tau": 4.5,
                                      "mirostat_eta": 0.2}});
        let response = server
            .send(reqwest::Method::POST, "/api/generate", Some(body), None)
            .await;
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap();
        if fake == Fake::V1_3 {
            assert_eq!(status, 200, "{abi}: {answer}");
            let log = board.log();
            assert!(
                log.contains("mirostat=2 mirostat_tau=4.50 mirostat_eta=0.20"),
                "{log}"
            );
        } else {
            assert_eq!(status, 400, "{abi}: {answer}");
            let error = answer["error"].as_str().unwrap();
            assert!(error.contains("`mirostat`"), "{abi}: {error}");
        }
    }
}

#[tokio::test]
async fn num_ctx_above_the_loaded_context_is_clamped_to_it_and_below_it_bounds_the_answer() {
    let board = Board::start(Fake::V1_3, TEXT, &mock_config(0.0, 0, ""), &[]);
    let server = &board.server;
    let ask = |num_ctx: u64| {
        json!({"model": "fake-model", "prompt": "hi", "stream": false,
               "options": {"num_ctx": num_ctx}})
    };
    // Above the model's context (Continue sends 8192 by default): run in
    // the model's context, as Ollama does.
    let response = server
        .send(
            reqwest::Method::POST,
            "/api/generate",
            Some(ask(8192)),
            None,
        )
        .await;
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["done"], true, "{answer}");
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("clamped to the model's 4096 tokens")),
        "{:?}",
        server.log()
    );
    // The model was loaded once, with the configured context, and not
    // loaded again for the request.
    let log = board.log();
    let inits: Vec<&str> = log.lines().filter(|l| l.starts_with("init")).collect();
    assert_eq!(inits.len(), 1, "{log}");
    assert!(inits[0].contains("max_context_len=4096"), "{}", inits[0]);
    // A smaller window: the answer ends where the window is full.
    let response = server
        .send(reqwest::Method::POST, "/api/generate", Some(ask(8)), None)
        .await;
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["done_reason"], "length", "{answer}");
    let generated = answer["eval_count"].as_u64().unwrap();
    assert!((1..8).contains(&generated), "{answer}");
}

#[tokio::test]
async fn a_seed_the_runtimes_sampler_cannot_keep_is_refused_and_greedy_runs_take_it() {
    let board = Board::start(Fake::V1_3, TEXT, &mock_config(0.0, 0, ""), &[]);
    let server = &board.server;
    let ask = |path: &'static str, body: Value| {
        server.send(reqwest::Method::POST, path, Some(body), None)
    };
    // At the model's temperature (0.8 unless configured) the runtime
    // samples with a seed of its own: the same seed would not give the
    // same text, so it is refused, naming the field and the way out.
    for (path, body) in [
        (
            "/api/generate",
            json!({"model": "fake-model", "prompt": "hi", "stream": false,
                   "options": {"seed": 7}}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                   "seed": 7, "temperature": 0.7}),
        ),
    ] {
        let response = ask(path, body).await;
        assert_eq!(response.status().as_u16(), 400, "{path}");
        let text = response.text().await.unwrap();
        assert!(
            text.contains("seed") && text.contains("temperature"),
            "{path}: {text}"
        );
    }
    // Greedy: the same prompt gives the same text, seed or not.
    let greedy = json!({"model": "fake-model", "prompt": "hi", "stream": false,
                        "options": {"seed": 7, "temperature": 0}});
    let response = ask("/api/generate", greedy).await;
    assert_eq!(response.status().as_u16(), 200);
    // `-1` is Ollama's and llama.cpp's "no seed".
    let unseeded = json!({"model": "fake-model", "prompt": "hi", "stream": false,
                          "options": {"seed": -1}});
    assert_eq!(ask("/api/generate", unseeded).await.status().as_u16(), 200);
}
