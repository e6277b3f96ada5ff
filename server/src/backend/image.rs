//! Images for vision models: the bytes a request carries, the cheap check
//! made before a request is queued, and the preprocessing done in the
//! model's runner before the vision encoder runs.
//!
//! Preprocessing follows Rockchip's multimodal demo: the picture, as RGB,
//! is padded to a square with the model's background colour (centred),
//! then resized (bilinear) to the encoder's input size. Both steps are
//! done at once here: the picture is resized straight to the part of the
//! input the square's content covers, and the bands around it are filled
//! with the background, which gives the same pixels without building the
//! padded square first.

use std::io::Cursor;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use image::{ImageFormat, ImageReader, RgbImage, imageops};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
        s.serialize_str(&STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for ImageData {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD
            .decode(text)
            .map(Self)
            .map_err(serde::de::Error::custom)
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
}

impl Default for ImageLimits {
    fn default() -> Self {
        Self {
            max_images: 4,
            max_image_bytes: 10 * 1024 * 1024,
            max_image_pixels: 25_000_000,
        }
    }
}

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
    let compact: String = payload.chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD
        .decode(compact.as_bytes())
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(compact.as_bytes()))
        .map_err(|e| format!("is not valid base64 image data ({e})"))
}

/// What the cheap check learns of an image: its format and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// `jpeg`, `png` or `webp`.
    pub format: &'static str,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

fn format_name(format: ImageFormat) -> Option<&'static str> {
    match format {
        ImageFormat::Jpeg => Some("jpeg"),
        ImageFormat::Png => Some("png"),
        ImageFormat::WebP => Some("webp"),
        _ => None,
    }
}

/// Reads an image's format and dimensions from its header, without
/// decoding its pixels, and checks them against `limits`.
///
/// # Errors
/// A message (without the image's number) for an unknown format, a header
/// that does not decode, or an image over the limits.
pub fn inspect(bytes: &[u8], limits: &ImageLimits) -> Result<ImageInfo, String> {
    if bytes.len() > limits.max_image_bytes {
        return Err(format!(
            "is {} bytes, over the limit of {} (vision.max_image_bytes)",
            bytes.len(),
            limits.max_image_bytes
        ));
    }
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("cannot be read: {e}"))?;
    let format = reader
        .format()
        .and_then(format_name)
        .ok_or("is not a JPEG, PNG or WebP image")?;
    let (width, height) = reader
        .into_dimensions()
        .map_err(|e| format!("is not a valid {format} image: {e}"))?;
    let pixels = u64::from(width) * u64::from(height);
    if width == 0 || height == 0 {
        return Err("has no pixels".into());
    }
    if pixels > limits.max_image_pixels {
        return Err(format!(
            "is {width}x{height} ({pixels} pixels), over the limit of {} pixels (vision.max_image_pixels)",
            limits.max_image_pixels
        ));
    }
    Ok(ImageInfo {
        format,
        width,
        height,
    })
}

/// Decodes `bytes` and makes the encoder's input: `width` × `height` RGB
/// pixels, row by row (NHWC, one byte per channel), the picture centred
/// on `background` as if padded to a square and then resized.
///
/// # Errors
/// A message when the image does not decode.
pub fn prepare(
    bytes: &[u8],
    width: u32,
    height: u32,
    background: [u8; 3],
    max_pixels: u64,
) -> Result<Vec<u8>, String> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("cannot be read: {e}"))?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(max_pixels.saturating_mul(4).max(1 << 20));
    reader.limits(limits);
    let picture = reader
        .decode()
        .map_err(|e| format!("could not be decoded: {e}"))?
        .into_rgb8();
    Ok(fit(&picture, width, height, background).into_raw())
}

/// Pads `picture` to a square with `background` and resizes it to
/// `width` × `height`, in one resize of the picture alone.
pub fn fit(picture: &RgbImage, width: u32, height: u32, background: [u8; 3]) -> RgbImage {
    let (w, h) = picture.dimensions();
    let side = f64::from(w.max(h));
    // The picture's share of the square, scaled to the target.
    let content_w = ((f64::from(w) * f64::from(width) / side).round() as u32).clamp(1, width);
    let content_h = ((f64::from(h) * f64::from(height) / side).round() as u32).clamp(1, height);
    let mut canvas = RgbImage::from_pixel(width, height, image::Rgb(background));
    let resized = if (content_w, content_h) == (w, h) {
        picture.clone()
    } else {
        imageops::resize(
            picture,
            content_w,
            content_h,
            imageops::FilterType::Triangle,
        )
    };
    let x = i64::from((width - content_w) / 2);
    let y = i64::from((height - content_h) / 2);
    imageops::replace(&mut canvas, &resized, x, y);
    canvas
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32, colour: [u8; 3]) -> Vec<u8> {
        let picture = RgbImage::from_pixel(width, height, image::Rgb(colour));
        let mut out = Cursor::new(Vec::new());
        picture.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn data_urls_and_bare_base64_decode() {
        let bytes = png(2, 2, [1, 2, 3]);
        let b64 = STANDARD.encode(&bytes);
        assert_eq!(decode_base64_image(&b64).unwrap(), bytes);
        let url = format!("data:image/png;base64,{b64}");
        assert_eq!(decode_base64_image(&url).unwrap(), bytes);
        assert!(decode_base64_image("data:image/png,rawtext").is_err());
        assert!(decode_base64_image("not base64 at all!").is_err());
    }

    #[test]
    fn inspect_reads_the_header_and_applies_limits() {
        let limits = ImageLimits::default();
        let info = inspect(&png(30, 20, [0, 0, 0]), &limits).unwrap();
        assert_eq!((info.format, info.width, info.height), ("png", 30, 20));
        let err = inspect(b"GIF89a....", &limits).unwrap_err();
        assert!(err.contains("not a JPEG, PNG or WebP"), "{err}");
        let mut truncated = png(30, 20, [0, 0, 0]);
        truncated.truncate(20);
        assert!(inspect(&truncated, &limits).is_err());
        let small = ImageLimits {
            max_image_pixels: 100,
            ..limits
        };
        let err = inspect(&png(30, 20, [0, 0, 0]), &small).unwrap_err();
        assert!(err.contains("600 pixels"), "{err}");
        let tiny = ImageLimits {
            max_image_bytes: 10,
            ..limits
        };
        assert!(
            inspect(&png(30, 20, [0, 0, 0]), &tiny)
                .unwrap_err()
                .contains("bytes")
        );
    }

    #[test]
    fn a_wide_picture_is_centred_between_background_bands() {
        // 40x20 red on a 20x20 target: rows 0-4 and 15-19 are background.
        let pixels = prepare(&png(40, 20, [255, 0, 0]), 20, 20, [128, 128, 128], 1 << 20).unwrap();
        assert_eq!(pixels.len(), 20 * 20 * 3);
        let at = |x: usize, y: usize| &pixels[(y * 20 + x) * 3..(y * 20 + x) * 3 + 3];
        assert_eq!(at(10, 0), [128, 128, 128]);
        assert_eq!(at(10, 4), [128, 128, 128]);
        assert_eq!(at(0, 5), [255, 0, 0]);
        assert_eq!(at(19, 14), [255, 0, 0]);
        assert_eq!(at(10, 15), [128, 128, 128]);
        // A tall one: columns instead of rows.
        let pixels = prepare(&png(10, 20, [0, 0, 255]), 20, 20, [0, 0, 0], 1 << 20).unwrap();
        let at = |x: usize, y: usize| &pixels[(y * 20 + x) * 3..(y * 20 + x) * 3 + 3];
        assert_eq!(at(4, 10), [0, 0, 0]);
        assert_eq!(at(5, 10), [0, 0, 255]);
        assert_eq!(at(14, 10), [0, 0, 255]);
        assert_eq!(at(15, 10), [0, 0, 0]);
    }

    #[test]
    fn image_data_travels_as_base64() {
        let data = ImageData(vec![0, 1, 2, 255]);
        let json = serde_json::to_string(&data).unwrap();
        assert_eq!(json, "\"AAEC/w==\"");
        assert_eq!(serde_json::from_str::<ImageData>(&json).unwrap(), data);
    }
}
