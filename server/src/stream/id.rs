//! Stream ids: 16 characters of `[a-z0-9]` drawn from a CSPRNG.
//!
//! Ids are capabilities (knowing one lets a client read or abort the
//! stream), so they come from the operating system-seeded ChaCha generator
//! behind `rand::rng()` and are never logged at info level.

use rand::Rng;

/// Length of a stream id.
pub const STREAM_ID_LEN: usize = 16;
const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A fresh random stream id.
pub fn new_stream_id() -> String {
    let mut rng = rand::rng();
    (0..STREAM_ID_LEN)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// True when `id` has the shape of a stream id.
pub fn is_stream_id(id: &str) -> bool {
    id.len() == STREAM_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_have_the_documented_shape_and_do_not_repeat() {
        let ids: HashSet<String> = (0..10_000).map(|_| new_stream_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| is_stream_id(id)));
    }

    #[test]
    fn malformed_ids_are_recognised() {
        assert!(!is_stream_id("ABCDEFGHIJKLMNOP"));
        assert!(!is_stream_id("short"));
        assert!(!is_stream_id("abcdefghijklmnop1"));
    }
}
