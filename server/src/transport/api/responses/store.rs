//! The responses kept for `previous_response_id`: each finished response
//! (completed or cut at its token limit) whose request did not say
//! `store: false` is kept in memory with its whole conversation — the
//! messages it was given, less its `instructions`, and the answer it gave —
//! so that a later request naming it continues that conversation.
//!
//! The store is bounded three ways, all settings (`[responses]`): a
//! response is kept at most `store_ttl_secs`; at most `store_max_entries`
//! are kept; and their conversations take at most `store_max_bytes` (text
//! and image bytes, plus a small cost per message). The oldest go first. A
//! response larger than the whole byte budget is not kept. A request naming
//! a response that is not (or no longer) kept is refused, never answered
//! without its history. Nothing is written to disk; a restart forgets all.
//!
//! With API keys, a response belongs to the key that made it: only that
//! key finds it, and to any other it is not kept, exactly as an id never
//! made (so another key's ids cannot be told from unknown ones). Without
//! keys, every client finds every response.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::super::super::auth::KeyId;
/// How much the store keeps, and for how long (`[responses]`, among the
/// transports' settings).
pub use super::super::super::state::ResponsesSettings as StoreSettings;
use crate::service::{ImageSource, Message, Part};

/// Whose a response is: the API key its request carried, or `None` on a
/// server without keys.
pub type Owner = Option<KeyId>;

/// `[responses] store_max_entries`.
pub const DEFAULT_STORE_MAX_ENTRIES: usize = 256;
/// `[responses] store_max_bytes`: 16 MiB.
pub const DEFAULT_STORE_MAX_BYTES: usize = 16 << 20;
/// `[responses] store_ttl_secs`: an hour.
pub const DEFAULT_STORE_TTL_SECS: u64 = 3600;

/// Bytes counted for each message beyond its text (its place in memory).
const MESSAGE_OVERHEAD: usize = 64;

/// A kept response.
#[derive(Debug)]
struct Entry {
    owner: Owner,
    conversation: Arc<[Message]>,
    bytes: usize,
    kept_at: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Ids in the order they were kept: the oldest first, to expire and
    /// evict from the front.
    order: VecDeque<String>,
    bytes: usize,
}

/// The kept responses. Its lock is a `parking_lot` one: every critical
/// section is a few map operations, with no await inside.
#[derive(Debug)]
pub struct ResponseStore {
    settings: StoreSettings,
    inner: Mutex<Inner>,
}

/// The bytes a conversation is counted for.
pub fn conversation_bytes(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| {
            let parts: usize = m
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text(text) => text.len(),
                    Part::Image(ImageSource::Inline(bytes)) => bytes.len(),
                    Part::Image(ImageSource::Remote(url)) => url.len(),
                })
                .sum();
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                .sum();
            MESSAGE_OVERHEAD + parts + calls
        })
        .sum()
}

impl ResponseStore {
    /// An empty store.
    pub fn new(settings: StoreSettings) -> Self {
        Self {
            settings,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> StoreSettings {
        self.settings
    }

    /// Whether responses are kept at all.
    pub fn enabled(&self) -> bool {
        self.settings.max_entries > 0 && self.settings.max_bytes > 0
    }

    /// Keeps `conversation` as response `id`'s, made by `owner`, evicting
    /// the oldest responses as the bounds require. Returns whether it was
    /// kept (not when the store is off, or the conversation alone is over
    /// the byte budget).
    pub fn keep(&self, id: String, owner: Owner, conversation: Vec<Message>) -> bool {
        if !self.enabled() {
            return false;
        }
        let bytes = conversation_bytes(&conversation);
        if bytes > self.settings.max_bytes {
            return false;
        }
        let now = Instant::now();
        let mut inner = self.inner.lock();
        expire(&mut inner, now, self.settings.ttl);
        while !inner.order.is_empty()
            && (inner.entries.len() >= self.settings.max_entries
                || inner.bytes + bytes > self.settings.max_bytes)
        {
            evict_oldest(&mut inner);
        }
        if let Some(old) = inner.entries.insert(
            id.clone(),
            Entry {
                owner,
                conversation: conversation.into(),
                bytes,
                kept_at: now,
            },
        ) {
            inner.bytes -= old.bytes;
            inner.order.retain(|o| *o != id);
        }
        inner.bytes += bytes;
        inner.order.push_back(id);
        true
    }

    /// The conversation of response `id`, if it is kept, not expired, and
    /// `owner`'s; another owner's response is `None`, as an unknown id is.
    pub fn get(&self, id: &str, owner: Owner) -> Option<Arc<[Message]>> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        expire(&mut inner, now, self.settings.ttl);
        inner
            .entries
            .get(id)
            .filter(|e| e.owner == owner)
            .map(|e| Arc::clone(&e.conversation))
    }

    /// Responses kept now, and the bytes they are counted for.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.entries.len(), inner.bytes)
    }
}

fn evict_oldest(inner: &mut Inner) {
    if let Some(id) = inner.order.pop_front()
        && let Some(entry) = inner.entries.remove(&id)
    {
        inner.bytes -= entry.bytes;
    }
}

/// Drops the responses kept longer than `ttl` (they are in `order` oldest
/// first, so only the front needs looking at).
fn expire(inner: &mut Inner, now: Instant, ttl: Duration) {
    while let Some(id) = inner.order.front() {
        let expired = inner
            .entries
            .get(id)
            .is_none_or(|e| now.duration_since(e.kept_at) >= ttl);
        if !expired {
            break;
        }
        evict_oldest(inner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Speaker;

    fn conversation(text: &str) -> Vec<Message> {
        vec![Message::text(Speaker::User, text)]
    }

    fn settings(max_entries: usize, max_bytes: usize, ttl_secs: u64) -> StoreSettings {
        StoreSettings {
            max_entries,
            max_bytes,
            ttl: Duration::from_secs(ttl_secs),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_response_is_found_until_it_expires() {
        let store = ResponseStore::new(settings(8, 1 << 20, 60));
        assert!(store.keep("resp_a".into(), None, conversation("hello")));
        assert_eq!(
            store.get("resp_a", None).unwrap()[0],
            conversation("hello")[0]
        );
        assert!(store.get("resp_b", None).is_none());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(store.get("resp_a", None).is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(store.get("resp_a", None).is_none());
        assert_eq!(store.usage(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_go_first_past_the_entry_and_byte_caps() {
        let store = ResponseStore::new(settings(2, 1 << 20, 60));
        for id in ["a", "b", "c"] {
            assert!(store.keep(id.into(), None, conversation(id)));
        }
        assert!(store.get("a", None).is_none());
        assert!(store.get("b", None).is_some() && store.get("c", None).is_some());
        assert_eq!(store.usage().0, 2);

        let one = conversation_bytes(&conversation(&"x".repeat(100)));
        let store = ResponseStore::new(settings(100, one * 2, 60));
        for id in ["a", "b", "c"] {
            assert!(store.keep(id.into(), None, conversation(&"x".repeat(100))));
        }
        assert!(store.get("a", None).is_none());
        assert_eq!(store.usage(), (2, one * 2));
        // One conversation over the whole budget is not kept, and evicts
        // nothing.
        assert!(!store.keep("big".into(), None, conversation(&"x".repeat(one * 2))));
        assert!(store.get("big", None).is_none());
        assert_eq!(store.usage().0, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_id_kept_again_replaces_its_conversation() {
        let store = ResponseStore::new(settings(4, 1 << 20, 60));
        store.keep("a".into(), None, conversation("one"));
        store.keep("a".into(), None, conversation("two"));
        assert_eq!(store.usage().0, 1);
        assert_eq!(store.get("a", None).unwrap()[0], conversation("two")[0]);
        assert_eq!(store.usage().1, conversation_bytes(&conversation("two")));
    }

    #[test]
    fn a_response_is_found_only_by_the_key_that_made_it() {
        let keys = super::super::super::super::auth::ApiKeys::new(&["a".into(), "b".into()]);
        let (a, b) = (keys.identify(b"a"), keys.identify(b"b"));
        let store = ResponseStore::new(settings(8, 1 << 20, 60));
        assert!(store.keep("resp_a".into(), a, conversation("a's secret")));
        assert_eq!(
            store.get("resp_a", a).unwrap()[0],
            conversation("a's secret")[0]
        );
        assert!(store.get("resp_a", b).is_none());
        // A server without keys has no owner: its responses are no key's.
        assert!(store.get("resp_a", None).is_none());
        assert!(store.keep("resp_open".into(), None, conversation("open")));
        assert!(store.get("resp_open", None).is_some());
        assert!(store.get("resp_open", a).is_none());
    }

    #[test]
    fn a_store_without_room_keeps_nothing() {
        let store = ResponseStore::new(settings(0, 1 << 20, 60));
        assert!(!store.enabled());
        assert!(!store.keep("a".into(), None, conversation("x")));
        assert!(store.get("a", None).is_none());
    }
}
