//! Conversations that share an opening, on the runtime test double (and
//! the mock), for models whose chat template the server renders.
//!
//! A template named in the config (`chatml`, `llama3`, a custom table) is
//! rendered by the server as a Jinja template is: every turn is sent whole
//! and starts from the conversation snapshot sharing the longest prefix
//! with it. Two chats taking turns on such a model prefill, turn by turn,
//! exactly what they prefill with the same template written in Jinja: a
//! returning chat starts from its own last snapshot, a new one from the
//! other's opening.
//!
//! A long prompt is prefilled in chunks (`prefill_chunk_tokens`, 160 by
//! default), the first run taking its beginning as text, matched against
//! the loaded snapshot, the later ones token ids. A conversation's first
//! turn that opens as another one did (the same system prompt and tools)
//! and goes on with a long message of its own is such a prompt: it starts
//! from the other conversation's snapshot and prefills only its own
//! message, in chunks, as it does in one run with chunks off.
//!
//! What a request prefilled is read from the double's log, in bytes of
//! prompt text (see `agent_cache.rs`): a run that starts a generation
//! prefills its prompt past what the loaded cache covers (`run-cached
//! bytes=N`), a run that goes on after a pause the text of the tokens it
//! feeds (`run-tokens`); `prefilled held=N` says how much prompt text the
//! generation holds after each run, and `prompt-cache-load bytes=N` which
//! snapshot was loaded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{
    CHATML_JINJA, Fake, LIVENESS, ScratchDir, Server, mock_config, mock_tokenizer, model_metric,
};

/// What the double "generates": the model file's text.
const ANSWER: &str = "The NPU ran the prefill and then the decode, as logged.";

/// Bytes a returning turn may prefill beyond the text of its new messages
/// (the previous answer and the user's message): the template's markers
/// around them and the next reply's header (61 bytes in ChatML, 109 in
/// Llama 3, 25 in the custom template here).
const SLACK: usize = 128;

/// Llama 3 as the server renders it by name, written in Jinja.
const LLAMA3_JINJA: &str = "<|begin_of_text|>{% for m in messages %}<|start_header_id|>\
{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}\
{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

/// A custom template, as a `[[models]]` table.
const CUSTOM: &str =
    "chat_template = { message = \"### {role}\\n{content}\\n\", assistant = \"### assistant\\n\" }";

/// [`CUSTOM`] written in Jinja.
const CUSTOM_JINJA: &str = "{% for m in messages %}### {{ m.role }}\n{{ m.content }}\n{% endfor %}\
{% if add_generation_prompt %}### assistant\n{% endif %}";

/// A server on the double of ABI 1.3.0 whose models (`name`, the lines of
/// their `[[models]]` entry) share one model file, the mock tokenizer and
/// a snapshot folder.
struct Board {
    server: Server,
    log: PathBuf,
    _dir: ScratchDir,
}

impl Board {
    fn start(models: &[(&str, &str)]) -> Self {
        let dir = ScratchDir::new();
        let tokenizer = mock_tokenizer().display().to_string();
        let model = dir.0.join("chat.rkllm");
        std::fs::write(&model, format!("@fake-vocab={tokenizer}\n{ANSWER}")).unwrap();
        let mut config = format!(
            "[rkllm]\nsnapshot_dir = {:?}\nsnapshot_max_mb = 64\n",
            dir.0.join("snapshots")
        );
        for (name, settings) in models {
            config.push_str(&format!(
                "[[models]]\nname = \"{name}\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
                 max_context_len = 8192\n{settings}\n"
            ));
        }
        let log = dir.0.join("fake.log");
        let server = Server::start_on_fake(&config, Fake::V1_3, &log, &[], &[]);
        Self {
            server,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `body` to OpenAI's chat completions: the answer's text, and
    /// what the double did for it.
    async fn chat(&self, body: Value) -> (String, Seen) {
        let start = self.log().len();
        let reply = self.server.post_json("/v1/chat/completions", body).await;
        let answer = reply["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("no answer: {reply}"))
            .to_owned();
        assert_eq!(answer, ANSWER, "{reply}");
        (answer, Seen::of(&self.log()[start..]))
    }
}

/// One request as the double saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Seen {
    /// Bytes of prompt text its runs prefilled.
    prefilled: usize,
    /// Bytes of the prompt it answered.
    prompt: usize,
    /// Bytes the loaded cache covered at the start of its generation.
    cached: usize,
    /// The snapshots loaded for it (their bytes of prompt), in order.
    loads: Vec<usize>,
    /// Runs that fed a chunk's token ids.
    chunks: usize,
}

impl Seen {
    /// What a stretch of the double's log says of the request it covers.
    fn of(log: &str) -> Self {
        let mut seen = Self::default();
        let mut cached = 0;
        let mut continues = false;
        for line in log.lines() {
            if let Some(n) = line.strip_prefix("run-cached bytes=") {
                cached = n.trim().parse().unwrap();
            } else if let Some(n) = line.strip_prefix("prompt-cache-load bytes=") {
                seen.loads.push(n.trim().parse().unwrap());
            } else if let Some(rest) = line.strip_prefix("run-tokens ") {
                continues = !rest.contains("paused=0");
                seen.chunks += 1;
            } else if line == "run-continues-paused" {
                continues = true;
            } else if let Some(rest) = line.strip_prefix("prefilled held=") {
                let now: usize = rest.split(' ').next().unwrap().parse().unwrap();
                let from = if continues { seen.prompt } else { cached };
                if !continues {
                    seen.cached = cached;
                }
                seen.prefilled += now.saturating_sub(from);
                seen.prompt = now;
                cached = 0;
                continues = false;
            }
        }
        seen
    }
}

/// A system prompt of `bytes` bytes.
fn system(bytes: usize) -> String {
    let line = "You answer questions about the board's logs, briefly and with care. ";
    line.repeat(bytes / line.len() + 1)[..bytes].to_owned()
}

/// One turn of two chats taking turns: which chat, the bytes of text new
/// since that chat's previous request, and what the double did.
#[derive(Debug)]
struct Turn {
    chat: char,
    new: usize,
    seen: Seen,
}

/// Chats A and B, opening with the same system prompt, taking turns on
/// `model`: A1, B1, A2, B2, A3, B3, A4.
async fn alternate(board: &Board, model: &str) -> Vec<Turn> {
    let system = system(1000);
    let mut chats: HashMap<char, Vec<Value>> = HashMap::new();
    let mut turns = Vec::new();
    for (i, chat) in "ABABABA".chars().enumerate() {
        let question = format!(
            "Question {} of chat {chat}: what does line {i} of the log say about the NPU?",
            i / 2 + 1
        );
        let messages = chats
            .entry(chat)
            .or_insert_with(|| vec![json!({"role": "system", "content": system})]);
        let new = match messages.last() {
            Some(m) if m["role"] == "assistant" => {
                m["content"].as_str().unwrap().len() + question.len()
            }
            _ => system.len() + question.len(),
        };
        messages.push(json!({"role": "user", "content": question}));
        let (answer, seen) = board
            .chat(json!({"model": model, "max_tokens": 64, "messages": messages}))
            .await;
        messages.push(json!({"role": "assistant", "content": answer}));
        turns.push(Turn { chat, new, seen });
    }
    turns
}

fn table(turns: &[Turn]) -> String {
    let mut count: HashMap<char, usize> = HashMap::new();
    turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let n = count.entry(t.chat).or_default();
            *n += 1;
            format!(
                "  turn {} ({}{n}): {} new bytes, prefilled {} of {} (the loaded cache covered {})\n",
                i + 1,
                t.chat,
                t.new,
                t.seen.prefilled,
                t.seen.prompt,
                t.seen.cached
            )
        })
        .collect()
}

/// Two chats taking turns on the template named by `named` and on the
/// same template in Jinja (`jinja`, the lines of each model's entry):
/// the same prompts, each prefilled as much as the other, and each turn
/// starting from the snapshot it should.
async fn check_as_jinja(named: &str, jinja: &str) {
    let board = Board::start(&[("named", named), ("jinja", jinja)]);
    let by_name = alternate(&board, "named").await;
    let in_jinja = alternate(&board, "jinja").await;
    let (a, b) = (table(&by_name), table(&in_jinja));
    eprintln!("{named}:\n{a}the same in Jinja:\n{b}");
    for (t, j) in by_name.iter().zip(&in_jinja) {
        assert_eq!(t.seen, j.seen, "by name:\n{a}in Jinja:\n{b}");
    }
    let system = system(1000).len();
    // A1 has nothing to start from.
    let first = &by_name[0].seen;
    assert_eq!(first.prefilled, first.prompt, "{a}");
    // B1 starts from A1's snapshot: the system prompt is not prefilled again.
    let b1 = &by_name[1].seen;
    assert!(
        b1.cached >= system && b1.prefilled + system <= b1.prompt,
        "{a}"
    );
    // A returning chat starts from its own last snapshot, the whole of its
    // previous prompt, and prefills what is new.
    let mut last: HashMap<char, usize> = HashMap::new();
    for (i, t) in by_name.iter().enumerate() {
        if let Some(&previous) = last.get(&t.chat) {
            assert_eq!(t.seen.cached, previous, "turn {}\n{a}", i + 1);
            assert!(
                t.seen.prefilled >= t.new && t.seen.prefilled <= t.new + SLACK,
                "turn {}\n{a}",
                i + 1
            );
        }
        last.insert(t.chat, t.seen.prompt);
    }
}

#[tokio::test]
async fn chatml_by_name_keeps_conversation_snapshots_as_chatml_in_jinja_does() {
    check_as_jinja(
        "chat_template = \"chatml\"",
        &format!("chat_template = {CHATML_JINJA:?}"),
    )
    .await;
}

#[tokio::test]
async fn llama3_by_name_keeps_conversation_snapshots_as_llama3_in_jinja_does() {
    check_as_jinja(
        "chat_template = \"llama3\"",
        &format!("chat_template = {LLAMA3_JINJA:?}"),
    )
    .await;
}

#[tokio::test]
async fn a_custom_template_keeps_conversation_snapshots_as_the_same_in_jinja_does() {
    check_as_jinja(CUSTOM, &format!("chat_template = {CUSTOM_JINJA:?}")).await;
}

/// Qwen2.5's own template, which renders the tools into the system block.
fn qwen() -> String {
    let template = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/chat-templates/qwen2.5.jinja")
        .display()
        .to_string();
    format!("chat_template = {{ jinja = {template:?}, eos_token = \"<|im_end|>\" }}")
}

/// The tools every conversation offers.
fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "read_file",
            "description": "Reads a file of the repository, by lines, with line numbers.",
            "parameters": {"type": "object", "properties": {
                "file_path": {"type": "string", "description": "The file's path"},
                "offset": {"type": "integer", "description": "The first line to read"}},
                "required": ["file_path"]}}},
        {"type": "function", "function": {"name": "grep",
            "description": "Searches the repository's files for a regular expression.",
            "parameters": {"type": "object", "properties": {
                "pattern": {"type": "string", "description": "The regular expression"}},
                "required": ["pattern"]}}},
    ])
}

/// The first message of a conversation that opens as A did: about 1,400
/// bytes (as many of the mock tokenizer's tokens), nine chunks of 160.
fn long_question() -> String {
    "Another task altogether: read the memory log and say what it holds. ".repeat(20)
}

/// A conversation A of three turns with `system` and the tools, then a
/// new conversation B with the same opening and a long first message:
/// what the double did for each request, and what the server counted B's
/// first turn as (see [`outcome_of_next`]).
async fn a_then_b(board: &Board, system: &str) -> (Vec<Seen>, String) {
    let body = |messages: &[Value]| json!({"model": "m", "max_tokens": 64, "messages": messages, "tools": tools()});
    let mut seen = Vec::new();
    let mut a = vec![json!({"role": "system", "content": system})];
    for turn in 1..=3 {
        a.push(json!({"role": "user",
            "content": format!("Turn {turn} of the first task: what is the NPU doing now?")}));
        let (answer, s) = board.chat(body(&a)).await;
        a.push(json!({"role": "assistant", "content": answer}));
        seen.push(s);
    }
    let b = [
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": long_question()}),
    ];
    let mut b_seen = Seen::default();
    let outcome = outcome_of_next(&board.server, 3, async {
        b_seen = board.chat(body(&b)).await.1;
    })
    .await;
    seen.push(b_seen);
    (seen, outcome)
}

/// What the server counted the request `send` makes as (`hit`, `shared`,
/// ...: `rkllm_prompt_cache_requests_total`), after `before` requests of
/// model `m`.
async fn outcome_of_next(
    server: &Server,
    before: usize,
    send: impl std::future::Future<Output = ()>,
) -> String {
    let earlier = outcomes(server, "m", before).await;
    send.await;
    let now = outcomes(server, "m", before + 1).await;
    let grew: Vec<&String> = now
        .iter()
        .filter(|(outcome, n)| earlier.get(*outcome).copied().unwrap_or(0) < **n)
        .map(|(outcome, _)| outcome)
        .collect();
    assert_eq!(grew.len(), 1, "{earlier:?} then {now:?}");
    grew[0].clone()
}

/// The model's requests counted by what their prompt started from, once
/// `requests` of them are counted (they are recorded as their answers end).
async fn outcomes(server: &Server, model: &str, requests: usize) -> HashMap<String, usize> {
    let started = Instant::now();
    loop {
        let metrics = server.metrics_text().await;
        let prefix = format!("rkllm_prompt_cache_requests_total{{model=\"{model}\",outcome=\"");
        let counted: HashMap<String, usize> = metrics
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(&prefix)?;
                let (outcome, n) = rest.split_once("\"} ")?;
                Some((outcome.to_owned(), n.trim().parse::<f64>().ok()? as usize))
            })
            .collect();
        if counted.values().sum::<usize>() >= requests {
            return counted;
        }
        assert!(
            started.elapsed() < LIVENESS,
            "{requests} requests never counted: {counted:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_new_conversation_prefilled_in_chunks_starts_from_another_conversations_opening() {
    // Shorter than a system prompt saved on its own (only A's snapshots
    // hold the opening), and longer (saved on its own first).
    for bytes in [1200, 3000] {
        let system = system(bytes);
        let chunked = Board::start(&[("m", &qwen())]);
        let whole = Board::start(&[("m", &format!("{}\nprefill_chunk_tokens = 0", qwen()))]);
        let (in_chunks, counted) = a_then_b(&chunked, &system).await;
        let (in_one, counted_in_one) = a_then_b(&whole, &system).await;
        let said = format!(
            "a {bytes}-byte system prompt; chunked:\n{in_chunks:#?}\nin one run:\n{in_one:#?}"
        );
        let (b, one) = (&in_chunks[3], &in_one[3]);
        eprintln!(
            "{bytes}-byte system prompt: B's first turn prefilled {} bytes of {} in chunks \
             ({} runs of token ids), {} in one run; both started from a {}-byte snapshot \
             covering {} bytes",
            b.prefilled,
            b.prompt,
            b.chunks,
            one.prefilled,
            b.loads.last().copied().unwrap_or(0),
            b.cached
        );
        // The message of its own is prefilled in chunks, the other in one run.
        assert!(b.chunks >= 2 && one.chunks == 0, "{said}");
        // Both loaded A's last snapshot and started from it.
        assert_eq!(b.loads, one.loads, "{said}");
        assert_eq!(b.loads.last(), Some(&in_chunks[2].prompt), "{said}");
        assert_eq!((b.cached, b.prompt), (one.cached, one.prompt), "{said}");
        // Everything before B's own message (the system prompt, the tools,
        // the template's markers) came from A's snapshot: B prefilled its
        // message and the markers after it, no more, either way.
        let question = long_question().len();
        assert!(b.cached + question + 64 >= b.prompt, "{said}");
        assert_eq!(b.prefilled, one.prefilled, "{said}");
        assert!(
            b.prefilled >= question && b.prefilled <= question + 64,
            "{said}"
        );
        // The server counts B's first turn as started from a shared
        // opening, either way.
        assert_eq!(
            (counted.as_str(), counted_in_one.as_str()),
            ("shared", "shared")
        );
    }
}

#[tokio::test]
async fn conversations_sharing_an_opening_prefill_as_much_in_chunks_as_in_one_run() {
    // Four conversations with one system prompt, some opening with a long
    // message, some with the start of another's, taking turns unevenly.
    let system = system(2500);
    let openers = [
        "A short question about the NPU.".to_owned(),
        "A long one. ".repeat(120),
        "A short question about the NPU, and then about its memory.".to_owned(),
        "A long one. ".repeat(60) + &"Another part. ".repeat(60),
    ];
    let order = [0usize, 1, 0, 2, 3, 1, 2, 0, 3, 3, 1, 2];
    let mut runs = Vec::new();
    for settings in [qwen(), format!("{}\nprefill_chunk_tokens = 0", qwen())] {
        let board = Board::start(&[("m", &settings)]);
        let mut chats: Vec<Vec<Value>> = openers
            .iter()
            .map(|o| {
                vec![
                    json!({"role": "system", "content": system}),
                    json!({"role": "user", "content": o}),
                ]
            })
            .collect();
        let mut seen = Vec::new();
        for (n, &c) in order.iter().enumerate() {
            let body = json!({"model": "m", "max_tokens": 64, "messages": chats[c],
                              "tools": tools()});
            let (answer, s) = board.chat(body).await;
            seen.push(s);
            chats[c].push(json!({"role": "assistant", "content": answer}));
            chats[c].push(json!({"role": "user", "content": format!("Request {n}: go on.")}));
        }
        runs.push(seen);
    }
    let (chunked, whole) = (&runs[0], &runs[1]);
    let said = format!("chunked:\n{chunked:#?}\nin one run:\n{whole:#?}");
    for (c, w) in chunked.iter().zip(whole) {
        assert_eq!(
            (c.prompt, c.cached, c.prefilled),
            (w.prompt, w.cached, w.prefilled),
            "{said}"
        );
    }
    // Conversations 1 and 3 opened after 0 with a long message: each was
    // prefilled in chunks from a snapshot that held the opening.
    for first in [1, 4] {
        let s = &chunked[first];
        assert!(s.chunks >= 2 && s.cached > system.len(), "{said}");
    }
}

/// A counter of `GET /metrics` for the model `m`.
fn counter(metrics: &str, name: &str) -> f64 {
    model_metric(metrics, name, "m", &[]).unwrap_or(0.0)
}

#[tokio::test]
async fn on_the_mock_a_new_conversation_in_chunks_starts_from_the_shared_opening_too() {
    let system = system(3000);
    let mut counted = Vec::new();
    for chunks in ["", "prefill_chunk_tokens = 0"] {
        let tokenizer = mock_tokenizer().display().to_string();
        let server = Server::start(
            &mock_config(
                0.0,
                0,
                &format!(
                    "[[models]]\nname = \"m\"\ntokenizer = {tokenizer:?}\n{}\n{chunks}\n",
                    qwen()
                ),
            ),
            &[],
        );
        let body = |messages: &[Value]| json!({"model": "m", "max_tokens": 8, "messages": messages, "tools": tools()});
        let mut a = vec![json!({"role": "system", "content": system})];
        for turn in 1..=3 {
            a.push(json!({"role": "user",
                "content": format!("Turn {turn} of the first task: what is the NPU doing now?")}));
            let reply = server.post_json("/v1/chat/completions", body(&a)).await;
            let answer = reply["choices"][0]["message"]["content"].clone();
            a.push(json!({"role": "assistant", "content": answer}));
        }
        let earlier = outcomes(&server, "m", 3).await;
        let metrics = server.metrics_text().await;
        let before = (
            counter(&metrics, "rkllm_prompt_tokens_reused_total"),
            counter(&metrics, "rkllm_prompt_tokens_prefilled_total"),
        );
        let b = [
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": long_question()}),
        ];
        let outcome = outcome_of_next(&server, 3, async {
            server.post_json("/v1/chat/completions", body(&b)).await;
        })
        .await;
        let metrics = server.metrics_text().await;
        let reused = counter(&metrics, "rkllm_prompt_tokens_reused_total") - before.0;
        let prefilled = counter(&metrics, "rkllm_prompt_tokens_prefilled_total") - before.1;
        eprintln!(
            "mock{}: B's first turn reused {reused} tokens, prefilled {prefilled}",
            if chunks.is_empty() {
                " in chunks"
            } else {
                " in one run"
            }
        );
        assert_eq!(outcome, "shared", "after {earlier:?}");
        counted.push((reused, prefilled));
    }
    assert_eq!(counted[0], counted[1], "in chunks, then in one run");
    let (reused, prefilled) = counted[0];
    // The opening (system prompt, tools) was reused; B's message prefilled.
    assert!(reused > system.len() as f64, "{counted:?}");
    let question = long_question().len() as f64;
    assert!(
        prefilled >= question && prefilled <= question + 64.0,
        "{counted:?}"
    );
}
