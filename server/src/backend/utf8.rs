//! Streaming UTF-8 assembly: turns token pieces (arbitrary byte slices, as a
//! runtime decodes them) into deltas of whole characters.
//!
//! Invariant: every string returned is valid UTF-8 and never ends in the
//! middle of a character; bytes of an incomplete character are held back
//! until the rest arrives. Invalid sequences become U+FFFD, as a lossy
//! decoder would, so one broken token cannot poison the stream.

/// Holds back an incomplete trailing character between pieces.
#[derive(Debug, Default)]
pub struct Utf8Assembler {
    pending: Vec<u8>,
}

impl Utf8Assembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one piece and returns the whole characters it completes
    /// (possibly empty).
    pub fn push(&mut self, piece: &[u8]) -> String {
        self.pending.extend_from_slice(piece);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(err) => {
                    let (valid, after) = rest.split_at(err.valid_up_to());
                    // `valid_up_to` guarantees that this prefix is UTF-8.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match err.error_len() {
                        // Incomplete sequence at the end: keep it for later.
                        None => {
                            rest = after;
                            break;
                        }
                        // Invalid bytes: replace them and go on.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let start = self.pending.len() - keep;
        self.pending.drain(..start);
        out
    }

    /// Ends the stream: an incomplete tail left over becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }

    /// Bytes currently held back.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "héllo 東京 🦀👋🏽 naïve ü";

    #[test]
    fn every_split_point_yields_whole_characters_and_the_same_text() {
        let bytes = SAMPLE.as_bytes();
        for a in 0..=bytes.len() {
            for b in a..=bytes.len() {
                let mut asm = Utf8Assembler::new();
                let mut joined = String::new();
                for piece in [&bytes[..a], &bytes[a..b], &bytes[b..]] {
                    let out = asm.push(piece);
                    assert!(!out.contains('\u{FFFD}'), "split at {a}/{b} gave {out:?}");
                    joined.push_str(&out);
                }
                assert_eq!(asm.finish(), "");
                assert_eq!(joined, SAMPLE);
            }
        }
    }

    #[test]
    fn byte_at_a_time_never_emits_a_partial_character() {
        let mut asm = Utf8Assembler::new();
        let mut joined = String::new();
        for byte in SAMPLE.as_bytes() {
            joined.push_str(&asm.push(std::slice::from_ref(byte)));
        }
        assert_eq!(joined, SAMPLE);
        assert_eq!(asm.pending_len(), 0);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut asm = Utf8Assembler::new();
        assert_eq!(asm.push(b"a\xffb"), "a\u{FFFD}b");
        assert_eq!(asm.push(b"\xe6\x9d"), "");
        assert_eq!(asm.finish(), "\u{FFFD}");
    }
}
