//! What the planner knows of a model: how its prompts are made and which
//! of the runtime's undocumented behaviours it may rely on.

use serde::{Deserialize, Serialize};

use crate::model::ReasoningMode;

/// A model as the planner sees it, resolved when the model is loaded (and
/// again when its probes' verdicts change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// How its replies carry thinking.
    pub reasoning: ReasoningMode,
    /// The server renders its chat template and the runtime takes the
    /// prompt as it is (the runtime's own template is off): the model's
    /// own template is the server's and the probes found the runtime's off.
    pub server_template: bool,
    /// The model's own template is one the server renders (its spec),
    /// whatever the probes found.
    pub renders_template: bool,
    /// It has a tokenizer (token ids for chunks, budgets, rows).
    pub tokenizer: bool,
    /// Tokens a prefill run takes of a long prompt (`prefill_chunk_tokens`;
    /// 0: one run).
    pub chunk_tokens: u32,
    /// What the runtime was found to do.
    pub features: Features,
}

/// One feature of a model: on, or off with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feature {
    /// Whether the model may use it.
    pub on: bool,
    /// Why it is on or off (the probes it rests on, what they saw).
    pub reason: String,
}

impl Feature {
    /// On, for `reason`.
    pub fn on(reason: impl Into<String>) -> Self {
        Self {
            on: true,
            reason: reason.into(),
        }
    }

    /// Off, for `reason`.
    pub fn off(reason: impl Into<String>) -> Self {
        Self {
            on: false,
            reason: reason.into(),
        }
    }
}

/// The features that rest on the runtime's undocumented behaviour, each
/// open only where the probes it rests on passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    /// A long prompt prefilled a chunk a run (else: one run).
    pub chunked_prefill: Feature,
    /// Thinking budgets (else: refused with a 400).
    pub thinking_budget: Feature,
    /// Log probabilities and a reranker's judgements, read from logits
    /// rows (else: refused).
    pub logprobs: Feature,
    /// Constrained output steered token by token (else: refused).
    pub constrained: Feature,
    /// Snapshots of prompts prefilled in chunks (else: such a prompt saves
    /// none; one prefilled in one run still does).
    pub snapshots: Feature,
    /// The server renders the model's chat template (else: the runtime's
    /// own template, which the empty template did not turn off, is used).
    pub server_template: Feature,
    /// The most logits rows one callback may hand over at once for a
    /// prompt prefilled in one run, as the probe found it (`None`: one row
    /// a callback, or not known); a request reading rows prefills in
    /// chunks, or is bounded, past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_at_once: Option<u32>,
    /// The width of a logits row, as the probe found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_width: Option<u32>,
}

impl Features {
    /// Every feature on, for `reason` (a backend with nothing to probe: the
    /// mock, which carries out the plan as the ABI notes describe).
    pub fn all_on(reason: &str) -> Self {
        Self {
            chunked_prefill: Feature::on(reason),
            thinking_budget: Feature::on(reason),
            logprobs: Feature::on(reason),
            constrained: Feature::on(reason),
            snapshots: Feature::on(reason),
            server_template: Feature::on(reason),
            rows_at_once: None,
            row_width: None,
        }
    }
}

impl Features {
    /// Each feature with its name, as `doctor --probe` reports them.
    pub fn named(&self) -> [(&'static str, &Feature); 6] {
        [
            ("chunked_prefill", &self.chunked_prefill),
            ("thinking_budget", &self.thinking_budget),
            ("logprobs", &self.logprobs),
            ("constrained", &self.constrained),
            ("snapshots", &self.snapshots),
            ("server_template", &self.server_template),
        ]
    }
}

impl Default for Features {
    fn default() -> Self {
        Self::all_on("not probed")
    }
}
