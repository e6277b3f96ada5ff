//! The framing on the pipes between the server and a runner process.
//!
//! A frame is `len: u32 LE | kind: u8 | body`, `len` counting the kind byte
//! and the body. Orders (server → runner) and reports (runner → server)
//! are rare and carry JSON, except the two on the hot path: `TOKENS`
//! (`id: u64 | tokens: u32 | produced_ns: u64 | text`, the text being
//! whole UTF-8 characters) and `ABORT` (`id: u64`), which are fixed binary
//! fields. The runner merges consecutive `TOKENS` of one run that are
//! waiting to be written into one frame, so a fast model costs one write
//! per batch, not per token.

use std::io::{self, Read};
use std::ops::Range;

/// Server → runner: the backend and model to load (JSON), the first frame.
pub const LOAD: u8 = 1;
/// Server → runner: `id: u64 | JSON run order`.
pub const RUN: u8 = 2;
/// Server → runner: `id: u64`, stop that run.
pub const ABORT: u8 = 3;
/// Runner → server: the outcome of the load (JSON).
pub const LOADED: u8 = 10;
/// Runner → server: `id | tokens | produced_ns | text`.
pub const TOKENS: u8 = 11;
/// Runner → server: `id: u64 | prompt_tokens: u32`.
pub const PROMPT: u8 = 12;
/// Runner → server: `id: u64 | JSON outcome`, the run is over.
pub const DONE: u8 = 13;
/// Runner → server: `id: u64 | JSON log probabilities` of the tokens whose
/// text the next `TOKENS` frame of the run carries.
pub const LOGPROBS: u8 = 14;
/// Runner → server: `id: u64 | JSON [done, total]`, how far a prompt
/// prefilled in chunks has come.
pub const PREFILL: u8 = 15;

/// Largest frame either side accepts (a run order holds the prompt).
pub const MAX_FRAME: usize = 256 << 20;

/// Bytes of a `TOKENS` frame before its text.
pub const TOKENS_HEAD: usize = 4 + 1 + 8 + 4 + 8;

/// Appends a frame header for a body of `body_len` bytes.
pub fn header(buf: &mut Vec<u8>, kind: u8, body_len: usize) {
    let len = u32::try_from(body_len + 1).unwrap_or(u32::MAX);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.push(kind);
}

/// Appends a frame of an id alone (`ABORT`).
pub fn id_frame(buf: &mut Vec<u8>, kind: u8, id: u64) {
    header(buf, kind, 8);
    buf.extend_from_slice(&id.to_le_bytes());
}

/// Appends a frame of an optional id and a JSON body.
///
/// The JSON is written straight into `buf` and the length patched after,
/// so a large body (a run order's images) is not held twice.
pub fn json_frame(buf: &mut Vec<u8>, kind: u8, id: Option<u64>, value: &impl serde::Serialize) {
    let start = buf.len();
    header(buf, kind, 0);
    if let Some(id) = id {
        buf.extend_from_slice(&id.to_le_bytes());
    }
    let body = buf.len();
    if serde_json::to_writer(&mut *buf, value).is_err() {
        buf.truncate(body);
        buf.extend_from_slice(b"null");
    }
    // The length counts the kind, the id and the JSON.
    let len = u32::try_from(buf.len() - start - 4).unwrap_or(u32::MAX);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Appends a `PROMPT` frame.
pub fn prompt_frame(buf: &mut Vec<u8>, id: u64, tokens: u32) {
    header(buf, PROMPT, 12);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.extend_from_slice(&tokens.to_le_bytes());
}

/// Appends a `TOKENS` frame.
pub fn tokens_frame(buf: &mut Vec<u8>, id: u64, tokens: u32, produced_ns: u64, text: &[u8]) {
    header(buf, TOKENS, TOKENS_HEAD - 5 + text.len());
    buf.extend_from_slice(&id.to_le_bytes());
    buf.extend_from_slice(&tokens.to_le_bytes());
    buf.extend_from_slice(&produced_ns.to_le_bytes());
    buf.extend_from_slice(text);
}

/// Extends the `TOKENS` frame that starts at `at` (the last frame in
/// `buf`) by `tokens` more tokens and their text.
pub fn extend_tokens(buf: &mut Vec<u8>, at: usize, tokens: u32, text: &[u8]) {
    let len = u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
    let new_len = len.saturating_add(u32::try_from(text.len()).unwrap_or(u32::MAX));
    buf[at..at + 4].copy_from_slice(&new_len.to_le_bytes());
    let count_at = at + 5 + 8;
    let count = u32::from_le_bytes(buf[count_at..count_at + 4].try_into().expect("4 bytes"));
    buf[count_at..count_at + 4].copy_from_slice(&count.saturating_add(tokens).to_le_bytes());
    buf.extend_from_slice(text);
}

/// Reads `u64` at the start of a body.
pub fn id_of(body: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(..8)?.try_into().ok()?))
}

/// A decoded `TOKENS` body.
#[derive(Debug)]
pub struct Tokens<'a> {
    pub id: u64,
    pub tokens: u32,
    pub produced_ns: u64,
    pub text: &'a [u8],
}

/// Splits a `TOKENS` body.
pub fn tokens_of(body: &[u8]) -> Option<Tokens<'_>> {
    Some(Tokens {
        id: id_of(body)?,
        tokens: u32::from_le_bytes(body.get(8..12)?.try_into().ok()?),
        produced_ns: u64::from_le_bytes(body.get(12..20)?.try_into().ok()?),
        text: body.get(20..)?,
    })
}

/// Splits a `PROMPT` body into the id and the token count.
pub fn prompt_of(body: &[u8]) -> Option<(u64, u32)> {
    Some((
        id_of(body)?,
        u32::from_le_bytes(body.get(8..12)?.try_into().ok()?),
    ))
}

/// Buffers bytes read from a pipe and cuts them into frames. The buffer
/// keeps its size between reads (bytes `start..end` are unread), so a read
/// costs no clearing of memory.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// What a read brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Filled {
    /// Some bytes.
    Data,
    /// End of the pipe: the other side is gone.
    Eof,
}

/// The least room a read is given.
const READ_ROOM: usize = 64 << 10;

impl FrameReader {
    /// The next complete frame in the buffer: its kind and where its body
    /// is (see [`Self::body`]).
    ///
    /// # Errors
    /// A frame with a length of 0 or over [`MAX_FRAME`].
    pub fn next_frame(&mut self) -> io::Result<Option<(u8, Range<usize>)>> {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes(avail[..4].try_into().expect("4 bytes")) as usize;
        if len == 0 || len > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad frame length {len}"),
            ));
        }
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let kind = avail[4];
        let body = self.start + 5..self.start + 4 + len;
        self.start += 4 + len;
        Ok(Some((kind, body)))
    }

    /// The bytes of a body [`Self::next_frame`] returned (valid until the
    /// next [`Self::fill`]).
    pub fn body(&self, range: Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    /// Reads what `source` has (one `read`), after dropping the frames
    /// already taken.
    ///
    /// # Errors
    /// The read's error.
    pub fn fill(&mut self, source: &mut impl Read) -> io::Result<Filled> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.start > 0 && self.buf.len() - self.end < READ_ROOM {
            // Move the partial frame to the front to make room.
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.buf.len() - self.end < READ_ROOM {
            self.buf.resize(self.end + READ_ROOM, 0);
        }
        let got = loop {
            match source.read(&mut self.buf[self.end..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        let n = got?;
        self.end += n;
        Ok(if n == 0 { Filled::Eof } else { Filled::Data })
    }

    /// Reads until a whole frame is buffered and returns it, or `None` at
    /// end of input. For the runner's order pipe, which has no deadline.
    ///
    /// # Errors
    /// A read error or a malformed frame.
    pub fn read_frame(&mut self, source: &mut impl Read) -> io::Result<Option<(u8, Vec<u8>)>> {
        loop {
            if let Some((kind, body)) = self.next_frame()? {
                return Ok(Some((kind, self.buf[body].to_vec())));
            }
            if self.fill(source)? == Filled::Eof {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_frame_is_written_in_place_whatever_its_size() {
        let text = "x".repeat(4 << 20);
        let mut buf = Vec::with_capacity(5 << 20);
        let ((), peak) = crate::backend::image::tests::meter::peak_of(|| {
            json_frame(&mut buf, RUN, Some(7), &text);
        });
        assert!(peak < 64 * 1024, "writing the frame held {peak} bytes");
        let mut reader = FrameReader::default();
        let (kind, body) = reader.read_frame(&mut &buf[..]).unwrap().unwrap();
        assert_eq!(kind, RUN);
        assert_eq!(u64::from_le_bytes(body[..8].try_into().unwrap()), 7);
        assert_eq!(serde_json::from_slice::<String>(&body[8..]).unwrap(), text);
    }

    #[test]
    fn frames_round_trip_and_tokens_merge() {
        let mut buf = Vec::new();
        id_frame(&mut buf, ABORT, 7);
        let at = buf.len();
        tokens_frame(&mut buf, 9, 1, 123, "hé".as_bytes());
        extend_tokens(&mut buf, at, 2, "llo".as_bytes());
        prompt_frame(&mut buf, 9, 42);
        json_frame(&mut buf, DONE, Some(9), &serde_json::json!({"ok": true}));

        // Fed one byte at a time, the reader still finds every frame.
        let mut reader = FrameReader::default();
        let source = io::Cursor::new(buf);
        // A source that gives one byte per read.
        struct OneByte(io::Cursor<Vec<u8>>);
        impl Read for OneByte {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = out.len().min(1);
                self.0.read(&mut out[..n])
            }
        }
        let mut source = OneByte(source);
        let mut one = |r: &mut FrameReader| r.fill(&mut source).unwrap() == Filled::Data;
        let mut frames = Vec::new();
        loop {
            while let Some((kind, body)) = reader.next_frame().unwrap() {
                frames.push((kind, reader.body(body).to_vec()));
            }
            if !one(&mut reader) {
                break;
            }
        }
        assert_eq!(frames.len(), 4);
        assert_eq!((frames[0].0, id_of(&frames[0].1)), (ABORT, Some(7)));
        let tokens = tokens_of(&frames[1].1).unwrap();
        assert_eq!(
            (tokens.id, tokens.tokens, tokens.produced_ns, tokens.text),
            (9, 3, 123, "héllo".as_bytes())
        );
        assert_eq!(prompt_of(&frames[2].1), Some((9, 42)));
        assert_eq!(frames[3].0, DONE);
        assert_eq!(&frames[3].1[8..], br#"{"ok":true}"#);
    }

    #[test]
    fn frames_larger_than_one_read_are_put_together() {
        let text = "東京".repeat(100_000);
        let mut buf = Vec::new();
        for id in 0..3 {
            json_frame(&mut buf, RUN, Some(id), &text);
        }
        let mut reader = FrameReader::default();
        let mut source = io::Cursor::new(buf);
        for id in 0..3 {
            let (kind, body) = reader.read_frame(&mut source).unwrap().unwrap();
            assert_eq!((kind, id_of(&body)), (RUN, Some(id)));
            let back: String = serde_json::from_slice(&body[8..]).unwrap();
            assert_eq!(back, text);
        }
        assert!(reader.read_frame(&mut source).unwrap().is_none());
    }

    #[test]
    fn a_bad_length_is_an_error() {
        let mut reader = FrameReader::default();
        let mut bad = io::Cursor::new([0, 0, 0, 0, RUN]);
        reader.fill(&mut bad).unwrap();
        assert!(reader.next_frame().is_err());
    }
}
