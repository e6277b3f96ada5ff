//! A conversation is named, turn after turn, and the prompt-cache metrics
//! tell whether each turn started from what the turn before left. On the
//! mock with a model whose ChatML the server renders (so the mock keeps
//! conversation snapshots as the NPU runner does): every generation's
//! response carries `X-Rkllm-Conversation`, the same on every turn of one
//! conversation and different for another; a client's session header sets
//! it apart; `rkllm_prompt_tokens_reused_total` and
//! `rkllm_prompt_tokens_prefilled_total` add up each request's prompt, and
//! `rkllm_prompt_cache_requests_total` counts a returning turn as a hit, a
//! turn whose snapshot is gone as a miss.

use serde_json::{Value, json};

use crate::harness::{Server, mock_config, model_metric};

fn start() -> Server {
    Server::start(
        &mock_config(
            0.0,
            0,
            "[[models]]\nname = \"chat\"\nchat_template = \"chatml\"\n",
        ),
        &[],
    )
}

/// Sends a chat; returns its conversation header and its answer.
async fn chat(server: &Server, messages: &Value, headers: &[(&str, &str)]) -> (String, String) {
    let mut request = server
        .http
        .post(format!("http://{}/v1/chat/completions", server.addr))
        .json(&json!({"model": "chat", "max_tokens": 12, "messages": messages}));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let key = response
        .headers()
        .get("x-rkllm-conversation")
        .map(|v| v.to_str().unwrap().to_owned())
        .expect("a conversation header");
    let body: Value = response.json().await.unwrap();
    let answer = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    (key, answer)
}

/// A counter's value for model `chat` (and `outcome`, when given).
async fn counter(server: &Server, name: &str, outcome: Option<&str>) -> u64 {
    let labels: Vec<(&str, &str)> = outcome.map(|o| ("outcome", o)).into_iter().collect();
    model_metric(&server.metrics_text().await, name, "chat", &labels).map_or(0, |v| v as u64)
}

#[tokio::test]
async fn a_conversation_keeps_its_name_and_its_turns_count_as_hits() {
    let server = start();
    let system = "You help with the board. ".repeat(40);
    let mut messages = json!([
        {"role": "system", "content": system},
        {"role": "user", "content": "What is the NPU?"}
    ]);
    let (first, mut answer) = chat(&server, &messages, &[]).await;
    assert_eq!(first.len(), 16, "{first}");
    let mut keys = vec![first.clone()];
    for turn in ["And the CPU?", "And the memory?", "Thanks."] {
        let list = messages.as_array_mut().unwrap();
        list.push(json!({"role": "assistant", "content": answer}));
        list.push(json!({"role": "user", "content": turn}));
        let (key, reply) = chat(&server, &messages, &[]).await;
        keys.push(key);
        answer = reply;
    }
    assert!(keys.iter().all(|k| *k == first), "{keys:?}");

    // Another conversation: another name; a session header sets the same
    // opening apart from the one without it.
    let other = json!([{"role": "system", "content": system},
                       {"role": "user", "content": "Something else"}]);
    let (other_key, _) = chat(&server, &other, &[]).await;
    assert_ne!(other_key, first);
    let opening = json!([{"role": "system", "content": system},
                         {"role": "user", "content": "What is the NPU?"}]);
    let (session_key, _) = chat(
        &server,
        &opening,
        &[("X-Claude-Code-Session-Id", "session-1")],
    )
    .await;
    assert_ne!(session_key, first);
    let (again, _) = chat(
        &server,
        &opening,
        &[("X-Claude-Code-Session-Id", "session-1")],
    )
    .await;
    assert_eq!(again, session_key);

    let reused = counter(&server, "rkllm_prompt_tokens_reused_total", None).await;
    let prefilled = counter(&server, "rkllm_prompt_tokens_prefilled_total", None).await;
    assert!(reused > 0 && prefilled > 0, "{reused} {prefilled}");
    let hits = counter(&server, "rkllm_prompt_cache_requests_total", Some("hit")).await;
    let new = counter(&server, "rkllm_prompt_cache_requests_total", Some("new")).await;
    assert!(new >= 1, "{new}");
    assert!(hits >= 1, "{hits}");
}

#[tokio::test]
async fn a_first_turn_that_makes_its_system_prompts_snapshot_on_the_way_reused_nothing() {
    let server = start();
    // Long enough for the system prompt to be kept as a snapshot of its
    // own on the way (the run starts from it, but this request made it).
    let system = "You read the board's logs and answer briefly. ".repeat(80);
    let messages = json!([{"role": "system", "content": system},
                          {"role": "user", "content": "What happened?"}]);
    chat(&server, &messages, &[]).await;
    assert_eq!(
        counter(&server, "rkllm_prompt_tokens_reused_total", None).await,
        0
    );
    assert!(counter(&server, "rkllm_prompt_tokens_prefilled_total", None).await > 3000);
    assert_eq!(
        counter(&server, "rkllm_prompt_cache_requests_total", Some("new")).await,
        1
    );
    // Another conversation with the same opening starts from it: shared.
    let other = json!([{"role": "system", "content": system},
                       {"role": "user", "content": "Anything else?"}]);
    chat(&server, &other, &[]).await;
    assert!(counter(&server, "rkllm_prompt_tokens_reused_total", None).await > 3000);
    assert_eq!(
        counter(&server, "rkllm_prompt_cache_requests_total", Some("shared")).await,
        1
    );
}
