//! The generation service: the one place every API calls to generate or
//! embed. An API translates its request into a [`Generate`] (a
//! conversation or a prompt, images, sampling, stop strings, tools and
//! tool choice, LoRA, keep-alive, thinking, the answer's format), the
//! service checks every option once — an option it cannot honour is
//! refused with a [`ServiceError`] naming it, never ignored —, fetches the
//! images, queues the request on its model and hands back a [`Running`]
//! generation that yields thinking, text, tool calls and its end, or is
//! collected to the end in one call.
//!
//! What is below stays below: the engine queues and validates ranges, the
//! token sink separates thinking and applies stop strings (so the runtime
//! stops at once), and this room parses tool calls. Each API only shapes
//! the events and errors for its wire.

pub mod address_filter;
pub mod background;
pub mod conversation;
mod embed;
mod error;
mod event;
pub mod images;
mod models;
mod parse;
mod probe;
mod refs;
mod request;
mod rerank;
mod running;
pub mod streams;
mod tokens;
mod tools;

use std::sync::Arc;

pub use embed::{Embedded, embedding_inputs};
pub use error::ServiceError;
pub use event::Event;
pub use images::{RemoteImages, parse_source};
pub use parse::parse_body;
pub use probe::ProbeReport;
pub use request::{Generate, OutputFormat, ToolChoice};
pub use rerank::{Ranked, Reranked};
pub use running::{Batch, Completed, Ending, Finish, Running, Step};
pub use tokens::{MAX_DETOKENIZE, Pieces, Tokenized};

/// What the APIs say of models and requests (the engine's own types).
pub use crate::engine::{ALL_OVERRIDES, KeepAlive, ModelInfo, ModelState, Priority, RequestLimits};
/// Images an API carries as text, and the tag a prompt marks each with.
pub use crate::model::image::{IMAGE_TAG, decode_base64_image};
/// What a model is given, as the APIs write it (the model's own types).
pub use crate::model::prompt::{prompt_of, turns};
pub use crate::model::{
    ImageSource, Input, Message, Part, Role, Sampling, Speaker, ThinkingBudget, ToolCall,
};
/// A token's log probability, and its text as OpenAI writes it.
pub use crate::vocab::{TokenLogprob, token_text};

use crate::engine::{Engine, Reservation, RunRequest};
use crate::model::constraint::Constraint;
use crate::model::prompt::{self, LateSystem, Options};
use crate::sandbox::Sandbox;
use crate::stream::PrivateStream;

/// What the service works with: built once at start.
#[derive(Debug)]
pub struct Service {
    engine: Arc<Engine>,
    /// Where the models' chat templates are rendered.
    sandbox: Arc<Sandbox>,
    remote_images: RemoteImages,
    max_embedding_inputs: usize,
    /// Whether a request that names no lane is put in the background lane
    /// when its prompt is a known client's background task.
    detect_background: bool,
    /// Whether each model template seen (by a hash of its text) renders a
    /// system message sent after the first turn in place: found once, by a
    /// render, the first time a conversation has one.
    late_system: parking_lot::Mutex<std::collections::HashMap<u64, LateSystem>>,
}

/// Templates whose answer [`Service`] remembers; past it the memory starts
/// over (a server has a handful of models).
const LATE_SYSTEM_TEMPLATES: usize = 64;

/// A request ready for the engine.
#[derive(Debug)]
pub struct Prepared {
    /// The engine's request.
    pub run: RunRequest,
    /// How long the model stays loaded after it.
    pub keep_alive: Option<KeepAlive>,
    /// Whether its answer is read for tool calls.
    pub reads_tool_calls: bool,
    /// The most tool calls read from its answer (`None`: any number).
    pub max_tool_calls: Option<usize>,
    /// The place held in its model's queue while its constraint was
    /// compiled (a constrained request only), taken when it is submitted.
    pub reservation: Option<Reservation>,
}

/// The longest text whose tokens are counted on the async worker itself
/// (see [`Service::count_in_place`]): at most about 100 µs of encoding.
const COUNT_IN_PLACE_BYTES: usize = 256;

impl Service {
    /// The service over `engine`, rendering templates in `sandbox`;
    /// `remote_images` says whether and how
    /// image URLs are fetched; `max_embedding_inputs` bounds one
    /// embedding request.
    pub fn new(
        engine: Arc<Engine>,
        sandbox: Arc<Sandbox>,
        remote_images: RemoteImages,
        max_embedding_inputs: usize,
    ) -> Self {
        Self {
            engine,
            sandbox,
            remote_images,
            max_embedding_inputs,
            detect_background: true,
            late_system: parking_lot::Mutex::default(),
        }
    }

    /// Builds the prompt of `input` for a model with `template` (in the
    /// sandbox when it is the model's own), placing a late system message
    /// where the template takes it.
    async fn build_prompt(
        &self,
        template: &crate::model::ChatTemplate,
        input: crate::model::Input,
        tools: Option<String>,
        thinking: Option<bool>,
    ) -> Result<(crate::model::Prompt, Vec<crate::model::ImageSource>), ServiceError> {
        let late_system = match template {
            crate::model::ChatTemplate::Jinja(jinja) if prompt::has_late_system(&input) => {
                self.late_system_of(jinja).await
            }
            _ => LateSystem::default(),
        };
        let options = Options {
            tools,
            thinking,
            late_system,
        };
        prompt::build(template, input, options, self.sandbox.as_ref())
            .await
            .map_err(|e| ServiceError::invalid(e.field, e.message))
    }

    /// Where `template` takes a late system message, found by a render the
    /// first time and remembered.
    async fn late_system_of(&self, template: &crate::model::JinjaTemplate) -> LateSystem {
        use std::hash::BuildHasher;
        let key =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .hash_one(&template.source);
        if let Some(known) = self.late_system.lock().get(&key) {
            return *known;
        }
        let late = if prompt::renders_late_system(template, self.sandbox.as_ref()).await {
            LateSystem::InPlace
        } else {
            LateSystem::Merged
        };
        tracing::debug!(
            ?late,
            "the model's template and a system message after the first turn"
        );
        let mut known = self.late_system.lock();
        if known.len() >= LATE_SYSTEM_TEMPLATES {
            known.clear();
        }
        known.insert(key, late);
        late
    }

    /// This service with the matching of known clients' background tasks
    /// on or off (`[engine] detect_background`); a request's header or
    /// field still names its lane either way.
    #[must_use]
    pub fn detecting_background(mut self, on: bool) -> Self {
        self.detect_background = on;
        self
    }

    /// The lane `request` waits in: `asked` (a field of the request),
    /// else the `X-Rkllm-Priority` header's, else background when its
    /// prompt is a known client's background task, else interactive.
    fn priority(
        &self,
        request: &Generate,
        asked: Option<Priority>,
    ) -> Result<Priority, ServiceError> {
        let asked = background::asked(asked)
            .map_err(|(field, message)| ServiceError::invalid(field, message))?;
        if let Some(priority) = asked {
            return Ok(priority);
        }
        if self.detect_background
            && let Some(task) = background::signature(&request.input)
        {
            tracing::debug!(
                task,
                "a known background task: queued in the background lane"
            );
            return Ok(Priority::Background);
        }
        Ok(Priority::Interactive)
    }

    /// Checks `request`'s options, fetches its images and builds the
    /// engine's request.
    ///
    /// # Errors
    /// An option that is malformed or cannot be honoured, naming it; an
    /// image that cannot be read or fetched.
    pub async fn prepare(&self, request: Generate) -> Result<Prepared, ServiceError> {
        self.prepare_in(request, None).await
    }

    /// [`Service::prepare`] for a request that names its lane itself
    /// (JSON-RPC's `priority`), which wins over the header and the
    /// prompt's signature; `None` as [`Service::prepare`].
    ///
    /// # Errors
    /// As [`Service::prepare`].
    pub async fn prepare_in(
        &self,
        request: Generate,
        asked: Option<Priority>,
    ) -> Result<Prepared, ServiceError> {
        let priority = self.priority(&request, asked)?;
        self.within_bounds(&request)?;
        // The model's facts in one call (again after a load that probed it).
        let profile = self.probed_first(&request).await?;
        let (constraint, reservation) = match self.constraint(&request).await? {
            Some((constraint, reservation)) => (Some(constraint), Some(reservation)),
            None => (None, None),
        };
        let offer_tools = !request.tools.is_empty() && request.tool_choice != ToolChoice::None;
        // An answer held to a JSON format has no calls to read.
        let reads_tool_calls = offer_tools
            && !matches!(
                constraint,
                Some(Constraint::JsonObject | Constraint::JsonSchema(_))
            );
        let offered = offer_tools.then(|| serde_json::Value::Array(request.tools).to_string());
        // Background work runs with thinking off: no one reads it, and it
        // holds the NPU the shortest.
        let thinking = match priority {
            Priority::Background => Some(false),
            Priority::Interactive => request.thinking,
        };
        let conversation = conversation::key(request.session.as_deref(), &request.input);
        let (prompt, sources) = match request.suffix {
            Some(suffix) => {
                let prompt = self.fill_in(&profile, request.input, &suffix).await?;
                (prompt, Vec::new())
            }
            None => {
                self.build_prompt(&profile.template, request.input, offered, thinking)
                    .await?
            }
        };
        // The rendered prompt within its bound too, before it is counted.
        too_large(
            prompt.text.len(),
            self.engine.request_limits().max_prompt_bytes,
        )?;
        let prompt = self.counted(request.model.as_deref(), prompt).await;
        let images = if sources.is_empty() {
            Vec::new()
        } else {
            images::load(sources, &self.remote_images)
                .await
                .map_err(|m| ServiceError::invalid("images", m))?
        };
        let run = RunRequest {
            prompt,
            model: request.model,
            max_tokens: request.max_tokens,
            sampling: request.sampling,
            images,
            embed: false,
            clear_cache: false,
            lora: request.lora,
            stop: request.stop,
            constraint,
            priority,
            context: request.context,
            probe: None,
            conversation,
        };
        Ok(Prepared {
            run,
            keep_alive: request.keep_alive,
            reads_tool_calls,
            max_tool_calls: request.max_tool_calls,
            reservation,
        })
    }

    /// Refuses a request whose text alone is over the prompt's bound, before
    /// any template is rendered or tokenizer run (the rendered prompt is
    /// checked again, by the engine).
    ///
    /// # Errors
    /// A [`crate::engine::ValidationError::TooLarge`] naming the sizes.
    fn within_bounds(&self, request: &Generate) -> Result<(), ServiceError> {
        let limit = self.engine.request_limits().max_prompt_bytes;
        let bytes =
            prompt::input_bytes(&request.input) + request.suffix.as_ref().map_or(0, String::len);
        too_large(bytes, limit)
    }

    /// Loads `request`'s model first when the request rests on a feature
    /// its runtime is probed for (a thinking budget, log probabilities, a
    /// format or forced tool call) and it has not been probed yet: the
    /// engine then checks the request against the verdicts before it is
    /// queued, and refuses it with a 400 where the feature is off.
    ///
    /// Returns the model's profile, as it is once that is done.
    ///
    /// # Errors
    /// An unknown model, or one that cannot be loaded.
    async fn probed_first(
        &self,
        request: &Generate,
    ) -> Result<Arc<crate::engine::ModelProfile>, ServiceError> {
        let model = request.model.as_deref();
        let profile = self.engine.profile(model)?;
        let needs = request.sampling.thinking_budget.is_some()
            || request.sampling.logprobs.is_some()
            || matches!(request.constraint(), Ok(Some(_)));
        if needs && profile.unprobed {
            self.engine.load(model, None).await?;
            return Ok(self.engine.profile(model)?);
        }
        Ok(profile)
    }

    /// The prompt of a fill-in-the-middle request: `input` (a prompt, the
    /// text before the gap) and `suffix` (the text after it) arranged as
    /// the model's FIM tokens say, sent without a chat template.
    ///
    /// # Errors
    /// A model without FIM tokens, or one whose runtime template would
    /// wrap the text (naming `suffix`); a conversation, images or a system
    /// text with a suffix.
    async fn fill_in(
        &self,
        profile: &crate::engine::ModelProfile,
        input: Input,
        suffix: &str,
    ) -> Result<crate::model::Prompt, ServiceError> {
        let Input::Prompt {
            text,
            system,
            images,
            ..
        } = input
        else {
            return Err(ServiceError::invalid(
                "suffix",
                "`suffix` goes with a prompt (the text before the gap), not a conversation",
            ));
        };
        if system.as_deref().is_some_and(|s| !s.is_empty()) || !images.is_empty() {
            return Err(ServiceError::invalid(
                "suffix",
                "`suffix` fills the gap between the prompt and it: a system text or images \
                 cannot go with it",
            ));
        }
        let fim = self.fim(Some(&profile.name)).await?;
        if profile.template == crate::model::ChatTemplate::Builtin {
            let name = &profile.name;
            return Err(ServiceError::invalid(
                "suffix",
                format!(
                    "`suffix`: model `{name}` has the runtime's built-in chat template, which \
                     would wrap the fill-in-the-middle text as a chat turn; give it its own \
                     (`chat_template` in its [[models]] entry; a pulled model has one)"
                ),
            ));
        }
        Ok(fim.prompt(&text, suffix))
    }

    /// `prompt` with its count by the model's tokenizer; as it was when the
    /// model has none.
    async fn counted(
        &self,
        model: Option<&str>,
        mut prompt: crate::model::Prompt,
    ) -> crate::model::Prompt {
        prompt.tokens = self.count(model, &prompt.text).await.ok().flatten();
        prompt
    }

    /// `text`'s tokens by `model`'s tokenizer: in place when that is cheap
    /// ([`Service::count_in_place`]), else off the async workers (encoding
    /// a long text, or loading the tokenizer, takes milliseconds). `None`
    /// when the model has no usable tokenizer.
    ///
    /// # Errors
    /// The blocking task that counted failed.
    async fn count(
        &self,
        model: Option<&str>,
        text: &str,
    ) -> Result<Option<u32>, tokio::task::JoinError> {
        if let Some(tokens) = self.count_in_place(model, text) {
            return Ok(Some(tokens));
        }
        let engine = Arc::clone(&self.engine);
        let model = model.map(str::to_owned);
        let text = text.to_owned();
        let tokens = tokio::task::spawn_blocking(move || {
            let encoder = engine.encoder(model.as_deref())?;
            encoder.count(&text).ok()
        })
        .await?;
        Ok(tokens.map(|n| u32::try_from(n).unwrap_or(u32::MAX)))
    }

    /// `text`'s tokens counted here, on the async worker, when that is
    /// cheap: a text of at most [`COUNT_IN_PLACE_BYTES`] and a tokenizer
    /// loaded already (tens of microseconds: less than handing the work to
    /// another thread and waking this task again costs under load).
    /// `None`: count it off the workers.
    fn count_in_place(&self, model: Option<&str>, text: &str) -> Option<u32> {
        if text.len() > COUNT_IN_PLACE_BYTES {
            return None;
        }
        let encoder = self.engine.cached_encoder(model)?;
        let tokens = encoder.count(text).ok()?;
        Some(u32::try_from(tokens).unwrap_or(u32::MAX))
    }

    /// The tokens `request`'s input would take: its prompt built as it
    /// would be sent (the model's own template rendered), counted by the
    /// model's tokenizer, as the engine counts it against the model's
    /// context; without a tokenizer, estimated at
    /// [`crate::engine::BYTES_PER_TOKEN`] bytes a token. The tools the
    /// runtime's own template writes (not in the prompt's text) are counted
    /// too. Nothing is fetched or run.
    ///
    /// # Errors
    /// A conversation that cannot be sent (empty, not ending with a user or
    /// tool message, one the template fails on).
    pub async fn count_tokens(&self, request: &Generate) -> Result<u32, ServiceError> {
        self.within_bounds(request)?;
        let offer_tools = !request.tools.is_empty() && request.tool_choice != ToolChoice::None;
        let offered =
            offer_tools.then(|| serde_json::Value::Array(request.tools.clone()).to_string());
        let profile = self.engine.profile(request.model.as_deref())?;
        let template = &profile.template;
        let (prompt, _) = self
            .build_prompt(
                template,
                request.input.clone(),
                offered.clone(),
                request.thinking,
            )
            .await?;
        // The runtime's own template writes the tools itself.
        let mut text = prompt.text;
        if let (crate::model::ChatTemplate::Builtin, Some(tools)) = (template, offered) {
            text.push_str(&tools);
        }
        if let Some(prefill) = prompt.prefill {
            text.push_str(&prefill);
        }
        let counted = self
            .count(request.model.as_deref(), &text)
            .await
            .map_err(|_| ServiceError::Failed {
                message: "counting the prompt's tokens failed".into(),
            })?;
        Ok(counted.unwrap_or_else(|| {
            u32::try_from(text.len().div_ceil(crate::engine::BYTES_PER_TOKEN)).unwrap_or(u32::MAX)
        }))
    }

    /// Drops the oldest messages of `request`'s conversation until its
    /// prompt fits the model's context with room for `max_tokens` (the
    /// Responses API's `truncation: "auto"`): system messages stay, and
    /// the conversation then starts at a user message. The latest message
    /// is never dropped; a conversation that does not fit even so is left
    /// for the context check to refuse. Returns how many were dropped.
    ///
    /// # Errors
    /// As [`Service::count_tokens`].
    pub async fn fit_context(&self, request: &mut Generate) -> Result<usize, ServiceError> {
        let Some(context) = self
            .engine
            .profile(request.model.as_deref())?
            .context_length
        else {
            return Ok(0);
        };
        let room = u32::try_from(request.max_tokens.unwrap_or(0)).unwrap_or(u32::MAX);
        let limit = context.saturating_sub(room).max(1);
        let Input::Chat(messages) = &request.input else {
            return Ok(0);
        };
        let messages = messages.clone();
        let fits = |kept: Vec<crate::model::Message>| {
            let mut trial = request.clone();
            trial.input = Input::Chat(kept);
            async move { Ok::<bool, ServiceError>(self.count_tokens(&trial).await? <= limit) }
        };
        if fits(messages.clone()).await? {
            return Ok(0);
        }
        // The messages that may go, oldest first: all but the system ones
        // and the last.
        let droppable: Vec<usize> = (0..messages.len().saturating_sub(1))
            .filter(|&i| messages[i].speaker != crate::model::Speaker::System)
            .collect();
        let kept = |dropped: usize| trimmed(&messages, &droppable, dropped);
        // The fewest dropped that fits (counts fall as messages go).
        let (mut low, mut high) = (1, droppable.len());
        if !fits(kept(high)).await? {
            return Ok(0);
        }
        while low < high {
            let mid = low + (high - low) / 2;
            if fits(kept(mid)).await? {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        let kept = kept(high);
        let dropped = messages.len() - kept.len();
        request.input = Input::Chat(kept);
        Ok(dropped)
    }

    /// The constraint a request's answer is held to (its format, or a
    /// forced tool call), checked against its model: the schema within
    /// `limits.max_schema_bytes`, a place held in the model's queue (so
    /// that nothing is compiled for a request a full queue refuses), the
    /// model with a tokenizer, and the schema compiled by the engine (done
    /// off the async workers: a first use loads the tokenizer).
    ///
    /// # Errors
    /// A forced call of a tool that is not offered, a format and a forced
    /// call together, a schema over the bound, a model without a
    /// tokenizer, a schema the engine cannot compile, each naming the
    /// field; a full queue.
    async fn constraint(
        &self,
        request: &Generate,
    ) -> Result<Option<(Constraint, Reservation)>, ServiceError> {
        let Some((constraint, field)) = request.constraint()? else {
            return Ok(None);
        };
        let limit = self.engine.request_limits().max_schema_bytes;
        let bytes = constraint.schema_bytes();
        if bytes > limit {
            return Err(ServiceError::invalid(
                field,
                format!(
                    "the schema of `{field}` is {bytes} bytes as JSON, more than \
                     limits.max_schema_bytes ({limit})"
                ),
            ));
        }
        let reservation = self.engine.reserve(request.model.as_deref())?;
        let engine = Arc::clone(&self.engine);
        let model = request.model.clone();
        let checked = constraint.clone();
        tokio::task::spawn_blocking(move || engine.check_constraint(model.as_deref(), &checked))
            .await
            .map_err(|_| ServiceError::Failed {
                message: "the format's check failed".into(),
            })?
            .map_err(|e| ServiceError::from(e).renamed("format", field))?;
        Ok(Some((constraint, reservation)))
    }

    /// Starts a generation only this request reads.
    ///
    /// # Errors
    /// What [`Service::prepare`] refuses, and what the engine refuses
    /// (unknown or failed model, full queue, a value out of range).
    pub async fn start(&self, request: Generate) -> Result<Running, ServiceError> {
        let prepared = self.prepare(request).await?;
        let stream = self.engine.submit_reserved(
            prepared.run,
            false,
            prepared.keep_alive,
            prepared.reservation,
        )?;
        Ok(Running::new(
            PrivateStream::new(self.engine.streams(), stream),
            prepared.reads_tool_calls,
        )
        .with_max_tool_calls(prepared.max_tool_calls))
    }

    /// The embeddings of `input` (a string or an array of strings) by
    /// `model`, one run after another in the model's queue.
    ///
    /// # Errors
    /// A malformed input, a refusal, or a failed run.
    pub async fn embed(
        &self,
        model: Option<String>,
        input: &serde_json::Value,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Embedded, ServiceError> {
        let inputs = embedding_inputs(input, self.max_embedding_inputs)
            .map_err(|m| ServiceError::invalid("input", m))?;
        embed::embed_all(&self.engine, model, inputs, keep_alive).await
    }
}

/// `messages` without the first `dropped` of `droppable` (indices, oldest
/// first), nor the assistant and tool messages that would then open the
/// conversation: it starts again at a user message (or the last one).
fn trimmed(
    messages: &[crate::model::Message],
    droppable: &[usize],
    dropped: usize,
) -> Vec<crate::model::Message> {
    use crate::model::Speaker;
    let mut gone: Vec<bool> = vec![false; messages.len()];
    for &i in &droppable[..dropped.min(droppable.len())] {
        gone[i] = true;
    }
    let last = messages.len().saturating_sub(1);
    // After the cut, skip to the first user message still there.
    if let Some(&cut) = dropped.checked_sub(1).and_then(|i| droppable.get(i)) {
        for i in cut + 1..last {
            match messages[i].speaker {
                Speaker::User => break,
                Speaker::System => {}
                _ => gone[i] = true,
            }
        }
    }
    messages
        .iter()
        .zip(gone)
        .filter(|(_, gone)| !gone)
        .map(|(m, _)| m.clone())
        .collect()
}

/// A [`crate::engine::ValidationError::TooLarge`] when `bytes` of prompt
/// are over `limit`.
///
/// # Errors
/// That error, naming the sizes.
fn too_large(bytes: usize, limit: usize) -> Result<(), ServiceError> {
    if bytes > limit {
        return Err(crate::engine::ValidationError::TooLarge {
            field: "prompt",
            message: format!(
                "`prompt` must be at most {limit} bytes (limits.max_prompt_bytes), got {bytes}"
            ),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::trimmed;
    use crate::model::{Message, Part, Speaker};

    fn said(speaker: Speaker, text: &str) -> Message {
        Message {
            speaker,
            parts: vec![Part::Text(text.into())],
            tool_calls: Vec::new(),
        }
    }

    fn texts(messages: &[Message]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match &m.parts[0] {
                Part::Text(t) => t.clone(),
                Part::Image(_) => String::new(),
            })
            .collect()
    }

    #[test]
    fn trimming_keeps_system_and_the_last_message_and_restarts_at_a_user_turn() {
        use Speaker::{Assistant, System, Tool, User};
        let chat = vec![
            said(System, "s"),
            said(User, "u1"),
            said(Assistant, "a1"),
            said(Tool, "t1"),
            said(User, "u2"),
            said(Assistant, "a2"),
            said(User, "u3"),
        ];
        let droppable = [1, 2, 3, 4, 5];
        assert_eq!(texts(&trimmed(&chat, &droppable, 0)), texts(&chat));
        // One gone: the assistant and tool turns it opened onto go too.
        assert_eq!(
            texts(&trimmed(&chat, &droppable, 1)),
            ["s", "u2", "a2", "u3"]
        );
        assert_eq!(
            texts(&trimmed(&chat, &droppable, 2)),
            ["s", "u2", "a2", "u3"]
        );
        assert_eq!(texts(&trimmed(&chat, &droppable, 4)), ["s", "u3"]);
        assert_eq!(texts(&trimmed(&chat, &droppable, 5)), ["s", "u3"]);
    }
}
