//! Untrusted input sent to the real binary: a tokenizer whose ids ask for
//! tables of gigabytes (pulled, named in a pull, configured), chat
//! templates that double a string until memory runs out or loop until the
//! fuel is gone, a pulled template of that kind, JSON schemas whose `$ref`
//! leads only to itself on every API, schemas over `limits.max_schema_bytes`,
//! and many large schemas at once. The server must refuse each with why,
//! keep its process (the same PID, not a zombie), keep answering `/health`
//! and chats, and keep its memory far below what the input asks for.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{LIVENESS, ScratchDir, Server, emulated, mock_config};
use crate::store::{FakeHf, cli_with};

/// The mock's own tokenizer (308 tokens).
fn mock_tokenizer() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/mock-tokenizer.json"),
    )
    .unwrap()
}

/// The mock tokenizer with one added special token whose id is `id`.
fn hostile_tokenizer(id: u64) -> String {
    let mut json: Value = serde_json::from_str(&mock_tokenizer()).unwrap();
    json["added_tokens"].as_array_mut().unwrap().push(json!({
        "id": id, "content": "<|evil|>", "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": false, "special": true
    }));
    json.to_string()
}

/// A template that doubles a string forty times (8 bytes to 8 TiB) and
/// writes only its length: memory grows without any output.
const DOUBLING: &str = "{% set s = namespace(v='xxxxxxxx') %}{% for i in range(40) %}\
                        {% set s.v = s.v ~ s.v %}{% endfor %}{{ s.v|length }}";

/// A template that loops ten billion times, writing nothing.
const BURNER: &str = "{% for a in range(100000) %}{% for b in range(100000) %}\
                      {% set c = b %}{% endfor %}{% endfor %}";

/// A line of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("{key} in {status}"))
        .trim_start_matches(':')
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// The server is the process it was at start, still running (a crash
/// leaves a zombie until the harness reaps it), and answers `/health`.
async fn alive(server: &Server, pid: u32) {
    assert_eq!(server.pid(), pid);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("the server process {pid} is gone: {e}"));
    let state = status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert!(
        !state.starts_with('Z') && !state.starts_with('X'),
        "the server process {pid} ended: {state}"
    );
    let health = server
        .send(reqwest::Method::GET, "/health", None, None)
        .await;
    assert_eq!(health.status(), 200);
}

/// `POST path` with `body`: (status, body as JSON).
async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let response = server
        .send(reqwest::Method::POST, path, Some(body), None)
        .await;
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    let value = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "text": text }));
    (status, value)
}

/// An OpenAI chat of one message to `model`: (status, body).
async fn chat(server: &Server, model: &str) -> (u16, Value) {
    post(
        server,
        "/v1/chat/completions",
        json!({"model": model, "max_tokens": 8,
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await
}

/// A chat to `model` that must be answered.
async fn answered(server: &Server, model: &str) {
    let (status, body) = chat(server, model).await;
    assert_eq!(status, 200, "{model}: {body}");
    assert!(
        body["choices"][0]["message"]["content"].is_string(),
        "{body}"
    );
}

/// An OpenAI chat to `model` whose answer must follow `format`, of at
/// most `max_tokens`.
async fn formatted(server: &Server, model: &str, format: Value, max_tokens: u32) -> (u16, Value) {
    post(
        server,
        "/v1/chat/completions",
        json!({"model": model, "max_tokens": max_tokens, "response_format": format,
               "messages": [{"role": "user", "content": "pick one"}]}),
    )
    .await
}

/// The error message of an OpenAI-shaped answer that must have the status
/// `expected`.
fn openai_error(status: u16, body: &Value, expected: u16) -> String {
    assert_eq!(status, expected, "{body}");
    body["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_owned()
}

/// Waits (bounded) until `check` holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) => assert!(
                tokio::time::Instant::now() < deadline,
                "{what}; last: {last}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_pulled_tokenizer_with_an_id_of_billions_is_refused_with_422_and_nothing_is_stored() {
    let hf = FakeHf::start(&json!({"repos": {
        "acme/evil": {"files": {
            "evil_rk3588.rkllm": {"text": "a model with a hostile tokenizer "},
            "tokenizer.json": {"text": hostile_tokenizer(4_000_000_000)},
        }},
        "acme/evil5m": {"files": {
            "evil5m_rk3588.rkllm": {"text": "a model with a hostile tokenizer "},
            "tokenizer.json": {"text": hostile_tokenizer(5_000_000), "lfs": true},
        }},
        "acme/tiny": {"files": {"tiny_rk3588.rkllm": {"text": "a good model "}}},
        "acme/eviltok": {"files": {"tokenizer.json": {"text": hostile_tokenizer(4_000_000_000)}}},
    }}));
    let dir = ScratchDir::new();
    let models = dir.0.join("models");
    let config = format!(
        "[store]\nplatform = \"rk3588\"\nendpoint = \"{}\"\nmodels_dir = \"{}\"\n",
        hf.endpoint(),
        models.display()
    );
    let server = Server::start(&mock_config(0.0, 0, &config), &[]);
    let pid = server.pid();
    let stored = || -> Vec<String> {
        std::fs::read_dir(&models)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default()
    };

    for (pull, repo, id, name) in [
        (
            json!({"model": "acme/evil", "stream": false}),
            "acme/evil",
            4_000_000_000_u64,
            "evil_rk3588",
        ),
        (
            json!({"model": "acme/evil5m", "stream": false}),
            "acme/evil5m",
            5_000_000,
            "evil5m_rk3588",
        ),
        (
            json!({"model": "acme/tiny", "tokenizer": "acme/eviltok", "stream": false}),
            "acme/eviltok",
            4_000_000_000,
            "tiny_rk3588",
        ),
    ] {
        let (status, body) = post(&server, "/api/pull", pull.clone()).await;
        assert_eq!(status, 422, "{pull}: {body}");
        let error = body["error"].as_str().unwrap_or_else(|| panic!("{body}"));
        eprintln!("{pull}: {status} {error}");
        assert!(
            error.contains(&format!("{repo}: tokenizer.json")),
            "{pull}: {error}"
        );
        assert!(error.contains(&id.to_string()), "{pull}: {error}");
        assert!(error.contains("nothing was stored"), "{pull}: {error}");

        assert!(stored().is_empty(), "{pull}: {:?}", stored());
        let tags = server.get_json("/api/tags", None).await;
        assert!(!tags.to_string().contains(name), "{pull}: {tags}");
        alive(&server, pid).await;
        answered(&server, "mock").await;
    }
    // Nothing left behind in the downloads' folder either.
    let left: Vec<String> = std::fs::read_dir(models.join(".partial"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".lock"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");

    // The store still takes a good pull.
    let (status, body) = post(
        &server,
        "/api/pull",
        json!({"model": "acme/tiny", "stream": false}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stored(), ["tiny_rk3588"]);
    alive(&server, pid).await;
}

#[tokio::test]
async fn a_configured_hostile_tokenizer_fails_its_model_and_the_others_serve() {
    let dir = ScratchDir::new();
    let evil = dir.0.join("evil-tokenizer.json");
    std::fs::write(&evil, hostile_tokenizer(4_000_000_000)).unwrap();
    let good = dir.0.join("good-tokenizer.json");
    std::fs::write(&good, mock_tokenizer()).unwrap();
    let config = format!(
        "[[models]]\nname = \"evil\"\ntokenizer = \"{}\"\n\
         [[models]]\nname = \"good\"\ntokenizer = \"{}\"\n",
        evil.display(),
        good.display()
    );
    let server = Server::start(&mock_config(0.0, 0, &config), &[]);
    let pid = server.pid();
    let path = evil.display().to_string();

    eventually("the model with the hostile tokenizer is failed", || async {
        let models = server.get_json("/v1/models", None).await;
        let entry = models["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == "evil")
            .cloned()
            .unwrap_or_default();
        let error = entry["error"].as_str().unwrap_or_default();
        if entry["state"] == "failed" && error.contains(&path) {
            Ok(())
        } else {
            Err(models.to_string())
        }
    })
    .await;
    let listed = server.ok("models", json!({})).await;
    let evil_entry = listed["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "evil")
        .unwrap_or_else(|| panic!("{listed}"))
        .clone();
    assert_eq!(evil_entry["state"], "failed", "{evil_entry}");
    let error = evil_entry["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("its tokenizer {path}")) && error.contains("4000000000"),
        "{error}"
    );

    let ready: Value = server
        .send(reqwest::Method::GET, "/ready", None, None)
        .await
        .json()
        .await
        .unwrap();
    let failed = ready["failed"]
        .as_array()
        .unwrap_or_else(|| panic!("{ready}"));
    assert!(
        failed
            .iter()
            .any(|f| f["model"] == "evil" && f["error"].as_str().unwrap().contains(&path)),
        "{ready}"
    );
    assert!(!failed.iter().any(|f| f["model"] == "good"), "{ready}");

    // The good model serves, free and constrained.
    answered(&server, "good").await;
    let (status, body) = formatted(&server, "good", json!({"type": "json_object"}), 200).await;
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    let answer: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{content}: {e}"));
    assert!(answer.is_object(), "{content}");

    // The hostile one is refused, free and constrained, and nothing breaks.
    let (status, body) = formatted(&server, "evil", json!({"type": "json_object"}), 200).await;
    eprintln!("a constrained chat to evil: {status} {body}");
    assert!(status >= 400, "{status}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("evil"), "{body}");
    let (status, body) = chat(&server, "evil").await;
    assert!(status >= 400, "{status}: {body}");
    alive(&server, pid).await;
    answered(&server, "good").await;
}

/// Whether a test that grows a template's memory until its bound must
/// skip: under qemu-user the emulator ignores the helper's `RLIMIT_DATA`
/// (it must not bound the emulator itself), so the doubling would take
/// the build machine's memory instead of failing at 256 MiB. On a board
/// the bound is the kernel's.
fn memory_bound_unenforced(test: &str) -> bool {
    if emulated() {
        eprintln!(
            "{test}: skipped under qemu-user, which ignores the sandbox helper's RLIMIT_DATA \
             (the fuel, time and output bounds are tested; the memory bound holds natively)"
        );
        return true;
    }
    false
}

/// A server with a doubling model, a fuel-burning one and a plain one.
fn runaway_server() -> Server {
    let config = format!(
        "[[models]]\nname = \"doubling\"\nchat_template = \"{DOUBLING}\"\n\
         [[models]]\nname = \"burner\"\nchat_template = \"{BURNER}\"\n\
         [[models]]\nname = \"plain\"\n"
    );
    Server::start(&mock_config(0.0, 0, &config), &[])
}

/// The refusal of a chat to a runaway model: a 400 naming the model's
/// chat template and the bound it ran into.
fn runaway_refusal(model: &str, status: u16, body: &Value) {
    let message = openai_error(status, body, 400);
    eprintln!("{model}: {message}");
    assert!(
        message.contains("the model's chat template"),
        "{model}: {message}"
    );
    match model {
        "doubling" => assert!(message.contains("256 MiB of memory"), "{model}: {message}"),
        _ => assert!(message.contains("fuel"), "{model}: {message}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_chat_templates_are_refused_and_the_server_stays_small_and_alive() {
    if memory_bound_unenforced(
        "runaway_chat_templates_are_refused_and_the_server_stays_small_and_alive",
    ) {
        return;
    }
    let server = runaway_server();
    let pid = server.pid();
    for model in ["doubling", "burner"] {
        let started = Instant::now();
        let (status, body) = chat(&server, model).await;
        eprintln!("{model}: refused after {:?}", started.elapsed());
        runaway_refusal(model, status, &body);
        alive(&server, pid).await;
    }
    answered(&server, "plain").await;
    let peak = status_kib(pid, "VmHWM");
    eprintln!(
        "server VmHWM after the runaway templates: {} MiB",
        peak >> 10
    );
    assert!(peak < 500 << 10, "VmHWM {peak} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_runaway_chats_at_once_leave_health_answering_and_each_gets_its_error() {
    if memory_bound_unenforced(
        "eight_runaway_chats_at_once_leave_health_answering_and_each_gets_its_error",
    ) {
        return;
    }
    let server = Arc::new(runaway_server());
    let pid = server.pid();
    let done = Arc::new(AtomicBool::new(false));

    let poller = {
        let server = Arc::clone(&server);
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            let mut during = 0usize;
            while !done.load(Ordering::SeqCst) {
                let started = Instant::now();
                let health = server
                    .send(reqwest::Method::GET, "/health", None, None)
                    .await;
                assert_eq!(health.status(), 200);
                let took = started.elapsed();
                slowest = slowest.max(took);
                if !done.load(Ordering::SeqCst) {
                    during += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (slowest, during)
        })
    };
    let started = Instant::now();
    let chats: Vec<_> = (0..8)
        .map(|i| {
            let server = Arc::clone(&server);
            let model = if i % 2 == 0 { "doubling" } else { "burner" };
            tokio::spawn(async move { (model, chat(&server, model).await) })
        })
        .collect();
    let mut results = Vec::new();
    for chat in chats {
        results.push(chat.await.unwrap());
    }
    done.store(true, Ordering::SeqCst);
    let elapsed = started.elapsed();
    let (slowest, during) = poller.await.unwrap();
    eprintln!(
        "8 runaway chats answered in {elapsed:?}; {during} /health answers meanwhile, \
         the slowest in {slowest:?}"
    );
    for (model, (status, body)) in &results {
        runaway_refusal(model, *status, body);
    }
    assert!(
        during >= 2,
        "only {during} /health answers during the chats"
    );
    alive(&server, pid).await;
    answered(&server, "plain").await;
    let peak = status_kib(pid, "VmHWM");
    eprintln!("server VmHWM after 8 runaway chats: {} MiB", peak >> 10);
    assert!(peak < 500 << 10, "VmHWM {peak} KiB");
}

#[tokio::test]
async fn a_pulled_template_that_runs_away_is_not_recorded_and_says_it_failed_its_test_render() {
    if memory_bound_unenforced(
        "a_pulled_template_that_runs_away_is_not_recorded_and_says_it_failed_its_test_render",
    ) {
        return;
    }
    let hf = FakeHf::start(&json!({"repos": {
        "acme/runaway": {"files": {
            "runaway_rk3588.rkllm": {"text": "a model with a runaway template "},
            "tokenizer.json": {"text": mock_tokenizer()},
            "tokenizer_config.json": {"text": json!({
                "chat_template": DOUBLING,
                "eos_token": "</s>",
            }).to_string()},
        }},
    }}));
    let dir = ScratchDir::new();
    let models = dir.0.join("models");
    let config = format!(
        "[store]\nplatform = \"rk3588\"\nendpoint = \"{}\"\nmodels_dir = \"{}\"\n",
        hf.endpoint(),
        models.display()
    );
    let server = Server::start(&mock_config(0.0, 0, &config), &[]);
    let pid = server.pid();
    let (status, body) = post(
        &server,
        "/api/pull",
        json!({"model": "acme/runaway", "stream": false}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    alive(&server, pid).await;

    let (ok, out, err) = cli_with(&hf, &dir.0, ("", ""), &["show", "runaway_rk3588"], &[]);
    assert!(ok, "{out}{err}");
    let manifest = serde_json::from_str::<Value>(&out).unwrap()["manifest"].clone();
    let tokenizer = &manifest["tokenizer"];
    assert_eq!(tokenizer["tokens"], 308, "{manifest}");
    assert!(tokenizer.get("chat_template").is_none(), "{manifest}");
    let why = tokenizer["chat_template_missing"]
        .as_str()
        .unwrap_or_else(|| panic!("{manifest}"));
    eprintln!("chat_template_missing: {why}");
    assert!(why.contains("failed its test render"), "{why}");
    assert!(why.contains("256 MiB of memory"), "{why}");

    // The model serves with the runtime's own template.
    answered(&server, "runaway_rk3588").await;
    alive(&server, pid).await;
}

/// A schema whose `$ref` leads only to itself, and a pair that lead only
/// to each other.
fn ref_cycles() -> [Value; 2] {
    [
        json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
        json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
               "type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}}),
    ]
}

/// A refusal's message: it names `field`, says what is wrong with the
/// `$ref`, and holds nothing of the parser's state.
fn about_the_cycle(api: &str, field: &str, message: &str) {
    assert!(message.contains(&format!("`{field}`")), "{api}: {message}");
    assert!(
        message.contains("$ref") && message.contains("never to a schema"),
        "{api}: {message}"
    );
    assert!(
        !message.contains("<state>") && !message.contains("Tokens:"),
        "{api}: {message}"
    );
}

#[tokio::test]
async fn a_ref_cycle_is_a_400_naming_the_field_on_every_api_without_the_parsers_state() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let pid = server.pid();
    let hi = json!([{"role": "user", "content": "hi"}]);
    for schema in ref_cycles() {
        // OpenAI chat completions.
        let (status, body) = formatted(
            &server,
            "mock",
            json!({"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}),
            16,
        )
        .await;
        let message = openai_error(status, &body, 400);
        eprintln!("{message}");
        assert_eq!(body["error"]["param"], "response_format", "{body}");
        about_the_cycle("openai", "response_format", &message);

        // OpenAI Responses.
        let (status, body) = post(
            &server,
            "/v1/responses",
            json!({"model": "mock", "input": "hi", "max_output_tokens": 16,
                   "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}}}),
        )
        .await;
        let message = openai_error(status, &body, 400);
        assert_eq!(body["error"]["param"], "text.format", "{body}");
        about_the_cycle("responses", "text.format", &message);

        // Ollama chat and generate.
        for (path, body) in [
            (
                "/api/chat",
                json!({"model": "mock", "stream": false, "format": schema, "messages": hi}),
            ),
            (
                "/api/generate",
                json!({"model": "mock", "stream": false, "format": schema, "prompt": "hi"}),
            ),
        ] {
            let (status, body) = post(&server, path, body).await;
            assert_eq!(status, 400, "{path}: {body}");
            about_the_cycle(path, "format", body["error"].as_str().unwrap());
        }

        // Anthropic messages: a forced tool, and an output format.
        let (status, body) = post(
            &server,
            "/v1/messages",
            json!({"model": "mock", "max_tokens": 16, "messages": hi,
                   "tools": [{"name": "f", "input_schema": schema}],
                   "tool_choice": {"type": "tool", "name": "f"}}),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        about_the_cycle(
            "anthropic tool",
            "tool_choice",
            body["error"]["message"].as_str().unwrap(),
        );
        let (status, body) = post(
            &server,
            "/v1/messages",
            json!({"model": "mock", "max_tokens": 16, "messages": hi,
                   "output_config": {"format": {"type": "json_schema", "schema": schema}}}),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        about_the_cycle(
            "anthropic format",
            "output_config.format",
            body["error"]["message"].as_str().unwrap(),
        );

        // JSON-RPC.
        let response = server
            .call("run", json!({"prompt": "hi", "format": schema}))
            .await;
        assert_eq!(response["error"]["code"], -32602, "{response}");
        assert_eq!(response["error"]["data"]["field"], "format", "{response}");
        about_the_cycle(
            "json-rpc",
            "format",
            response["error"]["message"].as_str().unwrap(),
        );
    }
    // Recursion that can end is served.
    let (status, body) = formatted(
        &server,
        "mock",
        json!({"type": "json_schema", "json_schema": {"name": "n", "schema":
            {"type": "object", "properties": {"child": {"$ref": "#"}}}}}),
        16,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    alive(&server, pid).await;
}

/// An enum of `count` distinct strings, different for each `tag`.
fn enum_schema(tag: &str, count: usize) -> Value {
    let values: Vec<String> = (0..count).map(|i| format!("{tag}-{i:05}-abcdef")).collect();
    json!({"enum": values})
}

#[tokio::test]
async fn a_schema_over_max_schema_bytes_is_a_400_naming_the_field_and_the_setting() {
    let server = Server::start(
        &mock_config(0.0, 0, "[limits]\nmax_schema_bytes = 4096\n"),
        &[],
    );
    let pid = server.pid();
    let big = enum_schema("big", 300);
    assert!(big.to_string().len() > 4096);
    let (status, body) = formatted(
        &server,
        "mock",
        json!({"type": "json_schema", "json_schema": {"name": "n", "schema": big}}),
        16,
    )
    .await;
    let message = openai_error(status, &body, 400);
    assert_eq!(body["error"]["param"], "response_format", "{body}");
    assert!(
        message.contains("the schema of `response_format`")
            && message.contains("more than limits.max_schema_bytes (4096)"),
        "{message}"
    );
    let (status, body) = post(
        &server,
        "/api/chat",
        json!({"model": "mock", "stream": false, "format": big,
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("`format`") && message.contains("limits.max_schema_bytes (4096)"),
        "{message}"
    );
    let (status, body) = post(
        &server,
        "/v1/messages",
        json!({"model": "mock", "max_tokens": 16,
               "messages": [{"role": "user", "content": "hi"}],
               "tools": [{"name": "f", "input_schema":
                   {"type": "object", "properties": {"x": big}}}],
               "tool_choice": {"type": "tool", "name": "f"}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`tool_choice`") && message.contains("limits.max_schema_bytes (4096)"),
        "{message}"
    );
    // One under the bound is served.
    let (status, body) = formatted(
        &server,
        "mock",
        json!({"type": "json_schema", "json_schema":
            {"name": "n", "schema": enum_schema("small", 20)}}),
        16,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    alive(&server, pid).await;
}

/// Enum values in each schema of the memory tests: about 200 KiB as JSON,
/// under the default `limits.max_schema_bytes` (256 KiB).
const ENUM_VALUES: usize = 10_600;

/// How long one of many queued constrained requests may wait for its
/// answer: it waits for every request admitted before it, each compiling
/// its own large schema (two at a time) and then generating, so the wait
/// grows with the queue, and under qemu-user compiling is many times
/// slower than natively (natively all 64 are answered in about 18 s). An
/// upper bound that fails a hung server, not a performance assertion.
fn queue_drain() -> Duration {
    if emulated() {
        LIVENESS * 10
    } else {
        LIVENESS * 2
    }
}

/// A constrained chat to the mock whose answer is one of `tag`'s values:
/// its status.
async fn enum_request(server: &Server, tag: &str) -> u16 {
    let schema = enum_schema(tag, ENUM_VALUES);
    let body = json!({"model": "mock", "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "pick", "schema": schema}},
        "messages": [{"role": "user", "content": "pick one"}]});
    let response = server
        .send_waiting("/v1/chat/completions", body, queue_drain())
        .await;
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    assert!(status == 200 || status == 503, "{status}: {text}");
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_large_schemas_at_once_are_answered_within_bounded_memory() {
    assert!(
        (200_000..256 << 10).contains(&enum_schema("t00", ENUM_VALUES).to_string().len()),
        "{}",
        enum_schema("t00", ENUM_VALUES).to_string().len()
    );
    // Slow enough that admitted requests wait in the queue.
    let server = Arc::new(Server::start(&mock_config(10.0, 50, ""), &[]));
    let pid = server.pid();
    // The server's own size once it has answered a small constrained
    // request: the bounds below are on what the large schemas add to it
    // (under qemu-user the process also holds the emulator and its
    // translated code, over 100 MiB that a board does not have).
    let (status, body) = formatted(
        &server,
        "mock",
        json!({"type": "json_schema", "json_schema":
            {"name": "n", "schema": enum_schema("warm", 20)}}),
        8,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let baseline = status_kib(pid, "VmRSS");
    let started = Instant::now();
    let requests: Vec<_> = (0..64)
        .map(|i| {
            let server = Arc::clone(&server);
            tokio::spawn(async move { enum_request(&server, &format!("t{i:02}")).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(request.await.unwrap());
    }
    let served = statuses.iter().filter(|s| **s == 200).count();
    let busy = statuses.iter().filter(|s| **s == 503).count();
    let peak = status_kib(pid, "VmHWM");
    let rss = status_kib(pid, "VmRSS");
    eprintln!(
        "64 large schemas: {served} answered, {busy} busy, in {:?}; VmRSS before {} MiB, \
         VmHWM {} MiB, VmRSS after {} MiB",
        started.elapsed(),
        baseline >> 10,
        peak >> 10,
        rss >> 10
    );
    assert!(served >= 1, "{statuses:?}");
    assert!(
        peak < baseline + (580 << 10),
        "VmHWM {peak} KiB from {baseline} KiB"
    );
    assert!(
        rss < baseline + (380 << 10),
        "VmRSS {rss} KiB from {baseline} KiB"
    );
    alive(&server, pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_schemas_refused_for_a_full_queue_are_not_compiled_or_kept() {
    let server = Arc::new(Server::start(
        &mock_config(10.0, 0, "[engine]\nqueue_len = 1\n"),
        &[],
    ));
    let pid = server.pid();
    // Fill the queue: a running request and a waiting one, holding it.
    // The second is sent once the first has left the queue for the
    // model's place (until then the queue of one is full with it).
    let hold = json!({"prompt": "hold @mock(prefill_ms=300000)", "stream": true});
    let first = server.ok("run", hold.clone()).await;
    let first = first["stream_id"].as_str().unwrap().to_owned();
    eventually("the first request leaves the queue", || async {
        let status = server
            .ok("stream_status", json!({"stream_id": first}))
            .await;
        match status["state"].as_str() {
            Some("queued") => Err(status.to_string()),
            _ => Ok(()),
        }
    })
    .await;
    let second = server.call("run", hold.clone()).await;
    assert!(second["result"]["stream_id"].is_string(), "{second}");
    let third = server.call("run", hold).await;
    assert_eq!(
        third["error"]["code"], -32002,
        "the queue of one is full: {third}"
    );
    let before = status_kib(pid, "VmRSS");
    let started = Instant::now();
    let requests: Vec<_> = (0..32)
        .map(|i| {
            let server = Arc::clone(&server);
            tokio::spawn(async move { enum_request(&server, &format!("f{i:02}")).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(request.await.unwrap());
    }
    let after = status_kib(pid, "VmRSS");
    eprintln!(
        "32 large schemas to a full queue: statuses {:?} in {:?}; VmRSS {} MiB before, {} MiB after",
        statuses.iter().collect::<std::collections::BTreeSet<_>>(),
        started.elapsed(),
        before >> 10,
        after >> 10
    );
    assert!(statuses.iter().all(|s| *s == 503), "{statuses:?}");
    assert!(
        after <= before + (100 << 10),
        "VmRSS grew from {before} KiB to {after} KiB"
    );
    alive(&server, pid).await;
}
