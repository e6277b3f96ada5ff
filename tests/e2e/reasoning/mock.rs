//! Thinking through the mock backend (docs/mock-backend.md): streamed
//! thinking comes in chunks of its own, with their own seq, over polling
//! and WebSocket push, and matches the whole run's.

use serde_json::json;

use super::read_chunks;
use crate::harness::{Server, Ws, mock_config};

/// Mock models of both shapes (docs/mock-backend.md).
fn mock_thinkers() -> String {
    mock_config(
        0.0,
        0,
        "[[models]]\nname = \"qwen3-mock\"\n[[models]]\nname = \"r1\"\nreasoning = \"implicit\"\n",
    )
}

#[tokio::test]
async fn mock_thinking_streams_in_chunks_of_its_own_over_polling_and_websocket_push() {
    let server = Server::start(&mock_thinkers(), &[]);
    for (model, directive) in [("qwen3-mock", "@mock(think=1)"), ("r1", "@mock(think=2)")] {
        for enable in [true, false] {
            let at = format!("{model}, thinking {enable}");
            let params = json!({"model": model, "prompt": format!("ponder {directive}"),
                                "enable_thinking": enable});
            let whole = server.ok("run", params.clone()).await;
            let answer = whole["text"].as_str().unwrap();
            assert!(!answer.is_empty(), "{at}: {whole}");
            let thought = whole
                .get("thinking")
                .map(|t| t.as_str().unwrap().to_owned())
                .unwrap_or_default();
            assert_eq!(!thought.is_empty(), enable, "{at}: {whole}");
            if enable {
                assert!(
                    whole["usage"]["reasoning_tokens"].as_u64().unwrap() > 0,
                    "{at}: {whole}"
                );
            }

            let mut streaming = params.clone();
            streaming["stream"] = json!(true);
            let started = server.ok("run", streaming.clone()).await;
            let polled = server
                .poll_to_end(started["stream_id"].as_str().unwrap())
                .await;
            let mut ws = Ws::connect(&server).await;
            let (stream_id, notes) = ws.start_stream(streaming).await;
            let pushed = ws.chunks_to_end(&stream_id, notes).await;
            ws.close().await;
            for (how, chunks) in [("polled", &polled), ("pushed", &pushed)] {
                let (thinking, text, end) = read_chunks(chunks);
                assert_eq!(thinking, thought, "{at}, {how}: {chunks:?}");
                assert_eq!(text, answer, "{at}, {how}: {chunks:?}");
                assert_eq!(end["usage"], whole["usage"], "{at}, {how}");
                assert_eq!(end["finish_reason"], whole["finish_reason"], "{at}, {how}");
                let thinking_chunks = chunks
                    .iter()
                    .filter(|c| c.get("thinking").is_some())
                    .count();
                assert_eq!(thinking_chunks > 0, enable, "{at}, {how}: {chunks:?}");
            }
        }
    }
}
