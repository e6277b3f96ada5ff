//! A model's own chat template, pulled with its tokenizer from the stand-in
//! for Hugging Face (tests/fake-hf): `pull` records the `chat_template` of
//! the `tokenizer_config.json` beside the tokenizer in the manifest, a
//! template that does not compile is refused with a warning, a model pulled
//! before templates gets its template from a later pull without being
//! downloaded again, and a conversation sent whole to the stored model
//! reaches the runtime (tests/fake-rkllmrt) rendered in that template, the
//! runtime's own template emptied.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_runtime};
use crate::store::{FakeHf, cli_with};

/// A small template that writes every part it is given: the special
/// tokens, each role and the generation prompt.
const TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\
                        {{ eos_token }} {% endfor %}{% if add_generation_prompt %}[assistant]\
                        {% endif %}";

/// What the fake runtime "generates": the model file's text.
const REPLY: &str = "Bonjour from the template.";

fn tokenizer() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/mock-tokenizer.json"),
    )
    .unwrap()
}

fn repos() -> Value {
    json!({"repos": {
        "acme/templated": {"files": {
            "templated_rk3588.rkllm": {"text": REPLY},
            "tokenizer.json": {"text": tokenizer()},
            "tokenizer_config.json": {"text": json!({
                "chat_template": [
                    {"name": "tool_use", "template": "not this one"},
                    {"name": "default", "template": TEMPLATE},
                ],
                "bos_token": {"__type": "AddedToken", "content": "<s>"},
                "eos_token": "<|end|>",
            }).to_string()},
        }},
        "acme/brokentpl": {"files": {
            "brokentpl_rk3588.rkllm": {"text": REPLY},
            "tokenizer.json": {"text": tokenizer()},
            "tokenizer_config.json": {"text": json!({
                "chat_template": "{% for m in messages %}{{ m.content }}",
                "eos_token": "</s>",
            }).to_string()},
        }},
    }})
}

fn cli(hf: &FakeHf, dir: &Path, args: &[&str]) -> (String, String) {
    let (ok, out, err) = cli_with(hf, dir, ("", ""), args, &[]);
    assert!(ok, "{args:?}: {out}{err}");
    (out, err)
}

fn manifest(hf: &FakeHf, dir: &Path, name: &str) -> Value {
    let (out, _) = cli(hf, dir, &["show", name]);
    serde_json::from_str::<Value>(&out).unwrap()["manifest"].clone()
}

#[tokio::test]
async fn pull_records_the_models_chat_template_and_a_conversation_reaches_the_runtime_in_it() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let store = dir.0.join("models");

    let (out, err) = cli(&hf, &dir.0, &["pull", "acme/templated"]);
    assert!(
        out.contains("chat template from acme/templated's tokenizer_config.json"),
        "{out}{err}"
    );
    let recorded = manifest(&hf, &dir.0, "templated_rk3588")["tokenizer"].clone();
    assert_eq!(
        recorded["chat_template"],
        json!({"source": TEMPLATE, "bos_token": "<s>", "eos_token": "<|end|>"}),
        "{recorded}"
    );
    assert!(
        recorded.get("chat_template_missing").is_none(),
        "{recorded}"
    );

    // One that does not compile: the pull succeeds, warns, records none.
    let (out, err) = cli(&hf, &dir.0, &["pull", "acme/brokentpl"]);
    assert!(
        err.contains("warning: no chat template recorded"),
        "{out}{err}"
    );
    let broken = manifest(&hf, &dir.0, "brokentpl_rk3588")["tokenizer"].clone();
    assert!(broken.get("chat_template").is_none(), "{broken}");
    let why = broken["chat_template_missing"].as_str().unwrap();
    assert!(
        why.starts_with("acme/brokentpl: tokenizer_config.json: the model's chat template"),
        "{why}"
    );

    // A manifest written before templates were pulled: a later pull reads
    // the template alone, the model file is not downloaded again.
    let path = store.join("templated_rk3588/manifest.json");
    let mut old: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let tokenizer = old["tokenizer"].as_object_mut().unwrap();
    tokenizer.remove("chat_template");
    std::fs::write(&path, old.to_string()).unwrap();
    assert!(
        manifest(&hf, &dir.0, "templated_rk3588")["tokenizer"]
            .get("chat_template")
            .is_none()
    );
    let downloads = hf.downloads("templated_rk3588.rkllm");
    cli(&hf, &dir.0, &["pull", "acme/templated"]);
    assert_eq!(hf.downloads("templated_rk3588.rkllm"), downloads);
    assert_eq!(
        manifest(&hf, &dir.0, "templated_rk3588")["tokenizer"]["chat_template"]["source"],
        TEMPLATE
    );

    // Served on the fake runtime: a conversation sent whole (a turn the
    // runtime does not hold) reaches it in the model's template.
    let log = dir.0.join("fake.log");
    let runtime = fake_runtime(Fake::V1_3);
    let server = Server::start_env(
        "",
        &[
            "--backend",
            "rkllm",
            "--runtime",
            runtime.to_str().unwrap(),
            "--models-dir",
            store.to_str().unwrap(),
        ],
        &[("FAKE_RKLLM_LOG", log.to_str().unwrap())],
    );
    let answer = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "templated_rk3588", "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "and then?"},
            ]}),
        )
        .await;
    assert_eq!(
        answer["choices"][0]["message"]["content"], REPLY,
        "{answer}"
    );
    let fake = std::fs::read_to_string(&log).unwrap();
    assert!(
        fake.contains("set-chat-template system=[] prefix=[] postfix=[]"),
        "the runtime's own template is emptied: {fake}"
    );
    let rendered = "prompt=<s>[system] be brief<|end|> [user] hi<|end|> [assistant] hello<|end|> \
                    [user] and then?<|end|> [assistant]";
    assert!(
        fake.lines()
            .any(|l| l.starts_with("run ") && l.ends_with(rendered)),
        "the conversation in the model's template: {fake}"
    );

    // The model whose template was refused keeps the runtime's template.
    let answer = server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "brokentpl_rk3588", "messages": [
                {"role": "user", "content": "hi"},
            ]}),
        )
        .await;
    assert_eq!(
        answer["choices"][0]["message"]["content"], REPLY,
        "{answer}"
    );
}
