//! The per-model FIFO queue, its bound, and the ways a generation ends
//! early: abort, a departed consumer, a runtime error, a slow consumer.

use serde_json::{Value, json};

use crate::harness::{Server, Ws, check_chunks, mock_config};

#[tokio::test]
async fn fifty_concurrent_streams_on_one_model_are_served_in_fifo_order_with_none_lost() {
    let server = Server::start(&mock_config(0.0, 4, "[engine]\nqueue_len = 64\n"), &[]);
    let mut ids = Vec::new();
    for i in 0..50 {
        let started = server
            .ok(
                "run",
                json!({"prompt": format!("request {i} @mock(length=6)"), "stream": true}),
            )
            .await;
        ids.push(started["stream_id"].as_str().unwrap().to_owned());
    }
    // FIFO: once stream j has left the queue, every stream submitted
    // before it has too. Scanning from the newest to the oldest, a stream
    // seen started means all older ones (looked at later) must be started.
    let mut all_done = false;
    while !all_done {
        let mut seen_started = false;
        all_done = true;
        for (i, id) in ids.iter().enumerate().rev() {
            let status = server.ok("stream_status", json!({"stream_id": id})).await;
            let state = status["state"].as_str().unwrap().to_owned();
            if state == "queued" {
                assert!(
                    !seen_started,
                    "stream {i} still queued after a later one started"
                );
                // In the queue (1 and up), or just out of it (0).
                assert!(status["queue_position"].as_u64().is_some(), "{status}");
            } else {
                seen_started = true;
            }
            all_done &= state == "finished";
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let text = check_chunks(&server.poll_to_end(id).await);
        let whole = server
            .ok(
                "run",
                json!({"prompt": format!("request {i} @mock(length=6)")}),
            )
            .await;
        assert_eq!(
            text,
            whole["text"].as_str().unwrap(),
            "stream {i} lost text"
        );
    }
}

#[tokio::test]
async fn fifty_concurrent_non_streaming_requests_all_get_their_whole_text() {
    let server = Server::start(&mock_config(0.0, 0, "[engine]\nqueue_len = 64\n"), &[]);
    let requests = (0..50).map(|i| {
        let server = &server;
        async move {
            (
                i,
                server
                    .ok("run", json!({"prompt": format!("parallel {i}")}))
                    .await,
            )
        }
    });
    let results = futures_util::future::join_all(requests).await;
    for (i, result) in results {
        let again = server
            .ok("run", json!({"prompt": format!("parallel {i}")}))
            .await;
        assert_eq!(result["text"], again["text"]);
        assert_eq!(result["finish_reason"], "stop");
    }
}

#[tokio::test]
async fn a_full_queue_answers_busy_with_a_retry_hint() {
    let server = Server::start(&mock_config(5.0, 0, "[engine]\nqueue_len = 2\n"), &[]);
    let slow = json!({"prompt": "slow @mock(length=1000)", "stream": true});
    let running = server.ok("run", slow.clone()).await;
    let running_id = running["stream_id"].as_str().unwrap().to_owned();
    server.wait_state(&running_id, "active").await;
    let queued_a = server.ok("run", slow.clone()).await;
    let queued_b = server.ok("run", slow.clone()).await;
    let response = server.call("run", slow.clone()).await;
    assert_eq!(response["error"]["code"], -32002, "{response}");
    assert!(
        response["error"]["data"]["retry_after_ms"]
            .as_u64()
            .unwrap()
            > 0,
        "{response}"
    );
    let status = server
        .ok("stream_status", json!({"stream_id": queued_b["stream_id"]}))
        .await;
    assert_eq!(
        status,
        json!({"state": "queued", "next_seq": 0, "queue_position": 2})
    );

    // An aborted queued request leaves the queue and frees its place.
    server
        .ok("abort", json!({"stream_id": queued_a["stream_id"]}))
        .await;
    let status = server
        .ok("stream_status", json!({"stream_id": queued_b["stream_id"]}))
        .await;
    assert_eq!(status["queue_position"], 1);
    server.ok("run", slow).await;
}

#[tokio::test]
async fn abort_ends_the_stream_with_finish_reason_abort_and_frees_the_model() {
    let server = Server::start(&mock_config(20.0, 0, ""), &[]);
    let started = server
        .ok(
            "run",
            json!({"prompt": "long @mock(length=100000)", "stream": true}),
        )
        .await;
    let stream_id = started["stream_id"].as_str().unwrap();
    server.wait_state(stream_id, "active").await;
    assert_eq!(
        server.ok("abort", json!({"stream_id": stream_id})).await,
        json!({"aborted": true})
    );
    let chunks = server.poll_to_end(stream_id).await;
    check_chunks(&chunks);
    assert_eq!(chunks.last().unwrap()["finish_reason"], "abort");
    let status = server
        .ok("stream_status", json!({"stream_id": stream_id}))
        .await;
    assert_eq!(status["state"], "aborted");
    assert_eq!(
        server
            .error_code("abort", json!({"stream_id": stream_id}))
            .await,
        -32006
    );
    // The model is free again: a short request completes.
    let next = server
        .ok("run", json!({"prompt": "next @mock(length=3)"}))
        .await;
    assert_eq!(next["finish_reason"], "stop");
}

#[tokio::test]
async fn a_closed_websocket_aborts_its_generation() {
    let server = Server::start(&mock_config(20.0, 0, ""), &[]);
    let mut ws = Ws::connect(&server).await;
    let (stream_id, mut notes) = ws
        .start_stream(json!({"prompt": "endless @mock(length=100000)"}))
        .await;
    while notes.is_empty() {
        notes.push(ws.recv().await);
    }
    ws.close().await;
    server.wait_state(&stream_id, "aborted").await;
    let next = server
        .ok("run", json!({"prompt": "after @mock(length=3)"}))
        .await;
    assert_eq!(next["finish_reason"], "stop");
}

#[tokio::test]
async fn a_runtime_error_ends_the_stream_with_an_error_chunk_and_the_next_request_works() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let started = server
        .ok(
            "run",
            json!({"prompt": "fail @mock(length=50, error_after=7)", "stream": true}),
        )
        .await;
    let chunks = server
        .poll_to_end(started["stream_id"].as_str().unwrap())
        .await;
    check_chunks(&chunks);
    let end = chunks.last().unwrap();
    assert_eq!(end["finish_reason"], "error");
    assert_eq!(end["error"]["code"], -32004);
    assert!(
        end["error"]["message"]
            .as_str()
            .unwrap()
            .contains("injected"),
        "{end}"
    );
    assert_eq!(end["usage"]["completion_tokens"], 7);

    let response = server
        .call("run", json!({"prompt": "fail @mock(error_after=0)"}))
        .await;
    assert_eq!(response["error"]["code"], -32004, "{response}");
    let next = server.ok("run", json!({"prompt": "fine"})).await;
    assert_eq!(next["finish_reason"], "stop");
}

#[tokio::test]
async fn a_stream_nobody_reads_hits_its_buffer_limit_and_other_streams_are_untouched() {
    let config = mock_config(0.0, 0, "[streams]\nmax_stream_bytes = 4096\n");
    let server = Server::start(&config, &[]);
    let flood = server
        .ok(
            "run",
            json!({"prompt": "flood @mock(length=100000)", "stream": true}),
        )
        .await;
    let flood_id = flood["stream_id"].as_str().unwrap();
    server.wait_state(flood_id, "error").await;
    let chunks = server.poll_to_end(flood_id).await;
    let end: &Value = chunks.last().unwrap();
    assert_eq!(end["error"]["code"], -32004, "{end}");
    assert!(
        end["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too slow"),
        "{end}"
    );
    let other = server.ok("run", json!({"prompt": "small"})).await;
    assert_eq!(other["finish_reason"], "stop");
}

#[tokio::test]
async fn a_non_streaming_request_whose_client_leaves_aborts_its_generation() {
    leave_a_non_streaming_request_then_run_another(&mock_config(20.0, 0, "")).await;
}

/// Starts an endless non-streaming `run` whose client gives up, then runs
/// another request on the same model and returns the server: had the
/// first generation gone on, the second would wait 5000 s behind it.
async fn leave_a_non_streaming_request_then_run_another(config: &str) -> Server {
    let server = Server::start(config, &[]);
    // A first request loads the model's tokenizer (and, under an emulator,
    // has the code it runs translated): done here, so that the 500 ms the
    // client waits below are spent generating.
    let warm = server
        .ok("run", json!({"prompt": "warm @mock(length=1)"}))
        .await;
    assert_eq!(warm["finish_reason"], "stop");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "run",
                      "params": {"prompt": "forever @mock(length=100000)"}});
    let gone = server
        .http
        .post(server.mcp_url())
        .timeout(std::time::Duration::from_millis(500))
        .body(body.to_string())
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up first");
    let next = server
        .ok("run", json!({"prompt": "after @mock(length=3)"}))
        .await;
    assert_eq!(next["finish_reason"], "stop");
    server
}

#[tokio::test]
async fn mock_lanes_generate_several_streams_at_once_and_bench_mode_stamps_chunks() {
    let config = mock_config(20.0, 0, "[engine]\nqueue_len = 8\n");
    let server = Server::start(&config, &["--mock-lanes", "3", "--bench-timestamps"]);
    let mut ids = Vec::new();
    for i in 0..3 {
        let started = server
            .ok(
                "run",
                json!({"prompt": format!("lane {i} @mock(length=60)"), "stream": true}),
            )
            .await;
        ids.push(started["stream_id"].as_str().unwrap().to_owned());
    }
    // At 20 tokens/s a 60-token stream takes 3 s: with three lanes, all
    // three are generating before the first ends.
    for id in &ids {
        server.wait_state(id, "active").await;
    }
    for id in &ids {
        let status = server.ok("stream_status", json!({"stream_id": id})).await;
        assert_eq!(status["state"], "active", "{status}");
    }
    for id in &ids {
        let chunks = server.poll_to_end(id).await;
        let now = rkllm_server::stream::monotonic_ns();
        check_chunks(&chunks);
        let stamps: Vec<u64> = chunks
            .iter()
            .map(|c| {
                c["produced_ns"]
                    .as_u64()
                    .expect("bench mode stamps every chunk")
            })
            .collect();
        assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
        assert!(
            *stamps.last().unwrap() <= now,
            "stamped from the shared monotonic clock"
        );
    }
    // Without the flag, no chunk carries a stamp.
    let plain = Server::start(&mock_config(0.0, 0, ""), &[]);
    let started = plain
        .ok(
            "run",
            json!({"prompt": "x @mock(length=5)", "stream": true}),
        )
        .await;
    let chunks = plain
        .poll_to_end(started["stream_id"].as_str().unwrap())
        .await;
    assert!(chunks.iter().all(|c| c.get("produced_ns").is_none()));
}

#[tokio::test]
async fn with_a_resume_grace_a_websocket_stream_survives_its_socket_and_is_resumed() {
    let server = Server::start(
        &mock_config(50.0, 0, "[streams]\nresume_grace_secs = 30\n"),
        &[],
    );
    let prompt = "resume me @mock(length=60)";
    let expected = server.ok("run", json!({"prompt": prompt})).await["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ws = Ws::connect(&server).await;
    let (stream_id, mut notes) = ws.start_stream(json!({"prompt": prompt})).await;
    while notes.len() < 5 {
        notes.push(ws.recv().await);
    }
    let first: Vec<Value> = notes
        .iter()
        .filter(|n| n["params"]["stream_id"] == stream_id.as_str())
        .map(|n| n["params"].clone())
        .collect();
    let next_seq = first.last().unwrap()["seq"].as_u64().unwrap() + 1;
    ws.close().await;
    // The generation goes on without a reader.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let status = server
        .ok("stream_status", json!({"stream_id": stream_id}))
        .await;
    assert!(
        status["state"] == "active" || status["state"] == "finished",
        "{status}"
    );
    let mut again = Ws::connect(&server).await;
    let id = again
        .request(
            "subscribe",
            json!({"stream_id": stream_id, "from_seq": next_seq}),
        )
        .await;
    let mut notes = Vec::new();
    let response = again.response(id, &mut notes).await;
    assert_eq!(response["result"]["status"], "subscribed", "{response}");
    let rest = again.chunks_to_end(&stream_id, notes).await;
    let mut all = first;
    all.extend(rest);
    let text = check_chunks(&all);
    assert_eq!(text, expected, "nothing lost, nothing repeated");
    assert_eq!(all.last().unwrap()["finish_reason"], "stop");
}

#[tokio::test]
async fn a_stream_not_resumed_within_its_grace_is_aborted() {
    let server = Server::start(
        &mock_config(20.0, 0, "[streams]\nresume_grace_secs = 1\n"),
        &[],
    );
    let mut ws = Ws::connect(&server).await;
    let (stream_id, mut notes) = ws
        .start_stream(json!({"prompt": "endless @mock(length=100000)"}))
        .await;
    while notes.is_empty() {
        notes.push(ws.recv().await);
    }
    ws.close().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let status = server
        .ok("stream_status", json!({"stream_id": stream_id}))
        .await;
    assert_eq!(
        status["state"], "active",
        "still within the grace: {status}"
    );
    server.wait_state(&stream_id, "aborted").await;
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains("rkllm_aborts_total{cause=\"disconnect\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_resume_grace_never_keeps_a_departed_non_streaming_request_running() {
    // Only push-started streams wait for a resume; this one stops at once.
    let server = leave_a_non_streaming_request_then_run_another(&mock_config(
        20.0,
        0,
        "[streams]\nresume_grace_secs = 60\n",
    ))
    .await;
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains("rkllm_aborts_total{cause=\"disconnect\"} 1"),
        "{metrics}"
    );
}
