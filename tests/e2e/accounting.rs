//! What a generation reports and records: token counts at the cap, the
//! log line and metric of an aborted generation, and a prompt the backend
//! can tell is bad refused before it runs.

use serde_json::{Value, json};

use crate::harness::{Server, mock_config};

/// The value of an unlabelled counter in the metrics text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn completion_tokens_count_every_token_up_to_max_tokens() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    for max_tokens in [1u64, 5, 20, 50] {
        let prompt = format!("count me {max_tokens} @mock(length=100)");
        let run = server
            .ok("run", json!({"prompt": prompt, "max_tokens": max_tokens}))
            .await;
        assert_eq!(run["finish_reason"], "length", "{run}");
        assert_eq!(run["usage"]["completion_tokens"], max_tokens, "{run}");
        assert!(!run["text"].as_str().unwrap().contains('\u{fffd}'), "{run}");

        let body = json!({"model": "mock", "max_tokens": max_tokens,
                          "messages": [{"role": "user", "content": prompt}]});
        let reply: Value = server
            .http
            .post(format!("http://{}/v1/chat/completions", server.addr))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(reply["choices"][0]["finish_reason"], "length", "{reply}");
        assert_eq!(reply["usage"]["completion_tokens"], max_tokens, "{reply}");
    }
    // Under the cap, the count is the model's own length.
    let run = server
        .ok(
            "run",
            json!({"prompt": "short @mock(length=7)", "max_tokens": 50}),
        )
        .await;
    assert_eq!(run["finish_reason"], "stop", "{run}");
    assert_eq!(run["usage"]["completion_tokens"], 7, "{run}");
}

#[tokio::test]
async fn an_aborted_generation_is_logged_and_counted() {
    let server = Server::start(&mock_config(50.0, 0, ""), &[]);
    let before = counter(&server.metrics_text().await, "rkllm_generations_total");
    let started = server
        .ok(
            "run",
            json!({"prompt": "abort me @mock(length=1000)", "stream": true}),
        )
        .await;
    let id = started["stream_id"].as_str().unwrap().to_owned();
    server.wait_state(&id, "active").await;
    server.ok("abort", json!({"stream_id": id})).await;
    // The runner notices the abort within a token; the record follows.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let logged = server
            .log()
            .iter()
            .any(|l| l.contains(" generation ") && l.contains("finish_reason=\"abort\""));
        let counted = counter(&server.metrics_text().await, "rkllm_generations_total");
        if logged && counted == before + 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no record of the aborted generation (counted {counted}, was {before}): {:?}",
            server.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // A generation that ends normally is recorded once too.
    server
        .ok("run", json!({"prompt": "done @mock(length=3)"}))
        .await;
    let counted = counter(&server.metrics_text().await, "rkllm_generations_total");
    assert_eq!(counted, before + 2);
}

#[tokio::test]
async fn a_malformed_mock_directive_is_a_bad_request_on_every_api() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let prompt = "hi @mock(colour=3)";
    let response = server.call("run", json!({"prompt": prompt})).await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert_eq!(response["error"]["data"]["field"], "prompt", "{response}");
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{response}"
    );

    let openai = server
        .http
        .post(format!("http://{}/v1/chat/completions", server.addr))
        .json(&json!({"model": "mock", "messages": [{"role": "user", "content": prompt}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(openai.status(), 400);
    let body: Value = openai.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{body}"
    );

    let ollama = server
        .http
        .post(format!("http://{}/api/generate", server.addr))
        .json(&json!({"model": "mock", "prompt": prompt, "stream": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(ollama.status(), 400);
    let body: Value = ollama.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("colour"), "{body}");

    // Nothing ran, and the server goes on serving.
    let metrics = server.metrics_text().await;
    assert_eq!(counter(&metrics, "rkllm_generations_total"), 0, "{metrics}");
    server
        .ok("run", json!({"prompt": "fine @mock(length=2)"}))
        .await;
}
