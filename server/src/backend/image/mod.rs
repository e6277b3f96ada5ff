//! Images for vision models: the preprocessing done in the model's runner
//! before the vision encoder runs. The bytes, limits and the check before
//! queueing are the model's (`model::image`).
//!
//! The invariant: no image work is sized by anything but the limits. The
//! preprocessing checks the headers again, decodes within
//! `max_image_decode_bytes` (`decode`), and resizes reading the picture
//! only where the interpolation samples it (`resize`). docs/vision.md
//! states the resulting bound.

mod decode;
mod resize;
#[cfg(test)]
pub(crate) mod tests;

pub use resize::{RgbSource, fit};

pub use crate::model::image::{
    DEFAULT_MAX_IMAGE_DECODE_BYTES, Format, IMAGE_TAG, ImageData, ImageInfo, ImageLimits,
    decode_base64_image, header, inspect,
};

/// Decodes `bytes` and makes the encoder's input: `width` × `height` RGB
/// pixels, row by row (NHWC, one byte per channel), the picture centred
/// on `background` as if padded to a square and then resized.
///
/// The headers are checked against `limits` again first, so nothing is
/// allocated for a picture over them; the decode is held to
/// `max_image_decode_bytes`.
///
/// # Errors
/// A message when the image is over the limits or does not decode.
pub fn prepare(
    bytes: &[u8],
    width: u32,
    height: u32,
    background: [u8; 3],
    limits: &ImageLimits,
) -> Result<Vec<u8>, String> {
    let info = inspect(bytes, limits)?;
    let picture = decode::decode(bytes, &info, limits.max_image_decode_bytes)?;
    Ok(fit(&picture, width, height, background).into_raw())
}
