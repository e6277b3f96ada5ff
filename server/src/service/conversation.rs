//! Which conversation a request belongs to. Clients say it themselves:
//! Claude Code in `X-Claude-Code-Session-Id`, Codex in `session-id` and
//! `prompt_cache_key`, Open WebUI in `X-OpenWebUI-Chat-Id` (when it
//! forwards it), OpenAI SDK users in `prompt_cache_key`, Anthropic SDK
//! users in `metadata.user_id`; a client may echo the `X-Rkllm-Conversation`
//! header it was given. The first found names the session; within it a
//! conversation is told by its opening (the instructions before the first
//! turn and the first user message), so that a session's side requests (a
//! title, a summary) are conversations of their own. Without any of these,
//! the opening alone names it.
//!
//! The key names a conversation in the metrics (whether its next request
//! started from what its previous one left) and in the response's
//! `X-Rkllm-Conversation` header. It never decides what a runtime starts
//! from: that is the prompt's own bytes matched against the snapshots, so a
//! wrong or shared id cannot serve one conversation from another's cache.

use std::hash::{Hash, Hasher};

use crate::model::{Input, Speaker};

/// The request headers that name a session, first found first.
pub const SESSION_HEADERS: [&str; 4] = [
    "x-claude-code-session-id",
    "session-id",
    "session_id",
    "x-openwebui-chat-id",
];

/// The header a response names its conversation in, which a client may
/// send back.
pub const HEADER: &str = "x-rkllm-conversation";

/// The longest session id read; a longer one is cut (it is only hashed).
const MAX_SESSION_BYTES: usize = 256;

tokio::task_local! {
    /// What the HTTP request being handled says of its session: the first
    /// of [`SESSION_HEADERS`], and the `X-Rkllm-Conversation` it echoed.
    static HEADERS: Headers;
}

/// The session headers of one HTTP request, and where the key of the
/// conversation it turned out to be is left for its response.
#[derive(Debug, Clone, Default)]
pub struct Headers {
    /// The first of [`SESSION_HEADERS`] it carried.
    pub session: Option<String>,
    /// The `X-Rkllm-Conversation` it echoed.
    pub echoed: Option<String>,
    /// The key [`key`] found, for the response's header.
    pub found: std::sync::Arc<parking_lot::Mutex<Option<String>>>,
}

/// An echoed `X-Rkllm-Conversation`: a key this server wrote (1 to 64
/// letters, digits, `-` or `_`); anything else is not one.
pub fn echoed(value: &str) -> Option<String> {
    let ok = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then(|| value.to_owned())
}

/// Runs `handler` with `headers` known to the service.
pub async fn with_headers<F: Future>(headers: Headers, handler: F) -> F::Output {
    HEADERS.scope(headers, handler).await
}

fn headers() -> Headers {
    HEADERS.try_with(Clone::clone).unwrap_or_default()
}

/// A session id as read: at most [`MAX_SESSION_BYTES`], at a character
/// edge; an empty one is none.
pub fn bounded(value: &str) -> Option<String> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let mut end = value.len().min(MAX_SESSION_BYTES);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Some(value[..end].to_owned())
}

/// The key of the conversation `input` is part of: the session a header
/// or `field` (the body's `prompt_cache_key` or `metadata.user_id`) names,
/// in the order the module says, and the conversation's opening. `None`
/// for a plain prompt with no session named. The key is left for the
/// HTTP response's `X-Rkllm-Conversation` header.
pub fn key(field: Option<&str>, input: &Input) -> Option<String> {
    let headers = headers();
    let found = std::sync::Arc::clone(&headers.found);
    let key = key_of(headers, field, input);
    if key.is_some() {
        found.lock().clone_from(&key);
    }
    key
}

fn key_of(headers: Headers, field: Option<&str>, input: &Input) -> Option<String> {
    let session = headers.session.or_else(|| field.and_then(bounded));
    // An echoed key is the conversation's own: kept as it is.
    if session.is_none()
        && let Some(echoed) = headers.echoed
    {
        return Some(echoed);
    }
    let opening = opening(input);
    if session.is_none() && opening.is_none() {
        return None;
    }
    let mut hasher = Fnv::default();
    session.hash(&mut hasher);
    opening.hash(&mut hasher);
    Some(format!("{:016x}", hasher.finish()))
}

/// A conversation's opening: its instructions before the first turn and
/// its first user message, as text.
fn opening(input: &Input) -> Option<String> {
    let Input::Chat(messages) = input else {
        return None;
    };
    let mut text = String::new();
    for message in messages {
        text.push_str(message.speaker.as_str());
        text.push('\0');
        text.push_str(&message.rendered());
        text.push('\0');
        if message.speaker != Speaker::System {
            break;
        }
    }
    (!text.is_empty()).then_some(text)
}

/// FNV-1a, 64 bits: the same key on every server and every run (boards
/// behind one balancer must agree), unlike the standard library's
/// randomly seeded hasher.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    fn chat(texts: &[(Speaker, &str)]) -> Input {
        Input::Chat(texts.iter().map(|(s, t)| Message::text(*s, *t)).collect())
    }

    #[tokio::test]
    async fn a_conversation_keeps_its_key_from_turn_to_turn_and_others_differ() {
        let first = chat(&[(Speaker::System, "rules"), (Speaker::User, "q1")]);
        let later = chat(&[
            (Speaker::System, "rules"),
            (Speaker::User, "q1"),
            (Speaker::Assistant, "a1"),
            (Speaker::User, "q2"),
        ]);
        let other = chat(&[(Speaker::System, "rules"), (Speaker::User, "another")]);
        assert_eq!(key(None, &first), key(None, &later));
        assert_ne!(key(None, &first), key(None, &other));
        assert_eq!(key(None, &Input::default()), None);
        // A session's id sets it apart from the same opening elsewhere.
        assert_ne!(key(Some("s1"), &first), key(Some("s2"), &first));
        assert_eq!(key(Some("s1"), &first), key(Some("s1"), &later));
        // The header wins over the body's field.
        let with_header = Headers {
            session: Some("s2".into()),
            ..Headers::default()
        };
        let headed = with_headers(with_header, async { key(Some("s1"), &first) }).await;
        assert_eq!(headed, key(Some("s2"), &first));
        // An echoed key is taken as it is.
        let echoed = Headers {
            echoed: Some("0123456789abcdef".into()),
            ..Headers::default()
        };
        let found = std::sync::Arc::clone(&echoed.found);
        let back = with_headers(echoed, async { key(None, &other) }).await;
        assert_eq!(back.as_deref(), Some("0123456789abcdef"));
        // The key is left for the response.
        assert_eq!(found.lock().as_deref(), Some("0123456789abcdef"));
    }

    #[test]
    fn a_long_id_is_cut_at_a_character_edge() {
        let long = "é".repeat(300);
        let cut = bounded(&long).unwrap();
        assert!(cut.len() <= MAX_SESSION_BYTES && long.starts_with(&cut));
        assert_eq!(bounded("  "), None);
    }
}
