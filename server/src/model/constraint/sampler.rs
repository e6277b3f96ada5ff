//! Choosing a token among those a grammar allows, from a step's logits,
//! with a request's sampling settings: repetition penalties over the
//! answer so far, temperature, top-k and top-p. Temperature 0 (or a
//! single candidate) takes the most likely allowed token.
//!
//! It looks at the allowed tokens only, and at most the
//! [`MAX_CANDIDATES`] most likely of them: beyond those, a realistic
//! distribution holds no mass worth drawing from, and a full sort of a
//! 150,000-token vocabulary would cost more than the step it serves.

use toktrie::SimpleVob;

/// The most candidates drawn from when top-k does not bound them.
pub const MAX_CANDIDATES: usize = 1024;

/// A request's sampling settings, as the runtime applies them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature (0: the most likely token).
    pub temperature: f32,
    /// Nucleus mass, above 0 up to 1.
    pub top_p: f32,
    /// Candidates kept (0: no bound).
    pub top_k: usize,
    /// Repetition penalty (1: none): a repeated token's logit is divided
    /// by it when positive, multiplied when negative.
    pub repeat_penalty: f32,
    /// Subtracted once per earlier occurrence.
    pub frequency_penalty: f32,
    /// Subtracted once for any earlier occurrence.
    pub presence_penalty: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_p: 0.9,
            top_k: 40,
            repeat_penalty: 1.1,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
        }
    }
}

/// xorshift64*: one random number from `state`, which it advances.
fn next_random(state: &mut u64) -> f64 {
    let mut x = (*state).max(1);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
}

/// A token among the `allowed` ones, drawn from `logits` (one row, a value
/// per token of the vocabulary) with `params`; `history` is the answer so
/// far (for the penalties), `rng` the request's random state. `None` when
/// nothing is allowed.
///
/// One pass over the allowed tokens keeps only those that can still be
/// among the most likely (see [`Best`]); a repeated token's penalised
/// logit is put in afterwards, so the penalties are paid per distinct
/// token of the answer, not per token of the vocabulary.
pub fn sample(
    logits: &[f32],
    allowed: &SimpleVob,
    params: &SamplingParams,
    history: &[u32],
    rng: &mut u64,
) -> Option<u32> {
    let candidates = candidates(logits, allowed, params, history);
    if params.temperature <= 0.0 || candidates.len() <= 1 {
        return candidates.first().map(|&(t, _)| t);
    }
    let top = candidates[0].1;
    let mut weights: Vec<f64> = candidates
        .iter()
        .map(|(_, l)| f64::from((l - top) / params.temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    // Nucleus: the fewest most likely tokens whose mass reaches top_p.
    let mut mass = 0.0;
    let mut cut = weights.len();
    for (i, w) in weights.iter().enumerate() {
        mass += w / total;
        if mass >= f64::from(params.top_p) {
            cut = i + 1;
            break;
        }
    }
    weights.truncate(cut);
    let total: f64 = weights.iter().sum();
    let mut pick = next_random(rng) * total;
    for (i, w) in weights.iter().enumerate() {
        if pick < *w {
            return Some(candidates[i].0);
        }
        pick -= w;
    }
    Some(candidates[cut - 1].0)
}

/// The allowed tokens a draw with `params` chooses among, most likely
/// first: the `top_k` best (at most [`MAX_CANDIDATES`]; the best alone
/// at temperature 0) once penalised.
pub(super) fn candidates(
    logits: &[f32],
    allowed: &SimpleVob,
    params: &SamplingParams,
    history: &[u32],
) -> Vec<(u32, f32)> {
    let keep = match params.top_k {
        _ if params.temperature <= 0.0 => 1,
        0 => MAX_CANDIDATES,
        k => k.min(MAX_CANDIDATES),
    };
    let is_allowed = |token: usize| token < allowed.len() && allowed.is_allowed(token as u32);
    let usable = |token: usize| logits.get(token).copied().filter(|l| l.is_finite());
    let repeated = penalised(logits, params, history);
    // The `keep` best once penalised are among the `keep + repeated` best
    // before: only the repeated tokens' logits move.
    let mut best = Best::new(keep + repeated.len());
    allowed.iter_set_entries(|token| {
        if let Some(logit) = usable(token) {
            best.offer(token as u32, logit);
        }
    });
    let mut candidates = best.into_vec();
    if !repeated.is_empty() {
        candidates.retain(|(token, _)| repeated.binary_search_by_key(token, |&(t, _)| t).is_err());
        candidates.extend(repeated.iter().copied().filter(|&(token, logit)| {
            is_allowed(token as usize) && usable(token as usize).is_some() && logit.is_finite()
        }));
    }
    if candidates.len() > keep {
        candidates.select_nth_unstable_by(keep - 1, by_logit);
        candidates.truncate(keep);
    }
    candidates.sort_unstable_by(by_logit);
    candidates
}

/// Most likely first; the lower id first among equals.
fn by_logit(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The `wanted` most likely of the tokens offered, found in one pass:
/// offers go to a buffer of twice that; when it fills, the best half is
/// kept and the worst kept logit becomes the bar a later offer must pass
/// (later offers have higher ids, so one equal to the bar loses the tie).
struct Best {
    wanted: usize,
    kept: Vec<(u32, f32)>,
    bar: f32,
}

impl Best {
    fn new(wanted: usize) -> Self {
        Self {
            wanted,
            kept: Vec::with_capacity(2 * wanted),
            bar: f32::NEG_INFINITY,
        }
    }

    fn offer(&mut self, token: u32, logit: f32) {
        if self.kept.len() >= self.wanted && logit <= self.bar {
            return;
        }
        self.kept.push((token, logit));
        if self.kept.len() == 2 * self.wanted {
            self.kept.select_nth_unstable_by(self.wanted - 1, by_logit);
            self.kept.truncate(self.wanted);
            self.bar = self.kept[self.wanted - 1].1;
        }
    }

    fn into_vec(self) -> Vec<(u32, f32)> {
        self.kept
    }
}

/// The distinct tokens of `history` with their penalised logits, by id
/// (none when the settings penalise nothing).
fn penalised(logits: &[f32], params: &SamplingParams, history: &[u32]) -> Vec<(u32, f32)> {
    let none = params.repeat_penalty == 1.0
        && params.frequency_penalty == 0.0
        && params.presence_penalty == 0.0;
    if none || history.is_empty() {
        return Vec::new();
    }
    let mut counted: Vec<u32> = history.to_vec();
    counted.sort_unstable();
    let mut repeated: Vec<(u32, f32)> = Vec::new();
    for run in counted.chunk_by(|a, b| a == b) {
        let token = run[0];
        let Some(&raw) = logits.get(token as usize) else {
            continue;
        };
        let mut logit = raw;
        if params.repeat_penalty > 0.0 && params.repeat_penalty != 1.0 {
            logit = if logit > 0.0 {
                logit / params.repeat_penalty
            } else {
                logit * params.repeat_penalty
            };
        }
        logit -= params.frequency_penalty * run.len() as f32 + params.presence_penalty;
        repeated.push((token, logit));
    }
    repeated
}
