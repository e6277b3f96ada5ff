//! KV reuse that is never wrong, on the runtime test double of both ABIs:
//! a model whose runtime keeps no history (`@fake-no-history`, as Qwen3.5
//! on runtime 1.3.0) is found out and its chat's next turn still reaches
//! the runtime whole; `history_reuse = "off"` always sends the whole
//! conversation; `on` never checks.

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_runtime};

const TEXT: &str = "Bread needs flour, water, salt and time.";

const ABIS: [Fake; 2] = [Fake::V1_3, Fake::V1_2];

struct Board {
    server: Server,
    log: std::path::PathBuf,
    _scratch: ScratchDir,
}

impl Board {
    /// A server on the double whose one model, `fake-model`, says `TEXT`
    /// (after `options`, the double's option lines) with `history_reuse`.
    fn start(fake: Fake, options: &str, history_reuse: Option<&str>) -> Self {
        let scratch = ScratchDir::new();
        let model = scratch.0.join("fake-model.rkllm");
        std::fs::write(&model, format!("{options}{TEXT}")).unwrap();
        let log = scratch.0.join("fake.log");
        let runtime = fake_runtime(fake);
        // No conversation snapshots: the prompt tokens counted are then the
        // whole conversation's (tests/e2e/snapshots.rs has them).
        let mut config = format!(
            "[[models]]\nname = \"fake-model\"\npath = {:?}\nsnapshots = false\n",
            model.to_str().unwrap()
        );
        if let Some(mode) = history_reuse {
            config.push_str(&format!("history_reuse = \"{mode}\"\n"));
        }
        let args = ["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()];
        let server =
            Server::start_env(&config, &args, &[("FAKE_RKLLM_LOG", log.to_str().unwrap())]);
        Self {
            server,
            log,
            _scratch: scratch,
        }
    }

    /// The double's `run` lines.
    fn runs(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("run "))
            .map(str::to_owned)
            .collect()
    }

    async fn chat(&self, messages: Value) -> Value {
        let response = self
            .server
            .send(
                reqwest::Method::POST,
                "/v1/chat/completions",
                Some(json!({"model": "fake-model", "messages": messages})),
                None,
            )
            .await;
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// Three turns of one chat; returns each turn's prompt tokens.
    async fn three_turns(&self) -> [u64; 3] {
        let mut messages = vec![
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "first question"}),
        ];
        let mut prompt_tokens = [0; 3];
        for (turn, next) in ["and then?", "and after that?", ""].iter().enumerate() {
            let answer = self.chat(Value::Array(messages.clone())).await;
            assert_eq!(answer["choices"][0]["message"]["content"], TEXT, "{answer}");
            prompt_tokens[turn] = answer["usage"]["prompt_tokens"].as_u64().unwrap();
            messages.push(json!({"role": "assistant", "content": TEXT}));
            messages.push(json!({"role": "user", "content": next}));
        }
        prompt_tokens
    }
}

/// What the double counts as the prefill of `prompt`: its bytes / 4 + 1.
fn prefill(prompt: &str) -> u64 {
    prompt.len() as u64 / 4 + 1
}

/// The whole conversation as the server sends it when the runtime does
/// not hold it: a transcript ending with the new message.
fn transcript(new: &[&str]) -> String {
    let mut lines = vec![
        "system: be brief".to_owned(),
        "user: first question".to_owned(),
    ];
    for message in new {
        lines.push(format!("assistant: {TEXT}"));
        lines.push(format!("user: {message}"));
    }
    lines.join("\n")
}

#[tokio::test]
async fn a_model_whose_runtime_keeps_no_history_still_answers_with_the_whole_conversation() {
    for fake in ABIS {
        let board = Board::start(fake, "@fake-no-history\n", None);
        let prompt_tokens = board.three_turns().await;
        let runs = board.runs();
        assert_eq!(runs.len(), 3, "{fake:?}: {runs:?}");
        // The first turn tries the runtime's history; the double drops it,
        // so every later turn is sent whole, without keeping history.
        assert!(runs[0].contains("keep_history=1"), "{fake:?}: {runs:?}");
        for run in &runs[1..] {
            assert!(
                run.contains("keep_history=0") && run.ends_with("prompt=system: be brief"),
                "{fake:?}: {runs:?}"
            );
        }
        assert_eq!(
            prompt_tokens[1],
            prefill(&transcript(&["and then?"])),
            "{fake:?}"
        );
        assert_eq!(
            prompt_tokens[2],
            prefill(&transcript(&["and then?", "and after that?"])),
            "{fake:?}"
        );
        let warnings = board
            .server
            .log()
            .iter()
            .filter(|l| l.contains("keeps no chat history"))
            .count();
        assert_eq!(warnings, 1, "{fake:?}: logged once");
    }
}

#[tokio::test]
async fn history_reuse_off_always_sends_the_whole_conversation() {
    for fake in ABIS {
        let board = Board::start(fake, "", Some("off"));
        let prompt_tokens = board.three_turns().await;
        let runs = board.runs();
        assert!(
            runs.iter().all(|r| r.contains("keep_history=0")),
            "{fake:?}: {runs:?}"
        );
        assert_eq!(
            prompt_tokens[1],
            prefill(&transcript(&["and then?"])),
            "{fake:?}"
        );
    }
}

#[tokio::test]
async fn history_reuse_on_never_checks_and_auto_trusts_a_runtime_that_keeps_it() {
    for fake in ABIS {
        // `on` with a model that drops its history: only the new message
        // goes (the setting's promise), and nothing is logged.
        let board = Board::start(fake, "@fake-no-history\n", Some("on"));
        let prompt_tokens = board.three_turns().await;
        let runs = board.runs();
        assert!(runs[1].ends_with("prompt=and then?"), "{fake:?}: {runs:?}");
        assert_eq!(prompt_tokens[1], prefill("and then?"), "{fake:?}");
        assert!(
            !board
                .server
                .log()
                .iter()
                .any(|l| l.contains("keeps no chat history")),
            "{fake:?}"
        );
        // `auto` with a model that keeps it: only new messages go.
        let board = Board::start(fake, "", None);
        let prompt_tokens = board.three_turns().await;
        assert_eq!(prompt_tokens[1], prefill("and then?"), "{fake:?}");
        assert_eq!(prompt_tokens[2], prefill("and after that?"), "{fake:?}");
    }
}
