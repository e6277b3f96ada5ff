//! Models in runner processes: crashes, kills and stalls end only the
//! affected stream, queued requests are served after the restart, models
//! load on demand, unload when idle or evicted, and a crash loop marks a
//! model failed. Real processes throughout: the server, its runners, and
//! for the `rkllm` backend the C test double of the runtime (both ABIs).

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{
    Fake, LIVENESS, ScratchDir, Server, Ws, check_chunks, fake_runtime, mock_config,
};

/// A mock server whose models run in runner processes.
fn mock_in_runners(tokens_per_second: f64, engine: &str, models: &str) -> Server {
    let config = mock_config(
        tokens_per_second,
        0,
        &format!("runner = \"process\"\n[engine]\n{engine}\n{models}"),
    );
    Server::start(&config, &[])
}

/// A server on the runtime test double whose model `NAME.rkllm` holds
/// `text` (what the double "generates"), with `extra` flags and `env`.
/// The scratch folder must outlive the server.
fn on_fake_runtime(
    fake: Fake,
    name: &str,
    text: &str,
    config: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Server, ScratchDir) {
    let dir = ScratchDir::new();
    let model_path = dir.0.join(format!("{name}.rkllm"));
    std::fs::write(&model_path, text).unwrap();
    let runtime = fake_runtime(fake);
    let mut args = vec![
        "--backend",
        "rkllm",
        "--runtime",
        runtime.to_str().unwrap(),
        "--model",
        model_path.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (Server::start_env(config, &args, env), dir)
}

async fn models(server: &Server) -> Vec<Value> {
    server.ok("models", json!({})).await["models"]
        .as_array()
        .unwrap()
        .clone()
}

async fn model(server: &Server, name: &str) -> Value {
    models(server)
        .await
        .into_iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no model {name}"))
}

/// Waits (bounded) until `name` is in `state`.
async fn wait_model_state(server: &Server, name: &str, state: &str) -> Value {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let m = model(server, name).await;
        if m["state"] == state {
            return m;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "model {name} never became {state}: {m}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn health_ok(server: &Server) {
    let status = server
        .send(reqwest::Method::GET, "/health", None, None)
        .await
        .status();
    assert_eq!(status, 200);
}

fn process_exists(pid: u64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Starts a polled stream and returns its id.
async fn start_polled(server: &Server, prompt: &str) -> String {
    server
        .ok("run", json!({"prompt": prompt, "stream": true}))
        .await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn assert_error_end(chunks: &[Value], needle: &str) {
    check_chunks(chunks);
    let end = chunks.last().unwrap();
    assert_eq!(end["finish_reason"], "error", "{end}");
    assert_eq!(end["error"]["code"], -32004, "{end}");
    let message = end["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{needle:?} not in {end}");
}

/// Text of a polled stream that must end normally.
async fn polled_text(server: &Server, stream_id: &str) -> String {
    let chunks = server.poll_to_end(stream_id).await;
    let text = check_chunks(&chunks);
    assert_eq!(chunks.last().unwrap()["finish_reason"], "stop");
    text
}

const CRASH: &str = "crash @mock(length=400, crash_after=20)";

#[tokio::test]
async fn a_crash_ends_the_stream_on_every_transport_and_the_waiting_request_is_served() {
    let server = mock_in_runners(200.0, "max_crashes = 100", "");
    let waiting_prompts: Vec<String> = (0..4).map(|i| format!("waiting {i}")).collect();
    // The texts the waiting requests must get, from a healthy runner.
    let mut expected = Vec::new();
    for prompt in &waiting_prompts {
        expected.push(server.ok("run", json!({"prompt": prompt})).await["text"].clone());
    }
    let first_pid = model(&server, "mock").await["runner_pids"][0].clone();

    // WebSocket push.
    let mut ws = Ws::connect(&server).await;
    let (crashed, notes) = ws.start_stream(json!({"prompt": CRASH})).await;
    let waiting = start_polled(&server, &waiting_prompts[0]).await;
    assert_error_end(
        &ws.chunks_to_end(&crashed, notes).await,
        "runtime crashed: SIGABRT",
    );
    health_ok(&server).await;
    assert_eq!(polled_text(&server, &waiting).await, expected[0]);
    ws.close().await;

    // HTTP polling.
    let crashed = start_polled(&server, CRASH).await;
    let waiting = start_polled(&server, &waiting_prompts[1]).await;
    assert_error_end(
        &server.poll_to_end(&crashed).await,
        "runtime crashed: SIGABRT",
    );
    health_ok(&server).await;
    assert_eq!(polled_text(&server, &waiting).await, expected[1]);

    // OpenAI SSE: the crash arrives as an error event.
    let sse = server
        .send(
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(json!({"model": "mock", "stream": true,
                      "messages": [{"role": "user", "content": CRASH}]})),
            None,
        )
        .await;
    assert_eq!(sse.status(), 200);
    let waiting = start_polled(&server, &waiting_prompts[2]).await;
    let body = sse.text().await.unwrap();
    let error_event = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v.get("error").is_some())
        .unwrap_or_else(|| panic!("no error event in {body}"));
    assert!(
        error_event["error"]["message"]
            .as_str()
            .unwrap()
            .contains("runtime crashed: SIGABRT"),
        "{error_event}"
    );
    health_ok(&server).await;
    assert_eq!(polled_text(&server, &waiting).await, expected[2]);

    // Ollama NDJSON: the last line is the error.
    let ndjson = server
        .send(
            reqwest::Method::POST,
            "/api/generate",
            Some(json!({"model": "mock", "prompt": CRASH})),
            None,
        )
        .await;
    assert_eq!(ndjson.status(), 200);
    let waiting = start_polled(&server, &waiting_prompts[3]).await;
    let body = ndjson.text().await.unwrap();
    let last: Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .contains("runtime crashed: SIGABRT"),
        "{body}"
    );
    assert_eq!(polled_text(&server, &waiting).await, expected[3]);

    // MCP: the tool call is an error result naming the cause.
    let called = server
        .ok(
            "tools/call",
            json!({"name": "generate", "arguments": {"prompt": CRASH}}),
        )
        .await;
    assert_eq!(called["isError"], true, "{called}");
    assert!(
        called["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("runtime crashed: SIGABRT"),
        "{called}"
    );

    assert_eq!(
        server.ok("run", json!({"prompt": "after"})).await["finish_reason"],
        "stop"
    );

    // Five crashes, five restarts; the server itself never went down, and
    // the runner's last words reached the log.
    let now = model(&server, "mock").await;
    assert_eq!(now["state"], "loaded");
    assert_ne!(now["runner_pids"][0], first_pid);
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains("rkllm_runner_crashes_total{model=\"mock\"} 5"),
        "{metrics}"
    );
    let log = server.log().join("\n");
    assert!(log.contains("aborting after 20 tokens"), "{log}");
}

/// Whether a process is alive (a zombie waiting to be reaped is not).
fn process_alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = stat.rsplit_once(')')?.1;
            after.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// The children of a process, found by the parent pid in every process's
/// `stat` (`/proc/PID/task/TID/children` needs a kernel option that not every
/// machine has).
fn children_of(pid: u64) -> Vec<u64> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten() {
        let Ok(entry) = entry else { continue };
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The name in parentheses may hold spaces: the fields after its last ')'
        // are the state, then the parent pid.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u64>().ok())
            == Some(pid)
        {
            children.push(child);
        }
    }
    children
}

#[tokio::test]
async fn a_hung_runner_behind_a_forking_prefix_dies_with_a_sigkilled_server() {
    let config = mock_config(100.0, 0, "runner = \"process\"\n");
    // The forking wrapper goes first; under an emulator the runner's own
    // prefix (which the harness gives as RKLLM_SERVER_RUNNER_PREFIX) after it.
    let emulator = std::env::var("RKLLM_E2E_RUNNER").unwrap_or_default();
    let prefix = format!("timeout 100000 {}", emulator.trim());
    let mut server = Server::start_env(
        &config,
        &[],
        &[("RKLLM_SERVER_RUNNER_PREFIX", prefix.trim())],
    );
    let hung = start_polled(&server, "hang @mock(length=100, stall_after=3)").await;
    server.wait_state(&hung, "active").await;
    let wrapper = model(&server, "mock").await["runner_pids"][0]
        .as_u64()
        .unwrap();
    let runners = children_of(wrapper);
    assert_eq!(runners.len(), 1, "timeout forks the runner: {runners:?}");
    let runner = runners[0];
    assert!(process_alive(wrapper) && process_alive(runner));
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let _ = server.wait_exit();
    let deadline = std::time::Instant::now() + crate::harness::LIVENESS;
    while process_alive(wrapper) || process_alive(runner) {
        assert!(
            std::time::Instant::now() < deadline,
            "wrapper {wrapper} or runner {runner} outlived the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_runner_killed_with_sigkill_ends_its_stream_and_the_model_comes_back() {
    let server = mock_in_runners(100.0, "", "");
    let long = start_polled(&server, "long @mock(length=5000)").await;
    server.wait_state(&long, "active").await;
    let pid = model(&server, "mock").await["runner_pids"][0]
        .as_u64()
        .unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_error_end(&server.poll_to_end(&long).await, "runtime crashed: SIGKILL");
    health_ok(&server).await;
    let next = server.ok("run", json!({"prompt": "after the kill"})).await;
    assert_eq!(next["finish_reason"], "stop");
    assert!(!process_exists(pid), "the killed runner was reaped");
}

#[tokio::test]
async fn a_runner_that_dies_while_idle_is_noticed_and_replaced() {
    let server = mock_in_runners(0.0, "", "");
    server.ok("run", json!({"prompt": "load it"})).await;
    let pid = model(&server, "mock").await["runner_pids"][0]
        .as_u64()
        .unwrap();
    std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    wait_model_state(&server, "mock", "available").await;
    let next = server
        .ok("run", json!({"prompt": "served by a new runner"}))
        .await;
    assert_eq!(next["finish_reason"], "stop");
    let now = model(&server, "mock").await;
    assert_ne!(now["runner_pids"][0].as_u64(), Some(pid));
}

#[tokio::test]
async fn a_stalled_generation_is_killed_after_the_stall_timeout() {
    let server = mock_in_runners(0.0, "stall_timeout_secs = 1", "");
    let stalled = start_polled(&server, "stall @mock(length=50, stall_after=5)").await;
    let waiting = start_polled(&server, "next in line").await;
    let chunks = server.poll_to_end(&stalled).await;
    assert_error_end(&chunks, "runtime stalled");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 5);
    assert!(!polled_text(&server, &waiting).await.is_empty());
}

#[tokio::test]
async fn crash_directives_are_refused_when_models_run_in_the_server() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let response = server.call("run", json!({"prompt": CRASH})).await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("runner = \"process\""),
        "{response}"
    );
}

#[tokio::test]
async fn models_load_on_demand_and_unload_after_keep_alive() {
    let server = mock_in_runners(0.0, "keep_alive_secs = 1", "");
    let before = model(&server, "mock").await;
    assert_eq!(before["state"], "available");
    assert_eq!(before["loaded"], false);
    assert!(before.get("runner_pids").is_none(), "{before}");
    let ps = server.get_json("/api/ps", None).await;
    assert_eq!(ps["models"], json!([]));

    server.ok("run", json!({"prompt": "first"})).await;
    let loaded = model(&server, "mock").await;
    assert_eq!(loaded["state"], "loaded", "{loaded}");
    let pid = loaded["runner_pids"][0].as_u64().unwrap();
    assert!(process_exists(pid));
    assert!(loaded["memory_bytes"].as_u64().unwrap() > 0, "{loaded}");
    let ps = server.get_json("/api/ps", None).await;
    assert_eq!(ps["models"][0]["name"], "mock", "{ps}");
    // The runner's memory is a metric.
    let metrics = server.metrics_text().await;
    let memory: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("rkllm_runner_memory_bytes{model=\"mock\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(memory > 0, "{metrics}");
    assert!(ps["models"][0]["expires_at"].is_string(), "{ps}");

    // Idle for keep_alive_secs: unloaded, and its runner is gone.
    wait_model_state(&server, "mock", "available").await;
    assert!(!process_exists(pid));
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains("rkllm_model_unloads_total{model=\"mock\",reason=\"idle\"} 1"),
        "{metrics}"
    );
    // And the next request loads it again.
    assert_eq!(
        server.ok("run", json!({"prompt": "again"})).await["finish_reason"],
        "stop"
    );
}

const TWO_MODELS: &str = "[[models]]\nname = \"a\"\n[[models]]\nname = \"b\"\n";
const THREE_MODELS: &str =
    "[[models]]\nname = \"a\"\n[[models]]\nname = \"b\"\n[[models]]\nname = \"c\"\n";

#[tokio::test]
async fn the_least_recently_used_idle_model_is_evicted() {
    let server = mock_in_runners(0.0, "max_loaded_models = 2", THREE_MODELS);
    for name in ["a", "b", "a"] {
        server
            .ok("run", json!({"prompt": "hi", "model": name}))
            .await;
    }
    let b_pid = model(&server, "b").await["runner_pids"][0]
        .as_u64()
        .unwrap();
    server
        .ok("run", json!({"prompt": "hi", "model": "c"}))
        .await;
    let states: Vec<(Value, Value)> = models(&server)
        .await
        .into_iter()
        .map(|m| (m["name"].clone(), m["state"].clone()))
        .collect();
    assert_eq!(
        states,
        vec![
            (json!("a"), json!("loaded")),
            (json!("b"), json!("available")),
            (json!("c"), json!("loaded")),
        ],
        "{}",
        server.log().join("\n")
    );
    assert!(!process_exists(b_pid));
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains("rkllm_model_unloads_total{model=\"b\",reason=\"evicted\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn with_one_place_a_second_model_waits_for_the_busy_one_to_finish() {
    let server = mock_in_runners(100.0, "max_loaded_models = 1", TWO_MODELS);
    let busy = start_polled(&server, "long @mock(length=60)").await;
    server.wait_state(&busy, "active").await;
    let other = server
        .ok(
            "run",
            json!({"prompt": "other", "model": "b", "stream": true}),
        )
        .await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // `b` cannot load while `a` generates: its request waits, and `a`'s
    // stream is not cut.
    let status = server
        .ok("stream_status", json!({"stream_id": other}))
        .await;
    assert_eq!(status["state"], "queued", "{status}");
    // In its queue, or out of it (0) waiting for the place.
    assert!(
        status["queue_position"].as_u64().is_some_and(|p| p <= 1),
        "{status}"
    );
    let busy_chunks = server.poll_to_end(&busy).await;
    check_chunks(&busy_chunks);
    assert_eq!(busy_chunks.last().unwrap()["finish_reason"], "stop");
    assert_eq!(
        busy_chunks.last().unwrap()["usage"]["completion_tokens"],
        60
    );
    assert!(!polled_text(&server, &other).await.is_empty());
    assert_eq!(model(&server, "a").await["state"], "available");
    assert_eq!(model(&server, "b").await["state"], "loaded");
}

#[tokio::test]
async fn preloaded_models_are_loaded_before_the_server_answers() {
    let server = mock_in_runners(0.0, "preload = [\"b\"]", TWO_MODELS);
    assert_eq!(model(&server, "a").await["state"], "available");
    let b = model(&server, "b").await;
    assert_eq!(b["state"], "loaded", "{b}");
    assert!(b["runner_pids"][0].as_u64().is_some());
}

#[tokio::test]
async fn a_crash_loop_marks_the_model_failed_until_an_explicit_load() {
    let server = mock_in_runners(0.0, "max_crashes = 2\ncrash_window_secs = 600", "");
    for _ in 0..2 {
        let response = server.call("run", json!({"prompt": CRASH})).await;
        assert_eq!(response["error"]["code"], -32004, "{response}");
    }
    let failed = wait_model_state(&server, "mock", "failed").await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("runtime crashed: SIGABRT"),
        "{failed}"
    );
    let refused = server.call("run", json!({"prompt": "hello"})).await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    let ready = server
        .send(reqwest::Method::GET, "/ready", None, None)
        .await;
    assert_eq!(ready.status(), 503);
    let reason: Value = ready.json().await.unwrap();
    assert!(
        reason["reason"].as_str().unwrap().contains("failed"),
        "{reason}"
    );
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains("rkllm_model_state{model=\"mock\",state=\"failed\"} 1"),
        "{metrics}"
    );
    let ps: Value = server.get_json("/api/ps", None).await;
    assert_eq!(ps["models"], json!([]), "{ps}");
    assert_eq!(ps["failed"][0]["name"], "mock", "{ps}");
    assert!(
        ps["failed"][0]["error"]
            .as_str()
            .unwrap()
            .contains("SIGABRT"),
        "{ps}"
    );
    health_ok(&server).await;

    // An explicit load retries it.
    let loaded = server.ok("load", json!({"model": "mock"})).await;
    assert_eq!(loaded["state"], "loaded", "{loaded}");
    assert_eq!(
        server.ok("run", json!({"prompt": "hello"})).await["finish_reason"],
        "stop"
    );
    let ready = server
        .send(reqwest::Method::GET, "/ready", None, None)
        .await;
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn load_and_unload_methods_need_the_api_key_and_do_what_they_say() {
    let config = mock_config(
        0.0,
        0,
        "runner = \"process\"\n[engine]\nkeep_alive_secs = -1\n",
    );
    let server = Server::start(&config, &["--api-key", "sesame"]);
    let call = |method: &str, params: Value, key: Option<&str>| {
        let mut request = server
            .http
            .post(server.mcp_url())
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    let refused = call("load", json!({"model": "mock"}), None).await.unwrap();
    assert_eq!(refused.status(), 401);
    let loaded: Value = call(
        "load",
        json!({"model": "mock", "keep_alive": "10m"}),
        Some("sesame"),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(loaded["result"]["state"], "loaded", "{loaded}");
    let expires = loaded["result"]["info"]["expires_in_secs"]
        .as_u64()
        .unwrap();
    assert!((590..=600).contains(&expires), "{loaded}");
    let bad: Value = call("load", json!({"keep_alive": "soon"}), Some("sesame"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let unloaded: Value = call("unload", json!({"model": "mock"}), Some("sesame"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            &unloaded["result"]["state"],
            &unloaded["result"]["was_loaded"]
        ),
        (&json!("available"), &json!(true)),
        "{unloaded}"
    );
    let unknown: Value = call("load", json!({"model": "nope"}), Some("sesame"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(unknown["error"]["code"], -32003, "{unknown}");
}

#[tokio::test]
async fn ollama_generate_without_a_prompt_loads_and_with_keep_alive_zero_unloads() {
    let server = mock_in_runners(0.0, "", TWO_MODELS);
    let generate = |body: Value| {
        server
            .http
            .post(format!("http://{}/api/generate", server.addr))
            .json(&body)
            .send()
    };
    let loaded: Value = generate(json!({"model": "b"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(loaded["done_reason"], "load", "{loaded}");
    assert_eq!(model(&server, "b").await["state"], "loaded");
    let unloaded: Value = generate(json!({"model": "b", "keep_alive": 0}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(unloaded["done_reason"], "unload", "{unloaded}");
    assert_eq!(model(&server, "b").await["state"], "available");
    // keep_alive 0 with a prompt: answered, then unloaded.
    let answer = generate(json!({"model": "a", "prompt": "hi", "keep_alive": "0s"}))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(answer.contains("\"done\":true"), "{answer}");
    wait_model_state(&server, "a", "available").await;
    let bad = generate(json!({"model": "a", "prompt": "hi", "keep_alive": "whenever"}))
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

/// The runtime test double in runner processes, both ABIs: an `abort()`
/// and a hang in the runtime end one stream each, and what waits is then
/// served byte for byte.
#[tokio::test]
async fn runtime_crashes_and_hangs_on_the_fake_runtime_spare_the_server_for_both_abis() {
    let text = "Grüße aus 東京 🦀, la réponse est quarante-deux. ".repeat(4);
    for fake in [Fake::V1_3, Fake::V1_2] {
        let (server, _dir) = on_fake_runtime(
            fake,
            "fake-model",
            &text,
            "[engine]\nstall_timeout_secs = 1\nmax_crashes = 10\n",
            &[],
            &[("FAKE_RKLLM_TOKEN_MS", "3")],
        );
        for (prompt, needle) in [
            ("go @fake-crash=10", "runtime crashed: SIGABRT"),
            ("go @fake-hang=10", "runtime stalled"),
        ] {
            let failing = start_polled(&server, prompt).await;
            let waiting = start_polled(&server, "the next request").await;
            assert_error_end(&server.poll_to_end(&failing).await, needle);
            health_ok(&server).await;
            assert_eq!(
                polled_text(&server, &waiting).await,
                text,
                "{fake:?} after {prompt}"
            );
        }
        let log = server.log().join("\n");
        assert!(log.contains("GGML_ASSERT failed (fake)"), "{log}");
    }
}

#[tokio::test]
async fn shutdown_stops_runners_and_a_lingering_one_gets_sigterm() {
    // A runtime that takes a minute to free its model: after the pipe
    // closes and the grace passes, the server sends SIGTERM.
    let (mut server, _dir) = on_fake_runtime(
        Fake::V1_3,
        "slow",
        "slow to unload",
        "",
        &["--preload", "slow"],
        &[("FAKE_RKLLM_DESTROY_MS", "60000")],
    );
    let pid = model(&server, "slow").await["runner_pids"][0]
        .as_u64()
        .unwrap();
    server.terminate();
    let status = server.wait_exit();
    assert!(status.success(), "{status:?}");
    assert!(!process_exists(pid), "the runner outlived the server");
    let log = server.log().join("\n");
    assert!(
        log.contains("runner did not exit; sending SIGTERM"),
        "{log}"
    );

    // A runner that exits when told needs nothing more.
    let mut server = mock_in_runners(0.0, "preload = [\"mock\"]", "");
    let pid = model(&server, "mock").await["runner_pids"][0]
        .as_u64()
        .unwrap();
    server.terminate();
    let status = server.wait_exit();
    assert!(status.success(), "{status:?}: {}", server.log().join("\n"));
    assert!(!process_exists(pid));
    assert!(!server.log().join("\n").contains("SIGTERM"));
}

/// An abort crosses the pipe to `rkllm_abort` before the runtime produces
/// more than the token it is working on.
#[tokio::test]
async fn an_abort_reaches_the_runtime_in_its_runner_within_one_token() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let logs = ScratchDir::new();
        let log = logs.0.join("fake.log");
        // Slower tokens under an emulator, where everything takes longer.
        let token_ms = if std::env::var_os("RKLLM_E2E_RUNNER").is_some() {
            "250"
        } else {
            "40"
        };
        let (server, _dir) = on_fake_runtime(
            fake,
            "slow",
            &"abcdefghij".repeat(100),
            "",
            &[],
            &[
                ("FAKE_RKLLM_TOKEN_MS", token_ms),
                ("FAKE_RKLLM_TOKEN_BYTES", "1"),
                ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
            ],
        );
        let stream = start_polled(&server, "slowly").await;
        let mut seen = 0;
        let mut from_seq = 0;
        while seen < 5 {
            let polled = server
                .ok(
                    "run",
                    json!({"stream_id": stream, "from_seq": from_seq, "wait_ms": 5000}),
                )
                .await;
            for chunk in polled["chunks"].as_array().unwrap() {
                from_seq = chunk["seq"].as_u64().unwrap() + 1;
                // One ASCII byte per token.
                seen += chunk["delta"].as_str().unwrap().len() as u64;
            }
        }
        server.ok("abort", json!({"stream_id": stream})).await;
        let deadline = tokio::time::Instant::now() + LIVENESS;
        let aborted_at = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(n) = text
                .lines()
                .find_map(|l| l.strip_prefix("aborted tokens="))
                .and_then(|n| n.trim().parse::<u64>().ok())
            {
                break n;
            }
            assert!(tokio::time::Instant::now() < deadline, "no abort: {text}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            aborted_at <= seen + 1,
            "{fake:?}: the runtime stopped at token {aborted_at}, the client had seen {seen}"
        );
    }
}
