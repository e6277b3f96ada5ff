//! A chat that goes on after a reasoning model's reply, on the runtime's
//! test double: the runtime's history holds the answer as the reply.

use serde_json::{Value, json};

use super::{ABIS, ANSWER, Board, SHAPES, THINKING, thinking_models};

/// A chat that goes on after a thinking reply: the runtime holds the
/// answer (not the thinking) as the reply, so a client that sends back the
/// answer it was shown (OpenAI), or the answer with its thinking (Ollama),
/// continues the held chat and only its new message is prefilled.
#[tokio::test]
async fn a_chat_continues_after_a_thinking_reply_with_only_its_new_message() {
    for (fake, abi) in ABIS {
        let board = Board::start(fake, ANSWER, thinking_models);
        for (model, marker) in SHAPES {
            for api in ["openai", "ollama"] {
                let at = format!("ABI {abi}, model {model}, {api}");
                let first = json!({"role": "user", "content": format!("why? {marker}")});
                let next = format!("and then? {marker} {api}");
                let (path, think, reply) = match api {
                    "openai" => (
                        "/v1/chat/completions",
                        json!({"reasoning_effort": "high"}),
                        json!({"role": "assistant", "content": ANSWER}),
                    ),
                    _ => (
                        "/api/chat",
                        json!({"think": true, "stream": false}),
                        json!({"role": "assistant", "content": ANSWER, "thinking": THINKING}),
                    ),
                };
                let body = |messages: Value| {
                    let mut body = json!({"model": model, "messages": messages});
                    for (key, value) in think.as_object().unwrap() {
                        body[key] = value.clone();
                    }
                    body
                };
                let before = board.log().len();
                let one = board.server.post_json(path, body(json!([first]))).await;
                let two = board
                    .server
                    .post_json(
                        path,
                        body(json!([first, reply, {"role": "user", "content": next}])),
                    )
                    .await;
                for answer in [&one, &two] {
                    let message = match api {
                        "openai" => &answer["choices"][0]["message"],
                        _ => &answer["message"],
                    };
                    assert_eq!(message["content"], ANSWER, "{at}: {answer}");
                }
                let log = board.log();
                let runs: Vec<&str> = log[before..]
                    .lines()
                    .skip_while(|l| !l.starts_with("run "))
                    .filter(|l| l.starts_with("run ") || l.starts_with("clear-kv"))
                    .collect();
                assert_eq!(runs.len(), 2, "{at}: two runs, no clear between: {runs:?}");
                assert!(
                    runs[1].contains("keep_history=1")
                        && runs[1].ends_with(&format!("prompt={next}")),
                    "{at}: only the new message: {runs:?}"
                );
            }
        }
    }
}
