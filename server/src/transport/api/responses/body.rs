//! Request bodies as the Responses clients send them: plain JSON, or JSON
//! compressed with zstd (`Content-Encoding: zstd`, which Codex CLI may
//! send). A compressed body is decoded under the same byte limit as a
//! plain one (`limits.max_request_bytes`), and a frame that asks for a
//! window larger than [`MAX_WINDOW_BYTES`] is refused before anything is
//! allocated for it, so a small body cannot make the server hold much
//! memory.

use std::borrow::Cow;

use axum::http::HeaderMap;
use axum::http::header::CONTENT_ENCODING;
use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// The largest zstd window accepted: 8 MiB, what zstd's levels up to 19
/// use (without long-distance matching).
pub const MAX_WINDOW_BYTES: u64 = 8 << 20;

/// How much is decoded between two checks of the limit.
const STEP_BYTES: usize = 64 << 10;

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
    /// Not valid zstd.
    #[error("the request body is not valid zstd: {0}")]
    Corrupt(String),
}

/// The body's JSON: `body` itself, or decoded from zstd when the headers
/// say so.
///
/// # Errors
/// An unknown encoding, a corrupt zstd body, or one that decodes past
/// `limit` bytes.
pub fn decode<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
    limit: usize,
) -> Result<Cow<'a, [u8]>, BodyError> {
    let encoding = headers.get(CONTENT_ENCODING).map(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .trim()
            .to_ascii_lowercase()
    });
    match encoding.as_deref() {
        None | Some("" | "identity") => Ok(Cow::Borrowed(body)),
        Some("zstd") => unzstd(body, limit).map(Cow::Owned),
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

/// Decodes every frame of `input` (skippable frames skipped), refusing
/// output past `limit` bytes.
fn unzstd(mut input: &[u8], limit: usize) -> Result<Vec<u8>, BodyError> {
    let corrupt = |e: FrameDecoderError| BodyError::Corrupt(e.to_string());
    let mut out = Vec::new();
    let mut decoder = FrameDecoder::new();
    if input.is_empty() {
        return Err(BodyError::Corrupt("the body is empty".into()));
    }
    while !input.is_empty() {
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
            decoder
                .decode_blocks(&mut input, BlockDecodingStrategy::UptoBytes(STEP_BYTES))
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

    #[test]
    fn a_zstd_body_is_decoded_and_a_plain_one_kept() {
        let json = br#"{"input": "hello", "model": "mock"}"#.repeat(50);
        let packed = compress_to_vec(&json[..], CompressionLevel::Fastest);
        assert!(packed.len() < json.len());
        assert_eq!(*decode(&zstd_headers(), &packed, 1 << 20).unwrap(), json);
        assert_eq!(*decode(&HeaderMap::new(), &json, 1 << 20).unwrap(), json);
        // Two frames, and a skippable frame between them.
        let mut two = packed.clone();
        two.extend_from_slice(&[0x50, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 1, 2, 3]);
        two.extend_from_slice(&packed);
        assert_eq!(
            *decode(&zstd_headers(), &two, 1 << 20).unwrap(),
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
