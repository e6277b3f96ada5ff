//! A stream as the place a backend's tokens go: the engine joins the two
//! rooms below it, so neither needs to know the other.

use crate::backend::TokenOutput;
use crate::stream::Stream;
use crate::vocab::CancelToken;

impl TokenOutput for Stream {
    fn push(&self, text: &str, thinking: bool, tokens: u32, produced_ns: Option<u64>) -> bool {
        self.push_stamped(text, thinking, tokens, produced_ns)
    }

    fn logprobs(&self, entries: Vec<crate::vocab::TokenLogprob>) {
        self.add_logprobs(entries);
    }

    fn stamp_now(&self) -> Option<u64> {
        Stream::stamp_now(self)
    }

    fn set_prompt_tokens(&self, tokens: u32) {
        Stream::set_prompt_tokens(self, tokens);
    }

    fn prefill_progress(&self, done: u32, total: u32) {
        Stream::set_prefill(self, done, total);
    }

    fn cancel_token(&self) -> &CancelToken {
        Stream::cancel_token(self)
    }
}
