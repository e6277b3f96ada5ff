//! Chunked framing (PROTOCOL §5, `--stdio-framing chunked`) for peers
//! that split large messages: a frame is
//! `{messageId}:{chunkIndex}:{totalChunks}:{data}` on one line.
//!
//! [`FrameAssembler`] reassembles frames (several messages may
//! interleave, chunks may come in any order); plain JSON lines are not
//! frames and pass through untouched. A malformed frame, a conflicting or
//! duplicate chunk, a message over the size limit or one whose chunks stop
//! coming fails that message only, and its buffer is released.
//! [`encode`] writes messages over [`FRAME_THRESHOLD`] as frames.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Messages longer than this are written as frames.
pub const FRAME_THRESHOLD: usize = 60 * 1024;
/// Longest message id accepted.
pub const MAX_ID_LEN: usize = 64;
/// Most chunks one message may have.
pub const MAX_CHUNKS: usize = 65_536;

/// A message that could not be reassembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError {
    /// The message id, when the frame header named one.
    pub message_id: Option<String>,
    /// What was wrong.
    pub reason: String,
}

struct Partial {
    chunks: Vec<Option<String>>,
    received: usize,
    bytes: usize,
    last_seen: Instant,
}

/// Reassembles framed messages.
pub struct FrameAssembler {
    max_message: usize,
    max_pending: usize,
    timeout: Duration,
    pending: HashMap<String, Partial>,
}

impl std::fmt::Debug for FrameAssembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameAssembler")
            .field("pending", &self.pending.len())
            .finish()
    }
}

/// Whether a line is a frame (as opposed to a plain JSON message).
pub fn is_frame(line: &str) -> bool {
    let first = line.trim_start().chars().next();
    !matches!(first, Some('{' | '[') | None) && line.contains(':')
}

struct Header<'a> {
    id: &'a str,
    index: usize,
    total: usize,
    data: &'a str,
}

fn parse(line: &str) -> Result<Header<'_>, FrameError> {
    let bad = |reason: &str, id: Option<&str>| FrameError {
        message_id: id.map(str::to_owned),
        reason: reason.to_owned(),
    };
    let mut parts = line.splitn(4, ':');
    let id = parts.next().unwrap_or_default();
    if id.is_empty()
        || id.len() > MAX_ID_LEN
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(bad(
            "bad frame: the message id must be 1 to 64 letters, digits, - or _",
            None,
        ));
    }
    let number = |part: Option<&str>, what: &str| -> Result<usize, FrameError> {
        part.filter(|p| !p.is_empty() && p.len() <= 6 && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| bad(&format!("bad frame: {what} must be a number"), Some(id)))
    };
    let index = number(parts.next(), "the chunk index")?;
    let total = number(parts.next(), "the chunk count")?;
    let data = parts
        .next()
        .ok_or_else(|| bad("bad frame: missing data", Some(id)))?;
    if total == 0 || total > MAX_CHUNKS {
        return Err(bad(
            &format!("bad frame: the chunk count must be 1 to {MAX_CHUNKS}"),
            Some(id),
        ));
    }
    if index >= total {
        return Err(bad(
            "bad frame: the chunk index must be below the chunk count",
            Some(id),
        ));
    }
    Ok(Header {
        id,
        index,
        total,
        data,
    })
}

impl FrameAssembler {
    /// An assembler for messages of at most `max_message` bytes, with at
    /// most `max_pending` incomplete messages, each failed after `timeout`
    /// without a new chunk.
    pub fn new(max_message: usize, max_pending: usize, timeout: Duration) -> Self {
        Self {
            max_message,
            max_pending,
            timeout,
            pending: HashMap::new(),
        }
    }

    /// Incomplete messages held.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Takes one frame. Returns the whole message once its last chunk
    /// arrives; `Ok(None)` while chunks are missing.
    ///
    /// # Errors
    /// The message this frame belongs to failed (its buffer is released).
    pub fn push(&mut self, line: &str, now: Instant) -> Result<Option<String>, FrameError> {
        let header = parse(line)?;
        let fail = |this: &mut Self, reason: String| {
            this.pending.remove(header.id);
            Err(FrameError {
                message_id: Some(header.id.to_owned()),
                reason,
            })
        };
        if !self.pending.contains_key(header.id) && self.pending.len() >= self.max_pending {
            return fail(
                self,
                format!(
                    "too many incomplete framed messages (limit {})",
                    self.max_pending
                ),
            );
        }
        let partial = self
            .pending
            .entry(header.id.to_owned())
            .or_insert_with(|| Partial {
                chunks: vec![None; header.total],
                received: 0,
                bytes: 0,
                last_seen: now,
            });
        if partial.chunks.len() != header.total {
            return fail(
                self,
                "bad frame: the chunk count changed within a message".into(),
            );
        }
        if partial.chunks[header.index].is_some() {
            return fail(
                self,
                format!("bad frame: chunk {} arrived twice", header.index),
            );
        }
        partial.bytes += header.data.len();
        if partial.bytes > self.max_message {
            let limit = self.max_message;
            return fail(
                self,
                format!(
                    "framed message over the limit of {limit} bytes (limits.max_request_bytes)"
                ),
            );
        }
        partial.chunks[header.index] = Some(header.data.to_owned());
        partial.received += 1;
        partial.last_seen = now;
        if partial.received < header.total {
            return Ok(None);
        }
        let partial = self.pending.remove(header.id).expect("present");
        Ok(Some(partial.chunks.into_iter().flatten().collect()))
    }

    /// Fails (and releases) every message whose chunks stopped coming.
    pub fn expire(&mut self, now: Instant) -> Vec<FrameError> {
        let timeout = self.timeout;
        let stale: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.last_seen) >= timeout)
            .map(|(id, _)| id.clone())
            .collect();
        stale.into_iter().map(|id| self.missing(id)).collect()
    }

    /// End of input: every incomplete message fails.
    pub fn finish(&mut self) -> Vec<FrameError> {
        let ids: Vec<String> = self.pending.keys().cloned().collect();
        ids.into_iter().map(|id| self.missing(id)).collect()
    }

    fn missing(&mut self, id: String) -> FrameError {
        let partial = self.pending.remove(&id);
        let (got, of) = partial.map_or((0, 0), |p| (p.received, p.chunks.len()));
        FrameError {
            message_id: Some(id),
            reason: format!("framed message incomplete: {got} of {of} chunks arrived"),
        }
    }
}

/// Writes `message` as lines: itself when short, else frames of at most
/// [`FRAME_THRESHOLD`] bytes cut at character boundaries. Each returned
/// line lacks its `\n`.
pub fn encode(message: &str, message_id: u64) -> Vec<String> {
    if message.len() <= FRAME_THRESHOLD {
        return vec![message.to_owned()];
    }
    let mut pieces = Vec::new();
    let mut rest = message;
    while !rest.is_empty() {
        let mut cut = rest.len().min(FRAME_THRESHOLD);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        pieces.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    let total = pieces.len();
    pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| format!("{message_id}:{i}:{total}:{piece}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assembler() -> FrameAssembler {
        FrameAssembler::new(1 << 20, 8, Duration::from_secs(30))
    }

    #[test]
    fn plain_json_lines_are_not_frames_and_frames_are() {
        assert!(!is_frame("{\"a\":\"1:2:3:x\"}"));
        assert!(!is_frame("  [1,2]"));
        assert!(is_frame("7:0:2:{\"a\""));
        assert!(is_frame("garbage:with:colons"));
    }

    #[test]
    fn interleaved_out_of_order_messages_are_reassembled() {
        let mut a = assembler();
        let now = Instant::now();
        assert_eq!(a.push("m1:1:2:world\"}", now), Ok(None));
        assert_eq!(a.push("m2:0:3:[1,", now), Ok(None));
        assert_eq!(
            a.push("m1:0:2:{\"hello\":\"", now),
            Ok(Some("{\"hello\":\"world\"}".into()))
        );
        assert_eq!(a.push("m2:2:3:3]", now), Ok(None));
        assert_eq!(a.push("m2:1:3:2,", now), Ok(Some("[1,2,3]".into())));
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn data_may_hold_colons_and_multibyte_text() {
        let mut a = assembler();
        let now = Instant::now();
        assert_eq!(
            a.push("x:0:1:{\"t\":\"a:b:c 東京\"}", now),
            Ok(Some("{\"t\":\"a:b:c 東京\"}".into()))
        );
    }

    #[test]
    fn malformed_headers_fail_only_that_frame() {
        let mut a = assembler();
        let now = Instant::now();
        a.push("ok:0:2:{\"a\":", now).unwrap();
        for bad in [
            "bad id!:0:1:x",
            ":0:1:x",
            "m:x:1:data",
            "m:0:y:data",
            "m:0:0:data",
            "m:5:2:data",
            "m:0:1",
            "m:-1:2:data",
            "m:0:99999999:data",
            "garbage:between:frames",
        ] {
            assert!(a.push(bad, now).is_err(), "{bad}");
        }
        assert_eq!(
            a.push("ok:1:2:1}", now),
            Ok(Some("{\"a\":1}".into())),
            "the other message survived"
        );
    }

    #[test]
    fn a_duplicate_or_conflicting_chunk_fails_the_message_and_releases_it() {
        let mut a = assembler();
        let now = Instant::now();
        a.push("d:0:3:x", now).unwrap();
        let err = a.push("d:0:3:x", now).unwrap_err();
        assert_eq!(err.message_id.as_deref(), Some("d"));
        assert_eq!(a.pending(), 0);
        a.push("c:0:3:x", now).unwrap();
        assert!(a.push("c:1:4:y", now).is_err());
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn truncated_messages_fail_on_timeout_and_at_eof() {
        let mut a = assembler();
        let start = Instant::now();
        a.push("t:0:3:x", start).unwrap();
        a.push("u:0:2:y", start + Duration::from_secs(20)).unwrap();
        let expired = a.expire(start + Duration::from_secs(31));
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].message_id.as_deref(), Some("t"));
        assert!(
            expired[0].reason.contains("1 of 3"),
            "{}",
            expired[0].reason
        );
        let at_eof = a.finish();
        assert_eq!(at_eof.len(), 1);
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn size_and_count_limits_bound_memory() {
        let mut a = FrameAssembler::new(10, 2, Duration::from_secs(30));
        let now = Instant::now();
        assert!(a.push("big:0:2:0123456789A", now).is_err());
        a.push("p1:0:2:x", now).unwrap();
        a.push("p2:0:2:x", now).unwrap();
        assert!(
            a.push("p3:0:2:x", now).is_err(),
            "a third incomplete message is refused"
        );
        assert_eq!(a.pending(), 2);
    }

    #[test]
    fn large_messages_are_encoded_as_frames_that_reassemble() {
        let message = format!("{{\"text\":\"{}\"}}", "東京🦀x".repeat(20_000));
        let lines = encode(&message, 9);
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| l.len() <= FRAME_THRESHOLD + 20));
        let mut a = FrameAssembler::new(1 << 20, 8, Duration::from_secs(30));
        let now = Instant::now();
        let mut whole = None;
        for line in lines.iter().rev() {
            whole = a.push(line, now).unwrap();
        }
        assert_eq!(whole.as_deref(), Some(message.as_str()));
        assert_eq!(encode("{}", 1), vec!["{}".to_owned()]);
    }
}
