//! A returning conversation's snapshot brought up to date while the NPU is
//! idle, on the runtime test double of both ABIs, for a model in the
//! runtime's own template (a chat sent whole goes as one transcript). Two
//! chats take turns; after a turn of one that came back, the runner
//! prefills that chat's transcript with its reply from the snapshot just
//! saved and saves it, so the chat's next return prefills only its new
//! message. A request that arrives meanwhile stops the update (the double
//! notices the abort at the end of the update's prefill, as the runtime
//! does), and the update is made again once nothing waits.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_runtime};

const ANSWER: &str = "The board keeps its answers short.";
const SYSTEM: &str = "Be brief.";

struct Board {
    server: Server,
    log: PathBuf,
    _scratch: ScratchDir,
}

impl Board {
    /// Model `chat` in the runtime's template, with snapshots, on a double
    /// prefilling a byte in `us_per_byte` microseconds.
    fn start(fake: Fake, us_per_byte: u64) -> Self {
        let scratch = ScratchDir::new();
        let model = scratch.0.join("chat.rkllm");
        std::fs::write(&model, ANSWER).unwrap();
        let snapshots = scratch.0.join("snapshots");
        let config = format!(
            "[rkllm]\nsnapshot_dir = {snapshots:?}\nsnapshot_max_mb = 64\n\
             [[models]]\nname = \"chat\"\npath = {model:?}\n"
        );
        let log = scratch.0.join("fake.log");
        let runtime = fake_runtime(fake);
        let server = Server::start_env(
            &config,
            &["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()],
            &[
                ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
                ("FAKE_RKLLM_TOKEN_MS", "0"),
                ("FAKE_RKLLM_PREFILL_US_PER_BYTE", &us_per_byte.to_string()),
            ],
        );
        Self {
            server,
            log,
            _scratch: scratch,
        }
    }

    /// The double's log, whole: a prompt of many lines is logged as it is.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `history` with `question`; returns the answer, added to it.
    async fn turn(&self, history: &mut Vec<Value>, question: &str) -> String {
        history.push(json!({"role": "user", "content": question}));
        let reply = self
            .server
            .post_json(
                "/v1/chat/completions",
                json!({"model": "chat", "messages": history}),
            )
            .await;
        let answer = reply["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("{reply}"))
            .to_owned();
        history.push(json!({"role": "assistant", "content": answer}));
        answer
    }

    /// The count of `rkllm_snapshot_refreshes_total` with `outcome`.
    async fn refreshes(&self, outcome: &str) -> u64 {
        let wanted =
            format!("rkllm_snapshot_refreshes_total{{model=\"chat\",outcome=\"{outcome}\"}} ");
        self.server
            .metrics_text()
            .await
            .lines()
            .find_map(|l| l.strip_prefix(&wanted).map(|n| n.parse().unwrap()))
            .unwrap_or(0)
    }

    /// Waits (bounded) until `outcome` was counted `n` times.
    async fn wait_refreshes(&self, outcome: &str, n: u64) {
        let until = Instant::now() + Duration::from_secs(30);
        while self.refreshes(outcome).await < n {
            assert!(
                Instant::now() < until,
                "no refresh {outcome} #{n}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The transcript the runtime is sent for `history` (each turn a
/// `role: text` line), with the reply last.
fn transcript(history: &[Value]) -> String {
    history
        .iter()
        .map(|m| {
            format!(
                "{}: {}",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The bytes each run that started from a loaded cache had covered.
fn cached(log: &str) -> Vec<usize> {
    log.lines()
        .filter_map(|l| l.strip_prefix("run-cached bytes="))
        .map(|n| n.parse().unwrap())
        .collect()
}

/// The bytes of each prompt cache saved.
fn saved(log: &str) -> Vec<usize> {
    log.lines()
        .filter(|l| l.starts_with("prompt-cache-save"))
        .filter_map(|l| l.rsplit("bytes=").next()?.parse().ok())
        .collect()
}

/// Where in `log` a run was sent `prompt` (the whole of it), from `from`.
fn sent(log: &str, from: usize, prompt: &str) -> Option<usize> {
    let mut at = from;
    while let Some(found) = log[at..].find("run role=user") {
        let start = at + found;
        let line_end = log[start..].find('\n').map_or(log.len(), |n| start + n);
        if let Some(p) = log[start..line_end].find(" prompt=") {
            let text = start + p + " prompt=".len();
            if log[text..].starts_with(prompt)
                && log[text + prompt.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| c == '\n')
            {
                return Some(start);
            }
        }
        at = start + 1;
    }
    None
}

#[tokio::test]
async fn a_returning_chat_comes_back_to_a_snapshot_that_holds_its_last_reply() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        let board = Board::start(fake, 1);
        let mut a = vec![json!({"role": "system", "content": SYSTEM})];
        let mut b = Vec::new();
        assert_eq!(board.turn(&mut a, "What is the NPU?").await, ANSWER);
        assert_eq!(board.turn(&mut b, "How much memory?").await, ANSWER);
        // `a` comes back after `b`: sent whole, then brought up to date
        // with its reply once nothing waits.
        board.turn(&mut a, "And its cores?").await;
        board.wait_refreshes("done", 1).await;
        let updated = transcript(&a);
        let log = board.log();
        assert!(saved(&log).contains(&updated.len()), "{log}");
        board.turn(&mut b, "And the disk?").await;
        board.wait_refreshes("done", 2).await;
        // `a` comes back again: the snapshot covers all but its new line.
        let before = board.log().len();
        assert_eq!(board.turn(&mut a, "And the clock?").await, ANSWER);
        let log = board.log();
        let later = &log[before..];
        // (then its own update, from the snapshot this turn saved)
        assert_eq!(cached(later).first(), Some(&updated.len()), "{later}");
        let question = format!("{updated}\nuser: And the clock?");
        assert!(sent(&log, before, &question).is_some(), "{later}");
        assert_eq!(board.refreshes("yielded").await, 0);
    }
}

#[tokio::test]
async fn a_chat_alone_keeps_the_runtimes_history_and_nothing_is_brought_up_to_date() {
    let board = Board::start(Fake::V1_3, 1);
    let mut a = vec![json!({"role": "system", "content": SYSTEM})];
    for question in ["What is the NPU?", "And its cores?", "And the clock?"] {
        assert_eq!(board.turn(&mut a, question).await, ANSWER);
    }
    // Long enough for an update to begin (0.25 s of idleness) and end.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = board.log();
    // Each later turn sent only its new message, with the history kept.
    assert_eq!(log.matches("run role=").count(), 3, "{log}");
    assert!(sent(&log, 0, "And the clock?").is_some(), "{log}");
    assert_eq!(board.refreshes("done").await, 0);
}

#[tokio::test]
async fn a_request_that_arrives_during_an_update_stops_it_and_it_is_made_once_nothing_waits() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        // The reply's line takes about 0.5 s to prefill: time for the
        // request to arrive during it, under an emulator too.
        let board = Board::start(fake, 10_000);
        let mut a = vec![json!({"role": "system", "content": SYSTEM})];
        let mut b = Vec::new();
        board.turn(&mut a, "What is the NPU?").await;
        board.turn(&mut b, "How much memory?").await;
        let before = board.log().len();
        board.turn(&mut a, "And its cores?").await;
        let updated = transcript(&a);
        // The update has begun: its run prefills the transcript.
        let until = Instant::now() + Duration::from_secs(30);
        while sent(&board.log(), before, &updated).is_none() {
            assert!(Instant::now() < until, "{}", board.log());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut c = Vec::new();
        assert_eq!(board.turn(&mut c, "Is it fast?").await, ANSWER);
        board.wait_refreshes("yielded", 1).await;
        let log = board.log();
        let update = sent(&log, before, &updated).unwrap();
        let asked = sent(&log, update, "Is it fast?").unwrap();
        assert!(
            log[update..asked].contains("abort running=1"),
            "the update was stopped for the request: {log}"
        );
        // Once nothing waits it is made again, and kept.
        board.wait_refreshes("done", 1).await;
        let log = board.log();
        assert!(saved(&log[asked..]).contains(&updated.len()), "{log}");
    }
}
