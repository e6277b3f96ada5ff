//! What a model's tokenizer answers on its own, without the runtime:
//! a text's tokens (`/tokenize`), tokens' text (`/detokenize`), and
//! whether the model fills in the middle (its FIM tokens). The tokenizer
//! is loaded, and long texts encoded, off the async workers.

use std::sync::Arc;

use super::{Service, ServiceError};
use crate::model::Fim;
use crate::model::tokenizer::Encoder;

/// A text's tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    /// The ids.
    pub ids: Vec<u32>,
    /// Each token's bytes (a token may be part of a character), when
    /// asked for.
    pub pieces: Option<Pieces>,
}

/// Tokens' bytes in one buffer: token `i`'s are `bytes[ends[i - 1]..ends[i]]`
/// (two allocations for a text, not one per token).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pieces {
    /// Every token's bytes, one after another.
    pub bytes: Vec<u8>,
    /// Where each token's bytes end.
    pub ends: Vec<u32>,
}

impl Pieces {
    /// Token `i`'s bytes.
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }
}

/// The most tokens one `/detokenize` takes.
pub const MAX_DETOKENIZE: usize = 1 << 18;

/// The most bytes one `/tokenize` takes (its body is bounded by
/// `limits.max_request_bytes` before this).
pub const MAX_TOKENIZE_BYTES: usize = 4 << 20;

impl Service {
    /// `model`'s tokenizer (the default model's when `None`), with the
    /// model's name, to `purpose`.
    ///
    /// # Errors
    /// An unknown model; a model without a tokenizer that can encode,
    /// naming `field`.
    async fn encoder_for(
        &self,
        model: Option<&str>,
        field: &str,
        purpose: &str,
    ) -> Result<(String, Arc<Encoder>), ServiceError> {
        let name = self.engine.model(model)?.name;
        let engine = Arc::clone(&self.engine);
        let lookup = name.clone();
        let encoder = tokio::task::spawn_blocking(move || engine.encoder(Some(&lookup)))
            .await
            .map_err(|_| ServiceError::Failed {
                message: "loading the model's tokenizer failed".into(),
            })?;
        match encoder {
            Some(encoder) => Ok((name, encoder)),
            None => Err(ServiceError::invalid(
                field,
                format!(
                    "`{field}`: model `{name}` has no tokenizer this server can read, so it \
                     cannot {purpose}: set `tokenizer` in its [[models]] entry to its \
                     tokenizer.json (a pulled model has one)"
                ),
            )),
        }
    }

    /// `content`'s tokens by `model`'s tokenizer; with `add_special`, the
    /// tokens its tokenizer adds around a text too; with `with_pieces`,
    /// each token's bytes.
    ///
    /// # Errors
    /// An unknown model, or one without a tokenizer (naming `model`);
    /// a text the tokenizer cannot encode (naming `content`).
    pub async fn tokenize(
        &self,
        model: Option<&str>,
        content: String,
        add_special: bool,
        with_pieces: bool,
    ) -> Result<Tokenized, ServiceError> {
        // Bounded before any work (a request's body is bounded below this
        // by limits.max_request_bytes).
        if content.len() > MAX_TOKENIZE_BYTES {
            return Err(ServiceError::invalid(
                "content",
                format!(
                    "`content` is {} bytes, more than the {MAX_TOKENIZE_BYTES} one request may tokenize",
                    content.len()
                ),
            ));
        }
        let (_, encoder) = self.encoder_for(model, "model", "tokenize").await?;
        tokio::task::spawn_blocking(move || {
            let ids = encoder
                .encode_long(&content, add_special)
                .map_err(|e| ServiceError::invalid("content", e))?;
            drop(content);
            let pieces = if with_pieces {
                let mut pieces = Pieces {
                    bytes: Vec::with_capacity(ids.len() * 4),
                    ends: Vec::new(),
                };
                encoder
                    .pieces_into(&ids, &mut pieces.bytes, &mut pieces.ends)
                    .map_err(|e| ServiceError::Failed { message: e })?;
                Some(pieces)
            } else {
                None
            };
            Ok(Tokenized { ids, pieces })
        })
        .await
        .map_err(|_| ServiceError::Failed {
            message: "tokenizing failed".into(),
        })?
    }

    /// The text of `tokens` by `model`'s tokenizer (special tokens kept).
    ///
    /// # Errors
    /// An unknown model, or one without a tokenizer (naming `model`);
    /// more than [`MAX_DETOKENIZE`] tokens, or an id outside the
    /// vocabulary (naming `tokens`).
    pub async fn detokenize(
        &self,
        model: Option<&str>,
        tokens: Vec<u32>,
    ) -> Result<String, ServiceError> {
        if tokens.len() > MAX_DETOKENIZE {
            return Err(ServiceError::invalid(
                "tokens",
                format!("`tokens` holds more than {MAX_DETOKENIZE} tokens"),
            ));
        }
        let (name, encoder) = self.encoder_for(model, "model", "detokenize").await?;
        tokio::task::spawn_blocking(move || {
            let size = encoder.vocabulary_size();
            if let Some((i, id)) = tokens
                .iter()
                .enumerate()
                .find(|&(_, &id)| usize::try_from(id).map_or(true, |id| id >= size))
            {
                return Err(ServiceError::invalid(
                    "tokens",
                    format!(
                        "`tokens[{i}]` ({id}) is not a token of model `{name}` (its vocabulary \
                         has {size})"
                    ),
                ));
            }
            encoder
                .decode(&tokens)
                .map_err(|e| ServiceError::invalid("tokens", e))
        })
        .await
        .map_err(|_| ServiceError::Failed {
            message: "detokenizing failed".into(),
        })?
    }

    /// How `model` fills in the middle.
    ///
    /// # Errors
    /// An unknown model; a model without a tokenizer, or whose tokenizer
    /// has no FIM tokens, naming `suffix`.
    pub async fn fim(&self, model: Option<&str>) -> Result<Fim, ServiceError> {
        let (name, encoder) = self
            .encoder_for(model, "suffix", "fill in the middle")
            .await?;
        encoder.fim().ok_or_else(|| {
            ServiceError::invalid(
                "suffix",
                format!(
                    "`suffix`: model `{name}` cannot fill in the middle: its tokenizer has no \
                     FIM tokens (<|fim_prefix|>, <fim_prefix>, <｜fim▁begin｜> or <PRE> and \
                     their kin; code models such as Qwen2.5-Coder, StarCoder2, DeepSeek-Coder \
                     and Code Llama have them)"
                ),
            )
        })
    }
}
