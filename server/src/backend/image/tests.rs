use std::io::Cursor;

use flate2::{Compress, Compression, FlushCompress};
use image::{DynamicImage, ImageFormat, RgbImage};
use serde_json::json;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::*;

// A global allocator is an unsafe trait; this one only counts (test-only).
#[allow(unsafe_code)]
pub(crate) mod meter;

use meter::peak_of;

const MIB: usize = 1 << 20;

fn encode(picture: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    picture.write_to(&mut out, format).unwrap();
    out.into_inner()
}

fn png(width: u32, height: u32, colour: [u8; 3]) -> Vec<u8> {
    let picture = RgbImage::from_pixel(width, height, image::Rgb(colour));
    encode(&picture.into(), ImageFormat::Png)
}

/// A picture with something in every pixel, in `colour`'s layout.
fn varied(width: u32, height: u32, colour: image::ColorType) -> DynamicImage {
    let rgba = image::RgbaImage::from_fn(width, height, |x, y| {
        image::Rgba([
            (x * 3) as u8,
            (y * 5) as u8,
            ((x ^ y) * 7) as u8,
            (x + y) as u8,
        ])
    });
    match colour {
        image::ColorType::L8 => DynamicImage::ImageRgba8(rgba).into_luma8().into(),
        image::ColorType::Rgb8 => DynamicImage::ImageRgba8(rgba).into_rgb8().into(),
        image::ColorType::La16 => DynamicImage::ImageRgba8(rgba).into_luma_alpha16().into(),
        image::ColorType::Rgba16 => DynamicImage::ImageRgba8(rgba).into_rgba16().into(),
        _ => rgba.into(),
    }
}

/// A zlib stream that inflates to `total` zero bytes (whole MiB): the
/// first MiB compressed, then the second MiB's compressed block (only
/// references back into zeros, so it inflates to a MiB of zeros wherever
/// it stands) repeated, an empty last block, and the checksum.
fn zeros_zlib(total: usize) -> Vec<u8> {
    assert!(total >= 2 * MIB && total % MIB == 0);
    let zeros = vec![0u8; MIB];
    let mut deflate = Compress::new(Compression::best(), true);
    let mut first = Vec::with_capacity(MIB);
    deflate
        .compress_vec(&zeros, &mut first, FlushCompress::Sync)
        .unwrap();
    let mut next = Vec::with_capacity(MIB);
    deflate
        .compress_vec(&zeros, &mut next, FlushCompress::Sync)
        .unwrap();
    let mut out = first;
    for _ in 1..total / MIB {
        out.extend_from_slice(&next);
    }
    // A last fixed-Huffman block holding only its end code.
    out.extend_from_slice(&[0x03, 0x00]);
    // Adler-32 of zeros: the first sum stays 1, the second counts them.
    let adler = ((total % 65521) as u32) << 16 | 1;
    out.extend_from_slice(&adler.to_be_bytes());
    out
}

/// A PNG chunk with its CRC.
fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut crc = flate2::Crc::new();
    crc.update(kind);
    crc.update(data);
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc.sum().to_be_bytes());
    out
}

/// `png` with `chunks` inserted right after IHDR.
fn with_chunks(png: &[u8], chunks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = png[..33].to_vec();
    for chunk in chunks {
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&png[33..]);
    out
}

/// An iCCP chunk whose profile inflates to `inflated` bytes.
fn iccp_bomb(inflated: usize) -> Vec<u8> {
    let mut data = b"bomb\0\0".to_vec();
    data.extend_from_slice(&zeros_zlib(inflated));
    chunk(b"iCCP", &data)
}

/// A zTXt chunk whose text inflates to `inflated` bytes.
fn ztxt_bomb(inflated: usize) -> Vec<u8> {
    let mut data = b"Comment\0\0".to_vec();
    data.extend_from_slice(&zeros_zlib(inflated));
    chunk(b"zTXt", &data)
}

/// A compressed iTXt chunk whose text inflates to `inflated` bytes.
fn itxt_bomb(inflated: usize) -> Vec<u8> {
    let mut data = b"Comment\0\x01\x00\0\0".to_vec();
    data.extend_from_slice(&zeros_zlib(inflated));
    chunk(b"iTXt", &data)
}

/// What `prepare` may hold at once, by docs/vision.md: one copy of the
/// file, the decode, and the resize's buffers, sized by the output (the
/// encoder's input and four samples a pixel of two rows: 64 bytes a pixel
/// of its side, counted here as 128 bytes).
fn bound(bytes: &[u8], limits: &ImageLimits, side: u32) -> u64 {
    let info = inspect(bytes, limits).unwrap();
    let side = u64::from(side);
    bytes.len() as u64 + info.decode_bytes + 3 * side * side + 128 * side
}

/// The pictures of the format checks: each encoder the `image` crate
/// has, in several layouts, and files other encoders wrote (a
/// progressive JPEG, lossy and animated WebP).
fn samples() -> Vec<(&'static str, Vec<u8>)> {
    use image::ColorType::{L8, La16, Rgb8, Rgba8, Rgba16};
    let mut samples = vec![];
    for (name, colour) in [
        ("png rgb", Rgb8),
        ("png rgba", Rgba8),
        ("png grey", L8),
        ("png grey+alpha 16", La16),
        ("png rgba 16", Rgba16),
    ] {
        samples.push((name, encode(&varied(640, 480, colour), ImageFormat::Png)));
    }
    samples.push((
        "jpeg baseline",
        encode(&varied(640, 480, Rgb8), ImageFormat::Jpeg),
    ));
    samples.push((
        "jpeg baseline grey",
        encode(&varied(640, 480, L8), ImageFormat::Jpeg),
    ));
    samples.push((
        "webp lossless rgb",
        encode(&varied(640, 480, Rgb8), ImageFormat::WebP),
    ));
    samples.push((
        "webp lossless rgba",
        encode(&varied(640, 480, Rgba8), ImageFormat::WebP),
    ));
    let fixtures: [(&str, &[u8]); 5] = [
        (
            "jpeg progressive 4:2:0",
            include_bytes!("testdata/progressive.jpg"),
        ),
        (
            "jpeg progressive 4:4:4",
            include_bytes!("testdata/progressive-444.jpg"),
        ),
        ("webp lossy", include_bytes!("testdata/lossy.webp")),
        (
            "webp lossy+alpha",
            include_bytes!("testdata/lossy-alpha.webp"),
        ),
        ("webp animated", include_bytes!("testdata/animated.webp")),
    ];
    for (name, bytes) in fixtures {
        samples.push((name, bytes.to_vec()));
    }
    samples
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
fn image_data_travels_as_base64() {
    let data = ImageData(vec![0, 1, 2, 255]);
    let json = serde_json::to_string(&data).unwrap();
    assert_eq!(json, "\"AAEC/w==\"");
    assert_eq!(serde_json::from_str::<ImageData>(&json).unwrap(), data);
}

#[test]
fn image_data_is_written_and_read_without_a_base64_copy_of_the_file() {
    let data = ImageData(vec![7; 3 * MIB]);
    let mut json = Vec::with_capacity(5 * MIB);
    let ((), peak) = peak_of(|| serde_json::to_writer(&mut json, &data).unwrap());
    assert!(peak < 64 * 1024, "writing held {peak}");
    let (back, peak) = peak_of(|| serde_json::from_slice::<ImageData>(&json).unwrap());
    assert!(peak < 3 * MIB as u64 + 64 * 1024, "reading held {peak}");
    assert!(back == data);
    // Escaped text (as another writer may send it) and an owned string
    // read too.
    let escaped: ImageData = serde_json::from_str(r#""\/\/\/\/""#).unwrap();
    assert_eq!(escaped.0, [255; 3]);
    let owned: ImageData = serde_json::from_value(json!("////")).unwrap();
    assert_eq!(owned.0, [255; 3]);
}

#[test]
fn inspect_reads_the_header_and_applies_limits() {
    let limits = ImageLimits::default();
    let info = inspect(&png(30, 20, [0, 0, 0]), &limits).unwrap();
    assert_eq!(
        (info.format, info.width, info.height),
        (Format::Png, 30, 20)
    );
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
    // 3000x2000 RGB: 18 MB decoded, over a 16 MiB budget.
    let budget = ImageLimits {
        max_image_decode_bytes: 16 << 20,
        ..limits
    };
    let err = inspect(&png(3000, 2000, [0, 0, 0]), &budget).unwrap_err();
    assert!(
        err.contains("is a 3000x2000 png whose decoding takes 19075579 bytes, over the limit of 16777216 (vision.max_image_decode_bytes)"),
        "{err}"
    );
}

#[test]
fn the_header_check_agrees_with_the_decoder_on_every_sample() {
    for (name, bytes) in samples() {
        let info = header::read(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let reader = image::ImageReader::new(Cursor::new(&bytes))
            .with_guessed_format()
            .unwrap();
        assert_eq!(reader.format(), Some(info.format.image_format()), "{name}");
        let (width, height) = reader.into_dimensions().unwrap();
        assert_eq!((info.width, info.height), (width, height), "{name}");
    }
}

#[test]
fn decoding_holds_no_more_than_the_header_said_on_every_sample() {
    let limits = ImageLimits::default();
    for (name, bytes) in samples() {
        let info = inspect(&bytes, &limits).unwrap();
        let (picture, peak) = peak_of(|| decode::decode(&bytes, &info, u64::MAX).unwrap());
        // One copy of the file (the decoder's, or the PNG without its
        // ancillary chunks) besides the budgeted decode.
        let allowed = bytes.len() as u64 + info.decode_bytes;
        eprintln!(
            "{name}: {} bytes, decode held {peak}, estimated {} ({:.0}% used)",
            bytes.len(),
            info.decode_bytes,
            100.0 * peak as f64 / allowed as f64
        );
        assert!(peak <= allowed, "{name}: held {peak}, allowed {allowed}");
        assert_eq!(
            (picture.width(), picture.height()),
            (info.width, info.height)
        );
    }
}

#[test]
fn preparing_gives_what_decoding_whole_and_converting_to_rgb_gave() {
    for (name, bytes) in samples() {
        let whole = image::load_from_memory(&bytes).unwrap().into_rgb8();
        let expected = fit(&whole, 131, 131, [128, 128, 128]).into_raw();
        let limits = ImageLimits::default();
        let (pixels, peak) =
            peak_of(|| prepare(&bytes, 131, 131, [128, 128, 128], &limits).unwrap());
        assert!(pixels == expected, "{name}");
        assert!(peak <= bound(&bytes, &limits, 131), "{name}: {peak}");
    }
}

#[test]
fn a_picture_of_one_long_row_costs_its_decode_and_no_more() {
    // 4 million grey pixels in one row: 4 MB decoded (and the PNG
    // decoder's rows), whose row as RGB would be 12 MB.
    let picture: DynamicImage =
        image::GrayImage::from_fn(4_000_000, 1, |x, _| image::Luma([(x % 251) as u8])).into();
    let bytes = encode(&picture, ImageFormat::Png);
    let limits = ImageLimits::default();
    let (pixels, peak) = peak_of(|| prepare(&bytes, 448, 448, [0, 0, 0], &limits).unwrap());
    assert!(peak <= bound(&bytes, &limits, 448), "held {peak}");
    assert_eq!(
        pixels,
        fit(&picture.to_rgb8(), 448, 448, [0, 0, 0]).into_raw()
    );
}

#[test]
fn a_wide_picture_is_centred_between_background_bands() {
    let limits = ImageLimits::default();
    // 40x20 red on a 20x20 target: rows 0-4 and 15-19 are background.
    let pixels = prepare(&png(40, 20, [255, 0, 0]), 20, 20, [128, 128, 128], &limits).unwrap();
    assert_eq!(pixels.len(), 20 * 20 * 3);
    let at = |x: usize, y: usize| &pixels[(y * 20 + x) * 3..(y * 20 + x) * 3 + 3];
    assert_eq!(at(10, 0), [128, 128, 128]);
    assert_eq!(at(10, 4), [128, 128, 128]);
    assert_eq!(at(0, 5), [255, 0, 0]);
    assert_eq!(at(19, 14), [255, 0, 0]);
    assert_eq!(at(10, 15), [128, 128, 128]);
    // A tall one: columns instead of rows.
    let pixels = prepare(&png(10, 20, [0, 0, 255]), 20, 20, [0, 0, 0], &limits).unwrap();
    let at = |x: usize, y: usize| &pixels[(y * 20 + x) * 3..(y * 20 + x) * 3 + 3];
    assert_eq!(at(4, 10), [0, 0, 0]);
    assert_eq!(at(5, 10), [0, 0, 255]);
    assert_eq!(at(14, 10), [0, 0, 255]);
    assert_eq!(at(15, 10), [0, 0, 0]);
}

#[test]
fn the_bomb_builder_makes_what_it_says() {
    use std::io::Read as _;
    let stream = zeros_zlib(3 * MIB);
    let mut inflated = Vec::new();
    flate2::read::ZlibDecoder::new(&stream[..])
        .read_to_end(&mut inflated)
        .unwrap();
    assert_eq!(inflated.len(), 3 * MIB);
    assert!(inflated.iter().all(|&b| b == 0));
    // About a thousand to one.
    assert!(zeros_zlib(256 * MIB).len() < 300 * 1024);
}

#[test]
fn a_png_whose_profile_inflates_to_hundreds_of_mib_costs_its_size_not_the_profile() {
    let picture = png(64, 48, [10, 200, 30]);
    let bomb = with_chunks(&picture, &[iccp_bomb(512 * MIB)]);
    let limits = ImageLimits::default();
    // The check before queueing allocates nothing at all.
    let (info, peak) = peak_of(|| inspect(&bomb, &limits).unwrap());
    assert_eq!((info.width, info.height), (64, 48));
    assert_eq!(peak, 0, "the header check allocated");
    // The preprocessing holds the PNG without the profile, and the picture.
    let (pixels, peak) = peak_of(|| prepare(&bomb, 32, 32, [0, 0, 0], &limits).unwrap());
    assert!(
        peak <= bound(&bomb, &limits, 32),
        "preparing held {peak} bytes"
    );
    assert!(peak < 2 * MIB as u64, "preparing held {peak} bytes");
    assert_eq!(&pixels[..3], [0, 0, 0]);
    assert_eq!(&pixels[16 * 32 * 3..][..3], [10, 200, 30]);
    assert_eq!(
        pixels,
        prepare(&picture, 32, 32, [0, 0, 0], &limits).unwrap()
    );
}

#[test]
fn pngs_whose_text_inflates_to_hundreds_of_mib_cost_their_size_not_the_text() {
    let picture = png(64, 48, [10, 200, 30]);
    let limits = ImageLimits::default();
    let bombs = [
        with_chunks(&picture, &[ztxt_bomb(256 * MIB)]),
        with_chunks(&picture, &[itxt_bomb(256 * MIB)]),
        with_chunks(
            &picture,
            &[
                ztxt_bomb(64 * MIB),
                itxt_bomb(64 * MIB),
                iccp_bomb(64 * MIB),
            ],
        ),
    ];
    for bomb in bombs {
        let (_, peak) = peak_of(|| inspect(&bomb, &limits).unwrap());
        assert_eq!(peak, 0, "the header check allocated");
        let (pixels, peak) = peak_of(|| prepare(&bomb, 32, 32, [0, 0, 0], &limits).unwrap());
        assert!(peak < 2 * MIB as u64, "preparing held {peak} bytes");
        assert_eq!(&pixels[16 * 32 * 3..][..3], [10, 200, 30]);
    }
}

#[test]
fn the_decoder_gets_only_the_critical_chunks_of_a_png() {
    let picture = png(4, 3, [1, 2, 3]);
    let text = chunk(b"tEXt", b"Title\0hello");
    let gamma = chunk(b"gAMA", &45455u32.to_be_bytes());
    let full = with_chunks(&picture, &[text.clone(), iccp_bomb(2 * MIB), gamma]);
    assert_eq!(decode::png_critical_chunks(&full), picture);
    // Bytes after IEND are dropped; an ancillary chunk cut short is
    // dropped, a critical one kept as it is for the decoder to report.
    let mut trailing = picture.clone();
    trailing.extend_from_slice(b"trailing bytes");
    assert_eq!(decode::png_critical_chunks(&trailing), picture);
    let iend = picture.len() - 12;
    let mut cut_text = picture[..iend].to_vec();
    cut_text.extend_from_slice(&text[..text.len() - 3]);
    assert_eq!(decode::png_critical_chunks(&cut_text), picture[..iend]);
    let cut_idat = &picture[..iend - 5];
    assert_eq!(decode::png_critical_chunks(cut_idat), cut_idat);
}

#[test]
fn the_decode_is_held_to_its_budget() {
    let bytes = png(300, 200, [5, 6, 7]);
    let info = header::read(&bytes).unwrap();
    let err = decode::decode(&bytes, &info, 100_000).unwrap_err();
    assert!(
        err.contains("could not be decoded") && err.contains("limit"),
        "{err}"
    );
    assert!(decode::decode(&bytes, &info, 180_000).is_ok());
    // A picture larger than its headers said is refused, not decoded.
    let smaller = ImageInfo { width: 299, ..info };
    assert!(decode::decode(&bytes, &smaller, u64::MAX).is_err());
}
