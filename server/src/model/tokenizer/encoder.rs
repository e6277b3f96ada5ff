//! A model's tokenizer as an encoder: text into the model's tokens, with
//! the `tokenizers` crate over its `tokenizer.json`, so that every count
//! the server gives (the context check, `prompt_tokens` where the runtime
//! reports none, `count_tokens`, `input_tokens`) is the model's own. The
//! file is held to the bounds of [`super::bounds`] before it is read.

use serde_json::Value;

use super::TokenizerError;

/// A tokenizer that turns text into a model's token ids.
pub struct Encoder {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("tokens", &self.inner.get_vocab_size(true))
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// The encoder of the `tokenizer.json` whose text is `text`.
    ///
    /// # Errors
    /// A file outside the bounds, or one the tokenizer library cannot
    /// read (its reader failing on it is a refusal too).
    pub fn parse(text: &str) -> Result<Self, TokenizerError> {
        let json: Value = serde_json::from_str(text)
            .map_err(|e| TokenizerError::Unsupported(format!("not JSON: {e}")))?;
        super::bounds::check(&json).map_err(TokenizerError::Bounds)?;
        let read = std::panic::catch_unwind(|| text.parse::<tokenizers::Tokenizer>());
        match read {
            Ok(Ok(inner)) => Ok(Self { inner }),
            Ok(Err(e)) => Err(TokenizerError::Unsupported(format!(
                "not a tokenizer the tokenizer library reads: {e}"
            ))),
            Err(_) => Err(TokenizerError::Unsupported(
                "not a tokenizer the tokenizer library reads (it failed on it)".into(),
            )),
        }
    }

    /// The tokens of `text` (special tokens written in it count as one
    /// each; none is added around it).
    ///
    /// # Errors
    /// What the library could not encode.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.inner
            .encode(text, false)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }

    /// How many tokens `text` is.
    ///
    /// # Errors
    /// What the library could not encode.
    pub fn count(&self, text: &str) -> Result<usize, String> {
        // Without the offsets, which a count does not need.
        self.inner
            .encode_fast(text, false)
            .map(|encoding| encoding.len())
            .map_err(|e| e.to_string())
    }

    /// The text of `ids` (special tokens kept).
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        self.inner.decode(ids, false).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mock_tokenizer_encodes_and_decodes_back() {
        let encoder = Encoder::parse(super::super::MOCK_TOKENIZER).unwrap();
        for text in ["hello", "日本語 and émoji 👋🏽", "<|endoftext|>"] {
            let ids = encoder.encode(text).unwrap();
            assert_eq!(encoder.count(text).unwrap(), ids.len());
            assert_eq!(encoder.decode(&ids).unwrap(), text, "{text}");
        }
        // The end-of-text token written in the text is one token.
        assert_eq!(encoder.count("<|endoftext|>").unwrap(), 1);
    }

    #[test]
    fn a_tokenizer_outside_the_bounds_is_refused_before_it_is_read() {
        let mut json: Value = serde_json::from_str(super::super::MOCK_TOKENIZER).unwrap();
        json["added_tokens"].as_array_mut().unwrap().push(
            serde_json::json!({"id": 4_000_000_000_u64, "content": "<|evil|>", "special": true}),
        );
        assert!(matches!(
            Encoder::parse(&json.to_string()),
            Err(TokenizerError::Bounds(_))
        ));
    }
}
