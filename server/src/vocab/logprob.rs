//! A generated token's log probability, as the runner read it from the
//! runtime's logits row, on its way to the APIs that report it.

use serde::{Deserialize, Serialize};

/// One generated token's log probability and the likeliest tokens at its
/// place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token's bytes (a token may be part of a character).
    pub bytes: Vec<u8>,
    /// Its natural log probability under the distribution it was drawn
    /// from (the model's, before temperature and top-k/top-p).
    pub logprob: f32,
    /// The likeliest tokens there, most likely first: bytes and log
    /// probability.
    pub top: Vec<(Vec<u8>, f32)>,
}

/// A token's text as OpenAI writes it: the text when its bytes are whole
/// UTF-8, else `bytes:` and each byte as `\xNN`.
pub fn token_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => {
            let mut out = String::from("bytes:");
            for b in bytes {
                out.push_str(&format!("\\x{b:02x}"));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::token_text;

    #[test]
    fn a_token_that_is_part_of_a_character_is_written_as_its_bytes() {
        assert_eq!(token_text(b"hi"), "hi");
        assert_eq!(token_text("é".as_bytes()), "é");
        assert_eq!(token_text(&[0xe6, 0x97]), "bytes:\\xe6\\x97");
    }
}
