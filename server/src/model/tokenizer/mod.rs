//! A model's tokenizer: its vocabulary as the constraint engine reads it
//! ([`Vocabulary`]), where it comes from ([`TokenizerSource`]), and the
//! bounds any `tokenizer.json` must keep before a table is built from it
//! ([`bounds`]): a tokenizer is untrusted input.

pub mod bounds;
mod vocabulary;

pub use vocabulary::{
    MAX_TOKENIZER_BYTES, MOCK_TOKENIZER, TokenizerError, TokenizerSource, Vocabulary,
};
