//! What the benchmarks that run the rkllm backend share: building the test
//! doubles of the runtimes, timing one JSON-RPC `run`, and medians.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use crate::stats::Summary;

/// A fresh folder for one benchmark's test doubles and model files.
///
/// # Errors
/// When it cannot be created.
pub fn scratch_dir(name: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("rkllm-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The RKLLM runtime's test double (ABI 1.3.0), built into `dir`.
///
/// # Errors
/// When `cc` cannot run or the build fails.
pub fn build_fake_rkllm(dir: &Path) -> Result<PathBuf, String> {
    build_fake(
        dir,
        "tests/fake-rkllmrt/fake_rkllmrt.c",
        "rkllm-sys/include",
        &["-DFAKE_ABI_V1_3"],
        "librkllmrt-fake.so",
    )
}

/// The RKNN runtime's test double, built into `dir`.
///
/// # Errors
/// When `cc` cannot run or the build fails.
pub fn build_fake_rknn(dir: &Path) -> Result<PathBuf, String> {
    build_fake(
        dir,
        "tests/fake-rknnrt/fake_rknnrt.c",
        "rknn-sys/include",
        &[],
        "librknnrt-fake.so",
    )
}

/// Compiles a test double (`source`, with the headers in `include`) with
/// `cc` into `dir/out`.
fn build_fake(
    dir: &Path,
    source: &str,
    include: &str,
    defines: &[&str],
    out: &str,
) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = dir.join(out);
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2"])
        .args(defines)
        .arg("-I")
        .arg(root.join(include))
        .arg(root.join(source))
        .arg("-o")
        .arg(&path)
        .arg("-lpthread")
        .status()
        .map_err(|e| format!("cannot run cc to build the test doubles: {e}"))?;
    if !status.success() {
        return Err(format!("building {source} failed"));
    }
    Ok(path)
}

/// Starts `binary` on the rkllm backend with the runtime's test double at
/// `runtime` and the config text `config`: decode at once, prefill
/// `prefill_us_per_byte` µs per prompt byte a loaded cache does not cover.
///
/// # Errors
/// A message naming the binary when it does not start.
pub fn start_on_double(
    binary: &Path,
    runtime: &Path,
    config: &str,
    prefill_us_per_byte: &str,
) -> Result<crate::server::ServerProcess, String> {
    let args = [
        "--backend".as_ref(),
        "rkllm".as_ref(),
        "--runtime".as_ref(),
        runtime.as_os_str(),
    ];
    let env = [
        ("FAKE_RKLLM_TOKEN_MS", "0".as_ref()),
        (
            "FAKE_RKLLM_PREFILL_US_PER_BYTE",
            prefill_us_per_byte.as_ref(),
        ),
    ];
    crate::server::ServerProcess::start_with(binary, config, &args, &env, false)
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))
}

/// Sends one JSON-RPC `run` with `params` to the server at `addr`; returns
/// how long it took, in milliseconds, and its result.
///
/// # Errors
/// A transport failure or a JSON-RPC error.
pub async fn timed_run(
    http: &reqwest::Client,
    addr: SocketAddr,
    params: Value,
) -> Result<(f64, Value), String> {
    timed_call(http, addr, "run", params).await
}

/// Sends one JSON-RPC request of `method` with `params` to the server at
/// `addr`; returns how long it took, in milliseconds, and its result.
///
/// # Errors
/// A transport failure or a JSON-RPC error.
pub async fn timed_call(
    http: &reqwest::Client,
    addr: SocketAddr,
    method: &str,
    params: Value,
) -> Result<(f64, Value), String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let started = Instant::now();
    let response: Value = http
        .post(format!("http://{addr}/mcp"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    if let Some(error) = response.get("error") {
        return Err(format!("{method} failed: {error}"));
    }
    Ok((elapsed, response["result"].clone()))
}

/// The median of durations in milliseconds, as the other benchmarks take
/// percentiles (nearest rank).
pub fn p50_ms(values: &[f64]) -> f64 {
    let ns = values.iter().map(|ms| (ms * 1e6).round() as u64).collect();
    Summary::of(ns).map_or(0.0, |s| s.p50_us / 1000.0)
}
