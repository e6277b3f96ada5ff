//! One stream: its chunk buffer, the consumers' cursors and its state.
//!
//! Invariants kept under the stream's lock:
//! - seq numbers are contiguous from 0; exactly one chunk has `end`, and it
//!   is the last one ever appended (pushes after the end are refused);
//! - a chunk is freed only once every cursor (the poll cursor and each
//!   attached consumer) has passed it;
//! - the bytes a stream buffers are counted in the manager-wide total, and
//!   given back when chunks are freed or the stream is dropped.
//!
//! Storage is compact, since a slow consumer may leave many thousands of
//! chunks buffered: the texts of all buffered chunks live end to end in one
//! `String`, and each chunk adds an 8-byte entry (its length and token
//! count), plus its 8-byte production time in benchmark mode. Consumers
//! get [`Chunk`]s built from these on the way out.
//!
//! The lock is a `parking_lot` mutex held for one push or one copy of a
//! batch, never across an `.await`; consumers sleep on a `Notify`.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Chunk, StreamLimits, StreamState};
use crate::vocab::{CancelToken, EndErrorKind, EndInfo, FinishReason, TokenLogprob, Usage};

/// Bookkeeping bytes counted per chunk on top of its text, so that many
/// tiny chunks cannot dodge the memory limits.
pub const CHUNK_OVERHEAD: usize = 64;

/// Chunks a push stream keeps behind its reader when a resume grace is
/// configured, for a reconnecting client to replay.
const REPLAY_CHUNKS: u64 = 1024;

/// At most this many chunks are handed to a consumer at once.
const MAX_BATCH: usize = 256;

/// State shared by the manager and all of its streams.
#[derive(Debug)]
pub(crate) struct Shared {
    pub limits: StreamLimits,
    /// Bytes buffered by every stream together.
    pub total_bytes: AtomicUsize,
    /// Streams that have not ended yet (queued or generating).
    pub active: AtomicUsize,
    /// Benchmark mode: stamp chunks with their production time.
    pub timestamps: bool,
}

/// A stream of chunks produced by one generation.
#[derive(Debug)]
pub struct Stream {
    id: String,
    model: String,
    shared: Arc<Shared>,
    cancel: CancelToken,
    notify: Notify,
    inner: Mutex<Inner>,
}

/// A buffered chunk: its text is the next `len()` bytes of
/// [`Inner::text`]; the top bit of `len_kind` says it is thinking.
#[derive(Debug, Clone, Copy)]
struct Entry {
    len_kind: u32,
    tokens: u32,
}

const THINKING_BIT: u32 = 1 << 31;

impl Entry {
    fn len(self) -> usize {
        (self.len_kind & !THINKING_BIT) as usize
    }

    fn thinking(self) -> bool {
        self.len_kind & THINKING_BIT != 0
    }
}

/// Entries kept when a buffer empties; a larger queue is given back.
const KEEP_ENTRIES: usize = 1024;
/// Text capacity kept when a buffer empties; more is given back.
const KEEP_TEXT: usize = 16 * 1024;

#[derive(Debug)]
struct Inner {
    state: StreamState,
    /// Buffered chunks, oldest first; the first has seq `first_seq`.
    chunks: VecDeque<Entry>,
    first_seq: u64,
    /// Their texts end to end, from byte `text_start` on (bytes before it
    /// belong to freed chunks and are dropped in bulk).
    text: String,
    text_start: usize,
    /// Benchmark mode only: each buffered chunk's production time.
    stamps: VecDeque<u64>,
    /// The log probabilities of the buffered chunks that carry some (a
    /// request that asked for them): seq, entries, bytes counted.
    logprobs: VecDeque<(u64, Arc<[TokenLogprob]>, usize)>,
    /// Log probabilities waiting for the next text chunk.
    pending_logprobs: Vec<TokenLogprob>,
    /// The end chunk's information, once it exists.
    end: Option<Arc<EndInfo>>,
    next_seq: u64,
    end_seq: Option<u64>,
    bytes: usize,
    /// Set once anybody polls the stream (or it was started for polling).
    poll_cursor: Option<u64>,
    /// Attached consumers: (consumer id, next seq it needs).
    consumers: Vec<(u64, u64)>,
    next_consumer_id: u64,
    /// Long polls in progress.
    pollers: u32,
    last_activity: Instant,
    usage: Usage,
    /// Set when the last reader of a push-started stream left with a
    /// resume grace in force: the generation is aborted at this instant
    /// unless a reader attaches again.
    resume_by: Option<Instant>,
    /// While a long prompt is prefilled in chunks: tokens prefilled, of.
    prefill: Option<(u32, u32)>,
    /// Read to its end by the server itself (a non-streamed answer): its
    /// buffer is not held for a slow client, so the buffer limits do not
    /// end it (the answer it is collected into is bounded by `max_tokens`).
    collected: bool,
}

impl Inner {
    /// Gives the log probabilities waiting for a text chunk to the one
    /// just appended (`bytes`: what they were counted as).
    fn keep_logprobs(&mut self, bytes: usize) {
        if !self.pending_logprobs.is_empty() {
            let seq = self.next_seq - 1;
            let entries: Arc<[TokenLogprob]> = std::mem::take(&mut self.pending_logprobs).into();
            self.logprobs.push_back((seq, entries, bytes));
        }
    }

    /// How far a prefill in chunks has come, while it runs.
    fn prefill_now(&self) -> Option<(u32, u32)> {
        self.prefill
            .filter(|_| self.state == StreamState::Initializing)
    }

    /// Copies up to [`MAX_BATCH`] buffered chunks with `seq >= from_seq`.
    fn chunks_from(&self, from_seq: u64) -> Vec<Chunk> {
        let skip = usize::try_from(from_seq.saturating_sub(self.first_seq)).unwrap_or(usize::MAX);
        let mut offset = self.text_start
            + self
                .chunks
                .iter()
                .take(skip)
                .map(|e| e.len())
                .sum::<usize>();
        let mut batch = Vec::with_capacity(self.chunks.len().saturating_sub(skip).min(MAX_BATCH));
        for (i, entry) in self.chunks.iter().enumerate().skip(skip).take(MAX_BATCH) {
            let seq = self.first_seq + i as u64;
            let len = entry.len();
            batch.push(Chunk {
                seq,
                delta: Arc::from(&self.text[offset..offset + len]),
                thinking: entry.thinking(),
                end: if Some(seq) == self.end_seq {
                    self.end.clone()
                } else {
                    None
                },
                tokens: entry.tokens,
                produced_ns: self.stamps.get(i).copied(),
                logprobs: self.logprobs_of(seq),
            });
            offset += len;
        }
        batch
    }

    /// The log probabilities chunk `seq` carries (the list is in seq order).
    fn logprobs_of(&self, seq: u64) -> Option<Arc<[TokenLogprob]>> {
        let at = self.logprobs.partition_point(|(s, ..)| *s < seq);
        self.logprobs
            .get(at)
            .filter(|(s, ..)| *s == seq)
            .map(|(_, entries, _)| Arc::clone(entries))
    }

    /// Appends a chunk: its text, entry and (in benchmark mode) stamp.
    fn append(&mut self, delta: &str, thinking: bool, tokens: u32, produced_ns: Option<u64>) {
        if self.chunks.is_empty() {
            self.first_seq = self.next_seq;
        }
        self.next_seq += 1;
        self.text.push_str(delta);
        // A chunk is at most a stream's byte limit, far below 2 GiB.
        let len = u32::try_from(delta.len()).unwrap_or(u32::MAX) & !THINKING_BIT;
        self.chunks.push_back(Entry {
            len_kind: len | if thinking { THINKING_BIT } else { 0 },
            tokens,
        });
        if let Some(stamp) = produced_ns {
            self.stamps.push_back(stamp);
        }
    }

    /// Drops every chunk below `seq`; returns the bytes they were counted at.
    fn free_below(&mut self, seq: u64) -> usize {
        let mut freed = 0;
        while self.first_seq < seq {
            let Some(entry) = self.chunks.pop_front() else {
                break;
            };
            self.stamps.pop_front();
            self.first_seq += 1;
            self.text_start += entry.len();
            freed += entry.len() + CHUNK_OVERHEAD;
        }
        while self
            .logprobs
            .front()
            .is_some_and(|(at, ..)| *at < self.first_seq)
        {
            if let Some((_, _, bytes)) = self.logprobs.pop_front() {
                freed += bytes;
            }
        }
        if self.chunks.is_empty() {
            self.first_seq = self.next_seq;
            self.text.clear();
            self.text_start = 0;
            if self.text.capacity() > KEEP_TEXT {
                self.text.shrink_to(KEEP_TEXT);
            }
            if self.chunks.capacity() > KEEP_ENTRIES {
                self.chunks.shrink_to(KEEP_ENTRIES);
                self.stamps.shrink_to(KEEP_ENTRIES);
            }
        } else if self.text_start > KEEP_TEXT && self.text_start > self.text.len() / 2 {
            // Most of the text is freed: move the rest to the front.
            self.text.drain(..self.text_start);
            self.text_start = 0;
        }
        freed
    }

    /// Drops every chunk (expiry).
    fn clear(&mut self) {
        self.chunks = VecDeque::new();
        self.stamps = VecDeque::new();
        self.logprobs = VecDeque::new();
        self.text = String::new();
        self.text_start = 0;
        self.first_seq = self.next_seq;
    }
}

/// Bytes `entries` are counted at against the buffer limits.
fn logprobs_bytes(entries: &[TokenLogprob]) -> usize {
    entries.iter().map(TokenLogprob::size).sum()
}

/// What one poll returns.
#[derive(Debug)]
pub struct PollBatch {
    /// Buffered chunks with `seq >= from_seq`, in order.
    pub chunks: Vec<Chunk>,
    /// False once the end chunk has been returned.
    pub has_more: bool,
}

/// Why a poll was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollError {
    /// The stream expired; its chunks are gone.
    Expired,
    /// `from_seq` is beyond the next seq the stream will produce.
    Ahead {
        /// The next seq the stream will produce.
        next_seq: u64,
    },
}

impl Stream {
    pub(crate) fn new(id: String, model: String, shared: Arc<Shared>, polled: bool) -> Self {
        Self {
            id,
            model,
            shared,
            cancel: CancelToken::new(),
            notify: Notify::new(),
            inner: Mutex::new(Inner {
                state: StreamState::Queued,
                chunks: VecDeque::new(),
                first_seq: 0,
                text: String::new(),
                text_start: 0,
                stamps: VecDeque::new(),
                logprobs: VecDeque::new(),
                pending_logprobs: Vec::new(),
                end: None,
                next_seq: 0,
                end_seq: None,
                bytes: 0,
                poll_cursor: polled.then_some(0),
                consumers: Vec::new(),
                next_consumer_id: 0,
                pollers: 0,
                last_activity: Instant::now(),
                resume_by: None,
                usage: Usage::default(),
                prefill: None,
                collected: false,
            }),
        }
    }

    /// The stream id (a capability: do not log it at info level).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The model generating this stream.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The token that stops this stream's generation.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Current state and next seq.
    pub fn status(&self) -> (StreamState, u64) {
        let inner = self.inner.lock();
        (inner.state, inner.next_seq)
    }

    /// What the end chunk carries, once it exists.
    pub fn end_info(&self) -> Option<Arc<EndInfo>> {
        self.inner.lock().end.clone()
    }

    /// True once the end chunk exists.
    pub fn is_ended(&self) -> bool {
        self.inner.lock().end_seq.is_some()
    }

    /// Marks the generation as started (prefill under way).
    pub fn set_initializing(&self) {
        let mut inner = self.inner.lock();
        if inner.state == StreamState::Queued {
            inner.state = StreamState::Initializing;
        }
    }

    /// Records how far a prefill in chunks has come: `done` of `total`
    /// prompt tokens.
    /// Readers that watch the prefill ([`Consumer::next_watching_prefill`])
    /// wake for it.
    pub fn set_prefill(&self, done: u32, total: u32) {
        self.inner.lock().prefill = Some((done, total));
        self.notify.notify_waiters();
    }

    /// How far the prefill has come (tokens, of), when it is made in
    /// chunks and has not ended.
    pub fn prefill(&self) -> Option<(u32, u32)> {
        self.inner.lock().prefill_now()
    }

    /// Records the prompt's token count, for usage in early ends.
    pub fn set_prompt_tokens(&self, tokens: u32) {
        self.inner.lock().usage.prompt_tokens = tokens;
    }

    /// Marks the stream as read to its end by the server itself (a
    /// non-streamed answer): a producer faster than the reader never ends
    /// it for its buffer's size.
    pub fn collected_in_process(&self) {
        self.inner.lock().collected = true;
    }

    /// In benchmark mode, the production time to stamp on a chunk made now.
    pub fn stamp_now(&self) -> Option<u64> {
        self.shared.timestamps.then(super::monotonic_ns)
    }

    /// Appends a delta produced by `tokens` new tokens. An empty delta only
    /// counts the tokens. Returns false when the stream has ended (aborted,
    /// expired, over a limit): the generation should stop.
    pub fn push(&self, delta: &str, tokens: u32) -> bool {
        self.push_stamped(delta, false, tokens, None)
    }

    /// [`Stream::push`] of a delta (thinking when `thinking`: its tokens
    /// count as reasoning tokens too) whose last token was produced at
    /// `produced_ns` (see [`Stream::stamp_now`]); without one, a
    /// benchmark-mode stream stamps the chunk now.
    pub fn push_stamped(
        &self,
        delta: &str,
        thinking: bool,
        tokens: u32,
        produced_ns: Option<u64>,
    ) -> bool {
        // Every chunk of a benchmark-mode stream has a stamp, no other does.
        let produced_ns = if self.shared.timestamps {
            produced_ns.or_else(|| Some(super::monotonic_ns()))
        } else {
            None
        };
        let mut over_limit = None;
        {
            let mut inner = self.inner.lock();
            if inner.end_seq.is_some() {
                return false;
            }
            inner.usage.completion_tokens = inner.usage.completion_tokens.saturating_add(tokens);
            if thinking {
                inner.usage.reasoning_tokens = inner.usage.reasoning_tokens.saturating_add(tokens);
            }
            if matches!(inner.state, StreamState::Queued | StreamState::Initializing) {
                inner.state = StreamState::Active;
            }
            if delta.is_empty() {
                return true;
            }
            // The log probabilities of its tokens go with it.
            let logprob_bytes = logprobs_bytes(&inner.pending_logprobs);
            let cost = delta.len() + CHUNK_OVERHEAD + logprob_bytes;
            let limits = &self.shared.limits;
            if inner.collected {
                // Counted, never refused: see `Inner::collected`.
                self.shared.total_bytes.fetch_add(cost, Ordering::AcqRel);
                inner.bytes += cost;
                let tokens = inner.usage.completion_tokens;
                inner.append(delta, thinking, tokens, produced_ns);
                inner.keep_logprobs(logprob_bytes);
            } else if inner.bytes + cost > limits.max_stream_bytes {
                over_limit = Some(format!(
                    "consumer too slow: the stream's buffer limit of {} bytes (streams.max_stream_bytes) was reached",
                    limits.max_stream_bytes
                ));
            } else if self.shared.total_bytes.fetch_add(cost, Ordering::AcqRel) + cost
                > limits.max_total_bytes
            {
                self.shared.total_bytes.fetch_sub(cost, Ordering::AcqRel);
                over_limit = Some(format!(
                    "consumer too slow: the server's buffer limit of {} bytes (streams.max_total_bytes) was reached",
                    limits.max_total_bytes
                ));
            } else {
                inner.bytes += cost;
                let tokens = inner.usage.completion_tokens;
                inner.append(delta, thinking, tokens, produced_ns);
                inner.keep_logprobs(logprob_bytes);
            }
            if let Some(message) = &over_limit {
                let usage = inner.usage;
                self.end_locked(
                    &mut inner,
                    EndInfo::error(EndErrorKind::BufferLimit, message.clone(), usage),
                );
            }
        }
        self.notify.notify_waiters();
        if over_limit.is_some() {
            crate::metrics::aborted("buffer_limit");
            self.cancel.cancel();
            return false;
        }
        true
    }

    /// Log probabilities of the tokens whose text the next push carries.
    pub fn add_logprobs(&self, entries: Vec<TokenLogprob>) {
        let mut inner = self.inner.lock();
        if inner.end_seq.is_none() {
            inner.pending_logprobs.extend(entries);
        }
    }

    /// Appends the end chunk, built from the usage counted so far. Only
    /// the first end counts; returns false if the stream had already ended.
    /// Ending also cancels the generation, so an early end stops the NPU.
    pub fn end_with(&self, make: impl FnOnce(Usage) -> EndInfo) -> bool {
        let ended = {
            let mut inner = self.inner.lock();
            if inner.end_seq.is_some() {
                false
            } else {
                let info = make(inner.usage);
                self.end_locked(&mut inner, info);
                true
            }
        };
        if ended {
            self.notify.notify_waiters();
            self.cancel.cancel();
        }
        ended
    }

    /// Ends the stream with `finish_reason: "abort"`; `cause` is counted in
    /// the metrics (client, disconnect, cancelled, expiry, shutdown).
    pub fn abort(&self, cause: &'static str) -> bool {
        let ended = self.end_with(|usage| EndInfo::new(FinishReason::Abort, usage));
        if ended {
            crate::metrics::aborted(cause);
        }
        ended
    }

    fn end_locked(&self, inner: &mut Inner, info: EndInfo) {
        let cost = CHUNK_OVERHEAD;
        inner.bytes += cost;
        self.shared.total_bytes.fetch_add(cost, Ordering::AcqRel);
        inner.state = match info.finish_reason {
            FinishReason::Stop | FinishReason::Length => StreamState::Finished,
            FinishReason::Abort => StreamState::Aborted,
            FinishReason::Error => StreamState::Error,
        };
        inner.end_seq = Some(inner.next_seq);
        let tokens = info.usage.completion_tokens;
        inner.end = Some(Arc::new(info));
        inner.append("", false, tokens, self.stamp_now());
        self.shared.active.fetch_sub(1, Ordering::AcqRel);
    }

    /// Expires the stream: aborts its generation and frees its chunks.
    /// Later calls on it are refused with "expired".
    pub(crate) fn expire(&self) {
        {
            let mut inner = self.inner.lock();
            if inner.end_seq.is_none() {
                let usage = inner.usage;
                self.end_locked(&mut inner, EndInfo::new(FinishReason::Abort, usage));
                crate::metrics::aborted("expiry");
            }
            inner.state = StreamState::Expired;
            inner.clear();
            self.shared
                .total_bytes
                .fetch_sub(inner.bytes, Ordering::AcqRel);
            inner.bytes = 0;
        }
        self.notify.notify_waiters();
        self.cancel.cancel();
    }

    /// Whether the stream's resume grace ended at `now` with nobody
    /// reading it again.
    pub(crate) fn abandoned(&self, now: Instant) -> bool {
        let inner = self.inner.lock();
        inner.resume_by.is_some_and(|by| now >= by)
            && inner.consumers.is_empty()
            && inner.poll_cursor.is_none()
            && inner.end_seq.is_none()
    }

    /// The instant since which nobody has consumed the stream, or `None`
    /// while a consumer is attached or a long poll is waiting.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        let inner = self.inner.lock();
        (inner.consumers.is_empty() && inner.pollers == 0).then_some(inner.last_activity)
    }

    /// HTTP polling: acknowledges everything below `from_seq` and returns
    /// the buffered chunks from there on. Repeating the same `from_seq`
    /// returns the same chunks.
    pub fn poll(&self, from_seq: u64) -> Result<PollBatch, PollError> {
        let mut inner = self.inner.lock();
        if inner.state == StreamState::Expired {
            return Err(PollError::Expired);
        }
        if from_seq > inner.next_seq {
            return Err(PollError::Ahead {
                next_seq: inner.next_seq,
            });
        }
        inner.last_activity = Instant::now();
        let cursor = inner.poll_cursor.map_or(from_seq, |c| c.max(from_seq));
        inner.poll_cursor = Some(cursor);
        self.release_locked(&mut inner);
        let chunks = inner.chunks_from(from_seq);
        let has_more = match inner.end_seq {
            Some(end) => from_seq <= end && chunks.last().is_none_or(|c| c.seq != end),
            None => true,
        };
        Ok(PollBatch { chunks, has_more })
    }

    /// Waits until a chunk with `seq >= from_seq` exists or the stream has
    /// ended or expired. Counts as a consumer for the idle timeout while
    /// it waits.
    pub async fn wait_for(&self, from_seq: u64) {
        let _poller = PollerGuard::new(self);
        self.wait_until(|inner| {
            inner.next_seq > from_seq
                || inner.end_seq.is_some()
                || inner.state == StreamState::Expired
        })
        .await;
    }

    async fn wait_until(&self, ready: impl Fn(&Inner) -> bool) {
        loop {
            let mut notified = pin!(self.notify.notified());
            // Register before checking, so a push between the check and
            // the await cannot be missed.
            notified.as_mut().enable();
            if ready(&self.inner.lock()) {
                return;
            }
            notified.await;
        }
    }

    /// Attaches a push consumer that starts at `from_seq`. While attached,
    /// the stream is not idle. When the last consumer detaches from a
    /// stream nobody polls, its generation is aborted.
    pub fn attach(self: &Arc<Self>, from_seq: u64) -> Consumer {
        let mut inner = self.inner.lock();
        let id = inner.next_consumer_id;
        inner.next_consumer_id += 1;
        inner.consumers.push((id, from_seq));
        inner.last_activity = Instant::now();
        inner.resume_by = None;
        Consumer {
            stream: Arc::clone(self),
            id,
            cursor: from_seq,
            prefill_seen: None,
        }
    }

    /// Frees chunks every cursor has passed.
    fn release_locked(&self, inner: &mut Inner) {
        // With a resume grace, pushed chunks stay for a while: a client
        // that reconnects resumes from the last seq it received, and the
        // ones lost in flight on the old socket are still here.
        let keep = if self.shared.limits.resume_grace.is_zero() {
            0
        } else {
            REPLAY_CHUNKS
        };
        let consumers_min = inner
            .consumers
            .iter()
            .map(|&(_, c)| c.saturating_sub(keep))
            .min();
        let min = match (inner.poll_cursor, consumers_min) {
            (Some(p), Some(c)) => p.min(c),
            (Some(p), None) => p,
            (None, Some(c)) => c,
            (None, None) => return,
        };
        let freed = inner.free_below(min);
        if freed > 0 {
            inner.bytes -= freed;
            self.shared.total_bytes.fetch_sub(freed, Ordering::AcqRel);
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        self.shared
            .total_bytes
            .fetch_sub(inner.bytes, Ordering::AcqRel);
        if inner.end_seq.is_none() {
            self.shared.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

struct PollerGuard<'a>(&'a Stream);

impl<'a> PollerGuard<'a> {
    fn new(stream: &'a Stream) -> Self {
        stream.inner.lock().pollers += 1;
        Self(stream)
    }
}

impl Drop for PollerGuard<'_> {
    fn drop(&mut self) {
        let mut inner = self.0.inner.lock();
        inner.pollers -= 1;
        inner.last_activity = Instant::now();
    }
}

/// A push consumer of one stream (a WebSocket subscription, a waiting
/// non-streaming request). Dropping it detaches it.
#[derive(Debug)]
pub struct Consumer {
    stream: Arc<Stream>,
    id: u64,
    cursor: u64,
    /// The prefill position last handed out by
    /// [`Consumer::next_watching_prefill`].
    prefill_seen: Option<(u32, u32)>,
}

/// What a reader that watches the prefill reads next.
#[derive(Debug)]
pub enum Next {
    /// The next chunks; none only when nothing more will come.
    Chunks(Vec<Chunk>),
    /// A prefill in chunks advanced, and no chunk is waiting: `tokens`
    /// of the prompt's `of` are prefilled.
    Prefill {
        /// Prompt tokens prefilled.
        tokens: u32,
        /// Of all the prompt's tokens.
        of: u32,
    },
}

impl Consumer {
    /// The stream consumed.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// Waits for the next chunks and takes them, advancing the cursor and
    /// freeing what every consumer has now passed. Returns an empty batch
    /// only when nothing more will come (after the end chunk, or when the
    /// stream expired).
    pub async fn next_batch(&mut self) -> Vec<Chunk> {
        loop {
            // Not watching, `next` hands out chunks only.
            if let Next::Chunks(chunks) = self.next(false).await {
                return chunks;
            }
        }
    }

    /// [`Consumer::next_batch`], waking also when a prefill in chunks
    /// advances (while no chunk waits), to tell the client how far it has
    /// come. Each position is handed out once.
    pub async fn next_watching_prefill(&mut self) -> Next {
        self.next(true).await
    }

    async fn next(&mut self, watch_prefill: bool) -> Next {
        let cursor = self.cursor;
        let seen = self.prefill_seen;
        let advanced = |inner: &Inner| {
            watch_prefill && inner.prefill_now().is_some_and(|now| Some(now) != seen)
        };
        self.stream
            .wait_until(|inner| {
                inner.next_seq > cursor
                    || inner.state == StreamState::Expired
                    || inner.end_seq.is_some_and(|end| cursor > end)
                    || advanced(inner)
            })
            .await;
        let mut inner = self.stream.inner.lock();
        // No chunk waits (a prefill runs only before the first, and the
        // stream has not ended or expired while it does).
        if inner.next_seq <= cursor
            && let Some((tokens, of)) = inner.prefill_now().filter(|_| advanced(&inner))
        {
            self.prefill_seen = Some((tokens, of));
            inner.last_activity = Instant::now();
            return Next::Prefill { tokens, of };
        }
        let batch = inner.chunks_from(cursor);
        if let Some(last) = batch.last() {
            self.cursor = last.seq + 1;
        } else {
            // Chunks below the buffer's start were freed before this
            // consumer attached: skip to what is buffered.
            self.cursor = self.cursor.max(inner.next_seq);
        }
        let id = self.id;
        let new_cursor = self.cursor;
        if let Some(entry) = inner.consumers.iter_mut().find(|(cid, _)| *cid == id) {
            entry.1 = new_cursor;
        }
        inner.last_activity = Instant::now();
        self.stream.release_locked(&mut inner);
        Next::Chunks(batch)
    }
}

impl Drop for Consumer {
    /// The last reader of a stream nobody polls leaving aborts its
    /// generation, at once or, with a resume grace, when the grace ends
    /// without a new reader (the manager's sweep does it).
    fn drop(&mut self) {
        let abort = {
            let mut inner = self.stream.inner.lock();
            inner.consumers.retain(|&(cid, _)| cid != self.id);
            let now = Instant::now();
            inner.last_activity = now;
            self.stream.release_locked(&mut inner);
            let orphaned = inner.consumers.is_empty()
                && inner.poll_cursor.is_none()
                && inner.end_seq.is_none();
            let grace = self.stream.shared.limits.resume_grace;
            if orphaned && !grace.is_zero() {
                inner.resume_by = Some(now + grace);
                false
            } else {
                orphaned
            }
        };
        if abort {
            self.stream.abort("disconnect");
        }
    }
}
