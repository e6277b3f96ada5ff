//! A reranker model's judgement: the question it is asked about a query
//! and one document, and how relevant its answer says the document is.
//!
//! The form is Qwen3-Reranker's: a ChatML conversation whose system text
//! says the answer can only be "yes" or "no", whose user turn holds the
//! instruction, the query and the document, and whose assistant turn has
//! begun after an empty thinking block. The model's first token is then
//! "yes" or "no"; the document's relevance is the probability of "yes"
//! against "no" in that token's distribution (its logits row), a value in
//! [0, 1].

use super::prompt::{Chat, Keeping, Prompt};
use crate::vocab::TokenLogprob;

/// The system text of the judgement.
const SYSTEM: &str = "Judge whether the Document meets the requirements based on the Query and \
                      the Instruct provided. Note that the answer can only be \"yes\" or \"no\".";

/// The instruction when the request gives none.
pub const DEFAULT_INSTRUCTION: &str =
    "Given a web search query, retrieve relevant passages that answer the query";

/// How many of the likeliest first tokens are read for "yes" and "no": a
/// reranker puts almost all its mass on the two.
pub const CANDIDATES: u8 = 20;

const QUERY: &str = "\n<Query>: ";
const DOCUMENT: &str = "\n<Document>: ";
const END: &str = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// The judgement of `document` against `query` under `instruction`, as
/// the model is given it: a whole text, sent without a template. The
/// query's part is the same for every document: a runner that keeps
/// snapshots saves that part once, on its own, and starts every judgement
/// from it, saving none of the judgements themselves.
pub fn judgement(instruction: &str, query: &str, document: &str) -> Prompt {
    let shared = format!(
        "<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: \
         {instruction}{QUERY}{query}{DOCUMENT}"
    );
    Prompt {
        chat: Some(Chat {
            system: None,
            turns: None,
            keeping: Keeping::Prefix(shared.len()),
        }),
        text: shared + document + END,
        ..Prompt::default()
    }
}

/// The query and the document of a judgement's text (what a model reads
/// in it; the mock judges by them). `None` for another text.
pub fn parts(text: &str) -> Option<(&str, &str)> {
    let body = text.strip_suffix(END)?;
    let (_, rest) = body.split_once(QUERY)?;
    rest.rsplit_once(DOCUMENT)
}

/// The relevance a judgement's first token gives: P(yes) / (P(yes) +
/// P(no)) over its likeliest tokens (one of the two not among them counts
/// as 0). `None` when neither is there: the model does not answer as a
/// reranker does.
pub fn relevance(first: &TokenLogprob) -> Option<f32> {
    let probability = |word: &[u8]| {
        first
            .top()
            .find(|(bytes, _)| *bytes == word)
            .map(|(_, logprob)| logprob)
            .or_else(|| (first.bytes() == word).then_some(first.logprob()))
            .map(|logprob| f64::from(logprob).exp())
    };
    let (yes, no) = (probability(b"yes"), probability(b"no"));
    if yes.is_none() && no.is_none() {
        return None;
    }
    let (yes, no) = (yes.unwrap_or(0.0), no.unwrap_or(0.0));
    Some(if yes + no > 0.0 {
        (yes / (yes + no)) as f32
    } else {
        0.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(pick: &str, top: &[(&str, f32)]) -> TokenLogprob {
        TokenLogprob::new(
            pick.as_bytes(),
            top.iter()
                .find(|(t, _)| *t == pick)
                .map_or(-0.1, |(_, lp)| *lp),
            top.iter().map(|(t, lp)| (t.as_bytes(), *lp)),
        )
    }

    #[test]
    fn the_judgement_holds_the_query_and_document_and_reads_back() {
        let prompt = judgement(
            DEFAULT_INSTRUCTION,
            "what is an NPU?",
            "An NPU runs networks.",
        );
        assert!(prompt.text.starts_with("<|im_start|>system\nJudge whether"));
        assert!(prompt.text.contains(
            "<Instruct>: Given a web search query, retrieve relevant passages that answer the \
             query\n<Query>: what is an NPU?\n<Document>: An NPU runs networks.<|im_end|>"
        ));
        assert!(
            prompt
                .text
                .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        );
        assert_eq!(
            parts(&prompt.text),
            Some(("what is an NPU?", "An NPU runs networks."))
        );
        assert_eq!(parts("just a prompt"), None);
    }

    #[test]
    fn relevance_is_yes_against_no() {
        let even = first("yes", &[("yes", 0.5f32.ln()), ("no", 0.5f32.ln())]);
        assert!((relevance(&even).unwrap() - 0.5).abs() < 1e-6);
        let sure = first("yes", &[("yes", 0.9f32.ln()), ("no", 0.05f32.ln())]);
        assert!((relevance(&sure).unwrap() - 0.9 / 0.95).abs() < 1e-5);
        let only_no = first("no", &[("no", 0.99f32.ln()), (" maybe", 0.01f32.ln())]);
        assert_eq!(relevance(&only_no), Some(0.0));
        // The pick counts when no alternatives were read.
        let bare = first("yes", &[]);
        assert_eq!(relevance(&bare), Some(1.0));
        assert_eq!(relevance(&first("Hello", &[("Hello", -0.1)])), None);
    }
}
