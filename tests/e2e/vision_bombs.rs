//! Decompression bombs sent to a vision model: PNGs of 750 KiB whose colour
//! profile (iCCP) or text (zTXt) inflates to 740 MiB, alone and two at
//! once. The server's peak RSS (VmHWM, reset before the bombs) must grow by
//! far less than that, whether the model runs in the server (`runner =
//! "thread"`: the check before queueing and the decode both count) or in a
//! runner process (the check only): the check reads headers only, and the
//! decoder never sees ancillary chunks.

use std::time::Duration;

use flate2::{Compress, Compression, FlushCompress};
use image::{ImageFormat, RgbImage};
use serde_json::json;

use crate::harness::{Fake, Server, emulated};
use crate::vision::{ENCODER, TEXT, Vision, b64, described, field, solid};

const MIB: usize = 1 << 20;

/// What the server's peak RSS may grow by while it takes the bombs
/// (docs/vision.md: 64 MiB per image at most, with the default limits).
const ALLOWED_GROWTH_KIB: u64 = 64 * 1024;

/// A zlib stream that inflates to `total` zero bytes (whole MiB): one
/// compressed MiB of zeros, then the next MiB's block (back-references
/// into zeros only) repeated, an empty last block and the checksum.
fn zeros_zlib(total: usize) -> Vec<u8> {
    let zeros = vec![0u8; MIB];
    let mut deflate = Compress::new(Compression::best(), true);
    let (mut first, mut next) = (Vec::with_capacity(MIB), Vec::with_capacity(MIB));
    deflate
        .compress_vec(&zeros, &mut first, FlushCompress::Sync)
        .unwrap();
    deflate
        .compress_vec(&zeros, &mut next, FlushCompress::Sync)
        .unwrap();
    for _ in 1..total / MIB {
        first.extend_from_slice(&next);
    }
    first.extend_from_slice(&[0x03, 0x00]);
    let adler = ((total % 65521) as u32) << 16 | 1;
    first.extend_from_slice(&adler.to_be_bytes());
    first
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

/// A 200x150 red PNG with a `kind` chunk after IHDR whose compressed
/// content (after `prefix`) inflates to `inflated` bytes.
fn bomb(kind: &[u8; 4], prefix: &[u8], inflated: usize) -> Vec<u8> {
    let picture = RgbImage::from_pixel(200, 150, image::Rgb([255, 0, 0]));
    let mut png = std::io::Cursor::new(Vec::new());
    picture.write_to(&mut png, ImageFormat::Png).unwrap();
    let png = png.into_inner();
    let mut data = prefix.to_vec();
    data.extend_from_slice(&zeros_zlib(inflated));
    let mut out = png[..33].to_vec();
    out.extend_from_slice(&chunk(kind, &data));
    out.extend_from_slice(&png[33..]);
    out
}

/// A line of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {status}"));
    line.trim_start_matches(':')
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// Resets the process's peak RSS (VmHWM) to its current RSS.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// Sends `image` to the vision model; the reply must describe a red
/// picture (the bomb's own pixels decode) or be a clear refusal.
async fn send(server: &Server, image: &[u8]) {
    let response = server
        .call(
            "run",
            json!({"model": "vl", "prompt": "What is this?", "images": [b64(image)]}),
        )
        .await;
    let text = response["result"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{response}"));
    assert!(text.ends_with(TEXT), "{text}");
    assert_eq!(field(&described(text)[0], "rgb"), "223,32,32", "{text}");
}

async fn healthy(server: &Server) {
    let health = server
        .send(reqwest::Method::GET, "/health", None, None)
        .await;
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn png_bombs_leave_the_servers_memory_and_health_alone() {
    if emulated() {
        eprintln!(
            "skipped under emulation: the server's RSS under qemu-user is the emulator's, \
             and the bombs take native speed to build and send"
        );
        return;
    }
    let iccp = bomb(b"iCCP", b"bomb\0\0", 740 * MIB);
    let ztxt = bomb(b"zTXt", b"Comment\0\0", 740 * MIB);
    assert!(iccp.len() < MIB && ztxt.len() < MIB, "{}", iccp.len());
    // In the server itself, then in a runner process (the server checks
    // the headers only).
    for runner in ["thread", "process"] {
        let vision = Vision::start_with(
            Fake::V1_3,
            ENCODER,
            "",
            &format!("[rkllm]\nrunner = \"{runner}\"\n[limits]\nmax_request_bytes = 4194304\n"),
        );
        let server = &vision.server;
        let pid = server.pid();

        // Warm up: the model loaded, one picture through every step.
        send(server, &solid([255, 0, 0], ImageFormat::Png)).await;
        let before = status_kib(pid, "VmRSS");
        reset_peak(pid);

        send(server, &iccp).await;
        // Two at once, and the server answers /health meanwhile.
        tokio::join!(send(server, &iccp), send(server, &iccp), healthy(server));
        send(server, &ztxt).await;
        healthy(server).await;

        let peak = status_kib(pid, "VmHWM");
        let grown = peak.saturating_sub(before);
        eprintln!(
            "runner = {runner}: server RSS {before} KiB before the bombs, peak {peak} KiB \
             while taking them: +{grown} KiB (each bomb {} KiB, inflating to 740 MiB)",
            iccp.len() / 1024,
        );
        assert!(
            grown < ALLOWED_GROWTH_KIB,
            "runner = {runner}: the server's peak RSS grew by {grown} KiB taking the bombs"
        );
        // Still serving.
        tokio::time::timeout(Duration::from_secs(60), healthy(server))
            .await
            .unwrap();
    }
}

/// A lossless WebP's decoder builds tables no memory limit reaches: with
/// models on the server's own threads it is refused before it is queued;
/// in runner processes (the default) it is decoded there.
#[tokio::test]
async fn a_lossless_webp_is_refused_only_where_it_would_be_decoded_in_the_server() {
    let webp = solid([223, 32, 32], ImageFormat::WebP);
    for runner in ["thread", "process"] {
        let vision = Vision::start_with(
            Fake::V1_3,
            ENCODER,
            "",
            &format!("[rkllm]\nrunner = \"{runner}\"\n"),
        );
        let response = vision
            .server
            .call(
                "run",
                json!({"model": "vl", "prompt": "what is this?", "images": [b64(&webp)], "max_tokens": 4}),
            )
            .await;
        if runner == "thread" {
            assert_eq!(response["error"]["code"], -32602, "{response}");
            let message = response["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("lossless") && message.contains("runner"),
                "{message}"
            );
        } else {
            assert!(response["result"]["text"].is_string(), "{response}");
        }
        // A lossy picture goes through either way.
        let png = solid([223, 32, 32], ImageFormat::Png);
        let fine = vision
            .server
            .call(
                "run",
                json!({"model": "vl", "prompt": "what is this?", "images": [b64(&png)], "max_tokens": 4}),
            )
            .await;
        assert!(fine["result"]["text"].is_string(), "{runner}: {fine}");
    }
}
