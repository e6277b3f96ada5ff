//! The picture the vision benchmarks send: a 1024x768 photo-like JPEG
//! (gradients and fine noise, quality 90), the size a phone picture is
//! scaled to. Shared by `rkllm-bench --vision` and the criterion benchmark.

use std::io::Cursor;

/// The picture, encoded.
pub fn photo_jpeg() -> Vec<u8> {
    let picture = image::RgbImage::from_fn(1024, 768, |x, y| {
        let noise = ((x * 7919 + y * 104_729) % 31) as u8;
        image::Rgb([
            (x / 4) as u8 ^ noise,
            (y / 3) as u8,
            ((x + y) / 7) as u8 ^ (noise / 2),
        ])
    });
    let mut out = Cursor::new(Vec::new());
    let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90);
    picture
        .write_with_encoder(encoder)
        .expect("encoding a JPEG in memory");
    out.into_inner()
}
