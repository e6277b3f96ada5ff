//! Thinking budgets on the runtime test double of both ABIs: a reasoning model whose
//! thinking block is long (4,000 tokens) is stopped at the request's
//! budget, its block closed in the model's tokens fed after a pause, and
//! its answer follows; without a budget it thinks to the end. Anthropic's
//! `budget_tokens` and Ollama's `think` levels; a model without a
//! tokenizer thinks to its end, and the log says the budget is not kept.

use serde_json::json;

use crate::harness::{Fake, ScratchDir, Server, mock_tokenizer};

const ANSWER: &str = "The answer is 42.";

/// One step of the long thinking, 12 bytes (four of the fake's tokens).
const STEP: &str = "think more. ";

/// The thinking's steps: 1,000, so 4,000 tokens.
const STEPS: usize = 1000;

struct Board {
    server: Server,
    log: std::path::PathBuf,
    _dir: ScratchDir,
}

impl Board {
    fn start(fake: Fake) -> Self {
        let dir = ScratchDir::new();
        let thinking = STEP.repeat(STEPS);
        let reply = format!("<think>\n{thinking}\n</think>\n\n{ANSWER}");
        let tokenizer = mock_tokenizer().display().to_string();
        let thinker = dir.0.join("thinker.rkllm");
        std::fs::write(&thinker, format!("@fake-vocab={tokenizer}\n{reply}")).unwrap();
        // Copied by hand: no tokenizer; its name says it thinks.
        let copied = dir.0.join("qwen3-copied.rkllm");
        std::fs::write(&copied, &reply).unwrap();
        let config = format!(
            "[[models]]\nname = \"thinker\"\npath = {thinker:?}\ntokenizer = {tokenizer:?}\n\
             chat_template = \"chatml\"\n\
             [[models]]\nname = \"qwen3-copied\"\npath = {copied:?}\n"
        );
        let log = dir.0.join("fake.log");
        let server = Server::start_on_fake(&config, fake, &log, &[], &[]);
        Self {
            server,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Tokens the fake said before it paused (`pause tokens=N`), per pause.
fn pauses(log: &str) -> Vec<u32> {
    log.lines()
        .filter_map(|l| l.strip_prefix("pause tokens="))
        .map(|n| n.trim().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn a_budget_ends_a_long_thinking_block_and_the_answer_follows() {
    for fake in [Fake::V1_3, Fake::V1_2] {
        budget_on(fake).await;
    }
}

/// The budget on the runtime of `fake`'s ABI.
async fn budget_on(fake: Fake) {
    let board = Board::start(fake);
    // Anthropic: `budget_tokens` (its least, 1,024).
    let reply = board
        .server
        .post_json(
            "/v1/messages",
            json!({"model": "thinker", "max_tokens": 8000,
                   "thinking": {"type": "enabled", "budget_tokens": 1024},
                   "messages": [{"role": "user", "content": "what is the answer?"}]}),
        )
        .await;
    let content = reply["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{reply}"));
    let thinking = content
        .iter()
        .find(|b| b["type"] == "thinking")
        .and_then(|b| b["thinking"].as_str())
        .unwrap_or_else(|| panic!("{reply}"));
    let text = content
        .iter()
        .find(|b| b["type"] == "text")
        .and_then(|b| b["text"].as_str())
        .unwrap_or_else(|| panic!("{reply}"));
    assert_eq!(text, ANSWER, "{reply}");
    assert_eq!(reply["stop_reason"], "end_turn", "{reply}");
    // The thinking stopped at its budget: 1,024 tokens of 3 bytes, the
    // block's opening tag and a partial step at most around them.
    let log = board.log();
    let paused = pauses(&log);
    assert_eq!(paused.len(), 1, "{log}");
    assert!((1024..=1024 + 4).contains(&paused[0]), "{paused:?}");
    assert!(log.contains("run-thinking-closed"), "{log}");
    assert!(log.contains("run-tokens n="), "{log}");
    assert!(
        thinking.len() <= (1024 + 4) * 3 && thinking.len() >= 1000 * 3,
        "{} bytes of thinking",
        thinking.len()
    );
    assert!(thinking.starts_with(STEP.trim_end()), "{thinking:.40}");
    // Every token is counted: the thinking, the closing tag fed, the answer.
    let output = reply["usage"]["output_tokens"].as_u64().unwrap();
    assert!(output > 1024 && output < 1100, "{reply}");

    // Ollama: `think: "low"` stands for 1,024 tokens too.
    let reply = board
        .server
        .post_json(
            "/api/chat",
            json!({"model": "thinker", "stream": false, "think": "low",
                   "messages": [{"role": "user", "content": "and now?"}]}),
        )
        .await;
    assert_eq!(reply["message"]["content"], ANSWER, "{reply}");
    let thought = reply["message"]["thinking"].as_str().unwrap();
    assert!(thought.len() <= (1024 + 4) * 3, "{}", thought.len());
    assert_eq!(pauses(&board.log()).len(), 2);

    // `think: "max"`: no budget, the whole block.
    let reply = board
        .server
        .post_json(
            "/api/chat",
            json!({"model": "thinker", "stream": false, "think": "max",
                   "messages": [{"role": "user", "content": "once more"}]}),
        )
        .await;
    assert_eq!(reply["message"]["content"], ANSWER, "{reply}");
    assert_eq!(
        reply["message"]["thinking"].as_str().unwrap().trim(),
        STEP.repeat(STEPS).trim(),
    );
    assert_eq!(pauses(&board.log()).len(), 2);
}

#[tokio::test]
async fn a_model_without_a_tokenizer_thinks_to_its_end_and_says_so_in_the_log() {
    let board = Board::start(Fake::V1_3);
    for body in [
        json!({"model": "qwen3-copied", "max_tokens": 8000,
               "thinking": {"type": "enabled", "budget_tokens": 2048},
               "messages": [{"role": "user", "content": "hi"}]}),
        json!({"model": "qwen3-copied", "stream": false, "think": "low",
               "messages": [{"role": "user", "content": "hi"}]}),
    ] {
        let path = if body.get("think").is_some() {
            "/api/chat"
        } else {
            "/v1/messages"
        };
        let reply = board.server.post_json(path, body).await;
        let answer = reply["message"]["content"]
            .as_str()
            .or_else(|| {
                reply["content"]
                    .as_array()?
                    .iter()
                    .find(|b| b["type"] == "text")?["text"]
                    .as_str()
            })
            .unwrap_or_else(|| panic!("{reply}"));
        assert_eq!(answer, ANSWER, "{reply}");
    }
    assert!(pauses(&board.log()).is_empty());
    let warned = board
        .server
        .log()
        .iter()
        .filter(|l| l.contains("thinking budget is not kept") && l.contains("qwen3-copied"))
        .count();
    assert_eq!(warned, 2, "{:?}", board.server.log());
}
