//! The registry of streams: creation under the concurrency limit, lookup
//! by id, idle expiry and shutdown.
//!
//! Expired ids are remembered (as tombstones, for one more idle period and
//! at most [`MAX_TOMBSTONES`] of them) so that a late client is told
//! "expired" rather than "not found".

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::buffer::Shared;
use super::{Stream, StreamLimits, new_stream_id};
use crate::task::Tasks;

/// Expired ids remembered at most.
pub const MAX_TOMBSTONES: usize = 65_536;

/// Why a stream could not be created or found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// No stream has this id.
    #[error("stream not found")]
    NotFound,
    /// The stream existed but expired.
    #[error("stream expired: nobody consumed it for longer than the idle timeout")]
    Expired,
    /// The concurrent-stream limit is reached.
    #[error("too many concurrent streams (limit {limit}, streams.max_streams)")]
    TooMany {
        /// The configured limit.
        limit: usize,
    },
    /// The server is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// Owns every stream of the process.
#[derive(Debug)]
pub struct StreamManager {
    shared: Arc<Shared>,
    // Synchronous lock: held for map operations only, never across await.
    registry: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    live: HashMap<String, Arc<Stream>>,
    tombstones: HashMap<String, Instant>,
    tombstone_order: VecDeque<(String, Instant)>,
    shutting_down: bool,
}

impl StreamManager {
    /// A manager with the given limits.
    pub fn new(limits: StreamLimits) -> Self {
        Self {
            shared: Arc::new(Shared {
                limits,
                total_bytes: AtomicUsize::new(0),
                active: AtomicUsize::new(0),
                timestamps: false,
            }),
            registry: Mutex::new(Registry::default()),
        }
    }

    /// Benchmark mode: chunks carry `produced_ns` (see [`super::monotonic_ns`]).
    #[must_use]
    pub fn with_timestamps(mut self, on: bool) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.timestamps = on;
        }
        self
    }

    /// The limits in force.
    pub fn limits(&self) -> &StreamLimits {
        &self.shared.limits
    }

    /// Bytes buffered by all streams.
    pub fn total_bytes(&self) -> usize {
        self.shared.total_bytes.load(Ordering::Acquire)
    }

    /// Streams queued or generating.
    pub fn active_streams(&self) -> usize {
        self.shared.active.load(Ordering::Acquire)
    }

    /// Creates a stream for `model`. `polled` streams keep their chunks
    /// until a poll acknowledges them; others free chunks as their push
    /// consumers pass them.
    pub fn create(&self, model: &str, polled: bool) -> Result<Arc<Stream>, StreamError> {
        let mut registry = self.registry.lock();
        if registry.shutting_down {
            return Err(StreamError::ShuttingDown);
        }
        let limit = self.shared.limits.max_streams;
        if self.shared.active.load(Ordering::Acquire) >= limit {
            return Err(StreamError::TooMany { limit });
        }
        let id = loop {
            let id = new_stream_id();
            if !registry.live.contains_key(&id) && !registry.tombstones.contains_key(&id) {
                break id;
            }
        };
        self.shared.active.fetch_add(1, Ordering::AcqRel);
        let stream = Arc::new(Stream::new(
            id.clone(),
            model.to_owned(),
            Arc::clone(&self.shared),
            polled,
        ));
        registry.live.insert(id, Arc::clone(&stream));
        Ok(stream)
    }

    /// Looks a stream up by id.
    pub fn get(&self, id: &str) -> Result<Arc<Stream>, StreamError> {
        let registry = self.registry.lock();
        if let Some(stream) = registry.live.get(id) {
            return Ok(Arc::clone(stream));
        }
        if registry.tombstones.contains_key(id) {
            Err(StreamError::Expired)
        } else {
            Err(StreamError::NotFound)
        }
    }

    /// Forgets a stream (its buffer is freed when the last handle drops).
    pub fn remove(&self, id: &str) {
        self.registry.lock().live.remove(id);
    }

    /// Expires every stream idle for longer than the idle timeout as of
    /// `now`, and forgets old tombstones. Returns how many expired.
    pub fn sweep(&self, now: Instant) -> usize {
        let timeout = self.shared.limits.idle_timeout;
        let expired: Vec<Arc<Stream>> = {
            let mut registry = self.registry.lock();
            let ids: Vec<String> = registry
                .live
                .iter()
                .filter(|(_, s)| {
                    s.idle_since()
                        .is_some_and(|since| now.saturating_duration_since(since) >= timeout)
                })
                .map(|(id, _)| id.clone())
                .collect();
            let mut expired = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(stream) = registry.live.remove(&id) {
                    registry.tombstones.insert(id.clone(), now);
                    registry.tombstone_order.push_back((id, now));
                    expired.push(stream);
                }
            }
            while let Some((id, at)) = registry.tombstone_order.front() {
                let too_many = registry.tombstone_order.len() > MAX_TOMBSTONES;
                if !too_many && now.saturating_duration_since(*at) < timeout {
                    break;
                }
                let id = id.clone();
                registry.tombstone_order.pop_front();
                registry.tombstones.remove(&id);
            }
            expired
        };
        for stream in &expired {
            tracing::debug!(stream_id = stream.id(), "stream expired");
            stream.expire();
        }
        // Push-started streams whose resume grace ran out unread.
        let abandoned: Vec<Arc<Stream>> = if self.shared.limits.resume_grace.is_zero() {
            Vec::new()
        } else {
            let registry = self.registry.lock();
            registry
                .live
                .values()
                .filter(|s| s.abandoned(now))
                .cloned()
                .collect()
        };
        for stream in abandoned {
            stream.abort("disconnect");
        }
        expired.len()
    }

    /// Refuses new streams and ends every open one with an abort end chunk.
    pub fn shutdown(&self) -> usize {
        let streams: Vec<Arc<Stream>> = {
            let mut registry = self.registry.lock();
            registry.shutting_down = true;
            registry.live.values().cloned().collect()
        };
        streams.iter().filter(|s| s.abort("shutdown")).count()
    }

    /// How often the reaper checks for idle streams (and ended resume
    /// graces).
    pub fn sweep_interval(&self) -> Duration {
        let limits = &self.shared.limits;
        let mut period = limits.idle_timeout / 4;
        if !limits.resume_grace.is_zero() {
            period = period.min(limits.resume_grace / 4);
        }
        period.clamp(Duration::from_millis(50), Duration::from_secs(5))
    }

    /// Runs the idle reaper until the returned guard drops (or is
    /// aborted). A late sweep runs once, and the next a whole period after
    /// it.
    pub fn spawn_reaper(self: &Arc<Self>) -> Tasks {
        let manager = Arc::clone(self);
        let reaper = Tasks::new();
        reaper.spawn(async move {
            let mut ticks = tokio::time::interval(manager.sweep_interval());
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                manager.sweep(Instant::now());
            }
        });
        reaper
    }
}

#[cfg(test)]
mod tests;
