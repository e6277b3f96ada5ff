//! Images as a model takes them: the bytes a request carries, the tag a
//! prompt marks each with, the limits per model, and the check made before
//! a request is queued, from the headers alone ([`header`]): it allocates
//! nothing and inflates nothing, so it runs on the request's own task. The
//! preprocessing before the encoder (decoding, resizing) is the runner's
//! (`backend::image`).

pub mod header;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use header::{Format, ImageInfo};

/// The bytes of one image as the client sent it (JPEG, PNG or WebP).
/// Travels to a runner process as base64.
#[derive(Clone, PartialEq, Eq)]
pub struct ImageData(pub Vec<u8>);

impl std::fmt::Debug for ImageData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ImageData({} bytes)", self.0.len())
    }
}

impl Serialize for ImageData {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Encoded as it is written: no base64 copy of the file in between.
        s.collect_str(&base64::display::Base64Display::new(&self.0, &STANDARD))
    }
}

impl<'de> Deserialize<'de> for ImageData {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// Decodes the text where the deserializer has it (borrowed from
        /// the input when there is nothing to unescape), not a copy.
        struct Base64;
        impl serde::de::Visitor<'_> for Base64 {
            type Value = ImageData;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("base64 image data")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ImageData, E> {
                STANDARD.decode(text).map(ImageData).map_err(E::custom)
            }
        }
        d.deserialize_str(Base64)
    }
}

/// Limits on the images of one request (per model, config `vision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageLimits {
    /// Images in one request.
    pub max_images: usize,
    /// Bytes of one image, as sent (decoded from base64).
    pub max_image_bytes: usize,
    /// Pixels (width × height) of one image.
    pub max_image_pixels: u64,
    /// Bytes decoding one image may take: the decoded picture in the
    /// decoder's layout and the decoder's buffers sized by it, as the
    /// headers tell ([`ImageInfo::decode_bytes`]).
    pub max_image_decode_bytes: u64,
}

impl Default for ImageLimits {
    fn default() -> Self {
        Self {
            max_images: 4,
            max_image_bytes: 10 * 1024 * 1024,
            max_image_pixels: 25_000_000,
            max_image_decode_bytes: DEFAULT_MAX_IMAGE_DECODE_BYTES,
        }
    }
}

/// The default of `max_image_decode_bytes`: 40 MiB, a 12-megapixel
/// photo (a baseline JPEG) or an 8-megapixel RGBA screenshot, and with two
/// copies of a 10 MiB file still under 64 MiB per image (docs/vision.md).
pub const DEFAULT_MAX_IMAGE_DECODE_BYTES: u64 = 40 * 1024 * 1024;

/// The image tag a prompt carries where each image goes.
pub const IMAGE_TAG: &str = "<image>";

/// Decodes an image given as a `data:image/...;base64,` URL or as bare
/// base64 (Ollama's `images`, JSON-RPC's `images`).
///
/// # Errors
/// A message naming what is wrong (not base64, another kind of URL).
pub fn decode_base64_image(text: &str) -> Result<Vec<u8>, String> {
    let payload = if let Some(rest) = text.strip_prefix("data:") {
        let (header, data) = rest
            .split_once(',')
            .ok_or("a data URL must have a `,` before its data")?;
        if !header.ends_with(";base64") {
            return Err("a data URL must be base64 (`data:image/png;base64,...`)".into());
        }
        data
    } else {
        text
    };
    // Line breaks are allowed (MIME-style base64); copied out only if any.
    let compact: std::borrow::Cow<'_, [u8]> = if payload.bytes().any(|b| b.is_ascii_whitespace()) {
        payload
            .bytes()
            .filter(|b| !b.is_ascii_whitespace())
            .collect::<Vec<u8>>()
            .into()
    } else {
        payload.as_bytes().into()
    };
    STANDARD
        .decode(&compact)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(&compact))
        .map_err(|e| format!("is not valid base64 image data ({e})"))
}

/// Reads an image's format and dimensions from its headers, without
/// decoding or inflating anything, and checks them against `limits`.
///
/// # Errors
/// A message (without the image's number) for an unknown format, a header
/// that does not parse, or an image over the limits (the message then says
/// "over the limit" and names the setting).
pub fn inspect(bytes: &[u8], limits: &ImageLimits) -> Result<ImageInfo, String> {
    if bytes.len() > limits.max_image_bytes {
        return Err(format!(
            "is {} bytes, over the limit of {} (vision.max_image_bytes)",
            bytes.len(),
            limits.max_image_bytes
        ));
    }
    let info = header::read(bytes)?;
    let (width, height) = (info.width, info.height);
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.max_image_pixels {
        return Err(format!(
            "is {width}x{height} ({pixels} pixels), over the limit of {} pixels (vision.max_image_pixels)",
            limits.max_image_pixels
        ));
    }
    if info.decode_bytes > limits.max_image_decode_bytes {
        return Err(format!(
            "is a {width}x{height} {} whose decoding takes {} bytes, over the limit of {} (vision.max_image_decode_bytes)",
            info.format.name(),
            info.decode_bytes,
            limits.max_image_decode_bytes
        ));
    }
    Ok(info)
}
