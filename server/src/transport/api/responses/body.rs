//! Request bodies as the Responses clients send them: plain JSON, or JSON
//! compressed with zstd (`Content-Encoding: zstd`, which Codex CLI may
//! send). A compressed body is decoded under the same byte limit as a
//! plain one (`limits.max_request_bytes`), and a frame that asks for a
//! window larger than [`MAX_WINDOW_BYTES`] is refused before anything is
//! allocated for it, so a small body cannot make the server hold much
//! memory. A body may hold at most [`MAX_FRAMES`] frames and
//! [`MAX_BLOCKS`] blocks: each costs the decoder work whatever it holds
//! (a raw block clears a 128 KiB buffer), so a body of empty ones cannot
//! cost more than a few milliseconds. Decoding runs on the blocking
//! pool ([`read`]), never on the async workers.

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::http::header::CONTENT_ENCODING;
use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// The largest zstd window accepted: 8 MiB, what zstd's levels up to 19
/// use (without long-distance matching).
pub const MAX_WINDOW_BYTES: u64 = 8 << 20;

/// The most frames one body may hold, skippable frames included. A client
/// compresses a body as one frame; a few concatenated are accepted.
pub const MAX_FRAMES: usize = 64;

/// The most blocks one body may hold, in all its frames. An encoder writes
/// blocks of up to 128 KiB: the largest body accepted
/// (`limits.max_request_bytes` is at most 64 MiB) takes 512.
pub const MAX_BLOCKS: usize = 1024;

const ZSTD_MAGIC: u32 = 0xFD2F_B528;

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// A `Content-Encoding` other than zstd or identity.
    #[error(
        "`Content-Encoding: {0}` is not supported: send the body as it is, or compressed with zstd"
    )]
    Encoding(String),
    /// The decoded body is over the limit.
    #[error(
        "the zstd-compressed request body decodes to more than the limit of {limit} bytes \
         (limits.max_request_bytes)"
    )]
    TooLarge {
        /// `limits.max_request_bytes`.
        limit: usize,
    },
    /// More frames or blocks than a body may hold.
    #[error(
        "the zstd-compressed request body holds more than {limit} {what}, the most one body \
         may hold: compress it as one frame, without flushing between writes"
    )]
    TooManyParts {
        /// `frames` (skippable ones included) or `blocks`.
        what: &'static str,
        /// [`MAX_FRAMES`] or [`MAX_BLOCKS`].
        limit: usize,
    },
    /// Not valid zstd.
    #[error("the request body is not valid zstd: {0}")]
    Corrupt(String),
}

/// The body's JSON: `body` itself, or decoded from zstd when the headers
/// say so. A zstd body is decoded on the blocking pool, so that its
/// decoding never holds up an async worker.
///
/// # Errors
/// An unknown encoding, a corrupt zstd body, one that decodes past
/// `limit` bytes, or one of more than [`MAX_FRAMES`] frames or
/// [`MAX_BLOCKS`] blocks.
pub async fn read(headers: &HeaderMap, body: Bytes, limit: usize) -> Result<Bytes, BodyError> {
    if !zstd(headers)? {
        return Ok(body);
    }
    tokio::task::spawn_blocking(move || unzstd(&body, limit))
        .await
        .map_err(|_| BodyError::Corrupt("its decoding failed".into()))?
        .map(Bytes::from)
}

/// Whether the body is zstd (`false`: as it is).
fn zstd(headers: &HeaderMap) -> Result<bool, BodyError> {
    let encoding = headers.get(CONTENT_ENCODING).map(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .trim()
            .to_ascii_lowercase()
    });
    match encoding.as_deref() {
        None | Some("" | "identity") => Ok(false),
        Some("zstd") => Ok(true),
        Some(other) => Err(BodyError::Encoding(other.to_owned())),
    }
}

/// The window a zstd frame at the start of `input` asks for, read from its
/// header (RFC 8878, 3.1.1.1); `None` for a frame that is not a zstd data
/// frame (a skippable frame) or a header too short to say.
fn window_size(input: &[u8]) -> Option<u64> {
    let magic = u32::from_le_bytes(input.get(..4)?.try_into().ok()?);
    if magic != ZSTD_MAGIC {
        return None;
    }
    let descriptor = *input.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    if !single_segment {
        let window = *input.get(5)?;
        let base = 1u64 << (10 + u32::from(window >> 3));
        return Some(base + (base / 8) * u64::from(window & 7));
    }
    // A single segment: the window is the content size, which follows the
    // dictionary id.
    let dictionary_bytes = [0, 1, 2, 4][usize::from(descriptor & 3)];
    let size_bytes = [1, 2, 4, 8][usize::from(descriptor >> 6)];
    let start = 5 + dictionary_bytes;
    let field = input.get(start..start + size_bytes)?;
    let mut le = [0u8; 8];
    le[..size_bytes].copy_from_slice(field);
    let size = u64::from_le_bytes(le);
    Some(if size_bytes == 2 { size + 256 } else { size })
}

/// Decodes every frame of `input` (skippable frames skipped), a block at
/// a time, refusing output past `limit` bytes and more than [`MAX_FRAMES`]
/// frames or [`MAX_BLOCKS`] blocks.
fn unzstd(mut input: &[u8], limit: usize) -> Result<Vec<u8>, BodyError> {
    let corrupt = |e: FrameDecoderError| BodyError::Corrupt(e.to_string());
    let mut out = Vec::new();
    let mut decoder = FrameDecoder::new();
    if input.is_empty() {
        return Err(BodyError::Corrupt("the body is empty".into()));
    }
    let (mut frames, mut blocks) = (0, 0);
    while !input.is_empty() {
        frames += 1;
        if frames > MAX_FRAMES {
            return Err(BodyError::TooManyParts {
                what: "frames (skippable ones included)",
                limit: MAX_FRAMES,
            });
        }
        if let Some(window) = window_size(input)
            && window > MAX_WINDOW_BYTES
        {
            return Err(BodyError::Corrupt(format!(
                "a frame asks for a {window}-byte window, more than the {MAX_WINDOW_BYTES} \
                 bytes accepted"
            )));
        }
        match decoder.init(&mut input) {
            Ok(()) => {}
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                input = input
                    .get(length as usize..)
                    .ok_or_else(|| BodyError::Corrupt("a skippable frame is cut short".into()))?;
                continue;
            }
            Err(e) => return Err(corrupt(e)),
        }
        loop {
            blocks += 1;
            if blocks > MAX_BLOCKS {
                return Err(BodyError::TooManyParts {
                    what: "blocks",
                    limit: MAX_BLOCKS,
                });
            }
            decoder
                .decode_blocks(&mut input, BlockDecodingStrategy::UptoBlocks(1))
                .map_err(corrupt)?;
            if let Some(bytes) = decoder.collect() {
                if out.len() + bytes.len() > limit {
                    return Err(BodyError::TooLarge { limit });
                }
                out.extend_from_slice(&bytes);
            }
            if decoder.is_finished() {
                break;
            }
            // What the decoder still holds (its window) counts too.
            if out.len() + decoder.can_collect() > limit {
                return Err(BodyError::TooLarge { limit });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use ruzstd::encoding::{CompressionLevel, compress_to_vec};

    fn zstd_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("zstd"));
        headers
    }

    /// `body` read with `headers` under `limit`, as the handlers read it.
    fn decode(headers: &HeaderMap, body: &[u8], limit: usize) -> Result<Vec<u8>, BodyError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(read(headers, Bytes::copy_from_slice(body), limit))
            .map(|json| json.to_vec())
    }

    /// A frame header: no content size, a 1 KiB window.
    const FRAME_HEADER: [u8; 6] = [0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00];
    /// The header of a raw block of no bytes: the last of its frame, or not.
    const LAST_EMPTY_BLOCK: [u8; 3] = [1, 0, 0];
    const EMPTY_BLOCK: [u8; 3] = [0, 0, 0];

    #[test]
    fn a_zstd_body_is_decoded_and_a_plain_one_kept() {
        let json = br#"{"input": "hello", "model": "mock"}"#.repeat(50);
        let packed = compress_to_vec(&json[..], CompressionLevel::Fastest);
        assert!(packed.len() < json.len());
        assert_eq!(decode(&zstd_headers(), &packed, 1 << 20).unwrap(), json);
        assert_eq!(decode(&HeaderMap::new(), &json, 1 << 20).unwrap(), json);
        // Two frames, and a skippable frame between them.
        let mut two = packed.clone();
        two.extend_from_slice(&[0x50, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 1, 2, 3]);
        two.extend_from_slice(&packed);
        assert_eq!(
            decode(&zstd_headers(), &two, 1 << 20).unwrap(),
            [&json[..], &json[..]].concat()
        );
    }

    #[test]
    fn a_body_that_decodes_past_the_limit_is_refused() {
        let big = vec![b' '; 300_000];
        let packed = compress_to_vec(&big[..], CompressionLevel::Fastest);
        assert!(packed.len() < 1000);
        assert_eq!(
            decode(&zstd_headers(), &packed, 100_000),
            Err(BodyError::TooLarge { limit: 100_000 })
        );
        assert!(decode(&zstd_headers(), &packed, 300_000).is_ok());
    }

    #[test]
    fn corrupt_bodies_huge_windows_and_other_encodings_are_refused() {
        assert!(matches!(
            decode(&zstd_headers(), b"{\"not\": \"zstd\"}", 1 << 20),
            Err(BodyError::Corrupt(_))
        ));
        assert!(matches!(
            decode(&zstd_headers(), b"", 1 << 20),
            Err(BodyError::Corrupt(_))
        ));
        // A frame header asking for a 1 GiB window (exponent 20).
        let huge = [0x28, 0xB5, 0x2F, 0xFD, 0x00, 20 << 3, 0, 0, 0];
        let err = decode(&zstd_headers(), &huge, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("window"), "{err}");
        let mut gzip = HeaderMap::new();
        gzip.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert_eq!(
            decode(&gzip, b"x", 1 << 20),
            Err(BodyError::Encoding("gzip".into()))
        );
    }

    #[test]
    fn a_body_of_many_empty_frames_is_refused_naming_the_bound() {
        let frame = [&FRAME_HEADER[..], &LAST_EMPTY_BLOCK].concat();
        // 116,000 empty frames in about a megabyte.
        let many = frame.repeat(116_000);
        let err = decode(&zstd_headers(), &many, 2 << 20).unwrap_err();
        assert_eq!(
            err,
            BodyError::TooManyParts {
                what: "frames (skippable ones included)",
                limit: MAX_FRAMES
            }
        );
        assert!(err.to_string().contains("more than 64 frames"), "{err}");
        // Skippable frames count too.
        let skippable = [0x50, 0x2A, 0x4D, 0x18, 0, 0, 0, 0].repeat(MAX_FRAMES + 1);
        assert!(matches!(
            decode(&zstd_headers(), &skippable, 1 << 20),
            Err(BodyError::TooManyParts {
                limit: MAX_FRAMES,
                ..
            })
        ));
        // Up to the bound, they are read.
        assert_eq!(
            decode(&zstd_headers(), &frame.repeat(MAX_FRAMES), 1 << 20).unwrap(),
            b""
        );
    }

    #[test]
    fn a_frame_of_many_empty_blocks_is_refused_naming_the_bound() {
        let blocks = |n: usize| {
            [
                &FRAME_HEADER[..],
                &EMPTY_BLOCK.repeat(n - 1),
                &LAST_EMPTY_BLOCK,
            ]
            .concat()
        };
        let err = decode(&zstd_headers(), &blocks(300_000), 1 << 20).unwrap_err();
        assert_eq!(
            err,
            BodyError::TooManyParts {
                what: "blocks",
                limit: MAX_BLOCKS
            }
        );
        assert!(err.to_string().contains("more than 1024 blocks"), "{err}");
        assert_eq!(
            decode(&zstd_headers(), &blocks(MAX_BLOCKS), 1 << 20).unwrap(),
            b""
        );
        assert!(decode(&zstd_headers(), &blocks(MAX_BLOCKS + 1), 1 << 20).is_err());
        // The blocks of every frame count together.
        let half = blocks(MAX_BLOCKS / 2 + 1);
        assert!(matches!(
            decode(&zstd_headers(), &half.repeat(2), 1 << 20),
            Err(BodyError::TooManyParts { what: "blocks", .. })
        ));
    }

    #[test]
    fn the_window_is_read_from_the_frame_header() {
        // Window descriptor: exponent 1, mantissa 2 -> 2 KiB + 2 * 256.
        assert_eq!(
            window_size(&[0x28, 0xB5, 0x2F, 0xFD, 0x00, (1 << 3) | 2]),
            Some(2048 + 512)
        );
        // Single segment with a 2-byte content size (+256).
        assert_eq!(
            window_size(&[0x28, 0xB5, 0x2F, 0xFD, 0x60, 0x10, 0x00]),
            Some(0x10 + 256)
        );
        assert_eq!(window_size(&[0x50, 0x2A, 0x4D, 0x18, 0, 0, 0, 0]), None);
    }
}
