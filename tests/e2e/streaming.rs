//! Streaming over HTTP polling and WebSocket push: the same request gives
//! the same text everywhere, and the chunk invariants hold.

use serde_json::json;

use crate::harness::{Server, Ws, check_chunks, mock_config};

const PROMPT: &str = "Tell me about the NPU @mock(length=160)";

#[tokio::test]
async fn websocket_polling_and_non_streaming_give_the_same_text() {
    let server = Server::start(&mock_config(400.0, 10, ""), &[]);
    let params = json!({"prompt": PROMPT, "temperature": 0.7, "max_tokens": 120});

    let whole = server.ok("run", params.clone()).await;
    let text = whole["text"].as_str().unwrap().to_owned();
    assert_eq!(whole["finish_reason"], "length", "{whole}");
    // The mock cuts at a word boundary, so the cap may leave a token unused.
    let used = whole["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((110..=120).contains(&used), "{whole}");
    for key in ["queue_ms", "prefill_ms", "generate_ms", "tokens_per_second"] {
        assert!(whole["timings"][key].is_number(), "{whole}");
    }
    assert!(
        !text.is_ascii(),
        "the mock text has multi-byte characters: {text}"
    );

    let mut streaming = params.clone();
    streaming["stream"] = json!(true);
    let started = server.ok("run", streaming.clone()).await;
    assert_eq!(started["status"], "streaming_started");
    let stream_id = started["stream_id"].as_str().unwrap();
    assert_eq!(stream_id.len(), 16);
    assert!(
        stream_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    );
    let polled = check_chunks(&server.poll_to_end(stream_id).await);

    let mut ws = Ws::connect(&server).await;
    let (ws_stream, notes) = ws.start_stream(streaming).await;
    let chunks = ws.chunks_to_end(&ws_stream, notes).await;
    let pushed = check_chunks(&chunks);
    assert_eq!(chunks.last().unwrap()["finish_reason"], "length");

    assert_eq!(polled, text);
    assert_eq!(pushed, text);
}

#[tokio::test]
async fn the_same_request_always_gives_the_same_text_and_a_cap_gives_a_prefix() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let run =
        |max_tokens: u64| server.ok("run", json!({"prompt": PROMPT, "max_tokens": max_tokens}));
    let long = run(150).await["text"].as_str().unwrap().to_owned();
    let again = run(150).await["text"].as_str().unwrap().to_owned();
    let short = run(40).await["text"].as_str().unwrap().to_owned();
    assert_eq!(long, again);
    assert!(
        long.starts_with(&short) && short.len() < long.len(),
        "{short:?} / {long:?}"
    );
    let other = server
        .ok(
            "run",
            json!({"prompt": PROMPT, "max_tokens": 150, "temperature": 0.1}),
        )
        .await;
    assert_ne!(
        other["text"].as_str().unwrap(),
        long,
        "sampling parameters change the text"
    );
}

#[tokio::test]
async fn a_repeated_poll_with_the_same_from_seq_returns_the_same_chunks() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let started = server
        .ok("run", json!({"prompt": PROMPT, "stream": true}))
        .await;
    let stream_id = started["stream_id"].as_str().unwrap();
    server.wait_state(stream_id, "finished").await;
    let first = server
        .ok("run", json!({"stream_id": stream_id, "from_seq": 5}))
        .await;
    let second = server
        .ok("run", json!({"stream_id": stream_id, "from_seq": 5}))
        .await;
    assert_eq!(first, second);
    let chunks = first["chunks"].as_array().unwrap();
    assert_eq!(chunks[0]["seq"], 5);
    assert!(chunks.len() > 10);
    assert_eq!(first["has_more"], false);
    // Acknowledged chunks are freed: a poll from 0 starts at the cursor.
    let again = server
        .ok("run", json!({"stream_id": stream_id, "from_seq": 0}))
        .await;
    assert_eq!(again["chunks"][0]["seq"], 5);
}

#[tokio::test]
async fn a_long_poll_returns_as_soon_as_a_chunk_exists() {
    // 20 tokens per second for 1000 tokens: had the poll waited its whole
    // 30 s, hundreds of chunks would be buffered; returning at the first
    // chunk gives a handful.
    let server = Server::start(&mock_config(20.0, 300, ""), &[]);
    let started = server
        .ok(
            "run",
            json!({"prompt": "slow @mock(length=1000)", "stream": true}),
        )
        .await;
    let stream_id = started["stream_id"].as_str().unwrap();
    let result = server
        .ok(
            "run",
            json!({"stream_id": stream_id, "from_seq": 0, "wait_ms": 30000}),
        )
        .await;
    let chunks = result["chunks"].as_array().unwrap();
    assert!(!chunks.is_empty(), "{result}");
    assert!(
        chunks.len() <= 5,
        "the long poll waited too long: {} chunks",
        chunks.len()
    );
    assert_eq!(result["has_more"], true);
    assert_eq!(
        server.ok("abort", json!({"stream_id": stream_id})).await,
        json!({"aborted": true})
    );
}

#[tokio::test]
async fn a_poll_without_wait_returns_at_once_even_when_empty() {
    let server = Server::start(&mock_config(20.0, 0, ""), &[]);
    let started = server
        .ok(
            "run",
            json!({"prompt": "wait @mock(length=50, prefill_ms=60000)", "stream": true}),
        )
        .await;
    let stream_id = started["stream_id"].as_str().unwrap();
    let result = server
        .ok("run", json!({"stream_id": stream_id, "from_seq": 0}))
        .await;
    assert_eq!(result["chunks"], json!([]));
    assert_eq!(result["has_more"], true);
    // The model's worker takes the stream from its queue a moment after it
    // was admitted (on a loaded machine, after this poll): then it
    // prefills for a minute and has still produced nothing.
    let waited = std::time::Instant::now();
    let status = loop {
        let status = server
            .ok("stream_status", json!({"stream_id": stream_id}))
            .await;
        if status["state"] != "queued" || waited.elapsed() > std::time::Duration::from_secs(20) {
            break status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(status["state"], "initializing");
    assert_eq!(status["next_seq"], 0);
}

#[tokio::test]
async fn a_websocket_can_subscribe_to_a_stream_started_over_http() {
    let server = Server::start(&mock_config(200.0, 0, ""), &[]);
    let started = server
        .ok("run", json!({"prompt": PROMPT, "stream": true}))
        .await;
    let stream_id = started["stream_id"].as_str().unwrap().to_owned();
    let mut ws = Ws::connect(&server).await;
    let id = ws
        .request("subscribe", json!({"stream_id": stream_id, "from_seq": 0}))
        .await;
    let mut notes = Vec::new();
    let response = ws.response(id, &mut notes).await;
    assert_eq!(response["result"]["status"], "subscribed", "{response}");
    let pushed = check_chunks(&ws.chunks_to_end(&stream_id, notes).await);
    let whole = server.ok("run", json!({"prompt": PROMPT})).await;
    assert_eq!(pushed, whole["text"].as_str().unwrap());
}

#[tokio::test]
async fn subscribing_from_a_later_seq_skips_the_earlier_chunks() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let started = server
        .ok("run", json!({"prompt": PROMPT, "stream": true}))
        .await;
    let stream_id = started["stream_id"].as_str().unwrap().to_owned();
    server.wait_state(&stream_id, "finished").await;
    let mut ws = Ws::connect(&server).await;
    let id = ws
        .request("subscribe", json!({"stream_id": stream_id, "from_seq": 3}))
        .await;
    let mut notes = Vec::new();
    ws.response(id, &mut notes).await;
    let chunks = ws.chunks_to_end(&stream_id, notes).await;
    assert_eq!(chunks[0]["seq"], 3);
    let all = server
        .ok("run", json!({"stream_id": stream_id, "from_seq": 0}))
        .await;
    assert_eq!(chunks.len() + 3, all["chunks"].as_array().unwrap().len());
}
