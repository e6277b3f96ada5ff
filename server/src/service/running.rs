//! [`Running`]: a generation as its request reads it, batch by batch:
//! thinking, text, tool-call events and the end, in order. Streaming APIs
//! frame each batch as it comes; the others [`Running::collect`] it, once,
//! the same way. A batch holds what the stream had buffered: a client that
//! keeps up gets each piece on its own, one that falls behind catches up
//! in fewer, larger batches.

use std::sync::Arc;

use futures_util::future::Either;

use super::error::ServiceError;
use super::event::{Event, push_text};
use super::tools::ToolCallParser;
use crate::model::ToolCall;
use crate::stream::{Chunk, Next, PrivateStream};
use crate::vocab::{EndError, EndInfo, FinishReason, Timings, Usage};

/// Why a generation ended, as the APIs tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its answer, or a stop string did.
    Stop,
    /// The token cap.
    Length,
    /// The answer is tool calls.
    ToolCalls,
    /// Aborted (shutdown, expiry).
    Abort,
    /// The runtime failed.
    Error,
}

/// The end of a generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    /// Why it ended.
    pub finish: Finish,
    /// Tokens used.
    pub usage: Usage,
    /// How long each phase took, when it ran.
    pub timings: Option<Timings>,
    /// What failed, when it failed.
    pub error: Option<EndError>,
    /// The stream expired before its end chunk was read.
    pub expired: bool,
    /// The request's stop string that ended the answer, when one did.
    pub stop_sequence: Option<String>,
}

/// What one read of the stream gave.
#[derive(Debug, Default)]
pub struct Batch {
    /// The events, in order (adjacent texts merged).
    pub events: Vec<Event>,
    /// Benchmark mode: when the batch's oldest text was produced.
    pub produced_ns: Option<u64>,
    /// Tokens generated up to the batch's end.
    pub tokens: u32,
    /// The end, on the last batch.
    pub end: Option<Ending>,
    /// The log probabilities of the answer's tokens in this batch, for a
    /// request that asked for them.
    pub logprobs: Vec<crate::vocab::TokenLogprob>,
}

/// One read of a generation whose reader watches the prefill.
#[derive(Debug)]
pub enum Step {
    /// The next batch.
    Batch(Batch),
    /// A long prompt prefilled in chunks advanced: `tokens` of its `of`
    /// are prefilled (nothing has been generated yet).
    Prefill {
        /// Prompt tokens prefilled.
        tokens: u32,
        /// Of all the prompt's tokens.
        of: u32,
    },
}

/// A generation whose stream only this request reads. Dropping it (the
/// client left) aborts the generation.
#[derive(Debug)]
pub struct Running {
    private: PrivateStream,
    tools: Option<ToolCallParser>,
    done: bool,
}

/// A whole generation, collected.
#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    /// The model that ran it.
    pub model: String,
    /// The answer.
    pub text: String,
    /// The thinking.
    pub thinking: String,
    /// The calls it made.
    pub calls: Vec<ToolCall>,
    /// How it ended.
    pub ending: Ending,
    /// The log probabilities of the answer's tokens, when asked for.
    pub logprobs: Vec<crate::vocab::TokenLogprob>,
}

impl Completed {
    /// The completion, or the failure it ended with.
    ///
    /// # Errors
    /// [`ServiceError::Failed`] when the runtime failed.
    pub fn ok(self) -> Result<Self, ServiceError> {
        match &self.ending.error {
            Some(error) => Err(ServiceError::Failed {
                message: error.message.clone(),
            }),
            None => Ok(self),
        }
    }
}

impl Running {
    /// Reads `private`, parsing tool calls out of the answer when `tools`.
    pub fn new(private: PrivateStream, tools: bool) -> Self {
        Self {
            private,
            tools: tools.then(ToolCallParser::default),
            done: false,
        }
    }

    /// Reads at most `limit` tool calls from the answer (`None`: any
    /// number); what the model writes after the last one is dropped.
    #[must_use]
    pub fn with_max_tool_calls(mut self, limit: Option<usize>) -> Self {
        if let Some(parser) = &mut self.tools {
            parser.limit(limit);
        }
        self
    }

    /// The model generating.
    pub fn model(&self) -> &str {
        self.private.stream().model()
    }

    /// Whether this generation's answer is read for tool calls.
    pub fn reads_tool_calls(&self) -> bool {
        self.tools.is_some()
    }

    /// Waits for the stream's next batch. `None` once the end was given.
    ///
    /// A stream that expires before its end gives an end with
    /// `Finish::Error`.
    pub async fn next(&mut self) -> Option<Batch> {
        if self.done {
            return None;
        }
        let chunks = self.private.consumer.next_batch().await;
        Some(self.read(chunks))
    }

    /// [`Running::next`], telling also how far a long prompt's prefill in
    /// chunks has come while nothing else happens (each position once).
    pub async fn next_step(&mut self) -> Option<Step> {
        if self.done {
            return None;
        }
        match self.private.consumer.next_watching_prefill().await {
            Next::Chunks(chunks) => Some(Step::Batch(self.read(chunks))),
            Next::Prefill { tokens, of } => Some(Step::Prefill { tokens, of }),
        }
    }

    /// The batch of `chunks` (none: the stream expired).
    fn read(&mut self, chunks: Vec<Chunk>) -> Batch {
        let mut batch = Batch::default();
        if chunks.is_empty() {
            self.done = true;
            batch.end = Some(Ending {
                finish: Finish::Error,
                usage: Usage::default(),
                timings: None,
                error: Some(EndError {
                    kind: crate::vocab::EndErrorKind::Internal,
                    message: "the generation expired".into(),
                }),
                expired: true,
                stop_sequence: None,
            });
            return batch;
        }
        for chunk in chunks {
            batch.tokens = batch.tokens.max(chunk.tokens);
            if let Some(entries) = &chunk.logprobs {
                batch.logprobs.extend(entries.iter().cloned());
            }
            if !chunk.delta.is_empty() {
                batch.produced_ns = batch.produced_ns.or(chunk.produced_ns);
                if chunk.thinking {
                    push_text(&mut batch.events, &chunk.delta, true);
                } else if let Some(parser) = &mut self.tools {
                    parser.push(&chunk.delta, &mut batch.events);
                } else {
                    push_text(&mut batch.events, &chunk.delta, false);
                }
            }
            if let Some(end) = chunk.end {
                self.done = true;
                if end.error.is_none()
                    && let Some(parser) = &mut self.tools
                {
                    parser.finish(&mut batch.events);
                }
                let calls = self.tools.as_ref().map_or(0, ToolCallParser::calls);
                batch.end = Some(ending(&end, calls));
            }
        }
        batch
    }

    /// Reads the generation to its end.
    ///
    /// # Errors
    /// [`ServiceError::Expired`] when its stream expired first.
    pub async fn collect(self) -> Result<Completed, ServiceError> {
        self.collect_with(|_| std::future::ready(Ok(()))).await
    }

    /// Reads the generation to its end, as [`Running::collect`] does,
    /// handing each batch to `each` first (and waiting for what it
    /// returns): a caller that tells of the generation as it goes (MCP's
    /// progress notifications) and one that builds its own answer from the
    /// events (the Responses API's output items) read it this one way.
    ///
    /// # Errors
    /// What `each` fails with (the generation is dropped, so aborted), or
    /// [`ServiceError::Expired`] when the stream expired first.
    pub async fn collect_with<E, F, Fut>(self, mut each: F) -> Result<Completed, E>
    where
        E: From<ServiceError>,
        F: FnMut(&Batch) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        self.gather(false, |step| match step {
            Step::Batch(batch) => Either::Left(each(batch)),
            Step::Prefill { .. } => Either::Right(std::future::ready(Ok(()))),
        })
        .await
    }

    /// [`Running::collect_with`], handing `each` also each step of a long
    /// prompt's prefill in chunks ([`Running::next_step`]).
    ///
    /// # Errors
    /// As [`Running::collect_with`].
    pub async fn collect_steps<E, F, Fut>(self, each: F) -> Result<Completed, E>
    where
        E: From<ServiceError>,
        F: FnMut(&Step) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        self.gather(true, each).await
    }

    async fn gather<E, F, Fut>(mut self, watch_prefill: bool, mut each: F) -> Result<Completed, E>
    where
        E: From<ServiceError>,
        F: FnMut(&Step) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        // Read here, not by a client that might be slow.
        self.private.stream().collected_in_process();
        let mut completed = Completed {
            model: self.model().to_owned(),
            text: String::new(),
            thinking: String::new(),
            calls: Vec::new(),
            ending: Ending {
                finish: Finish::Error,
                usage: Usage::default(),
                timings: None,
                error: None,
                expired: false,
                stop_sequence: None,
            },
            logprobs: Vec::new(),
        };
        loop {
            let step = if watch_prefill {
                self.next_step().await
            } else {
                self.next().await.map(Step::Batch)
            };
            let Some(step) = step else { break };
            each(&step).await?;
            let Step::Batch(mut batch) = step else {
                continue;
            };
            completed.logprobs.append(&mut batch.logprobs);
            for event in batch.events {
                match event {
                    Event::Thinking(text) => completed.thinking.push_str(&text),
                    Event::Text(text) => completed.text.push_str(&text),
                    Event::CallEnd(_, call) => completed.calls.push(call),
                    Event::CallStart { .. } | Event::CallArguments { .. } => {}
                }
            }
            if let Some(end) = batch.end {
                if end.expired {
                    return Err(ServiceError::Expired.into());
                }
                completed.ending = end;
            }
        }
        Ok(completed)
    }
}

/// The end chunk as the APIs tell it.
fn ending(end: &Arc<EndInfo>, calls: usize) -> Ending {
    let finish = match end.finish_reason {
        _ if end.error.is_some() => Finish::Error,
        FinishReason::Stop if calls > 0 => Finish::ToolCalls,
        FinishReason::Stop => Finish::Stop,
        FinishReason::Length => Finish::Length,
        FinishReason::Abort => Finish::Abort,
        FinishReason::Error => Finish::Error,
    };
    Ending {
        finish,
        usage: end.usage,
        timings: end.timings,
        error: end.error.clone(),
        expired: false,
        stop_sequence: end.stop_sequence.clone(),
    }
}
