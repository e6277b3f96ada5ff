//! A pulled model's own chat template: the `chat_template` of the
//! `tokenizer_config.json` beside the tokenizer a pull fetched (same
//! repository and revision, the same client, at most
//! [`MAX_TOKENIZER_CONFIG_BYTES`]), with its `bos_token` and `eos_token`,
//! recorded in the manifest with the tokenizer. Only a template that
//! compiles and renders a one-message chat in the sandbox (within its
//! memory, time and output bounds: a template is untrusted code) is
//! recorded; otherwise the manifest says why there is none and the model
//! keeps the runtime's own template. A template never fails a pull.

use crate::model::{ChatTemplate, JinjaTemplate};

use crate::model::template::{RenderJob, TemplateMessage};
use crate::sandbox::Sandbox;

use super::hf::Hub;
use super::{Manifest, StoredTokenizer};

/// The file a repository keeps its chat template in.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

/// Largest `tokenizer_config.json` read (real ones are tens of KiB).
pub const MAX_TOKENIZER_CONFIG_BYTES: usize = 4 << 20;

/// Where the `tokenizer_config.json` of `tokenizer` is: in the folder of
/// its `tokenizer.json`.
fn config_path(tokenizer: &StoredTokenizer) -> String {
    match tokenizer.path.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/{TOKENIZER_CONFIG_FILE}"),
        None => TOKENIZER_CONFIG_FILE.to_owned(),
    }
}

/// A stored model's chat template: the one its manifest names, else its
/// own (pulled with its tokenizer) when that compiles, else the runtime's.
pub(super) fn of(manifest: &Manifest) -> ChatTemplate {
    if let Some(named) = manifest
        .chat_template
        .as_deref()
        .and_then(ChatTemplate::named)
    {
        return named;
    }
    let own = manifest
        .tokenizer
        .as_ref()
        .and_then(|t| t.chat_template.as_ref());
    match own.map(|t| (t, t.check())) {
        Some((template, Ok(()))) => ChatTemplate::Jinja(template.clone()),
        Some((_, Err(why))) => {
            tracing::warn!(
                model = %manifest.name,
                error = %why,
                "the chat template in the manifest does not compile; the runtime's own \
                 template is used"
            );
            ChatTemplate::default()
        }
        None => ChatTemplate::default(),
    }
}

/// Reads the chat template beside `tokenizer` and records it there, or
/// records why there is none (warned about when the template is there but
/// does not compile).
pub(super) async fn record(hub: &Hub, sandbox: &Sandbox, tokenizer: &mut StoredTokenizer) {
    let path = config_path(tokenizer);
    let repo = tokenizer.repository.clone();
    let found = match hub
        .read_text(
            &repo,
            &tokenizer.revision,
            &path,
            MAX_TOKENIZER_CONFIG_BYTES,
        )
        .await
    {
        Ok(text) => match tokio::task::spawn_blocking(move || from_config(&text))
            .await
            .unwrap_or_else(|e| Err(Missing::Unusable(e.to_string())))
        {
            Ok(template) => test_render(sandbox, template).await,
            Err(missing) => Err(missing),
        },
        Err(e) => Err(Missing::Absent(format!("{repo}: {e}"))),
    };
    match found {
        Ok(template) => {
            tokenizer.chat_template = Some(template);
            tokenizer.chat_template_missing = None;
        }
        Err(missing) => {
            let why = match missing {
                Missing::Absent(why) => why,
                Missing::Unusable(why) => {
                    tracing::warn!(
                        repository = %repo,
                        file = %path,
                        error = %why,
                        "the model's chat template is not usable; none is recorded and the \
                         runtime's own template is used"
                    );
                    format!("{repo}: {path}: {why}")
                }
            };
            tokenizer.chat_template = None;
            tokenizer.chat_template_missing = Some(why);
        }
    }
}

/// `template` once it has rendered a one-message chat in the sandbox.
async fn test_render(sandbox: &Sandbox, template: JinjaTemplate) -> Result<JinjaTemplate, Missing> {
    let job = RenderJob {
        template,
        messages: vec![TemplateMessage {
            role: "user".into(),
            content: "Hello".into(),
            tool_calls: Vec::new(),
        }],
        tools: None,
        enable_thinking: None,
        now_unix: 0,
        continue_final: false,
    };
    match sandbox.render(job.clone()).await {
        Ok(_) => Ok(job.template),
        Err(why) => Err(Missing::Unusable(format!(
            "it failed its test render (a one-message chat): {why}"
        ))),
    }
}

/// Why a `tokenizer_config.json` gave no template.
#[derive(Debug, PartialEq, Eq)]
enum Missing {
    /// There is none (no file, or no `chat_template` in it).
    Absent(String),
    /// There is one, but it cannot be used (it does not compile, or the
    /// file is not what Hugging Face writes).
    Unusable(String),
}

/// The template a `tokenizer_config.json` holds: `chat_template` (text, or
/// a list of `{name, template}` of which `default` is taken) with
/// `bos_token` and `eos_token` (each text or `{content}`), compiled.
fn from_config(text: &str) -> Result<JinjaTemplate, Missing> {
    let config: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Missing::Unusable(format!("is not JSON: {e}")))?;
    let source = match config.get("chat_template") {
        None | Some(serde_json::Value::Null) => {
            return Err(Missing::Absent(format!(
                "{TOKENIZER_CONFIG_FILE} has no chat_template"
            )));
        }
        Some(serde_json::Value::String(source)) => source.clone(),
        Some(serde_json::Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(|t| t.as_str())
            .map(str::to_owned)
            .ok_or_else(|| {
                Missing::Absent(format!(
                    "the chat_template list of {TOKENIZER_CONFIG_FILE} has no template named \
                     `default`"
                ))
            })?,
        Some(_) => {
            return Err(Missing::Unusable(
                "chat_template is neither text nor a list of {name, template}".into(),
            ));
        }
    };
    let token = |key: &str| -> Result<String, Missing> {
        match config.get(key) {
            None | Some(serde_json::Value::Null) => Ok(String::new()),
            Some(serde_json::Value::String(token)) => Ok(token.clone()),
            Some(other) => other
                .get("content")
                .and_then(|c| c.as_str())
                .map(str::to_owned)
                .ok_or_else(|| Missing::Unusable(format!("{key} is neither text nor {{content}}"))),
        }
    };
    let template = JinjaTemplate {
        source,
        bos_token: token("bos_token")?,
        eos_token: token("eos_token")?,
    };
    template.check().map_err(Missing::Unusable)?;
    Ok(template)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";

    #[test]
    fn the_template_and_its_tokens_are_read_in_every_form_hugging_face_writes() {
        let plain = serde_json::json!({
            "chat_template": CHATML, "bos_token": null, "eos_token": "<|im_end|>",
        });
        assert_eq!(
            from_config(&plain.to_string()).unwrap(),
            JinjaTemplate {
                source: CHATML.into(),
                bos_token: String::new(),
                eos_token: "<|im_end|>".into(),
            }
        );
        let listed = serde_json::json!({
            "chat_template": [
                {"name": "tool_use", "template": "{{ tools }}"},
                {"name": "default", "template": CHATML},
            ],
            "bos_token": {"content": "<s>", "lstrip": false, "__type": "AddedToken"},
            "eos_token": {"content": "</s>"},
        });
        assert_eq!(
            from_config(&listed.to_string()).unwrap(),
            JinjaTemplate {
                source: CHATML.into(),
                bos_token: "<s>".into(),
                eos_token: "</s>".into(),
            }
        );
    }

    #[test]
    fn a_config_without_a_usable_template_says_why() {
        let absent = |config: serde_json::Value| match from_config(&config.to_string()) {
            Err(Missing::Absent(why)) => why,
            other => panic!("{config}: {other:?}"),
        };
        let unusable = |text: &str| match from_config(text) {
            Err(Missing::Unusable(why)) => why,
            other => panic!("{text}: {other:?}"),
        };
        assert!(absent(serde_json::json!({"eos_token": "</s>"})).contains("no chat_template"));
        assert!(
            absent(serde_json::json!({"chat_template": [{"name": "rag", "template": "x"}]}))
                .contains("no template named `default`")
        );
        assert!(unusable("{\"chat_template\": ").contains("is not JSON"));
        assert!(unusable("{\"chat_template\": 3}").contains("neither text nor a list"));
        assert!(
            unusable("{\"chat_template\": \"x\", \"eos_token\": 3}")
                .contains("eos_token is neither")
        );
        let broken = unusable("{\"chat_template\": \"{% for m in messages %}{{ m.content }}\"}");
        assert!(broken.contains("the model's chat template"), "{broken}");
    }

    #[test]
    fn a_stored_model_uses_its_own_template_unless_its_manifest_names_one() {
        let manifest = |template: serde_json::Value, named: Option<&str>| -> Manifest {
            serde_json::from_value(serde_json::json!({
                "name": "m", "file": "m.rkllm", "size": 1, "sha256": "ab",
                "sha256_verified": false, "pulled_unix": 0,
                "source": {"spec": "acme/m", "url": "https://example.org/m.rkllm"},
                "chat_template": named,
                "tokenizer": {
                    "file": "tokenizer.json", "size": 1, "sha256": "cd",
                    "sha256_verified": false, "repository": "acme/m",
                    "path": "tokenizer.json", "revision": "main",
                    "chat_template": template,
                },
            }))
            .unwrap()
        };
        let own = serde_json::json!({"source": CHATML, "eos_token": "<|im_end|>"});
        let ChatTemplate::Jinja(used) = of(&manifest(own.clone(), None)) else {
            panic!("its own template is not used")
        };
        assert_eq!(
            (used.source.as_str(), used.eos_token.as_str()),
            (CHATML, "<|im_end|>")
        );
        assert_eq!(of(&manifest(own, Some("llama3"))), ChatTemplate::Llama3);
        // None recorded (an older manifest), or one that does not compile
        // (edited by hand): the runtime's own.
        assert_eq!(
            of(&manifest(serde_json::Value::Null, None)),
            ChatTemplate::Builtin
        );
        let broken = serde_json::json!({"source": "{% for m in messages %}"});
        assert_eq!(of(&manifest(broken, None)), ChatTemplate::Builtin);
    }

    #[test]
    fn the_config_is_read_beside_the_tokenizer() {
        let mut tokenizer = StoredTokenizer {
            file: "tokenizer.json".into(),
            size: 1,
            sha256: String::new(),
            sha256_verified: false,
            repository: "acme/base".into(),
            path: "tokenizer.json".into(),
            revision: "main".into(),
            commit: None,
            tokens: None,
            chat_template: None,
            chat_template_missing: None,
        };
        assert_eq!(config_path(&tokenizer), "tokenizer_config.json");
        tokenizer.path = "sub/dir/tokenizer.json".into();
        assert_eq!(config_path(&tokenizer), "sub/dir/tokenizer_config.json");
    }
}
