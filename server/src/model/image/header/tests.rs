use super::*;

/// A PNG's signature and IHDR chunk (its CRC zeroed: not checked here).
fn png_head(width: u32, height: u32, depth: u8, colour: u8) -> Vec<u8> {
    let mut out = PNG_SIGNATURE.to_vec();
    out.extend_from_slice(&13u32.to_be_bytes());
    out.extend_from_slice(b"IHDR");
    out.extend_from_slice(&width.to_be_bytes());
    out.extend_from_slice(&height.to_be_bytes());
    out.extend_from_slice(&[depth, colour, 0, 0, 0]);
    out.extend_from_slice(&[0; 4]);
    out
}

/// A JPEG segment: marker, length (counting itself), body.
fn segment(marker: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0xFF, marker];
    out.extend_from_slice(&(body.len() as u16 + 2).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A frame header with the given components' sampling factors.
fn sof(marker: u8, width: u16, height: u16, sampling: &[(u8, u8)]) -> Vec<u8> {
    let mut body = vec![8];
    body.extend_from_slice(&height.to_be_bytes());
    body.extend_from_slice(&width.to_be_bytes());
    body.push(sampling.len() as u8);
    for (i, (h, v)) in sampling.iter().enumerate() {
        body.extend_from_slice(&[i as u8 + 1, h << 4 | v, 0]);
    }
    segment(marker, &body)
}

/// A scan header over the first `components` components.
fn sos(components: u8) -> Vec<u8> {
    let mut body = vec![components];
    for i in 0..components {
        body.extend_from_slice(&[i + 1, 0]);
    }
    body.extend_from_slice(&[0, 63, 0]);
    segment(0xDA, &body)
}

fn jpeg_of(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![0xFF, 0xD8];
    for part in parts {
        out.extend_from_slice(part);
    }
    out
}

const COLOUR_420: [(u8, u8); 3] = [(2, 2), (1, 1), (1, 1)];

/// A WebP file whose first chunk is `kind` with `payload`.
fn webp_of(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(payload.len() as u32 + 12).to_le_bytes());
    out.extend_from_slice(b"WEBP");
    out.extend_from_slice(kind);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn vp8(width: u16, height: u16) -> Vec<u8> {
    let mut payload = vec![0x10, 0x02, 0x00, 0x9D, 0x01, 0x2A];
    payload.extend_from_slice(&width.to_le_bytes());
    payload.extend_from_slice(&height.to_le_bytes());
    payload
}

fn vp8l(width: u32, height: u32, alpha: bool) -> Vec<u8> {
    let fields = (width - 1) | (height - 1) << 14 | u32::from(alpha) << 28;
    let mut payload = vec![0x2F];
    payload.extend_from_slice(&fields.to_le_bytes());
    payload
}

fn vp8x(width: u32, height: u32, flags: u8) -> Vec<u8> {
    let mut payload = vec![flags, 0, 0, 0];
    payload.extend_from_slice(&(width - 1).to_le_bytes()[..3]);
    payload.extend_from_slice(&(height - 1).to_le_bytes()[..3]);
    payload
}

fn err(bytes: &[u8]) -> String {
    read(bytes).expect_err("should be refused")
}

#[test]
fn png_headers_give_the_size_and_the_decoded_layout() {
    let cases = [
        // (bit depth, colour type, bytes per pixel decoded)
        (8, 2, 3),  // RGB
        (16, 6, 8), // RGBA, 16-bit
        (8, 3, 3),  // palette: RGB (its transparency is dropped)
        (1, 0, 1),  // 1-bit grey: expanded to a byte
        (16, 4, 4), // grey and alpha, 16-bit
    ];
    for (depth, colour, per_pixel) in cases {
        let info = read(&png_head(30, 20, depth, colour)).unwrap();
        assert_eq!(
            (info.format, info.width, info.height),
            (Format::Png, 30, 20)
        );
        // The picture, and three rows being unfiltered.
        let rows = 3 * (30 * per_pixel + 1);
        assert_eq!(info.decode_bytes, 600 * per_pixel + rows + DECODER_OVERHEAD);
    }
}

#[test]
fn png_headers_cut_short_or_malformed_are_refused() {
    let good = png_head(30, 20, 8, 2);
    for cut in 8..good.len() {
        assert!(
            err(&good[..cut]).contains("is not a valid png image: it ends inside its IHDR"),
            "{cut}"
        );
    }
    // A signature cut short is no PNG at all.
    assert!(err(&good[..7]).contains("not a JPEG, PNG or WebP"));
    let mut other_first = good.clone();
    other_first[12..16].copy_from_slice(b"iCCP");
    assert!(err(&other_first).contains("its first chunk is \"iCCP\", not IHDR"));
    let mut long = good.clone();
    long[8..12].copy_from_slice(&14u32.to_be_bytes());
    assert!(err(&long).contains("IHDR chunk is 14 bytes long"));
    for (depth, colour) in [(4, 2), (16, 3), (8, 5), (0, 0)] {
        let e = err(&png_head(30, 20, depth, colour));
        assert!(e.contains("does not exist"), "{depth} {colour}: {e}");
    }
    let mut interlace = good;
    interlace[28] = 2;
    assert!(err(&interlace).contains("interlace method is unknown"));
}

#[test]
fn png_sizes_of_zero_or_over_the_format_are_refused_and_huge_ones_do_not_overflow() {
    assert_eq!(err(&png_head(0, 20, 8, 2)), "has no pixels");
    assert_eq!(err(&png_head(20, 0, 8, 2)), "has no pixels");
    assert!(err(&png_head(1 << 31, 1, 8, 2)).contains("over PNG's 2^31 - 1"));
    let huge = read(&png_head(i32::MAX as u32, i32::MAX as u32, 16, 6)).unwrap();
    assert_eq!(huge.decode_bytes, u64::MAX);
}

#[test]
fn jpeg_frame_after_many_app_segments_and_fill_bytes_is_found() {
    let mut parts: Vec<Vec<u8>> = (0..2000)
        .map(|i| segment(0xE0 + (i % 16) as u8, &[7; 60]))
        .collect();
    parts.push(vec![0xFF, 0xFF, 0xFF]); // fill bytes before the next marker
    parts.push(segment(0xDB, &[0; 65]));
    parts.push(vec![0xFF, 0xD3]); // a restart marker has no length
    parts.push(sof(0xC0, 640, 480, &COLOUR_420));
    parts.push(segment(0xC4, &[0; 30]));
    parts.push(sos(3));
    let info = read(&jpeg_of(&parts)).unwrap();
    assert_eq!(
        (info.format, info.width, info.height),
        (Format::Jpeg, 640, 480)
    );
    // Sequential, every component in the first scan: the output only.
    assert_eq!(info.decode_bytes, 640 * 480 * 3 + DECODER_OVERHEAD);
}

#[test]
fn jpeg_coefficients_count_when_the_decoder_keeps_them_for_the_whole_picture() {
    // 640x480 at 4:2:0: 40x30 MCUs of 6 blocks of 64 two-byte samples.
    let planes = 40 * 30 * 6 * 64 * 2;
    let progressive = jpeg_of(&[sof(0xC2, 640, 480, &COLOUR_420), sos(1)]);
    assert_eq!(
        read(&progressive).unwrap().decode_bytes,
        640 * 480 * 3 + planes + DECODER_OVERHEAD
    );
    // Sequential, but the first scan holds one component of three.
    let split = jpeg_of(&[sof(0xC1, 640, 480, &COLOUR_420), sos(1)]);
    assert_eq!(
        read(&split).unwrap().decode_bytes,
        640 * 480 * 3 + planes + DECODER_OVERHEAD
    );
    // Grey, progressive: one byte out, 80x60 blocks in.
    let grey = jpeg_of(&[sof(0xC2, 640, 480, &[(1, 1)]), sos(1)]);
    assert_eq!(
        read(&grey).unwrap().decode_bytes,
        640 * 480 + 80 * 60 * 64 * 2 + DECODER_OVERHEAD
    );
    // The largest a JPEG can declare, CMYK, counted without overflow.
    let huge = jpeg_of(&[sof(0xC2, 65535, 65535, &[(4, 4); 4]), sos(4)]);
    assert!(read(&huge).unwrap().decode_bytes > 65535 * 65535 * 4);
}

#[test]
fn jpeg_markers_that_never_reach_the_frame_or_the_scan_are_refused() {
    let app = segment(0xE1, &[1; 100]);
    let frame = sof(0xC0, 64, 48, &COLOUR_420);
    let cases: [(Vec<u8>, &str); 10] = [
        (jpeg_of(&[]), "it ends before its frame header"),
        (
            jpeg_of(&[app.clone(), app.clone()]),
            "it ends before its frame header",
        ),
        (
            jpeg_of(&[app.clone(), vec![0xFF, 0xD9]]),
            "it ends before its frame header",
        ),
        (
            jpeg_of(&[app.clone(), vec![0x12, 0x34]]),
            "there is no marker at byte 106",
        ),
        (
            jpeg_of(&[app.clone(), vec![0xFF]]),
            "it ends before its frame header",
        ),
        (
            jpeg_of(&[app.clone(), sos(3)]),
            "a scan comes before the frame header",
        ),
        (
            jpeg_of(std::slice::from_ref(&frame)),
            "it ends before its first scan",
        ),
        (
            jpeg_of(&[frame.clone(), frame.clone()]),
            "it has two frame headers",
        ),
        (
            jpeg_of(&[vec![0xFF, 0xE1, 0xFF, 0xFF, 1, 2, 3]]),
            "it ends inside the segment at byte 2",
        ),
        (
            jpeg_of(&[vec![0xFF, 0xE1, 0x00, 0x01]]),
            "the segment at byte 2 has length 1",
        ),
    ];
    for (bytes, expected) in cases {
        let e = err(&bytes);
        assert!(e.contains(expected), "{expected:?} not in {e:?}");
        assert!(e.starts_with("is not a valid jpeg image: "), "{e}");
    }
    // A frame header cut short, and one whose length hides its components.
    assert!(err(&jpeg_of(&[segment(0xC0, &[8, 0, 48, 0])])).contains("frame header is cut short"));
    assert!(err(&jpeg_of(&[segment(0xC0, &[8, 0, 48, 0, 64, 3, 1, 0x22])])).contains("cut short"));
}

#[test]
fn jpeg_frames_without_pixels_or_of_an_unsupported_kind_are_refused() {
    assert_eq!(
        err(&jpeg_of(&[sof(0xC0, 64, 0, &COLOUR_420), sos(3)])),
        "has no pixels"
    );
    assert_eq!(
        err(&jpeg_of(&[sof(0xC0, 0, 48, &COLOUR_420), sos(3)])),
        "has no pixels"
    );
    for (marker, kind) in [
        (0xC3, "lossless"),
        (0xC5, "hierarchical"),
        (0xC9, "arithmetic-coded"),
    ] {
        let e = err(&jpeg_of(&[sof(marker, 64, 48, &COLOUR_420), sos(3)]));
        assert!(
            e.contains(&format!("is a {kind} JPEG, which cannot be decoded")),
            "{e}"
        );
    }
    assert!(err(&jpeg_of(&[sof(0xC0, 64, 48, &[]), sos(0)])).contains("0 colour components"));
    assert!(
        err(&jpeg_of(&[sof(0xC0, 64, 48, &[(1, 1); 5]), sos(5)])).contains("5 colour components")
    );
    assert!(
        err(&jpeg_of(&[sof(0xC0, 64, 48, &[(0, 1)]), sos(1)])).contains("sampling factors 0x1")
    );
    assert!(
        err(&jpeg_of(&[sof(0xC0, 64, 48, &[(1, 5)]), sos(1)])).contains("sampling factors 1x5")
    );
}

#[test]
fn webp_headers_give_the_size_of_each_kind() {
    let lossy = read(&webp_of(b"VP8 ", &vp8(100, 50))).unwrap();
    assert_eq!(
        (lossy.format, lossy.width, lossy.height),
        (Format::WebP, 100, 50)
    );
    // RGB out, and YUV over 7x4 macroblocks of 384 bytes.
    assert_eq!(
        lossy.decode_bytes,
        100 * 50 * 3 + 7 * 4 * 384 + DECODER_OVERHEAD
    );
    // The two scaling bits above the 14 of the size are not part of it.
    let scaled = read(&webp_of(b"VP8 ", &vp8(100 | 0xC000, 50 | 0x4000))).unwrap();
    assert_eq!((scaled.width, scaled.height), (100, 50));
    let lossless = read(&webp_of(b"VP8L", &vp8l(16384, 3, false))).unwrap();
    assert_eq!((lossless.width, lossless.height), (16384, 3));
    assert_eq!(lossless.decode_bytes, 16384 * 3 * 7 + DECODER_OVERHEAD);
    let with_alpha = read(&webp_of(b"VP8L", &vp8l(10, 10, true))).unwrap();
    assert_eq!(with_alpha.decode_bytes, 400 + DECODER_OVERHEAD);
    let extended = read(&webp_of(b"VP8X", &vp8x(1 << 24, 1 << 24, 0x10))).unwrap();
    assert_eq!((extended.width, extended.height), (1 << 24, 1 << 24));
    let animated = read(&webp_of(b"VP8X", &vp8x(32, 32, 0x02))).unwrap();
    assert_eq!(
        animated.decode_bytes,
        32 * 32 * 17 + 4 * 384 + DECODER_OVERHEAD
    );
}

#[test]
fn webp_headers_cut_short_or_malformed_are_refused() {
    let good = webp_of(b"VP8 ", &vp8(100, 50));
    for cut in 12..good.len() {
        assert!(
            err(&good[..cut]).starts_with("is not a valid webp image: "),
            "{cut}"
        );
    }
    assert!(err(&good[..11]).contains("not a JPEG, PNG or WebP"));
    let mut wave = good.clone();
    wave[8..12].copy_from_slice(b"WAVE");
    assert!(err(&wave).contains("not a JPEG, PNG or WebP"));
    assert!(err(&webp_of(b"ALPH", &[0; 10])).contains("its first chunk is \"ALPH\""));
    let mut inter = vp8(100, 50);
    inter[0] |= 1;
    assert!(err(&webp_of(b"VP8 ", &inter)).contains("not a key frame"));
    let mut no_start = vp8(100, 50);
    no_start[4] = 0;
    assert!(err(&webp_of(b"VP8 ", &no_start)).contains("no start code"));
    assert_eq!(err(&webp_of(b"VP8 ", &vp8(0, 50))), "has no pixels");
    let mut signature = vp8l(10, 10, false);
    signature[0] = 0x2E;
    assert!(err(&webp_of(b"VP8L", &signature)).contains("no signature"));
    let mut version = vp8l(10, 10, false);
    version[4] |= 0x20;
    assert!(err(&webp_of(b"VP8L", &version)).contains("version is not 0"));
    // A chunk whose declared size is smaller than its header.
    let mut small = webp_of(b"VP8X", &vp8x(10, 10, 0));
    small[16..20].copy_from_slice(&4u32.to_le_bytes());
    assert!(err(&small).contains("its VP8X chunk is cut short"));
}

#[test]
fn other_files_are_not_images() {
    for bytes in [&b""[..], b"GIF89a....", b"\xFF", b"\x89PNG", b"RIFF"] {
        assert_eq!(err(bytes), "is not a JPEG, PNG or WebP image");
    }
}
