//! The log probabilities of an answer's tokens matched to its text, so
//! that the tokens given with the answer join to exactly its text: a
//! chunk of text goes out once the tokens that make it have come, the
//! white space a reasoning model's answer starts with (which the answer
//! drops) takes its tokens with it, and at the end the token a stop string
//! cuts into keeps only the bytes before it, the tokens after it none.

use std::collections::VecDeque;

use crate::vocab::TokenLogprob;

/// Answer text and the tokens it came from, lined up.
#[derive(Debug, Default)]
pub struct Aligned {
    /// The answer's tokens not given out yet, in order.
    tokens: VecDeque<TokenLogprob>,
    /// Answer text held until the tokens that make it have come.
    held: String,
    /// Whether the answer's first text has been seen (its leading white
    /// space is matched then).
    started: bool,
    /// Whether any token has come: until then text passes as it is.
    active: bool,
}

impl Aligned {
    /// The tokens of answer text still to come.
    pub fn push(&mut self, entries: impl IntoIterator<Item = TokenLogprob>) {
        for entry in entries {
            self.active = true;
            self.tokens.push_back(entry);
        }
    }

    /// Whether log probabilities are being lined up with the text (none has
    /// come yet: the text passes as it is, with nothing to hold).
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Answer `text`, written: what of it (and of the text held before)
    /// may go out now, and the tokens that go with it.
    pub fn text(&mut self, text: &str) -> (String, Vec<TokenLogprob>) {
        if !self.active {
            return (text.to_owned(), Vec::new());
        }
        self.held.push_str(text);
        self.skip_leading_space();
        // The whole tokens the held text covers.
        let mut covered = 0;
        let mut given = 0;
        for entry in &self.tokens {
            let len = entry.bytes().len();
            if covered + len > self.held.len() {
                break;
            }
            covered += len;
            given += 1;
        }
        // Text out to a character boundary; a token that ends inside a
        // character goes with the text that finishes it.
        let mut cut = covered;
        while !self.held.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut out_bytes = 0;
        let mut out = 0;
        for entry in self.tokens.iter().take(given) {
            if out_bytes + entry.bytes().len() > cut {
                break;
            }
            out_bytes += entry.bytes().len();
            out += 1;
        }
        // Tokens whose bytes are not the text's (a runtime's replacement
        // character for bytes that never made one) never split one.
        let mut out_bytes = out_bytes.min(self.held.len());
        while !self.held.is_char_boundary(out_bytes) {
            out_bytes -= 1;
        }
        let text: String = self.held.drain(..out_bytes).collect();
        (text, self.tokens.drain(..out).collect())
    }

    /// The answer is over: the text still held, with the tokens that made
    /// it (the last cut to the bytes in the answer); tokens past the
    /// answer's end are dropped.
    pub fn finish(&mut self) -> (String, Vec<TokenLogprob>) {
        let text = std::mem::take(&mut self.held);
        let mut left = text.len();
        let mut given = Vec::new();
        while left > 0 {
            let Some(mut entry) = self.tokens.pop_front() else {
                break;
            };
            let len = entry.bytes().len();
            if len > left {
                entry.keep_bytes(0, left);
            }
            left -= entry.bytes().len();
            given.push(entry);
        }
        self.tokens.clear();
        (text, given)
    }

    /// At the answer's first text: the white space its tokens start with
    /// that the text does not (dropped before the answer) is taken off
    /// them.
    fn skip_leading_space(&mut self) {
        if self.started || self.held.is_empty() {
            return;
        }
        self.started = true;
        let kept = self.held.len() - self.held.trim_start().len();
        let mut extra = leading_space(&self.tokens).saturating_sub(kept);
        while extra > 0 {
            let Some(front) = self.tokens.front_mut() else {
                break;
            };
            let len = front.bytes().len();
            if len <= extra {
                extra -= len;
                self.tokens.pop_front();
            } else {
                front.keep_bytes(extra, len);
                extra = 0;
            }
        }
    }
}

/// The white space bytes the tokens' text starts with.
fn leading_space(tokens: &VecDeque<TokenLogprob>) -> usize {
    let mut n = 0;
    for entry in tokens {
        let bytes = entry.bytes();
        let space = bytes.iter().take_while(|b| b.is_ascii_whitespace()).count();
        n += space;
        if space < bytes.len() {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> TokenLogprob {
        TokenLogprob::new(text.as_bytes(), -1.0, [(text.as_bytes(), -1.0)])
    }

    fn joined(entries: &[TokenLogprob]) -> String {
        String::from_utf8(entries.iter().flat_map(|e| e.bytes().to_vec()).collect()).unwrap()
    }

    #[test]
    fn text_goes_out_with_the_tokens_that_made_it() {
        let mut a = Aligned::default();
        a.push([token("alpha")]);
        let (text, entries) = a.text("alpha");
        assert_eq!(
            (text.as_str(), joined(&entries).as_str()),
            ("alpha", "alpha")
        );
        // A stop string held " be" back: the token waits for its text.
        a.push([token(" be")]);
        let (text, entries) = a.text("");
        assert_eq!((text.as_str(), entries.len()), ("", 0));
        a.push([token("ta"), token(" STOP")]);
        let (text, entries) = a.text(" beta");
        assert_eq!(
            (text.as_str(), joined(&entries).as_str()),
            (" beta", " beta")
        );
        let (text, entries) = a.finish();
        assert_eq!((text.as_str(), entries.len()), ("", 0));
    }

    #[test]
    fn a_token_a_stop_string_cuts_into_keeps_the_bytes_before_it() {
        let mut a = Aligned::default();
        a.push([token("x"), token("ya!")]);
        let (text, entries) = a.text("x");
        assert_eq!((text.as_str(), joined(&entries).as_str()), ("x", "x"));
        // "ya" held: the stop string "!" ended the answer there.
        let (text, entries) = a.text("ya");
        assert_eq!((text.as_str(), entries.len()), ("", 0));
        let (text, entries) = a.finish();
        assert_eq!((text.as_str(), joined(&entries).as_str()), ("ya", "ya"));
        assert_eq!(entries[0].top().len(), 1);
    }

    #[test]
    fn the_white_space_an_answer_drops_takes_its_tokens_and_characters_stay_whole() {
        let mut a = Aligned::default();
        a.push([token("\n\n"), token("  Hi"), token(" 東")]);
        let (text, entries) = a.text("Hi");
        assert_eq!((text.as_str(), joined(&entries).as_str()), ("Hi", "Hi"));
        // A character split between two tokens goes out when both came.
        a.push([
            TokenLogprob::new(&[0xe4, 0xba], -1.0, [(&[0xe4u8][..], -1.0)]),
            TokenLogprob::new(&[0xac], -1.0, [(&[0xacu8][..], -1.0)]),
        ]);
        let (text, entries) = a.text(" 東");
        assert_eq!((text.as_str(), joined(&entries).as_str()), (" 東", " 東"));
        let (text, entries) = a.text("京");
        assert_eq!(text, "京");
        assert_eq!(entries.len(), 2);
        assert!(a.finish().1.is_empty());
    }

    #[test]
    fn tokens_whose_bytes_are_not_the_text_never_split_a_character() {
        let mut a = Aligned::default();
        // A token of one byte against a character of three: the text goes
        // out whole once the tokens cover it.
        a.push([
            token("a"),
            TokenLogprob::new(&[0xe6], -1.0, [(&[0xe6u8][..], -1.0)]),
        ]);
        let (text, _) = a.text("a\u{fffd}");
        assert!(text == "a" || text == "a\u{fffd}", "{text:?}");
        let (rest, _) = a.finish();
        assert_eq!(format!("{text}{rest}"), "a\u{fffd}");
    }

    #[test]
    fn without_tokens_text_passes_as_it_is() {
        let mut a = Aligned::default();
        assert_eq!(a.text("hello").0, "hello");
        assert_eq!(a.finish().0, "");
    }
}
