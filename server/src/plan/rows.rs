//! What a logits row says: the log probability of a token under it, with
//! the likeliest tokens (log-softmax of the row, before the runtime's
//! temperature and top-k/top-p: the row is the model's output), and the
//! row's likeliest id. A request that asks for log probabilities runs in
//! logits mode (`RKLLM_INFER_GET_LOGITS`): each callback carries the next
//! token's distribution (its last logits row) and the runtime's pick from
//! it; the pick stands, so the answer is the runtime's own. Rows are read
//! only for requests that ask.

use crate::model::tokenizer::Vocabulary;
use crate::vocab::TokenLogprob;

/// The log probability of `token` under `row`, with the `top` likeliest
/// tokens of the row (ids the vocabulary has, special ones left out).
/// `None` for an id outside the row or the vocabulary, or a special token
/// (the end of the text is not reported).
pub fn entry(
    row: &[f32],
    token: usize,
    top: usize,
    vocabulary: &Vocabulary,
) -> Option<TokenLogprob> {
    let id = |i: usize| u32::try_from(i).ok();
    if token >= row.len() || token >= vocabulary.len() || vocabulary.is_special(id(token)?) {
        return None;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&x| f64::from(x - max).exp()).sum();
    let log_total = f64::from(max) + sum.ln();
    let logprob = |x: f32| (f64::from(x) - log_total) as f32;
    // The `top` highest values, kept sorted (a row is 150k wide, `top` 20
    // at most: a pass with a small sorted list).
    let mut best: Vec<(usize, f32)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (i, &x) in row.iter().enumerate().take(vocabulary.len()) {
            if best.len() == top && best.last().is_some_and(|&(_, low)| x <= low) {
                continue;
            }
            if id(i).is_none_or(|t| vocabulary.is_special(t)) {
                continue;
            }
            let at = best.partition_point(|&(_, v)| v >= x);
            best.insert(at, (i, x));
            best.truncate(top);
        }
    }
    Some(TokenLogprob::new(
        vocabulary.bytes(id(token)?),
        logprob(row[token]),
        best.into_iter()
            .filter_map(|(i, x)| Some((vocabulary.bytes(id(i)?), logprob(x)))),
    ))
}

/// The row's likeliest id (the pick, when the runtime does not report
/// its own).
pub fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocabulary() -> Vocabulary {
        Vocabulary::parse(crate::model::tokenizer::MOCK_TOKENIZER).unwrap()
    }

    #[test]
    fn the_logprob_is_the_log_softmax_of_the_row_and_the_top_is_sorted() {
        let v = vocabulary();
        let mut row = vec![0.0f32; v.len()];
        row[b'a' as usize] = 3.0;
        row[b'b' as usize] = 2.0;
        row[b'c' as usize] = 1.0;
        let e = entry(&row, b'b' as usize, 3, &v).unwrap();
        let total: f64 = row.iter().map(|&x| f64::from(x).exp()).sum();
        assert!((f64::from(e.logprob()) - (2.0 - total.ln())).abs() < 1e-4);
        assert_eq!(e.bytes(), b"b");
        let top: Vec<(&[u8], f32)> = e.top().collect();
        let tops: Vec<&[u8]> = top.iter().map(|(b, _)| *b).collect();
        assert_eq!(tops, [b"a".as_slice(), b"b", b"c"]);
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1));
        // The end of text is not a token reported.
        assert!(entry(&row, v.eos() as usize, 3, &v).is_none());
        assert_eq!(argmax(&row), b'a' as usize);
        assert!(entry(&row, v.len() + 5, 3, &v).is_none());
    }
}
