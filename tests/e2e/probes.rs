//! The runtime probed, not assumed: at a model's load the server checks on
//! the runtime the behaviours its features rest on (a pause keeps the KV
//! cache, token input appends to it, the paused token is not in it, how
//! logits rows come, a cache saved after token input holds the whole
//! prompt, the empty template is no template), keeps the verdicts per
//! runtime and model file, and turns off for that model what a failed
//! probe undermines. The runtime test double can be told to break each
//! behaviour (`FAKE_RKLLM_BREAK`); for each, a long chat is still answered
//! from its whole prompt, the feature is off in `doctor --probe --json`,
//! and what rests on it is refused with a 400 naming the probe.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::harness::{
    Fake, ScratchDir, Server, emulated, fake_runtime, mock_tokenizer, mock_tokenizer_with,
    server_command,
};

/// What the double's model says.
const ANSWER: &str = "Probed answer, made from the whole prompt.";

/// A user message of about 3,500 bytes: a long chat, cut into chunks.
fn long_message() -> String {
    "Please read this log line of the board and keep it in mind. ".repeat(57)
}

/// A board: the double with its model `chat` (ChatML rendered by the
/// server, the mock tokenizer) and a reasoning model `thinker`.
struct Board {
    server: Server,
    log: PathBuf,
    config: PathBuf,
    env: Vec<(String, String)>,
    dir: ScratchDir,
}

impl Board {
    /// The server on the double with `env`, probing at load (unless the
    /// verdicts are kept in `probes`, a folder that outlives it).
    fn start(probes: &Path, env: &[(&str, &str)]) -> Self {
        let dir = ScratchDir::new();
        let tokenizer = mock_tokenizer().display().to_string();
        let model = dir.0.join("chat.rkllm");
        std::fs::write(&model, format!("@fake-vocab={tokenizer}\n{ANSWER}")).unwrap();
        let config = dir.0.join("board.toml");
        std::fs::write(
            &config,
            format!(
                "[rkllm]\nprobe_dir = {probes:?}\nsnapshot_dir = {:?}\n\
                 [[models]]\nname = \"chat\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
                 chat_template = \"chatml\"\n\
                 [[models]]\nname = \"thinker\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
                 chat_template = \"chatml\"\nreasoning = \"opened\"\n",
                dir.0.join("snapshots")
            ),
        )
        .unwrap();
        let log = dir.0.join("fake.log");
        let mut all: Vec<(String, String)> = vec![
            ("RKLLM_E2E_PROBE_AT_LOAD".into(), "1".into()),
            ("FAKE_RKLLM_LOG".into(), log.display().to_string()),
            ("FAKE_RKLLM_TOKEN_MS".into(), "0".into()),
        ];
        all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let borrowed: Vec<(&str, &str)> =
            all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let runtime = fake_runtime(Fake::V1_3);
        let text = std::fs::read_to_string(&config).unwrap();
        let server = Server::start_env(
            &text,
            &["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()],
            &borrowed,
        );
        Self {
            server,
            log,
            config,
            env: all,
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `doctor --probe --json` (through the running service), parsed.
    fn doctor(&self, extra: &[&str]) -> Value {
        let runtime = fake_runtime(Fake::V1_3);
        let mut command = server_command();
        command
            .arg("--config")
            .arg(&self.config)
            .args(["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()])
            .args(["--listen", &self.server.addr.to_string()])
            .args(["doctor", "--probe", "--json"])
            .args(extra)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null());
        let out = command.output().expect("doctor --probe");
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "doctor --probe: {e}: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

/// The report of `model` in a `doctor --probe --json` answer.
fn model_report<'a>(report: &'a Value, model: &str) -> &'a Value {
    report["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == model)
        .unwrap_or_else(|| panic!("no {model} in {report}"))
}

fn check<'a>(model: &'a Value, name: &str) -> &'a Value {
    model["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {model}"))
}

/// The long chat, answered; the bytes of prompt the KV cache held when its
/// answer was made (the double's last `prefilled held=` line).
async fn long_chat(board: &Board) -> (Value, usize) {
    let answer = board
        .server
        .post_json(
            "/v1/chat/completions",
            json!({"model": "chat", "max_tokens": 16,
                   "messages": [{"role": "system", "content": "You read logs."},
                                {"role": "user", "content": long_message()}]}),
        )
        .await;
    let held = board
        .log()
        .lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("prefilled held=")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap();
    (answer, held)
}

/// The chat's prompt as the server renders it (ChatML).
fn rendered() -> String {
    crate::harness::render_chatml(&[("system", "You read logs."), ("user", &long_message())])
}

#[tokio::test]
async fn on_the_honest_double_the_probes_pass_and_chunked_prefill_stays_on() {
    let probes = ScratchDir::new();
    let board = Board::start(&probes.0, &[]);
    let (answer, held) = long_chat(&board).await;
    assert_eq!(
        answer["choices"][0]["message"]["content"], ANSWER,
        "{answer}"
    );
    assert_eq!(held, rendered().len(), "made from the whole prompt");
    let log = board.log();
    assert!(
        log.contains("prompt=The quick brown fox"),
        "probed at load: {log}"
    );
    assert!(
        log.lines()
            .filter(|l| l.starts_with("run-tokens n="))
            .count()
            > 2,
        "the long chat was prefilled in chunks: {log}"
    );
    // The verdicts, as JSON-RPC's `models` and Ollama's /api/show give them.
    let models = board.server.ok("models", json!({})).await;
    let chat = models["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "chat")
        .unwrap();
    assert_eq!(
        chat["probes"]["features"]["chunked_prefill"]["on"], true,
        "{chat}"
    );
    let shown = board
        .server
        .post_json("/api/show", json!({"name": "chat"}))
        .await;
    assert_eq!(
        shown["probes"]["features"]["logprobs"]["on"], true,
        "{shown}"
    );
    for c in chat["probes"]["checks"].as_array().unwrap() {
        let passes = c["name"] != "abort_during_prefill";
        assert_eq!(c["passed"], passes, "{c}");
    }
}

#[tokio::test]
async fn a_restart_with_the_same_state_reads_the_verdicts_kept_and_does_not_probe_again() {
    let probes = ScratchDir::new();
    let dir = ScratchDir::new();
    let tokenizer = mock_tokenizer().display().to_string();
    let model = dir.0.join("kept.rkllm");
    std::fs::write(&model, format!("@fake-vocab={tokenizer}\n{ANSWER}")).unwrap();
    let config = format!(
        "[rkllm]\nprobe_dir = {:?}\n[[models]]\nname = \"chat\"\npath = {model:?}\n\
         tokenizer = {tokenizer:?}\nchat_template = \"chatml\"\n",
        probes.0
    );
    let runtime = fake_runtime(Fake::V1_3);
    let args = ["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()];
    let mut kept_log = String::new();
    for start in 0..2 {
        let log = dir.0.join(format!("fake-{start}.log"));
        let server = Server::start_env(
            &config,
            &args,
            &[
                ("RKLLM_E2E_PROBE_AT_LOAD", "1"),
                ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
                ("FAKE_RKLLM_TOKEN_MS", "0"),
            ],
        );
        let answer = server
            .post_json(
                "/v1/chat/completions",
                json!({"model": "chat", "max_tokens": 64,
                       "messages": [{"role": "user", "content": "hello"}]}),
            )
            .await;
        assert_eq!(
            answer["choices"][0]["message"]["content"], ANSWER,
            "{answer}"
        );
        let shown = server.post_json("/api/show", json!({"name": "chat"})).await;
        assert_eq!(shown["probes"]["kept"], start == 1, "{shown}");
        kept_log = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            kept_log.contains("prompt=The quick brown fox"),
            start == 0,
            "start {start}: {kept_log}"
        );
    }
    assert!(
        kept_log.contains("prompt=<|im_start|>user\nhello"),
        "{kept_log}"
    );
}

/// What each broken behaviour closes: the switch, the probe that fails, and
/// the feature that goes off.
const BREAKS: [(&str, &str, &str); 6] = [
    ("pause_drops_kv", "pause_keeps_kv", "chunked_prefill"),
    ("token_input_ignored", "token_input", "chunked_prefill"),
    (
        "paused_token_in_kv",
        "paused_token_not_in_kv",
        "chunked_prefill",
    ),
    ("pick_not_argmax", "logits_rows", "logprobs"),
    (
        "cache_after_tokens_partial",
        "prompt_cache_after_token_input",
        "snapshots",
    ),
    ("template_stays", "template_off", "server_template"),
];

#[tokio::test]
async fn each_broken_behaviour_fails_its_probe_turns_its_feature_off_and_the_answer_uses_the_whole_prompt()
 {
    for (switch, probe, feature) in BREAKS {
        let probes = ScratchDir::new();
        let board = Board::start(&probes.0, &[("FAKE_RKLLM_BREAK", switch)]);
        let (answer, held) = long_chat(&board).await;
        let after_chat = board.log();
        assert_eq!(
            answer["choices"][0]["message"]["content"], ANSWER,
            "{switch}: {answer}"
        );
        // Made from the whole prompt: the KV cache held all of it (with a
        // template that stays, the runtime's own wrap around it too).
        assert!(
            held >= rendered().len()
                || (switch == "template_stays" && held >= long_message().len()),
            "{switch}: the answer was made from {held} bytes of {}",
            rendered().len()
        );
        let report = board.doctor(&["--no-measure"]);
        let chat = model_report(&report, "chat");
        let c = check(chat, probe);
        assert_eq!(c["passed"], false, "{switch}: {c}");
        let f = &chat["features"][feature];
        assert_eq!(f["on"], false, "{switch}: {f}");
        assert!(
            f["reason"].as_str().unwrap().contains(probe)
                || (feature == "server_template"
                    && f["reason"].as_str().unwrap().contains("template_off")),
            "{switch}: {f}"
        );
        // The server says so in its log, naming the feature and the probe.
        assert!(
            board
                .server
                .log()
                .iter()
                .any(|l| l.contains("a feature of the model is off") && l.contains(feature)),
            "{switch}: {:?}",
            board.server.log()
        );
        match switch {
            // No chunks: the long chat ran in one run.
            "pause_drops_kv" | "token_input_ignored" | "paused_token_in_kv" => {
                let log = &after_chat;
                let chat = log.rfind("prompt=<|im_start|>system").unwrap();
                assert!(
                    !log[chat..].contains("run-tokens n="),
                    "{switch}: chunked anyway: {}",
                    &log[chat..]
                );
            }
            "pick_not_argmax" => {
                let refused = board
                    .server
                    .send(
                        reqwest::Method::POST,
                        "/v1/chat/completions",
                        Some(json!({"model": "chat", "logprobs": true, "max_tokens": 4,
                                    "messages": [{"role": "user", "content": "hi"}]})),
                        None,
                    )
                    .await;
                assert_eq!(refused.status().as_u16(), 400, "{switch}");
                let body: Value = refused.json().await.unwrap();
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains("logits_rows"), "{switch}: {body}");
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_budget_on_a_runtime_whose_pause_drops_the_cache_is_refused_naming_the_probe() {
    let probes = ScratchDir::new();
    let board = Board::start(&probes.0, &[("FAKE_RKLLM_BREAK", "pause_drops_kv")]);
    let refused = board
        .server
        .send(
            reqwest::Method::POST,
            "/v1/messages",
            Some(json!({"model": "thinker", "max_tokens": 4096,
                        "thinking": {"type": "enabled", "budget_tokens": 2048},
                        "messages": [{"role": "user", "content": "think"}]})),
            None,
        )
        .await;
    assert_eq!(refused.status().as_u16(), 400);
    let body: Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("pause_mid_generation"), "{body}");
}

#[tokio::test]
async fn the_reports_figures_match_the_doubles_costs() {
    let probes = ScratchDir::new();
    // 0.5 ms a prompt byte (the double counts 4 bytes a token): 2 ms a
    // prefilled token; 20 ms a generated one.
    let board = Board::start(
        &probes.0,
        &[
            ("FAKE_RKLLM_PREFILL_US_PER_BYTE", "500"),
            ("FAKE_RKLLM_TOKEN_MS", "20"),
        ],
    );
    let report = board.doctor(&["--model", "chat"]);
    let chat = model_report(&report, "chat");
    let measured = &chat["measured"];
    let near = |got: f64, want: f64| (got - want).abs() <= want * 0.35;
    let prefill = measured["prefill_ms_per_token"].as_f64().unwrap();
    let decode = measured["decode_ms_per_token"].as_f64().unwrap();
    assert!(
        near(prefill, 2.0),
        "prefill {prefill} ms a token: {measured}"
    );
    if !emulated() {
        assert!(near(decode, 20.0), "decode {decode} ms a token: {measured}");
    }
    assert!(
        measured["runner_peak_mb"].as_u64().unwrap() > 0,
        "{measured}"
    );
    assert!(chat["cost"]["runs"].as_u64().unwrap() > 5, "{chat}");
    let _ = &board.dir;
}

/// The peak resident memory of process `pid` (`VmHWM`), in MB.
fn peak_mb(pid: u64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb / 1024
}

#[tokio::test]
async fn a_long_judgement_holds_a_chunks_logits_rows_at_a_time() {
    if emulated() {
        eprintln!(
            "skipped under the emulator: 27 chunks of 160 rows of 151,936 floats take minutes to fill there; the bound is the same code natively"
        );
        return;
    }
    let dir = ScratchDir::new();
    let tokenizer = dir.0.join("tokenizer.json");
    std::fs::write(
        &tokenizer,
        mock_tokenizer_with(&[("yes", false), ("no", false)]),
    )
    .unwrap();
    let tokenizer = tokenizer.display().to_string();
    let model = dir.0.join("judge.rkllm");
    // Qwen's row: 151,936 values.
    std::fs::write(
        &model,
        format!("@fake-vocab={tokenizer}\n@fake-logits-width=151936\nyes"),
    )
    .unwrap();
    let config = format!(
        "[rkllm]\nsnapshot_dir = {:?}\n[[models]]\nname = \"judge\"\npath = {model:?}\n\
         tokenizer = {tokenizer:?}\nreranker = true\nchat_template = \"chatml\"\n\
         max_context_len = 8192\n",
        dir.0.join("snapshots")
    );
    let log = dir.0.join("fake.log");
    let server = Server::start_on_fake(&config, Fake::V1_3, &log, &[], &[]);
    // A document of about 4,096 of the model's tokens.
    let mut document = String::new();
    loop {
        document.push_str("The board logs a line every second. ");
        let counted = server
            .post_json("/tokenize", json!({"model": "judge", "content": document}))
            .await;
        if counted["tokens"].as_array().unwrap().len() >= 3900 {
            break;
        }
        document.push_str(&"The board logs a line every second. ".repeat(40));
    }
    let ranked = server
        .post_json(
            "/v1/rerank",
            json!({"model": "judge", "query": "What does the board log?", "documents": [document]}),
        )
        .await;
    assert!(
        ranked["results"][0]["relevance_score"].as_f64().is_some(),
        "{ranked}"
    );
    let models = server.ok("models", json!({})).await;
    let pid = models["models"][0]["runner_pids"][0].as_u64().unwrap();
    let peak = peak_mb(pid);
    let chunks = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("logits-run input=tokens"))
        .count();
    eprintln!(
        "a {} kB judgement of about 4,096 tokens with 151,936-wide rows: runner peak {peak} MB, {chunks} chunks after the first",
        document.len() / 1000
    );
    // At once: 4,096 rows of 151,936 floats would be 2.5 GB.
    assert!(chunks >= 20, "prefilled in chunks: {chunks}");
    assert!(peak < 300, "the runner peaked at {peak} MB");
}
