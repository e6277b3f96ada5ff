//! Embedding models end to end: the runtime in hidden-layer mode (the
//! test double returns rows computed from the input text, so the expected
//! vector is known), pooling and normalisation, the JSON-RPC method, the
//! OpenAI and Ollama endpoints, and refusals.

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_runtime};

const WIDTH: usize = 8;

/// The test double's hidden rows for `text`: one per 4 bytes, element `d`
/// of row `t` being byte `(4t + d) mod len` / 255.
fn rows(text: &str) -> Vec<Vec<f64>> {
    let bytes = text.as_bytes();
    (0..bytes.len().div_ceil(4))
        .map(|t| {
            (0..WIDTH)
                .map(|d| f64::from(bytes[(4 * t + d) % bytes.len()]) / 255.0)
                .collect()
        })
        .collect()
}

fn unit(v: Vec<f64>) -> Vec<f64> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

fn last(text: &str) -> Vec<f64> {
    unit(rows(text).pop().unwrap())
}

fn mean(text: &str) -> Vec<f64> {
    let rows = rows(text);
    (0..WIDTH)
        .map(|d| rows.iter().map(|r| r[d]).sum::<f64>() / rows.len() as f64)
        .collect()
}

fn assert_close(got: &Value, want: &[f64]) {
    let got: Vec<f64> = got
        .as_array()
        .unwrap_or_else(|| panic!("not a vector: {got}"))
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?} != {want:?}");
    }
}

fn start(fake: Fake, scratch: &ScratchDir) -> Server {
    let text_model = scratch.0.join("chat.rkllm");
    std::fs::write(&text_model, "Some text.").unwrap();
    let emb = scratch.0.join("emb.rkllm");
    std::fs::write(&emb, "unused").unwrap();
    let config = format!(
        "[limits]\nmax_embedding_inputs = 3\n\
         [[models]]\nname = \"emb\"\npath = {emb:?}\nembedding = true\n\
         [[models]]\nname = \"emb-mean\"\npath = {emb:?}\nembedding = true\npooling = \"mean\"\nnormalize = false\n\
         [[models]]\nname = \"chat\"\npath = {text_model:?}\n"
    );
    let runtime = fake_runtime(fake);
    Server::start_env(
        &config,
        &["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()],
        &[("FAKE_RKLLM_EMBED_DIM", "8"), ("FAKE_RKLLM_TOKEN_MS", "0")],
    )
}

#[tokio::test]
async fn vectors_come_from_the_last_hidden_layer_on_both_abis() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let scratch = ScratchDir::new();
        let server = start(fake, &scratch);
        let texts = ["Rockchip NPU", "an RK3588 board, 8 GB"];
        let result = server
            .ok("embed", json!({"model": "emb", "input": texts}))
            .await;
        assert_eq!(result["model"], "emb");
        for (i, text) in texts.iter().enumerate() {
            assert_close(&result["embeddings"][i], &last(text));
        }
        let tokens: usize = texts.iter().map(|t| t.len().div_ceil(4)).sum();
        assert_eq!(result["usage"]["prompt_tokens"], tokens);

        let result = server
            .ok(
                "embed",
                json!({"model": "emb-mean", "input": "Rockchip NPU"}),
            )
            .await;
        assert_close(&result["embeddings"][0], &mean("Rockchip NPU"));

        // Text generation on the same server is unaffected.
        let text = server
            .ok("run", json!({"model": "chat", "prompt": "hi"}))
            .await;
        assert_eq!(text["text"], "Some text.");
    }
}

#[tokio::test]
async fn openai_and_ollama_endpoints_and_their_refusals() {
    let scratch = ScratchDir::new();
    let server = start(Fake::V1_3, &scratch);
    let post = |path: &'static str, body: Value| {
        server.send(reqwest::Method::POST, path, Some(body), None)
    };
    let openai = server
        .post_json(
            "/v1/embeddings",
            json!({"model": "emb", "input": ["one", "two words"]}),
        )
        .await;
    assert_eq!(openai["object"], "list");
    assert_eq!(openai["data"][1]["index"], 1);
    assert_close(&openai["data"][0]["embedding"], &last("one"));
    assert_close(&openai["data"][1]["embedding"], &last("two words"));
    assert_eq!(openai["usage"]["prompt_tokens"], 1 + 3);

    // base64: little-endian f32s.
    let encoded: Value = post(
        "/v1/embeddings",
        json!({"model": "emb", "input": "one", "encoding_format": "base64"}),
    )
    .await
    .json()
    .await
    .unwrap();
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let floats: Vec<Value> = bytes
        .chunks_exact(4)
        .map(|c| json!(f32::from_le_bytes(c.try_into().unwrap())))
        .collect();
    assert_close(&Value::Array(floats), &last("one"));

    let ollama: Value = post("/api/embed", json!({"model": "emb", "input": "one"}))
        .await
        .json()
        .await
        .unwrap();
    assert_close(&ollama["embeddings"][0], &last("one"));
    assert_eq!(ollama["prompt_eval_count"], 1);
    let legacy: Value = post("/api/embeddings", json!({"model": "emb", "prompt": "one"}))
        .await
        .json()
        .await
        .unwrap();
    assert_close(&legacy["embedding"], &last("one"));

    // Refusals, each naming the problem.
    let refusals: [(&str, Value, &str); 7] = [
        (
            "/v1/embeddings",
            json!({"model": "emb", "input": "x", "dimensions": 4}),
            "`dimensions` is not supported",
        ),
        (
            "/v1/embeddings",
            json!({"model": "emb", "input": [1, 2]}),
            "token ids is not supported",
        ),
        (
            "/v1/embeddings",
            json!({"model": "emb", "input": ["a", "b", "c", "d"]}),
            "limits.max_embedding_inputs",
        ),
        (
            "/v1/embeddings",
            json!({"model": "emb", "input": ""}),
            "is empty",
        ),
        (
            "/v1/embeddings",
            json!({"model": "chat", "input": "x"}),
            "is not an embedding model",
        ),
        (
            "/api/embed",
            json!({"model": "chat", "input": "x"}),
            "is not an embedding model",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "emb", "messages": [{"role": "user", "content": "x"}]}),
            "is an embedding model",
        ),
    ];
    for (path, body, expected) in refusals {
        let response = post(path, body.clone()).await;
        assert_eq!(response.status(), 400, "{path} {body}");
        let text = response.text().await.unwrap();
        assert!(
            text.contains(expected),
            "{path}: {expected:?} not in {text}"
        );
    }
    let response = server
        .call("embed", json!({"model": "emb", "input": 42}))
        .await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    let response = server
        .call("run", json!({"model": "emb", "prompt": "x"}))
        .await;
    assert_eq!(response["error"]["code"], -32602, "{response}");

    let models = server.ok("models", json!({})).await;
    let emb = models["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "emb")
        .unwrap();
    assert_eq!(emb["capabilities"], json!(["embedding"]));
}

#[tokio::test]
async fn the_kv_cache_is_reported_and_cleared_on_both_abis() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let scratch = ScratchDir::new();
        let server = start(fake, &scratch);
        // Not loaded yet: nothing to clear, and nothing is loaded for it.
        let result = server.ok("clear_kv_cache", json!({"model": "chat"})).await;
        assert_eq!(result["cleared"], false, "{result}");
        // A chat keeps its turns in the runtime's cache.
        let chat = server
            .send(
                reqwest::Method::POST,
                "/v1/chat/completions",
                Some(json!({"model": "chat", "messages": [{"role": "user", "content": "Hello there"}]})),
                None,
            )
            .await;
        assert_eq!(chat.status(), 200);
        let models = server.ok("models", json!({})).await;
        let held = models["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "chat")
            .unwrap()["kv_cache_tokens"]
            .as_u64()
            .unwrap_or_else(|| panic!("no kv_cache_tokens: {models}"));
        assert!(held > 0, "{models}");
        let result = server.ok("clear_kv_cache", json!({"model": "chat"})).await;
        assert_eq!(result["cleared"], true, "{result}");
        assert_eq!(result["kv_cache_tokens"], 0, "{result}");
        let unknown = server
            .call("clear_kv_cache", json!({"model": "nope"}))
            .await;
        assert_eq!(unknown["error"]["code"], -32003, "{unknown}");
    }
}
