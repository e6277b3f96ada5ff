//! Decoding a picture within a memory budget.
//!
//! The decoder gets the format and size its headers gave ([`super::header`]),
//! never more: `image::Limits` caps the width, the height and what the
//! decoder allocates (`max_alloc`). A PNG is handed over without its
//! ancillary chunks: nothing of them is needed for the pixels (colour
//! profiles and gamma are not applied, transparency is dropped with the
//! conversion to RGB), and the png crate inflates an `iCCP` profile as it
//! reads the headers, before any limit on the picture applies; compressed
//! text (`zTXt`, `iTXt`) and animation chunks go with it.

use std::borrow::Cow;
use std::io::Cursor;

use image::{DynamicImage, ImageReader};

use super::header::{Format, ImageInfo};

/// Decodes `bytes`, whose headers said `info`, allocating no more than
/// `budget` bytes for the picture.
///
/// # Errors
/// A message (to follow "image N") when the data does not decode or
/// would take more than the budget.
pub fn decode(bytes: &[u8], info: &ImageInfo, budget: u64) -> Result<DynamicImage, String> {
    let input = match info.format {
        Format::Png => Cow::Owned(png_critical_chunks(bytes)),
        Format::Jpeg | Format::WebP => Cow::Borrowed(bytes),
    };
    let mut reader = ImageReader::with_format(Cursor::new(&input[..]), info.format.image_format());
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(info.width);
    limits.max_image_height = Some(info.height);
    limits.max_alloc = Some(budget);
    reader.limits(limits);
    reader
        .decode()
        .map_err(|e| format!("could not be decoded: {e}"))
}

/// The PNG `bytes` with only its critical chunks (those whose type starts
/// with a capital: IHDR, PLTE, IDAT, IEND), in order, up to IEND.
///
/// A chunk that runs past the end is kept as it is when critical (so the
/// decoder reports the damage as it would have) and dropped otherwise.
pub fn png_critical_chunks(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    out.extend_from_slice(&bytes[..bytes.len().min(8)]);
    let mut at = 8;
    while let Some(head) = bytes.get(at..at + 8) {
        let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let kind = &head[4..8];
        let critical = kind[0].is_ascii_uppercase();
        // Length, type, data, CRC.
        let Some(chunk) = at
            .checked_add(12)
            .and_then(|end| end.checked_add(length))
            .and_then(|end| bytes.get(at..end))
        else {
            if critical {
                out.extend_from_slice(&bytes[at..]);
            }
            break;
        };
        if critical {
            out.extend_from_slice(chunk);
        }
        if kind == b"IEND" {
            break;
        }
        at += chunk.len();
    }
    out
}
