//! A model's tokenizer (structured output) against the stand-in for Hugging
//! Face (tests/fake-hf): pulled with the model from its repository or from
//! the base model its card names, recorded in the manifest, shown by
//! `list`, `show`, `models`, `/api/show` and `/metrics`, and used by
//! constrained requests on the mock backend; a repository with neither, a
//! broken tokenizer and a configured `tokenizer = "owner/repo"` that cannot
//! be fetched refuse structured output with why and what to set, and never
//! keep the server from starting.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::{LIVENESS, ScratchDir, Server};
use crate::store::{FakeHf, cli_with};

/// The mock's own tokenizer (308 tokens).
fn mock_tokenizer() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/mock-tokenizer.json"),
    )
    .unwrap()
}

/// The mock's tokenizer with one more special token (309 tokens): a
/// server that reports 309 read this one, not its own.
fn larger_tokenizer() -> String {
    let mut json: Value = serde_json::from_str(&mock_tokenizer()).unwrap();
    json["added_tokens"].as_array_mut().unwrap().push(json!({
        "id": 308, "content": "<|im_end|>", "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": false, "special": true
    }));
    json.to_string()
}

fn repos() -> Value {
    json!({"repos": {
        "acme/withtok": {"files": {
            "withtok_rk3588.rkllm": {"text": "with its own tokenizer "},
            "tokenizer.json": {"text": larger_tokenizer(), "lfs": true},
        }},
        "acme/based": {"files": {
            "README.md": {"text": "---\nlicense: mit\nbase_model:\n- acme/gated\n- acme/base\nbase_model_relation: quantized\n---\n# based\n"},
            "based_rk3588.rkllm": {"text": "on a base model "},
        }},
        "acme/base": {"files": {
            "README.md": {"text": "# the base model"},
            "tokenizer.json": {"text": mock_tokenizer()},
        }},
        "acme/gated": {"gated": true, "files": {"tokenizer.json": {"text": mock_tokenizer()}}},
        "acme/none": {"files": {
            "README.md": {"text": "---\nlicense: mit\n---\n# no base model\n"},
            "none_rk3588.rkllm": {"text": "without a tokenizer "},
        }},
        "acme/badtok": {"files": {
            "badtok_rk3588.rkllm": {"text": "with a broken tokenizer "},
            "tokenizer.json": {"text": "{\"model\": "},
        }},
    }})
}

fn pull(hf: &FakeHf, dir: &Path, args: &[&str]) -> (bool, String, String) {
    cli_with(hf, dir, ("", ""), args, &[])
}

fn manifest(hf: &FakeHf, dir: &Path, name: &str) -> Value {
    let (ok, out, err) = pull(hf, dir, &["show", name]);
    assert!(ok, "{out}{err}");
    serde_json::from_str::<Value>(&out).unwrap()["manifest"].clone()
}

/// A chat whose answer must be a JSON object: (status, body).
async fn constrained(server: &Server, model: &str) -> (u16, Value) {
    let response = server
        .send(
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(json!({
                "model": model,
                "messages": [{"role": "user", "content": "A JSON object, please."}],
                "response_format": {"type": "json_object"},
                "max_tokens": 200
            })),
            None,
        )
        .await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The answer of a constrained chat that must succeed, parsed.
async fn json_answer(server: &Server, model: &str) -> Value {
    let (status, body) = constrained(server, model).await;
    assert_eq!(status, 200, "{model}: {body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    let answer: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{content}: {e}"));
    assert!(answer.is_object(), "{content}");
    answer
}

/// The refusal of a constrained chat that must fail, its message.
async fn refusal(server: &Server, model: &str) -> String {
    let (status, body) = constrained(server, model).await;
    assert_eq!(status, 400, "{model}: {body}");
    assert_eq!(body["error"]["param"], "response_format", "{body}");
    body["error"]["message"].as_str().unwrap().to_owned()
}

async fn tokenizer_of(server: &Server, model: &str) -> Value {
    let models = server.ok("models", json!({})).await;
    models["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == model)
        .unwrap_or_else(|| panic!("{model} in {models}"))["tokenizer"]
        .clone()
}

/// Waits (bounded) until `check` holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) => assert!(
                tokio::time::Instant::now() < deadline,
                "{what}; last: {last}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn pulled_models_bring_their_tokenizer_and_constrained_requests_use_it() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let store = dir.0.join("models");

    // From the model's own repository (an LFS file, its sha256 checked).
    let (ok, out, err) = pull(&hf, &dir.0, &["pull", "acme/withtok"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("tokenizer from acme/withtok (309 tokens"),
        "{out}"
    );
    let withtok = manifest(&hf, &dir.0, "withtok_rk3588");
    let recorded = &withtok["tokenizer"];
    assert_eq!(recorded["file"], "tokenizer.json", "{withtok}");
    assert_eq!(recorded["repository"], "acme/withtok");
    assert_eq!(recorded["path"], "tokenizer.json");
    assert_eq!(recorded["revision"], "main");
    assert_eq!(recorded["size"], larger_tokenizer().len());
    assert_eq!(recorded["sha256_verified"], true);
    assert_eq!(recorded["tokens"], 309);
    assert!(recorded["commit"].is_string(), "{recorded}");
    assert_eq!(
        std::fs::read_to_string(store.join("withtok_rk3588/tokenizer.json")).unwrap(),
        larger_tokenizer()
    );

    // From the first base model its card names that has one (the first is
    // gated, which is said).
    let (ok, out, err) = pull(&hf, &dir.0, &["pull", "acme/based"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("tokenizer from acme/base (308 tokens"),
        "{out}"
    );
    let based = manifest(&hf, &dir.0, "based_rk3588");
    assert_eq!(based["tokenizer"]["repository"], "acme/base", "{based}");
    assert_eq!(based["tokenizer"]["sha256_verified"], false);
    assert_eq!(based["tokenizer"]["size"], mock_tokenizer().len());

    // Neither: the pull succeeds, and says why there is none.
    let (ok, out, err) = pull(&hf, &dir.0, &["pull", "acme/none"]);
    assert!(ok, "{out}{err}");
    assert!(err.contains("warning: no tokenizer"), "{err}");
    let none = manifest(&hf, &dir.0, "none_rk3588");
    assert!(none.get("tokenizer").is_none(), "{none}");
    assert_eq!(
        none["tokenizer_missing"],
        "acme/none has no tokenizer.json and its model card names no base model"
    );
    // A broken one is not kept.
    let (ok, out, err) = pull(&hf, &dir.0, &["pull", "acme/badtok"]);
    assert!(ok, "{out}{err}");
    let badtok = manifest(&hf, &dir.0, "badtok_rk3588");
    let why = badtok["tokenizer_missing"].as_str().unwrap();
    assert!(
        why.contains("acme/badtok: tokenizer.json is not a tokenizer structured output can use"),
        "{why}"
    );
    assert!(!store.join("badtok_rk3588/tokenizer.json").exists());

    let (ok, list, _) = pull(&hf, &dir.0, &["list"]);
    assert!(ok && list.contains("TOKENIZER"), "{list}");
    let row = |name: &str| {
        list.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {list}"))
            .to_owned()
    };
    assert!(row("withtok_rk3588").contains("acme/withtok"), "{list}");
    assert!(row("based_rk3588").contains("acme/base "), "{list}");
    assert!(row("none_rk3588").contains(" none "), "{list}");

    // Served by the mock: each model's own tokenizer, read from the store.
    let server = Server::start("", &["--models-dir", store.to_str().unwrap()]);
    let before = tokenizer_of(&server, "withtok_rk3588").await;
    assert_eq!(before["source"], "acme/withtok", "{before}");
    assert_eq!(before["available"], true);
    assert!(before.get("tokens").is_none(), "not loaded yet: {before}");
    json_answer(&server, "withtok_rk3588").await;
    json_answer(&server, "based_rk3588").await;
    let loaded = tokenizer_of(&server, "withtok_rk3588").await;
    assert_eq!(
        loaded["tokens"], 309,
        "the stored one, not the mock's: {loaded}"
    );
    let memory = loaded["memory_bytes"].as_u64().unwrap();
    assert!(memory > 0, "{loaded}");
    assert_eq!(tokenizer_of(&server, "based_rk3588").await["tokens"], 308);
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains(&format!(
            "rkllm_tokenizer_memory_bytes{{model=\"withtok_rk3588\"}} {memory}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("rkllm_tokenizer_memory_bytes{model=\"none_rk3588\"} 0"),
        "{metrics}"
    );
    let shown = server
        .post_json("/api/show", json!({"model": "based_rk3588"}))
        .await;
    assert_eq!(shown["tokenizer"]["source"], "acme/base", "{shown}");
    assert_eq!(shown["tokenizer"]["available"], true, "{shown}");

    // Without one: a 400 naming the model, why and what to do; free text
    // still works.
    let message = refusal(&server, "none_rk3588").await;
    assert!(
        message
            .starts_with("model `none_rk3588` has no tokenizer: acme/none has no tokenizer.json"),
        "{message}"
    );
    assert!(
        message.contains("rkllm-server pull --tokenizer OWNER/REPO acme/none"),
        "{message}"
    );
    assert!(message.contains("`tokenizer`"), "{message}");
    let shown = server
        .post_json("/api/show", json!({"model": "none_rk3588"}))
        .await;
    assert_eq!(shown["tokenizer"]["available"], false, "{shown}");
    let free = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "none_rk3588", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert!(
        free["choices"][0]["message"]["content"].is_string(),
        "{free}"
    );
    let message = refusal(&server, "badtok_rk3588").await;
    assert!(
        message.contains("is not a tokenizer structured output can use"),
        "{message}"
    );

    // Pulled again naming one: only the tokenizer is fetched, and the
    // running server uses it within seconds.
    let (ok, out, err) = pull(
        &hf,
        &dir.0,
        &["pull", "--tokenizer", "acme/base", "acme/none"],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("tokenizer from acme/base"), "{out}");
    assert_eq!(hf.downloads("none_rk3588.rkllm"), (1, 0));
    let none = manifest(&hf, &dir.0, "none_rk3588");
    assert_eq!(none["tokenizer"]["repository"], "acme/base", "{none}");
    assert!(none.get("tokenizer_missing").is_none(), "{none}");
    eventually("the re-pulled tokenizer is used", || async {
        match constrained(&server, "none_rk3588").await {
            (200, _) => Ok(()),
            (_, body) => Err(body.to_string()),
        }
    })
    .await;
    // A tokenizer named that cannot be had fails the pull, before the model.
    let (ok, _, err) = pull(
        &hf,
        &dir.0,
        &[
            "pull",
            "--tokenizer",
            "acme/nope",
            "acme/badtok",
            "--name",
            "other",
        ],
    );
    assert!(!ok);
    assert!(
        err.contains("the tokenizer named, acme/nope, could not be had"),
        "{err}"
    );
    assert!(!store.join("other").exists());
    let (ok, _, err) = pull(
        &hf,
        &dir.0,
        &["pull", "--tokenizer", "./tokenizer.json", "acme/none"],
    );
    assert!(
        !ok && err.contains("from a Hugging Face repository"),
        "{err}"
    );

    // Removing a model removes its tokenizer.
    let (ok, out, _) = pull(&hf, &dir.0, &["rm", "withtok_rk3588"]);
    assert!(ok, "{out}");
    assert!(!store.join("withtok_rk3588").exists());
}

#[tokio::test]
async fn a_configured_tokenizer_is_fetched_from_the_hub_without_holding_up_the_start() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let broken = dir.0.join("broken.json");
    std::fs::write(&broken, "{").unwrap();
    let config = format!(
        "[store]\nendpoint = \"{}\"\nmodels_dir = \"{}\"\n\
         [[models]]\nname = \"cfg\"\ntokenizer = \"acme/base\"\n\
         [[models]]\nname = \"gone\"\ntokenizer = \"acme/nope\"\n\
         [[models]]\nname = \"lost\"\ntokenizer = \"/nonexistent/tokenizer.json\"\n\
         [[models]]\nname = \"broken\"\ntokenizer = \"{}\"\n",
        hf.endpoint(),
        dir.0.join("models").display(),
        broken.display()
    );
    let server = Server::start(&config, &[]);
    eventually("the configured tokenizer is fetched", || async {
        match constrained(&server, "cfg").await {
            (200, _) => Ok(()),
            (_, body) => Err(body.to_string()),
        }
    })
    .await;
    json_answer(&server, "cfg").await;
    assert_eq!(
        std::fs::read_to_string(dir.0.join("models/.tokenizers/acme/base/tokenizer.json")).unwrap(),
        mock_tokenizer()
    );
    let info = tokenizer_of(&server, "cfg").await;
    assert_eq!(info["source"], "acme/base", "{info}");
    assert_eq!(info["tokens"], 308, "{info}");

    // One that cannot be fetched: the model serves, structured output is
    // refused saying why.
    let message = refusal(&server, "gone").await;
    assert!(
        message
            .starts_with("model `gone` has no tokenizer: it could not be fetched from acme/nope"),
        "{message}"
    );
    assert!(message.contains("not found"), "{message}");
    let free = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "gone", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert!(
        free["choices"][0]["message"]["content"].is_string(),
        "{free}"
    );
    let info = tokenizer_of(&server, "gone").await;
    assert_eq!(info["available"], false, "{info}");

    // A file that is not there, or is not a tokenizer.
    let message = refusal(&server, "lost").await;
    assert!(
        message.contains("its `tokenizer`, /nonexistent/tokenizer.json, does not exist"),
        "{message}"
    );
    let message = refusal(&server, "broken").await;
    assert!(
        message.starts_with("model `broken`: the tokenizer"),
        "{message}"
    );
    assert!(message.contains("not JSON"), "{message}");
    assert!(message.contains("set `tokenizer`"), "{message}");

    // Over Ollama's API too, naming its field.
    let response = server
        .send(
            reqwest::Method::POST,
            "/api/chat",
            Some(json!({"model": "lost", "stream": false, "format": "json",
                        "messages": [{"role": "user", "content": "hi"}]})),
            None,
        )
        .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("model `lost` has no tokenizer"),
        "{body}"
    );
}

#[test]
fn a_tokenizer_keeps_to_the_store_limits_and_a_card_names_only_repositories_of_the_endpoint() {
    let big_card = format!("---\nbase_model: acme/base\n---\n{}", "x".repeat(2 << 20));
    let hf = FakeHf::start(&json!({"repos": {
        "acme/base": {"files": {"tokenizer.json": {"text": mock_tokenizer()}}},
        "acme/honest": {"files": {
            "honest_rk3588.rkllm": {"text": "a model "},
            "tokenizer.json": {"text": mock_tokenizer()},
        }},
        "acme/liar": {"files": {
            "liar_rk3588.rkllm": {"text": "a model "},
            "tokenizer.json": {"text": mock_tokenizer(), "declared": 100, "lfs": true},
        }},
        "acme/hostile": {"files": {
            "README.md": {"text": "---\nbase_model: [\"http://127.0.0.1:1/x\", acme/../etc, ../../x, acme/base]\n---\n"},
            "hostile_rk3588.rkllm": {"text": "a model "},
        }},
        "acme/bigcard": {"files": {
            "README.md": {"text": big_card},
            "bigcard_rk3588.rkllm": {"text": "a model "},
        }},
    }}));
    let dir = ScratchDir::new();
    let missing = |name: &str| -> String {
        manifest(&hf, &dir.0, name)["tokenizer_missing"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has a tokenizer"))
            .to_owned()
    };

    // The store's size limit holds for a tokenizer as for a model file.
    let small = ("", "max_file_bytes = 1000");
    let (ok, out, err) = cli_with(
        &hf,
        &dir.0,
        small,
        &["pull", "acme/honest", "--name", "small"],
        &[],
    );
    assert!(ok, "{out}{err}");
    let why = missing("small");
    assert!(
        why.contains(
            "acme/honest: tokenizer.json is larger than [store] max_file_bytes (1000 bytes)"
        ),
        "{why}"
    );
    // A host that sends more than it declared is cut there.
    let (ok, out, err) = pull(&hf, &dir.0, &["pull", "acme/liar"]);
    assert!(ok, "{out}{err}");
    let why = missing("liar_rk3588");
    assert!(
        why.contains("acme/liar: the host sent more than the 100 bytes it declared"),
        "{why}"
    );
    assert!(!dir.0.join("models/liar_rk3588/tokenizer.json").exists());

    // A card naming URLs or paths: only `owner/repo` names are read, and
    // only from the endpoint.
    let (ok, out, err) = pull(&hf, &dir.0, &["pull", "acme/hostile"]);
    assert!(ok, "{out}{err}");
    let hostile = manifest(&hf, &dir.0, "hostile_rk3588");
    assert_eq!(hostile["tokenizer"]["repository"], "acme/base", "{hostile}");
    let listed: Vec<String> = hf
        .requests()
        .iter()
        .filter_map(|r| r["path"].as_str())
        .filter(|p| p.starts_with("/api/models/"))
        .map(str::to_owned)
        .collect();
    assert!(
        listed
            .iter()
            .all(|p| !p.contains("..") && !p.contains("127.0.0.1")),
        "{listed:?}"
    );
    // A card larger than a model card is not read.
    let (ok, out, err) = pull(&hf, &dir.0, &["pull", "acme/bigcard"]);
    assert!(ok, "{out}{err}");
    let why = missing("bigcard_rk3588");
    assert!(
        why.contains("README.md is larger than 1048576 bytes"),
        "{why}"
    );
    // Nothing was left behind in the downloads' folder.
    let left: Vec<_> = std::fs::read_dir(dir.0.join("models/.partial"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| !n.to_string_lossy().ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
