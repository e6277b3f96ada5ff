//! A stream only one request reads (a non-streaming `run`, an MCP
//! `tools/call`, an OpenAI or Ollama request): the request holds its
//! consumer, and dropping it (the request ended or its client left) drops
//! the consumer, which aborts an unfinished generation, and forgets the
//! stream.

use std::sync::Arc;

use super::{Consumer, Stream, StreamManager};

/// A stream read by one request.
#[derive(Debug)]
pub struct PrivateStream {
    /// The stream's consumer.
    pub consumer: Consumer,
    streams: Arc<StreamManager>,
    stream: Arc<Stream>,
}

impl PrivateStream {
    /// Attaches to `stream`, which `streams` forgets when this drops.
    pub fn new(streams: &Arc<StreamManager>, stream: Arc<Stream>) -> Self {
        Self {
            consumer: stream.attach(0),
            streams: Arc::clone(streams),
            stream,
        }
    }

    /// The stream.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }
}

impl Drop for PrivateStream {
    /// Its one reader is gone: an unfinished generation stops now, whatever
    /// resume grace push streams get (nobody can resume a private stream).
    fn drop(&mut self) {
        self.stream.abort("disconnect");
        self.streams.remove(self.stream.id());
    }
}
