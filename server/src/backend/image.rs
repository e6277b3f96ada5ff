//! Images for vision models: the bytes a request carries, the cheap check
//! made before a request is queued, and the preprocessing done in the
//! model's runner before the vision encoder runs.
//!
//! Preprocessing follows Rockchip's multimodal demo: the picture, as RGB,
//! is padded to a square with the model's background colour (centred),
//! then resized to the encoder's input size with bilinear interpolation
//! as OpenCV's `INTER_LINEAR` does it (four neighbours around each
//! output pixel's centre, no smoothing when shrinking). Both steps are
//! done at once here: the picture is resized straight to the part of the
//! input the square's content covers, and the bands around it are filled
//! with the background, without building the padded square first.

use std::io::Cursor;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use image::{ImageFormat, ImageReader, RgbImage};
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
    let (x0, y0) = ((width - content_w) / 2, (height - content_h) / 2);
    let stride = width as usize * 3;
    bilinear(
        picture,
        content_w,
        content_h,
        &mut canvas,
        (x0 as usize * 3, y0 as usize),
        stride,
    );
    canvas
}

/// One output coordinate's two source neighbours and the second one's
/// weight, in 1/2048ths (OpenCV's pixel-centre mapping, clamped at the
/// edges).
fn taps(out: u32, source: u32) -> Vec<(usize, usize, u32)> {
    let scale = f64::from(source) / f64::from(out);
    let last = source as usize - 1;
    (0..out)
        .map(|i| {
            let at = ((f64::from(i) + 0.5) * scale - 0.5).max(0.0);
            let left = (at.floor() as usize).min(last);
            let right = (left + 1).min(last);
            let weight = ((at - left as f64) * 2048.0).round().clamp(0.0, 2048.0) as u32;
            (left, right, weight)
        })
        .collect()
}

/// Resizes `picture` to `out_w` × `out_h` into `canvas`, whose row
/// `top + y` at byte `left + 3x` receives output pixel (x, y).
fn bilinear(
    picture: &RgbImage,
    out_w: u32,
    out_h: u32,
    canvas: &mut RgbImage,
    (left, top): (usize, usize),
    stride: usize,
) {
    let (w, h) = picture.dimensions();
    let src = picture.as_raw();
    let src_stride = w as usize * 3;
    let xs = taps(out_w, w);
    let ys = taps(out_h, h);
    let out = &mut **canvas;
    for (y, &(top_row, bottom_row, wy)) in ys.iter().enumerate() {
        let upper = &src[top_row * src_stride..][..src_stride];
        let lower = &src[bottom_row * src_stride..][..src_stride];
        let row = &mut out[(top + y) * stride + left..][..out_w as usize * 3];
        for (pixel, &(l, r, wx)) in row.chunks_exact_mut(3).zip(&xs) {
            for c in 0..3 {
                let mix = |line: &[u8]| {
                    u32::from(line[l * 3 + c]) * (2048 - wx) + u32::from(line[r * 3 + c]) * wx
                };
                let value = mix(upper) * (2048 - wy) + mix(lower) * wy;
                // Rounded: the sum carries 2048 × 2048 = 2^22 of scale.
                pixel[c] = ((value + (1 << 21)) >> 22) as u8;
            }
        }
    }
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
        let wrapped = format!("{}\n{}", &b64[..8], &b64[8..]);
        assert_eq!(decode_base64_image(&wrapped).unwrap(), bytes);
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
    fn bilinear_takes_the_two_neighbours_of_each_pixel_centre() {
        // 4x1 to 2x1: output centres fall at source 0.5 and 2.5.
        let picture = RgbImage::from_fn(4, 1, |x, _| {
            let v = [0, 100, 200, 255][x as usize];
            image::Rgb([v, v, v])
        });
        let out = fit(&picture, 2, 2, [7, 7, 7]);
        // The 4x1 picture in a 4x4 square, on 2x2: one content row of 2 at y 0
        // (rounded 0.5 up to 1 row, centred at (2 - 1) / 2 = 0).
        assert_eq!(out.get_pixel(0, 0).0, [50, 50, 50]);
        assert_eq!(out.get_pixel(1, 0).0, [228, 228, 228]);
        assert_eq!(out.get_pixel(0, 1).0, [7, 7, 7]);
        // Same size: the picture itself.
        let same = fit(&picture, 4, 1, [0, 0, 0]);
        assert_eq!(same.get_pixel(1, 0).0, [100, 100, 100]);
    }

    #[test]
    fn image_data_travels_as_base64() {
        let data = ImageData(vec![0, 1, 2, 255]);
        let json = serde_json::to_string(&data).unwrap();
        assert_eq!(json, "\"AAEC/w==\"");
        assert_eq!(serde_json::from_str::<ImageData>(&json).unwrap(), data);
    }
}
