//! A generated token's log probability, as the runner read it from the
//! runtime's logits row, on its way to the APIs that report it.
//!
//! Kept compactly: a token's bytes and its alternatives' share one buffer,
//! and their log probabilities one slice, so an entry is two allocations
//! however many alternatives it has (a non-streamed answer holds up to
//! `max_tokens` of them: 8,192 tokens with 20 alternatives each are about
//! 3 MB).

use serde::{Deserialize, Serialize};

/// One generated token's log probability and the likeliest tokens at its
/// place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Wire")]
pub struct TokenLogprob {
    /// The token's bytes, then each alternative's, end to end.
    bytes: Box<[u8]>,
    /// Where the token's own bytes end.
    token_end: u32,
    /// Its natural log probability under the distribution it was drawn
    /// from (the model's, before temperature and top-k/top-p).
    logprob: f32,
    /// Each alternative's end in `bytes`, and its log probability; most
    /// likely first.
    top: Box<[(u32, f32)]>,
}

/// [`TokenLogprob`] as it crosses a process boundary: checked before use.
#[derive(Deserialize)]
struct Wire {
    bytes: Box<[u8]>,
    token_end: u32,
    logprob: f32,
    top: Box<[(u32, f32)]>,
}

impl TryFrom<Wire> for TokenLogprob {
    type Error = &'static str;

    fn try_from(wire: Wire) -> Result<Self, Self::Error> {
        let mut at = wire.token_end;
        for &(end, _) in &wire.top {
            if end < at {
                return Err("a token's alternatives out of order");
            }
            at = end;
        }
        if at as usize > wire.bytes.len() {
            return Err("a token's alternatives past its bytes");
        }
        Ok(Self {
            bytes: wire.bytes,
            token_end: wire.token_end,
            logprob: wire.logprob,
            top: wire.top,
        })
    }
}

impl TokenLogprob {
    /// The token `bytes` at `logprob`, with the likeliest tokens at its
    /// place (`top`: bytes and log probability, most likely first).
    pub fn new<B: AsRef<[u8]>>(
        bytes: &[u8],
        logprob: f32,
        top: impl IntoIterator<Item = (B, f32)>,
    ) -> Self {
        let top = top.into_iter();
        let mut all = Vec::with_capacity(bytes.len() * (1 + top.size_hint().0));
        all.extend_from_slice(bytes);
        let token_end = offset(all.len());
        let mut ends = Vec::with_capacity(top.size_hint().0);
        for (alternative, logprob) in top {
            all.extend_from_slice(alternative.as_ref());
            ends.push((offset(all.len()), logprob));
        }
        Self {
            bytes: all.into_boxed_slice(),
            token_end,
            logprob,
            top: ends.into_boxed_slice(),
        }
    }

    /// The token's bytes (a token may be part of a character).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.token_end as usize]
    }

    /// Its natural log probability.
    pub fn logprob(&self) -> f32 {
        self.logprob
    }

    /// The likeliest tokens at its place, most likely first: bytes and log
    /// probability.
    pub fn top(&self) -> impl ExactSizeIterator<Item = (&[u8], f32)> + Clone + '_ {
        (0..self.top.len()).map(|i| {
            let start = if i == 0 {
                self.token_end
            } else {
                self.top[i - 1].0
            };
            let (end, logprob) = self.top[i];
            (&self.bytes[start as usize..end as usize], logprob)
        })
    }

    /// Keeps the `n` likeliest alternatives.
    pub fn truncate_top(&mut self, n: usize) {
        if n >= self.top.len() {
            return;
        }
        let end = if n == 0 {
            self.token_end
        } else {
            self.top[n - 1].0
        };
        self.bytes = self.bytes[..end as usize].into();
        self.top = self.top[..n].into();
    }

    /// Keeps bytes `start..end` of the token itself (its part in an
    /// answer a stop string or a dropped white space cut); its
    /// alternatives stay as they are.
    pub fn keep_bytes(&mut self, start: usize, end: usize) {
        let token_end = self.token_end as usize;
        let (start, end) = (
            start.min(token_end),
            end.clamp(start.min(token_end), token_end),
        );
        let removed = token_end - (end - start);
        let mut bytes = Vec::with_capacity(self.bytes.len() - removed);
        bytes.extend_from_slice(&self.bytes[start..end]);
        bytes.extend_from_slice(&self.bytes[token_end..]);
        let shift = offset(removed);
        self.bytes = bytes.into_boxed_slice();
        self.token_end = offset(end - start);
        for (at, _) in self.top.iter_mut() {
            *at -= shift;
        }
    }

    /// The memory it holds, in bytes.
    pub fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.bytes.len() + std::mem::size_of_val(&*self.top)
    }
}

/// A byte offset in an entry: a token's bytes and its alternatives' are a
/// few hundred bytes, never 4 GiB.
fn offset(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
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
    use super::{TokenLogprob, token_text};

    #[test]
    fn a_token_that_is_part_of_a_character_is_written_as_its_bytes() {
        assert_eq!(token_text(b"hi"), "hi");
        assert_eq!(token_text("é".as_bytes()), "é");
        assert_eq!(token_text(&[0xe6, 0x97]), "bytes:\\xe6\\x97");
    }

    #[test]
    fn an_entry_gives_back_its_token_and_alternatives_and_keeps_the_likeliest() {
        let mut e = TokenLogprob::new(
            b" x",
            -0.5,
            [(&b" x"[..], -0.5), (b"", -2.0), (b"yz", -3.0)],
        );
        assert_eq!(e.bytes(), b" x");
        assert_eq!(e.logprob(), -0.5);
        let top: Vec<_> = e.top().collect();
        assert_eq!(
            top,
            [(&b" x"[..], -0.5), (&b""[..], -2.0), (&b"yz"[..], -3.0)]
        );
        e.truncate_top(2);
        assert_eq!(e.top().len(), 2);
        assert_eq!(e.top().last(), Some((&b""[..], -2.0)));
        e.truncate_top(0);
        assert_eq!(e.top().len(), 0);
        assert_eq!(e.bytes(), b" x");
        let mut cut = TokenLogprob::new(b"abcd", -0.5, [(&b"abcd"[..], -0.5), (b"ef", -1.0)]);
        cut.keep_bytes(1, 3);
        assert_eq!(cut.bytes(), b"bc");
        assert_eq!(
            cut.top().collect::<Vec<_>>(),
            [(&b"abcd"[..], -0.5), (&b"ef"[..], -1.0)]
        );
    }

    #[test]
    fn an_entry_from_another_process_is_checked() {
        let e = TokenLogprob::new(b"ab", -1.0, [(&b"cd"[..], -2.0)]);
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<TokenLogprob>(&json).unwrap(), e);
        let past = json.replace("[4,", "[9,");
        assert!(
            serde_json::from_str::<TokenLogprob>(&past).is_err(),
            "{past}"
        );
    }
}
