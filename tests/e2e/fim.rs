//! Fill-in-the-middle on the runtime test double, as Continue's tab
//! autocomplete asks for it: a code model pulled from the stand-in for
//! Hugging Face with FIM tokens in its tokenizer, `/api/show` telling the
//! editor so (`insert`, a template with `.Suffix`, its context as
//! `num_ctx`), Continue's own `/api/generate` body reaching the runtime
//! as prefix, suffix and middle in the model's tokens, a keystroke later
//! starting from the snapshot of the text before, and the same on
//! `/v1/completions`; a model without FIM tokens, or without a
//! tokenizer, refused naming `suffix` and the model.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, mock_tokenizer_with, ndjson};
use crate::store::{FakeHf, cli_with};

/// What the fake runtime "generates": the model file's text.
const MIDDLE: &str = "return a + b";

/// The mock's tokenizer with Qwen2.5-Coder's FIM tokens added.
fn fim_tokenizer() -> String {
    mock_tokenizer_with(&[
        ("<|fim_prefix|>", true),
        ("<|fim_suffix|>", true),
        ("<|fim_middle|>", true),
        ("<|fim_pad|>", true),
    ])
}

fn repos() -> Value {
    json!({"repos": {"acme/coder": {"files": {
        "coder_rk3588.rkllm": {"text": MIDDLE},
        "tokenizer.json": {"text": fim_tokenizer()},
        "tokenizer_config.json": {"text": json!({
            "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n",
            "eos_token": "<|endoftext|>",
        }).to_string()},
    }}}})
}

/// Continue's body for `/api/generate` in tab autocomplete (its Ollama
/// provider's generate options: the model, the prefix as `prompt`, the
/// suffix, the model-file options, a keep-alive of 30 minutes, streamed).
fn continue_body(model: &str, prefix: &str, suffix: &str, num_ctx: u64) -> Value {
    json!({
        "model": model,
        "prompt": prefix,
        "suffix": suffix,
        "options": {
            "temperature": 0.01,
            "num_predict": 256,
            "stop": ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                     "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>",
                     "/src/", "#- coding: utf-8", "```"],
            "num_ctx": num_ctx,
        },
        "keep_alive": 1800,
        "stream": true,
    })
}

/// The runtime's log (a prompt's new lines are in it as they are).
fn runs(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

#[tokio::test]
async fn continues_fim_request_reaches_the_runtime_as_prefix_suffix_middle() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let store = dir.0.join("models");
    let (ok, out, err) = cli_with(&hf, &dir.0, ("", ""), &["pull", "acme/coder"], &[]);
    assert!(ok, "{out}{err}");
    // A model copied by hand: no tokenizer, the runtime's template.
    let copied = dir.0.join("copied.rkllm");
    std::fs::write(&copied, MIDDLE).unwrap();
    let log = dir.0.join("fake.log");
    let config = format!(
        "[rkllm]\nsnapshot_dir = {:?}\n[[models]]\nname = \"copied\"\npath = {copied:?}\n",
        dir.0.join("snapshots")
    );
    let server = Server::start_on_fake(
        &config,
        Fake::V1_3,
        &log,
        &["--models-dir", store.to_str().unwrap()],
        &[("FAKE_RKLLM_PREFILL_US_PER_BYTE", "1")],
    );

    // What Continue reads to turn FIM on, and the context it sends back.
    let shown = server
        .post_json("/api/show", json!({"name": "coder_rk3588"}))
        .await;
    let template = shown["template"].as_str().unwrap();
    assert!(template.contains(".Suffix"), "{shown}");
    assert!(
        shown["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("insert")),
        "{shown}"
    );
    let parameters = shown["parameters"].as_str().unwrap();
    let num_ctx: u64 = parameters
        .lines()
        .find_map(|l| l.strip_prefix("num_ctx "))
        .unwrap_or_else(|| panic!("no num_ctx in {parameters:?}"))
        .parse()
        .unwrap();
    let plain = server
        .post_json("/api/show", json!({"name": "copied"}))
        .await;
    assert_eq!(plain["template"], "", "{plain}");
    assert!(
        !plain["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("insert"))
    );

    // The file's text before the cursor is long (a file that barely
    // changes between keystrokes); after it, a little.
    let prefix = format!(
        "{}def add(a, b):\n    ",
        "# helpers for the board's scripts\nimport os\n".repeat(20)
    );
    let suffix = "\n\nprint(add(1, 2))\n";
    let lines = ndjson(
        &server,
        "/api/generate",
        continue_body("coder_rk3588", &prefix, suffix, num_ctx),
    )
    .await;
    let text: String = lines
        .iter()
        .filter_map(|l| l["response"].as_str())
        .collect();
    assert_eq!(text, MIDDLE, "{lines:?}");
    let sent = format!("<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>");
    let first = runs(&log);
    assert!(
        first.contains(&format!("keep_history=0 prompt={sent}\n")),
        "the runtime is given prefix, suffix and middle in the model's tokens: {first}"
    );

    // A keystroke later: the same file with one more character typed. The
    // runtime starts from the snapshot of the text sent before and
    // prefills only the rest.
    let typed = format!("{prefix}r");
    let lines = ndjson(
        &server,
        "/api/generate",
        continue_body("coder_rk3588", &typed, suffix, num_ctx),
    )
    .await;
    assert_eq!(lines.last().unwrap()["done"], true);
    let second = runs(&log)[first.len()..].to_owned();
    let cached: usize = second
        .lines()
        .find_map(|l| l.strip_prefix("run-cached bytes="))
        .unwrap_or_else(|| panic!("no snapshot served the second keystroke: {second}"))
        .parse()
        .unwrap();
    assert!(
        cached >= "<|fim_prefix|>".len() + prefix.len(),
        "the snapshot covers the prefix ({cached} bytes): {second}"
    );

    // Continue's default `num_ctx` (8192) on a model with a smaller
    // context: clamped to the model's, as Ollama does, and said in the log.
    assert!(num_ctx < 8192, "{parameters}");
    let lines = ndjson(
        &server,
        "/api/generate",
        continue_body("coder_rk3588", &typed, suffix, 8192),
    )
    .await;
    let text: String = lines
        .iter()
        .filter_map(|l| l["response"].as_str())
        .collect();
    assert_eq!(text, MIDDLE, "{lines:?}");
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("requested context size too large") && l.contains("8192")),
        "{:?}",
        server.log()
    );

    // `/v1/completions` with a suffix is the same.
    let completion = server
        .post_json(
            "/v1/completions",
            json!({"model": "coder_rk3588", "prompt": "x = ", "suffix": "\n", "max_tokens": 16}),
        )
        .await;
    assert_eq!(completion["choices"][0]["text"], MIDDLE, "{completion}");
    assert!(
        runs(&log).contains("prompt=<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|>\n"),
        "{}",
        runs(&log)
    );

    // A model without a tokenizer: no FIM and no tokenize, each a 400
    // naming the field and the model.
    for (path, body, field) in [
        (
            "/v1/completions",
            json!({"model": "copied", "prompt": "x", "suffix": "y"}),
            "suffix",
        ),
        (
            "/tokenize",
            json!({"model": "copied", "content": "x"}),
            "model",
        ),
    ] {
        let response = server
            .send(reqwest::Method::POST, path, Some(body), None)
            .await;
        assert_eq!(response.status(), 400, "{path}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], field, "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("`copied`"), "{message}");
    }
    let refused = server
        .send(
            reqwest::Method::POST,
            "/api/generate",
            Some(continue_body("copied", "x", "y", 1024)),
            None,
        )
        .await;
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    let message = error["error"].as_str().unwrap();
    assert!(
        message.contains("suffix") && message.contains("`copied`"),
        "{message}"
    );

    // The pulled model's tokenizer answers /tokenize and /detokenize.
    let tokens = server
        .post_json(
            "/tokenize",
            json!({"model": "coder_rk3588", "content": "<|fim_prefix|>日本 👋"}),
        )
        .await;
    let ids: Vec<u64> = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 1 + 6 + 1 + 4, "{tokens}");
    let back = server
        .post_json(
            "/detokenize",
            json!({"model": "coder_rk3588", "tokens": ids}),
        )
        .await;
    assert_eq!(back["content"], "<|fim_prefix|>日本 👋");
}
