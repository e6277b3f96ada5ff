//! The bounds a `tokenizer.json` must keep before anything is built from
//! it. A tokenizer is untrusted input (any repository can publish one, and
//! a pull may name any): its ids decide how large the token table is, so a
//! single added token with the id 4,000,000,000 would ask for a table of
//! 96 GB. Every count and id is checked here, on the parsed file, before
//! any table is allocated.
//!
//! The bounds, each far above what a real tokenizer needs (the largest
//! vocabularies in use have 262,144 tokens):
//! - at most [`MAX_TOKENS`] tokens in `model.vocab` and in `added_tokens`
//!   each, and no id at or above it;
//! - no id beyond the tokens the file declares (its `model.vocab` entries
//!   and its added tokens) by more than [`MAX_UNUSED_IDS`]: the table never
//!   has more holes than that;
//! - at most [`MAX_MERGES`] merges, and no token text longer than
//!   [`MAX_TOKEN_BYTES`];
//! - a byte-fallback token (`<0x…>`) is exactly `<0xHH>`.

use std::collections::HashSet;

use serde_json::Value;

/// Most tokens a vocabulary may have, and the first id refused.
pub const MAX_TOKENS: usize = 1 << 20;

/// Ids a tokenizer may leave unused below its highest one.
pub const MAX_UNUSED_IDS: usize = 4096;

/// Most merges a BPE tokenizer may list.
pub const MAX_MERGES: usize = 4 << 20;

/// Longest token text, in bytes.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// Checks the counts and ids of a parsed `tokenizer.json`.
///
/// # Errors
/// The first bound it breaks, naming the token or the field.
pub fn check(json: &Value) -> Result<(), String> {
    let model = json.get("model").unwrap_or(&Value::Null);
    let mut ids = HashSet::new();
    let mut highest: Option<(u64, String)> = None;
    let mut note = |id: u64, text: &str, ids: &mut HashSet<u64>| -> Result<(), String> {
        if id >= MAX_TOKENS as u64 {
            return Err(format!(
                "the token {} has the id {id}, beyond the {MAX_TOKENS} ids a tokenizer may use",
                shown(text)
            ));
        }
        if text.len() > MAX_TOKEN_BYTES {
            return Err(format!(
                "the token with the id {id} is {} bytes long, more than {MAX_TOKEN_BYTES}",
                text.len()
            ));
        }
        ids.insert(id);
        if highest.as_ref().is_none_or(|(h, _)| id > *h) {
            highest = Some((id, text.to_owned()));
        }
        Ok(())
    };

    let vocab = model.get("vocab").unwrap_or(&Value::Null);
    let mut declared = 0usize;
    match vocab {
        Value::Object(entries) => {
            if entries.len() > MAX_TOKENS {
                return Err(format!(
                    "`model.vocab` has {} tokens, more than the {MAX_TOKENS} a tokenizer may have",
                    entries.len()
                ));
            }
            declared += entries.len();
            for (text, id) in entries {
                let id = id.as_u64().ok_or_else(|| {
                    format!("the id of the token {} is not a number", shown(text))
                })?;
                byte_fallback_shape(text)?;
                note(id, text, &mut ids)?;
            }
        }
        // A Unigram vocabulary: a list of [piece, score], ids by position.
        Value::Array(entries) => {
            if entries.len() > MAX_TOKENS {
                return Err(format!(
                    "`model.vocab` has {} tokens, more than the {MAX_TOKENS} a tokenizer may have",
                    entries.len()
                ));
            }
            declared += entries.len();
        }
        _ => {}
    }
    if let Some(merges) = model.get("merges").and_then(Value::as_array)
        && merges.len() > MAX_MERGES
    {
        return Err(format!(
            "`model.merges` has {} merges, more than the {MAX_MERGES} a tokenizer may have",
            merges.len()
        ));
    }

    if let Some(added) = json.get("added_tokens").and_then(Value::as_array) {
        if added.len() > MAX_TOKENS {
            return Err(format!(
                "`added_tokens` has {} tokens, more than the {MAX_TOKENS} a tokenizer may have",
                added.len()
            ));
        }
        for token in added {
            let text = token.get("content").and_then(Value::as_str).unwrap_or("");
            let id = token
                .get("id")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("the added token {} has no numeric id", shown(text)))?;
            if !ids.contains(&id) {
                declared += 1;
            }
            note(id, text, &mut ids)?;
        }
    }

    if let Some((id, text)) = highest {
        let limit = declared.saturating_add(MAX_UNUSED_IDS);
        if id >= limit as u64 {
            return Err(format!(
                "the token {} has the id {id}, beyond the {declared} tokens the file declares \
                 (at most {MAX_UNUSED_IDS} ids may go unused)",
                shown(&text)
            ));
        }
    }
    Ok(())
}

/// A byte-fallback token's text: `<0x` must be `<0xHH>`.
fn byte_fallback_shape(text: &str) -> Result<(), String> {
    if let Some(rest) = text.strip_prefix("<0x") {
        let hex = rest.strip_suffix('>').unwrap_or("");
        if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "the token {} starts like a byte token (<0xHH>) and is not one",
                shown(text)
            ));
        }
    }
    Ok(())
}

/// A token's text for a message: quoted, and cut when long.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(40).collect();
    if cut.len() < text.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tokenizer(vocab: Value, added: Value) -> Value {
        json!({
            "added_tokens": added,
            "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab, "merges": []},
        })
    }

    #[test]
    fn a_real_tokenizer_keeps_the_bounds() {
        let mock: Value = serde_json::from_str(super::super::MOCK_TOKENIZER).unwrap();
        check(&mock).unwrap();
        // Added tokens after the vocabulary, and added tokens inside it.
        check(&tokenizer(
            json!({"a": 0, "b": 1}),
            json!([{"id": 2, "content": "<|end|>", "special": true},
                   {"id": 0, "content": "a", "special": false}]),
        ))
        .unwrap();
    }

    #[test]
    fn an_id_far_beyond_the_vocabulary_is_refused_before_any_table_is_built() {
        for id in [4_000_000_000_u64, 5_000_000, u64::MAX] {
            let err = check(&tokenizer(
                json!({"a": 0}),
                json!([{"id": id, "content": "<|evil|>", "special": true}]),
            ))
            .unwrap_err();
            assert!(
                err.contains("\"<|evil|>\"") && err.contains(&id.to_string()),
                "{err}"
            );
        }
        // Below the hard cap but far beyond what the file declares.
        let err = check(&tokenizer(
            json!({"a": 0, "b": 1}),
            json!([{"id": 600_000, "content": "<|far|>", "special": true}]),
        ))
        .unwrap_err();
        assert!(
            err.contains("beyond the 3 tokens the file declares"),
            "{err}"
        );
        // A few holes are allowed.
        check(&tokenizer(
            json!({"a": 0, "b": 1}),
            json!([{"id": 1000, "content": "<|near|>", "special": true}]),
        ))
        .unwrap();
        let err = check(&tokenizer(json!({"a": 7_000_000}), json!([]))).unwrap_err();
        assert!(err.contains("\"a\" has the id 7000000"), "{err}");
    }

    #[test]
    fn ids_that_are_not_numbers_and_odd_byte_tokens_are_refused() {
        let err = check(&tokenizer(json!({"a": -1}), json!([]))).unwrap_err();
        assert!(err.contains("not a number"), "{err}");
        let err = check(&tokenizer(json!({"a": 0}), json!([{"content": "x"}]))).unwrap_err();
        assert!(err.contains("no numeric id"), "{err}");
        for odd in ["<0xZZ>", "<0x1>", "<0x123>", "<0x"] {
            let err = check(&tokenizer(json!({ odd: 0 }), json!([]))).unwrap_err();
            assert!(err.contains("byte token"), "{odd}: {err}");
        }
        check(&tokenizer(json!({"<0x0A>": 0}), json!([]))).unwrap();
    }

    #[test]
    fn absurd_counts_and_long_tokens_are_refused() {
        let merges: Vec<Value> = (0..=MAX_MERGES).map(|_| Value::Null).collect();
        let mut t = tokenizer(json!({"a": 0}), json!([]));
        t["model"]["merges"] = Value::Array(merges);
        assert!(check(&t).unwrap_err().contains("merges"));
        let long = "x".repeat(MAX_TOKEN_BYTES + 1);
        let err = check(&tokenizer(json!({ long: 0 }), json!([]))).unwrap_err();
        assert!(err.contains("bytes long"), "{err}");
    }
}
