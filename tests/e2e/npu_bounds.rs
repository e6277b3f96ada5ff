//! What a request may cost the NPU, and what it is told it cost, on the
//! runtime test double: usage is the same with and without a thinking
//! budget on every API (and the budget's closing tag counts within
//! `max_tokens`); a rerank is bounded and checked whole before its first
//! judgement runs, its judgements start from one snapshot of the query's
//! part and save none of their own, and `top_n: 0` runs nothing; a file
//! completed keystroke after keystroke keeps one snapshot, not one per
//! keystroke.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, mock_tokenizer, mock_tokenizer_with};

/// The runtime's log.
fn log_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Judgements the double ran: generations in logits mode to their end (a
/// prefill-only run pauses: not one).
fn judgements(log: &str) -> usize {
    log.lines()
        .filter(|l| l.starts_with("logits-end ") && !l.contains("how=pause"))
        .count()
}

/// Runs the double was given at all, of text or of tokens.
fn runs(log: &str) -> usize {
    log.lines()
        .filter(|l| l.starts_with("run role=") || l.starts_with("run-tokens "))
        .count()
}

/// The `.snapshot` files under `root`, in every model's folder.
fn snapshot_files(root: &Path) -> Vec<PathBuf> {
    let Ok(folders) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    folders
        .flat_map(|f| std::fs::read_dir(f.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect()
}

#[tokio::test]
async fn usage_is_the_same_with_and_without_a_thinking_budget_on_every_api() {
    let dir = ScratchDir::new();
    let reply = format!(
        "<think>\n{}\n</think>\n\nThe answer is 42.",
        "think more. ".repeat(600)
    );
    let tokenizer = mock_tokenizer().display().to_string();
    let thinker = dir.0.join("thinker.rkllm");
    std::fs::write(&thinker, format!("@fake-vocab={tokenizer}\n{reply}")).unwrap();
    let config = format!(
        "[[models]]\nname = \"thinker\"\npath = {thinker:?}\ntokenizer = {tokenizer:?}\n\
         chat_template = \"chatml\"\n"
    );
    let log = dir.0.join("fake.log");
    let server = Server::start_on_fake(&config, Fake::V1_3, &log, &[], &[]);
    let question = "what is the answer to everything, in one line?";
    let messages = json!([{"role": "user", "content": question}]);

    // (API, path, body without a budget, the same with one, where the
    // prompt's and the answer's counts are.)
    let cases = [
        (
            "openai",
            "/v1/chat/completions",
            json!({"model": "thinker", "max_tokens": 4000, "messages": messages}),
            json!({"model": "thinker", "max_tokens": 4000, "messages": messages,
                   "reasoning_effort": "low"}),
            ("/usage/prompt_tokens", "/usage/completion_tokens"),
        ),
        (
            "anthropic",
            "/v1/messages",
            json!({"model": "thinker", "max_tokens": 4000, "messages": messages,
                   "thinking": {"type": "enabled"}}),
            json!({"model": "thinker", "max_tokens": 4000, "messages": messages,
                   "thinking": {"type": "enabled", "budget_tokens": 1024}}),
            ("/usage/input_tokens", "/usage/output_tokens"),
        ),
        (
            "ollama",
            "/api/chat",
            json!({"model": "thinker", "stream": false, "think": true, "messages": messages,
                   "options": {"num_predict": 4000}}),
            json!({"model": "thinker", "stream": false, "think": "low", "messages": messages,
                   "options": {"num_predict": 4000}}),
            ("/prompt_eval_count", "/eval_count"),
        ),
        (
            "responses",
            "/v1/responses",
            json!({"model": "thinker", "max_output_tokens": 4000, "input": question}),
            json!({"model": "thinker", "max_output_tokens": 4000, "input": question,
                   "reasoning": {"effort": "low"}}),
            ("/usage/input_tokens", "/usage/output_tokens"),
        ),
    ];
    for (api, path, plain, budgeted, (prompt_at, answer_at)) in cases {
        let without = server.post_json(path, plain).await;
        let with = server.post_json(path, budgeted).await;
        let prompt = without.pointer(prompt_at).and_then(Value::as_u64);
        assert!(prompt.is_some_and(|p| p > 10), "{api}: {without}");
        assert_eq!(
            with.pointer(prompt_at).and_then(Value::as_u64),
            prompt,
            "{api}: the prompt's count with a budget: {with}"
        );
        // The budget cut the thinking short: fewer tokens, still counted.
        let answered = |v: &Value| v.pointer(answer_at).and_then(Value::as_u64).unwrap_or(0);
        assert!(
            answered(&with) > 1024 && answered(&with) < answered(&without),
            "{api}: {} with the budget, {} without",
            answered(&with),
            answered(&without)
        );
    }

    // The closing of a budgeted block counts within `max_tokens`.
    for max_tokens in [1030, 1100] {
        let reply = server
            .post_json(
                "/v1/messages",
                json!({"model": "thinker", "max_tokens": max_tokens, "messages": messages,
                       "thinking": {"type": "enabled", "budget_tokens": 1024}}),
            )
            .await;
        let output = reply["usage"]["output_tokens"].as_u64().unwrap();
        assert!(
            output <= max_tokens,
            "{output} tokens for max_tokens {max_tokens}: {reply}"
        );
        assert!(
            reply["usage"]["input_tokens"].as_u64().unwrap() > 10,
            "{reply}"
        );
    }
}

/// A server with reranker `judge` on the double, its snapshots in
/// `snapshots`, and `[limits]` lines.
fn reranking(dir: &ScratchDir, limits: &str) -> (Server, PathBuf, PathBuf) {
    let tokenizer = dir.0.join("tokenizer.json");
    std::fs::write(
        &tokenizer,
        mock_tokenizer_with(&[("yes", false), ("no", false)]),
    )
    .unwrap();
    let model = dir.0.join("judge.rkllm");
    std::fs::write(&model, format!("@fake-vocab={}\nyes", tokenizer.display())).unwrap();
    let snapshots = dir.0.join("snapshots");
    let log = dir.0.join("fake.log");
    let config = format!(
        "[limits]\n{limits}\n[rkllm]\nsnapshot_dir = {snapshots:?}\n\
         [[models]]\nname = \"judge\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
         reranker = true\nchat_template = \"chatml\"\n"
    );
    let server = Server::start_on_fake(&config, Fake::V1_3, &log, &[], &[]);
    (server, log, snapshots)
}

/// A rerank's (status, body).
async fn rerank(server: &Server, body: Value) -> (u16, Value) {
    let response = server
        .send(reqwest::Method::POST, "/v1/rerank", Some(body), None)
        .await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn a_rerank_is_bounded_and_checked_whole_before_its_first_judgement() {
    let dir = ScratchDir::new();
    let (server, log, snapshots) =
        reranking(&dir, "max_prompt_bytes = 4096\nmax_rerank_tokens = 2048");
    let query = "What NPU does the RK3588 have?";
    let short = [
        "Bread rises with yeast.",
        "The RK3588 has a 6 TOPS NPU.",
        "Rock 5B.",
    ];

    // Three judgements: one snapshot, of the query's part, saved once;
    // every judgement starts from it and saves none of its own.
    let (status, body) = rerank(
        &server,
        json!({"model": "judge", "query": query, "documents": short}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"].as_array().unwrap().len(), 3, "{body}");
    let after_first = log_of(&log);
    assert_eq!(judgements(&after_first), 3, "{after_first}");
    let files = snapshot_files(&snapshots);
    assert_eq!(
        files.len(),
        1,
        "one snapshot, of the query's part: {files:?}"
    );
    let cached: Vec<usize> = after_first
        .lines()
        .filter_map(|l| l.strip_prefix("run-cached bytes="))
        .filter_map(|b| b.parse().ok())
        .collect();
    let question = rkllm_server::model::rerank::judgement(
        rkllm_server::model::rerank::DEFAULT_INSTRUCTION,
        query,
        short[0],
    )
    .text
    .find("<Document>: ")
    .unwrap();
    assert!(
        cached.iter().filter(|&&c| c >= question).count() >= 3,
        "every judgement starts from the query's part ({question} bytes): {cached:?}"
    );

    // A document over the prompt's bound, last: refused before any runs.
    let mut documents: Vec<String> = short.iter().map(|d| (*d).to_owned()).collect();
    documents.push("x ".repeat(3000));
    let before = runs(&log_of(&log));
    let (status, body) = rerank(
        &server,
        json!({"model": "judge", "query": query, "documents": documents}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("documents[3]"), "{body}");
    assert_eq!(
        runs(&log_of(&log)),
        before,
        "nothing ran before the refusal"
    );

    // Judgements over `max_rerank_tokens` together: refused naming it,
    // before any runs.
    let many: Vec<String> = (0..12).map(|i| format!("Document {i} of many.")).collect();
    let (status, body) = rerank(
        &server,
        json!({"model": "judge", "query": query, "documents": many}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("limits.max_rerank_tokens"), "{body}");
    assert_eq!(
        runs(&log_of(&log)),
        before,
        "nothing ran before the refusal"
    );

    // `top_n: 0`: an empty answer, and no work.
    let (status, body) = rerank(
        &server,
        json!({"model": "judge", "query": query, "documents": short, "top_n": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"], json!([]), "{body}");
    assert_eq!(runs(&log_of(&log)), before, "top_n 0 ran nothing");
}

#[tokio::test]
async fn a_file_completed_keystroke_after_keystroke_keeps_one_snapshot() {
    let dir = ScratchDir::new();
    let tokenizer = dir.0.join("tokenizer.json");
    std::fs::write(
        &tokenizer,
        mock_tokenizer_with(&[
            ("<|fim_prefix|>", true),
            ("<|fim_suffix|>", true),
            ("<|fim_middle|>", true),
        ]),
    )
    .unwrap();
    let model = dir.0.join("coder.rkllm");
    std::fs::write(&model, "return a + b").unwrap();
    let snapshots = dir.0.join("snapshots");
    let log = dir.0.join("fake.log");
    let config = format!(
        "[rkllm]\nsnapshot_dir = {snapshots:?}\n\
         [[models]]\nname = \"coder\"\npath = {model:?}\ntokenizer = {tokenizer:?}\n\
         chat_template = \"chatml\"\n"
    );
    let server = Server::start_on_fake(
        &config,
        Fake::V1_3,
        &log,
        &[],
        &[("FAKE_RKLLM_PREFILL_US_PER_BYTE", "1")],
    );
    let mut prefix = format!(
        "{}def add(a, b):\n    ",
        "# helpers for the board's scripts\nimport os\n".repeat(20)
    );
    let suffix = "\n\nprint(add(1, 2))\n";
    for key in "return a + b # the sum, as written here".chars().take(32) {
        prefix.push(key);
        let reply = server
            .post_json(
                "/v1/completions",
                json!({"model": "coder", "prompt": prefix, "suffix": suffix, "max_tokens": 8}),
            )
            .await;
        assert!(reply["choices"][0]["text"].is_string(), "{reply}");
    }
    let files = snapshot_files(&snapshots);
    assert_eq!(files.len(), 1, "one snapshot for the file: {files:?}");
    // Each keystroke started from the one before: the file up to the cursor.
    let cached: Vec<usize> = log_of(&log)
        .lines()
        .filter_map(|l| l.strip_prefix("run-cached bytes="))
        .filter_map(|b| b.parse().ok())
        .collect();
    assert!(
        cached.len() >= 31 && cached.iter().all(|&c| c >= 20 * 40),
        "every keystroke after the first starts from the file's snapshot: {cached:?}"
    );
}
