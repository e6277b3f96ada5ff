//! Token log probabilities in the shapes of the APIs that report them.

use serde_json::{Value, json};

use crate::service::{TokenLogprob, token_text};

/// One token in OpenAI's chat shape (Ollama's is the same): `token` (its
/// text, or `bytes:\xNN…` when it is part of a character), `logprob`, its
/// raw `bytes`, and the likeliest tokens there in `top_logprobs`.
pub fn entry(e: &TokenLogprob) -> Value {
    let top: Vec<Value> = e
        .top
        .iter()
        .map(|(bytes, logprob)| {
            json!({"token": token_text(bytes), "logprob": logprob, "bytes": bytes})
        })
        .collect();
    json!({"token": token_text(&e.bytes), "logprob": e.logprob, "bytes": e.bytes,
           "top_logprobs": top})
}

/// A list of tokens (Ollama's `logprobs`).
pub fn entries(es: &[TokenLogprob]) -> Value {
    Value::Array(es.iter().map(entry).collect())
}

/// OpenAI chat's `choices[].logprobs`.
pub fn chat(es: &[TokenLogprob]) -> Value {
    json!({"content": entries(es), "refusal": null})
}

/// OpenAI text completions' `choices[].logprobs`, the first token's text
/// starting at `offset` in the completion.
pub fn completion(es: &[TokenLogprob], offset: usize) -> Value {
    let mut at = offset;
    let mut offsets = Vec::with_capacity(es.len());
    for e in es {
        offsets.push(at);
        at += e.bytes.len();
    }
    let top: Vec<Value> = es
        .iter()
        .map(|e| {
            let mut alternatives = serde_json::Map::new();
            for (bytes, logprob) in &e.top {
                alternatives.insert(token_text(bytes), json!(logprob));
            }
            Value::Object(alternatives)
        })
        .collect();
    json!({
        "tokens": es.iter().map(|e| token_text(&e.bytes)).collect::<Vec<_>>(),
        "token_logprobs": es.iter().map(|e| e.logprob).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": offsets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(bytes: &[u8], logprob: f32) -> TokenLogprob {
        TokenLogprob {
            bytes: bytes.to_vec(),
            logprob,
            top: vec![(bytes.to_vec(), logprob), (b" x".to_vec(), -3.0)],
        }
    }

    #[test]
    fn each_api_shape_carries_the_tokens_and_their_bytes() {
        let es = [token(b"Hi", -0.5), token(&[0xe6, 0x97], -1.0)];
        let c = chat(&es);
        assert_eq!(c["content"][0]["token"], "Hi");
        assert_eq!(c["content"][1]["token"], "bytes:\\xe6\\x97");
        assert_eq!(c["content"][1]["bytes"], json!([0xe6, 0x97]));
        assert_eq!(c["content"][0]["top_logprobs"][1]["token"], " x");
        let t = completion(&es, 4);
        assert_eq!(t["text_offset"], json!([4, 6]));
        assert_eq!(t["token_logprobs"], json!([-0.5, -1.0]));
        assert_eq!(t["top_logprobs"][0][" x"], json!(-3.0));
    }
}
