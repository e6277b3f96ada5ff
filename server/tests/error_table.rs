//! The error table (`service::error`) through each API's routes, in
//! process: the state comes from `startup::build` with the mock backend
//! and every request goes through `app` with `oneshot`, no socket and no
//! binary. For OpenAI (`/v1/chat/completions`), Ollama (`/api/chat`) and
//! JSON-RPC (`POST /mcp` `run`), each refusal is checked for its status
//! or code, the field it names, the API's error shape, and the one
//! `rkllm_rejected_requests_total{reason}` series it counts.
//!
//! The metrics are process-wide, so the tests take turns ([`SERIAL`]) and
//! compare every rejection series before and after each request: a
//! refusal must raise exactly its own label by one, and nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use rkllm_server::metrics::Gauges;
use rkllm_server::{AppState, Config};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Held by each test for its whole run: the rejection counters are
/// shared by every test of this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Upper bound on waiting for a stream to start, so a broken server fails
/// the test instead of hanging it. Not a performance assertion.
const LIVENESS: Duration = Duration::from_secs(60);

/// The API key every server here requires.
const KEY: &str = "error-table-key";
/// `limits.max_prompt_bytes` here.
const MAX_PROMPT_BYTES: usize = 256;
/// `limits.max_request_bytes` here.
const MAX_REQUEST_BYTES: usize = 8192;

/// A mock server's configuration: one model, `mock`, an API key, small
/// prompt and body limits, and an empty model store.
fn config() -> Config {
    let mut config = Config::default();
    config.mock.tokens_per_second = 0.0;
    config.mock.prefill_ms = 0;
    config.api_keys = vec![KEY.to_owned()];
    config.limits.max_prompt_bytes = MAX_PROMPT_BYTES;
    config.limits.max_request_bytes = MAX_REQUEST_BYTES;
    config.store.models_dir =
        Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-store"));
    config.validate().expect("a valid configuration");
    config
}

fn build(config: &Config) -> Arc<AppState> {
    rkllm_server::startup::build(config).expect("the mock backend starts")
}

/// An answer: its status, headers and JSON body (every error is JSON).
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

/// Sends `request` through `app`.
async fn send(state: &Arc<AppState>, request: Request<Body>) -> Answer {
    let what = format!("{} {}", request.method(), request.uri());
    let response = rkllm_server::app(Arc::clone(state))
        .oneshot(request)
        .await
        .expect("the router never fails");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("a whole body");
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|err| {
        panic!(
            "{what}: {} answered a body that is not JSON ({err}): {}",
            parts.status,
            String::from_utf8_lossy(&bytes)
        )
    });
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// A request with a JSON body, and the key unless `key` is false.
fn request(method: Method, path: &str, body: &Value, key: bool) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json");
    if key {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {KEY}"));
    }
    builder.body(Body::from(body.to_string())).unwrap()
}

fn post(path: &str, body: &Value) -> Request<Body> {
    request(Method::POST, path, body, true)
}

/// `POST /mcp` with a `run` request.
fn run(params: &Value) -> Request<Body> {
    post(
        "/mcp",
        &json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": params}),
    )
}

/// Every `rkllm_rejected_requests_total` series, by reason.
fn rejections() -> BTreeMap<String, u64> {
    let text = rkllm_server::metrics::render(Gauges::default()).expect("metrics render");
    text.lines()
        .filter_map(|line| line.strip_prefix("rkllm_rejected_requests_total{reason=\""))
        .map(|rest| {
            let (reason, value) = rest.split_once("\"} ").expect("a labelled counter line");
            (reason.to_owned(), value.trim().parse().expect("a count"))
        })
        .collect()
}

/// Sends `request` and returns its answer with the rejection series that
/// went up, and by how much.
async fn counted(state: &Arc<AppState>, request: Request<Body>) -> (Answer, BTreeMap<String, u64>) {
    let before = rejections();
    let answer = send(state, request).await;
    let raised = rejections()
        .into_iter()
        .filter_map(|(reason, after)| {
            let delta = after - before.get(&reason).copied().unwrap_or(0);
            (delta > 0).then_some((reason, delta))
        })
        .collect();
    (answer, raised)
}

/// The series a refusal labelled `label` raises: that one, by one.
fn one(label: &str) -> BTreeMap<String, u64> {
    BTreeMap::from([(label.to_owned(), 1)])
}

/// OpenAI's error object, checked for its shape:
/// `{"error": {"message", "type", "param", "code"}}` and nothing else.
fn openai_error(answer: &Answer) -> &Value {
    let object = answer.body.as_object().expect("an object");
    assert_eq!(object.len(), 1, "only `error`: {}", answer.body);
    let error = &answer.body["error"];
    let mut fields: Vec<&str> = error
        .as_object()
        .unwrap_or_else(|| panic!("`error` is an object: {}", answer.body))
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        ["code", "message", "param", "type"],
        "{}",
        answer.body
    );
    assert!(
        !error["message"].as_str().unwrap_or_default().is_empty(),
        "{}",
        answer.body
    );
    assert!(error["type"].is_string(), "{}", answer.body);
    error
}

/// Ollama's error message, checked for its shape: `{"error": "…"}`.
fn ollama_error(answer: &Answer) -> &str {
    let object = answer.body.as_object().expect("an object");
    assert_eq!(object.len(), 1, "only `error`: {}", answer.body);
    let message = answer.body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("`error` is a string: {}", answer.body));
    assert!(!message.is_empty(), "{}", answer.body);
    message
}

/// A JSON-RPC error response's error object, checked for its shape: a
/// 2.0 response whose `id` is the request's, or absent when the server
/// answered before it could read the request (never null: MCP allows no
/// null id), and an error with a numeric `code` and a `message`.
fn rpc_error(answer: &Answer) -> &Value {
    assert_eq!(answer.body["jsonrpc"], "2.0", "{}", answer.body);
    assert!(
        answer.body.get("id").is_none_or(|id| !id.is_null()),
        "{}",
        answer.body
    );
    assert!(answer.body.get("result").is_none(), "{}", answer.body);
    let error = &answer.body["error"];
    assert!(error["code"].is_i64(), "{}", answer.body);
    assert!(
        !error["message"].as_str().unwrap_or_default().is_empty(),
        "{}",
        answer.body
    );
    error
}

/// Whether an error object's message contains `text`.
fn says(error: &Value, text: &str) -> bool {
    error["message"].as_str().is_some_and(|m| m.contains(text))
}

/// A header's value as text.
fn header_text(answer: &Answer, name: header::HeaderName) -> &str {
    answer
        .headers
        .get(&name)
        .unwrap_or_else(|| panic!("no {name} header: {answer:?}"))
        .to_str()
        .expect("a text header")
}

/// `Retry-After`, in whole seconds.
fn retry_after_secs(answer: &Answer) -> u64 {
    header_text(answer, header::RETRY_AFTER)
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After in seconds: {answer:?}"))
}

/// A chat message over the prompt limit.
fn too_long() -> String {
    "long ".repeat(MAX_PROMPT_BYTES / 5 + 10)
}

fn chat(extra: &Value) -> Value {
    let mut body = json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]});
    for (key, value) in extra.as_object().expect("an object") {
        body[key] = value.clone();
    }
    body
}

#[tokio::test]
async fn openai_refusals_have_the_tables_status_param_code_and_label() {
    let _turn = SERIAL.lock().await;
    let state = build(&config());
    let path = "/v1/chat/completions";

    let (answer, raised) = counted(&state, post(path, &chat(&json!({"seed": "x"})))).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let error = openai_error(&answer);
    assert_eq!(error["param"], "seed", "{error}");
    assert_eq!(error["type"], "invalid_request_error", "{error}");
    assert_eq!(raised, one("invalid_params"));

    let (answer, raised) = counted(&state, post(path, &chat(&json!({"n": 2})))).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let error = openai_error(&answer);
    assert_eq!(error["param"], "n", "{error}");
    assert_eq!(error["code"], "unsupported_parameter", "{error}");
    assert_eq!(raised, one("unsupported"));

    let long = chat(&json!({"messages": [{"role": "user", "content": too_long()}]}));
    let (answer, raised) = counted(&state, post(path, &long)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let error = openai_error(&answer);
    assert_eq!(error["param"], "messages", "{error}");
    assert_eq!(error["code"], "context_length_exceeded", "{error}");
    assert!(says(error, "limits.max_prompt_bytes"), "{error}");
    assert_eq!(raised, one("too_large"));

    let (answer, raised) = counted(&state, post(path, &chat(&json!({"model": "nope"})))).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{answer:?}");
    let error = openai_error(&answer);
    assert_eq!(error["code"], "model_not_found", "{error}");
    assert_eq!(error["param"], "model", "{error}");
    assert!(says(error, "mock"), "the models there are: {error}");
    assert_eq!(raised, one("model_unavailable"));
}

#[tokio::test]
async fn ollama_refusals_have_the_tables_status_and_label() {
    let _turn = SERIAL.lock().await;
    let state = build(&config());
    let path = "/api/chat";
    let chat = |extra: Value| {
        let mut body = chat(&extra);
        body["stream"] = json!(false);
        body
    };

    let (answer, raised) = counted(
        &state,
        post(path, &chat(json!({"options": {"temperature": "hot"}}))),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let message = ollama_error(&answer);
    assert!(message.contains("`options.temperature`"), "{message}");
    assert_eq!(raised, one("invalid_params"));

    let raw = json!({"model": "mock", "prompt": "hi", "raw": true, "stream": false});
    let (answer, raised) = counted(&state, post("/api/generate", &raw)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let message = ollama_error(&answer);
    assert!(message.contains("`raw`"), "{message}");
    assert_eq!(raised, one("unsupported"));

    let long = chat(json!({"messages": [{"role": "user", "content": too_long()}]}));
    let (answer, raised) = counted(&state, post(path, &long)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let message = ollama_error(&answer);
    assert!(message.contains("limits.max_prompt_bytes"), "{message}");
    assert_eq!(raised, one("too_large"));

    let (answer, raised) = counted(&state, post(path, &chat(json!({"model": "nope"})))).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{answer:?}");
    let message = ollama_error(&answer);
    assert!(
        message.contains("nope") && message.contains("mock"),
        "{message}"
    );
    assert_eq!(raised, one("model_unavailable"));
}

#[tokio::test]
async fn json_rpc_refusals_have_the_tables_code_data_and_label() {
    let _turn = SERIAL.lock().await;
    let state = build(&config());

    let (answer, raised) = counted(&state, run(&json!({"prompt": "hi", "max_tokens": "x"}))).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let error = rpc_error(&answer);
    assert_eq!(error["code"], -32602, "{error}");
    assert_eq!(error["data"]["field"], "max_tokens", "{error}");
    assert_eq!(raised, one("invalid_params"));

    let unfollowable = json!({"type": "object", "$ref": "#/$defs/missing"});
    let (answer, raised) = counted(
        &state,
        run(&json!({"prompt": "hi", "format": unfollowable})),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let error = rpc_error(&answer);
    assert_eq!(error["code"], -32602, "{error}");
    assert_eq!(error["data"]["field"], "format", "{error}");
    assert!(says(error, "cannot be followed"), "{error}");
    assert_eq!(raised, one("invalid_params"));

    let (answer, raised) = counted(&state, run(&json!({"prompt": too_long()}))).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let error = rpc_error(&answer);
    assert_eq!(error["code"], -32007, "{error}");
    assert_eq!(error["data"]["field"], "prompt", "{error}");
    assert!(says(error, "limits.max_prompt_bytes"), "{error}");
    assert_eq!(raised, one("too_large"));

    let (answer, raised) = counted(&state, run(&json!({"prompt": "hi", "model": "nope"}))).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let error = rpc_error(&answer);
    assert_eq!(error["code"], -32003, "{error}");
    assert_eq!(error["data"]["model"], "nope", "{error}");
    assert_eq!(raised, one("model_unavailable"));
}

/// A JSON-RPC call that must succeed: its result.
async fn rpc_ok(state: &Arc<AppState>, method: &str, params: &Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let answer = send(state, post("/mcp", &body)).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert!(
        answer.body.get("error").is_none(),
        "{method}: {}",
        answer.body
    );
    answer.body["result"].clone()
}

/// Starts a long paced generation and waits until it generates.
async fn generating(state: &Arc<AppState>) -> String {
    let slow = json!({"prompt": "slow @mock(length=100000)", "stream": true});
    let started = rpc_ok(state, "run", &slow).await;
    let id = started["stream_id"]
        .as_str()
        .expect("a stream id")
        .to_owned();
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let status = rpc_ok(state, "stream_status", &json!({"stream_id": id})).await;
        if status["state"] == "active" {
            return id;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream never started: {status}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_full_queue_is_503_with_retry_after_on_http_and_32002_on_json_rpc() {
    let _turn = SERIAL.lock().await;
    let mut config = config();
    config.mock.tokens_per_second = 2.0;
    config.engine.queue_len = 1;
    config.validate().expect("a valid configuration");
    let state = build(&config);
    // One generation holds the model's only slot, one more waits: the
    // queue is full.
    let running = generating(&state).await;
    let waiting = rpc_ok(
        &state,
        "run",
        &json!({"prompt": "waits @mock(length=3)", "stream": true}),
    )
    .await;

    let (answer, raised) = counted(&state, post("/v1/chat/completions", &chat(&json!({})))).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
    let error = openai_error(&answer);
    assert_eq!(error["code"], "server_busy", "{error}");
    assert!(retry_after_secs(&answer) >= 1, "{answer:?}");
    assert_eq!(raised, one("busy"));

    let ollama = chat(&json!({"stream": false}));
    let (answer, raised) = counted(&state, post("/api/chat", &ollama)).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
    let message = ollama_error(&answer);
    assert!(message.contains("engine.queue_len"), "{message}");
    assert!(retry_after_secs(&answer) >= 1, "{answer:?}");
    assert_eq!(raised, one("busy"));

    let (answer, raised) = counted(&state, run(&json!({"prompt": "hi"}))).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let error = rpc_error(&answer);
    assert_eq!(error["code"], -32002, "{error}");
    assert!(
        error["data"]["retry_after_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 0),
        "{error}"
    );
    assert_eq!(raised, one("busy"));

    for stream in [&waiting["stream_id"], &json!(running)] {
        rpc_ok(&state, "abort", &json!({"stream_id": stream})).await;
    }
}

/// Anthropic's error object, checked for its shape:
/// `{"type": "error", "error": {"type", "message"}}`.
fn anthropic_error(answer: &Answer) -> &Value {
    assert_eq!(answer.body["type"], "error", "{}", answer.body);
    let error = &answer.body["error"];
    assert!(error["type"].is_string(), "{}", answer.body);
    assert!(
        !error["message"].as_str().unwrap_or_default().is_empty(),
        "{}",
        answer.body
    );
    error
}

#[tokio::test]
async fn anthropic_and_responses_refusals_come_from_the_same_table() {
    let _turn = SERIAL.lock().await;
    let state = build(&config());
    let messages = |extra: Value| {
        let mut body = json!({"model": "mock", "max_tokens": 16,
                              "messages": [{"role": "user", "content": "hi"}]});
        for (key, value) in extra.as_object().expect("an object") {
            body[key] = value.clone();
        }
        body
    };
    let (answer, raised) = counted(
        &state,
        post("/v1/messages", &messages(json!({"max_tokens": 0}))),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    assert_eq!(anthropic_error(&answer)["type"], "invalid_request_error");
    assert_eq!(raised, one("invalid_params"));
    let (answer, raised) = counted(
        &state,
        post("/v1/messages", &messages(json!({"model": "nope"}))),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{answer:?}");
    assert_eq!(anthropic_error(&answer)["type"], "not_found_error");
    assert_eq!(raised, one("model_unavailable"));

    let responses = |extra: Value| {
        let mut body = json!({"model": "mock", "input": "hi"});
        for (key, value) in extra.as_object().expect("an object") {
            body[key] = value.clone();
        }
        body
    };
    let (answer, raised) = counted(
        &state,
        post(
            "/v1/responses",
            &responses(json!({"previous_response_id": "resp_never_made"})),
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let error = openai_error(&answer);
    assert_eq!(error["param"], "previous_response_id", "{error}");
    assert_eq!(raised, one("invalid_params"));
    let (answer, raised) = counted(
        &state,
        post("/v1/responses", &responses(json!({"model": "nope"}))),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{answer:?}");
    assert_eq!(openai_error(&answer)["code"], "model_not_found");
    assert_eq!(raised, one("model_unavailable"));
}

#[tokio::test]
async fn a_full_queue_is_529_overloaded_on_anthropic_and_503_on_responses() {
    let _turn = SERIAL.lock().await;
    let mut config = config();
    config.mock.tokens_per_second = 2.0;
    config.engine.queue_len = 1;
    config.validate().expect("a valid configuration");
    let state = build(&config);
    let running = generating(&state).await;
    let waiting = rpc_ok(
        &state,
        "run",
        &json!({"prompt": "waits @mock(length=3)", "stream": true}),
    )
    .await;

    let body = json!({"model": "mock", "max_tokens": 16,
                      "messages": [{"role": "user", "content": "hi"}]});
    let (answer, raised) = counted(&state, post("/v1/messages", &body)).await;
    assert_eq!(answer.status.as_u16(), 529, "{answer:?}");
    assert_eq!(anthropic_error(&answer)["type"], "overloaded_error");
    assert!(retry_after_secs(&answer) >= 1, "{answer:?}");
    assert_eq!(raised, one("busy"));

    let body = json!({"model": "mock", "input": "hi"});
    let (answer, raised) = counted(&state, post("/v1/responses", &body)).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
    assert_eq!(openai_error(&answer)["code"], "server_busy");
    assert!(retry_after_secs(&answer) >= 1, "{answer:?}");
    assert_eq!(raised, one("busy"));

    for stream in [&waiting["stream_id"], &json!(running)] {
        rpc_ok(&state, "abort", &json!({"stream_id": stream})).await;
    }
}

/// The neutral refusals of one API's routes: `path` is one of its
/// generation routes, `unknown` a path under it that no route serves.
struct Neutrals {
    path: &'static str,
    unknown: &'static str,
    body: Value,
}

impl Neutrals {
    /// The answers to: no key, a cross-site `Origin`, a body over the
    /// limit, a wrong method, an unknown path, each with the series it
    /// raised.
    async fn answers(&self, state: &Arc<AppState>) -> [(Answer, BTreeMap<String, u64>); 5] {
        let no_key = request(Method::POST, self.path, &self.body, false);
        let mut cross_site = post(self.path, &self.body);
        cross_site
            .headers_mut()
            .insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        let large = json!({"padding": "x".repeat(MAX_REQUEST_BYTES)});
        let wrong_method = request(Method::GET, self.path, &Value::Null, true);
        let unknown = request(Method::GET, self.unknown, &Value::Null, true);
        [
            counted(state, no_key).await,
            counted(state, cross_site).await,
            counted(state, post(self.path, &large)).await,
            counted(state, wrong_method).await,
            counted(state, unknown).await,
        ]
    }
}

/// Checks the statuses and headers every API shares.
fn check_statuses(answers: &[(Answer, BTreeMap<String, u64>); 5]) {
    let [no_key, cross_site, large, wrong_method, unknown] = answers;
    assert_eq!(no_key.0.status, StatusCode::UNAUTHORIZED, "{:?}", no_key.0);
    assert_eq!(header_text(&no_key.0, header::WWW_AUTHENTICATE), "Bearer");
    assert_eq!(no_key.1, one("unauthorized"));
    assert_eq!(
        cross_site.0.status,
        StatusCode::FORBIDDEN,
        "{:?}",
        cross_site.0
    );
    assert_eq!(cross_site.1, one("forbidden"));
    assert_eq!(
        large.0.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{:?}",
        large.0
    );
    // Its label: `a_body_over_the_limit_is_counted_as_too_large`.
    assert_eq!(
        wrong_method.0.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "{:?}",
        wrong_method.0
    );
    assert!(
        header_text(&wrong_method.0, header::ALLOW).contains("POST"),
        "{:?}",
        wrong_method.0
    );
    assert_eq!(unknown.0.status, StatusCode::NOT_FOUND, "{:?}", unknown.0);
    // A wrong method or path is not a refused request.
    assert!(wrong_method.1.is_empty(), "{:?}", wrong_method.1);
    assert!(unknown.1.is_empty(), "{:?}", unknown.1);
}

#[tokio::test]
async fn neutral_refusals_come_in_each_apis_own_shape() {
    let _turn = SERIAL.lock().await;
    let state = build(&config());

    let openai = Neutrals {
        path: "/v1/chat/completions",
        unknown: "/v1/nowhere",
        body: chat(&json!({})),
    };
    let answers = openai.answers(&state).await;
    check_statuses(&answers);
    let [no_key, cross_site, large, wrong_method, unknown] = &answers;
    let error = openai_error(&no_key.0);
    assert_eq!(
        (&error["type"], &error["code"]),
        (&json!("authentication_error"), &json!("invalid_api_key")),
        "{error}"
    );
    assert_eq!(openai_error(&cross_site.0)["type"], "permission_error");
    let error = openai_error(&large.0);
    assert!(says(error, "limits.max_request_bytes"), "{error}");
    openai_error(&wrong_method.0);
    assert_eq!(openai_error(&unknown.0)["code"], "not_found");

    let ollama = Neutrals {
        path: "/api/chat",
        unknown: "/api/nowhere",
        body: chat(&json!({"stream": false})),
    };
    let answers = ollama.answers(&state).await;
    check_statuses(&answers);
    let [no_key, cross_site, large, wrong_method, unknown] = &answers;
    assert!(ollama_error(&no_key.0).contains("API key"));
    assert!(ollama_error(&cross_site.0).contains("Origin"));
    assert!(ollama_error(&large.0).contains("limits.max_request_bytes"));
    ollama_error(&wrong_method.0);
    assert!(ollama_error(&unknown.0).contains("/api/nowhere"));

    let rpc = Neutrals {
        path: "/mcp",
        unknown: "/nowhere",
        body: json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": {"prompt": "hi"}}),
    };
    let answers = rpc.answers(&state).await;
    check_statuses(&answers);
    let [no_key, cross_site, large, wrong_method, unknown] = &answers;
    assert_eq!(rpc_error(&no_key.0)["code"], -32008);
    assert_eq!(rpc_error(&cross_site.0)["code"], -32600);
    // Refused before the body was read: no id to give.
    assert!(no_key.0.body.get("id").is_none(), "{}", no_key.0.body);
    let error = rpc_error(&large.0);
    assert_eq!(error["code"], -32007, "{error}");
    assert!(says(error, "limits.max_request_bytes"), "{error}");
    assert_eq!(rpc_error(&wrong_method.0)["code"], -32600);
    assert_eq!(rpc_error(&unknown.0)["code"], -32601);
}

/// A body over `limits.max_request_bytes` is refused before any work, as
/// a WebSocket message over it is (counted `too_large`): each API's 413
/// counts it the same way.
#[tokio::test]
async fn a_body_over_the_limit_is_counted_as_too_large() {
    let _turn = SERIAL.lock().await;
    let state = build(&config());
    let large = json!({"padding": "x".repeat(MAX_REQUEST_BYTES)});
    for path in ["/v1/chat/completions", "/api/chat", "/mcp"] {
        let (answer, raised) = counted(&state, post(path, &large)).await;
        assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE, "{answer:?}");
        assert_eq!(raised, one("too_large"), "{path}");
    }
}
