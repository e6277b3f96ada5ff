//! Stop strings on the runtime's test double, both ABIs, OpenAI and
//! Ollama, streamed and not: the answer ends right before the stop string
//! (split across the double's 3-byte tokens), finish reason `stop`, and
//! the runtime is aborted, its run ending short of the text's end. They
//! end the answer only, never a reasoning model's thinking.

use serde_json::json;

use super::{
    ABIS, ANSWER, Board, SHAPES, THINKING, TOKEN_BYTES, ndjson, read_openai_stream, sse, string,
    thinking_models,
};

/// The model file's text for the stop strings: an answer, then text that
/// must never show, hundreds of tokens that a run left alone generates to
/// its end (fewer than the default cap of 512, so only an abort for the
/// stop string ends it early).
fn stop_text() -> String {
    format!(
        "Answer part one, 数据 here.HALT! The rest must never show. {}",
        "More text after the stop. ".repeat(40)
    )
}

/// The stop string is applied in the server, which then aborts the
/// runtime (in its runner process): tokens at this pace leave seconds
/// between the stop and the text's end, a liveness margin for the abort.
const STOP_TOKEN_MS: &str = "20";

#[tokio::test]
async fn a_stop_string_ends_the_answer_before_it_and_aborts_the_runtime() {
    let text = stop_text();
    let total_tokens = text.len().div_ceil(TOKEN_BYTES);
    assert!(total_tokens < 512, "the text ends before the default cap");
    // (stop string, the answer before it); each lies across tokens.
    let stops = [
        ("HALT!", "Answer part one, 数据 here."),
        ("据 here", "Answer part one, 数"),
    ];
    for (stop, _) in stops {
        let at = text.find(stop).unwrap();
        assert_ne!(
            at / TOKEN_BYTES,
            (at + stop.len() - 1) / TOKEN_BYTES,
            "{stop:?} must lie across the double's tokens"
        );
    }
    for (fake, abi) in ABIS {
        let board = Board::start_env(
            fake,
            &text,
            |model| format!("[[models]]\nname = \"plain\"\npath = {model:?}\n"),
            &[("FAKE_RKLLM_TOKEN_MS", STOP_TOKEN_MS)],
        );
        let server = &board.server;
        for (stop, answer) in stops {
            // The token that completes the stop string.
            let last_token = (text.find(stop).unwrap() + stop.len()).div_ceil(TOKEN_BYTES);
            let messages = json!([{"role": "user", "content": "go"}]);
            for api in ["openai", "openai-sse", "ollama", "ollama-ndjson"] {
                let at = format!("ABI {abi}, {api}, stop {stop:?}");
                let before = board.log().len();
                let (shown, reason) = match api {
                    "openai" => {
                        let whole = server
                            .post_json(
                                "/v1/chat/completions",
                                json!({"model": "plain", "messages": messages, "stop": stop}),
                            )
                            .await;
                        let choice = &whole["choices"][0];
                        (
                            string(&choice["message"]["content"], &whole),
                            string(&choice["finish_reason"], &whole),
                        )
                    }
                    "openai-sse" => {
                        let events = sse(
                            server,
                            "/v1/chat/completions",
                            json!({"model": "plain", "messages": messages, "stream": true,
                                   "stop": ["never-in-the-text", stop]}),
                        )
                        .await;
                        let streamed = read_openai_stream(&events);
                        (streamed.content, streamed.finish_reason.unwrap_or_default())
                    }
                    "ollama" => {
                        let chat = server
                            .post_json(
                                "/api/chat",
                                json!({"model": "plain", "messages": messages, "stream": false,
                                       "options": {"stop": [stop]}}),
                            )
                            .await;
                        (
                            string(&chat["message"]["content"], &chat),
                            string(&chat["done_reason"], &chat),
                        )
                    }
                    _ => {
                        let lines = ndjson(
                            server,
                            "/api/chat",
                            json!({"model": "plain", "messages": messages,
                                   "options": {"stop": [stop]}}),
                        )
                        .await;
                        let content = lines
                            .iter()
                            .filter_map(|l| l["message"]["content"].as_str())
                            .collect();
                        let last = lines.last().unwrap();
                        (content, string(&last["done_reason"], last))
                    }
                };
                assert_eq!(shown, answer, "{at}");
                assert_eq!(reason, "stop", "{at}");
                // The runtime was aborted in that run, after the stop
                // string and before the text's end.
                let since = board.log_until(before, &["aborted", "finish"]).await;
                let run_at = since.find("\nrun ").map_or(0, |i| i + 1);
                let run = &since[run_at..];
                assert!(run.starts_with("run "), "{at}: {since}");
                assert!(
                    run.lines().any(|l| l.starts_with("abort running=1")),
                    "{at}: {since}"
                );
                assert!(!run.contains("\nfinish "), "{at}: {since}");
                let aborted = run
                    .lines()
                    .find_map(|l| l.strip_prefix("aborted tokens="))
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or_else(|| panic!("{at}: {since}"));
                assert!(
                    (last_token..total_tokens).contains(&aborted),
                    "{at}: the run stopped after the stop string ({last_token} tokens) and \
                     before the text's end ({total_tokens}): {since}"
                );
            }
        }
    }
}

/// Stop strings end the answer, not the thinking: one that occurs in the
/// thinking does not stop it, one in the answer does.
#[tokio::test]
async fn stop_strings_apply_to_the_answer_not_the_thinking() {
    for (fake, abi) in ABIS {
        let board = Board::start(fake, ANSWER, thinking_models);
        for (model, marker) in SHAPES {
            let at = format!("ABI {abi}, model {model}");
            let run = board
                .server
                .ok(
                    "run",
                    json!({"model": model, "prompt": format!("why? {marker}"),
                           "enable_thinking": true, "stop": ["東京", "42"]}),
                )
                .await;
            assert!(THINKING.contains("東京") && ANSWER.contains("42"));
            assert_eq!(run["thinking"], THINKING, "{at}: {run}");
            assert_eq!(run["text"], "The answer is ", "{at}: {run}");
            assert_eq!(run["finish_reason"], "stop", "{at}: {run}");
        }
    }
}
