//! The mock's token log probabilities: plausible values of its own, the
//! same for the same request, as a real model's logits row gives them:
//! each token's logprob is at most 0, the alternatives at its place are the
//! mock's other words, and their probabilities with the token's sum to at
//! most 1.

use super::{Rng, WORDS};
use crate::vocab::TokenLogprob;

/// The log probability of the token `piece`, emitted `index`-th in the
/// reply of the request hashed to `seed`, with `top` alternatives. As a
/// sampler's pick: under greedy sampling (`greedy`, temperature 0) the
/// likeliest token, so first among the alternatives; otherwise a token the
/// distribution gave some mass, among the alternatives with its own value
/// whenever any are asked for.
pub(super) fn of(piece: &[u8], top: u8, seed: u64, index: u64, greedy: bool) -> TokenLogprob {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // The token's own probability: between 0.4 and 1 when greedy (above
    // the (1 - p) / 2 of the likeliest alternative), else 0.2 and 1.
    let low = if greedy { 0.4 } else { 0.2 };
    let p = low + (1.0 - low) * (rng.below(1000) as f64 / 1000.0);
    let logprob = p.ln() as f32;
    let mut entries: Vec<(Vec<u8>, f32)> = vec![(piece.to_vec(), logprob)];
    // The rest of the mass, halved from one alternative to the next.
    let mut rest = (1.0 - p) / 2.0;
    let mut tried = 0;
    while entries.len() < usize::from(top) && tried < WORDS.len() * 2 {
        tried += 1;
        let word = format!(" {}", WORDS[rng.below(WORDS.len() as u64) as usize]);
        if entries.iter().any(|(b, _)| b == word.as_bytes()) || rest <= 0.0 {
            continue;
        }
        entries.push((word.into_bytes(), rest.max(f64::MIN_POSITIVE).ln() as f32));
        rest /= 2.0;
    }
    // Likeliest first; the pick keeps its place among those reported (a
    // stable sort keeps it ahead of an alternative of the same value).
    entries.sort_by(|a, b| b.1.total_cmp(&a.1));
    let kept = usize::from(top);
    if kept > 0
        && let Some(at) = entries.iter().position(|(b, _)| b.as_slice() == piece)
        && at >= kept
    {
        let pick = entries.remove(at);
        entries.insert(kept - 1, pick);
    }
    entries.truncate(kept);
    TokenLogprob::new(piece, logprob, entries)
}

/// The mock reranker's first token for a judgement of `document` against
/// `query`: "yes" or "no", as a reranker answers, with both at the top of
/// its distribution. Its probability of "yes" grows with the share of the
/// query's words (letters and digits, any case) the document has, from
/// 0.05 (none) to 0.95 (all): the same documents rank the same way each
/// time, the one that shares the most first.
pub(super) fn judgement(query: &str, document: &str) -> TokenLogprob {
    let words = |text: &str| -> std::collections::BTreeSet<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let (asked, found) = (words(query), words(document));
    let shared = asked.intersection(&found).count();
    let share = if asked.is_empty() {
        0.0
    } else {
        shared as f64 / asked.len() as f64
    };
    let yes = 0.05 + 0.9 * share;
    // A little mass is left for other tokens, as a model's row leaves it.
    let no = (1.0 - yes) * 0.98;
    let mut top = vec![
        (b"yes".to_vec(), yes.ln() as f32),
        (b"no".to_vec(), no.ln() as f32),
    ];
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (bytes, logprob) = top[0].clone();
    TokenLogprob::new(&bytes, logprob, top)
}

#[cfg(test)]
mod tests {
    use super::{judgement, of};

    #[test]
    fn a_judgement_says_yes_for_a_document_with_the_querys_words() {
        let relevant = judgement(
            "What is the NPU of the RK3588?",
            "The RK3588 has a 6 TOPS NPU.",
        );
        let unrelated = judgement("What is the NPU of the RK3588?", "Bread rises with yeast.");
        assert_eq!(relevant.bytes(), b"yes");
        assert_eq!(unrelated.bytes(), b"no");
        let yes = |e: &crate::vocab::TokenLogprob| e.top().find(|(b, _)| *b == b"yes").unwrap().1;
        assert!(yes(&relevant) > yes(&unrelated));
        let mass: f64 = relevant.top().map(|(_, lp)| f64::from(lp).exp()).sum();
        assert!(mass <= 1.0 + 1e-6);
    }

    #[test]
    fn values_are_probabilities_sorted_and_the_same_each_time() {
        let a = of(b" NPU", 5, 7, 3, false);
        assert_eq!(a, of(b" NPU", 5, 7, 3, false));
        assert!(a.logprob() <= 0.0);
        let top: Vec<_> = a.top().collect();
        assert_eq!(top.len(), 5);
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(
            top.iter()
                .any(|(b, lp)| *b == b" NPU" && *lp == a.logprob())
        );
        let mass: f64 = top.iter().map(|(_, lp)| f64::from(*lp).exp()).sum();
        assert!(mass <= 1.0 + 1e-6, "{mass}");
        assert_eq!(of(b"x", 0, 1, 1, false).top().len(), 0);
    }

    #[test]
    fn the_pick_is_first_when_greedy_and_among_the_alternatives_otherwise() {
        for index in 0..500 {
            for top in 1..=20 {
                let greedy = of(b" NPU", top, 11, index, true);
                let first = greedy.top().next().unwrap();
                assert_eq!(first, (&b" NPU"[..], greedy.logprob()), "{index} {top}");
                let sampled = of(b" NPU", top, 11, index, false);
                assert!(
                    sampled
                        .top()
                        .any(|(b, lp)| b == b" NPU" && lp == sampled.logprob()),
                    "{index} {top}: {sampled:?}"
                );
                let mass: f64 = sampled.top().map(|(_, lp)| f64::from(lp).exp()).sum();
                assert!(mass <= 1.0 + 1e-6, "{mass}");
            }
        }
    }
}
