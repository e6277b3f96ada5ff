//! [`Event`]: one thing a generation produced, as every API reads it —
//! thinking, text, and a tool call's start, argument fragments and end.
//! The tool-call parser makes the answer's events; [`Running`] adds the
//! thinking and hands them out per batch.
//!
//! [`Running`]: super::Running

use crate::model::ToolCall;

/// One thing a generation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Thinking (reasoning models), before the answer.
    Thinking(String),
    /// Answer text.
    Text(String),
    /// A tool call starts: its index in the reply, id and name.
    CallStart {
        /// Index in the reply, from 0.
        index: usize,
        /// Its id.
        id: String,
        /// The function's name.
        name: String,
    },
    /// More of a call's arguments (JSON text).
    CallArguments {
        /// Index of the call.
        index: usize,
        /// The fragment.
        fragment: String,
    },
    /// A call is complete.
    CallEnd(usize, ToolCall),
}

/// Appends text (or thinking) to `events`, merged into the event before it
/// when that is of the same kind: one string per run of text, not one per
/// piece. Empty text adds nothing.
pub(super) fn push_text(events: &mut Vec<Event>, text: &str, thinking: bool) {
    if text.is_empty() {
        return;
    }
    match events.last_mut() {
        Some(Event::Thinking(last)) if thinking => last.push_str(text),
        Some(Event::Text(last)) if !thinking => last.push_str(text),
        _ if thinking => events.push(Event::Thinking(text.to_owned())),
        _ => events.push(Event::Text(text.to_owned())),
    }
}
