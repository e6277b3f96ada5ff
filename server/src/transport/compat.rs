//! What the OpenAI and Ollama APIs share: turning a list of chat messages
//! into model input, starting a generation only the request reads, and
//! timestamps.
//!
//! Conversations: the runtime's built-in chat template is applied to what
//! the server sends. A single user (or tool) message is sent as it is,
//! with a system message, if any, before it. A longer conversation is sent
//! as one transcript (`role: text` lines) ending with the new message,
//! unless the model's runtime still holds all but its last message: then
//! only that one is sent (see [`crate::engine::ConversationState`]).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::images::{ImageSource, parse_source};
use super::state::AppState;
use super::tools::ToolCallFilter;
use crate::backend::IMAGE_TAG;
use crate::engine::{EngineError, Role};
use crate::stream::PrivateStream;
use crate::vocab::EndInfo;

/// One chat message; `content` may be a string or a list of parts (text
/// and, for vision models, `image_url`); Ollama sends images beside the
/// content, in `images`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    #[serde(default)]
    pub content: Value,
    /// Ollama's images (base64), shown before the content.
    #[serde(default)]
    pub images: Vec<String>,
}

/// The URL of an OpenAI `image_url` part (`{"url": ...}` or a bare string).
fn image_url(part: &Value) -> Option<&str> {
    if part.get("type").and_then(Value::as_str) != Some("image_url") {
        return None;
    }
    let url = part.get("image_url")?;
    url.as_str()
        .or_else(|| url.get("url").and_then(Value::as_str))
}

impl ChatMessage {
    /// The message's text: text parts joined, an `<image>` tag where each
    /// image goes (Ollama's images, without tags of their own in the
    /// content, go first).
    pub fn text(&self) -> String {
        let content = match &self.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| {
                    image_url(p)
                        .map(|_| IMAGE_TAG)
                        .or_else(|| p.get("text").and_then(Value::as_str))
                })
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        };
        if self.images.is_empty() || content.contains(IMAGE_TAG) {
            content
        } else {
            IMAGE_TAG.repeat(self.images.len()) + &content
        }
    }

    /// The message's images, in the order of its tags.
    fn image_refs(&self) -> Vec<&str> {
        let mut refs: Vec<&str> = self.images.iter().map(String::as_str).collect();
        if let Value::Array(parts) = &self.content {
            refs.extend(parts.iter().filter_map(image_url));
        }
        refs
    }
}

/// Every image of a conversation, in the order its tags appear.
///
/// # Errors
/// A message naming the image that is neither a data URL, base64 nor an
/// http(s) URL.
pub fn image_sources(messages: &[ChatMessage]) -> Result<Vec<ImageSource>, String> {
    messages
        .iter()
        .flat_map(ChatMessage::image_refs)
        .enumerate()
        .map(|(i, r)| parse_source(r, i + 1))
        .collect()
}

/// The conversation as the engine keeps it, for history reuse.
pub fn turns(messages: &[ChatMessage]) -> Vec<crate::engine::Turn> {
    messages
        .iter()
        .map(|m| crate::engine::Turn {
            role: m.role.clone(),
            text: m.text(),
        })
        .collect()
}

/// The prompt and role to send for a conversation.
///
/// # Errors
/// When there is no message, or the last one is not from the user or a tool.
pub fn prompt_from_messages(messages: &[ChatMessage]) -> Result<(String, Role), String> {
    let last = messages.last().ok_or("`messages` must not be empty")?;
    let role = match last.role.as_str() {
        "user" => Role::User,
        "tool" => Role::Tool,
        other => {
            return Err(format!(
                "the last message must be from `user` or `tool`, got `{other}`"
            ));
        }
    };
    let earlier = &messages[..messages.len() - 1];
    let prompt = match earlier {
        [] => last.text(),
        [system] if system.role == "system" => format!("{}\n\n{}", system.text(), last.text()),
        _ => messages
            .iter()
            .map(|m| format!("{}: {}", m.role, m.text()))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    Ok((prompt, role))
}

/// Submits `request` as a generation only this request reads (see
/// [`PrivateStream`]).
///
/// # Errors
/// What the engine refuses.
pub fn start_private(
    state: &Arc<AppState>,
    request: crate::engine::RunRequest,
    keep_alive: Option<crate::engine::KeepAlive>,
) -> Result<PrivateStream, EngineError> {
    let stream = state.engine.submit_with(request, false, keep_alive)?;
    Ok(PrivateStream::new(&state.streams, stream))
}

/// Why a list of texts could not be embedded.
#[derive(Debug)]
pub enum EmbedFailure {
    /// Refused before it ran (bad input, unknown model, busy).
    Refused(EngineError),
    /// A run failed (the runtime, an expiry): the message.
    Failed(String),
}

/// The embeddings of a list of texts, in order.
#[derive(Debug)]
pub struct Embedded {
    /// The model that made them.
    pub model: String,
    /// One vector per text.
    pub vectors: Vec<Arc<[f32]>>,
    /// Input tokens, all texts together.
    pub prompt_tokens: u32,
    /// Time the runs took, queueing included.
    pub elapsed: std::time::Duration,
}

/// Embeds `inputs` with `model` (the default when `None`), one run after
/// another in the model's queue, so other clients' requests interleave.
///
/// # Errors
/// The first refusal or failure; the texts after it are not run.
pub async fn embed_all(
    state: &Arc<AppState>,
    model: Option<String>,
    inputs: Vec<String>,
    keep_alive: Option<crate::engine::KeepAlive>,
) -> Result<Embedded, EmbedFailure> {
    let started = std::time::Instant::now();
    let mut out = Embedded {
        model: String::new(),
        vectors: Vec::with_capacity(inputs.len()),
        prompt_tokens: 0,
        elapsed: std::time::Duration::ZERO,
    };
    for input in inputs {
        let request = crate::engine::RunRequest::embedding(input, model.clone());
        let mut private =
            start_private(state, request, keep_alive).map_err(EmbedFailure::Refused)?;
        out.model = private.stream().model().to_owned();
        let end = loop {
            let batch = private.consumer.next_batch().await;
            if batch.is_empty() {
                return Err(EmbedFailure::Failed("the embedding run expired".into()));
            }
            if let Some(end) = batch.into_iter().find_map(|c| c.end) {
                break end;
            }
        };
        let vector = end.embedding_result().map_err(EmbedFailure::Failed)?;
        out.prompt_tokens = out.prompt_tokens.saturating_add(end.usage.prompt_tokens);
        out.vectors.push(vector);
    }
    out.elapsed = started.elapsed();
    Ok(out)
}

/// What one batch of a stream shows a client of the OpenAI or Ollama API.
#[derive(Debug)]
pub struct Shown {
    /// The batch's text, through the tool-call filter when there is one.
    pub text: String,
    /// Benchmark mode: the production time of the batch's oldest text.
    pub produced_ns: Option<u64>,
    /// The end chunk's information, when the batch ends the stream.
    pub end: Option<Arc<EndInfo>>,
}

/// Waits for the stream's next batch and merges it into what it shows:
/// a client that keeps up gets each chunk on its own, one that falls
/// behind catches up with fewer, larger pieces. `None` once nothing more
/// will come.
pub async fn next_shown(
    private: &mut PrivateStream,
    filter: &mut Option<ToolCallFilter>,
) -> Option<Shown> {
    let batch = private.consumer.next_batch().await;
    if batch.is_empty() {
        return None;
    }
    let mut shown = Shown {
        text: String::new(),
        produced_ns: None,
        end: None,
    };
    for chunk in batch {
        match filter {
            Some(filter) => shown.text.push_str(&filter.push(&chunk.delta)),
            None => shown.text.push_str(&chunk.delta),
        }
        if !chunk.delta.is_empty() {
            shown.produced_ns = shown.produced_ns.or(chunk.produced_ns);
        }
        shown.end = chunk.end;
    }
    Some(shown)
}

/// Logs, at debug, the top-level fields of a request body that `known`
/// does not list. The OpenAI and Ollama APIs ignore fields they do not
/// know, as the originals do; the log helps find a misspelt one. The body
/// is read again only when debug logging is on.
pub fn log_ignored_fields(endpoint: &'static str, body: &[u8], known: &[&str]) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let Ok(map) = serde_json::from_slice::<serde_json::Map<String, Value>>(body) else {
        return;
    };
    let ignored: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    if !ignored.is_empty() {
        tracing::debug!(endpoint, ?ignored, "request fields ignored");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(role: &str, content: Value) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content,
            images: Vec::new(),
        }
    }

    #[test]
    fn image_parts_become_tags_in_order() {
        let m = msg(
            "user",
            json!([
                {"type": "text", "text": "compare "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAEC"}},
                {"type": "text", "text": " and "},
                {"type": "image_url", "image_url": "https://example.com/b.png"}
            ]),
        );
        assert_eq!(m.text(), "compare <image> and <image>");
        let sources = image_sources(std::slice::from_ref(&m)).unwrap();
        assert_eq!(
            sources,
            vec![
                ImageSource::Inline(vec![0, 1, 2]),
                ImageSource::Remote("https://example.com/b.png".into())
            ]
        );
        let ollama = ChatMessage {
            images: vec!["AAEC".into(), "AAED".into()],
            ..msg("user", json!("what is this?"))
        };
        assert_eq!(ollama.text(), "<image><image>what is this?");
        assert_eq!(image_sources(&[ollama]).unwrap().len(), 2);
    }

    #[test]
    fn messages_become_one_prompt() {
        let one = [msg("user", json!("hi"))];
        assert_eq!(
            prompt_from_messages(&one).unwrap(),
            ("hi".into(), Role::User)
        );
        let parts = [
            msg("system", json!("be brief")),
            msg(
                "user",
                json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
            ),
        ];
        assert_eq!(prompt_from_messages(&parts).unwrap().0, "be brief\n\nab");
        let turns = [
            msg("user", json!("q1")),
            msg("assistant", json!("a1")),
            msg("tool", json!("{}")),
        ];
        assert_eq!(
            prompt_from_messages(&turns).unwrap(),
            ("user: q1\nassistant: a1\ntool: {}".into(), Role::Tool)
        );
        assert!(prompt_from_messages(&[]).is_err());
        assert!(prompt_from_messages(&[msg("assistant", json!("x"))]).is_err());
    }
}
