//! Agents keep their cache: replays of agent sessions on each API, on the
//! runtime test double, for a model with a tokenizer and Qwen2.5's own
//! chat template, with conversation snapshots and chunked prefill at their
//! defaults (on).
//!
//! An agent (Claude Code, Codex, Open WebUI, ...) sends a long system
//! prompt and its tools, then grows the conversation a turn at a time,
//! each request the whole conversation so far. Some send a system (or
//! developer) message after the first turn: Claude Code with
//! `CLAUDE_CODE_TOTAL_TOKENS_REMINDER=countdown` a reminder after a tool's
//! result ("Tokens left: ..."), and a system message right after the first
//! user message, so that its first request ends with one; Codex a
//! developer message in the middle of its input. A template that renders
//! a system message where it was sent (Qwen2.5's does) keeps such a
//! message there, so the prompt of each turn begins with the prompt of the
//! turn before, and the runtime starts from that turn's snapshot: each turn
//! prefills its new messages and the template's markers around them, not
//! the conversation again. (Gathered into one system block at the front,
//! as the server once did, a late message changed the prompt right after
//! the system prompt, and each such turn prefilled the tools and the whole
//! conversation again.)
//!
//! What a request prefilled is read from the double's log: a run that
//! starts a generation prefills its prompt past what the loaded cache
//! covers (`run-cached bytes=N`), a run that goes on after a pause (a chunk
//! of a chunked prefill) the text of the tokens it feeds; `prefilled
//! held=N` says how much prompt text the generation holds after each run.
//! Counted in bytes of prompt text, which the double measures exactly, and
//! compared with the bytes of text in the messages new since the
//! conversation's previous request. The metrics test checks the server's
//! own counters of prefilled and reused prompt tokens over such a session.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, mock_tokenizer, model_metric};

/// What the double "generates": the model file's text.
const ANSWER: &str = "I will read the code before I change anything.";

const MODEL: &str = "agent";

/// Bytes a turn after the first may prefill beyond the text of its new
/// messages. That text is counted exactly (the previous answer, a call's
/// name and arguments, the tool's result, a late system message, a user
/// message); what the template writes around it is not: per new message
/// `<|im_start|>role\n` and `<|im_end|>\n` (28 to 30 bytes), around a call
/// `\n<tool_call>\n{"name": "", "arguments": }\n</tool_call>` (50), around
/// a tool's result `<tool_response>` lines (34), and the next turn's
/// `<|im_start|>assistant\n` (22): about 210 bytes for the largest turn
/// here (an answer with a call, its result, a system and a user message),
/// with room for the arguments' JSON written with other spacing. A turn
/// prefilled whole is several times its bound (the check asserts so, so
/// that it can fail).
const SLACK: usize = 384;

/// A model with the mock tokenizer and Qwen2.5's own template, on the
/// double of ABI 1.3.0, with conversation snapshots.
struct Board {
    server: Server,
    log: PathBuf,
    _dir: ScratchDir,
}

impl Board {
    fn start() -> Self {
        let dir = ScratchDir::new();
        let tokenizer = mock_tokenizer().display().to_string();
        let model = dir.0.join("agent.rkllm");
        std::fs::write(&model, format!("@fake-vocab={tokenizer}\n{ANSWER}")).unwrap();
        let template = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/chat-templates/qwen2.5.jinja")
            .display()
            .to_string();
        let config = format!(
            "[rkllm]\nsnapshot_dir = {:?}\nsnapshot_max_mb = 64\n\
             [[models]]\nname = \"{MODEL}\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
             max_context_len = 8192\n\
             chat_template = {{ jinja = {template:?}, eos_token = \"<|im_end|>\" }}\n",
            dir.0.join("snapshots")
        );
        let log = dir.0.join("fake.log");
        let server = Server::start_on_fake(&config, Fake::V1_3, &log, &[], &[]);
        Self {
            server,
            log,
            _dir: dir,
        }
    }

    /// The double's log, whole (a prompt of many lines is in it as it is).
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// What the double prefilled in a stretch of its log: the bytes of prompt
/// text its runs prefilled, and the bytes of the prompt the last
/// generation held (the request's whole prompt).
fn prefilled(log: &str) -> (usize, usize) {
    let mut total = 0;
    let mut held = 0;
    let mut cached = 0;
    let mut continues = false;
    for line in log.lines() {
        if let Some(n) = line.strip_prefix("run-cached bytes=") {
            cached = n.trim().parse().unwrap();
        } else if let Some(rest) = line.strip_prefix("run-tokens ") {
            continues = !rest.contains("paused=0");
        } else if line == "run-continues-paused" {
            continues = true;
        } else if let Some(rest) = line.strip_prefix("prefilled held=") {
            let now: usize = rest.split(' ').next().unwrap().parse().unwrap();
            let from = if continues { held } else { cached };
            total += now.saturating_sub(from);
            held = now;
            cached = 0;
            continues = false;
        }
    }
    (total, held)
}

/// The system prompt: about 2 KB, long enough to be saved on its own
/// first, as an agent's is (Claude Code's is longer still; the double's
/// context holds 8,192 tokens).
fn system() -> String {
    let rules = [
        "You are an agent that helps the user with software engineering tasks in their repository.",
        "Use the tools offered to read files, search the code, edit files and run commands.",
        "Read a file before you edit it, and never guess at the contents of a file you have not read.",
        "Keep your answers short: the user reads them in a terminal, one screen at a time.",
        "When you change code, keep to the style of the code around it, its names and its comments.",
        "Run the project's tests after a change, and say which ones fail and why before going on.",
        "Do not commit, push or change branches unless the user asks you to.",
        "Prefer editing an existing file to creating a new one; never create documentation unasked.",
        "When a command fails, read its output and fix the cause instead of trying it again unchanged.",
        "Ask the user when a task is ambiguous rather than choosing an interpretation silently.",
        "Say what you are about to do in one sentence before each tool call, then make the call.",
        "Do not print secrets, keys or tokens that you come across in files or in a command's output.",
    ];
    let mut text = String::new();
    for section in ["Doing tasks", "Tool use"] {
        text.push_str(&format!("# {section}\n"));
        for (n, rule) in rules.iter().enumerate() {
            text.push_str(&format!("{}. {rule}\n", n + 1));
        }
        text.push('\n');
    }
    text.push_str("The working directory is /home/user/rkllm-server, a git repository.");
    text
}

/// The agent's tools: name, description, and the JSON schema of the input.
fn tools() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "read_file",
            "Reads a file of the repository, by lines, with line numbers.",
            json!({"type": "object", "properties": {
                "file_path": {"type": "string", "description": "The file's path"},
                "offset": {"type": "integer", "description": "The first line to read"},
                "limit": {"type": "integer", "description": "How many lines to read"}},
                "required": ["file_path"]}),
        ),
        (
            "grep",
            "Searches the repository's files for a regular expression.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "The regular expression"},
                "path": {"type": "string", "description": "The folder to search"}},
                "required": ["pattern"]}),
        ),
        (
            "edit_file",
            "Replaces a string in a file by another; the string must occur once.",
            json!({"type": "object", "properties": {
                "file_path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"}},
                "required": ["file_path", "old_string", "new_string"]}),
        ),
        (
            "run",
            "Runs a shell command in the repository and returns its output.",
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "timeout_ms": {"type": "integer"}},
                "required": ["command"]}),
        ),
    ]
}

/// A call the model is made to have made, and what the tool gave back.
#[derive(Debug, Clone)]
struct Call {
    name: &'static str,
    input: Value,
    result: String,
}

/// A message of the conversation, as the client sends it.
#[derive(Debug, Clone)]
enum Msg {
    User(String),
    /// A system message (a developer message in the Responses API).
    System(String),
    /// The model's answer to the request before (its text as the server
    /// gave it, filled in when sent), with a call it made and the tool's
    /// result.
    Answer(String, Option<Call>),
}

impl Msg {
    /// Bytes of text it carries.
    fn bytes(&self) -> usize {
        match self {
            Msg::User(text) | Msg::System(text) => text.len(),
            Msg::Answer(text, call) => {
                text.len()
                    + call.as_ref().map_or(0, |c| {
                        c.name.len() + c.input.to_string().len() + c.result.len()
                    })
            }
        }
    }
}

fn call(name: &'static str, input: Value, result: &str) -> Option<Call> {
    Some(Call {
        name,
        input,
        result: result.to_owned(),
    })
}

const TASK: &str = "The chunked prefill test fails since yesterday's change to \
    server/src/plan/chunks.rs. Find out why and fix it, then run the tests.";

const FILE: &str = "40\t    pub fn cut(\n41\t        prompt: &str,\n42\t        ids: &[u32],\n\
    43\t        pieces: &[Vec<u8>],\n44\t        size: usize,\n45\t        reused: usize,\n\
    46\t    ) -> Option<Self> {\n47\t        let size = size.max(1);\n\
    48\t        if ids.len() <= size || ids.len() != pieces.len() {\n49\t            return None;\n\
    50\t        }\n51\t        // Byte offset where each token starts; the pieces must be the text.\n\
    52\t        let mut starts = Vec::with_capacity(pieces.len() + 1);\n\
    53\t        let mut at = 0usize;\n54\t        for piece in pieces {\n\
    55\t            starts.push(at);\n56\t            at += piece.len();\n57\t        }\n";

const HITS: &str = "server/src/plan/chunks.rs:40:    pub fn cut(\n\
    server/src/backend/rkllm/chunked.rs:44:        let chunks = Chunks::cut(prompt, &ids, \
    &pieces, size, self.reused_bytes(prompt));\nserver/src/plan/chunks.rs:212:        \
    let chunks = Chunks::cut(&prompt, &ids, &pieces, 16, 0).unwrap();";

const TESTS: &str = "running 9 tests\ntest plan::chunks::tests::a_prompt_is_cut_at_word_starts ... ok\n\
    test plan::chunks::tests::the_first_chunk_takes_what_a_cache_covers ... ok\n\
    test plan::chunks::tests::a_short_prompt_is_one_run ... ok\n\
    test result: ok. 9 passed; 0 failed; 0 ignored; finished in 0.02s";

/// The session's turns: what the client adds to the conversation on each
/// request. The first turn is `first`; on later turns the model's answer
/// (with a call and the tool's result, the countdown's reminder after some
/// of them, a user message on the last two). Without `late`, no system
/// message comes after the first turn.
fn session(first: Vec<Msg>, late: bool) -> Vec<Vec<Msg>> {
    let system = |text: &str| late.then(|| Msg::System(text.to_owned()));
    let answer = |call: Option<Call>| Msg::Answer(String::new(), call);
    let turns = vec![
        vec![
            Some(answer(call(
                "read_file",
                json!({"file_path": "server/src/plan/chunks.rs", "offset": 40, "limit": 18}),
                FILE,
            ))),
            system("Tokens left: 12000."),
        ],
        vec![Some(answer(call(
            "grep",
            json!({"pattern": "Chunks::cut", "path": "server/src"}),
            HITS,
        )))],
        vec![
            Some(answer(call(
                "edit_file",
                json!({"file_path": "server/src/plan/chunks.rs",
                       "old_string": "let size = size.max(1);",
                       "new_string": "let size = size.max(MIN_PREFILL_CHUNK_TOKENS);"}),
                "The file server/src/plan/chunks.rs has been updated.",
            ))),
            system("Tokens left: 9400."),
        ],
        vec![
            Some(answer(call(
                "run",
                json!({"command": "cargo test -p rkllm-server chunks", "timeout_ms": 600000}),
                TESTS,
            ))),
            system("The user changed the approval mode: edits are now applied without asking."),
            Some(Msg::User(
                "Good. Add a line about it to the changelog too.".into(),
            )),
        ],
        vec![
            Some(answer(None)),
            Some(Msg::User("Thanks, that is all for now.".into())),
        ],
    ];
    let mut all = vec![first];
    all.extend(
        turns
            .into_iter()
            .map(|turn| turn.into_iter().flatten().collect()),
    );
    all
}

/// The API a session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    /// `POST /v1/messages`, as Claude Code sends it.
    Anthropic,
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /api/chat`, not streamed.
    Ollama,
    /// `POST /v1/responses`, the whole input each time (`store: false`),
    /// as Codex sends it.
    Responses,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Anthropic => "/v1/messages",
            Api::OpenAi => "/v1/chat/completions",
            Api::Ollama => "/api/chat",
            Api::Responses => "/v1/responses",
        }
    }

    /// The request body for the conversation `history`.
    fn body(self, history: &[Msg]) -> Value {
        let tools = tools();
        let mut messages = Vec::new();
        for (i, message) in history.iter().enumerate() {
            let id = format!("call_{i:02}");
            match (self, message) {
                (Api::Responses, Msg::User(text)) => messages.push(json!({"type": "message",
                    "role": "user", "content": [{"type": "input_text", "text": text}]})),
                (Api::Responses, Msg::System(text)) => messages.push(json!({"type": "message",
                    "role": "developer", "content": [{"type": "input_text", "text": text}]})),
                (_, Msg::User(text)) => messages.push(json!({"role": "user", "content": text})),
                (_, Msg::System(text)) => {
                    messages.push(json!({"role": "system", "content": text}));
                }
                (Api::Anthropic, Msg::Answer(text, call)) => {
                    let mut content = vec![json!({"type": "text", "text": text})];
                    if let Some(c) = call {
                        content.push(json!({"type": "tool_use", "id": id, "name": c.name,
                                            "input": c.input}));
                    }
                    messages.push(json!({"role": "assistant", "content": content}));
                    if let Some(c) = call {
                        messages.push(json!({"role": "user", "content": [{"type": "tool_result",
                            "tool_use_id": id, "content": c.result}]}));
                    }
                }
                (Api::OpenAi, Msg::Answer(text, call)) => {
                    let mut answer = json!({"role": "assistant", "content": text});
                    if let Some(c) = call {
                        answer["tool_calls"] = json!([{"id": id, "type": "function",
                            "function": {"name": c.name, "arguments": c.input.to_string()}}]);
                    }
                    messages.push(answer);
                    if let Some(c) = call {
                        messages
                            .push(json!({"role": "tool", "tool_call_id": id, "content": c.result}));
                    }
                }
                (Api::Ollama, Msg::Answer(text, call)) => {
                    let mut answer = json!({"role": "assistant", "content": text});
                    if let Some(c) = call {
                        answer["tool_calls"] =
                            json!([{"function": {"name": c.name, "arguments": c.input}}]);
                    }
                    messages.push(answer);
                    if let Some(c) = call {
                        messages.push(
                            json!({"role": "tool", "tool_name": c.name, "content": c.result}),
                        );
                    }
                }
                (Api::Responses, Msg::Answer(text, call)) => {
                    messages.push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}));
                    if let Some(c) = call {
                        messages.push(json!({"type": "function_call", "call_id": id,
                            "name": c.name, "arguments": c.input.to_string()}));
                        messages.push(json!({"type": "function_call_output", "call_id": id,
                            "output": c.result}));
                    }
                }
            }
        }
        match self {
            Api::Anthropic => json!({
                "model": MODEL,
                "max_tokens": 256,
                "system": [{"type": "text", "text": system(),
                            "cache_control": {"type": "ephemeral"}}],
                "tools": tools.iter().map(|(name, description, schema)| json!({
                    "name": name, "description": description, "input_schema": schema,
                })).collect::<Vec<_>>(),
                "messages": messages,
            }),
            Api::OpenAi | Api::Ollama => {
                messages.insert(0, json!({"role": "system", "content": system()}));
                let tools: Vec<Value> = tools
                    .iter()
                    .map(|(name, description, schema)| {
                        json!({"type": "function", "function": {
                            "name": name, "description": description, "parameters": schema,
                        }})
                    })
                    .collect();
                if self == Api::Ollama {
                    json!({"model": MODEL, "stream": false, "messages": messages, "tools": tools})
                } else {
                    json!({"model": MODEL, "max_tokens": 256, "messages": messages,
                           "tools": tools})
                }
            }
            Api::Responses => json!({
                "model": MODEL,
                "instructions": system(),
                "input": messages,
                "tools": tools.iter().map(|(name, description, schema)| json!({
                    "type": "function", "name": name, "description": description,
                    "parameters": schema,
                })).collect::<Vec<_>>(),
                "store": false,
                "max_output_tokens": 256,
            }),
        }
    }

    /// The answer's text in a response.
    fn answer(self, response: &Value) -> String {
        let texts: Vec<&Value> = match self {
            Api::Anthropic => response["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "text")
                .map(|b| &b["text"])
                .collect(),
            Api::OpenAi => vec![&response["choices"][0]["message"]["content"]],
            Api::Ollama => vec![&response["message"]["content"]],
            Api::Responses => response["output"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|item| item["type"] == "message")
                .flat_map(|item| item["content"].as_array().into_iter().flatten())
                .filter(|part| part["type"] == "output_text")
                .map(|part| &part["text"])
                .collect(),
        };
        texts
            .iter()
            .map(|t| {
                t.as_str()
                    .unwrap_or_else(|| panic!("no answer text: {response}"))
            })
            .collect()
    }
}

/// One request of a session, as the double saw it.
#[derive(Debug)]
struct Turn {
    /// Bytes of text in the messages new since the previous request.
    new: usize,
    /// Bytes of prompt text the double prefilled for it, over all its runs.
    prefilled: usize,
    /// Bytes of the prompt it answered.
    prompt: usize,
    /// Whether a system (developer) message is among its new messages.
    late: bool,
}

/// Sends the session's turns on `api`, each request the whole conversation
/// so far with the answer to the one before; measures each on the double.
async fn replay(board: &Board, api: Api, turns: Vec<Vec<Msg>>) -> Vec<Turn> {
    let mut history: Vec<Msg> = Vec::new();
    let mut answer = String::new();
    let mut starts = Vec::new();
    let mut added = Vec::new();
    for turn in turns {
        let mut new = 0;
        let mut late = false;
        for message in turn {
            let message = match message {
                Msg::Answer(_, call) => Msg::Answer(answer.clone(), call),
                other => other,
            };
            late |= matches!(message, Msg::System(_));
            new += message.bytes();
            history.push(message);
        }
        added.push((new, late));
        starts.push(board.log().len());
        let response = board
            .server
            .send(
                reqwest::Method::POST,
                api.path(),
                Some(api.body(&history)),
                None,
            )
            .await;
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, 200, "{api:?} turn {}: {text}", starts.len());
        let body: Value = serde_json::from_str(&text).unwrap();
        answer = api.answer(&body);
        assert_eq!(answer, ANSWER, "{api:?} turn {}: {body}", starts.len());
    }
    // What a request's runs left in the log is what the log gained until
    // the next request was sent.
    let log = board.log();
    starts.push(log.len());
    added
        .into_iter()
        .zip(starts.windows(2))
        .map(|((new, late), w)| {
            let (prefilled, prompt) = prefilled(&log[w[0]..w[1]]);
            Turn {
                new,
                prefilled,
                prompt,
                late,
            }
        })
        .collect()
}

/// Prints the session's figures, then checks them: the first turn
/// prefilled its whole prompt; each later turn, which a whole prefill
/// would have taken far past the bound, prefilled its new messages and at
/// most [`SLACK`] bytes more.
fn check(api: Api, turns: &[Turn]) {
    let table: String = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "  turn {}: {} new bytes{}, prefilled {} bytes of a {}-byte prompt\n",
                i + 1,
                t.new,
                if t.late {
                    " (a late system message)"
                } else {
                    ""
                },
                t.prefilled,
                t.prompt
            )
        })
        .collect();
    let later = &turns[1..];
    let prefilled: usize = later.iter().map(|t| t.prefilled).sum();
    let new: usize = later.iter().map(|t| t.new).sum();
    let whole: usize = later.iter().map(|t| t.prompt).sum();
    eprintln!(
        "{api:?}: turns 2-{} prefilled {prefilled} bytes for {new} new bytes ({:.2}); \
         prefilled whole they would have been {whole} bytes; the first turn prefilled {} \
         bytes of its {}-byte prompt\n{table}",
        turns.len(),
        prefilled as f64 / new as f64,
        turns[0].prefilled,
        turns[0].prompt
    );
    // The measure sees a whole prefill: the first turn has nothing to
    // start from.
    let first = &turns[0];
    assert!(
        first.prompt > 4096 && first.prefilled >= first.prompt,
        "{api:?}: the first turn prefilled {} bytes of its {}-byte prompt\n{table}",
        first.prefilled,
        first.prompt
    );
    for (i, t) in turns.iter().enumerate().skip(1) {
        let turn = i + 1;
        // Prefilled whole, this turn would fail the bound by far.
        assert!(
            t.prompt > 2 * (t.new + SLACK),
            "{api:?}: turn {turn} is too short to tell\n{table}"
        );
        // Its new messages were never prefilled before: the runtime
        // cannot have held them.
        assert!(
            t.prefilled >= t.new,
            "{api:?}: turn {turn} prefilled {} bytes, less than its {} new bytes\n{table}",
            t.prefilled,
            t.new
        );
        assert!(
            t.prefilled <= t.new + SLACK,
            "{api:?}: turn {turn}{} prefilled {} bytes for {} new bytes (bound {})\n{table}",
            if t.late {
                " (a late system message)"
            } else {
                ""
            },
            t.prefilled,
            t.new,
            t.new + SLACK
        );
    }
}

#[tokio::test]
async fn each_turn_of_a_claude_code_session_with_reminders_prefills_only_what_is_new() {
    let board = Board::start();
    // Claude Code's first request ends with a system message, after the
    // first user message.
    let first = vec![
        Msg::User(TASK.into()),
        Msg::System(
            "As you answer the user's questions, you can use the following context: \
             the user's notes ask for short answers and for tests to be run after changes."
                .into(),
        ),
    ];
    let turns = replay(&board, Api::Anthropic, session(first, true)).await;
    check(Api::Anthropic, &turns);
}

#[tokio::test]
async fn each_turn_of_an_openai_agent_with_late_system_messages_prefills_only_what_is_new() {
    let board = Board::start();
    let first = vec![Msg::User(TASK.into())];
    let turns = replay(&board, Api::OpenAi, session(first, true)).await;
    check(Api::OpenAi, &turns);
}

#[tokio::test]
async fn each_turn_of_an_ollama_agent_with_late_system_messages_prefills_only_what_is_new() {
    let board = Board::start();
    let first = vec![Msg::User(TASK.into())];
    let turns = replay(&board, Api::Ollama, session(first, true)).await;
    check(Api::Ollama, &turns);
}

#[tokio::test]
async fn each_turn_of_a_codex_session_with_late_developer_messages_prefills_only_what_is_new() {
    let board = Board::start();
    // Codex: its instructions, then a developer message first in `input`.
    let first = vec![
        Msg::System(
            "Approval policy: on-request. Sandbox: workspace-write; network access is \
             restricted. Ask before running commands that need more."
                .into(),
        ),
        Msg::User(TASK.into()),
    ];
    let turns = replay(&board, Api::Responses, session(first, true)).await;
    check(Api::Responses, &turns);
}

/// The same check on a session with no system message after its first
/// turn: what the measure and its bound give where nothing moves.
#[tokio::test]
async fn each_turn_of_an_agent_session_without_late_messages_prefills_only_what_is_new() {
    let board = Board::start();
    let first = vec![Msg::User(TASK.into())];
    let turns = replay(&board, Api::OpenAi, session(first, false)).await;
    check(Api::OpenAi, &turns);
}

/// A counter of `GET /metrics` for the model, if there is one.
fn counter(metrics: &str, name: &str) -> Option<f64> {
    model_metric(metrics, name, MODEL, &[])
}

#[tokio::test]
async fn the_metrics_count_the_prompt_tokens_an_agent_session_prefilled_and_reused() {
    let board = Board::start();
    // No late system message: the counters alone are looked at here.
    let first = vec![Msg::User(TASK.into())];
    let turns = replay(&board, Api::Anthropic, session(first, false)).await;
    let bytes: usize = turns.iter().map(|t| t.prefilled).sum();
    let metrics = board.server.metrics_text().await;
    let ours: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("rkllm_prompt_tokens"))
        .collect();
    let prefilled = counter(&metrics, "rkllm_prompt_tokens_prefilled_total")
        .unwrap_or_else(|| panic!("no prefilled counter for {MODEL}: {ours:#?}"));
    let reused = counter(&metrics, "rkllm_prompt_tokens_reused_total")
        .unwrap_or_else(|| panic!("no reused counter for {MODEL}: {ours:#?}"));
    eprintln!(
        "{} turns: {prefilled} prompt tokens prefilled, {reused} reused; the double prefilled \
         {bytes} bytes",
        turns.len()
    );
    assert!(prefilled > 0.0 && reused > 0.0, "{ours:#?}");
    // Each turn after the first starts from the one before.
    assert!(
        reused > prefilled,
        "{reused} tokens reused, {prefilled} prefilled"
    );
    // A token is at least a byte of the text the double prefilled.
    assert!(
        prefilled <= bytes as f64,
        "{prefilled} tokens prefilled for {bytes} bytes"
    );
}
