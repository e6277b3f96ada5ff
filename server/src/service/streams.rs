//! Generations as streams a protocol keeps by id (JSON-RPC's `run` with
//! `stream: true`, polling, `subscribe`, `abort`, `stream_status`): the
//! service submits them, finds them again, and hands out a private reader
//! for the ones only their request reads. The stream types are the
//! service's to hand out, so that a protocol speaks to the service alone.

use std::sync::Arc;

use super::{Prepared, Service, ServiceError};
pub use crate::stream::{
    Chunk, Consumer, PollError, PrivateStream, Stream, StreamState, new_stream_id,
};

impl Service {
    /// Queues a prepared request on its model and returns its stream;
    /// `polled` keeps its chunks for HTTP polling.
    ///
    /// # Errors
    /// What the engine refuses: an unknown or failed model, a full queue,
    /// too many streams, a value out of range.
    pub fn submit(&self, prepared: Prepared, polled: bool) -> Result<Arc<Stream>, ServiceError> {
        Ok(self.engine.submit_reserved(
            prepared.run,
            polled,
            prepared.keep_alive,
            prepared.reservation,
        )?)
    }

    /// The stream with this id.
    ///
    /// # Errors
    /// [`ServiceError::NoStream`]: no such stream, or it expired.
    pub fn stream(&self, id: &str) -> Result<Arc<Stream>, ServiceError> {
        Ok(self.engine.streams().get(id)?)
    }

    /// `stream`, read by its request alone: dropping the reader forgets it.
    pub fn private(&self, stream: Arc<Stream>) -> PrivateStream {
        PrivateStream::new(self.engine.streams(), stream)
    }

    /// Where a queued stream waits in its model's queue (1: next).
    pub fn queue_position(&self, stream: &Stream) -> Option<usize> {
        self.engine.queue_position(stream)
    }

    /// A request that empties `model`'s KV cache (the chat history its
    /// runtime holds) in turn with its queue, generating nothing.
    pub fn clear_cache(&self, model: &str) -> Prepared {
        Prepared {
            run: crate::engine::RunRequest {
                model: Some(model.to_owned()),
                clear_cache: true,
                ..crate::engine::RunRequest::default()
            },
            keep_alive: None,
            reads_tool_calls: false,
            max_tool_calls: None,
            reservation: None,
        }
    }
}
