//! A model's tokenizer: its vocabulary as the constraint engine reads it
//! ([`Vocabulary`]), its encoder for true token counts ([`Encoder`]), where it comes from ([`TokenizerSource`]), and the
//! bounds any `tokenizer.json` must keep before a table is built from it
//! ([`bounds`]): a tokenizer is untrusted input.

pub mod bounds;
mod encoder;
mod vocabulary;

pub use encoder::Encoder;
pub use vocabulary::{
    MAX_TOKENIZER_BYTES, MOCK_TOKENIZER, TokenizerError, TokenizerSource, Vocabulary,
};
