//! LoRA adapters end to end, on both ABIs: loaded with the model
//! (`rkllm_load_lora`, logged by the test double), selected per request on
//! JSON-RPC, OpenAI and Ollama (the double then answers with the adapter's
//! name first), refused when unknown, listed by `models`.

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_runtime, model_metric};

const TEXT: &str = "Plain answer.";

fn start(
    fake: Fake,
    scratch: &ScratchDir,
    second_path: Option<&str>,
) -> (Server, std::path::PathBuf) {
    let model = scratch.0.join("chat.rkllm");
    std::fs::write(&model, TEXT).unwrap();
    let pirate = scratch.0.join("pirate.rkllm");
    std::fs::write(&pirate, "adapter").unwrap();
    let formal = scratch.0.join("formal.rkllm");
    std::fs::write(&formal, "adapter").unwrap();
    let formal = second_path.map_or(formal, std::path::PathBuf::from);
    let log = scratch.0.join("fake.log");
    let config = format!(
        "[[models]]\nname = \"chat\"\npath = {model:?}\n\
         [[models.lora]]\nname = \"pirate\"\npath = {pirate:?}\nscale = 0.8\n\
         [[models.lora]]\nname = \"formal\"\npath = {formal:?}\n"
    );
    let runtime = fake_runtime(fake);
    let server = Server::start_env(
        &config,
        &["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()],
        &[
            ("FAKE_RKLLM_TOKEN_MS", "0"),
            ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
        ],
    );
    (server, log)
}

#[tokio::test]
async fn adapters_load_with_the_model_and_requests_select_them_on_both_abis() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let scratch = ScratchDir::new();
        let (server, log) = start(fake, &scratch, None);
        let plain = server.ok("run", json!({"prompt": "hi"})).await;
        assert_eq!(plain["text"], TEXT);
        let log_text = std::fs::read_to_string(&log).unwrap();
        assert!(
            log_text.contains("lora-load name=pirate scale=0.80"),
            "{log_text}"
        );
        assert!(
            log_text.contains("lora-load name=formal scale=1.00"),
            "{log_text}"
        );

        let pirate = server
            .ok("run", json!({"prompt": "hi", "lora": "pirate"}))
            .await;
        assert_eq!(pirate["text"], format!("[lora pirate] {TEXT}"));

        let openai: Value = server
            .post_json(
                "/v1/chat/completions",
                json!({"model": "chat", "lora": "formal",
                            "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await;
        assert_eq!(
            openai["choices"][0]["message"]["content"],
            format!("[lora formal] {TEXT}"),
            "{openai}"
        );
        let ollama: Value = server
            .post_json(
                "/api/generate",
                json!({"model": "chat", "prompt": "hi", "stream": false,
                            "options": {"lora": "pirate"}}),
            )
            .await;
        assert_eq!(
            ollama["response"],
            format!("[lora pirate] {TEXT}"),
            "{ollama}"
        );

        // An unknown adapter is refused before it is queued, on each API.
        let refused = server
            .call("run", json!({"prompt": "hi", "lora": "poet"}))
            .await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(refused["error"]["data"]["field"], "lora");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("its adapters are: pirate, formal"),
            "{message}"
        );
        let openai = server
            .send(
                reqwest::Method::POST,
                "/v1/chat/completions",
                Some(json!({"model": "chat", "lora": "poet",
                            "messages": [{"role": "user", "content": "hi"}]})),
                None,
            )
            .await;
        assert_eq!(openai.status(), 400);
        let ollama = server
            .send(
                reqwest::Method::POST,
                "/api/chat",
                Some(
                    json!({"model": "chat", "stream": false, "options": {"lora": "poet"},
                            "messages": [{"role": "user", "content": "hi"}]}),
                ),
                None,
            )
            .await;
        assert_eq!(ollama.status(), 400);

        let models = server.ok("models", json!({})).await;
        assert_eq!(
            models["models"][0]["lora_adapters"],
            json!(["pirate", "formal"])
        );
    }
}

#[tokio::test]
async fn a_missing_adapter_file_fails_the_load_naming_it() {
    let scratch = ScratchDir::new();
    let (server, _) = start(Fake::V1_3, &scratch, Some("/nonexistent/formal.rkllm"));
    let response = server.call("run", json!({"prompt": "hi"})).await;
    let text = response.to_string();
    assert!(
        text.contains("LoRA adapter `formal`: file /nonexistent/formal.rkllm does not exist"),
        "{text}"
    );
}

/// A gauge's value for model `chat` in a metrics text.
fn gauge(metrics: &str, name: &str) -> f64 {
    model_metric(metrics, name, "chat", &[])
        .unwrap_or_else(|| panic!("no {name} for chat in {metrics}"))
}

#[tokio::test]
async fn a_gateway_reads_the_kv_cache_held_and_the_adapters_loaded() {
    let scratch = ScratchDir::new();
    let (server, _log) = start(Fake::V1_3, &scratch, None);
    // Not loaded yet: nothing held, no adapter loaded.
    let before = server.metrics_text().await;
    assert_eq!(gauge(&before, "rkllm_kv_cache_tokens"), 0.0);
    assert_eq!(gauge(&before, "rkllm_lora_adapters_loaded"), 0.0);
    // A chat: the runtime keeps its history for the next turn (a plain
    // prompt leaves the cache empty).
    let chat: Value = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(chat["choices"][0]["message"]["content"], TEXT, "{chat}");
    let after = server.metrics_text().await;
    let held = gauge(&after, "rkllm_kv_cache_tokens");
    let used = gauge(&after, "rkllm_kv_cache_utilization");
    assert!(held > 0.0, "{after}");
    assert!(used > 0.0 && used <= 1.0, "{after}");
    let models = server.ok("models", json!({})).await;
    let context = models["models"][0]["context_length"].as_f64().unwrap();
    assert!(
        (used - held / context).abs() < 1e-9,
        "{used} {held} {context}"
    );
    assert_eq!(gauge(&after, "rkllm_lora_adapters_loaded"), 2.0);
    assert!(
        after.lines().any(|l| l.starts_with("rkllm_lora_requests{")
            && l.contains("running_lora_adapters=\"pirate,formal\"")
            && l.contains("max_lora=\"2\"")),
        "{after}"
    );
}
