//! The mock's token log probabilities: plausible values of its own, the
//! same for the same request, as a real model's logits row gives them:
//! each token's logprob is at most 0, the alternatives at its place are the
//! mock's other words, and their probabilities with the token's sum to at
//! most 1.

use super::{Rng, WORDS};
use crate::vocab::TokenLogprob;

/// The log probability of the token `piece`, emitted `index`-th in the
/// reply of the request hashed to `seed`, with `top` alternatives.
pub(super) fn of(piece: &[u8], top: u8, seed: u64, index: u64) -> TokenLogprob {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // The token's own probability: between about 0.2 and 1.
    let p = 0.2 + 0.8 * (rng.below(1000) as f64 / 1000.0);
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
    entries.sort_by(|a, b| b.1.total_cmp(&a.1));
    entries.truncate(usize::from(top));
    TokenLogprob {
        bytes: piece.to_vec(),
        logprob,
        top: entries,
    }
}

#[cfg(test)]
mod tests {
    use super::of;

    #[test]
    fn values_are_probabilities_sorted_and_the_same_each_time() {
        let a = of(b" NPU", 5, 7, 3);
        assert_eq!(a, of(b" NPU", 5, 7, 3));
        assert!(a.logprob <= 0.0);
        assert_eq!(a.top.len(), 5);
        assert!(a.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(a.top.iter().any(|(b, lp)| b == b" NPU" && *lp == a.logprob));
        let mass: f64 = a.top.iter().map(|(_, lp)| f64::from(*lp).exp()).sum();
        assert!(mass <= 1.0 + 1e-6, "{mass}");
        assert!(of(b"x", 0, 1, 1).top.is_empty());
    }
}
