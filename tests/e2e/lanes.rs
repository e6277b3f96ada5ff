//! The two lanes of a model's queue: interactive requests that arrive
//! after a background request (named so by `X-Rkllm-Priority` or
//! JSON-RPC's `priority`, or a known client's background task such as Open
//! WebUI's title request) go ahead of it until it has aged, each lane is
//! first come first served, the queue's bound counts both, and each lane
//! is counted in the metrics.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{LIVENESS, Server, mock_config};

/// A request that holds the model (in its prefill) until it is aborted.
const LONG: &str = "hold the model @mock(prefill_ms=600000)";

async fn start(server: &Server, prompt: &str, priority: Option<&str>) -> String {
    let mut params = json!({"prompt": format!("{prompt} @mock(length=4)"), "stream": true});
    if let Some(priority) = priority {
        params["priority"] = json!(priority);
    }
    let started = server.ok("run", params).await;
    started["stream_id"].as_str().unwrap().to_owned()
}

async fn status(server: &Server, id: &str) -> Value {
    server.ok("stream_status", json!({"stream_id": id})).await
}

/// The lanes of the generations that have run, in the order they ran
/// (one runner: each starts when the one before has ended), from the
/// `generation` log lines.
fn lanes_run(server: &Server) -> Vec<String> {
    server
        .log()
        .iter()
        .filter(|line| line.contains(" generation "))
        .filter_map(|line| {
            let lane = line.split("lane=\"").nth(1)?;
            Some(lane.split('"').next()?.to_owned())
        })
        .collect()
}

/// Waits (bounded) until `count` generations have been logged; their
/// lanes in the order they ran.
async fn wait_lanes_run(server: &Server, count: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let lanes = lanes_run(server);
        if lanes.len() >= count {
            return lanes;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {count} generations logged: {:?}",
            lanes.len(),
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `rkllm_lane_requests_total{lane}` from the metrics (0 when absent).
async fn lane_count(server: &Server, lane: &str) -> u64 {
    let series = format!("rkllm_lane_requests_total{{lane=\"{lane}\"}} ");
    server
        .metrics_text()
        .await
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn an_interactive_request_arriving_later_starts_before_a_waiting_background_one() {
    let server = Server::start(&mock_config(50.0, 0, "[engine]\nqueue_len = 4\n"), &[]);
    let running = server
        .ok("run", json!({"prompt": LONG, "stream": true}))
        .await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.wait_state(&running, "initializing").await;

    let first_background = start(&server, "background one", Some("background")).await;
    let interactive = start(&server, "interactive one", None).await;
    let second_interactive = start(&server, "interactive two", Some("interactive")).await;
    let second_background = start(&server, "background two", Some("background")).await;
    // Interactive ones first, each lane in order of arrival.
    let order = [
        &interactive,
        &second_interactive,
        &first_background,
        &second_background,
    ];
    for (i, id) in order.iter().enumerate() {
        let status = status(&server, id).await;
        assert_eq!(status["state"], "queued", "{status}");
        assert_eq!(status["queue_position"], json!(i + 1), "{i}: {status}");
    }
    // The bound counts both lanes: a fifth waiting request is refused,
    // whichever lane it asks for.
    for priority in ["interactive", "background"] {
        let refused = server
            .call(
                "run",
                json!({"prompt": "one too many", "stream": true, "priority": priority}),
            )
            .await;
        assert!(refused.get("error").is_some(), "{priority}: {refused}");
    }

    server.ok("abort", json!({"stream_id": running})).await;
    // Watched until all are done: a request never starts while one that
    // comes before it in the order above is still queued.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut states = Vec::new();
        for id in order {
            states.push(
                status(&server, id).await["state"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        for (later, state) in states.iter().enumerate() {
            if state != "queued" {
                assert!(
                    states[..later].iter().all(|s| s != "queued"),
                    "request {later} started before an earlier one: {states:?}"
                );
            }
        }
        if states.iter().all(|s| s == "finished") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{states:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(lane_count(&server, "background").await, 2);
    assert_eq!(lane_count(&server, "interactive").await, 3);
}

#[tokio::test]
async fn a_background_request_never_goes_ahead_of_an_interactive_one_that_came_before_it() {
    let server = Server::start(&mock_config(50.0, 0, "[engine]\nqueue_len = 8\n"), &[]);
    let running = server
        .ok("run", json!({"prompt": LONG, "stream": true}))
        .await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.wait_state(&running, "initializing").await;
    let interactive = start(&server, "waiting person", None).await;
    let background = start(&server, "housekeeping", Some("background")).await;
    assert_eq!(status(&server, &interactive).await["queue_position"], 1);
    assert_eq!(status(&server, &background).await["queue_position"], 2);
    server.ok("abort", json!({"stream_id": running})).await;
    server.wait_state(&background, "finished").await;
    assert_eq!(status(&server, &interactive).await["state"], "finished");
}

#[tokio::test]
async fn a_background_request_under_a_continuous_interactive_load_is_overtaken_at_most_max_overtaken_times()
 {
    const CLIENTS: usize = 4;
    const TURNS: usize = 5;
    const MAX_OVERTAKEN: usize = 2;
    let server = Server::start(
        &mock_config(
            50.0,
            0,
            &format!("[engine]\nqueue_len = 16\nbackground_max_overtaken = {MAX_OVERTAKEN}\n"),
        ),
        &[],
    );
    let running = server
        .ok("run", json!({"prompt": LONG, "stream": true}))
        .await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.wait_state(&running, "initializing").await;
    // Each client's first request is queued before the background one;
    // each sends its next one as soon as its last has ended, so the
    // interactive lane never runs dry.
    let mut first = Vec::new();
    for client in 0..CLIENTS {
        first.push(start(&server, &format!("client {client} turn 0"), None).await);
    }
    let background = start(&server, "a title", Some("background")).await;
    server.ok("abort", json!({"stream_id": running})).await;
    let clients = first.iter().enumerate().map(|(client, id)| {
        let server = &server;
        async move {
            server.wait_state(id, "finished").await;
            for turn in 1..=TURNS {
                // Long enough for the other clients to send their next.
                let prompt = format!("client {client} turn {turn} @mock(length=10)");
                server.ok("run", json!({"prompt": prompt})).await;
            }
        }
    });
    futures_util::future::join_all(clients).await;
    server.wait_state(&background, "finished").await;

    let interactive_runs = CLIENTS * (TURNS + 1);
    let lanes = wait_lanes_run(&server, 1 + interactive_runs + 1).await;
    // The first is the request the queue waited behind.
    let after_hold = &lanes[1..];
    let ahead = after_hold
        .iter()
        .position(|lane| lane == "background")
        .unwrap_or_else(|| panic!("no background run: {lanes:?}"));
    assert!(
        after_hold[..ahead].iter().all(|lane| lane == "interactive"),
        "{lanes:?}"
    );
    // Those queued before it, and at most MAX_OVERTAKEN that came later.
    assert!(
        (CLIENTS..=CLIENTS + MAX_OVERTAKEN).contains(&ahead),
        "{ahead} interactive runs started ahead of it: {lanes:?}"
    );
    // It ran while the interactive load went on.
    assert!(
        ahead < interactive_runs,
        "it ran only when the interactive lane was empty: {lanes:?}"
    );
}

#[tokio::test]
async fn a_background_request_that_has_waited_its_bound_goes_before_later_interactive_ones_and_its_position_says_so()
 {
    let server = Server::start(
        &mock_config(
            200.0,
            0,
            "[engine]\nqueue_len = 8\nbackground_max_wait_secs = 1\nbackground_max_overtaken = 100\n",
        ),
        &[],
    );
    let running = server
        .ok("run", json!({"prompt": LONG, "stream": true}))
        .await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.wait_state(&running, "initializing").await;
    let background = start(&server, "a title", Some("background")).await;
    let interactive = start(&server, "a later question", None).await;
    let second_interactive = start(&server, "another one", None).await;
    // Once it has waited a second it is next, whatever its position was.
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let status = status(&server, &background).await;
        assert_eq!(status["state"], "queued", "{status}");
        if status["queue_position"] == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status(&server, &interactive).await["queue_position"], 2);
    assert_eq!(
        status(&server, &second_interactive).await["queue_position"],
        3
    );
    server.ok("abort", json!({"stream_id": running})).await;
    for id in [&background, &interactive, &second_interactive] {
        server.wait_state(id, "finished").await;
    }
    let lanes = wait_lanes_run(&server, 4).await;
    assert_eq!(
        lanes[1..],
        ["background", "interactive", "interactive"],
        "{lanes:?}"
    );
}

/// Open WebUI's title request as it sends it: its title template filled
/// with the chat's last two messages, as the only user message
/// (shortened guidelines; the template's lines kept).
fn open_webui_title_body() -> Value {
    let content = "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the \
                   chat history.\n### Guidelines:\n- The title should clearly represent the main \
                   theme of the conversation.\n### Output:\nJSON format: { \"title\": \"your \
                   concise title here\" }\n### Chat History:\n<chat_history>\nUSER: How do I bake \
                   bread?\nASSISTANT: Flour, water, salt, yeast; knead, rise, bake.\n</chat_history>";
    json!({
        "model": "mock",
        "messages": [{"role": "user", "content": content}],
        "stream": false,
        "max_tokens": 50,
    })
}

#[tokio::test]
async fn every_http_api_honours_the_priority_header_and_open_webuis_title_request_is_background() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let post = |path: &'static str, body: Value, priority: Option<&'static str>| {
        let server = &server;
        async move {
            let mut request = reqwest::Client::new()
                .post(format!(
                    "{}{path}",
                    server.mcp_url().trim_end_matches("/mcp")
                ))
                .json(&body);
            if let Some(priority) = priority {
                request = request.header("X-Rkllm-Priority", priority);
            }
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let chat = json!({"model": "mock", "messages": [{"role": "user", "content": "Hello"}],
                      "stream": false, "max_tokens": 8});
    let calls: [(&str, Value); 5] = [
        ("/v1/chat/completions", chat.clone()),
        (
            "/v1/completions",
            json!({"model": "mock", "prompt": "Hello", "max_tokens": 8}),
        ),
        ("/api/chat", chat.clone()),
        (
            "/v1/messages",
            json!({"model": "mock", "max_tokens": 8,
                                "messages": [{"role": "user", "content": "Hello"}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "mock", "input": "Hello", "max_output_tokens": 16}),
        ),
    ];
    for (n, (path, body)) in calls.iter().enumerate() {
        let (status, text) = post(path, body.clone(), Some("background")).await;
        assert_eq!(status, 200, "{path}: {text}");
        assert_eq!(
            lane_count(&server, "background").await,
            n as u64 + 1,
            "{path}"
        );
    }
    // Without the header an ordinary chat is interactive; Open WebUI's
    // title request is background, unless it says otherwise.
    let (status, text) = post("/v1/chat/completions", chat.clone(), None).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(lane_count(&server, "interactive").await, 1);
    let (status, text) = post("/v1/chat/completions", open_webui_title_body(), None).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(lane_count(&server, "background").await, 6);
    let (status, text) = post("/api/chat", open_webui_title_body(), Some("interactive")).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(lane_count(&server, "interactive").await, 2);
    // A header that names no lane is refused, naming the header.
    let (status, text) = post("/v1/chat/completions", chat, Some("urgent")).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("X-Rkllm-Priority"), "{text}");
    let refused = server
        .call("run", json!({"prompt": "hi", "priority": "urgent"}))
        .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`priority`")),
        "{refused}"
    );
}

#[tokio::test]
async fn a_background_request_runs_with_thinking_off() {
    let server = Server::start(
        &mock_config(0.0, 0, "[[models]]\nname = \"qwen3-mock\"\n"),
        &[],
    );
    let params = |priority: &str| json!({"prompt": "ponder @mock(think=1)", "enable_thinking": true, "priority": priority});
    let interactive = server.ok("run", params("interactive")).await;
    assert!(
        interactive["thinking"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{interactive}"
    );
    let background = server.ok("run", params("background")).await;
    assert!(
        background
            .get("thinking")
            .is_none_or(|t| t.as_str() == Some("")),
        "{background}"
    );
    assert!(
        !background["text"].as_str().unwrap().is_empty(),
        "{background}"
    );
}

#[tokio::test]
async fn with_detection_off_only_the_header_makes_a_request_background() {
    let server = Server::start(
        &mock_config(0.0, 0, "[engine]\ndetect_background = false\n"),
        &[],
    );
    let title = server
        .send(
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(open_webui_title_body()),
            None,
        )
        .await;
    assert_eq!(title.status().as_u16(), 200);
    assert_eq!(lane_count(&server, "interactive").await, 1);
    assert_eq!(lane_count(&server, "background").await, 0);
    let asked = server
        .ok(
            "run",
            json!({"prompt": "tidy up", "priority": "background"}),
        )
        .await;
    assert!(!asked["text"].as_str().unwrap().is_empty());
    assert_eq!(lane_count(&server, "background").await, 1);
}
