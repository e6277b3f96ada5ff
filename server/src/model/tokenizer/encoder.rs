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
    /// Whether its pieces are written in byte-level BPE's characters (one
    /// character a byte); otherwise SentencePiece's (`▁` a space,
    /// `<0xNN>` a byte).
    byte_level: bool,
    /// The ids of its added tokens, whose text is their own.
    added: std::collections::HashSet<u32>,
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
            Ok(Ok(inner)) => Ok(Self {
                inner,
                byte_level: is_byte_level(&json["decoder"]),
                added: json["added_tokens"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t["id"].as_u64().and_then(|id| u32::try_from(id).ok()))
                    .collect(),
            }),
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
        self.encode_with(text, false)
    }

    /// The tokens of `text`, with the ones the model's tokenizer adds
    /// around a text (a BOS token, for some) when `add_special`.
    ///
    /// # Errors
    /// What the library could not encode.
    pub fn encode_with(&self, text: &str, add_special: bool) -> Result<Vec<u32>, String> {
        self.inner
            .encode(text, add_special)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }

    /// How many tokens `text` is.
    ///
    /// # Errors
    /// What the library could not encode.
    pub fn count(&self, text: &str) -> Result<usize, String> {
        let mut tokens = 0;
        for part in self.parts(text) {
            // Without the offsets, which a count does not need.
            tokens += self
                .inner
                .encode_fast(part, false)
                .map(|encoding| encoding.len())
                .map_err(|e| e.to_string())?;
        }
        Ok(tokens)
    }

    /// The tokens of a long `text`, encoded a part at a time ([`Self::parts`])
    /// so that the library's full encoding (a string and offsets for every
    /// token) is never held for all of it at once; the same ids as
    /// [`Self::encode_with`].
    ///
    /// # Errors
    /// What the library could not encode.
    pub fn encode_long(&self, text: &str, add_special: bool) -> Result<Vec<u32>, String> {
        if add_special {
            // What the tokenizer adds goes around the whole text.
            return self.encode_with(text, true);
        }
        let mut ids = Vec::with_capacity(text.len() / 3);
        for part in self.parts(text) {
            let encoding = self.inner.encode(part, false).map_err(|e| e.to_string())?;
            ids.extend_from_slice(encoding.get_ids());
        }
        Ok(ids)
    }

    /// `text` cut where this tokenizer cuts a text the same way whether it
    /// is whole or not, so that its parts' tokens joined are the whole's,
    /// about every [`PART_BYTES`]: for a byte-level tokenizer, at a place
    /// where the pre-tokenizers of byte-level BPE end a piece (the start of
    /// a line, or a space between a word and what comes before it), once
    /// encoding the text around it whole and cut has given the same tokens;
    /// any other tokenizer, or a text without such a place, whole.
    pub fn parts<'t>(&self, text: &'t str) -> impl Iterator<Item = &'t str> {
        let mut rest = text;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let cut = if self.byte_level && rest.len() > PART_BYTES {
                self.cut_after(rest, PART_BYTES).unwrap_or(rest.len())
            } else {
                rest.len()
            };
            let (part, after) = rest.split_at(cut);
            rest = after;
            Some(part)
        })
    }

    /// The first place at or after byte `from` of `text` (and within
    /// [`PART_BYTES`] of it) where [`Self::parts`] may cut it.
    fn cut_after(&self, text: &str, from: usize) -> Option<usize> {
        let window = |at: usize, back: bool| {
            let mut i = if back {
                at.saturating_sub(CHECK_BYTES)
            } else {
                (at + CHECK_BYTES).min(text.len())
            };
            while !text.is_char_boundary(i) {
                i = if back { i - 1 } else { i + 1 };
            }
            i
        };
        let same_either_way = |at: usize| {
            let (start, end) = (window(at, true), window(at, false));
            let encode = |t: &str| {
                self.inner
                    .encode_fast(t, false)
                    .map(|e| e.get_ids().to_vec())
                    .ok()
            };
            match (
                encode(&text[start..end]),
                encode(&text[start..at]),
                encode(&text[at..end]),
            ) {
                (Some(whole), Some(mut cut), Some(after)) => {
                    cut.extend(after);
                    whole == cut
                }
                _ => false,
            }
        };
        let end = (from + PART_BYTES).min(text.len());
        (from.max(1)..end)
            .filter(|&i| may_cut(text.as_bytes(), i) && text.is_char_boundary(i))
            .take(MAX_CUTS_TRIED)
            .find(|&i| same_either_way(i))
    }

    /// Appends the bytes of each of `ids` to `bytes`, and where each ends
    /// to `ends`: a text's pieces in two buffers, not one per token.
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn pieces_into(
        &self,
        ids: &[u32],
        bytes: &mut Vec<u8>,
        ends: &mut Vec<u32>,
    ) -> Result<(), String> {
        ends.reserve(ids.len());
        for &id in ids {
            let token = self
                .inner
                .id_to_token(id)
                .ok_or_else(|| format!("token {id} is not in the vocabulary"))?;
            if self.added.contains(&id) {
                bytes.extend_from_slice(token.as_bytes());
            } else if self.byte_level {
                byte_level_into(&token, bytes);
            } else {
                bytes.extend_from_slice(&sentencepiece_bytes(&token));
            }
            ends.push(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
        }
        Ok(())
    }

    /// Whether `token` is one token of the vocabulary (an added token, or
    /// a piece of the model's).
    pub fn has_token(&self, token: &str) -> bool {
        self.inner.token_to_id(token).is_some()
    }

    /// The model's way of filling in the middle, when its tokenizer has
    /// one family's FIM tokens.
    pub fn fim(&self) -> Option<crate::model::Fim> {
        crate::model::Fim::find(|t| self.has_token(t))
    }

    /// The text of each of `ids` on its own, as bytes (a token may be part
    /// of a character), special tokens kept.
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn pieces(&self, ids: &[u32]) -> Result<Vec<Vec<u8>>, String> {
        ids.iter()
            .map(|&id| {
                let token = self
                    .inner
                    .id_to_token(id)
                    .ok_or_else(|| format!("token {id} is not in the vocabulary"))?;
                Ok(if self.added.contains(&id) {
                    token.into_bytes()
                } else if self.byte_level {
                    byte_level_bytes(&token)
                } else {
                    sentencepiece_bytes(&token)
                })
            })
            .collect()
    }

    /// The vocabulary's size, added tokens included.
    pub fn vocabulary_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The text of `ids` (special tokens kept).
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        self.inner.decode(ids, false).map_err(|e| e.to_string())
    }
}

/// Whether a `tokenizer.json`'s decoder is byte-level BPE's (alone or in
/// a sequence).
fn is_byte_level(decoder: &Value) -> bool {
    decoder["type"] == "ByteLevel"
        || decoder["decoders"]
            .as_array()
            .is_some_and(|d| d.iter().any(is_byte_level))
}

/// The byte byte-level BPE writes as `c`: the printable bytes stand for
/// themselves, the others were moved to U+0100 on, in order.
fn byte_of(c: char) -> Option<u8> {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let code = u32::from(c);
    if code < 0x100 {
        return printable(code).then(|| u8::try_from(code).ok()).flatten();
    }
    let moved = (0u32..0x100).filter(|&b| !printable(b));
    moved
        .zip(0x100u32..)
        .find(|&(_, written)| written == code)
        .and_then(|(b, _)| u8::try_from(b).ok())
}

/// A byte-level piece's bytes (a character outside the map stays as its
/// UTF-8).
fn byte_level_bytes(piece: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(piece.len());
    byte_level_into(piece, &mut bytes);
    bytes
}

/// [`byte_level_bytes`] appended to `bytes`.
fn byte_level_into(piece: &str, bytes: &mut Vec<u8>) {
    for c in piece.chars() {
        match byte_of(c) {
            Some(b) => bytes.push(b),
            None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
}

/// About how long a part of a long text is encoded at a time.
pub const PART_BYTES: usize = 64 * 1024;

/// Whether byte-level BPE's pre-tokenizers end a piece before byte `i`:
/// the start of a line (after a newline, before a character other than
/// white space), or a space between a word and what comes before it (a
/// piece holds a space only at its start or in a run of white space).
fn may_cut(bytes: &[u8], i: usize) -> bool {
    let (before, at, after) = (bytes[i - 1], bytes[i], bytes.get(i + 1).copied());
    let line = before == b'\n' && !at.is_ascii_whitespace();
    let word = at == b' '
        && !before.is_ascii_whitespace()
        && after.is_some_and(|b| b.is_ascii_alphabetic());
    line || word
}

/// Bytes either side of a cut that are encoded to check it.
const CHECK_BYTES: usize = 64;

/// Places tried for one cut before a text is left whole there.
const MAX_CUTS_TRIED: usize = 16;

/// A SentencePiece piece's bytes: `<0xNN>` is that byte, `▁` a space.
fn sentencepiece_bytes(piece: &str) -> Vec<u8> {
    if let Some(hex) = piece.strip_prefix("<0x").and_then(|p| p.strip_suffix('>'))
        && hex.len() == 2
        && let Ok(b) = u8::from_str_radix(hex, 16)
    {
        return vec![b];
    }
    piece.replace('\u{2581}', " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_encoded_a_part_at_a_time_gives_the_wholes_tokens() {
        let encoder = Encoder::parse(super::super::MOCK_TOKENIZER).unwrap();
        let line = "The board logs a line, {\"json\": 1} and 東京 👋🏽.\n\n  indented\n";
        let text = line.repeat(PART_BYTES / line.len() * 3);
        // One long line is cut between words.
        let words = "a word, 東京  twice\tand 👋🏽 once. ".repeat(PART_BYTES / 20 * 3);
        let parts: Vec<&str> = encoder.parts(&words).collect();
        assert!(parts.len() >= 3, "{}", parts.len());
        assert_eq!(
            encoder.encode_long(&words, false).unwrap(),
            encoder.encode(&words).unwrap()
        );
        let parts: Vec<&str> = encoder.parts(&text).collect();
        assert!(parts.len() >= 3, "{}", parts.len());
        assert_eq!(parts.concat(), text);
        let whole = encoder.encode(&text).unwrap();
        assert_eq!(encoder.encode_long(&text, false).unwrap(), whole);
        assert_eq!(encoder.count(&text).unwrap(), whole.len());
        let (mut bytes, mut ends) = (Vec::new(), Vec::new());
        encoder.pieces_into(&whole, &mut bytes, &mut ends).unwrap();
        assert_eq!(bytes, text.as_bytes());
        assert_eq!(ends.len(), whole.len());
        assert_eq!(
            encoder.pieces(&whole[..3]).unwrap().concat(),
            bytes[..ends[2] as usize]
        );
    }

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
    fn pieces_are_each_tokens_bytes_and_join_to_the_text() {
        let encoder = Encoder::parse(super::super::MOCK_TOKENIZER).unwrap();
        for text in ["hello world", "日本語 and émoji 👋🏽", "x<|endoftext|>"] {
            let ids = encoder.encode(text).unwrap();
            let pieces = encoder.pieces(&ids).unwrap();
            assert_eq!(pieces.concat(), text.as_bytes(), "{text}");
        }
        // A multi-byte character spread over byte tokens: each piece is
        // part of it.
        let ids = encoder.encode("é").unwrap();
        assert_eq!(encoder.pieces(&ids).unwrap(), [vec![0xC3], vec![0xA9]]);
        assert!(encoder.pieces(&[9_999_999]).is_err());
        assert!(encoder.fim().is_none());
    }

    #[test]
    fn sentencepiece_pieces_are_spaces_and_bytes() {
        assert_eq!(sentencepiece_bytes("▁hello"), b" hello");
        assert_eq!(sentencepiece_bytes("<0xE6>"), [0xE6]);
        assert_eq!(byte_level_bytes("Ġhi"), b" hi");
        assert_eq!(byte_level_bytes("Ã©"), "é".as_bytes());
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
