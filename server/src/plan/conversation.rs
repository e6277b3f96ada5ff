//! Conversation reuse: which part of a chat the runtime must prefill.
//!
//! A model's runner keeps the conversation its runtime history holds (the
//! messages sent and the replies generated, with `keep_history`). When a
//! request's messages extend exactly that conversation by one new user or
//! tool message, only that message is sent ([`Plan::Continue`]); otherwise
//! the history is cleared and the whole conversation is sent
//! ([`Plan::Restart`]). This state lives on the model's worker thread, so
//! the decision is made when the request runs, not when it was queued.

use crate::model::prompt::Turn;

/// What to send for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan<'a> {
    /// The runtime holds everything but this message: send only it.
    Continue(&'a Turn),
    /// Clear the runtime's history and send the whole conversation.
    Restart,
}

/// The conversation a runtime's history holds.
#[derive(Debug, Default)]
pub struct ConversationState {
    held: Vec<Turn>,
}

impl ConversationState {
    /// Decides what to send for `conversation`.
    pub fn plan<'a>(&self, conversation: &'a [Turn]) -> Plan<'a> {
        match conversation.split_last() {
            Some((last, earlier))
                if !self.held.is_empty()
                    && earlier == self.held.as_slice()
                    && matches!(last.role.as_str(), "user" | "tool") =>
            {
                Plan::Continue(last)
            }
            _ => Plan::Restart,
        }
    }

    /// Whether anything is held (a request without a conversation must
    /// then clear the history first).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// After a successful run: the runtime now holds the conversation and
    /// the reply.
    pub fn commit(&mut self, conversation: &[Turn], reply: &str) {
        self.held.clear();
        self.held.extend_from_slice(conversation);
        self.held.push(Turn {
            role: "assistant".into(),
            text: reply.to_owned(),
        });
    }

    /// After a failed or aborted run, or a cleared history.
    pub fn reset(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(role: &str, text: &str) -> Turn {
        Turn {
            role: role.into(),
            text: text.into(),
        }
    }

    #[test]
    fn only_an_exact_extension_by_one_message_continues() {
        let mut state = ConversationState::default();
        let first = [turn("system", "be brief"), turn("user", "hi")];
        assert_eq!(state.plan(&first), Plan::Restart, "nothing held yet");
        state.commit(&first, "hello");
        let second = [
            turn("system", "be brief"),
            turn("user", "hi"),
            turn("assistant", "hello"),
            turn("user", "more"),
        ];
        assert_eq!(state.plan(&second), Plan::Continue(&second[3]));
        let edited = [
            turn("system", "be brief"),
            turn("user", "hi"),
            turn("assistant", "HELLO"),
            turn("user", "more"),
        ];
        assert_eq!(state.plan(&edited), Plan::Restart, "a changed reply");
        let two_new = [
            turn("system", "be brief"),
            turn("user", "hi"),
            turn("assistant", "hello"),
            turn("user", "a"),
            turn("user", "b"),
        ];
        assert_eq!(
            state.plan(&two_new),
            Plan::Restart,
            "more than one new message"
        );
        let same = [turn("system", "be brief"), turn("user", "hi")];
        assert_eq!(
            state.plan(&same),
            Plan::Restart,
            "a repeated question starts over"
        );
        state.reset();
        assert!(state.is_empty());
        assert_eq!(state.plan(&second), Plan::Restart);
    }
}
