//! A model as the service prepares a request for it, in one value: the
//! name, how its prompts are built (its template, or the runtime's own
//! where the probes found the empty template does not turn that off), its
//! context, its tokenizer, its shape, and what its runtime was probed to
//! do. Resolved once when first asked after the model is added, and again
//! after its probes' verdicts change; read by the service in one call per
//! request.

use std::sync::Arc;

use super::lifecycle::ModelSlot;
use crate::backend::Backend;
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

/// `slot`'s profile on `backend`.
pub(super) fn resolve(slot: &ModelSlot, backend: &dyn Backend) -> ModelProfile {
    let verdicts = slot.verdicts.lock();
    let features = verdicts.as_ref().map(|v| v.features.clone());
    // A runtime whose empty template does not turn its own off gets the
    // conversation as its own template takes it.
    let own_off = features.as_ref().is_some_and(|f| !f.server_template.on);
    ModelProfile {
        name: slot.name().to_owned(),
        template: if own_off {
            ChatTemplate::Builtin
        } else {
            slot.spec.template.clone()
        },
        context_length: backend.context_length(&slot.spec),
        tokenizer: backend.tokenizer(&slot.spec),
        reranker: slot.spec.reranker,
        embedding: slot.spec.embedding.is_some(),
        unprobed: backend.probes() && verdicts.is_none(),
        features,
    }
}

/// `slot`'s profile, resolved when first asked and kept until its
/// verdicts change ([`forget`]).
pub(super) fn of(slot: &ModelSlot, backend: &dyn Backend) -> Arc<ModelProfile> {
    if let Some(kept) = slot.profile.lock().as_ref() {
        return Arc::clone(kept);
    }
    let resolved = Arc::new(resolve(slot, backend));
    *slot.profile.lock() = Some(Arc::clone(&resolved));
    resolved
}

/// The model's verdicts changed: its profile is resolved again when next
/// asked.
pub(super) fn forget(slot: &ModelSlot) {
    *slot.profile.lock() = None;
}
