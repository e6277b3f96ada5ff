//! A reranker model on the runtime test double: each document is judged
//! in a run of its own, in Qwen3-Reranker's form (the query and the
//! document in the user turn, the answer begun after an empty thinking
//! block), in logits mode, one token long; the relevance is "yes" against
//! "no" in that token's row. The double says its model file's text, so a
//! model whose file says "yes" finds every document relevant and one whose
//! file says "no" none; the runs, their prompts and their rows are in the
//! runtime's log.

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, mock_tokenizer_with};

#[tokio::test]
async fn a_reranker_judges_each_document_from_its_first_logits_row() {
    let dir = ScratchDir::new();
    let tokenizer = dir.0.join("tokenizer.json");
    std::fs::write(
        &tokenizer,
        mock_tokenizer_with(&[("yes", false), ("no", false)]),
    )
    .unwrap();
    let model = |name: &str, says: &str| {
        let path = dir.0.join(format!("{name}.rkllm"));
        std::fs::write(
            &path,
            format!("@fake-vocab={}\n{says}", tokenizer.display()),
        )
        .unwrap();
        path
    };
    let (agrees, refuses) = (model("agrees", "yes"), model("refuses", "no"));
    let copied = dir.0.join("copied.rkllm");
    std::fs::write(&copied, "yes").unwrap();
    let log = dir.0.join("fake.log");
    let config = format!(
        "[rkllm]\nsnapshot_dir = {:?}\n\
         [[models]]\nname = \"agrees\"\npath = {agrees:?}\ntokenizer = {tokenizer:?}\n\
         reranker = true\nchat_template = \"chatml\"\n\
         [[models]]\nname = \"refuses\"\npath = {refuses:?}\ntokenizer = {tokenizer:?}\n\
         reranker = true\nchat_template = \"chatml\"\n\
         [[models]]\nname = \"builtin\"\npath = {copied:?}\ntokenizer = {tokenizer:?}\n\
         reranker = true\n\
         [[models]]\nname = \"talker\"\npath = {copied:?}\n",
        dir.0.join("snapshots")
    );
    let server = Server::start_on_fake(&config, Fake::V1_3, &log, &[], &[]);
    let documents = ["Bread rises with yeast.", "The RK3588 has a 6 TOPS NPU."];
    let rerank = |model: &str| {
        json!({"model": model, "query": "What NPU does the RK3588 have?",
               "documents": documents, "return_documents": true})
    };

    let agreed = server.post_json("/v1/rerank", rerank("agrees")).await;
    let results = agreed["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{agreed}");
    for (i, result) in results.iter().enumerate() {
        // Equal scores keep the request's order.
        assert_eq!(result["index"], i, "{agreed}");
        let score = result["relevance_score"].as_f64().unwrap();
        assert!(score > 0.99 && score <= 1.0, "{agreed}");
    }
    let runs = std::fs::read_to_string(&log).unwrap();
    // Each document is judged by a generation of its own, which ends after
    // its one token; a long judgement is prefilled in chunks before it (runs
    // that pause at their prefill), so that no callback holds more than a
    // chunk's logits rows.
    let generations: Vec<&str> = runs
        .lines()
        .filter(|l| l.starts_with("logits-end ") && !l.contains("how=pause"))
        .collect();
    assert_eq!(generations.len(), 2, "one judgement per document: {runs}");
    for document in documents {
        let judged = format!("<Document>: {document}<|im_end|>");
        assert!(
            runs.contains(&judged) || runs.contains("run-tokens "),
            "each document reaches the runtime, as text or as its tokens: {runs}"
        );
    }
    let held: Vec<usize> = runs
        .lines()
        .filter_map(|l| l.strip_prefix("prefilled held="))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(
        held.iter().filter(|&&h| h > 300).count() >= 2,
        "each judgement is made from its whole prompt: {held:?}"
    );
    assert!(agreed["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    // The question is the same for every document: the second judgement
    // starts from the snapshot of the first, which covers it.
    let judgement = rkllm_server::model::rerank::judgement(
        rkllm_server::model::rerank::DEFAULT_INSTRUCTION,
        "What NPU does the RK3588 have?",
        documents[0],
    );
    let question = judgement.text.find("<Document>: ").unwrap();
    let cached: Vec<usize> = runs
        .lines()
        .filter_map(|l| l.strip_prefix("run-cached bytes="))
        .map(|b| b.parse().unwrap())
        .collect();
    assert!(
        cached.iter().any(|&bytes| bytes >= question),
        "a snapshot served the question's part ({question} bytes): {runs}"
    );

    let refused = server.post_json("/rerank", rerank("refuses")).await;
    for result in refused["results"].as_array().unwrap() {
        let score = result["relevance_score"].as_f64().unwrap();
        assert!((0.0..0.01).contains(&score), "{refused}");
    }

    // The runtime's own template would wrap the judgement; a model that
    // is no reranker cannot rerank.
    for (model, named) in [("builtin", "built-in chat template"), ("talker", "neither")] {
        let response = server
            .send(
                reqwest::Method::POST,
                "/v1/rerank",
                Some(rerank(model)),
                None,
            )
            .await;
        assert_eq!(response.status().as_u16(), 400);
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(named) && message.contains(model), "{body}");
    }
}
