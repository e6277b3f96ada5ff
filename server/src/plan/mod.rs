//! What to run on the NPU, decided apart from running it.
//!
//! Given what a model is (its [`Profile`]: template kind, tokenizer,
//! context, settings, and the verdicts of the probes of its runtime),
//! what the runtime holds now (a conversation in its history, a loaded
//! snapshot) and a request, this room says which runs to make: continue
//! the history or send the prompt whole, which snapshot to start from and
//! which to save, how a long prompt is cut into chunks, when a thinking
//! block is closed and with what, which logits row answers a constrained
//! step, and which conversation to bring up to date when the NPU is idle.
//! The probes themselves are here too: what each runs and how its
//! observations are judged into the features a model may use.
//!
//! The NPU runner (`backend::rkllm`) carries these decisions out through
//! the runtime's C API; the mock (`backend::mock`) carries out the same
//! ones, paced, so that a laptop shows what a board will show.
//!
//! A pure room: no FFI, file I/O, threads or clock. It uses `model` (what
//! a model is) and `vocab`; `backend` uses it.

pub mod budget;
pub mod chunks;
pub mod conversation;
pub mod history;
pub mod probe;
pub mod profile;
pub mod refresh;
pub mod rows;
pub mod snapshots;
pub mod start;
pub mod steer;

pub use conversation::{ConversationState, Plan};
