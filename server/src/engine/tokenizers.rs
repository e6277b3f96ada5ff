//! Each model's tokenizer as the engine holds it for structured output:
//! its vocabulary, loaded at the first constrained request and then kept
//! while the model is served (read once, its memory reported), and what is
//! known of where it comes from, so that a model without a usable one is
//! refused with why and what to set, never answered in free text.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::model::tokenizer::{Encoder, TokenizerSource, Vocabulary};

/// What to do when a model has no usable tokenizer, unless its origin says
/// better.
const DEFAULT_FIX: &str = "set `tokenizer` (a tokenizer.json file, or a Hugging Face repository \
                           owner/repo holding one) in its [[models]] entry";

/// What is known of a model's tokenizer beside its source (set by whoever
/// made the model: a configured `tokenizer = "owner/repo"` fetched into
/// the store, a stored model's manifest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenizerOrigin {
    /// Where it comes from, as the setting or the manifest names it
    /// (`owner/repo`), when that says more than the file's path.
    pub from: Option<String>,
    /// Why the file is not there (yet), when it is not.
    pub missing: Option<String>,
    /// What to do to give the model one (default: set `tokenizer` in its
    /// `[[models]]` entry).
    pub fix: Option<String>,
}

/// A model's tokenizer as `models` (and `/api/show`) report it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenizerInfo {
    /// Where it comes from: `owner/repo`, a file's path, or `mock` (the
    /// mock backend's own).
    pub source: String,
    /// Whether structured output can use it: its file is there and did
    /// not fail to load.
    pub available: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Tokens in its vocabulary, once loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// About how much memory the loaded vocabulary holds in the server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// The tokenizers of every model, by model name.
#[derive(Debug, Default)]
pub(super) struct Tokenizers {
    /// Synchronous: held for a lookup or an update, never while a
    /// vocabulary loads.
    models: Mutex<HashMap<String, Held>>,
}

#[derive(Debug, Default)]
struct Held {
    origin: TokenizerOrigin,
    vocabulary: Option<Arc<Vocabulary>>,
    /// Its encoder, for counts, once loaded.
    encoder: Option<Arc<Encoder>>,
    /// Why the encoder could not be had (said once).
    encoder_error: Option<String>,
    /// Why the last load failed.
    error: Option<String>,
}

impl Tokenizers {
    /// Records where `model`'s tokenizer comes from (replacing what was).
    pub fn set_origin(&self, model: &str, origin: TokenizerOrigin) {
        let mut models = self.models.lock();
        let held = models.entry(model.to_owned()).or_default();
        if held.origin != origin {
            held.origin = origin;
            held.error = None;
        }
    }

    /// Lets `model`'s tokenizer go (the model is no longer served).
    pub fn forget(&self, model: &str) {
        self.models.lock().remove(model);
    }

    /// The vocabulary of `model` from `source`: the one held, or loaded now
    /// (read again when its file changed) and then held. Blocks while it
    /// loads.
    ///
    /// # Errors
    /// Why there is none, naming the model and what to set.
    pub fn load(&self, model: &str, source: &TokenizerSource) -> Result<Arc<Vocabulary>, String> {
        match crate::backend::vocabularies::load(source) {
            Ok(vocabulary) => {
                let mut models = self.models.lock();
                let held = models.entry(model.to_owned()).or_default();
                held.vocabulary = Some(Arc::clone(&vocabulary));
                held.error = None;
                Ok(vocabulary)
            }
            Err(err) => {
                let mut models = self.models.lock();
                let held = models.entry(model.to_owned()).or_default();
                let message = refusal(model, source, &held.origin, &err);
                held.vocabulary = None;
                held.error = Some(message.clone());
                Err(message)
            }
        }
    }

    /// The encoder of `model` from `source`: the one loaded, or loaded now
    /// and then held; `None` when it cannot be had (why is logged once,
    /// and counts fall back to an estimate). Blocks while it loads.
    pub fn encoder(&self, model: &str, source: &TokenizerSource) -> Option<Arc<Encoder>> {
        // Loaded once per process while held (here), read again when its
        // file changed.
        let loaded = crate::backend::vocabularies::load_encoder(source);
        let mut models = self.models.lock();
        let held = models.entry(model.to_owned()).or_default();
        match loaded {
            Ok(encoder) => {
                held.encoder = Some(Arc::clone(&encoder));
                held.encoder_error = None;
                Some(encoder)
            }
            Err(why) => {
                if held.encoder_error.as_deref() != Some(why.as_str()) {
                    tracing::warn!(
                        model,
                        error = %why,
                        "the model's tokenizer cannot count tokens; counts are estimated"
                    );
                    held.encoder_error = Some(why);
                }
                None
            }
        }
    }

    /// What `models` says of `model`'s tokenizer (`None`: it has none).
    pub fn info(&self, model: &str, source: Option<&TokenizerSource>) -> Option<TokenizerInfo> {
        let source = source?;
        // Looked at before the lock: a slow disk holds up no one else.
        let there = match source {
            TokenizerSource::Mock => true,
            TokenizerSource::File(path) => path.is_file(),
        };
        let models = self.models.lock();
        let held = models.get(model);
        let origin = held.map(|h| &h.origin);
        let label = match source {
            TokenizerSource::Mock => "mock".to_owned(),
            TokenizerSource::File(path) => origin
                .and_then(|o| o.from.clone())
                .unwrap_or_else(|| path.display().to_string()),
        };
        let error = if there {
            held.and_then(|h| h.error.clone())
        } else {
            Some(refusal(
                model,
                source,
                origin.unwrap_or(&TokenizerOrigin::default()),
                "its file is not there",
            ))
        };
        let vocabulary = held.and_then(|h| h.vocabulary.as_ref());
        Some(TokenizerInfo {
            source: label,
            available: error.is_none(),
            error,
            tokens: vocabulary.map(|v| v.len()),
            memory_bytes: vocabulary.map(|v| v.memory_bytes() as u64),
        })
    }
}

/// Why `model` cannot use `source` (whose load failed with `err`), and
/// what to do.
fn refusal(model: &str, source: &TokenizerSource, origin: &TokenizerOrigin, err: &str) -> String {
    let absent = matches!(source, TokenizerSource::File(path) if !path.exists());
    let why = match (&origin.missing, absent) {
        (Some(missing), true) => format!("model `{model}` has no tokenizer: {missing}"),
        (None, true) => {
            let TokenizerSource::File(path) = source else {
                unreachable!("only a file can be absent")
            };
            format!(
                "model `{model}` has no tokenizer: its `tokenizer`, {}, does not exist",
                path.display()
            )
        }
        _ => format!("model `{model}`: {err}"),
    };
    let fix = origin.fix.as_deref().unwrap_or(DEFAULT_FIX);
    format!("{why}. A format or a forced tool call needs the model's tokenizer: {fix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "rkllm-engine-tokenizers-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_missing_tokenizer_is_refused_with_why_and_what_to_set() {
        let dir = scratch("missing");
        let tokenizers = Tokenizers::default();
        let source = TokenizerSource::File(dir.join("tokenizer.json"));
        let err = tokenizers.load("m", &source).unwrap_err();
        assert!(err.contains("model `m` has no tokenizer"), "{err}");
        assert!(err.contains("tokenizer.json, does not exist"), "{err}");
        assert!(err.contains("set `tokenizer`"), "{err}");
        tokenizers.set_origin(
            "m",
            TokenizerOrigin {
                from: Some("acme/base".into()),
                missing: Some("it is being fetched from acme/base".into()),
                fix: Some("wait for it".into()),
            },
        );
        let err = tokenizers.load("m", &source).unwrap_err();
        assert!(
            err.starts_with("model `m` has no tokenizer: it is being fetched from acme/base."),
            "{err}"
        );
        assert!(err.ends_with("tokenizer: wait for it"), "{err}");
        let info = tokenizers.info("m", Some(&source)).unwrap();
        assert_eq!(info.source, "acme/base");
        assert!(!info.available);
        assert!(info.error.unwrap().contains("being fetched"));
        assert!(tokenizers.info("m", None).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_loaded_vocabulary_is_held_reported_and_read_again_when_its_file_changes() {
        let dir = scratch("held");
        let path = dir.join("tokenizer.json");
        let source = TokenizerSource::File(path.clone());
        let tokenizers = Tokenizers::default();
        std::fs::write(&path, "{ not json").unwrap();
        let err = tokenizers.load("m", &source).unwrap_err();
        assert!(err.contains("model `m`: the tokenizer"), "{err}");
        assert!(err.contains("not JSON"), "{err}");
        let info = tokenizers.info("m", Some(&source)).unwrap();
        assert!(!info.available && info.tokens.is_none(), "{info:?}");

        std::fs::write(&path, crate::model::tokenizer::MOCK_TOKENIZER).unwrap();
        let first = tokenizers.load("m", &source).unwrap();
        let again = tokenizers.load("m", &source).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "loaded once");
        drop((first, again));
        let info = tokenizers.info("m", Some(&source)).unwrap();
        assert!(info.available, "{info:?}");
        assert_eq!(info.tokens, Some(308));
        assert!(info.memory_bytes.unwrap() > 0);

        // Another tokenizer in its place (a model pulled again): read again.
        let mut json: serde_json::Value =
            serde_json::from_str(crate::model::tokenizer::MOCK_TOKENIZER).unwrap();
        json["added_tokens"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"id": 308, "content": "<|im_end|>", "special": true}));
        std::fs::write(&path, json.to_string()).unwrap();
        assert_eq!(tokenizers.load("m", &source).unwrap().len(), 309);
        tokenizers.forget("m");
        assert!(
            tokenizers
                .info("m", Some(&source))
                .unwrap()
                .tokens
                .is_none()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
