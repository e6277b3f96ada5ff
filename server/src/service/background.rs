//! Which requests are background work: a client's housekeeping that no
//! person waits for (a chat's title, its tags, suggested follow-ups,
//! search queries, autocompletion, Home Assistant's AI tasks). They wait
//! in their model's background lane ([`Priority`]) and run with thinking
//! off; they are still run by the model like any other request.
//!
//! A request says which lane it wants with the `X-Rkllm-Priority` header
//! (any HTTP API) or the `priority` field (JSON-RPC `run`); one that says
//! nothing is background when its prompt carries the signature of a known
//! client's background task (below), interactive otherwise. What a
//! request says wins over its signature.

use std::future::Future;

use crate::engine::Priority;
use crate::model::{Input, Message, Speaker};

/// The HTTP header that names a request's lane.
pub const HEADER: &str = "x-rkllm-priority";

tokio::task_local! {
    /// The `X-Rkllm-Priority` header of the HTTP request being handled,
    /// as it came: the transport sets it around the handler, whatever
    /// API the route belongs to, and the service reads it where it builds
    /// the engine's request.
    static ASKED: Option<String>;
}

/// Runs `handler` with `header` (the request's `X-Rkllm-Priority`, if any)
/// as the lane its generations ask for.
pub async fn with_header<F: Future>(header: Option<String>, handler: F) -> F::Output {
    ASKED.scope(header, handler).await
}

/// The header of the request being handled, if it has one.
fn header() -> Option<String> {
    ASKED.try_with(Clone::clone).ok().flatten()
}

/// The lane the request asked for: `field` (its own), else the header's.
///
/// # Errors
/// A header that names no lane: the message names the header and the
/// values it takes.
pub(super) fn asked(field: Option<Priority>) -> Result<Option<Priority>, (String, String)> {
    if field.is_some() {
        return Ok(field);
    }
    match header() {
        None => Ok(None),
        Some(value) => Priority::parse(&value).map(Some).ok_or_else(|| {
            (
                "X-Rkllm-Priority".to_owned(),
                format!(
                    "the `X-Rkllm-Priority` header must be `interactive` or `background`, got \
                     {value:?}"
                ),
            )
        }),
    }
}

/// A known client's background task, told by phrases its prompt always
/// holds (all of them, as they are written).
struct Signature {
    /// The client and its task, for the log.
    name: &'static str,
    /// Where the phrases are: the last user message, or a system message.
    in_system: bool,
    /// Phrases that must all be there.
    phrases: &'static [&'static str],
}

/// Open WebUI fills its task templates into one user message: each starts
/// `### Task:` and quotes the chat between `<chat_history>` tags (title,
/// tags, follow-ups, search queries); autocompletion and the emoji of a
/// voice call have their own openings. Home Assistant's AI tasks
/// (`ai_task.generate_data`) carry a fixed system prompt.
const SIGNATURES: &[Signature] = &[
    Signature {
        name: "open-webui autocomplete",
        in_system: false,
        phrases: &["### Task:", "You are an autocompletion system"],
    },
    Signature {
        name: "open-webui follow-ups",
        in_system: false,
        phrases: &["### Task:", "<chat_history>", "follow-up questions"],
    },
    Signature {
        name: "open-webui tags",
        in_system: false,
        phrases: &["### Task:", "<chat_history>", "tags"],
    },
    Signature {
        name: "open-webui queries",
        in_system: false,
        phrases: &["### Task:", "<chat_history>", "search queries"],
    },
    Signature {
        name: "open-webui title",
        in_system: false,
        phrases: &["### Task:", "<chat_history>", "title"],
    },
    Signature {
        name: "open-webui title",
        in_system: false,
        phrases: &["Create a concise, 3-5 word title"],
    },
    Signature {
        name: "open-webui emoji",
        in_system: false,
        phrases: &["reflect the speaker's likely facial expression", "emoji"],
    },
    Signature {
        name: "home-assistant ai task",
        in_system: true,
        phrases: &["You are a Home Assistant expert and help users with their tasks."],
    },
];

/// The known background task `input` is, if it is one: its name.
pub fn signature(input: &Input) -> Option<&'static str> {
    let (user, system): (String, Vec<String>) = match input {
        Input::Chat(messages) => (
            last_user(messages).unwrap_or_default(),
            messages
                .iter()
                .filter(|m| m.speaker == Speaker::System)
                .map(Message::rendered)
                .collect(),
        ),
        Input::Prompt { text, system, .. } => (text.clone(), system.iter().cloned().collect()),
    };
    SIGNATURES
        .iter()
        .find(|sig| {
            let holds = |text: &str| sig.phrases.iter().all(|p| text.contains(p));
            if sig.in_system {
                system.iter().any(|s| holds(s))
            } else {
                holds(&user)
            }
        })
        .map(|sig| sig.name)
}

fn last_user(messages: &[Message]) -> Option<String> {
    messages
        .iter()
        .rev()
        .find(|m| m.speaker == Speaker::User)
        .map(Message::rendered)
}

#[cfg(test)]
#[path = "background_tests.rs"]
mod tests;
