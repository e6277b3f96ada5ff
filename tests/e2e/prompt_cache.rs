//! Prompt-cache files, on both ABIs: built once at load (the runtime saves
//! the system prompt's prefill), loaded again after a restart instead of
//! rebuilt, applied to requests that start with the system prompt, and
//! released for the others. The test double prefills in time proportional
//! to the bytes the cache does not cover and logs what it does.

use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;

use crate::harness::{Fake, ScratchDir, Server, fake_runtime};

fn system_prompt() -> String {
    "You are the assistant of a Rock 5B board. Answer briefly. ".repeat(40)
}

fn start(fake: Fake, scratch: &ScratchDir) -> Server {
    let model = scratch.0.join("chat.rkllm");
    if !model.exists() {
        std::fs::write(&model, "Cached answer.").unwrap();
    }
    let cache = scratch.0.join("caches").join("chat.prompt-cache");
    let config = format!(
        "[[models]]\nname = \"chat\"\npath = {model:?}\n\
         [models.system_prompt_cache]\nprompt = {prompt:?}\npath = {cache:?}\n",
        prompt = system_prompt()
    );
    let runtime = fake_runtime(fake);
    let log = scratch.0.join("fake.log");
    Server::start_env(
        &config,
        &[
            "--backend",
            "rkllm",
            "--runtime",
            runtime.to_str().unwrap(),
            "--preload",
            "chat",
        ],
        &[
            ("FAKE_RKLLM_TOKEN_MS", "0"),
            ("FAKE_RKLLM_PREFILL_US_PER_BYTE", "100"),
            ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
        ],
    )
}

fn count(scratch: &ScratchDir, event: &str) -> usize {
    std::fs::read_to_string(scratch.0.join("fake.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(event))
        .count()
}

#[tokio::test]
async fn the_cache_is_built_once_reused_after_a_restart_and_applied_by_prefix() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let scratch = ScratchDir::new();
        let cache = scratch.0.join("caches").join("chat.prompt-cache");
        {
            let server = start(fake, &scratch);
            assert_eq!(count(&scratch, "prompt-cache-save"), 1);
            assert_eq!(count(&scratch, "prompt-cache-load"), 1);
            let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
            let sidecar = std::fs::read_to_string(format!("{}.json", cache.display())).unwrap();
            assert!(sidecar.contains("prompt_sha256"), "{sidecar}");

            // A request that starts with the system prompt prefills only the rest.
            let prompt = format!("{}What is an NPU?", system_prompt());
            let cached = server.ok("run", json!({"prompt": prompt})).await;
            assert_eq!(cached["text"], "Cached answer.");
            assert_eq!(count(&scratch, "run-cached"), 1);
            // Another prompt: the cache is released, the whole prompt prefilled.
            let other = server
                .ok(
                    "run",
                    json!({"prompt": format!("Hello. {}", system_prompt())}),
                )
                .await;
            assert_eq!(count(&scratch, "prompt-cache-release"), 1);
            assert_eq!(count(&scratch, "run-cached"), 1);
            let (fast, slow) = (
                cached["timings"]["prefill_ms"].as_f64().unwrap(),
                other["timings"]["prefill_ms"].as_f64().unwrap(),
            );
            // The double sleeps 100 µs per uncovered byte: 2,320 bytes apart.
            assert!(
                cached["usage"]["prompt_tokens"].as_u64()
                    < other["usage"]["prompt_tokens"].as_u64(),
                "{cached} {other}"
            );
            assert!(
                fast < slow,
                "prefill {fast} ms with the cache, {slow} ms without"
            );
            // And back: loaded again for a matching prompt.
            server.ok("run", json!({"prompt": prompt})).await;
            assert_eq!(count(&scratch, "prompt-cache-load"), 2);
            assert_eq!(count(&scratch, "run-cached"), 2);

            // A chat whose system message is the cached prompt: its first
            // turn uses the cache, its second continues the runtime's
            // history and sends only the new message, as without a cache.
            let chat = |messages: serde_json::Value| {
                server.send(
                    reqwest::Method::POST,
                    "/v1/chat/completions",
                    Some(json!({"model": "chat", "messages": messages})),
                    None,
                )
            };
            let system = system_prompt();
            let first = chat(json!([
                {"role": "system", "content": system},
                {"role": "user", "content": "First question?"}
            ]))
            .await;
            assert_eq!(first.status(), 200);
            assert_eq!(count(&scratch, "run-cached"), 3);
            let second = chat(json!([
                {"role": "system", "content": system},
                {"role": "user", "content": "First question?"},
                {"role": "assistant", "content": "Cached answer."},
                {"role": "user", "content": "Second question?"}
            ]))
            .await;
            assert_eq!(second.status(), 200);
            let log = std::fs::read_to_string(scratch.0.join("fake.log")).unwrap();
            let last_run = log.lines().rfind(|l| l.starts_with("run ")).unwrap();
            assert!(
                last_run.contains("keep_history=1")
                    && last_run.ends_with("prompt=Second question?"),
                "{last_run}"
            );
        }
        // A restart loads the file; nothing is built again.
        let _server = start(fake, &scratch);
        assert_eq!(count(&scratch, "prompt-cache-save"), 1);
        assert_eq!(count(&scratch, "prompt-cache-load"), 3);
        drop(_server);
        // Another model file: the cache is made again.
        std::fs::write(scratch.0.join("chat.rkllm"), "A new model.").unwrap();
        let _server = start(fake, &scratch);
        assert_eq!(count(&scratch, "prompt-cache-save"), 2);
    }
}
