//! Conversation snapshots on the runtime test double of both ABIs: two
//! chats alternating on one model each come back to their own snapshot
//! (the double prefills only what follows the longest common prefix of
//! the loaded cache and the prompt, and logs `run-cached bytes=N`); a long
//! system prompt is saved on its own first and shared; the files are
//! owner-only and counted in `models` and the metrics; the least recently
//! used go when the budget is spent (the `.json` files and the blocks on
//! disk count); a damaged file, or one the runtime refuses, is removed and
//! its chat answered in full and saved again. On a small disk of its own
//! (a tmpfs), the server saves nothing below the free-space reserve, leaves
//! nothing of a failed save, and says so once, not per chat.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::{
    CHATML_JINJA, Fake, ScratchDir, Server, fake_runtime, render_chatml as render,
};

const ANSWER: &str = "Snapshot answer.";

/// The model's own chat template (ChatML): every turn of a chat is sent
/// whole, rendered with it, and each render starts with the previous one.
const TEMPLATE: &str = CHATML_JINJA;
const ABIS: [Fake; 2] = [Fake::V1_3, Fake::V1_2];

fn long_system() -> String {
    "You are the careful assistant of a Rock 5B board; answer in one line. "
        .repeat(40)
        .trim_end()
        .to_owned()
}

struct Board {
    server: Server,
    scratch: ScratchDir,
    /// `[rkllm] snapshot_dir`, where the test reads it.
    root: PathBuf,
}

impl Board {
    fn start(fake: Fake, max_mb: f64) -> Self {
        Self::start_in(fake, max_mb, ScratchDir::new())
    }

    /// A server on the folders of `scratch` (a restart, when another ran
    /// there).
    fn start_in(fake: Fake, max_mb: f64, scratch: ScratchDir) -> Self {
        let dir = scratch.0.join("snapshots");
        Self::launch(
            fake,
            &format!("snapshot_max_mb = {max_mb}\n"),
            &dir,
            None,
            scratch,
        )
    }

    /// A server keeping its snapshots in `dir`, with more `[rkllm]`
    /// settings (`rkllm`: lines), on `disk` when given (`dir` is on it).
    fn launch(
        fake: Fake,
        rkllm: &str,
        dir: &Path,
        disk: Option<&SmallDisk>,
        scratch: ScratchDir,
    ) -> Self {
        let model = scratch.0.join("chat.rkllm");
        // Written once: a model file written again is another model file
        // to its snapshots (its time is in their fingerprint).
        if !model.exists() {
            std::fs::write(&model, ANSWER).unwrap();
        }
        let config = format!(
            "[rkllm]\nsnapshot_dir = {dir:?}\n{rkllm}\
             [[models]]\nname = \"chat\"\npath = {model:?}\nchat_template = {TEMPLATE:?}\n"
        );
        let runtime = fake_runtime(fake);
        let log = scratch.0.join("fake.log");
        let server = Server::start_under(
            &disk.map(SmallDisk::prefix).unwrap_or_default(),
            &config,
            &["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()],
            &[
                ("FAKE_RKLLM_TOKEN_MS", "0"),
                ("FAKE_RKLLM_PREFILL_US_PER_BYTE", "1"),
                ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
            ],
        );
        let root = match disk {
            Some(disk) => disk.seen_by(&server, dir),
            None => dir.to_owned(),
        };
        Self {
            server,
            scratch,
            root,
        }
    }

    fn events(&self, event: &str) -> Vec<String> {
        std::fs::read_to_string(self.scratch.0.join("fake.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(event))
            .map(str::to_owned)
            .collect()
    }

    /// Bytes the loaded cache covered in each run that had one.
    fn cached_runs(&self) -> Vec<usize> {
        self.events("run-cached bytes=")
            .iter()
            .map(|l| l["run-cached bytes=".len()..].parse().unwrap())
            .collect()
    }

    /// The model's folder of snapshots.
    fn folder(&self) -> PathBuf {
        let mut folders: Vec<PathBuf> = std::fs::read_dir(&self.root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(folders.len(), 1, "{folders:?}");
        folders.pop().unwrap()
    }

    /// The snapshot files and the prompts their fingerprints hold.
    fn files(&self) -> Vec<(PathBuf, String)> {
        let mut files: Vec<(PathBuf, String)> = std::fs::read_dir(self.folder())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
            .map(|p| {
                let sidecar = format!("{}.json", p.display());
                let fingerprint: Value =
                    serde_json::from_slice(&std::fs::read(sidecar).unwrap()).unwrap();
                (p, fingerprint["prompt"].as_str().unwrap().to_owned())
            })
            .collect();
        files.sort();
        files
    }

    async fn chat(&self, messages: &[Value]) {
        let response = self
            .server
            .send(
                reqwest::Method::POST,
                "/v1/chat/completions",
                Some(json!({"model": "chat", "messages": messages})),
                None,
            )
            .await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], ANSWER, "{body}");
    }

    async fn snapshots_info(&self) -> Value {
        let models = self.server.ok("models", json!({})).await;
        models["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "chat")
            .map(|m| m["snapshots"].clone())
            .unwrap()
    }
}

fn system(text: &str) -> Value {
    json!({"role": "system", "content": text})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant() -> Value {
    json!({"role": "assistant", "content": ANSWER})
}

/// The prompt of the one kept snapshot that contains `text`.
fn kept(board: &Board, text: &str) -> String {
    let found: Vec<String> = board
        .files()
        .into_iter()
        .map(|(_, p)| p)
        .filter(|p| p.contains(text))
        .collect();
    assert_eq!(found.len(), 1, "{text:?}: {found:?}");
    found[0].clone()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn alternating_chats_come_back_to_their_own_snapshot() {
    for fake in ABIS {
        let board = Board::start(fake, 2048.0);
        let sys = long_system();
        let a1 = vec![system(&sys), user("alpha one")];
        board.chat(&a1).await;
        // The system prompt is saved on its own first, then the chat, which
        // the runtime prefilled from the system prompt's snapshot on.
        let saves = board.events("prompt-cache-save");
        assert_eq!(saves.len(), 2, "{fake:?}: {saves:?}");
        let system_prefix = format!("<|im_start|>system\n{sys}");
        let prompts: Vec<String> = board.files().into_iter().map(|(_, p)| p).collect();
        assert!(prompts.contains(&system_prefix), "{fake:?}: {prompts:?}");
        let a1_prompt = kept(&board, "alpha one");
        assert_eq!(
            a1_prompt,
            render(&[("system", &sys), ("user", "alpha one")]),
            "{fake:?}"
        );
        assert_eq!(board.cached_runs(), vec![system_prefix.len()], "{fake:?}");

        // Another chat with the same system prompt starts from it (from the
        // first chat's snapshot, which shares a little more: the user's
        // opening tag).
        let b1 = vec![system(&sys), user("beta one")];
        board.chat(&b1).await;
        let shared = *board.cached_runs().last().unwrap();
        assert!(
            shared >= system_prefix.len() && shared < a1_prompt.len(),
            "{fake:?}: {shared}"
        );
        let b1_prompt = kept(&board, "beta one");

        // The first chat comes back: the runtime holds the second, so the
        // first is sent whole, from its own snapshot.
        let mut a2 = a1.clone();
        a2.extend([assistant(), user("alpha two")]);
        board.chat(&a2).await;
        assert_eq!(
            board.cached_runs().last(),
            Some(&a1_prompt.len()),
            "{fake:?}"
        );
        // And the second: from its own.
        let mut b2 = b1.clone();
        b2.extend([assistant(), user("beta two")]);
        board.chat(&b2).await;
        assert_eq!(
            board.cached_runs().last(),
            Some(&b1_prompt.len()),
            "{fake:?}"
        );

        // Kept: the system prompt and each chat's latest turn (an earlier
        // turn's snapshot goes when its chat saves a longer one).
        let prompts: Vec<String> = board.files().into_iter().map(|(_, p)| p).collect();
        assert_eq!(prompts.len(), 3, "{fake:?}: {prompts:?}");
        assert!(prompts.contains(&system_prefix), "{fake:?}: {prompts:?}");
        assert!(
            kept(&board, "alpha two").starts_with(&a1_prompt),
            "{fake:?}"
        );
        assert!(kept(&board, "beta two").starts_with(&b1_prompt), "{fake:?}");
        // Owner-only.
        assert_eq!(mode(&board.folder()), 0o700, "{fake:?}");
        for (path, _) in board.files() {
            assert_eq!(mode(&path), 0o600, "{fake:?}: {path:?}");
        }

        // What is kept, and the hits and misses, in models and metrics.
        let info = board.snapshots_info().await;
        assert_eq!(info["files"], 3, "{fake:?}: {info}");
        assert_eq!(info["hits"], 4, "{fake:?}: {info}");
        assert_eq!(info["misses"], 0, "{fake:?}: {info}");
        // What the folder takes on disk: the snapshots, their `.json` files
        // and the folder itself.
        let bytes = counted(&board.folder());
        assert_eq!(info["bytes"], bytes, "{fake:?}: {info}");
        let metrics = board.server.metrics_text().await;
        for line in [
            "rkllm_snapshot_hits_total{model=\"chat\"} 4\n".to_owned(),
            "rkllm_snapshot_misses_total{model=\"chat\"} 0\n".to_owned(),
            "rkllm_snapshot_files{model=\"chat\"} 3\n".to_owned(),
            format!("rkllm_snapshot_bytes{{model=\"chat\"}} {bytes}\n"),
        ] {
            assert!(metrics.contains(&line), "{fake:?}: {line} in\n{metrics}");
        }
    }
}

#[tokio::test]
async fn the_least_recently_used_snapshot_goes_when_the_budget_is_spent() {
    for fake in ABIS {
        // Room on disk for two snapshots of these short chats with their
        // `.json` files, not three: what they take is measured first on
        // another server.
        let measure = Board::start(fake, 2048.0);
        let mut taken = Vec::new();
        for n in 1..=2 {
            measure
                .chat(&[system("be brief"), user(&format!("question number {n}"))])
                .await;
            taken.push(measure.snapshots_info().await["bytes"].as_u64().unwrap());
        }
        drop(measure);
        let budget = taken[1] + (taken[1] - taken[0]) / 2;
        let board = Board::start(fake, budget as f64 / 1024.0 / 1024.0);
        for n in 1..=3 {
            board
                .chat(&[system("be brief"), user(&format!("question number {n}"))])
                .await;
        }
        let prompts: Vec<String> = board.files().into_iter().map(|(_, p)| p).collect();
        assert_eq!(prompts.len(), 2, "{fake:?}: {prompts:?}");
        assert!(
            prompts.iter().all(|p| !p.contains("question number 1")),
            "{fake:?}: the oldest stays: {prompts:?}"
        );
        // The first chat comes back to no snapshot of its own: a miss, and
        // it is saved again (evicting the next oldest).
        let before = board.cached_runs().len();
        board
            .chat(&[
                system("be brief"),
                user("question number 1"),
                assistant(),
                user("more"),
            ])
            .await;
        let covered = board.cached_runs()[before..].to_vec();
        let shared =
            prompts[0].find("question number").expect("a chat's prompt") + "question number ".len();
        assert!(
            covered.iter().all(|&n| n <= shared),
            "{fake:?}: {covered:?}"
        );
        let info = board.snapshots_info().await;
        assert_eq!(info["files"], 2, "{fake:?}: {info}");
        assert!(info["misses"].as_u64().unwrap() >= 1, "{fake:?}: {info}");
    }
}

/// How a snapshot file is harmed.
#[derive(Debug, Clone, Copy)]
enum Harm {
    /// Its bytes change: the fingerprint tells.
    Changed,
    /// Garbage the fingerprint vouches for: only the runtime can tell.
    Refused,
}

fn harm(path: &Path, how: Harm) {
    use sha2::{Digest, Sha256};
    let bad: Vec<u8> = std::fs::read(path)
        .unwrap()
        .iter()
        .map(|b| b ^ 0x5a)
        .collect();
    std::fs::write(path, &bad).unwrap();
    if let Harm::Refused = how {
        let sidecar = format!("{}.json", path.display());
        let mut fingerprint: Value =
            serde_json::from_slice(&std::fs::read(&sidecar).unwrap()).unwrap();
        fingerprint["cache_sha256"] = json!(format!("{:x}", Sha256::digest(&bad)));
        std::fs::write(&sidecar, fingerprint.to_string()).unwrap();
    }
}

#[tokio::test]
async fn a_damaged_snapshot_is_removed_and_its_chat_answered_in_full_and_saved_again() {
    for fake in ABIS {
        for how in [Harm::Changed, Harm::Refused] {
            let board = Board::start(fake, 2048.0);
            let a1 = vec![system("be brief"), user("alpha one")];
            board.chat(&a1).await;
            board.chat(&[system("be brief"), user("beta one")]).await;
            let a1_prompt = kept(&board, "alpha one");
            let (path, _) = board
                .files()
                .into_iter()
                .find(|(_, p)| *p == a1_prompt)
                .unwrap();
            harm(&path, how);
            let board = if let Harm::Refused = how {
                // Read again from its fingerprint by the next start: kept.
                let Board {
                    server, scratch, ..
                } = board;
                drop(server);
                let board = Board::start_in(fake, 2048.0, scratch);
                assert!(board.files().iter().any(|(p, _)| *p == path), "{fake:?}");
                board
            } else {
                board
            };
            let mut a2 = a1.clone();
            a2.extend([assistant(), user("alpha two")]);
            board.chat(&a2).await;
            // Nothing of the damaged file reached the run.
            assert!(
                board.cached_runs().iter().all(|&n| n < a1_prompt.len()),
                "{fake:?} {how:?}: {:?}",
                board.cached_runs()
            );
            // A runner's warnings reach the server's log through its
            // stderr, a moment after the answer.
            let damaged = || -> Vec<String> {
                board
                    .server
                    .log()
                    .into_iter()
                    .filter(|l| l.contains("WARN") && l.contains("snapshot damaged"))
                    .collect()
            };
            let waited = std::time::Instant::now();
            while damaged().is_empty() && waited.elapsed() < std::time::Duration::from_secs(20) {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            let warnings = damaged();
            assert_eq!(warnings.len(), 1, "{fake:?} {how:?}: {warnings:?}");
            if let Harm::Refused = how {
                assert!(
                    warnings[0].contains("rkllm_load_prompt_cache"),
                    "{warnings:?}"
                );
                assert_eq!(board.events("prompt-cache-refused").len(), 1, "{fake:?}");
            }
            // Saved again, for this turn.
            let prompts: Vec<String> = board.files().into_iter().map(|(_, p)| p).collect();
            assert!(
                prompts.iter().any(|p| p.contains("alpha two")),
                "{fake:?} {how:?}: {prompts:?}"
            );
            let info = board.snapshots_info().await;
            let misses = if let Harm::Refused = how { 1 } else { 3 };
            assert_eq!(info["misses"], misses, "{fake:?} {how:?}: {info}");
        }
    }
}

#[tokio::test]
async fn snapshots_off_for_a_model_keep_nothing() {
    let scratch = ScratchDir::new();
    let model = scratch.0.join("chat.rkllm");
    std::fs::write(&model, ANSWER).unwrap();
    let config = format!(
        "[rkllm]\nsnapshot_dir = {:?}\n[[models]]\nname = \"chat\"\npath = {model:?}\n\
         snapshots = false\n",
        scratch.0.join("snapshots")
    );
    let runtime = fake_runtime(Fake::V1_3);
    let log = scratch.0.join("fake.log");
    let server = Server::start_env(
        &config,
        &["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()],
        &[
            ("FAKE_RKLLM_TOKEN_MS", "0"),
            ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
        ],
    );
    let root = scratch.0.join("snapshots");
    let board = Board {
        server,
        scratch,
        root,
    };
    board.chat(&[system("be brief"), user("alpha one")]).await;
    assert!(board.events("prompt-cache-save").is_empty());
    assert!(!board.scratch.0.join("snapshots").exists());
    assert_eq!(board.snapshots_info().await, Value::Null);
}

/// The model's system-prompt cache and the snapshots share the runtime's
/// one loaded cache: a snapshot the system-prompt cache replaced is loaded
/// again when its chat comes back (it used to be taken for still loaded).
#[tokio::test]
async fn a_snapshot_the_system_prompt_cache_replaced_is_loaded_again() {
    for fake in ABIS {
        let scratch = ScratchDir::new();
        let model = scratch.0.join("chat.rkllm");
        std::fs::write(&model, ANSWER).unwrap();
        let cached = "You answer questions about the board. ".repeat(20);
        let config = format!(
            "[rkllm]\nsnapshot_dir = {:?}\n[[models]]\nname = \"chat\"\npath = {model:?}\n\
             chat_template = {TEMPLATE:?}\n\
             [models.system_prompt_cache]\nprompt = {cached:?}\npath = {:?}\n",
            scratch.0.join("snapshots"),
            scratch.0.join("system.prompt-cache")
        );
        let runtime = fake_runtime(fake);
        let log = scratch.0.join("fake.log");
        let server = Server::start_env(
            &config,
            &["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()],
            &[
                ("FAKE_RKLLM_TOKEN_MS", "0"),
                ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
            ],
        );
        let root = scratch.0.join("snapshots");
        let board = Board {
            server,
            scratch,
            root,
        };
        let y1 = vec![
            system("be brief"),
            user("a question about the weather outside, again"),
        ];
        board.chat(&y1).await;
        // Another chat sharing most of y1's prompt starts from y1's
        // snapshot, which the runtime then holds.
        let x1 = vec![
            system("be brief"),
            user("a question about the weather outside"),
        ];
        board.chat(&x1).await;
        assert!(!board.cached_runs().is_empty(), "{fake:?}");
        // A prompt that starts with the system-prompt cache's text has that
        // cache loaded in its place.
        let plain = board
            .server
            .ok("run", json!({"prompt": format!("{cached}What is an NPU?")}))
            .await;
        assert_eq!(plain["text"], ANSWER, "{fake:?}: {plain}");
        // y1 comes back: its snapshot is loaded again and covers its prompt.
        let y1_prompt = kept(&board, "outside, again");
        let mut y2 = y1.clone();
        y2.extend([assistant(), user("and tomorrow?")]);
        board.chat(&y2).await;
        assert_eq!(
            board.cached_runs().last(),
            Some(&y1_prompt.len()),
            "{fake:?}: {:?}",
            board.events("prompt-cache")
        );
    }
}

/// `sh -c` words that mount a tmpfs of size `$1` at `$2`, then become the
/// command that follows.
const MOUNT_AND_RUN: &str = "mount -t tmpfs -o size=\"$1\" tmpfs \"$2\" && shift 2 && exec \"$@\"";

/// A small disk (a tmpfs) of one server's own: mounted by `unshare -rm` in
/// a mount namespace that only the server and its runners live in, so it
/// goes with them; the test reaches it through `/proc/PID/root`.
struct SmallDisk {
    at: PathBuf,
    kib: u64,
}

impl SmallDisk {
    /// A disk of `kib` KiB at `scratch/disk`, or why there can be none on
    /// this machine.
    fn new(scratch: &ScratchDir, kib: u64) -> Result<Self, String> {
        let disk = Self {
            at: scratch.0.join("disk"),
            kib,
        };
        std::fs::create_dir_all(&disk.at).unwrap();
        let mut words = disk.prefix().into_iter();
        let probe = std::process::Command::new(words.next().unwrap())
            .args(words)
            .arg("true")
            .output()
            .map_err(|e| format!("`unshare` cannot be run ({e})"))?;
        if !probe.status.success() {
            return Err(format!(
                "a tmpfs cannot be mounted in a mount namespace of its own (`unshare -rm` and \
                 `mount -t tmpfs` need user namespaces or CAP_SYS_ADMIN; {}): {}",
                probe.status,
                String::from_utf8_lossy(&probe.stderr).trim()
            ));
        }
        Ok(disk)
    }

    /// The words that run a command with the disk mounted.
    fn prefix(&self) -> Vec<OsString> {
        let words = ["unshare", "-rm", "sh", "-c", MOUNT_AND_RUN, "sh"];
        let mut prefix: Vec<OsString> = words.iter().map(OsString::from).collect();
        prefix.push(format!("{}k", self.kib).into());
        prefix.push(self.at.clone().into());
        prefix
    }

    /// `path` (on the disk) as the test reaches it while `server` runs.
    fn seen_by(&self, server: &Server, path: &Path) -> PathBuf {
        Path::new(&format!("/proc/{}/root", server.pid())).join(path.strip_prefix("/").unwrap())
    }
}

/// A test that needs a [`SmallDisk`] says why it cannot run, and ends.
macro_rules! small_disk_or_skip {
    ($scratch:expr, $kib:expr) => {
        match SmallDisk::new(&$scratch, $kib) {
            Ok(disk) => disk,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        }
    };
}

/// Bytes free on the file system of `path`, for an unprivileged writer.
fn free_bytes(path: &Path) -> u64 {
    let stat = rustix::fs::statvfs(path).unwrap();
    stat.f_bavail * stat.f_frsize
}

/// The files under `dir` (all of them, folders walked) and what the folder
/// takes on disk, as `du` counts it: each file's and folder's blocks.
fn on_disk(dir: &Path) -> (Vec<String>, u64) {
    use std::os::unix::fs::MetadataExt as _;
    let mut names = Vec::new();
    let mut bytes = std::fs::metadata(dir).unwrap().blocks() * 512;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            let (inner, inner_bytes) = on_disk(&entry.path());
            names.extend(inner);
            bytes += inner_bytes;
        } else {
            names.push(entry.file_name().to_string_lossy().into_owned());
            bytes += entry.metadata().unwrap().blocks() * 512;
        }
    }
    names.sort();
    (names, bytes)
}

/// What `dir` and the files in it take on disk, as the budget counts it:
/// each one's blocks, or its length when that is more.
fn counted(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let size = |meta: std::fs::Metadata| meta.len().max(meta.blocks() * 512);
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| size(e.unwrap().metadata().unwrap()))
        .sum::<u64>()
        + size(std::fs::metadata(dir).unwrap())
}

/// The files that are not a snapshot with its fingerprint: what a save
/// left behind.
fn leftovers(names: &[String]) -> Vec<&String> {
    names
        .iter()
        .filter(|n| match n.strip_suffix(".snapshot.json") {
            Some(stem) => !names.contains(&format!("{stem}.snapshot")),
            None => !n
                .strip_suffix(".snapshot")
                .is_some_and(|stem| names.contains(&format!("{stem}.snapshot.json"))),
        })
        .collect()
}

/// The server's log lines about the snapshots' free-space reserve, each as
/// its level and message.
fn reserve_lines(log: &[String]) -> Vec<String> {
    log.iter()
        .filter(|l| l.contains("free-space reserve"))
        .map(|l| {
            let level = if l.contains("WARN") { "WARN" } else { "INFO" };
            format!("{level} {l}")
        })
        .collect()
}

/// A disk far below the reserve (the default, 512 MB, on 256 KiB): every
/// chat is answered, no save is even tried, nothing is left on the disk,
/// and the server says so once, not once per chat.
#[tokio::test]
async fn on_a_disk_below_the_reserve_chats_answer_and_nothing_is_saved_and_it_is_said_once() {
    let scratch = ScratchDir::new();
    let disk = small_disk_or_skip!(scratch, 256);
    let dir = disk.at.join("snapshots");
    let mut board = Board::launch(Fake::V1_3, "", &dir, Some(&disk), scratch);
    let sys = long_system();
    let chats = 40;
    for n in 0..chats {
        board
            .chat(&[system(&sys), user(&format!("question number {n}"))])
            .await;
    }
    let saves = board.events("prompt-cache-save");
    let (names, bytes) = on_disk(&board.root);
    let free = free_bytes(&board.root);
    let log = board.server.stop_and_log();
    let warnings: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("snapshot"))
        .collect();
    eprintln!(
        "after {chats} chats: {} saves, {} files ({} left by saves), {bytes} bytes on disk, \
         {free} bytes free, {} warnings",
        saves.len(),
        names.len(),
        leftovers(&names).len(),
        warnings.len()
    );
    assert_eq!(saves, Vec::<String>::new());
    assert_eq!(names, Vec::<String>::new());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("free-space reserve"), "{warnings:?}");
}

/// A disk that crosses its reserve: no save while it is below, saves again
/// once there is room (said once), and none that would take it below the
/// reserve again (said once more); no failed save leaves a file behind.
#[tokio::test]
async fn snapshots_stop_at_the_free_space_reserve_and_say_so_once_each_time_it_is_reached() {
    let scratch = ScratchDir::new();
    let disk = small_disk_or_skip!(scratch, 640);
    let dir = disk.at.join("snapshots");
    let reserve = 256 * 1024;
    let mut board = Board::launch(
        Fake::V1_3,
        "snapshot_min_free_mb = 0.25\n",
        &dir,
        Some(&disk),
        scratch,
    );
    let question = |n: usize| format!("question number {n}: {}", "tell me more. ".repeat(900));
    // Most of the disk taken by another file: below the reserve.
    let filler = board.root.parent().unwrap().join("filler");
    std::fs::write(&filler, vec![0u8; 440 * 1024]).unwrap();
    for n in 0..3 {
        board.chat(&[system("be brief"), user(&question(n))]).await;
    }
    assert_eq!(board.events("prompt-cache-save"), Vec::<String>::new());
    // Room again: chats are saved until the reserve is reached, no further.
    std::fs::remove_file(&filler).unwrap();
    let chats = 24;
    for n in 3..3 + chats {
        board.chat(&[system("be brief"), user(&question(n))]).await;
    }
    let saved = board.events("prompt-cache-save").len();
    let (names, bytes) = on_disk(&board.root);
    let free = free_bytes(&board.root);
    eprintln!(
        "after {} chats: {saved} saves, {} files, {bytes} bytes on disk, {free} bytes free",
        3 + chats,
        names.len()
    );
    assert!(saved >= 3 && saved < chats, "{saved} saves");
    assert!(free >= reserve, "{free} bytes free");
    assert_eq!(leftovers(&names), Vec::<&String>::new());
    assert_eq!(
        names.len(),
        2 * board.snapshots_info().await["files"].as_u64().unwrap() as usize
    );
    let log = board.server.stop_and_log();
    let said: Vec<String> = reserve_lines(&log);
    eprintln!("{said:#?}");
    let levels: Vec<&str> = said.iter().map(|l| &l[..4]).collect();
    assert_eq!(levels, ["WARN", "INFO", "WARN"], "{said:#?}");
    let warnings = log
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("snapshot"))
        .count();
    assert_eq!(warnings, 2, "{log:#?}");
}

/// `snapshot_max_mb` bounds what the snapshot folder takes on disk: the
/// `.json` beside each snapshot, and the blocks of both, count too.
#[tokio::test]
async fn the_budget_counts_the_fingerprints_and_the_blocks_on_disk() {
    let budget = 40 * 1024;
    let scratch = ScratchDir::new();
    let dir = scratch.0.join("snapshots");
    let board = Board::launch(
        Fake::V1_3,
        &format!("snapshot_max_mb = {}\n", budget as f64 / 1024.0 / 1024.0),
        &dir,
        None,
        scratch,
    );
    // Snapshots of about 2 KB: twelve of them fit the budget, not with
    // their fingerprints, nor in their blocks.
    let chats = 12;
    for n in 0..chats {
        board
            .chat(&[
                system("be brief"),
                user(&format!(
                    "question number {n}: {}",
                    "and then? ".repeat(200)
                )),
            ])
            .await;
    }
    let (names, bytes) = on_disk(&board.folder());
    let info = board.snapshots_info().await;
    eprintln!(
        "after {chats} chats: {} files, {bytes} bytes on disk ({info}) for a budget of {budget}",
        names.len()
    );
    assert!(bytes <= budget, "{bytes} bytes on disk: {names:?}");
    assert!(info["bytes"].as_u64().unwrap() <= budget, "{info}");
    assert!(info["files"].as_u64().unwrap() >= 1, "{info}");
    assert_eq!(leftovers(&names), Vec::<&String>::new());
}

/// The snapshot folder is made owner-only (with the folders it needs),
/// like each model's folder in it.
#[tokio::test]
async fn the_snapshot_folder_is_made_owner_only() {
    let scratch = ScratchDir::new();
    let dir = scratch.0.join("state").join("snapshots");
    let board = Board::launch(Fake::V1_3, "", &dir, None, scratch);
    board.chat(&[system("be brief"), user("alpha one")]).await;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&board.folder()), 0o700);
}
