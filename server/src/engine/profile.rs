//! A model as the service prepares a request for it, in one value: the
//! name, how its prompts are built (its template, or the runtime's own
//! where the probes found the empty template does not turn that off), its
//! context, its tokenizer, its shape, and what its runtime was probed to
//! do. Resolved once when first asked after the model is added, and again
//! after its probes' verdicts change; read by the service in one call per
//! request.

use crate::model::ChatTemplate;
use crate::model::tokenizer::TokenizerSource;
use crate::plan::profile::Features;

/// What the service needs of a model to prepare a request.
#[derive(Debug, Clone)]
pub struct ModelProfile {
    /// Its name.
    pub name: String,
    /// How its conversations become its input.
    pub template: ChatTemplate,
    /// Tokens its context holds, when the backend knows.
    pub context_length: Option<u32>,
    /// Its tokenizer, when it has one (the mock's when it names none).
    pub tokenizer: Option<TokenizerSource>,
    /// It is a reranker.
    pub reranker: bool,
    /// It is an embedding model.
    pub embedding: bool,
    /// What its runtime was probed to do (`None`: not probed, or a backend
    /// with nothing to probe).
    pub features: Option<Features>,
    /// Its runtime is still to be probed: a request resting on a probed
    /// feature loads it first.
    pub unprobed: bool,
}
