//! The model store against a hostile stand-in for Hugging Face
//! (tests/fake-hf in its hostile modes): a vision model this server cannot
//! run, paths that try to leave the store, bodies longer than declared or
//! of no declared size, a host that sends a byte a second, a client that
//! leaves a streaming pull, errors before the download with their HTTP
//! status, and a broken manifest warned about once.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Fake, LIVENESS, ScratchDir, Server, fake_rknn_runtime, fake_runtime};
use crate::store::{FakeHf, cli_with};

const ENCODER: &str =
    "fake-rknn width=32 height=32 channels=3 fmt=NHWC type=UINT8 tokens=4 dim=6 outputs=1";

fn repos() -> Value {
    json!({"repos": {
        "acme/vlm": {"files": {
            "vlm-tiny_w8a8_rk3588.rkllm": {"text": "I see it."},
            "vlm-tiny_vision_rk3588.rknn": {"text": ENCODER, "lfs": true},
        }},
        "acme/tiny": {"files": {"tiny_rk3588.rkllm": {"text": "tiny model ", "repeat": 100}}},
        "acme/escape": {"files": {
            "escape_rk3588.rkllm": {"text": "a model"},
            "../../../x.rknn": {"text": ENCODER, "lfs": true},
        }},
        "acme/liar": {"files": {"liar_rk3588.rkllm": {"text": "0123456789abcdef", "repeat": 262_144,
                                                      "declared": 1000}}},
        "acme/endless": {"files": {"endless_rk3588.rkllm": {"text": "0123456789abcdef",
                                                            "repeat": 20_000, "undeclared": true}}},
        "acme/slow": {"files": {"slow_rk3588.rkllm": {"text": "slow model ", "repeat": 4000,
                                                      "slow": 1}}},
        "acme/readme": {"files": {"README.md": {"text": "# no model here"}}},
        "acme/many": {"files": {"m_rk3576_a.rkllm": {"text": "a"}, "m_rk3576_b.rkllm": {"text": "b"}}},
        "acme/one": {"files": {"one.rkllm": {"text": "one"}}},
        "acme/two": {"files": {"two.rkllm": {"text": "two"}}},
    }})
}

/// The rkllm backend on the runtime test double, with an RKNN runtime
/// that does not exist: this server cannot run vision encoders.
fn without_rknn(dir: &Path) -> String {
    let model = dir.join("text.rkllm");
    std::fs::write(&model, "a text model").unwrap();
    format!(
        "backend = \"rkllm\"\nruntime = \"{}\"\nrknn_runtime = \"{}\"\n",
        fake_runtime(Fake::V1_3).display(),
        dir.join("no/librknnrt.so").display()
    )
}

/// GETs of the CDN (the downloads themselves) so far.
fn cdn_gets(hf: &FakeHf) -> usize {
    hf.requests()
        .iter()
        .filter(|r| r["server"] == "cdn" && r["method"] == "GET")
        .count()
}

#[tokio::test]
async fn a_vision_model_is_refused_without_an_rknn_runtime_unless_only_stored() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let top = without_rknn(&dir.0);
    let folder = dir.0.join("models/vlm-tiny_w8a8_rk3588");

    // The command line refuses it, says why and how to store it anyway.
    let (ok, out, err) = cli_with(&hf, &dir.0, (&top, ""), &["pull", "acme/vlm"], &[]);
    assert!(!ok, "{out}");
    assert!(err.contains("vision encoder"), "{err}");
    assert!(err.contains("RKNN runtime"), "{err}");
    assert!(err.contains("--store-only"), "{err}");
    assert!(!folder.exists());
    assert_eq!(cdn_gets(&hf), 0, "nothing was downloaded");
    let (ok, out, err) = cli_with(
        &hf,
        &dir.0,
        (&top, ""),
        &["pull", "--store-only", "acme/vlm"],
        &[],
    );
    assert!(ok, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(folder.join("vlm-tiny_vision_rk3588.rknn")).unwrap(),
        ENCODER
    );

    // So does /api/pull, with 409 and Ollama's error body.
    let api_dir = ScratchDir::new();
    let config = format!(
        "{}\n[store]\nplatform = \"rk3588\"\nendpoint = \"{}\"\nmodels_dir = \"{}\"\n",
        top,
        hf.endpoint(),
        api_dir.0.join("models").display()
    );
    let server = Server::start(
        &config,
        &["--model", dir.0.join("text.rkllm").to_str().unwrap()],
    );
    let downloads = cdn_gets(&hf);
    for body in [
        json!({"model": "acme/vlm"}),
        json!({"model": "acme/vlm", "stream": false}),
    ] {
        let refused = server
            .send(reqwest::Method::POST, "/api/pull", Some(body), None)
            .await;
        assert_eq!(refused.status(), 409);
        let said: Value = refused.json().await.unwrap();
        let message = said["error"].as_str().unwrap();
        assert!(message.contains("store_only"), "{said}");
        assert!(message.contains("vlm-tiny_vision_rk3588.rknn"), "{said}");
    }
    assert_eq!(cdn_gets(&hf), downloads, "nothing was downloaded");
    assert!(!api_dir.0.join("models/vlm-tiny_w8a8_rk3588").exists());
    let stored = server
        .send(
            reqwest::Method::POST,
            "/api/pull",
            Some(json!({"model": "acme/vlm", "store_only": true})),
            None,
        )
        .await;
    assert_eq!(stored.status(), 200);
    let body = stored.text().await.unwrap();
    let last: Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert_eq!(last["status"], "success", "{body}");
    assert!(
        api_dir
            .0
            .join("models/vlm-tiny_w8a8_rk3588/vlm-tiny_vision_rk3588.rknn")
            .is_file()
    );
    // Stored anyway, it is a model that cannot be served here: failed
    // with why, now and after a restart, which serves the other model.
    let failed_vlm = |models: &Value| {
        models["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "vlm-tiny_w8a8_rk3588")
            .filter(|m| m["state"] == "failed")
            .and_then(|m| m["error"].as_str())
            .is_some_and(|e| e.contains("librknnrt.so"))
    };
    let deadline = std::time::Instant::now() + LIVENESS;
    while !failed_vlm(&server.ok("models", json!({})).await) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stored model never showed as failed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(server);
    let restarted = Server::start(
        &config,
        &["--model", dir.0.join("text.rkllm").to_str().unwrap()],
    );
    assert!(failed_vlm(&restarted.ok("models", json!({})).await));
    let reply = restarted
        .ok("run", json!({"model": "text", "prompt": "still here"}))
        .await;
    assert_eq!(reply["finish_reason"], "stop", "{reply}");
    let ready = restarted
        .send(reqwest::Method::GET, "/ready", None, None)
        .await;
    assert_eq!(ready.status(), 200);
    drop(restarted);

    // With the RKNN runtime, nothing needs saying.
    let with_rknn = format!(
        "backend = \"rkllm\"\nruntime = \"{}\"\nrknn_runtime = \"{}\"\n",
        fake_runtime(Fake::V1_3).display(),
        fake_rknn_runtime().display()
    );
    let other = ScratchDir::new();
    let (ok, out, err) = cli_with(&hf, &other.0, (&with_rknn, ""), &["pull", "acme/vlm"], &[]);
    assert!(ok, "{out}{err}");
}

#[test]
fn paths_from_a_listing_or_a_manifest_never_leave_the_store() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();

    // A listing that names its encoder ../../../x.rknn is refused before
    // anything is fetched, and nothing outside the repository is asked for.
    let (ok, out, err) = cli_with(&hf, &dir.0, ("", ""), &["pull", "acme/escape"], &[]);
    assert!(!ok, "{out}");
    assert!(err.contains("../../../x.rknn"), "{err}");
    assert_eq!(cdn_gets(&hf), 0);
    for request in hf.requests() {
        let path = request["path"].as_str().unwrap();
        assert!(
            path.starts_with("/api/models/acme/escape/") || path.starts_with("/acme/escape/"),
            "{request}"
        );
    }
    assert!(!dir.0.join("models/escape_rk3588").exists());

    // A manifest in the store whose encoder lies outside its folder is
    // refused, and a pull over it touches nothing outside the store.
    let victim = dir.0.join("victim.txt");
    std::fs::write(&victim, "not the store's").unwrap();
    let planted = dir.0.join("models/planted");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("m.rkllm"), "m").unwrap();
    let manifest = json!({
        "name": "planted", "file": "m.rkllm", "size": 1, "sha256": "ab",
        "sha256_verified": false, "pulled_unix": 1,
        "source": {"spec": "acme/tiny", "url": "https://example.org/m.rkllm"},
        "vision_encoder": {"file": "../../victim.txt", "size": 1, "sha256": "ab",
                           "sha256_verified": false},
    });
    std::fs::write(planted.join("manifest.json"), manifest.to_string()).unwrap();
    let (ok, out, err) = cli_with(&hf, &dir.0, ("", ""), &["show", "planted"], &[]);
    assert!(!ok, "{out}");
    assert!(err.contains("vision_encoder.file"), "{err}");
    let (_, listed, _) = cli_with(&hf, &dir.0, ("", ""), &["list"], &[]);
    assert!(!listed.contains("planted"), "{listed}");
    let (ok, out, err) = cli_with(
        &hf,
        &dir.0,
        ("", ""),
        &["pull", "acme/tiny", "--name", "planted"],
        &[],
    );
    assert!(ok, "{out}{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "not the store's");
    let (ok, shown, err) = cli_with(&hf, &dir.0, ("", ""), &["show", "planted"], &[]);
    assert!(ok, "{err}");
    assert!(shown.contains("tiny_rk3588.rkllm"), "{shown}");
}

#[test]
fn downloads_stop_at_their_declared_size_and_at_the_store_limits() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let partial = dir.0.join("models/.partial");
    let largest_partial = || {
        walk(&partial)
            .iter()
            .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
            .max()
            .unwrap_or(0)
    };

    // 4 MiB sent for a file declared as 1,000 bytes: cut at 1,000.
    let (ok, out, err) = cli_with(&hf, &dir.0, ("", ""), &["pull", "acme/liar"], &[]);
    assert!(!ok, "{out}");
    assert!(err.contains("more than the 1000 bytes"), "{err}");
    assert!(!dir.0.join("models/liar_rk3588").exists());
    assert!(largest_partial() <= 1000, "{:?}", walk(&partial));

    // No size declared: capped by [store] max_file_bytes.
    let (ok, out, err) = cli_with(
        &hf,
        &dir.0,
        ("", "max_file_bytes = 100000"),
        &["pull", "acme/endless"],
        &[],
    );
    assert!(!ok, "{out}");
    assert!(err.contains("max_file_bytes"), "{err}");
    assert!(!dir.0.join("models/endless_rk3588").exists());
    assert!(largest_partial() <= 100_000, "{:?}", walk(&partial));
    // Under the default cap the same file comes whole.
    let (ok, out, err) = cli_with(&hf, &dir.0, ("", ""), &["pull", "acme/endless"], &[]);
    assert!(ok, "{out}{err}");
    let stored = std::fs::metadata(dir.0.join("models/endless_rk3588/endless_rk3588.rkllm"));
    assert_eq!(stored.unwrap().len(), 16 * 20_000);

    // Declared larger than [store] max_file_bytes: refused before the download.
    let downloads = cdn_gets(&hf);
    let (ok, out, err) = cli_with(
        &hf,
        &dir.0,
        ("", "max_file_bytes = 100"),
        &["pull", "acme/tiny"],
        &[],
    );
    assert!(!ok, "{out}");
    assert!(
        err.contains("max_file_bytes (100 bytes) (its host declares 1100 bytes)"),
        "{err}"
    );
    assert_eq!(cdn_gets(&hf), downloads);

    // Not enough free space above [store] min_free_bytes: refused before
    // the download.
    let downloads = cdn_gets(&hf);
    let (ok, out, err) = cli_with(
        &hf,
        &dir.0,
        ("", "min_free_bytes = 1125899906842624"),
        &["pull", "acme/tiny"],
        &[],
    );
    assert!(!ok, "{out}");
    assert!(err.contains("min_free_bytes"), "{err}");
    assert_eq!(cdn_gets(&hf), downloads);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn a_slow_host_is_cut_by_the_minimum_rate_or_the_deadline_and_the_pull_resumes_later() {
    let mut repos = repos();
    repos["repos"]["acme/slow"]["files"]["slow_rk3588.rkllm"]["slow"] = json!(2);
    let hf = FakeHf::start(&repos);
    let dir = ScratchDir::new();
    let (ok, out, err) = cli_with(
        &hf,
        &dir.0,
        ("", "min_bytes_per_sec = 0\npull_timeout_secs = 2"),
        &["pull", "acme/slow"],
        &[],
    );
    assert!(!ok, "{out}");
    assert!(err.contains("pull_timeout_secs (2 s)"), "{err}");
    assert!(err.contains("pull again to resume"), "{err}");
    let slow = ("", "min_bytes_per_sec = 1000\nrate_window_secs = 1");
    let (ok, out, err) = cli_with(&hf, &dir.0, slow, &["pull", "acme/slow"], &[]);
    assert!(!ok, "{out}");
    assert!(err.contains("min_bytes_per_sec (1000)"), "{err}");
    assert!(err.contains("pull again to resume"), "{err}");
    // The host is fast again: the pull resumes what the cut ones left.
    let (ok, out, err) = cli_with(&hf, &dir.0, ("", ""), &["pull", "acme/slow"], &[]);
    assert!(ok, "{out}{err}");
    assert_eq!(
        hf.downloads("slow_rk3588.rkllm"),
        (1, 2),
        "cut twice, then resumed"
    );
    let stored = dir.0.join("models/slow_rk3588/slow_rk3588.rkllm");
    assert_eq!(
        std::fs::read_to_string(stored).unwrap(),
        "slow model ".repeat(4000)
    );
}

#[tokio::test]
async fn a_client_leaving_a_streaming_pull_cancels_it_and_frees_the_model() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    // The rate limit would take an hour to act: only the client's leaving
    // can end the first pull in time.
    let config = format!(
        "[store]\nplatform = \"rk3588\"\nendpoint = \"{}\"\nmodels_dir = \"{}\"\n\
         min_bytes_per_sec = 1\nrate_window_secs = 3600\n",
        hf.endpoint(),
        dir.0.join("models").display()
    );
    let server = Server::start(&config, &[]);
    let mut first = server
        .send(
            reqwest::Method::POST,
            "/api/pull",
            Some(json!({"model": "acme/slow"})),
            None,
        )
        .await;
    assert_eq!(first.status(), 200);
    let mut seen = String::new();
    while !seen.contains("\"completed\"") {
        let chunk = tokio::time::timeout(LIVENESS, first.chunk())
            .await
            .expect("progress")
            .expect("the body")
            .expect("more of the body");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(first);

    // A second pull of the same model proceeds, resuming what arrived.
    let second = server
        .send(
            reqwest::Method::POST,
            "/api/pull",
            Some(json!({"model": "acme/slow", "stream": false})),
            None,
        )
        .await;
    let status = second.status();
    let body = second.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("success"), "{body}");
    assert_eq!(hf.downloads("slow_rk3588.rkllm"), (1, 1));
    let stored = dir.0.join("models/slow_rk3588/slow_rk3588.rkllm");
    assert_eq!(
        std::fs::read_to_string(stored).unwrap(),
        "slow model ".repeat(4000)
    );
    assert!(
        server.log().iter().any(|l| l.contains("the client left")),
        "{:?}",
        server.log()
    );
}

#[tokio::test]
async fn pull_errors_before_the_download_come_with_their_http_status() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let config = format!(
        "[store]\nplatform = \"rk3588\"\nendpoint = \"{}\"\nmodels_dir = \"{}\"\n",
        hf.endpoint(),
        dir.0.join("models").display()
    );
    let server = Server::start(&config, &[]);
    for (model, status, needle) in [
        ("a b/c", 400, "expected owner/repo"),
        ("acme/nope", 404, "not found"),
        ("acme/readme", 404, "no .rkllm file"),
        ("acme/many", 400, "acme/many:FILE"),
        ("acme/tiny:nope.rkllm", 404, "no file nope.rkllm"),
    ] {
        // Streamed (the default) or not, the status says it.
        for stream in [true, false] {
            let response = server
                .send(
                    reqwest::Method::POST,
                    "/api/pull",
                    Some(json!({"model": model, "stream": stream})),
                    None,
                )
                .await;
            assert_eq!(response.status(), status, "{model} (stream {stream})");
            let content_type = response.headers()["content-type"].to_str().unwrap();
            assert!(
                content_type.starts_with("application/json"),
                "{content_type}"
            );
            let body: Value = response.json().await.unwrap();
            let error = body["error"].as_str().unwrap();
            assert!(error.contains(needle), "{model}: {body}");
        }
    }
}

#[tokio::test]
async fn a_broken_manifest_is_warned_about_once_until_it_changes() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let models = dir.0.join("models");
    let broken = models.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("manifest.json"), "{not json").unwrap();
    let config = format!(
        "[store]\nplatform = \"rk3588\"\nendpoint = \"{}\"\nmodels_dir = \"{}\"\n",
        hf.endpoint(),
        models.display()
    );
    let server = Server::start(&config, &[]);
    let warnings = || {
        server
            .log()
            .iter()
            .filter(|l| l.contains("WARN") && l.contains("broken"))
            .count()
    };
    // Each model pulled from a shell shows up at a rescan: two rescans at
    // least after the start.
    for repo in ["acme/one", "acme/two"] {
        let (ok, out, err) = cli_with(&hf, &dir.0, ("", ""), &["pull", repo], &[]);
        assert!(ok, "{out}{err}");
        let name = repo.trim_start_matches("acme/");
        wait_for_tags(&server, |tags| tags.contains(&format!("\"{name}\""))).await;
    }
    assert_eq!(warnings(), 1, "{:?}", server.log());

    // Changed (still broken): warned about again, once.
    std::fs::write(broken.join("manifest.json"), "{\"name\": 1}").unwrap();
    let (ok, _, err) = cli_with(&hf, &dir.0, ("", ""), &["rm", "one"], &[]);
    assert!(ok, "{err}");
    wait_for_tags(&server, |tags| !tags.contains("\"one\"")).await;
    let (ok, _, err) = cli_with(&hf, &dir.0, ("", ""), &["rm", "two"], &[]);
    assert!(ok, "{err}");
    wait_for_tags(&server, |tags| !tags.contains("\"two\"")).await;
    assert_eq!(warnings(), 2, "{:?}", server.log());
}

/// Waits (bounded) until `/api/tags` satisfies `done`.
async fn wait_for_tags(server: &Server, done: impl Fn(&str) -> bool) {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let tags = server.get_json("/api/tags", None).await.to_string();
        if done(&tags) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{tags}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
