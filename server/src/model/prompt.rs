//! The one place a conversation becomes this model's input: [`build`]
//! takes a request's conversation or prompt and the model's chat template
//! and gives the [`Prompt`] the runner is handed — its text, who speaks it,
//! the tools and thinking switch the runtime's template reads, the turns a
//! runner may reuse from the runtime's history, the system text, and the
//! template's stop strings. Nothing below the service renders.
//!
//! How each template is applied:
//! - the runtime's own (`builtin`): a single user (or tool) message goes as
//!   it is, with a system message, if any, before it; a longer conversation
//!   as one transcript (`role: text` lines) ending with the new message,
//!   with its turns, so that a runner whose runtime still holds all but the
//!   last message sends only that one;
//! - the model's own (Jinja): the whole conversation rendered, with the
//!   tools and the thinking switch, every time (the render runs where the
//!   caller's [`Render`] runs it: a template is untrusted code);
//! - ChatML, Llama 3 or a custom template: the whole conversation rendered
//!   here, the reply stopped at the template's stop strings.

use serde::{Deserialize, Serialize};

use super::image::IMAGE_TAG;
pub use super::message::Turn;
use super::message::{ImageSource, Message, Part, Speaker};
use super::sampling::Role;
use super::template::{ChatTemplate, JinjaTemplate, RenderJob, TemplateCall, TemplateMessage};

/// What a request gives the model: a conversation or a prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A conversation (chat APIs).
    Chat(Vec<Message>),
    /// A prompt (completion APIs, JSON-RPC), with its own images and an
    /// optional system text before it.
    Prompt {
        /// The text.
        text: String,
        /// System text put before it (Ollama's `system`).
        system: Option<String>,
        /// Who speaks it.
        role: Role,
        /// Images, placed where its `<image>` tags are (or before it).
        images: Vec<ImageSource>,
    },
}

impl Default for Input {
    fn default() -> Self {
        Self::Prompt {
            text: String::new(),
            system: None,
            role: Role::User,
            images: Vec::new(),
        }
    }
}

/// What the model is given, built once per request by [`build`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// The text the runtime is given: the whole conversation (rendered,
    /// or as a transcript), or the prompt.
    pub text: String,
    /// Who speaks it, for the runtime's own template.
    pub role: Role,
    /// The thinking switch (false when not asked for).
    pub thinking: bool,
    /// Function tools offered: a JSON array in OpenAI's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<String>,
    /// What a chat sent in the runtime's template or in the model's own
    /// brings besides its text (none for a plain prompt, or a chat in a
    /// server-side template the runtime knows nothing of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<Chat>,
    /// Strings that end the reply (the template's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// The start of the reply the model is to continue (an assistant
    /// message last), where the runtime's own template writes the prompt:
    /// only a runner that can put it after the template's reply header can
    /// honour it. With a template the server renders, the text itself ends
    /// inside that message and this is `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<String>,
    /// Tokens `text` is, by the model's tokenizer (set by the service once
    /// it is built; `None`: the model has no tokenizer to count with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u32>,
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Self::plain(text)
    }
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Self::plain(text)
    }
}

/// A chat's parts a runner works with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chat {
    /// The text of its system message, when it has one.
    pub system: Option<String>,
    /// Its turns, when the runner may reuse the runtime's history (the
    /// runtime's own template); `None`: rendered whole by the server.
    pub turns: Option<Vec<Turn>>,
    /// Which snapshots of it are kept, by a runner that keeps them.
    #[serde(default, skip_serializing_if = "Keeping::is_whole")]
    pub keeping: Keeping,
}

/// Which snapshots of a prompt sent whole a runner keeps (see
/// `crate::plan::snapshots`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Keeping {
    /// Its own, after its run: a chat's, its next turn's start.
    #[default]
    Whole,
    /// Only its first this many bytes, on their own: what every prompt of
    /// one request shares (a rerank's judgements, before the document).
    Prefix(usize),
    /// Its own, replacing the others of the same source: a code
    /// completion's, the next keystroke's start. Kept prompts that begin
    /// with its first `head` bytes (the infill's opening) and share a
    /// prefix with it beyond them are of the same file.
    Replacing {
        /// The bytes that open every prompt of its kind.
        head: usize,
    },
}

impl Keeping {
    /// Whether it is [`Keeping::Whole`], the default.
    pub fn is_whole(&self) -> bool {
        *self == Self::Whole
    }
}

impl Prompt {
    /// A plain prompt spoken by the user: no chat, no template.
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// The chat's turns, when the runner may reuse the runtime's history.
    pub fn turns(&self) -> Option<&[Turn]> {
        self.chat.as_ref()?.turns.as_deref()
    }

    /// For a chat the server rendered whole (the model's own template): its
    /// system message's text, empty without one.
    pub fn whole_chat(&self) -> Option<&str> {
        let chat = self.chat.as_ref().filter(|c| c.turns.is_none())?;
        Some(chat.system.as_deref().unwrap_or(""))
    }

    /// Which snapshots of it a runner keeps.
    pub fn keeping(&self) -> Keeping {
        self.chat.as_ref().map_or(Keeping::Whole, |c| c.keeping)
    }

    /// For a chat in the runtime's template: its system message's text.
    pub fn chat_system(&self) -> Option<&str> {
        let chat = self.chat.as_ref().filter(|c| c.turns.is_some())?;
        chat.system.as_deref()
    }
}

/// The bytes of a request's text as given: every message's text and tool
/// calls, or the prompt and its system text. A template adds to it, never
/// takes away, so a text over a bound is refused on this count before any
/// template is rendered or any tokenizer run.
pub fn input_bytes(input: &Input) -> usize {
    match input {
        Input::Chat(messages) => messages
            .iter()
            .map(|m| {
                let parts: usize = m
                    .parts
                    .iter()
                    .map(|p| match p {
                        Part::Text(text) => text.len(),
                        Part::Image(_) => IMAGE_TAG.len(),
                    })
                    .sum();
                let calls: usize = m
                    .tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum();
                parts + calls
            })
            .sum(),
        Input::Prompt { text, system, .. } => text.len() + system.as_ref().map_or(0, String::len),
    }
}

/// Where a model's own (Jinja) template is rendered: a template is
/// untrusted code, so the caller decides (the server: in its sandbox).
pub trait Render {
    /// Renders `job`.
    ///
    /// # Errors
    /// What the template raised or failed on, or the bound it broke.
    fn render(
        &self,
        job: RenderJob,
    ) -> impl std::future::Future<Output = Result<String, String>> + Send;
}

/// What a request adds to its conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Function tools offered (a JSON array), when the request offers some
    /// and does not turn them off.
    pub tools: Option<String>,
    /// The thinking switch, when set.
    pub thinking: Option<bool>,
    /// Where the model's own (Jinja) template takes a system message sent
    /// after the conversation began ([`renders_late_system`] finds out).
    pub late_system: LateSystem,
}

/// Where a system or developer message sent after the conversation began
/// goes. Instructions before the first turn are one system prompt either
/// way, so that it stays the same from request to request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LateSystem {
    /// Where the client put it: the template renders a system message
    /// anywhere (ChatML, Llama 3, Qwen2.5's and Qwen3's own).
    InPlace,
    /// Into the user or tool message beside it (see [`arrange_system`]):
    /// for a template that takes one system prompt only (the runtime's
    /// own, a Jinja template that refuses or moves a late one).
    #[default]
    Merged,
}

/// Why a request's input cannot become a prompt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PromptError {
    /// The request field (`messages`).
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn invalid(message: impl Into<String>) -> PromptError {
    PromptError {
        field: "messages",
        message: message.into(),
    }
}

/// The prompt `input` becomes for a model with `template`, and the images
/// it carries, in the order of its `<image>` tags.
///
/// # Errors
/// An empty conversation, one that does not end with a user or tool
/// message, or a template that fails on it (naming `messages`).
pub async fn build(
    template: &ChatTemplate,
    input: Input,
    options: Options,
    render: &impl Render,
) -> Result<(Prompt, Vec<ImageSource>), PromptError> {
    let thinking = options.thinking.unwrap_or(false);
    match input {
        Input::Chat(messages) => {
            let messages = arrange_system(messages, late_system(template, &options));
            let prefill = prefill_of(&messages);
            if prefill.is_some() {
                return build_continuing(template, messages, options, render).await;
            }
            let (transcript, role) = prompt_of(&messages).map_err(invalid)?;
            let sources: Vec<ImageSource> =
                messages.iter().flat_map(Message::images).cloned().collect();
            let system = messages
                .first()
                .filter(|m| m.speaker == Speaker::System)
                .map(Message::rendered);
            let prompt = match template {
                ChatTemplate::Jinja(jinja) => {
                    let job = render_job(jinja, &messages, options.tools.clone(), options.thinking);
                    Prompt {
                        text: render.render(job).await.map_err(invalid)?,
                        role: Role::User,
                        thinking,
                        tools: options.tools,
                        chat: Some(Chat {
                            system,
                            turns: None,
                            keeping: Keeping::Whole,
                        }),
                        stop: template.stop_strings(),
                        prefill: None,
                        tokens: None,
                    }
                }
                ChatTemplate::Builtin => Prompt {
                    text: transcript,
                    role,
                    thinking,
                    tools: options.tools,
                    chat: Some(Chat {
                        system,
                        turns: Some(turns(&messages)),
                        keeping: Keeping::Whole,
                    }),
                    stop: Vec::new(),
                    prefill: None,
                    tokens: None,
                },
                // A named template (ChatML, Llama 3, a custom one) renders
                // the chat whole as the model's own does: a chat sent whole,
                // which conversation snapshots keep.
                server_side => Prompt {
                    text: server_side.render(&turns(&messages)),
                    role: Role::User,
                    thinking,
                    tools: options.tools,
                    chat: Some(Chat {
                        system,
                        turns: None,
                        keeping: Keeping::Whole,
                    }),
                    stop: server_side.stop_strings(),
                    prefill: None,
                    tokens: None,
                },
            };
            Ok((prompt, sources))
        }
        Input::Prompt {
            text,
            system,
            role,
            images,
        } => Ok(plain_prompt(template, text, system, role, images, options)),
    }
}

/// The prompt of a plain text (not a conversation): its images' tags
/// first when it has none of its own, its system text before it.
fn plain_prompt(
    template: &ChatTemplate,
    text: String,
    system: Option<String>,
    role: Role,
    images: Vec<ImageSource>,
    options: Options,
) -> (Prompt, Vec<ImageSource>) {
    let text = if images.is_empty() || text.contains(IMAGE_TAG) {
        text
    } else {
        IMAGE_TAG.repeat(images.len()) + &text
    };
    let text = match system.filter(|s| !s.is_empty()) {
        Some(system) => format!("{system}\n\n{text}"),
        None => text,
    };
    let prompt = Prompt {
        text,
        role,
        thinking: options.thinking.unwrap_or(false),
        tools: options.tools,
        chat: None,
        stop: template.stop_strings(),
        prefill: None,
        tokens: None,
    };
    (prompt, images)
}

/// Where `template` takes a system message sent after the first turn:
/// the server's named templates write any role anywhere; the runtime's own
/// takes one system prompt; a Jinja template as its render showed
/// (`options`).
fn late_system(template: &ChatTemplate, options: &Options) -> LateSystem {
    match template {
        ChatTemplate::Builtin => LateSystem::Merged,
        ChatTemplate::Jinja(_) => options.late_system,
        ChatTemplate::ChatMl | ChatTemplate::Llama3 | ChatTemplate::Custom(_) => {
            LateSystem::InPlace
        }
    }
}

/// The text of the last message when it is the assistant's and can be
/// continued (it carries no tool calls).
fn prefill_of(messages: &[Message]) -> Option<String> {
    let last = messages.last()?;
    (last.speaker == Speaker::Assistant && last.tool_calls.is_empty()).then(|| last.rendered())
}

/// The prompt of a conversation whose last message is the assistant's: the
/// model's input ends inside that message, and its reply is the
/// continuation. The messages before it end as any conversation must.
async fn build_continuing(
    template: &ChatTemplate,
    messages: Vec<Message>,
    options: Options,
    render: &impl Render,
) -> Result<(Prompt, Vec<ImageSource>), PromptError> {
    let (last, earlier) = messages
        .split_last()
        .ok_or_else(|| invalid("`messages` must not be empty"))?;
    if earlier.iter().all(|m| m.speaker == Speaker::System) {
        return Err(invalid(
            "an assistant message to continue must follow a user message",
        ));
    }
    let (transcript, role) = prompt_of(earlier).map_err(invalid)?;
    let sources: Vec<ImageSource> = messages.iter().flat_map(Message::images).cloned().collect();
    let thinking = options.thinking.unwrap_or(false);
    let text = match template {
        ChatTemplate::Jinja(jinja) => {
            let mut job = render_job(jinja, &messages, options.tools.clone(), options.thinking);
            job.continue_final = true;
            render.render(job).await.map_err(invalid)?
        }
        ChatTemplate::Builtin => transcript,
        server_side => server_side.render_continuing(&turns(&messages)),
    };
    let builtin = *template == ChatTemplate::Builtin;
    let prompt = Prompt {
        text,
        role: if builtin { role } else { Role::User },
        thinking,
        tools: options.tools,
        chat: None,
        stop: template.stop_strings(),
        prefill: builtin.then(|| last.rendered()),
        tokens: None,
    };
    Ok((prompt, sources))
}

/// The render of a conversation (its system messages first) in the
/// model's own template, with the tools offered and the thinking switch:
/// what the sandbox runs.
pub fn render_job(
    template: &JinjaTemplate,
    messages: &[Message],
    tools: Option<String>,
    enable_thinking: Option<bool>,
) -> RenderJob {
    let messages: Vec<TemplateMessage> = messages
        .iter()
        .map(|m| TemplateMessage {
            role: m.speaker.as_str().to_owned(),
            content: m
                .parts
                .iter()
                .map(|part| match part {
                    Part::Text(text) => text.as_str(),
                    Part::Image(_) => IMAGE_TAG,
                })
                .collect(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|call| TemplateCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                })
                .collect(),
        })
        .collect();
    RenderJob {
        template: template.clone(),
        messages,
        tools,
        enable_thinking,
        now_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        continue_final: false,
    }
}

/// The conversation as the engine keeps it, for history reuse.
pub fn turns(messages: &[Message]) -> Vec<Turn> {
    messages
        .iter()
        .map(|m| Turn {
            role: m.speaker.as_str().to_owned(),
            text: m.rendered(),
        })
        .collect()
}

/// Whether a conversation has a system or developer message after its
/// first turn.
pub fn has_late_system(input: &Input) -> bool {
    match input {
        Input::Chat(messages) => messages
            .iter()
            .skip_while(|m| m.speaker == Speaker::System)
            .any(|m| m.speaker == Speaker::System),
        Input::Prompt { .. } => false,
    }
}

/// A conversation with the system messages before its first turn made one
/// system prompt, and those sent later placed as `late` says: kept where
/// they are, or merged into a message beside them. A merged one goes to
/// the end of the user or tool message just before it (an agent's reminder
/// after a tool result), else to the start of the next user or tool message
/// (an instruction sent with a new question), else to the end of the last
/// user or tool message: each place is one the conversation's next request
/// writes the same way, so only the message it joins changes, and the
/// system prompt never does.
pub fn arrange_system(messages: Vec<Message>, late: LateSystem) -> Vec<Message> {
    let lead = messages
        .iter()
        .take_while(|m| m.speaker == Speaker::System)
        .count();
    let mut messages = messages.into_iter();
    let mut out: Vec<Message> = Vec::new();
    let leading: Vec<Message> = messages.by_ref().take(lead).collect();
    match <[Message; 1]>::try_from(leading) {
        Ok([one]) => out.push(one),
        Err(leading) if !leading.is_empty() => {
            let text: Vec<String> = leading.iter().map(Message::rendered).collect();
            out.push(Message::text(Speaker::System, text.join("\n\n")));
        }
        Err(_) => {}
    }
    let speaks = |m: &Message| matches!(m.speaker, Speaker::User | Speaker::Tool);
    let mut waiting: Vec<String> = Vec::new();
    for message in messages {
        if late == LateSystem::InPlace {
            out.push(message);
            continue;
        }
        if message.speaker == Speaker::System {
            let text = message.rendered();
            match out.last_mut() {
                Some(before) if waiting.is_empty() && speaks(before) => {
                    before.parts.push(Part::Text(format!("\n\n{text}")));
                }
                _ => waiting.push(text),
            }
            continue;
        }
        let mut message = message;
        if !waiting.is_empty() && speaks(&message) {
            let text = std::mem::take(&mut waiting).join("\n\n");
            message.parts.insert(0, Part::Text(format!("{text}\n\n")));
        }
        out.push(message);
    }
    if !waiting.is_empty() {
        let text = waiting.join("\n\n");
        match out.iter_mut().rev().find(|m| speaks(m)) {
            Some(last) => last.parts.push(Part::Text(format!("\n\n{text}"))),
            None => out.push(Message::text(Speaker::System, text)),
        }
    }
    out
}

/// Whether `template` renders a system message sent after the first turn
/// where it was sent: a short conversation with one (markers for texts) is
/// rendered once, and the late message must be written once, after the
/// reply before it and before the question after it. A template that
/// raises on it (one system prompt only), drops it or moves it does not.
pub async fn renders_late_system(template: &JinjaTemplate, render: &impl Render) -> bool {
    const MARKS: [(Speaker, &str); 5] = [
        (Speaker::System, "rkllm-probe-first-system"),
        (Speaker::User, "rkllm-probe-first-question"),
        (Speaker::Assistant, "rkllm-probe-first-answer"),
        (Speaker::System, "rkllm-probe-late-system"),
        (Speaker::User, "rkllm-probe-second-question"),
    ];
    let messages: Vec<Message> = MARKS
        .iter()
        .map(|&(speaker, text)| Message::text(speaker, text))
        .collect();
    let Ok(text) = render
        .render(render_job(template, &messages, None, None))
        .await
    else {
        return false;
    };
    let at: Vec<Option<usize>> = MARKS.iter().map(|(_, mark)| text.find(mark)).collect();
    let late = MARKS[3].1;
    at.windows(2)
        .skip(1)
        .all(|w| matches!(w, [Some(a), Some(b)] if a < b))
        && text.matches(late).count() == 1
}

/// The prompt and role to send for a conversation (its system messages
/// arranged, see [`arrange_system`]). System messages after the last one
/// (kept in place) do not change whose turn it is.
///
/// # Errors
/// When there is no message, or the last one besides those is not from the
/// user or a tool.
pub fn prompt_of(messages: &[Message]) -> Result<(String, Role), String> {
    let last = messages
        .iter()
        .rev()
        .find(|m| m.speaker != Speaker::System)
        .or(messages.last())
        .ok_or("`messages` must not be empty")?;
    let role = match last.speaker {
        Speaker::User => Role::User,
        Speaker::Tool => Role::Tool,
        other => {
            return Err(format!(
                "the last message must be from `user` or `tool`, got `{}`",
                other.as_str()
            ));
        }
    };
    let earlier = &messages[..messages.len() - 1];
    let prompt = match earlier {
        [] => last.rendered(),
        [system] if system.speaker == Speaker::System => {
            format!("{}\n\n{}", system.rendered(), last.rendered())
        }
        _ => transcript(&turns(messages)),
    };
    Ok((prompt, role))
}

/// A conversation as one transcript for the runtime's own template: a
/// `role: text` line a turn. The transcript of a conversation and the
/// reply it was given begins the prompt of its next turn.
pub fn transcript(turns: &[Turn]) -> String {
    turns
        .iter()
        .map(|t| format!("{}: {}", t.role, t.text))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::ToolCall;

    #[test]
    fn messages_become_one_prompt() {
        let one = [Message::text(Speaker::User, "hi")];
        assert_eq!(prompt_of(&one).unwrap(), ("hi".into(), Role::User));
        let parts = [
            Message::text(Speaker::System, "be brief"),
            Message {
                parts: vec![Part::Text("a".into()), Part::Text("b".into())],
                ..Message::text(Speaker::User, "")
            },
        ];
        assert_eq!(prompt_of(&parts).unwrap().0, "be brief\n\nab");
        let turns = [
            Message::text(Speaker::User, "q1"),
            Message::text(Speaker::Assistant, "a1"),
            Message::text(Speaker::Tool, "{}"),
        ];
        assert_eq!(
            prompt_of(&turns).unwrap(),
            ("user: q1\nassistant: a1\ntool: {}".into(), Role::Tool)
        );
        assert!(prompt_of(&[]).is_err());
        assert!(prompt_of(&[Message::text(Speaker::Assistant, "x")]).is_err());
    }

    #[test]
    fn a_transcript_with_its_reply_begins_the_next_turns_prompt() {
        let first = vec![
            Message::text(Speaker::System, "Be brief."),
            Message::text(Speaker::User, "Hi"),
        ];
        let mut held = turns(&first);
        held.push(Turn {
            role: "assistant".into(),
            text: "Hello!".into(),
        });
        let mut next = first;
        next.push(Message::text(Speaker::Assistant, "Hello!"));
        next.push(Message::text(Speaker::User, "More?"));
        let (prompt, _) = prompt_of(&next).unwrap();
        assert_eq!(
            transcript(&held),
            "system: Be brief.\nuser: Hi\nassistant: Hello!"
        );
        assert_eq!(prompt, format!("{}\nuser: More?", transcript(&held)));
    }

    fn said(messages: &[Message]) -> Vec<(Speaker, String)> {
        messages.iter().map(|m| (m.speaker, m.rendered())).collect()
    }

    #[test]
    fn leading_system_messages_are_one_prompt_and_late_ones_stay_in_place() {
        let messages = vec![
            Message::text(Speaker::System, "a"),
            Message::text(Speaker::System, "b"),
            Message::text(Speaker::User, "q"),
            Message::text(Speaker::System, "late"),
        ];
        let placed = arrange_system(messages.clone(), LateSystem::InPlace);
        assert_eq!(
            said(&placed),
            [
                (Speaker::System, "a\n\nb".into()),
                (Speaker::User, "q".into()),
                (Speaker::System, "late".into())
            ]
        );
        // A system message after the last question is not the turn's end.
        assert_eq!(prompt_of(&placed).unwrap().1, Role::User);
        assert!(has_late_system(&Input::Chat(messages)));
        assert!(!has_late_system(&Input::Chat(vec![
            Message::text(Speaker::System, "a"),
            Message::text(Speaker::User, "q"),
        ])));
    }

    #[test]
    fn merged_late_system_messages_join_the_message_beside_them_and_the_prompt_stays() {
        let first = vec![
            Message::text(Speaker::System, "rules"),
            Message::text(Speaker::User, "q1"),
            Message::text(Speaker::System, "env"),
        ];
        let merged = arrange_system(first.clone(), LateSystem::Merged);
        assert_eq!(
            said(&merged),
            [
                (Speaker::System, "rules".into()),
                (Speaker::User, "q1\n\nenv".into())
            ]
        );
        // The next request writes the same messages the same way, and the
        // reminder after a tool result joins that result.
        let mut next = first;
        next.extend([
            Message::text(Speaker::Assistant, "a1"),
            Message::text(Speaker::Tool, "result"),
            Message::text(Speaker::System, "12000 tokens left"),
        ]);
        let next = arrange_system(next, LateSystem::Merged);
        assert_eq!(&said(&next)[..2], &said(&merged)[..]);
        assert_eq!(
            said(&next)[3],
            (Speaker::Tool, "result\n\n12000 tokens left".into())
        );
        // After a reply, an instruction sent with a new question opens it.
        let asked = arrange_system(
            vec![
                Message::text(Speaker::User, "q1"),
                Message::text(Speaker::Assistant, "a1"),
                Message::text(Speaker::System, "be brief"),
                Message::text(Speaker::User, "q2"),
            ],
            LateSystem::Merged,
        );
        assert_eq!(
            said(&asked),
            [
                (Speaker::User, "q1".into()),
                (Speaker::Assistant, "a1".into()),
                (Speaker::User, "be brief\n\nq2".into())
            ]
        );
    }

    #[tokio::test]
    async fn a_template_that_renders_a_late_system_message_in_place_is_told_apart() {
        let jinja = |source: &str| JinjaTemplate {
            source: source.into(),
            bos_token: String::new(),
            eos_token: String::new(),
        };
        let anywhere =
            jinja("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>");
        assert!(renders_late_system(&anywhere, &InThread).await);
        let first_only = jinja(
            "{% for m in messages %}{% if m.role == 'system' and not loop.first %}\
             {{ raise_exception('System role only first') }}{% endif %}\
             <{{ m.role }}>{{ m.content }}{% endfor %}",
        );
        assert!(!renders_late_system(&first_only, &InThread).await);
        let gathered = jinja(
            "{% for m in messages if m.role == 'system' %}{{ m.content }}{% endfor %}\
             {% for m in messages if m.role != 'system' %}<{{ m.role }}>{{ m.content }}{% endfor %}",
        );
        assert!(!renders_late_system(&gathered, &InThread).await);
    }

    #[tokio::test]
    async fn the_published_qwen_and_llama_templates_render_a_late_system_message_in_place() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/chat-templates");
        for file in ["qwen2.5.jinja", "qwen3.jinja", "llama3.2.jinja"] {
            let template = JinjaTemplate {
                source: std::fs::read_to_string(dir.join(file)).unwrap(),
                bos_token: String::new(),
                eos_token: String::new(),
            };
            assert!(renders_late_system(&template, &InThread).await, "{file}");
        }
    }

    #[test]
    fn images_become_tags_and_calls_are_written_as_the_model_writes_them() {
        let m = Message {
            parts: vec![
                Part::Text("compare ".into()),
                Part::Image(ImageSource::Inline(vec![1])),
                Part::Text(" and ".into()),
                Part::Image(ImageSource::Remote("https://x/b.png".into())),
            ],
            ..Message::text(Speaker::User, "")
        };
        assert_eq!(m.rendered(), "compare <image> and <image>");
        assert_eq!(m.images().count(), 2);
        let call = Message {
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into(),
            }],
            ..Message::text(Speaker::Assistant, "")
        };
        assert_eq!(
            call.rendered(),
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1}}\n</tool_call>"
        );
    }

    /// Renders in this thread: the tests' stand-in for the sandbox.
    struct InThread;

    impl Render for InThread {
        async fn render(&self, job: RenderJob) -> Result<String, String> {
            job.run()
        }
    }

    fn continued(template: &ChatTemplate) -> Result<Prompt, PromptError> {
        let messages = vec![
            Message::text(Speaker::User, "hi"),
            Message::text(Speaker::Assistant, "Sure, here is"),
        ];
        build_now(template, Input::Chat(messages))
    }

    #[test]
    fn an_assistant_message_last_is_continued_inside_it() {
        let jinja = ChatTemplate::Jinja(JinjaTemplate {
            source: "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}\
                     {% if add_generation_prompt %}<|assistant|>{% endif %}"
                .into(),
            bos_token: String::new(),
            eos_token: "<|end|>".into(),
        });
        let prompt = continued(&jinja).unwrap();
        assert_eq!(prompt.text, "<|user|>hi<|end|><|assistant|>Sure, here is");
        assert_eq!(prompt.prefill, None);
        let prompt = continued(&ChatTemplate::ChatMl).unwrap();
        assert!(
            prompt
                .text
                .ends_with("<|im_end|>\n<|im_start|>assistant\nSure, here is"),
            "{}",
            prompt.text
        );
        // The runtime's own template opens the reply itself: the start of
        // the reply goes apart, for a runner that can put it there.
        let prompt = continued(&ChatTemplate::Builtin).unwrap();
        assert_eq!(
            (prompt.text.as_str(), prompt.prefill.as_deref(), prompt.role),
            ("hi", Some("Sure, here is"), Role::User)
        );
    }

    #[test]
    fn an_assistant_message_alone_or_with_calls_is_not_continued() {
        let alone = vec![Message::text(Speaker::Assistant, "x")];
        let err = build_now(&ChatTemplate::Builtin, Input::Chat(alone)).unwrap_err();
        assert!(err.message.contains("must follow a user message"), "{err}");
        let called = vec![
            Message::text(Speaker::User, "hi"),
            Message {
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                }],
                ..Message::text(Speaker::Assistant, "")
            },
        ];
        let err = build_now(&ChatTemplate::Builtin, Input::Chat(called)).unwrap_err();
        assert!(
            err.message.contains("must be from `user` or `tool`"),
            "{err}"
        );
    }

    /// Builds a prompt, rendering in this thread (ready at once).
    fn build_now(template: &ChatTemplate, input: Input) -> Result<Prompt, PromptError> {
        let built = build(template, input, Options::default(), &InThread);
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut built = std::pin::pin!(built);
        match built.as_mut().poll(&mut context) {
            std::task::Poll::Ready(result) => result.map(|(prompt, _)| prompt),
            std::task::Poll::Pending => panic!("building is ready at once"),
        }
    }
}
