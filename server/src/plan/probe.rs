//! The probes of a runtime: what each runs on the NPU, how what it saw is
//! judged, and which features of a model the verdicts leave on.
//!
//! Several features rest on what the runtime does beyond Rockchip's
//! documentation (`RKLLM_ABI.md` §3.3, §3.5c), known only from issue
//! threads: a run paused by its callback keeps its KV cache, token input
//! after a pause appends to it, the token whose callback paused the run is
//! not in it, how many logits rows a callback hands over, that a prompt
//! cache saved after token input holds the whole KV cache, and that an
//! empty chat template turns the built-in one off. Each is checked on the
//! board, with the model being loaded, before a feature relies on it; a
//! feature whose check fails is off for that model, and the server goes on
//! correctly without it. A failed probe never fails the model.
//!
//! The runs, in order (greedy sampling, `top_k = 1`; each starts from a
//! cleared KV cache; `A`, `B1`, `B2` and `C` are the texts below, their
//! ids by the model's tokenizer):
//!
//! 1. `A` in one run, one token: its prefill's count (the reference);
//! 2. with the server's template, `A` twice in one run: what the runtime
//!    adds around a prompt (`template_off`);
//! 3. `A` in logits mode, paused at its first callback: the rows handed
//!    over (`logits_rows`) and the KV cache after the pause
//!    (`pause_keeps_kv`, `paused_token_not_in_kv`);
//! 4. then `B1`'s ids, paused likewise: the KV cache grows by their count
//!    (`token_input`);
//! 5. then `B2`'s ids, generating: the greedy continuation, which must be
//!    that of `A`+`B1`+`B2` in one run (6., with the server's template:
//!    the runtime's own wraps text input and the two cannot be compared);
//! 7. `A` in logits mode, generating: each step's last row's likeliest
//!    token against the runtime's pick (`logits_rows`);
//! 8. `A` generating, paused at its third token, then `C`'s ids: the KV
//!    cache keeps the two tokens decoded and the run goes on
//!    (`pause_mid_generation`);
//! 9. with the server's template: `A` paused, `B1`'s ids saved as a prompt
//!    cache, then `A`+`B1`+`C` with that cache loaded prefills no more
//!    than `C` alone does (10.) (`prompt_cache_after_token_input`);
//! 11. a longer text, aborted just after it starts: whether the abort
//!     lands during the prefill, and how long it takes
//!     (`abort_during_prefill`; informational: chunked prefill is what
//!     stops a long prompt when it does not).

use serde::{Deserialize, Serialize};

use super::profile::{Feature, Features};

/// The version of the probes: verdicts kept from another are probed again.
pub const PROBE_SET: u32 = 1;

/// The first text: a sentence, ending a line (so that it joins itself
/// and the next text at a token's edge).
pub const A: &str =
    "The quick brown fox jumps over the lazy dog while a small board answers questions.\n";
/// The second text, fed as token ids after `A`.
pub const B1: &str = "It reads a long prompt in parts, each going on from the last.\n";
/// The third text, fed as token ids after `B1`; the run then generates.
pub const B2: &str = "Then it writes its answer:";
/// The last text, after a saved prompt cache, and after a pause in the
/// middle of a generation.
pub const C: &str = " the end of the probe comes here.\n";

/// Tokens each generating run of a probe takes.
pub const GENERATE: u32 = 6;

/// How often `A` is repeated in the abort's text.
pub const ABORT_REPEAT: usize = 6;

/// The callback a run paused in the middle of its generation is paused at
/// (the tokens before it are decoded).
pub const MID_PAUSE_AT: u32 = 3;

/// The probes' names, as `doctor --probe` reports them.
pub const NAMES: [&str; 8] = [
    PAUSE_KEEPS_KV,
    TOKEN_INPUT,
    PAUSED_TOKEN_NOT_IN_KV,
    LOGITS_ROWS,
    PROMPT_CACHE_AFTER_TOKEN_INPUT,
    TEMPLATE_OFF,
    ABORT_DURING_PREFILL,
    PAUSE_MID_GENERATION,
];

/// A run paused by its callback after its prefill keeps its KV cache.
pub const PAUSE_KEEPS_KV: &str = "pause_keeps_kv";
/// Token input after a pause appends to the KV cache, and goes on as the
/// same text in one run would.
pub const TOKEN_INPUT: &str = "token_input";
/// The token whose callback paused the run is not in the KV cache.
pub const PAUSED_TOKEN_NOT_IN_KV: &str = "paused_token_not_in_kv";
/// Logits rows: how many a callback holds, as wide as the tokenizer, the
/// runtime's pick the likeliest at `top_k = 1`.
pub const LOGITS_ROWS: &str = "logits_rows";
/// A prompt cache saved after token input holds the whole KV cache.
pub const PROMPT_CACHE_AFTER_TOKEN_INPUT: &str = "prompt_cache_after_token_input";
/// The empty chat template gives the rendered prompt unchanged.
pub const TEMPLATE_OFF: &str = "template_off";
/// Whether an abort lands during a prefill, and how long it takes.
pub const ABORT_DURING_PREFILL: &str = "abort_during_prefill";
/// A run paused in the middle of its generation keeps its KV cache, and
/// token input goes on from there (a thinking budget's close).
pub const PAUSE_MID_GENERATION: &str = "pause_mid_generation";

/// Slack, in positions, between counts that must agree (a beginning-of-
/// text token the runtime may add).
const SLACK: u32 = 2;

/// What the probes' runs saw. `None`: not run, or the runtime did not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// The server renders the template (the runtime's is set off).
    pub server_template: bool,
    /// The ids of `B1`, `B2` and `C` could be had (a tokenizer).
    pub ids: bool,
    /// Runs sample greedily (the runtime takes sampling settings per run):
    /// continuations can be compared.
    pub greedy: bool,
    /// The tokenizer's vocabulary size.
    pub vocabulary: Option<u32>,
    /// Run 1: The prefill count of `A` alone.
    pub a_prefill: Option<u32>,
    /// Run 2: The prefill count of `A` twice.
    pub aa_prefill: Option<u32>,
    /// Run 3: Whether the logits run paused when its callback returned 1.
    pub paused_at_prefill: bool,
    /// Run 3: The first callback's rows: how many, how wide.
    pub first_rows: Option<(u32, u32)>,
    /// Run 3: The KV cache after that pause.
    pub kv_after_pause: Option<u32>,
    /// Run 4: `B1`'s ids, and the KV cache after they were fed and paused.
    pub b1_ids: u32,
    pub kv_after_tokens: Option<u32>,
    /// Runs 5 and 6: The greedy continuations: after the chunks, and in one run.
    pub chunked_text: Option<String>,
    pub one_run_text: Option<String>,
    /// Run 7: Steps whose last row's likeliest token was the pick, of those
    /// compared.
    pub argmax_agreed: u32,
    pub argmax_compared: u32,
    /// Run 8: Whether the generation paused at its third token, the KV cache
    /// then, and whether the run after it went on to its end; the tokens it
    /// gave when it ended before the pause.
    pub mid_paused: bool,
    #[serde(default)]
    pub mid_ended_after: Option<u32>,
    pub kv_mid: Option<u32>,
    pub mid_continued: bool,
    /// Runs 9 and 10: The prefill count of `A`+`B1`+`C` with the cache saved after
    /// `B1` loaded, and of `C` alone.
    pub cache_prefill: Option<u32>,
    pub c_prefill: Option<u32>,
    /// Run 9: Why the cache could not be had, when it could not.
    pub cache_trouble: Option<String>,
    /// Run 11: The abort: how long the run took after it, and how long the
    /// same prefill takes whole.
    pub abort_ms: Option<f64>,
    pub prefill_ms: Option<f64>,
    /// Runtime runs made, tokens prefilled and generated (the probes'
    /// cost).
    pub runs: u32,
    pub prefilled: u32,
    pub generated: u32,
}

/// One probe's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// The probe (`pause_keeps_kv`, ...).
    pub name: String,
    /// Whether the runtime does what the probe checks.
    pub passed: bool,
    /// What it saw.
    pub detail: String,
    /// Whether it could run at all (a model without a tokenizer gives no
    /// ids to feed; some probes are for the server's template only).
    #[serde(default = "yes")]
    pub ran: bool,
}

fn yes() -> bool {
    true
}

impl Check {
    fn new(name: &str, passed: bool, detail: impl Into<String>) -> Self {
        Self {
            name: name.to_owned(),
            passed,
            detail: detail.into(),
            ran: true,
        }
    }

    fn not_run(name: &str, why: impl Into<String>) -> Self {
        Self {
            name: name.to_owned(),
            passed: false,
            detail: format!("not run: {}", why.into()),
            ran: false,
        }
    }
}

/// Judges what the runs saw into one verdict per probe, in [`NAMES`]'
/// order.
pub fn judge(o: &Observed) -> Vec<Check> {
    vec![
        pause_keeps_kv(o),
        token_input(o),
        paused_token_not_in_kv(o),
        logits_rows(o),
        prompt_cache_after_token_input(o),
        template_off(o),
        abort_during_prefill(o),
        pause_mid_generation(o),
    ]
}

fn pause_keeps_kv(o: &Observed) -> Check {
    let name = PAUSE_KEEPS_KV;
    let Some(a) = o.a_prefill else {
        return Check::not_run(
            name,
            "the runtime gave no prefill count for the reference run",
        );
    };
    if !o.paused_at_prefill {
        return Check::new(
            name,
            false,
            "the run did not pause when its callback returned 1",
        );
    }
    match o.kv_after_pause {
        None => Check::new(
            name,
            false,
            "rkllm_get_kv_cache_size gave no answer after the pause",
        ),
        Some(kv) if kv + SLACK >= a => Check::new(
            name,
            true,
            format!("the KV cache held {kv} positions after a pause past a {a}-token prompt"),
        ),
        Some(kv) => Check::new(
            name,
            false,
            format!(
                "the KV cache held {kv} positions after a pause past a {a}-token prompt: the pause did not keep it"
            ),
        ),
    }
}

/// Positions the pause put in the KV cache beyond the prompt (the paused
/// token, when the runtime decodes it), when the pause kept the prompt.
fn extra_after_pause(o: &Observed) -> Option<u32> {
    let (a, kv) = (o.a_prefill?, o.kv_after_pause?);
    (kv + SLACK >= a).then(|| kv.saturating_sub(a))
}

fn paused_token_not_in_kv(o: &Observed) -> Check {
    let name = PAUSED_TOKEN_NOT_IN_KV;
    let (Some(a), Some(kv)) = (o.a_prefill, o.kv_after_pause) else {
        return Check::not_run(name, "no KV cache size after the pause");
    };
    match extra_after_pause(o) {
        None => Check::new(
            name,
            false,
            format!("not judged: the pause kept {kv} of {a} positions"),
        ),
        Some(0) => Check::new(
            name,
            true,
            format!("the KV cache held the prompt's {a} positions and not the paused token"),
        ),
        Some(extra) => Check::new(
            name,
            false,
            format!(
                "the KV cache held {kv} positions after a {a}-token prompt: the paused token ({extra} more) is in it"
            ),
        ),
    }
}

fn token_input(o: &Observed) -> Check {
    let name = TOKEN_INPUT;
    if !o.ids {
        return Check::not_run(name, "the model has no tokenizer to give ids to feed");
    }
    let (Some(before), Some(after), Some(extra)) =
        (o.kv_after_pause, o.kv_after_tokens, extra_after_pause(o))
    else {
        return Check::new(
            name,
            false,
            "not judged: the pause before it did not keep the KV cache",
        );
    };
    let b1 = o.b1_ids;
    // A runtime that decodes the paused token does so after the ids too.
    let want = before + b1 + extra;
    if after != want {
        return Check::new(
            name,
            false,
            format!(
                "{b1} ids fed after a pause took the KV cache from {before} to {after} positions, not {want}"
            ),
        );
    }
    let grew = format!("{b1} ids fed after a pause took the KV cache from {before} to {after}");
    match (&o.chunked_text, &o.one_run_text) {
        (Some(chunked), _) if chunked.is_empty() => Check::new(
            name,
            false,
            format!("{grew}, but the run after them generated nothing"),
        ),
        (Some(chunked), Some(whole)) if chunked != whole => Check::new(
            name,
            false,
            format!(
                "{grew}, but its greedy continuation {chunked:?} is not that of the same text in one run, {whole:?}"
            ),
        ),
        (Some(_), Some(_)) => Check::new(
            name,
            true,
            format!("{grew}; the greedy continuation is the same text's in one run"),
        ),
        (Some(_), None) if !o.server_template => Check::new(
            name,
            true,
            format!(
                "{grew}; the continuation is not compared: the runtime's own template wraps text input"
            ),
        ),
        (Some(_), None) if !o.greedy => Check::new(
            name,
            true,
            format!(
                "{grew}; the continuation is not compared: this runtime takes no sampling settings per run"
            ),
        ),
        _ => Check::new(
            name,
            false,
            format!("{grew}, but a run gave no text to compare"),
        ),
    }
}

fn logits_rows(o: &Observed) -> Check {
    let name = LOGITS_ROWS;
    let Some((count, width)) = o.first_rows else {
        return Check::new(name, false, "the logits run's first callback held no rows");
    };
    let shape = match o.a_prefill {
        _ if count == 1 => "one row a callback".to_owned(),
        Some(a) if count + SLACK >= a && count <= a + SLACK => {
            format!("the prefill's {count} rows at once, then one a step")
        }
        _ => format!("{count} rows in the first callback"),
    };
    // A row that does not fit the tokenizer is the tokenizer's setting,
    // not the runtime's doing: said here, refused by the requests that
    // read rows, naming the setting.
    let fits = match o.vocabulary {
        Some(tokens) => match super::steer::check_width(width as usize, tokens as usize) {
            Ok(()) => format!("{width} wide (the tokenizer's {tokens} fit)"),
            Err(why) => format!("{width} wide: {why}"),
        },
        None => format!("{width} wide"),
    };
    if o.argmax_compared > 0 && o.argmax_agreed < o.argmax_compared {
        return Check::new(
            name,
            false,
            format!(
                "{shape}, {fits}; the runtime's pick at top_k = 1 was its row's likeliest token in {} of {} steps",
                o.argmax_agreed, o.argmax_compared
            ),
        );
    }
    let picks = if o.argmax_compared == 0 {
        "no picks to compare (the row's likeliest token stands for it)".to_owned()
    } else {
        format!(
            "the pick was the row's likeliest in all {} steps",
            o.argmax_compared
        )
    };
    Check::new(name, true, format!("{shape}, {fits}; {picks}"))
}

fn prompt_cache_after_token_input(o: &Observed) -> Check {
    let name = PROMPT_CACHE_AFTER_TOKEN_INPUT;
    if !o.server_template {
        return Check::not_run(
            name,
            "the runtime's own template: prompts are not prefilled in chunks",
        );
    }
    if !o.ids {
        return Check::not_run(name, "the model has no tokenizer to give ids to feed");
    }
    if let Some(why) = &o.cache_trouble {
        return Check::new(name, false, why.clone());
    }
    match (o.cache_prefill, o.c_prefill) {
        (Some(cached), Some(c)) if cached <= c + SLACK => Check::new(
            name,
            true,
            format!(
                "with the cache saved after the ids loaded, the prompt prefilled {cached} positions, as its last part alone ({c})"
            ),
        ),
        (Some(cached), Some(c)) => Check::new(
            name,
            false,
            format!(
                "with the cache saved after the ids loaded, the prompt prefilled {cached} positions, more than its last part alone ({c}): the cache holds less than the whole KV cache"
            ),
        ),
        _ => Check::new(name, false, "the runtime gave no prefill counts"),
    }
}

fn template_off(o: &Observed) -> Check {
    let name = TEMPLATE_OFF;
    if !o.server_template {
        return Check::not_run(name, "the model uses the runtime's own template");
    }
    let (Some(a), Some(aa)) = (o.a_prefill, o.aa_prefill) else {
        return Check::new(name, false, "the runtime gave no prefill counts");
    };
    // Twice the text takes twice its tokens; what a template adds around
    // it, once.
    let added = (2 * a).saturating_sub(aa);
    if added <= SLACK {
        Check::new(
            name,
            true,
            format!("a prompt prefilled {a} positions and twice it {aa}: nothing added around it"),
        )
    } else {
        Check::new(
            name,
            false,
            format!(
                "a prompt prefilled {a} positions and twice it {aa}: the runtime adds about {added} around every prompt, so its own template is still on"
            ),
        )
    }
}

fn abort_during_prefill(o: &Observed) -> Check {
    let name = ABORT_DURING_PREFILL;
    match (o.abort_ms, o.prefill_ms) {
        (Some(abort), Some(prefill)) if prefill >= 20.0 => {
            let landed = abort < prefill / 2.0;
            Check::new(
                name,
                landed,
                format!(
                    "an abort 5 ms into a {prefill:.0} ms prefill ended the run after {abort:.0} ms{}",
                    if landed {
                        ": it lands during the prefill"
                    } else {
                        ": it waits for the prefill's end (long prompts are stopped between chunks)"
                    }
                ),
            )
        }
        (Some(abort), Some(prefill)) => Check::new(
            name,
            false,
            format!(
                "not judged: the prefill took {prefill:.0} ms, too short to tell (the abort took {abort:.0} ms)"
            ),
        ),
        _ => Check::new(name, false, "the runtime gave no prefill time"),
    }
}

fn pause_mid_generation(o: &Observed) -> Check {
    let name = PAUSE_MID_GENERATION;
    let Some(a) = o.a_prefill else {
        return Check::not_run(
            name,
            "the runtime gave no prefill count for the reference run",
        );
    };
    if let Some(tokens) = o.mid_ended_after {
        return Check::not_run(
            name,
            format!("the model's answer ended after {tokens} tokens, before the pause"),
        );
    }
    if !o.mid_paused {
        return Check::new(
            name,
            false,
            "the generation did not pause when its callback returned 1",
        );
    }
    let decoded = MID_PAUSE_AT - 1;
    let Some(kv) = o.kv_mid else {
        return Check::new(
            name,
            false,
            "rkllm_get_kv_cache_size gave no answer after the pause",
        );
    };
    if kv + SLACK < a + decoded {
        return Check::new(
            name,
            false,
            format!(
                "the KV cache held {kv} positions after a pause {decoded} tokens into the answer to a {a}-token prompt: the pause did not keep it"
            ),
        );
    }
    if !o.ids {
        return Check::new(
            name,
            true,
            format!(
                "the KV cache held {kv} positions after a pause {decoded} tokens into the answer (no tokenizer: nothing fed after it)"
            ),
        );
    }
    if !o.mid_continued {
        return Check::new(
            name,
            false,
            format!(
                "the KV cache held {kv} positions after the pause, but the run that fed ids after it did not go on to its end"
            ),
        );
    }
    Check::new(
        name,
        true,
        format!(
            "the KV cache held {kv} positions after a pause {decoded} tokens into the answer, and the run that fed ids after it went on"
        ),
    )
}

/// What the features rest on besides the probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Basis {
    /// The model has a tokenizer.
    pub tokenizer: bool,
    /// The server renders its template.
    pub server_template: bool,
    /// `prefill_chunk_tokens` (0: one run).
    pub chunk_tokens: u32,
}

/// The features `checks` leave on, for a model on `basis`.
pub fn features(basis: Basis, checks: &[Check], observed: &Observed) -> Features {
    let find = |name: &str| checks.iter().find(|c| c.name == name);
    // On when every probe named passed; else off, naming the first that
    // did not and what it saw.
    let gate = |needs: &[&str], on: &str| -> Feature {
        for name in needs {
            match find(name) {
                Some(c) if c.passed => {}
                Some(c) => return Feature::off(format!("probe {name}: {}", c.detail)),
                None => return Feature::off(format!("probe {name} was not run")),
            }
        }
        Feature::on(on)
    };
    let no_tokenizer = || Feature::off("the model has no tokenizer");
    let server_template = if basis.server_template {
        gate(
            &[TEMPLATE_OFF],
            "the empty template leaves the rendered prompt unchanged",
        )
    } else {
        Feature::on("the model uses the runtime's own template")
    };
    // A runtime that keeps its own template on is given conversations as
    // that template takes them, which the server cannot cut.
    let chunked_prefill = if basis.chunk_tokens == 0 {
        Feature::off("prefill_chunk_tokens = 0")
    } else if !basis.server_template {
        Feature::off("the model uses the runtime's own template, which the server cannot cut")
    } else if !server_template.on {
        Feature::off(format!(
            "probe {TEMPLATE_OFF} failed, so the runtime's own template is used, which the server cannot cut"
        ))
    } else if !basis.tokenizer {
        no_tokenizer()
    } else {
        gate(
            &[PAUSE_KEEPS_KV, TOKEN_INPUT, PAUSED_TOKEN_NOT_IN_KV],
            "a pause keeps the KV cache, token input appends to it, the paused token is not in it",
        )
    };
    let thinking_budget = if basis.tokenizer {
        gate(
            &[PAUSE_MID_GENERATION, TOKEN_INPUT],
            "a pause mid-generation keeps the KV cache and token input goes on from it",
        )
    } else {
        no_tokenizer()
    };
    let logprobs = if basis.tokenizer {
        gate(
            &[LOGITS_ROWS],
            "the logits rows fit the tokenizer and agree with the picks",
        )
    } else {
        no_tokenizer()
    };
    let constrained = if basis.tokenizer {
        gate(
            &[
                LOGITS_ROWS,
                PAUSE_KEEPS_KV,
                TOKEN_INPUT,
                PAUSED_TOKEN_NOT_IN_KV,
            ],
            "rows, pauses and token input all hold",
        )
    } else {
        no_tokenizer()
    };
    let snapshots = if chunked_prefill.on {
        gate(
            &[PROMPT_CACHE_AFTER_TOKEN_INPUT],
            "a cache saved after token input holds the whole prompt",
        )
    } else {
        Feature::on("no prompt is prefilled in chunks: every snapshot is of a prompt in one run")
    };
    let rows_at_once = observed
        .first_rows
        .map(|(count, _)| count)
        .filter(|&count| count > 1);
    let row_width = observed.first_rows.map(|(_, width)| width);
    Features {
        chunked_prefill,
        thinking_budget,
        logprobs,
        constrained,
        snapshots,
        server_template,
        rows_at_once,
        row_width,
    }
}

/// What a model's runtime was found to do: the probes' verdicts and the
/// features they leave on, with what the probes cost, and (from `doctor
/// --probe`) the board's measured figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdicts {
    /// The runtime's version, as its library says.
    pub runtime_version: Option<String>,
    /// One verdict per probe.
    pub checks: Vec<Check>,
    /// The features they leave on.
    pub features: Features,
    /// What the probes cost: runtime runs, tokens prefilled and generated.
    pub cost: Cost,
    /// When they ran (seconds since the epoch).
    pub probed_at: u64,
    /// Whether these were kept from an earlier probe (same runtime, same
    /// model file) rather than run at this load.
    #[serde(default)]
    pub kept: bool,
    /// The board's figures, when measured (`doctor --probe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
}

/// What the probes cost on the NPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// `rkllm_run` calls.
    pub runs: u32,
    /// Tokens prefilled.
    pub prefilled: u32,
    /// Tokens generated (callbacks).
    pub generated: u32,
}

impl Cost {
    /// The NPU seconds these runs take at `prefill_per_s` and
    /// `decode_per_s` tokens a second.
    pub fn seconds_at(&self, prefill_per_s: f64, decode_per_s: f64) -> f64 {
        f64::from(self.prefilled) / prefill_per_s + f64::from(self.generated) / decode_per_s
    }
}

/// A board's figures for a model, measured by `doctor --probe`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Prefill time per prompt token (the runtime's counts).
    pub prefill_ms_per_token: f64,
    /// Decode time per generated token (the runtime's counts).
    pub decode_ms_per_token: f64,
    /// From the run's start to its first token, as the server sees it.
    pub ttft_ms: f64,
    /// What saving a prompt cache adds to a run.
    pub snapshot_save_ms: f64,
    /// What loading one takes.
    pub snapshot_load_ms: f64,
    /// What prefilling a prompt in two chunks adds to one run.
    pub chunk_overhead_ms: f64,
    /// Time per generated token in logits mode.
    pub logits_step_ms: f64,
    /// The runner process's peak resident memory (VmHWM).
    pub runner_peak_mb: u64,
    /// Several sequences in one run (`n_batch`), the documented batch ABI
    /// run raw: not served yet, measured to tell whether it would pay.
    #[serde(default)]
    pub batch: Vec<Batch>,
}

/// One raw batched run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// Sequences in the run.
    pub n_batch: u32,
    /// Whether it ran at all.
    pub ran: bool,
    /// Decode tokens a second per sequence.
    pub decode_tokens_per_s_per_stream: f64,
    /// Against `n_batch` 1's.
    pub per_stream_vs_single: f64,
    /// What happened.
    pub detail: String,
}

/// What the runs of `o` cost.
pub fn observed_cost(o: &Observed) -> Cost {
    Cost {
        runs: o.runs,
        prefilled: o.prefilled,
        generated: o.generated,
    }
}

#[cfg(test)]
mod tests;
