//! NPU memory domains on the runtime test double, which logs the
//! `base_domain_id` each `rkllm_init` is given: models loaded at once start
//! in domains of their own, a vision model's language model above its
//! encoder's domain 0, a model's own `base_domain_id` is kept, an unloaded
//! model's domain is given again, and a model whose file is larger than
//! the memory the board has available is refused before `rkllm_init`.

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_rknn_runtime};
use crate::vision::ENCODER;

/// The domain of each `init` in the runtime's log, with the model file.
fn inits(log: &std::path::Path) -> Vec<(String, i32)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("init model="))
        .map(|l| {
            let file = l.split_whitespace().next().unwrap();
            let name = std::path::Path::new(file)
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let domain = l.rsplit_once("domain=").unwrap().1.trim().parse().unwrap();
            (name, domain)
        })
        .collect()
}

/// Loads `model` through the Ollama API (`keep_alive` 0 unloads it).
async fn load(server: &Server, model: &str, keep_alive: i64) -> Value {
    server
        .post_json(
            "/api/generate",
            json!({"model": model, "keep_alive": keep_alive}),
        )
        .await
}

#[tokio::test]
async fn co_resident_models_start_in_their_own_domains() {
    let dir = ScratchDir::new();
    let file = |name: &str| {
        let path = dir.0.join(format!("{name}.rkllm"));
        std::fs::write(&path, "Hello.").unwrap();
        path
    };
    let (a, b, c, pinned, vl) = (file("a"), file("b"), file("c"), file("pinned"), file("vl"));
    let encoder = dir.0.join("vl-vision.rknn");
    std::fs::write(&encoder, ENCODER).unwrap();
    // Sparse: a size no test machine has available, and no blocks.
    let huge = dir.0.join("huge.rkllm");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let config = format!(
        "[engine]\nmax_loaded_models = 4\n\
         [[models]]\nname = \"a\"\npath = {a:?}\n\
         [[models]]\nname = \"b\"\npath = {b:?}\n\
         [[models]]\nname = \"c\"\npath = {c:?}\n\
         [[models]]\nname = \"pinned\"\npath = {pinned:?}\nbase_domain_id = 6\n\
         [[models]]\nname = \"vl\"\npath = {vl:?}\nvision_encoder = {encoder:?}\n\
         [[models]]\nname = \"huge\"\npath = {huge:?}\n"
    );
    let log = dir.0.join("fake.log");
    let rknn = fake_rknn_runtime();
    let server = Server::start_on_fake(
        &config,
        Fake::V1_3,
        &log,
        &["--rknn-runtime", rknn.to_str().unwrap()],
        &[("FAKE_RKLLM_EMBED_DIM", "12")],
    );
    for model in ["a", "b", "pinned", "vl"] {
        let loaded = load(&server, model, 300).await;
        assert_eq!(loaded["done_reason"], "load", "{loaded}");
    }
    assert_eq!(
        inits(&log),
        [
            ("a".to_owned(), 0),
            ("b".to_owned(), 1),
            ("pinned".to_owned(), 6),
            // Above its encoder's domain 0, and the others'.
            ("vl".to_owned(), 2),
        ]
    );
    // `b` unloads; the next model loaded gets its domain.
    let unloaded = load(&server, "b", 0).await;
    assert_eq!(unloaded["done_reason"], "unload", "{unloaded}");
    let loaded = load(&server, "c", 300).await;
    assert_eq!(loaded["done_reason"], "load", "{loaded}");
    assert_eq!(inits(&log).last().unwrap(), &("c".to_owned(), 1));

    // Larger than the memory available: refused before `rkllm_init`.
    let refused = server
        .send(
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(json!({"model": "huge", "messages": [{"role": "user", "content": "hi"}]})),
            None,
        )
        .await;
    let status = refused.status().as_u16();
    let body: Value = refused.json().await.unwrap();
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("1024.0 GiB") && message.contains("MemAvailable"),
        "{message}"
    );
    assert!(!inits(&log).iter().any(|(name, _)| name == "huge"));
}
