//! An image's format, size and decoding cost, read from its headers alone.
//!
//! Each parser reads a few fixed fields and allocates nothing: PNG's
//! signature and IHDR (which must be the first chunk), JPEG's segments up to
//! the first scan header (skipped by their lengths, never read), WebP's RIFF
//! header and first chunk (VP8, VP8L or VP8X). Nothing is inflated or
//! decoded, so the work is bounded by the file's length whatever it holds.
//!
//! `decode_bytes` is an upper bound of the memory the decoder (the `image`
//! crate's, as [`super::decode`] drives it) takes for the picture: the
//! decoded picture in the decoder's own layout and every buffer it sizes by
//! the picture (a progressive JPEG's coefficients, a WebP's YUV planes and
//! animation canvas), plus [`DECODER_OVERHEAD`] for the rest. The file
//! itself and one copy of it are not included (see docs/vision.md).

/// What a decoder takes besides the buffers sized by the picture: Huffman
/// and quantisation tables, a PNG's zlib window and row buffers, a JPEG's
/// MCU row. Checked by the tests in `super::tests`.
pub const DECODER_OVERHEAD: u64 = 1 << 20;

/// The image formats taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JPEG (baseline or progressive).
    Jpeg,
    /// PNG.
    Png,
    /// WebP (lossy, lossless, extended or animated).
    WebP,
}

impl Format {
    /// `jpeg`, `png` or `webp`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Jpeg => "jpeg",
            Self::Png => "png",
            Self::WebP => "webp",
        }
    }

    /// The `image` crate's name of the format.
    pub fn image_format(self) -> image::ImageFormat {
        match self {
            Self::Jpeg => image::ImageFormat::Jpeg,
            Self::Png => image::ImageFormat::Png,
            Self::WebP => image::ImageFormat::WebP,
        }
    }
}

/// What the headers say of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// The format.
    pub format: Format,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The most memory decoding it takes, in bytes (see the module's notes).
    pub decode_bytes: u64,
    /// A WebP that may hold lossless data (`VP8L`, or `VP8X` whose chunks
    /// may be lossless or carry lossless alpha): its decoder builds tables
    /// no limit reaches, so its memory has no bound from the headers.
    pub lossless_webp: bool,
}

impl ImageInfo {
    /// The same picture, marked as a possibly lossless WebP.
    fn lossless(self) -> Self {
        Self {
            lossless_webp: true,
            ..self
        }
    }
}

/// Reads an image's format, size and decoding cost from its headers.
///
/// # Errors
/// A message (to follow "image N") for an unknown format, a header that is
/// cut short or malformed, a picture without pixels, or a kind of JPEG the
/// decoder does not take.
pub fn read(bytes: &[u8]) -> Result<ImageInfo, String> {
    if bytes.starts_with(&PNG_SIGNATURE) {
        png(bytes)
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        jpeg(bytes)
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        webp(bytes)
    } else {
        Err("is not a JPEG, PNG or WebP image".into())
    }
}

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

fn invalid(format: Format, why: impl std::fmt::Display) -> String {
    format!("is not a valid {} image: {why}", format.name())
}

fn be16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn le24(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0])
}

fn le32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// The info of a `width` × `height` picture whose decoding takes
/// `picture_bytes` (already computed in `u64`, so nothing overflows).
fn info(format: Format, width: u32, height: u32, picture_bytes: u64) -> Result<ImageInfo, String> {
    if width == 0 || height == 0 {
        return Err("has no pixels".into());
    }
    Ok(ImageInfo {
        format,
        width,
        height,
        decode_bytes: picture_bytes.saturating_add(DECODER_OVERHEAD),
        lossless_webp: false,
    })
}

/// PNG: the signature, then IHDR as the first chunk (13 bytes: width,
/// height, bit depth, colour type, compression, filter, interlace).
///
/// The decoder is handed the PNG without its ancillary chunks, so a
/// palette's transparency (`tRNS`) is gone: the picture decodes to one
/// sample per channel of the colour type (RGB for a palette), of one byte,
/// or two at 16-bit depth. Rows are unfiltered against the one before,
/// a few at a time: three rows are counted besides the picture.
fn png(bytes: &[u8]) -> Result<ImageInfo, String> {
    let format = Format::Png;
    // Signature (8), length (4), type (4), IHDR's 13 bytes, its CRC (4).
    let Some(chunk) = bytes.get(8..33) else {
        return Err(invalid(format, "it ends inside its IHDR chunk"));
    };
    if &chunk[4..8] != b"IHDR" {
        return Err(invalid(
            format,
            format_args!(
                "its first chunk is {:?}, not IHDR",
                String::from_utf8_lossy(&chunk[4..8])
            ),
        ));
    }
    let length = be32(&chunk[..4]);
    if length != 13 {
        return Err(invalid(
            format,
            format_args!("its IHDR chunk is {length} bytes long, not 13"),
        ));
    }
    let ihdr = &chunk[8..21];
    let (width, height) = (be32(&ihdr[0..4]), be32(&ihdr[4..8]));
    let (depth, colour) = (ihdr[8], ihdr[9]);
    if width > i32::MAX as u32 || height > i32::MAX as u32 {
        return Err(invalid(
            format,
            format_args!("its size {width}x{height} is over PNG's 2^31 - 1"),
        ));
    }
    let channels: u64 = match (colour, depth) {
        (0, 1 | 2 | 4 | 8 | 16) => 1,
        (2, 8 | 16) => 3,
        (3, 1 | 2 | 4 | 8) => 3,
        (4, 8 | 16) => 2,
        (6, 8 | 16) => 4,
        _ => {
            return Err(invalid(
                format,
                format_args!("colour type {colour} with bit depth {depth} does not exist"),
            ));
        }
    };
    if ihdr[10] != 0 || ihdr[11] != 0 || ihdr[12] > 1 {
        return Err(invalid(
            format,
            "its compression, filter or interlace method is unknown",
        ));
    }
    let sample_bytes = if depth == 16 { 2 } else { 1 };
    let pixels = u64::from(width) * u64::from(height);
    // Up to (2^31 - 1)^2 pixels of 8 bytes: saturated, not wrapped.
    let picture = pixels.saturating_mul(channels * sample_bytes);
    let rows = 3 * (u64::from(width) * channels * sample_bytes + 1);
    info(format, width, height, picture.saturating_add(rows))
}

/// A JPEG frame header (SOFn): the size and the colour components.
struct Frame {
    progressive: bool,
    width: u32,
    height: u32,
    /// Each component's horizontal and vertical sampling factors.
    sampling: [(u8, u8); 4],
    components: usize,
}

/// JPEG: SOI, then segments (a marker and a length that counts itself) up
/// to the frame header (SOFn) and on to the first scan header (SOS).
///
/// Segments are skipped by their lengths, their content never read. The
/// first scan header says whether the decoder keeps every component's
/// coefficients for the whole picture (a progressive JPEG, or a sequential
/// one whose first scan does not hold every component) or decodes a row of
/// blocks at a time.
fn jpeg(bytes: &[u8]) -> Result<ImageInfo, String> {
    let format = Format::Jpeg;
    let mut frame: Option<Frame> = None;
    let mut at = 2;
    loop {
        let before = if frame.is_some() {
            "its first scan"
        } else {
            "its frame header"
        };
        match bytes.get(at) {
            None => return Err(invalid(format, format_args!("it ends before {before}"))),
            Some(0xFF) => {}
            Some(_) => {
                return Err(invalid(
                    format,
                    format_args!("there is no marker at byte {at}"),
                ));
            }
        }
        // A marker may be preceded by any number of 0xFF fill bytes.
        while bytes.get(at) == Some(&0xFF) {
            at += 1;
        }
        let Some(&code) = bytes.get(at) else {
            return Err(invalid(format, format_args!("it ends before {before}")));
        };
        at += 1;
        match code {
            // Markers without a segment: TEM and the restart markers.
            0x01 | 0xD0..=0xD7 => continue,
            0xD9 => return Err(invalid(format, format_args!("it ends before {before}"))),
            0x00 | 0xD8 => {
                return Err(invalid(
                    format,
                    format_args!("a stray marker 0x{code:02X} at byte {}", at - 1),
                ));
            }
            _ => {}
        }
        let Some(length) = bytes.get(at..at + 2).map(be16) else {
            return Err(invalid(format, format_args!("it ends before {before}")));
        };
        let length = usize::from(length);
        if length < 2 {
            return Err(invalid(
                format,
                format_args!("the segment at byte {} has length {length}", at - 2),
            ));
        }
        let Some(body) = bytes.get(at + 2..at + length) else {
            return Err(invalid(
                format,
                format_args!("it ends inside the segment at byte {}", at - 2),
            ));
        };
        match code {
            0xC0..=0xC2 => {
                if frame.is_some() {
                    return Err(invalid(format, "it has two frame headers"));
                }
                frame = Some(jpeg_frame(code == 0xC2, body)?);
            }
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                return Err(format!(
                    "is a {} JPEG, which cannot be decoded (baseline and progressive JPEGs can)",
                    match code {
                        0xC3 => "lossless",
                        0xC5..=0xC7 => "hierarchical",
                        _ => "arithmetic-coded",
                    }
                ));
            }
            0xDA => {
                let Some(frame) = frame else {
                    return Err(invalid(format, "a scan comes before the frame header"));
                };
                let in_first_scan = body.first().map_or(0, |&n| usize::from(n));
                return jpeg_info(&frame, in_first_scan);
            }
            _ => {}
        }
        at += length;
    }
}

/// Reads a frame header's body: precision, height, width, components.
fn jpeg_frame(progressive: bool, body: &[u8]) -> Result<Frame, String> {
    let format = Format::Jpeg;
    let Some(head) = body.get(..6) else {
        return Err(invalid(format, "its frame header is cut short"));
    };
    let (height, width) = (u32::from(be16(&head[1..3])), u32::from(be16(&head[3..5])));
    let components = usize::from(head[5]);
    if !(1..=4).contains(&components) {
        return Err(invalid(
            format,
            format_args!("it has {components} colour components (1 to 4 can be decoded)"),
        ));
    }
    let Some(list) = body.get(6..6 + 3 * components) else {
        return Err(invalid(format, "its frame header is cut short"));
    };
    let mut sampling = [(1, 1); 4];
    for (slot, component) in sampling.iter_mut().zip(list.chunks_exact(3)) {
        let (h, v) = (component[1] >> 4, component[1] & 0x0F);
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
            return Err(invalid(
                format,
                format_args!("a component has sampling factors {h}x{v}"),
            ));
        }
        *slot = (h, v);
    }
    Ok(Frame {
        progressive,
        width,
        height,
        sampling,
        components,
    })
}

/// The decoding cost of a JPEG frame whose first scan holds
/// `in_first_scan` components: the output (one byte per pixel for grey,
/// three for colour, four counted for four components) and, when the
/// decoder keeps the whole picture's coefficients, two bytes per sample of
/// every component over the picture padded to whole MCUs.
fn jpeg_info(frame: &Frame, in_first_scan: usize) -> Result<ImageInfo, String> {
    let (width, height) = (u64::from(frame.width), u64::from(frame.height));
    let per_pixel = match frame.components {
        1 => 1,
        3 => 3,
        _ => 4,
    };
    let mut total = width * height * per_pixel;
    if frame.progressive || in_first_scan < frame.components {
        let used = &frame.sampling[..frame.components];
        let h_max = u64::from(used.iter().map(|s| s.0).max().unwrap_or(1));
        let v_max = u64::from(used.iter().map(|s| s.1).max().unwrap_or(1));
        let mcus = width.div_ceil(8 * h_max) * height.div_ceil(8 * v_max);
        for &(h, v) in used {
            total += mcus * 64 * u64::from(h) * u64::from(v) * 2;
        }
    }
    info(Format::Jpeg, frame.width, frame.height, total)
}

/// WebP: `RIFF`, its size, `WEBP`, then the first chunk: `VP8 ` (lossy),
/// `VP8L` (lossless) or `VP8X` (extended: the canvas size and flags for
/// alpha and animation; the image chunks follow).
///
/// Decoding a lossy picture takes its YUV planes (padded to 16-pixel
/// macroblocks) besides the output; a lossless one decodes as RGBA, copied
/// to RGB when it has no alpha; an extended one may carry alpha (decoded
/// as a lossless picture, green kept), and an animated one keeps a canvas
/// and the frame besides the output.
fn webp(bytes: &[u8]) -> Result<ImageInfo, String> {
    let format = Format::WebP;
    let Some(head) = bytes.get(12..20) else {
        return Err(invalid(format, "it ends before its first chunk"));
    };
    let (kind, size) = (&head[..4], le32(&head[4..8]) as usize);
    let payload = &bytes[20..];
    let need = |n: usize| {
        if size < n || payload.len() < n {
            Err(invalid(
                format,
                format_args!(
                    "its {} chunk is cut short",
                    String::from_utf8_lossy(kind).trim_end()
                ),
            ))
        } else {
            Ok(())
        }
    };
    let yuv = |width: u32, height: u32| {
        let blocks = u64::from(width).div_ceil(16) * u64::from(height).div_ceil(16);
        blocks * 384
    };
    match kind {
        b"VP8 " => {
            need(10)?;
            if payload[0] & 1 != 0 {
                return Err(invalid(format, "its frame is not a key frame"));
            }
            if payload[3..6] != [0x9D, 0x01, 0x2A] {
                return Err(invalid(format, "its VP8 frame has no start code"));
            }
            let width = u32::from(u16::from_le_bytes([payload[6], payload[7]]) & 0x3FFF);
            let height = u32::from(u16::from_le_bytes([payload[8], payload[9]]) & 0x3FFF);
            let pixels = u64::from(width) * u64::from(height);
            info(format, width, height, pixels * 3 + yuv(width, height))
        }
        b"VP8L" => {
            need(5)?;
            if payload[0] != 0x2F {
                return Err(invalid(format, "its VP8L chunk has no signature"));
            }
            let fields = le32(&payload[1..5]);
            if fields >> 29 != 0 {
                return Err(invalid(format, "its VP8L version is not 0"));
            }
            let width = (fields & 0x3FFF) + 1;
            let height = ((fields >> 14) & 0x3FFF) + 1;
            let alpha = (fields >> 28) & 1 == 1;
            let pixels = u64::from(width) * u64::from(height);
            info(format, width, height, pixels * if alpha { 4 } else { 7 }).map(ImageInfo::lossless)
        }
        b"VP8X" => {
            need(10)?;
            let animated = payload[0] & 0x02 != 0;
            let width = le24(&payload[4..7]) + 1;
            let height = le24(&payload[7..10]) + 1;
            let pixels = u64::from(width) * u64::from(height);
            // Output 4, alpha 5 (RGBA, then green); animated: canvas and
            // frame 4 each besides.
            let per_pixel = if animated { 17 } else { 9 };
            info(
                format,
                width,
                height,
                pixels * per_pixel + yuv(width, height),
            )
            .map(ImageInfo::lossless)
        }
        other => Err(invalid(
            format,
            format_args!(
                "its first chunk is {:?}, not VP8, VP8L or VP8X",
                String::from_utf8_lossy(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
