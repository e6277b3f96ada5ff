//! What a model is, apart from what runs it: its spec and settings, how it
//! is asked to sample and who speaks ([`Sampling`], [`Role`]), the
//! messages and tool calls of a conversation, its chat templates (the
//! runtime's, ChatML, Llama 3, custom, Jinja), its tokenizer and
//! vocabulary, the shape of its reasoning, its way of filling in the middle,
//! a reranker's judgement, its images' types and the check
//! of their headers, and the constraint compiler that holds an answer to a
//! grammar over its vocabulary. [`prompt::build`] is the one place a
//! conversation becomes this model's input.
//!
//! A pure room: no I/O, no threads, no FFI. What reads files, starts
//! processes or calls the runtime lives above (`backend`, `sandbox`,
//! `engine`, `service`) and hands this room text and values.

pub mod constraint;
pub mod fim;
pub mod image;
pub mod message;
pub mod prompt;
pub mod reasoning;
pub mod rerank;
mod sampling;
mod spec;
pub mod template;
pub mod tokenizer;

/// Bytes of text per token, for estimating a prompt's tokens when nothing
/// counts them: about four in English text and code, fewer tokens per
/// byte in scripts of several bytes a character. The estimate errs low,
/// so only a prompt that surely does not fit is refused.
pub const BYTES_PER_TOKEN: usize = 4;

pub use fim::Fim;
pub use message::{ImageSource, Message, Part, Speaker, ToolCall};
pub use prompt::{Chat, Input, Keeping, Prompt, Turn};
pub use reasoning::ReasoningMode;
pub use sampling::{Role, Sampling, ThinkingBudget};
pub use spec::{
    DEFAULT_PREFILL_CHUNK_TOKENS, EmbeddingSpec, HistoryReuse, LoraAdapter,
    MIN_PREFILL_CHUNK_TOKENS, ModelSettings, ModelSpec, Pooling, PromptCacheSpec, VISION_FAMILIES,
    VisionSpec,
};
pub use template::{ChatTemplate, CustomTemplate, JinjaTemplate};
