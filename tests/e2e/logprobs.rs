//! Token log probabilities on the runtime test double, in logits mode: the
//! runner takes each callback's last row, reports the log-softmax value of
//! the runtime's pick and the likeliest tokens, and the pick stands (the
//! answer is the model file's text, as without log probabilities). The
//! double picks the row's best token, so the token is the first of its
//! alternatives, with the same value. Through a runner process (the
//! default) and in the server's thread; a model without a tokenizer is
//! refused naming `logprobs`.

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, mock_tokenizer, ndjson};

const ANSWER: &str = "The NPU streams tokens: 東京 🦀.";

fn start(fake: Fake, runner: &str) -> (Server, std::path::PathBuf, ScratchDir) {
    let dir = ScratchDir::new();
    let tokenizer = mock_tokenizer();
    let model = dir.0.join("talker.rkllm");
    std::fs::write(
        &model,
        format!("@fake-vocab={}\n{ANSWER}", tokenizer.display()),
    )
    .unwrap();
    let copied = dir.0.join("copied.rkllm");
    std::fs::write(&copied, ANSWER).unwrap();
    let config = format!(
        "[rkllm]\nrunner = {runner:?}\n\
         [[models]]\nname = \"talker\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
         [[models]]\nname = \"copied\"\npath = {copied:?}\n"
    );
    let log = dir.0.join("fake.log");
    let server = Server::start_on_fake(&config, fake, &log, &[], &[]);
    (server, log, dir)
}

/// Checks a list of OpenAI/Ollama-shaped entries against `text`.
fn check(entries: &[Value], text: &str, top: usize) {
    let joined: Vec<u8> = entries
        .iter()
        .flat_map(|e| {
            e["bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| u8::try_from(b.as_u64().unwrap()).unwrap())
                .collect::<Vec<u8>>()
        })
        .collect();
    assert_eq!(String::from_utf8(joined).unwrap(), text);
    for e in entries {
        let logprob = e["logprob"].as_f64().unwrap();
        assert!(logprob <= 0.0, "{e}");
        let alternatives = e["top_logprobs"].as_array().unwrap();
        assert_eq!(alternatives.len(), top, "{e}");
        // The double picks the best token: it heads its alternatives.
        assert_eq!(alternatives[0]["bytes"], e["bytes"], "{e}");
        assert!((alternatives[0]["logprob"].as_f64().unwrap() - logprob).abs() < 1e-6);
        let values: Vec<f64> = alternatives
            .iter()
            .map(|a| a["logprob"].as_f64().unwrap())
            .collect();
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "{values:?}");
        assert!(values.iter().map(|v| v.exp()).sum::<f64>() <= 1.0 + 1e-6);
    }
}

#[tokio::test]
async fn logprobs_are_read_from_the_logits_rows_and_the_answer_is_unchanged() {
    for (fake, runner) in [(Fake::V1_3, "process"), (Fake::V1_2, "thread")] {
        let (server, log, _dir) = start(fake, runner);
        let whole = server
            .post_json(
                "/v1/chat/completions",
                json!({"model": "talker", "logprobs": true, "top_logprobs": 3,
                       "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await;
        assert_eq!(whole["choices"][0]["message"]["content"], ANSWER, "{whole}");
        let entries = whole["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap_or_else(|| panic!("{whole}"));
        check(entries, ANSWER, 3);
        let fake_log = std::fs::read_to_string(&log).unwrap();
        assert!(fake_log.contains("logits-end how=eos"), "{fake_log}");

        // Streamed on Ollama's API: the lines' entries make the text.
        let lines = ndjson(
            &server,
            "/api/chat",
            json!({"model": "talker", "logprobs": true, "top_logprobs": 1,
                   "messages": [{"role": "user", "content": "again"}]}),
        )
        .await;
        let text: String = lines
            .iter()
            .filter_map(|l| l["message"]["content"].as_str())
            .collect();
        assert_eq!(text, ANSWER);
        let entries: Vec<Value> = lines
            .iter()
            .filter_map(|l| l["logprobs"].as_array())
            .flatten()
            .cloned()
            .collect();
        check(&entries, ANSWER, 1);

        // Without a tokenizer the rows cannot be read.
        let refused = server
            .send(
                reqwest::Method::POST,
                "/v1/chat/completions",
                Some(json!({"model": "copied", "logprobs": true,
                            "messages": [{"role": "user", "content": "hi"}]})),
                None,
            )
            .await;
        assert_eq!(refused.status(), 400);
        let error: Value = refused.json().await.unwrap();
        assert_eq!(error["error"]["param"], "logprobs", "{error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("`copied`")
        );
    }
}
