//! A model's vocabulary: the bytes of each token, read from the text of its
//! Hugging Face `tokenizer.json` within the bounds of [`super::bounds`],
//! with the token trie and the parser factory the constraint engine works
//! over. (Reading the file, once per process and source, is the backend's:
//! `backend::vocabularies`.)

use std::path::PathBuf;
use std::sync::Arc;

use llguidance::ParserFactory;
use serde::{Deserialize, Serialize};
use toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};

/// The mock model's tokenizer (a small byte-level BPE vocabulary, see
/// `server/assets/make_mock_tokenizer.py`), also the runtime test double's.
pub const MOCK_TOKENIZER: &str = include_str!("../../../assets/mock-tokenizer.json");

/// Where a model's tokenizer comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerSource {
    /// A `tokenizer.json` file.
    File(PathBuf),
    /// The mock model's own, built in.
    Mock,
}

/// End-of-answer tokens, in order of preference, by their text.
const EOS_NAMES: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<｜end▁of▁sentence｜>",
    "<|endoftext|>",
    "</s>",
    "<eos>",
];

/// Why a `tokenizer.json` was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizerError {
    /// It breaks a bound (size, ids, counts): a hostile or badly damaged
    /// file, refused wherever it comes from.
    #[error("{0}")]
    Bounds(String),
    /// Not JSON, or a tokenizer of a kind the constraint engine cannot
    /// read (the model still serves free text).
    #[error("{0}")]
    Unsupported(String),
}

/// A vocabulary with what the constraint engine needs of it.
pub struct Vocabulary {
    /// Unique in the process (what compiled parsers are kept under).
    id: u64,
    tokens: Vec<Vec<u8>>,
    eos: u32,
    factory: ParserFactory,
    memory: usize,
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocabulary")
            .field("tokens", &self.tokens.len())
            .field("eos", &self.eos)
            .finish_non_exhaustive()
    }
}

/// Largest `tokenizer.json` read (the largest vocabularies' files are a
/// few tens of MB).
pub const MAX_TOKENIZER_BYTES: u64 = 64 << 20;

impl Vocabulary {
    /// A vocabulary from the text of a `tokenizer.json`.
    ///
    /// # Errors
    /// Text that is not JSON, or a tokenizer the engine cannot read.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_checked(text).map_err(|e| e.to_string())
    }

    /// [`Vocabulary::parse`], telling a file outside the bounds (refused
    /// wherever it comes from) from one the engine cannot read.
    ///
    /// # Errors
    /// See [`TokenizerError`].
    pub fn parse_checked(text: &str) -> Result<Self, TokenizerError> {
        if text.len() as u64 > MAX_TOKENIZER_BYTES {
            return Err(TokenizerError::Bounds(format!(
                "it is larger than {MAX_TOKENIZER_BYTES} bytes, more than any tokenizer.json"
            )));
        }
        let json: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| TokenizerError::Unsupported(format!("not JSON: {e}")))?;
        super::bounds::check(&json).map_err(TokenizerError::Bounds)?;
        // The bounds hold, so what the engine allocates is bounded; a panic
        // in its reader (a shape it did not expect) is a refusal too.
        let read = std::panic::catch_unwind(|| {
            llguidance::token_bytes_from_tokenizer_json(&json)
                .map_err(|e| format!("not a tokenizer the constraint engine reads: {e}"))
                .and_then(Self::from_tokens)
        });
        match read {
            Ok(result) => result.map_err(TokenizerError::Unsupported),
            Err(_) => Err(TokenizerError::Unsupported(
                "not a tokenizer the constraint engine reads (its reader failed on it)".into(),
            )),
        }
    }

    /// A vocabulary from each token's bytes (special tokens marked with
    /// [`TokTrie::SPECIAL_TOKEN_MARKER`] first).
    ///
    /// # Errors
    /// An empty vocabulary, or one without an end-of-text token.
    pub fn from_tokens(tokens: Vec<Vec<u8>>) -> Result<Self, String> {
        if tokens.is_empty() {
            return Err("it has no tokens".into());
        }
        let special = |t: &Vec<u8>| t.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER);
        let eos = EOS_NAMES
            .iter()
            .find_map(|name| {
                tokens
                    .iter()
                    .position(|t| special(t) && &t[1..] == name.as_bytes())
            })
            .or_else(|| tokens.iter().rposition(special))
            .ok_or("it has no special end-of-text token")?;
        let size = u32::try_from(tokens.len()).map_err(|_| "it has too many tokens")?;
        let info = TokRxInfo::new(size, eos as u32);
        let trie = TokTrie::from(&info, &tokens);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        // Errors in words for the client, without the parser's state.
        factory.limits_mut().verbose_errors = false;
        let memory = tokens.iter().map(|t| t.len() + 24).sum::<usize>() * 3;
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(Self {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            tokens,
            eos: eos as u32,
            factory,
            memory,
        })
    }

    /// Tokens in it.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether it has no tokens (never, once loaded).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The text of `token` as bytes (a special token's name, without its
    /// marker; nothing for an id outside it).
    pub fn bytes(&self, token: u32) -> &[u8] {
        match self.tokens.get(token as usize) {
            Some(t) if t.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER) => &t[1..],
            Some(t) => t,
            None => &[],
        }
    }

    /// Whether `token` is a special token (end of text and the like).
    pub fn is_special(&self, token: u32) -> bool {
        self.tokens
            .get(token as usize)
            .is_some_and(|t| t.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER))
    }

    /// The tokens whose text starts `bytes`, longest first (never a
    /// special token).
    pub fn prefix_tokens(&self, bytes: &[u8]) -> Vec<u32> {
        let mut tokens = self.factory.tok_env().tok_trie().all_prefixes(bytes);
        tokens.reverse();
        tokens
    }

    /// `bytes` as tokens, each the longest that starts what is left (no
    /// merges are applied: the cut a tokenizer without them makes).
    pub fn greedy_tokens(&self, bytes: &[u8]) -> Vec<u32> {
        self.factory.tok_env().tok_trie().greedy_tokenize(bytes)
    }

    /// The end-of-text token an answer ends with.
    pub fn eos(&self) -> u32 {
        self.eos
    }

    /// About how much memory it holds (the bytes, the trie, the parser
    /// factory's tables), for `models`.
    pub fn memory_bytes(&self) -> usize {
        self.memory
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn factory(&self) -> &ParserFactory {
        &self.factory
    }
}
