//! The model store against a stand-in for Hugging Face (tests/fake-hf, a
//! test double on loopback): pulling with the file chosen for the chip,
//! resuming a cut download, refusing a wrong checksum, gated repositories,
//! bad names, concurrent pulls, Ollama's /api/pull and /api/delete, and
//! generation with a pulled model on the runtime test double.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_runtime, server_command};

/// The fake Hugging Face, serving `repos` (see tests/fake-hf/fake_hf.py).
pub(crate) struct FakeHf {
    child: Child,
    hub: u16,
    log: PathBuf,
    _dir: ScratchDir,
}

impl FakeHf {
    pub(crate) fn start(repos: &Value) -> Self {
        let dir = ScratchDir::new();
        let repos_file = dir.0.join("repos.json");
        std::fs::write(&repos_file, repos.to_string()).unwrap();
        let log = dir.0.join("requests.log");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fake-hf/fake_hf.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&repos_file)
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the fake Hugging Face");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let hub = line
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the fake Hugging Face did not start: {line:?}"));
        Self {
            child,
            hub,
            log,
            _dir: dir,
        }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.hub)
    }

    /// The requests it served, one JSON object each.
    pub(crate) fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Downloads of `file` from its CDN: (whole, ranged).
    pub(crate) fn downloads(&self, file: &str) -> (usize, usize) {
        let gets: Vec<Value> = self
            .requests()
            .into_iter()
            .filter(|r| r["server"] == "cdn" && r["method"] == "GET")
            .filter(|r| r["path"].as_str().unwrap().ends_with(file))
            .collect();
        let ranged = gets.iter().filter(|r| r["range"].is_string()).count();
        (gets.len() - ranged, ranged)
    }
}

impl Drop for FakeHf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const TEXT: &str = "Grüße vom NPU 東京 🦀. ";

/// A repository with a model for each chip, a gated one, a broken one.
fn repos() -> Value {
    json!({
        "token": "secret",
        "repos": {
            "acme/tiny": {"files": {
                "README.md": {"text": "# tiny"},
                "tiny_w8a8_rk3588_v1.2.1.rkllm": {"text": TEXT, "repeat": 30000},
                "tiny_w8a8_rk3576_v1.2.1.rkllm": {"text": "for the other chip ", "repeat": 10},
            }},
            "acme/cut": {"files": {"cut_rk3588.rkllm": {"text": TEXT, "repeat": 40000, "cut": 1}}},
            "acme/bad": {"files": {"bad_rk3588.rkllm": {"text": TEXT, "repeat": 100,
                "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}}},
            "acme/gated": {"gated": true, "files": {"gated.rkllm": {"text": TEXT}}},
            "acme/plain": {"files": {"plain.rkllm": {"text": "not in LFS", "lfs": false}}},
            "acme/many": {"files": {
                "m_w4a16.rkllm": {"text": "a"}, "m_w8a8.rkllm": {"text": "b"},
            }},
        }
    })
}

/// Runs `rkllm-server ARGS` against the store in `dir` and `hf`; returns
/// (success, stdout, stderr).
fn cli(hf: &FakeHf, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    cli_with(hf, dir, ("", ""), args, env)
}

/// [`cli`] with `top` at the top of its configuration file and `store`
/// added to its `[store]` section.
pub(crate) fn cli_with(
    hf: &FakeHf,
    dir: &Path,
    (top, store): (&str, &str),
    args: &[&str],
    env: &[(&str, &str)],
) -> (bool, String, String) {
    let config = dir.join("cli.toml");
    std::fs::write(
        &config,
        format!("{top}\n[store]\nplatform = \"rk3588\"\n{store}\n"),
    )
    .unwrap();
    let output = server_command()
        .arg("--config")
        .arg(&config)
        .arg("--models-dir")
        .arg(dir.join("models"))
        .args(args)
        .env("HF_ENDPOINT", hf.endpoint())
        .env_remove("HF_TOKEN")
        .envs(env.iter().copied())
        .output()
        .expect("run rkllm-server");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    // The same digest the store records, computed here by `sha256sum`.
    let dir = ScratchDir::new();
    let file = dir.0.join("f");
    std::fs::write(&file, bytes).unwrap();
    let out = Command::new("sha256sum").arg(&file).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_pulled_model_is_the_file_for_this_chip_and_generates_on_the_runtime() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let (ok, out, err) = cli(&hf, &dir.0, &["pull", "acme/tiny"], &[]);
    assert!(ok, "{out}\n{err}");
    let name = "tiny_w8a8_rk3588_v1.2.1";
    assert!(out.contains(&format!("pulled {name}")), "{out}");
    assert!(out.contains("verified"), "{out}");
    let expected = TEXT.repeat(30000);
    let stored = dir
        .0
        .join("models")
        .join(name)
        .join(format!("{name}.rkllm"));
    assert_eq!(std::fs::read_to_string(&stored).unwrap(), expected);
    // Redirected to the CDN; the token never goes there.
    assert!(hf.requests().iter().any(|r| r["server"] == "cdn"));

    let (ok, out, _) = cli(&hf, &dir.0, &["list"], &[]);
    assert!(
        ok && out.contains(name) && out.contains("acme/tiny"),
        "{out}"
    );
    let (ok, out, _) = cli(&hf, &dir.0, &["show", name], &[]);
    assert!(ok, "{out}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["manifest"]["sha256"], sha256_hex(expected.as_bytes()));
    assert_eq!(shown["manifest"]["sha256_verified"], true);
    assert_eq!(shown["manifest"]["source"]["repository"], "acme/tiny");
    assert_eq!(shown["details"]["platform"], "rk3588");
    assert_eq!(shown["details"]["quantization"], "w8a8");
    // Pulled again: nothing downloaded twice.
    let (ok, out, err) = cli(&hf, &dir.0, &["pull", "acme/tiny"], &[]);
    assert!(ok, "{out}{err}");
    assert_eq!(hf.downloads(&format!("{name}.rkllm")), (1, 0));

    // The server serves it on the runtime test double (which "generates"
    // its model file): byte for byte, with no [[models]] entry.
    let runtime = fake_runtime(Fake::V1_3);
    let server = Server::start_env(
        "",
        &[
            "--backend",
            "rkllm",
            "--runtime",
            runtime.to_str().unwrap(),
            "--models-dir",
            dir.0.join("models").to_str().unwrap(),
        ],
        &[("FAKE_RKLLM_TOKEN_MS", "0")],
    );
    let result = server
        .ok(
            "run",
            json!({"prompt": "hi", "model": name, "max_tokens": 8192}),
        )
        .await;
    let text = result["text"].as_str().unwrap();
    assert!(expected.starts_with(text) && !text.is_empty(), "{result}");

    // rm from the shell: the running server lets the model go.
    let (ok, out, _) = cli(&hf, &dir.0, &["rm", name], &[]);
    assert!(ok, "{out}");
    assert!(!dir.0.join("models").join(name).exists());
    let deadline = tokio::time::Instant::now() + crate::harness::LIVENESS;
    loop {
        let models = server.ok("models", json!({})).await;
        if models["models"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{models}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[test]
fn a_cut_download_resumes_where_it_stopped() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let (ok, out, err) = cli(&hf, &dir.0, &["pull", "acme/cut"], &[]);
    assert!(!ok, "{out}");
    assert!(err.contains("connection was cut after"), "{err}");
    assert!(err.contains("pull again to resume"), "{err}");
    // Nothing in the store; the part waits in .partial.
    let (_, list, _) = cli(&hf, &dir.0, &["list"], &[]);
    assert!(list.contains("no models"), "{list}");
    let (ok, out, err) = cli(&hf, &dir.0, &["pull", "acme/cut"], &[]);
    assert!(ok, "{out}{err}");
    assert_eq!(
        hf.downloads("cut_rk3588.rkllm"),
        (1, 1),
        "one whole (cut), one ranged"
    );
    let stored = dir.0.join("models/cut_rk3588/cut_rk3588.rkllm");
    assert_eq!(std::fs::read_to_string(stored).unwrap(), TEXT.repeat(40000));
    assert!(!dir.0.join("models/.partial/cut_rk3588").exists());
}

#[test]
fn wrong_checksums_gated_repositories_and_bad_input_are_refused_cleanly() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let (ok, _, err) = cli(&hf, &dir.0, &["pull", "acme/bad"], &[]);
    assert!(!ok);
    assert!(err.contains("checksum mismatch"), "{err}");
    assert!(!dir.0.join("models/bad_rk3588").exists());
    assert!(!dir.0.join("models/.partial/bad_rk3588").exists());

    let (ok, _, err) = cli(&hf, &dir.0, &["pull", "acme/gated"], &[]);
    assert!(!ok);
    assert!(err.contains("gated") && err.contains("HF_TOKEN"), "{err}");
    let (ok, out, err) = cli(
        &hf,
        &dir.0,
        &["pull", "acme/gated"],
        &[("HF_TOKEN", "secret")],
    );
    assert!(ok, "{out}{err}");
    // The token went to the hub only, never to the CDN.
    assert!(
        hf.requests()
            .iter()
            .filter(|r| r["server"] == "cdn")
            .all(|r| r["authorization"] == false)
    );

    for (args, needle) in [
        (vec!["pull", "acme/nope"], "not found"),
        (vec!["pull", "acme/tiny:nope.rkllm"], "no file nope.rkllm"),
        (vec!["pull", "acme/many"], "acme/many:FILE"),
        (vec!["pull", "acme/tiny:../../etc/passwd"], "no `..`"),
        (vec!["pull", "acme/tiny", "--name", "../evil"], "model name"),
        (vec!["pull", "acme/tiny", "--name", "a/b"], "may hold only"),
        (vec!["pull", "https:/nope"], "expected owner/repo"),
        (vec!["rm", "../models"], "must not start"),
    ] {
        let (ok, out, err) = cli(&hf, &dir.0, &args, &[]);
        assert!(!ok, "{args:?}: {out}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Plain http only under a mirror configured as such.
    let (ok, _, err) = cli(&hf, &dir.0, &["pull", "http://example.org/m.rkllm"], &[]);
    assert!(!ok);
    assert!(err.contains("https only"), "{err}");
    let listed = cli(&hf, &dir.0, &["list"], &[]).1;
    assert!(!listed.contains("evil"), "{listed}");
}

#[test]
fn two_pulls_of_one_model_download_it_once() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let pulls: Vec<_> = (0..2)
        .map(|_| {
            let dir = dir.0.clone();
            let endpoint = hf.endpoint();
            std::thread::spawn(move || {
                let config = dir.join("cli.toml");
                std::fs::write(&config, "[store]\nplatform = \"rk3588\"\n").unwrap();
                server_command()
                    .arg("--config")
                    .arg(&config)
                    .arg("--models-dir")
                    .arg(dir.join("models"))
                    .args(["pull", "acme/tiny"])
                    .env("HF_ENDPOINT", endpoint)
                    .output()
                    .unwrap()
            })
        })
        .collect();
    for pull in pulls {
        let output = pull.join().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(hf.downloads("tiny_w8a8_rk3588_v1.2.1.rkllm"), (1, 0));
}

#[tokio::test]
async fn ollama_pull_streams_progress_and_delete_removes_the_model() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let config = format!(
        "[store]\nplatform = \"rk3588\"\nendpoint = \"{}\"\nmodels_dir = \"{}\"\n",
        hf.endpoint(),
        dir.0.join("models").display()
    );
    let server = Server::start(&config, &["--api-key", "k"]);
    let refused = server
        .send(
            reqwest::Method::POST,
            "/api/pull",
            Some(json!({"model": "acme/tiny"})),
            None,
        )
        .await;
    assert_eq!(refused.status(), 401);
    let body = server
        .send(
            reqwest::Method::POST,
            "/api/pull",
            Some(json!({"model": "acme/tiny"})),
            Some("k"),
        )
        .await
        .text()
        .await
        .unwrap();
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["status"], "pulling manifest", "{body}");
    let downloading: Vec<&Value> = lines.iter().filter(|l| l["completed"].is_u64()).collect();
    assert!(downloading.len() >= 2, "{body}");
    let total = TEXT.repeat(30000).len() as u64;
    assert_eq!(downloading.last().unwrap()["completed"], total);
    assert!(
        downloading[0]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(lines.last().unwrap()["status"], "success", "{body}");
    let name = "tiny_w8a8_rk3588_v1.2.1";

    // Usable at once, by its name or by what it was pulled as.
    for model in [name, "acme/tiny"] {
        let answer: Value = server
            .send(
                reqwest::Method::POST,
                "/api/generate",
                Some(json!({"model": model, "prompt": "hi", "stream": false})),
                Some("k"),
            )
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(answer["done"], true, "{answer}");
    }
    let tags: Value = server.get_json("/api/tags", Some("k")).await;
    let entry = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{tags}"));
    assert_eq!(entry["size"], total);
    assert_eq!(entry["details"]["platform"], "rk3588");
    assert_eq!(entry["details"]["quantization_level"], "w8a8");
    let openai: Value = server.get_json("/v1/models", Some("k")).await;
    assert!(
        openai["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == name),
        "{openai}"
    );

    // Errors come as the last line, and a bad name is a 400.
    let failed = server
        .send(
            reqwest::Method::POST,
            "/api/pull",
            Some(json!({"model": "acme/bad"})),
            Some("k"),
        )
        .await
        .text()
        .await
        .unwrap();
    let last: Value = serde_json::from_str(failed.lines().last().unwrap()).unwrap();
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .contains("checksum mismatch"),
        "{failed}"
    );
    let not_streamed = server
        .send(
            reqwest::Method::POST,
            "/api/pull",
            Some(json!({"model": "acme/nope", "stream": false})),
            Some("k"),
        )
        .await;
    assert_eq!(not_streamed.status(), 404);
    // URLs are for the command line: the API fetches from the endpoint only.
    let by_url = server
        .send(
            reqwest::Method::POST,
            "/api/pull",
            Some(json!({"model": format!("{}/acme/tiny/resolve/main/x.rkllm", hf.endpoint())})),
            Some("k"),
        )
        .await;
    assert_eq!(by_url.status(), 400);
    // A bad name, a configured model, the pulled one.
    for (model, status) in [("../models", 400), ("mock", 400), (name, 200)] {
        let deleted = server
            .send(
                reqwest::Method::DELETE,
                "/api/delete",
                Some(json!({ "model": model })),
                Some("k"),
            )
            .await;
        assert_eq!(deleted.status(), status, "{model}");
    }
    assert!(!dir.0.join("models").join(name).exists());
    let gone = server
        .send(
            reqwest::Method::DELETE,
            "/api/delete",
            Some(json!({"model": name})),
            Some("k"),
        )
        .await;
    assert_eq!(gone.status(), 404);
    let tags: Value = server.get_json("/api/tags", Some("k")).await;
    assert!(!tags.to_string().contains(name), "{tags}");
}

#[tokio::test]
async fn pulling_over_the_api_can_be_switched_off() {
    let server = Server::start("[store]\napi_pull = false\n", &[]);
    for (method, path) in [
        (reqwest::Method::POST, "/api/pull"),
        (reqwest::Method::DELETE, "/api/delete"),
    ] {
        let response = server
            .http
            .request(method, format!("http://{}{path}", server.addr))
            .json(&json!({"model": "acme/tiny"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{path}");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().contains("api_pull"),
            "{body}"
        );
    }
}

#[test]
fn a_full_disk_is_said_and_leaves_nothing_behind() {
    // The download's part file is made to point at /dev/full, where every
    // write fails with ENOSPC, as on a full disk.
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let name = "tiny_w8a8_rk3588_v1.2.1";
    let file = format!("{name}.rkllm");
    let content = TEXT.repeat(30000);
    let work = dir.0.join("models/.partial").join(name);
    std::fs::create_dir_all(&work).unwrap();
    let meta = json!({
        "url": format!("{}/acme/tiny/resolve/main/{file}", hf.endpoint()),
        "etag": format!("\"{}\"", sha256_hex(content.as_bytes())),
        "size": content.len(),
    });
    std::fs::write(work.join(format!("{file}.part.json")), meta.to_string()).unwrap();
    std::os::unix::fs::symlink("/dev/full", work.join(format!("{file}.part"))).unwrap();
    let (ok, out, err) = cli(&hf, &dir.0, &["pull", "acme/tiny"], &[]);
    assert!(!ok, "{out}");
    assert!(err.contains("no space left"), "{err}");
    assert!(!dir.0.join("models").join(name).exists());
    assert!(!work.exists(), "the partial download was removed");
}

#[test]
fn a_model_is_pulled_by_url_under_a_name_of_its_own() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let url = format!(
        "{}/acme/tiny/resolve/main/tiny_w8a8_rk3576_v1.2.1.rkllm",
        hf.endpoint()
    );
    let (ok, out, err) = cli(&hf, &dir.0, &["pull", &url, "--name", "other-chip"], &[]);
    assert!(ok, "{out}{err}");
    let stored = dir
        .0
        .join("models/other-chip/tiny_w8a8_rk3576_v1.2.1.rkllm");
    assert_eq!(
        std::fs::read_to_string(stored).unwrap(),
        "for the other chip ".repeat(10)
    );
    let (_, shown, _) = cli(&hf, &dir.0, &["show", "other-chip"], &[]);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["manifest"]["source"]["url"], url);
    assert_eq!(shown["details"]["platform"], "rk3576");
}

#[test]
fn a_file_without_a_published_checksum_gets_one_computed_and_recorded() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let (ok, out, err) = cli(&hf, &dir.0, &["pull", "acme/plain"], &[]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("computed"), "{out}");
    let (_, shown, _) = cli(&hf, &dir.0, &["show", "plain"], &[]);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["manifest"]["sha256_verified"], false);
    assert_eq!(shown["manifest"]["sha256"], sha256_hex(b"not in LFS"));
}

#[tokio::test]
async fn a_vision_model_is_pulled_with_its_encoder_and_takes_images() {
    let encoder_text =
        "fake-rknn width=32 height=32 channels=3 fmt=NHWC type=UINT8 tokens=4 dim=6 outputs=1";
    let hf = FakeHf::start(&json!({"repos": {"acme/qwen2-vl-tiny": {"files": {
        "qwen2-vl-tiny_w8a8_rk3588.rkllm": {"text": "I see it."},
        "qwen2-vl-tiny_vision_rk3588.rknn": {"text": encoder_text, "lfs": true},
        "qwen2-vl-tiny_vision_rk3576.rknn": {"text": "for the other chip", "lfs": true},
    }}}}));
    let dir = ScratchDir::new();
    let (ok, out, err) = cli(&hf, &dir.0, &["pull", "acme/qwen2-vl-tiny"], &[]);
    assert!(ok, "{out}\n{err}");
    let name = "qwen2-vl-tiny_w8a8_rk3588";
    let folder = dir.0.join("models").join(name);
    assert_eq!(
        std::fs::read_to_string(folder.join("qwen2-vl-tiny_vision_rk3588.rknn")).unwrap(),
        encoder_text
    );
    assert!(!folder.join("qwen2-vl-tiny_vision_rk3576.rknn").exists());
    let (ok, out, _) = cli(&hf, &dir.0, &["show", name], &[]);
    assert!(ok, "{out}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    let encoder = &shown["manifest"]["vision_encoder"];
    assert_eq!(
        encoder["file"], "qwen2-vl-tiny_vision_rk3588.rknn",
        "{shown}"
    );
    assert_eq!(encoder["sha256"], sha256_hex(encoder_text.as_bytes()));
    assert_eq!(encoder["sha256_verified"], true);

    // The server takes images for it, with Qwen's markers, no config.
    let runtime = fake_runtime(Fake::V1_3);
    let rknn = crate::harness::fake_rknn_runtime();
    let server = Server::start_env(
        "",
        &[
            "--backend",
            "rkllm",
            "--runtime",
            runtime.to_str().unwrap(),
            "--rknn-runtime",
            rknn.to_str().unwrap(),
            "--models-dir",
            dir.0.join("models").to_str().unwrap(),
        ],
        &[("FAKE_RKLLM_TOKEN_MS", "0"), ("FAKE_RKLLM_EMBED_DIM", "6")],
    );
    let mut png = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(8, 8, image::Rgb([0, 0, 255]))
        .write_to(&mut png, image::ImageFormat::Png)
        .unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(png.into_inner());
    let result = server
        .ok(
            "run",
            json!({"prompt": "What is it?", "model": name, "images": [b64]}),
        )
        .await;
    let text = result["text"].as_str().unwrap();
    assert!(
        text.contains("[image 1: tokens=4 size=32x32 rgb=0,0,255"),
        "{text}"
    );
    assert!(
        text.contains("markers=<|vision_start|>|<|vision_end|>|<|image_pad|>"),
        "{text}"
    );
    assert!(text.ends_with("I see it."), "{text}");

    // rm takes the encoder too.
    let (ok, out, _) = cli(&hf, &dir.0, &["rm", name], &[]);
    assert!(ok, "{out}");
    assert!(!folder.exists());
}
