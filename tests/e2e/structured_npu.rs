//! Structured output on the NPU path: the `rkllm` backend on both ABIs of
//! the runtime's test double in logits mode (tests/fake-rkllmrt, its
//! vocabulary the mock's tokenizer.json). The double's "model" wants to say
//! free text, so its own picks break a schema often and the runner's
//! corrections are exercised as much as its standing picks. Every reply
//! parses and fits its schema, checked field by field: JSON objects, a
//! nested schema, forced tool calls, through OpenAI, Ollama and JSON-RPC,
//! streamed and not (`apis`); thinking first, aborts, the token cap, stop
//! strings, both runner kinds, a tokenizer that does not fit, and the
//! runtime calls per token (`runs`).

mod apis;
mod runs;

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::{
    Fake, LIVENESS, ScratchDir, Server, fake_rknn_runtime, fake_runtime, ndjson, sse,
};

const ABIS: [(Fake, &str); 2] = [(Fake::V1_3, "1.3"), (Fake::V1_2, "1.2")];

/// What the double's model wants to say: chat, not JSON. Its quotes end a
/// string the grammar has opened; its letters cannot start one.
const CHAT: &str = "Sure! Here is what you asked for. The \"result\" is 42, and 東京 is far \
                    away.\nAnything else? I am happy to help with more.\n";

/// The thinking of the double (tests/fake-rkllmrt/README.md).
const THINKING: &str = "The user asked; 東京 is far, so 🤔 I weigh it step by step.";

/// The mock's tokenizer, which the double's model file names too.
fn tokenizer() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../server/assets/mock-tokenizer.json")
}

/// A server on the double with one model, `name`, whose file names the
/// tokenizer, then holds `head` (more options for the double) and `text`
/// (the RKNN runtime's double is there for a vision model).
struct Npu {
    server: Server,
    log: PathBuf,
    /// Holds the model file and the double's log; removed after the server.
    _scratch: ScratchDir,
}

/// How to start an [`Npu`].
struct Setup<'a> {
    fake: Fake,
    name: &'a str,
    head: &'a str,
    text: &'a str,
    /// More config (sections before the model's entry).
    config: &'a str,
    /// More lines of the model's entry.
    entry: &'a str,
    env: &'a [(&'a str, &'a str)],
}

impl<'a> Setup<'a> {
    fn new(fake: Fake) -> Self {
        Self {
            fake,
            name: "npu",
            head: "",
            text: CHAT,
            config: "",
            entry: "",
            env: &[],
        }
    }
}

impl Npu {
    fn start(setup: &Setup<'_>) -> Self {
        let scratch = ScratchDir::new();
        let model = scratch.0.join("model.rkllm");
        let tokenizer = tokenizer();
        std::fs::write(
            &model,
            format!(
                "@fake-vocab={}\n{}{}",
                tokenizer.display(),
                setup.head,
                setup.text
            ),
        )
        .unwrap();
        let log = scratch.0.join("fake.log");
        let runtime = fake_runtime(setup.fake);
        let mut env = vec![("FAKE_RKLLM_LOG", log.to_str().unwrap())];
        env.extend_from_slice(setup.env);
        let config = format!(
            "{}\n[[models]]\nname = {:?}\npath = {model:?}\ntokenizer = {tokenizer:?}\n{}\n",
            setup.config, setup.name, setup.entry
        );
        let rknn = fake_rknn_runtime();
        let server = Server::start_env(
            &config,
            &[
                "--backend",
                "rkllm",
                "--runtime",
                runtime.to_str().unwrap(),
                "--rknn-runtime",
                rknn.to_str().unwrap(),
            ],
            &env,
        );
        Self {
            server,
            log,
            _scratch: scratch,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The double's log from byte `from` on, once a line of it starts with
    /// one of `events` (bounded wait: the runtime logs after the server
    /// has answered).
    async fn log_until(&self, from: usize, events: &[&str]) -> String {
        let deadline = tokio::time::Instant::now() + LIVENESS;
        loop {
            let since = self.log().get(from..).unwrap_or_default().to_owned();
            if since
                .lines()
                .any(|l| events.iter().any(|e| l.starts_with(e)))
            {
                return since;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "none of {events:?} in the double's log since byte {from}:\n{since}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// What the double's log says of the logits runs in `log`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Runs {
    /// `rkllm_run` calls in logits mode.
    runs: u64,
    /// Of them, runs that fed tokens.
    feeds: u64,
    /// Tokens fed.
    fed: u64,
    /// Callbacks (rows answered): the runtime's decode steps and prefills.
    steps: u64,
    /// Logits rows handed over.
    rows: u64,
}

fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn runs_in(log: &str) -> Runs {
    let mut runs = Runs::default();
    for line in log.lines() {
        if line.starts_with("logits-run ") {
            runs.runs += 1;
            let fed = field(line, "fed");
            runs.fed += fed;
            runs.feeds += u64::from(fed > 0);
        }
        if line.starts_with("logits-end ") {
            runs.steps += field(line, "steps");
            runs.rows += field(line, "rows");
        }
    }
    runs
}

/// Parses `text` as JSON, naming where it came from when it does not.
fn parse(text: &str, at: &str) -> Value {
    assert!(
        !text.contains('\u{FFFD}'),
        "{at}: a broken character in {text:?}"
    );
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{at}: not JSON ({e}): {text:?}"))
}

/// A nested schema: an enum, an array with bounds, strings with a bound,
/// a nested object with a bounded integer, no other properties anywhere.
fn pet_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "kind": {"enum": ["cat", "dog", "fish"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                     "minItems": 1, "maxItems": 3},
            "home": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 16},
                               "floor": {"type": "integer", "minimum": 0, "maximum": 99}},
                "required": ["city", "floor"],
                "additionalProperties": false
            },
            "indoor": {"type": "boolean"}
        },
        "required": ["name", "kind", "tags", "home", "indoor"],
        "additionalProperties": false
    })
}

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    keys
}

fn short_string(value: &Value, most: usize) -> bool {
    value.as_str().is_some_and(|s| s.chars().count() <= most)
}

/// That `value` fits [`pet_schema`].
fn check_pet(value: &Value, at: &str) {
    assert_eq!(
        keys(value),
        ["home", "indoor", "kind", "name", "tags"],
        "{at}: {value}"
    );
    assert!(short_string(&value["name"], 24), "{at}: {value}");
    assert!(
        ["cat", "dog", "fish"].contains(&value["kind"].as_str().unwrap_or_default()),
        "{at}: {value}"
    );
    let tags = value["tags"].as_array().expect("tags");
    assert!((1..=3).contains(&tags.len()), "{at}: {value}");
    assert!(tags.iter().all(|t| short_string(t, 10)), "{at}: {value}");
    let home = &value["home"];
    assert_eq!(keys(home), ["city", "floor"], "{at}: {value}");
    assert!(short_string(&home["city"], 16), "{at}: {value}");
    assert!(
        home["floor"].as_u64().is_some_and(|f| f <= 99),
        "{at}: {value}"
    );
    assert!(value["indoor"].is_boolean(), "{at}: {value}");
}

/// The tool a forced call must name, and its arguments' schema.
fn weather_tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object",
                           "properties": {"city": {"type": "string", "maxLength": 20},
                                          "unit": {"enum": ["celsius", "fahrenheit"]}},
                           "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                           "required": ["zone"], "additionalProperties": false}}}
    ])
}

/// That a call's name and arguments (a JSON text) fit [`weather_tools`].
fn check_call(name: &str, arguments: &str, at: &str) {
    let arguments = parse(arguments, at);
    match name {
        "get_weather" => {
            assert_eq!(keys(&arguments), ["city", "unit"], "{at}: {arguments}");
            assert!(short_string(&arguments["city"], 20), "{at}: {arguments}");
            assert!(
                ["celsius", "fahrenheit"].contains(&arguments["unit"].as_str().unwrap_or_default()),
                "{at}: {arguments}"
            );
        }
        "get_time" => {
            assert_eq!(keys(&arguments), ["zone"], "{at}: {arguments}");
            assert!(arguments["zone"].is_string(), "{at}: {arguments}");
        }
        other => panic!("{at}: a call of {other:?}"),
    }
}
