//! The JSON shape of chunks, shared by polling results and push
//! notifications. Borrowing views: serialising a chunk copies its text
//! once, into the outgoing message.

use serde::Serialize;

use super::error::end_error_code;
use crate::service::streams::Chunk;
use crate::vocab::{EndError, FinishReason, Timings, Usage};

/// An end chunk's error as it goes on the wire: `{code, message}`.
#[derive(Debug)]
pub struct EndErrorJson<'a>(pub &'a EndError);

impl Serialize for EndErrorJson<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("EndError", 2)?;
        s.serialize_field("code", &end_error_code(self.0.kind))?;
        s.serialize_field("message", &self.0.message)?;
        s.end()
    }
}

/// A chunk as it goes on the wire.
#[derive(Debug, Serialize)]
pub struct ChunkJson<'a> {
    /// Present in push notifications, absent inside a poll result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<&'a str>,
    /// Position in the stream.
    pub seq: u64,
    /// Whole UTF-8 characters of the answer (empty on a thinking chunk).
    pub delta: &'a str,
    /// A reasoning model's thinking: a chunk of its own, with its own seq.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<&'a str>,
    /// True on the last chunk.
    pub end: bool,
    /// End chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// End chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<&'a Usage>,
    /// End chunk only, when the generation ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<&'a Timings>,
    /// End chunk only, on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<EndErrorJson<'a>>,
    /// Benchmark mode only: when the chunk's last token was produced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub produced_ns: Option<u64>,
}

impl<'a> ChunkJson<'a> {
    /// A view of `chunk`, tagged with `stream_id` when given.
    pub fn new(chunk: &'a Chunk, stream_id: Option<&'a str>) -> Self {
        let end = chunk.end.as_deref();
        Self {
            stream_id,
            seq: chunk.seq,
            delta: if chunk.thinking { "" } else { &chunk.delta },
            thinking: chunk.thinking.then_some(&*chunk.delta),
            end: end.is_some(),
            finish_reason: end.map(|e| e.finish_reason),
            usage: end.map(|e| &e.usage),
            timings: end.and_then(|e| e.timings.as_ref()),
            error: end.and_then(|e| e.error.as_ref()).map(EndErrorJson),
            produced_ns: chunk.produced_ns,
        }
    }
}

#[derive(Serialize)]
struct Notification<'a> {
    jsonrpc: &'static str,
    method: &'static str,
    params: ChunkJson<'a>,
}

/// A pushed chunk: `{"jsonrpc":"2.0","method":"run","params":{stream_id, seq, delta, end, ...}}`.
pub fn chunk_notification(stream_id: &str, chunk: &Chunk) -> String {
    serde_json::to_string(&Notification {
        jsonrpc: "2.0",
        method: "run",
        params: ChunkJson::new(chunk, Some(stream_id)),
    })
    .unwrap_or_default()
}
