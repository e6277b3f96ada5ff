//! LoRA adapters end to end, on both ABIs: loaded with the model
//! (`rkllm_load_lora`, logged by the test double), selected per request on
//! JSON-RPC, OpenAI and Ollama (the double then answers with the adapter's
//! name first), refused when unknown, listed by `models`.

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_runtime};

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
