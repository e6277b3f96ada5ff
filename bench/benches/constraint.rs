//! Benchmark: the cost structured output adds per generated token — the
//! constraint engine's mask of allowed tokens plus the sampling among
//! them — over a vocabulary of Qwen's size (151,936 ids), and the time a
//! schema's compilation adds to the first token, cold and cached.
//!
//! Run with `cargo bench -p rkllm-bench --bench constraint`. Each step's
//! time is measured on its own (the logits are drawn before the clock
//! starts), so the figures are per token: p50, p90, p99 and the worst.
//! The vocabulary is generated, not read from a model: 256 byte tokens,
//! punctuation and digit runs, numbers, 21,000 CJK characters and
//! pseudo-words with and without a leading space and a capital, so the
//! engine's token trie has the breadth and depth of a real byte-level BPE
//! vocabulary. The NPU's decode step on an RK3588 is ~60 ms; the goal is
//! a p99 at or under 1 ms.
//!
//! That is the cost of a token the runner chooses itself (the runtime's
//! pick broke the constraint). Each answer is then replayed as if the
//! runtime's picks had all been allowed: per token, the check of the pick,
//! taking it and asking whether the answer is complete, which is what the
//! runner pays for a pick that stands.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkllm_server::model::constraint::{
    Constraint, Guide, SamplingParams, ToolSchema, check, sample,
};
use rkllm_server::model::tokenizer::Vocabulary;
use serde_json::json;

/// Qwen2.5/Qwen3's logits row.
const VOCABULARY_SIZE: usize = 151_936;
/// Answers generated per constraint.
const ANSWERS: u64 = 12;
/// Tokens at most per answer.
const MAX_TOKENS: usize = 400;

/// xorshift64*: deterministic and cheap.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A byte-level vocabulary of `size` tokens shaped like a real one; the
/// last ids are special tokens (the end of text among them).
fn vocabulary(size: usize) -> Vec<Vec<u8>> {
    let specials = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<think>",
        "</think>",
    ];
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut tokens: Vec<Vec<u8>> = Vec::with_capacity(size);
    let mut add = |token: Vec<u8>, tokens: &mut Vec<Vec<u8>>| {
        if tokens.len() + specials.len() < size && seen.insert(token.clone()) {
            tokens.push(token);
        }
    };
    for byte in 0..=255u8 {
        add(vec![byte], &mut tokens);
    }
    let punctuation = b"{}[]\":,.;!?()-_/\\' \n\t=<>*#@&%+|";
    for &a in punctuation {
        for &b in punctuation {
            add(vec![a, b], &mut tokens);
            for &c in b"\" \n,{}[]:" {
                add(vec![a, b, c], &mut tokens);
            }
        }
    }
    for n in 0..1000 {
        add(n.to_string().into_bytes(), &mut tokens);
        add(format!(" {n}").into_bytes(), &mut tokens);
    }
    for c in (0x4E00..0x4E00 + 21_000).filter_map(char::from_u32) {
        add(c.to_string().into_bytes(), &mut tokens);
    }
    let onsets = [
        "", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
        "st", "tr", "pr", "ch", "sh", "th", "gr", "cl", "str",
    ];
    let vowels = ["a", "e", "i", "o", "u", "ea", "io", "ou", "ai"];
    let codas = [
        "", "n", "r", "s", "t", "l", "nd", "ng", "st", "rt", "ck", "tion", "ment",
    ];
    let mut random = Random(0x5eed);
    while tokens.len() + specials.len() < size {
        let syllables = 1 + random.below(4);
        let mut word = String::new();
        for _ in 0..syllables {
            word.push_str(onsets[random.below(onsets.len())]);
            word.push_str(vowels[random.below(vowels.len())]);
            word.push_str(codas[random.below(codas.len())]);
        }
        let capital = {
            let mut chars = word.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        };
        for form in [
            word.clone(),
            format!(" {word}"),
            capital.clone(),
            format!(" {capital}"),
        ] {
            add(form.into_bytes(), &mut tokens);
        }
    }
    for name in specials {
        let mut token = vec![0xFF];
        token.extend_from_slice(name.as_bytes());
        tokens.push(token);
    }
    tokens
}

/// What is measured: a JSON schema of the kind clients send, any JSON
/// object, and a forced call of one of three tools.
fn constraints() -> Vec<(&'static str, Constraint)> {
    let person = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "maxItems": 3},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"],
                "additionalProperties": false
            },
            "score": {"type": "number"}
        },
        "required": ["name", "age", "tags", "address"],
        "additionalProperties": false
    });
    let tool = |name: &str, parameters| ToolSchema {
        name: name.into(),
        parameters,
    };
    let tools = vec![
        tool(
            "get_weather",
            json!({"type": "object", "properties": {"city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}),
        ),
        tool(
            "search",
            json!({"type": "object", "properties": {"query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}}, "required": ["query"]}),
        ),
        tool(
            "send_mail",
            json!({"type": "object", "properties": {"to": {"type": "string"},
                "subject": {"type": "string"}, "body": {"type": "string"}},
                "required": ["to", "subject", "body"]}),
        ),
    ];
    vec![
        (
            "JSON schema (nested object)",
            Constraint::JsonSchema(person),
        ),
        ("any JSON object", Constraint::JsonObject),
        ("forced call of one of 3 tools", Constraint::ToolCall(tools)),
    ]
}

/// Per-step times and what they came to.
struct Steps {
    times: Vec<Duration>,
    masks: Vec<Duration>,
    samples: Vec<Duration>,
    accepts: Vec<Duration>,
    /// Per token, when the same answer's picks all stand.
    standing: Vec<Duration>,
    answers: u64,
    complete: u64,
}

/// Generates [`ANSWERS`] answers held to `constraint`; each step draws
/// logits of a model that "wants" free text (random, with a few favoured
/// word tokens), then is timed: the mask, the draw among allowed tokens,
/// and taking the token.
fn generate(vocabulary: &Arc<Vocabulary>, constraint: &Constraint) -> Steps {
    let params = SamplingParams::default();
    let mut steps = Steps {
        times: Vec::new(),
        masks: Vec::new(),
        samples: Vec::new(),
        accepts: Vec::new(),
        standing: Vec::new(),
        answers: 0,
        complete: 0,
    };
    let mut logits = vec![0f32; vocabulary.len()];
    for answer in 0..ANSWERS {
        let mut random = Random(0xa11ce + answer);
        let mut guide = Guide::new(vocabulary, constraint).expect("the constraint compiles");
        let mut rng = answer + 1;
        for _ in 0..MAX_TOKENS {
            for logit in &mut logits {
                *logit = random.unit() * 4.0;
            }
            for _ in 0..16 {
                let favoured = 256 + random.below(vocabulary.len() - 300);
                logits[favoured] += 8.0;
            }
            let started = Instant::now();
            let allowed = guide.mask().expect("a mask").clone();
            let masked = started.elapsed();
            steps.masks.push(masked);
            let token = sample(&logits, &allowed, &params, guide.tokens(), &mut rng);
            let sampled = started.elapsed();
            steps.samples.push(sampled - masked);
            let Some(token) = token else { break };
            let done = token == vocabulary.eos();
            guide.accept(token).expect("an allowed token is taken");
            let total = started.elapsed();
            steps.accepts.push(total - sampled);
            steps.times.push(total);
            if done || guide.is_done() {
                steps.complete += 1;
                break;
            }
        }
        steps.answers += 1;
        let answer = guide.tokens().to_vec();
        let mut replay = Guide::new(vocabulary, constraint).expect("the constraint compiles");
        for token in answer {
            let started = Instant::now();
            let stands = replay.allows(token).expect("a check");
            replay.accept(token).expect("an allowed token is taken");
            let complete = replay.only_end_follows().expect("a check");
            steps.standing.push(started.elapsed());
            assert!(stands, "a token of the answer is allowed when replayed");
            if complete {
                break;
            }
        }
    }
    steps
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it too,
    // with a smaller vocabulary so that stays quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let size = if quick { 20_000 } else { VOCABULARY_SIZE };

    let started = Instant::now();
    let tokens = vocabulary(size);
    let generated = started.elapsed();
    let started = Instant::now();
    let vocabulary = Arc::new(Vocabulary::from_tokens(tokens).expect("a vocabulary"));
    let loaded = started.elapsed();
    println!(
        "vocabulary: {} tokens (generated in {}), token trie and parser tables built in {}, \
         ~{} MB",
        vocabulary.len(),
        ms(generated),
        ms(loaded),
        vocabulary.memory_bytes() / 1_000_000
    );

    for (name, constraint) in constraints() {
        let started = Instant::now();
        check(&vocabulary, &constraint).expect("the constraint compiles");
        let cold = started.elapsed();
        let started = Instant::now();
        drop(Guide::new(&vocabulary, &constraint).expect("the constraint compiles"));
        let cached = started.elapsed();
        let steps = generate(&vocabulary, &constraint);
        let mut sorted = steps.times.clone();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        let mut masks = steps.masks.clone();
        masks.sort_unstable();
        let mut samples = steps.samples.clone();
        samples.sort_unstable();
        let mut accepts = steps.accepts.clone();
        accepts.sort_unstable();
        let mut standing = steps.standing.clone();
        standing.sort_unstable();
        println!(
            "{name}: compile {} cold, {} cached; {} tokens in {} answers ({} complete): \
             mask + sample per token p50 {}, p90 {}, p99 {}, max {}, mean {}; the mask alone \
             p50 {}, p99 {}; the sampling p50 {}, p99 {}; taking the token p50 {}, p99 {}; \
             a pick that stands p50 {}, p99 {}, max {}",
            ms(cold),
            ms(cached),
            sorted.len(),
            steps.answers,
            steps.complete,
            ms(percentile(&sorted, 0.5)),
            ms(percentile(&sorted, 0.9)),
            ms(percentile(&sorted, 0.99)),
            ms(*sorted.last().expect("steps")),
            ms(total / u32::try_from(sorted.len()).expect("few steps")),
            ms(percentile(&masks, 0.5)),
            ms(percentile(&masks, 0.99)),
            ms(percentile(&samples, 0.5)),
            ms(percentile(&samples, 0.99)),
            ms(percentile(&accepts, 0.5)),
            ms(percentile(&accepts, 0.99)),
            ms(percentile(&standing, 0.5)),
            ms(percentile(&standing, 0.99)),
            ms(*standing.last().expect("steps")),
        );
    }
}
