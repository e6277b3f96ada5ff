//! Prompt-cache files, on both ABIs: built once at load (the runtime saves
//! the system prompt's prefill), loaded again after a restart instead of
//! rebuilt, applied to requests that start with the system prompt, and
//! released for the others; a damaged file (garbage, cut short, empty)
//! beside an intact fingerprint, or one the runtime refuses, is rebuilt and
//! never fails a request. The test double prefills in time proportional
//! to the bytes the cache does not cover and logs what it does.

use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;

use crate::harness::{Fake, ScratchDir, Server, fake_runtime};

fn system_prompt() -> String {
    "You are the assistant of a Rock 5B board. Answer briefly. ".repeat(40)
}

fn start(fake: Fake, scratch: &ScratchDir) -> Server {
    let model = scratch.0.join("chat.rkllm");
    if !model.exists() {
        std::fs::write(&model, "Cached answer.").unwrap();
    }
    let cache = scratch.0.join("caches").join("chat.prompt-cache");
    // No conversation snapshots: the saves and loads counted are the
    // system prompt cache's alone.
    let config = format!(
        "[[models]]\nname = \"chat\"\npath = {model:?}\nsnapshots = false\n\
         [models.system_prompt_cache]\nprompt = {prompt:?}\npath = {cache:?}\n",
        prompt = system_prompt()
    );
    let runtime = fake_runtime(fake);
    let log = scratch.0.join("fake.log");
    Server::start_env(
        &config,
        &[
            "--backend",
            "rkllm",
            "--runtime",
            runtime.to_str().unwrap(),
            "--preload",
            "chat",
        ],
        &[
            ("FAKE_RKLLM_TOKEN_MS", "0"),
            ("FAKE_RKLLM_PREFILL_US_PER_BYTE", "100"),
            ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
        ],
    )
}

fn count(scratch: &ScratchDir, event: &str) -> usize {
    std::fs::read_to_string(scratch.0.join("fake.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(event))
        .count()
}

#[tokio::test]
async fn the_cache_is_built_once_reused_after_a_restart_and_applied_by_prefix() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let scratch = ScratchDir::new();
        let cache = scratch.0.join("caches").join("chat.prompt-cache");
        {
            let server = start(fake, &scratch);
            assert_eq!(count(&scratch, "prompt-cache-save"), 1);
            assert_eq!(count(&scratch, "prompt-cache-load"), 1);
            let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
            let sidecar = std::fs::read_to_string(format!("{}.json", cache.display())).unwrap();
            assert!(sidecar.contains("prompt_sha256"), "{sidecar}");

            // A request that starts with the system prompt prefills only the rest.
            let prompt = format!("{}What is an NPU?", system_prompt());
            let cached = server.ok("run", json!({"prompt": prompt})).await;
            assert_eq!(cached["text"], "Cached answer.");
            assert_eq!(count(&scratch, "run-cached"), 1);
            // Another prompt: the cache is released, the whole prompt prefilled.
            let other = server
                .ok(
                    "run",
                    json!({"prompt": format!("Hello. {}", system_prompt())}),
                )
                .await;
            assert_eq!(count(&scratch, "prompt-cache-release"), 1);
            assert_eq!(count(&scratch, "run-cached"), 1);
            let (fast, slow) = (
                cached["timings"]["prefill_ms"].as_f64().unwrap(),
                other["timings"]["prefill_ms"].as_f64().unwrap(),
            );
            // The double sleeps 100 µs per uncovered byte: 2,320 bytes apart.
            assert!(
                cached["usage"]["prompt_tokens"].as_u64()
                    < other["usage"]["prompt_tokens"].as_u64(),
                "{cached} {other}"
            );
            assert!(
                fast < slow,
                "prefill {fast} ms with the cache, {slow} ms without"
            );
            // And back: loaded again for a matching prompt.
            server.ok("run", json!({"prompt": prompt})).await;
            assert_eq!(count(&scratch, "prompt-cache-load"), 2);
            assert_eq!(count(&scratch, "run-cached"), 2);

            // A chat whose system message is the cached prompt: its first
            // turn uses the cache, its second continues the runtime's
            // history and sends only the new message, as without a cache.
            let chat = |messages: serde_json::Value| {
                server.send(
                    reqwest::Method::POST,
                    "/v1/chat/completions",
                    Some(json!({"model": "chat", "messages": messages})),
                    None,
                )
            };
            let system = system_prompt();
            let first = chat(json!([
                {"role": "system", "content": system},
                {"role": "user", "content": "First question?"}
            ]))
            .await;
            assert_eq!(first.status(), 200);
            assert_eq!(count(&scratch, "run-cached"), 3);
            let second = chat(json!([
                {"role": "system", "content": system},
                {"role": "user", "content": "First question?"},
                {"role": "assistant", "content": "Cached answer."},
                {"role": "user", "content": "Second question?"}
            ]))
            .await;
            assert_eq!(second.status(), 200);
            let log = std::fs::read_to_string(scratch.0.join("fake.log")).unwrap();
            let last_run = log.lines().rfind(|l| l.starts_with("run ")).unwrap();
            assert!(
                last_run.contains("keep_history=1")
                    && last_run.ends_with("prompt=Second question?"),
                "{last_run}"
            );
        }
        // A restart loads the file; nothing is built again.
        let _server = start(fake, &scratch);
        assert_eq!(count(&scratch, "prompt-cache-save"), 1);
        assert_eq!(count(&scratch, "prompt-cache-load"), 3);
        drop(_server);
        // Another model file: the cache is made again.
        std::fs::write(scratch.0.join("chat.rkllm"), "A new model.").unwrap();
        let _server = start(fake, &scratch);
        assert_eq!(count(&scratch, "prompt-cache-save"), 2);
    }
}

/// How a test damages a cache file.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Other bytes of the same length (only its SHA-256 tells).
    Garbage,
    /// Its first half, as a write cut short leaves it.
    Half,
    /// Nothing, as a power cut after an unsynced rename may leave it.
    Empty,
}

const DAMAGES: [Damage; 3] = [Damage::Garbage, Damage::Half, Damage::Empty];

fn damage(path: &std::path::Path, damage: Damage) {
    let good = std::fs::read(path).unwrap();
    let bad = match damage {
        Damage::Garbage => good.iter().map(|b| b ^ 0x5a).collect(),
        Damage::Half => good[..good.len() / 2].to_vec(),
        Damage::Empty => Vec::new(),
    };
    std::fs::write(path, bad).unwrap();
}

/// Makes the fingerprint vouch for the file as it is now, so that only
/// the runtime can tell that it is damaged.
fn vouch_for(path: &std::path::Path) {
    use sha2::{Digest, Sha256};
    let sidecar = format!("{}.json", path.display());
    let mut fingerprint: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&sidecar).unwrap()).unwrap();
    let bytes = std::fs::read(path).unwrap();
    fingerprint["cache_size"] = json!(bytes.len());
    fingerprint["cache_sha256"] = json!(format!("{:x}", Sha256::digest(&bytes)));
    std::fs::write(&sidecar, fingerprint.to_string()).unwrap();
}

/// The server's warnings about the prompt cache at `path`.
fn cache_warnings(server: &Server, path: &std::path::Path) -> Vec<String> {
    let path = path.display().to_string();
    server
        .log()
        .into_iter()
        .filter(|l| l.contains("WARN") && l.contains("prompt cache") && l.contains(&path))
        .collect()
}

/// A request that starts with the system prompt: it succeeds, and says
/// whether the runtime had the cache loaded for it.
async fn cached_request(server: &Server, scratch: &ScratchDir) -> bool {
    let before = count(scratch, "run-cached");
    let prompt = format!("{}What is an NPU?", system_prompt());
    let result = server.ok("run", json!({"prompt": prompt})).await;
    assert_eq!(result["text"], "Cached answer.", "{result}");
    count(scratch, "run-cached") > before
}

async fn model_state(server: &Server) -> String {
    let models = server.ok("models", json!({})).await;
    models["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "chat")
        .map(|m| m["state"].as_str().unwrap_or_default().to_owned())
        .unwrap()
}

/// After a server that built the cache stopped, `harm` damages it; a new
/// server must warn once, rebuild it at load and use it, and (when
/// `restart`) the server after it load the rebuilt file. Returns the
/// events of the double's log since the damage.
async fn damaged_at_load(
    fake: Fake,
    harm: impl Fn(&std::path::Path),
    restart: bool,
) -> (ScratchDir, Vec<String>) {
    let scratch = ScratchDir::new();
    let cache = scratch.0.join("caches").join("chat.prompt-cache");
    drop(start(fake, &scratch));
    let good = std::fs::read(&cache).unwrap();
    let before = count(&scratch, "");
    harm(&cache);
    let server = start(fake, &scratch);
    assert!(
        cached_request(&server, &scratch).await,
        "the rebuilt cache is not used"
    );
    assert_eq!(model_state(&server).await, "loaded");
    let warnings = cache_warnings(&server, &cache);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("damaged"), "{warnings:?}");
    assert_eq!(
        std::fs::read(&cache).unwrap(),
        good,
        "the file is not rebuilt"
    );
    drop(server);
    let log = std::fs::read_to_string(scratch.0.join("fake.log")).unwrap();
    let events = log.lines().skip(before).map(str::to_owned).collect();
    if restart {
        // The next start loads the rebuilt file and builds nothing.
        let saves = count(&scratch, "prompt-cache-save");
        let server = start(fake, &scratch);
        assert!(cached_request(&server, &scratch).await);
        assert_eq!(count(&scratch, "prompt-cache-save"), saves);
        assert!(cache_warnings(&server, &cache).is_empty());
    }
    (scratch, events)
}

fn events(events: &[String], event: &str) -> usize {
    events.iter().filter(|l| l.starts_with(event)).count()
}

#[tokio::test]
async fn a_cache_that_does_not_match_its_fingerprint_is_rebuilt_before_the_runtime_sees_it() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        for kind in DAMAGES {
            let (_scratch, log) = damaged_at_load(fake, |cache| damage(cache, kind), false).await;
            assert_eq!(
                events(&log, "prompt-cache-save"),
                1,
                "{fake:?} {kind:?}: {log:?}"
            );
            // Its size or SHA-256 gave it away: the runtime never read it.
            assert_eq!(
                events(&log, "prompt-cache-refused"),
                0,
                "{fake:?} {kind:?}: {log:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_cache_the_runtime_refuses_is_rebuilt_at_load() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        for kind in DAMAGES {
            let harm = |cache: &std::path::Path| {
                damage(cache, kind);
                vouch_for(cache);
            };
            let (_scratch, log) = damaged_at_load(fake, harm, matches!(kind, Damage::Empty)).await;
            // The double refuses each as the runtime does, for its reason.
            let why = match kind {
                Damage::Garbage => "not a prompt cache",
                Damage::Half => "truncated",
                Damage::Empty => "empty file",
            };
            let refused: Vec<_> = log
                .iter()
                .filter(|l| l.starts_with("prompt-cache-refused"))
                .collect();
            assert_eq!(
                refused,
                [&format!("prompt-cache-refused why={why}")],
                "{fake:?} {kind:?}: {log:?}"
            );
            assert_eq!(
                events(&log, "prompt-cache-save"),
                1,
                "{fake:?} {kind:?}: {log:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_cache_damaged_while_the_model_is_loaded_is_skipped_once_then_rebuilt() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        // Found by its fingerprint (empty), and by the runtime (cut short
        // but vouched for).
        for vouched in [false, true] {
            let scratch = ScratchDir::new();
            let cache = scratch.0.join("caches").join("chat.prompt-cache");
            let server = start(fake, &scratch);
            let good = std::fs::read(&cache).unwrap();
            assert!(cached_request(&server, &scratch).await);
            // Another prompt releases the cache; it is damaged meanwhile.
            server.ok("run", json!({"prompt": "Hello."})).await;
            damage(&cache, if vouched { Damage::Half } else { Damage::Empty });
            if vouched {
                vouch_for(&cache);
            }
            // The request that finds it damaged runs without it.
            assert!(!cached_request(&server, &scratch).await);
            let warnings = cache_warnings(&server, &cache);
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(!cache.exists(), "the damaged file is still there");
            assert_eq!(
                count(&scratch, "prompt-cache-refused"),
                usize::from(vouched),
                "{fake:?}"
            );
            // The next one builds it again first, and uses it.
            assert!(cached_request(&server, &scratch).await);
            assert_eq!(count(&scratch, "prompt-cache-save"), 2);
            assert_eq!(std::fs::read(&cache).unwrap(), good);
            assert!(cached_request(&server, &scratch).await);
            assert_eq!(count(&scratch, "prompt-cache-save"), 2);
            assert_eq!(cache_warnings(&server, &cache).len(), 1);
            assert_eq!(model_state(&server).await, "loaded");
        }
    }
}

#[tokio::test]
async fn a_cache_that_cannot_be_built_leaves_the_model_serving_without_it() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let scratch = ScratchDir::new();
        // Its folder cannot be made: a file stands there.
        std::fs::write(scratch.0.join("caches"), "not a folder").unwrap();
        let cache = scratch.0.join("caches").join("chat.prompt-cache");
        let server = start(fake, &scratch);
        assert!(!cached_request(&server, &scratch).await);
        assert!(!cached_request(&server, &scratch).await);
        assert_eq!(model_state(&server).await, "loaded");
        let warnings = cache_warnings(&server, &cache);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("cannot be built"), "{warnings:?}");
        // Nothing was built, and it is not tried before every request.
        assert_eq!(count(&scratch, "prompt-cache-save"), 0);
    }
}
