//! `rkllm-bench --vision`: what a picture adds to a request, end to end.
//!
//! Starts the server on the rkllm backend with the test doubles of both
//! runtimes (tests/fake-rkllmrt and tests/fake-rknnrt, built here with
//! `cc`), a vision encoder shaped like Qwen2.5-VL's (448x448 input, 256
//! tokens of 2048 floats) and a runtime that answers one token at once.
//! Then it times JSON-RPC `run` requests (one token) with a 1024x768 JPEG
//! and without, alternately. The difference of the medians is the cost of
//! the picture: the check before queueing, the base64 hop to the runner,
//! decoding, padding and resizing, the encoder call and the embeddings'
//! way into the runtime. The test doubles' own computing time (each logs
//! it: the encoder's grid means, the runtime's digest of the embeddings)
//! is subtracted, since a real encoder's NPU time and a real runtime's
//! prefill replace it.

use std::path::Path;

use serde_json::json;

use crate::fakes::{build_fake_rkllm, build_fake_rknn, p50_ms, scratch_dir, timed_run};
use crate::server::ServerProcess;

/// The encoder the test double imitates.
const ENCODER: &str =
    "fake-rknn width=448 height=448 channels=3 fmt=NHWC type=UINT8 tokens=256 dim=2048 outputs=1";
const EMBED_DIM: &str = "2048";

/// The measured figures, in milliseconds (medians).
#[derive(Debug, Clone, serde::Serialize)]
pub struct VisionResult {
    pub requests: usize,
    pub jpeg_bytes: usize,
    pub with_image_ms: f64,
    pub without_image_ms: f64,
    pub fake_encoder_ms: f64,
    pub fake_runtime_ms: f64,
    /// with − without − the test doubles' own time.
    pub picture_cost_ms: f64,
}

impl VisionResult {
    /// The Markdown section of the report.
    pub fn markdown(&self) -> String {
        format!(
            "## Vision: what one picture adds\n\n\
             | requests (each kind) | JPEG | with picture (p50) | without (p50) | test doubles' own time (p50: encoder + runtime) | preprocessing + encoder hop | target |\n\
             |---|---|---|---|---|---|---|\n\
             | {} | 1024x768, {} KiB | {:.2} ms | {:.2} ms | {:.2} + {:.2} ms | **{:.2} ms** | ≤ 20 ms: {} |\n",
            self.requests,
            self.jpeg_bytes / 1024,
            self.with_image_ms,
            self.without_image_ms,
            self.fake_encoder_ms,
            self.fake_runtime_ms,
            self.picture_cost_ms,
            if self.picture_cost_ms <= 20.0 {
                "met"
            } else {
                "not met"
            }
        )
    }
}

/// Runs the measurement with `binary`, `requests` of each kind.
///
/// # Errors
/// A message when the test doubles cannot be built or the server fails.
pub async fn measure(binary: &Path, requests: usize) -> Result<VisionResult, String> {
    let dir = scratch_dir("vision")?;
    let rkllm = build_fake_rkllm(&dir)?;
    let rknn = build_fake_rknn(&dir)?;
    let model = dir.join("vl.rkllm");
    let encoder = dir.join("vl.rknn");
    let log = dir.join("rknn.log");
    let rkllm_log = dir.join("rkllm.log");
    std::fs::write(&model, "x").map_err(|e| e.to_string())?;
    std::fs::write(&encoder, ENCODER).map_err(|e| e.to_string())?;
    let config = format!(
        "log_level = \"warn\"\n[[models]]\nname = \"vl\"\npath = {model:?}\nvision_encoder = {encoder:?}\n\
         [engine]\npreload = [\"vl\"]\nkeep_alive_secs = -1\n[limits]\nmax_request_bytes = 16777216\n"
    );
    let args = [
        "--backend".as_ref(),
        "rkllm".as_ref(),
        "--runtime".as_ref(),
        rkllm.as_os_str(),
        "--rknn-runtime".as_ref(),
        rknn.as_os_str(),
    ];
    let env = [
        ("FAKE_RKLLM_EMBED_DIM", EMBED_DIM.as_ref()),
        ("FAKE_RKLLM_TOKEN_MS", "0".as_ref()),
        ("FAKE_RKNN_LOG", log.as_os_str()),
        ("FAKE_RKLLM_LOG", rkllm_log.as_os_str()),
    ];
    let server = ServerProcess::start_with(binary, &config, &args, &env, false)
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let result = async {
        let addr = server.addr.ok_or("the server has no address")?;
        let http = reqwest::Client::new();
        let jpeg = crate::picture::photo_jpeg();
        let image = base64_encode(&jpeg);
        let call = |images: Option<&str>| {
            let mut params = json!({"model": "vl", "prompt": "Describe it.", "max_tokens": 1});
            if let Some(image) = images {
                params["images"] = json!([image]);
            }
            let http = http.clone();
            async move { timed_run(&http, addr, params).await.map(|(ms, _)| ms) }
        };
        // Warm up both paths (first decode, allocator, connections).
        for _ in 0..3 {
            call(Some(&image)).await?;
            call(None).await?;
        }
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&rkllm_log);
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for _ in 0..requests {
            with.push(call(Some(&image)).await?);
            without.push(call(None).await?);
        }
        let encoder_ms = logged_ms(&log, "run ")?;
        let runtime_ms = logged_ms(&rkllm_log, "multimodal ")?;
        if encoder_ms.len() != requests || runtime_ms.len() != requests {
            return Err(format!(
                "the test doubles logged {} encoder runs and {} multimodal runs for {requests} requests",
                encoder_ms.len(),
                runtime_ms.len()
            ));
        }
        let (with_ms, without_ms) = (p50_ms(&with), p50_ms(&without));
        let (encoder_ms, runtime_ms) = (p50_ms(&encoder_ms), p50_ms(&runtime_ms));
        Ok(VisionResult {
            requests,
            jpeg_bytes: jpeg.len(),
            with_image_ms: with_ms,
            without_image_ms: without_ms,
            fake_encoder_ms: encoder_ms,
            fake_runtime_ms: runtime_ms,
            picture_cost_ms: with_ms - without_ms - encoder_ms - runtime_ms,
        })
    }
    .await;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The `us=` times of the log lines starting with `event`, in ms.
fn logged_ms(log: &Path, event: &str) -> Result<Vec<f64>, String> {
    let text =
        std::fs::read_to_string(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with(event))
        .filter_map(|l| l.rsplit_once(" us=").or_else(|| l.split_once("us=")))
        .filter_map(|(_, us)| us.trim().parse::<f64>().ok())
        .map(|us| us / 1000.0)
        .collect())
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
