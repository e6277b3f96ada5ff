//! How the runs of a constrained answer go on the double: an abort stops
//! the runtime and leaves nothing paused for the next request, the token
//! cap cuts the answer (`length`), a stop string ends it, both runner
//! kinds load the tokenizer once, a tokenizer that does not fit the
//! model's logits rows fails the request naming it, and the runtime calls
//! per generated token (printed; `--nocapture` shows them).

use serde_json::{Value, json};

use super::{
    ABIS, CHAT, Npu, Runs, Setup, check_call, check_pet, parse, pet_schema, runs_in, weather_tools,
};
use crate::harness::{Fake, Ws};

fn story_schema() -> Value {
    json!({"type": "object", "properties": {"story": {"type": "string"}},
           "required": ["story"], "additionalProperties": false})
}

#[tokio::test]
async fn an_abort_mid_answer_stops_the_runtime_and_the_next_request_starts_clean() {
    // A model that wants to tell a long story without a quote: the string
    // grows by its own picks, a token every 20 ms.
    let story = "word ".repeat(2000);
    for (fake, abi) in ABIS {
        let mut setup = Setup::new(fake);
        setup.text = &story;
        setup.env = &[("FAKE_RKLLM_TOKEN_MS", "20")];
        let npu = Npu::start(&setup);
        let server = &npu.server;
        let mut ws = Ws::connect(server).await;
        let (stream_id, mut notes) = ws
            .start_stream(json!({"model": "npu", "prompt": "Tell a story.",
                                 "format": story_schema(), "max_tokens": 4000}))
            .await;
        // Some of the answer has come: it is well inside the string.
        let mut text = String::new();
        while !text.contains("word word") {
            let note = if notes.is_empty() {
                ws.recv().await
            } else {
                notes.remove(0)
            };
            text.push_str(note["params"]["delta"].as_str().unwrap_or_default());
            assert_ne!(
                note["params"]["end"],
                json!(true),
                "ABI {abi}: ended early: {note}"
            );
        }
        let before = npu.log().len();
        let id = ws.request("abort", json!({"stream_id": stream_id})).await;
        let mut rest = Vec::new();
        let answer = ws.response(id, &mut rest).await;
        assert_eq!(
            answer["result"],
            json!({"aborted": true}),
            "ABI {abi}: {answer}"
        );
        ws.close().await;
        // The runtime's run was aborted, and the pause it may have left
        // was cleared.
        let since = npu.log_until(before, &["clear-kv"]).await;
        let aborted_running = since
            .lines()
            .any(|l| l.starts_with("abort running=1") || l.contains("how=abort"));
        // Or the abort came between two steps, the run paused (as under an
        // emulator, where a step is slow): the pause was cleared.
        let pause_cleared = since.lines().any(|l| l.contains("how=pause"))
            && since
                .lines()
                .any(|l| l.starts_with("clear-kv") && l.contains("paused=1"));
        assert!(aborted_running || pause_cleared, "ABI {abi}: {since}");
        // The next request, free text, gets its own answer.
        let free = server
            .ok(
                "run",
                json!({"model": "npu", "prompt": "again", "max_tokens": 8}),
            )
            .await;
        assert!(
            free["text"]
                .as_str()
                .unwrap_or_default()
                .starts_with("word word"),
            "ABI {abi}: {free}"
        );
        let log = npu.log();
        assert!(!log.contains("run-continues-paused"), "ABI {abi}: {log}");
    }
}

#[tokio::test]
async fn the_token_cap_cuts_a_constrained_answer_with_length_and_a_stop_string_ends_it() {
    for (fake, abi) in ABIS {
        let npu = Npu::start(&Setup::new(fake));
        let server = &npu.server;
        let at = format!("ABI {abi}, max_tokens");
        let whole = server
            .post_json(
                "/v1/chat/completions",
                json!({"model": "npu", "messages": [{"role": "user", "content": "A pet?"}],
                       "response_format": {"type": "json_schema",
                                           "json_schema": {"name": "pet", "schema": pet_schema()}},
                       "max_tokens": 7}),
            )
            .await;
        assert_eq!(
            whole["choices"][0]["finish_reason"], "length",
            "{at}: {whole}"
        );
        assert_eq!(whole["usage"]["completion_tokens"], 7, "{at}: {whole}");
        let content = whole["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        assert!(content.starts_with("{\"name\": \""), "{at}: {whole}");

        let at = format!("ABI {abi}, stop string");
        let before = npu.log().len();
        let run = server
            .ok(
                "run",
                json!({"model": "npu", "prompt": "A pet?", "format": pet_schema(),
                       "stop": ["\"kind\""]}),
            )
            .await;
        let text = run["text"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("{\"name\": \"") && text.ends_with(", "),
            "{at}: {run}"
        );
        assert!(!text.contains("kind"), "{at}: {run}");
        assert_eq!(run["finish_reason"], "stop", "{at}: {run}");
        npu.log_until(before, &["clear-kv"]).await;
    }
}

#[tokio::test]
async fn both_runner_kinds_hold_the_answer_and_load_the_tokenizer_once() {
    // The last: callbacks from a runtime thread, not the caller's.
    for (runner, callback_thread) in [("process", "0"), ("thread", "0"), ("thread", "1")] {
        let config = format!("[rkllm]\nrunner = {runner:?}\n");
        let env = [("FAKE_RKLLM_CALLBACK_THREAD", callback_thread)];
        let mut setup = Setup::new(Fake::V1_3);
        setup.config = &config;
        setup.env = &env;
        let npu = Npu::start(&setup);
        for round in 0..3 {
            let at = format!("runner {runner}, round {round}");
            let run = npu
                .server
                .ok(
                    "run",
                    json!({"model": "npu", "prompt": "A pet?", "format": pet_schema()}),
                )
                .await;
            check_pet(&parse(run["text"].as_str().unwrap_or_default(), &at), &at);
        }
        let loaded = npu
            .server
            .log()
            .iter()
            .filter(|l| l.contains("tokenizer loaded for structured output"))
            .count();
        assert_eq!(loaded, 1, "runner {runner}: {:?}", npu.server.log());
    }
}

#[tokio::test]
async fn a_picture_and_a_format_go_together_on_both_abis() {
    use crate::vision::{ENCODER, b64, solid};
    for (fake, abi) in ABIS {
        let scratch = crate::harness::ScratchDir::new();
        let encoder = scratch.0.join("vl-vision.rknn");
        std::fs::write(&encoder, ENCODER).unwrap();
        let entry = format!("vision_encoder = {encoder:?}\n");
        let mut setup = Setup::new(fake);
        setup.name = "vl";
        setup.entry = &entry;
        setup.env = &[("FAKE_RKLLM_EMBED_DIM", "12")];
        let npu = Npu::start(&setup);
        let red = solid([255, 0, 0], image::ImageFormat::Png);
        let at = format!("ABI {abi}");
        let run = npu
            .server
            .ok(
                "run",
                json!({"model": "vl", "prompt": "What pet is this?",
                       "images": [b64(&red)], "format": pet_schema()}),
            )
            .await;
        check_pet(&parse(run["text"].as_str().unwrap_or_default(), &at), &at);
        // The picture went in with the prompt, in the first (logits) run.
        let log = npu.log();
        let first = log
            .lines()
            .position(|l| l.starts_with("multimodal n_image=1"))
            .unwrap_or_else(|| panic!("{at}: no multimodal input: {log}"));
        assert!(
            log.lines()
                .skip(first)
                .any(|l| l.starts_with("logits-run input=prompt")),
            "{at}: {log}"
        );
    }
}

#[tokio::test]
async fn a_tokenizer_that_does_not_fit_the_models_logits_fails_the_request_naming_it() {
    // The double's rows hold 100 ids; the tokenizer has 308.
    let mut setup = Setup::new(Fake::V1_3);
    setup.name = "narrow";
    setup.head = "@fake-logits-width=100\n";
    let npu = Npu::start(&setup);
    for round in 0..2 {
        let response = npu
            .server
            .call(
                "run",
                json!({"model": "narrow", "prompt": "A pet?", "format": pet_schema()}),
            )
            .await;
        let message = response["error"]["message"].as_str().unwrap_or_else(|| {
            panic!("round {round}: a tokenizer that does not fit must fail: {response}")
        });
        for needed in ["`narrow`", "tokenizer", "mock-tokenizer.json", "100", "308"] {
            assert!(
                message.contains(needed),
                "round {round}: {needed} in {message}"
            );
        }
    }
    // Found once on the first row; the second request did not run.
    let runs = runs_in(&npu.log());
    assert_eq!(runs.runs, 1, "{}", npu.log());
    // Free text is not affected.
    let free = npu
        .server
        .ok(
            "run",
            json!({"model": "narrow", "prompt": "hi", "max_tokens": 4}),
        )
        .await;
    assert!(
        free["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Sure"),
        "{free}"
    );

    // A row padded past the tokenizer (as Qwen's are) is fine: its extra
    // ids are never taken.
    let mut setup = Setup::new(Fake::V1_2);
    setup.head = "@fake-logits-width=400\n";
    let npu = Npu::start(&setup);
    let run = npu
        .server
        .ok(
            "run",
            json!({"model": "npu", "prompt": "A pet?", "format": pet_schema()}),
        )
        .await;
    check_pet(
        &parse(run["text"].as_str().unwrap_or_default(), "padded"),
        "padded",
    );
}

/// Runs a constrained request `count` times; the double's counts and the
/// tokens generated.
async fn measure(npu: &Npu, body: &Value, count: usize) -> (Runs, u64) {
    let before = npu.log().len();
    let mut tokens = 0;
    for _ in 0..count {
        let whole = npu
            .server
            .post_json("/v1/chat/completions", body.clone())
            .await;
        let choice = &whole["choices"][0];
        match choice["message"]["tool_calls"].get(0) {
            Some(call) => check_call(
                call["function"]["name"].as_str().unwrap_or_default(),
                call["function"]["arguments"].as_str().unwrap_or_default(),
                "measure",
            ),
            None => {
                let content = choice["message"]["content"].as_str().unwrap_or_default();
                assert!(parse(content, "measure").is_object(), "{whole}");
            }
        }
        tokens += whole["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    }
    let log = npu.log_until(before, &["clear-kv"]).await;
    (runs_in(&log), tokens)
}

#[tokio::test]
async fn runtime_calls_per_generated_token_on_the_double() {
    let many = json!({"model": "npu", "messages": [{"role": "user", "content": "Weather?"}],
                      "tools": weather_tools(),
                      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}});
    let few = json!({"model": "npu", "messages": [{"role": "user", "content": "Any object."}],
                     "response_format": {"type": "json_object"}});
    let mut ratios = Vec::new();
    for (scheme, env) in [
        ("runtime picks stand", &[][..]),
        (
            "runner picks every token",
            &[("FAKE_RKLLM_LOGITS_PICK", "none")][..],
        ),
    ] {
        let mut setup = Setup::new(Fake::V1_3);
        setup.text = CHAT;
        setup.env = env;
        let npu = Npu::start(&setup);
        for (label, body) in [
            ("forced tool call (many forced)", &many),
            ("json_object (few forced)", &few),
        ] {
            let (runs, tokens) = measure(&npu, body, 5).await;
            let ratio = runs.runs as f64 / tokens.max(1) as f64;
            eprintln!(
                "runtime calls per token on the double, {scheme}, {label}: {} rkllm_run / {tokens} \
                 tokens = {ratio:.2}; decode steps and prefills {} ({:.2} per token), tokens fed {}, \
                 logits rows {}",
                runs.runs,
                runs.steps,
                runs.steps as f64 / tokens.max(1) as f64,
                runs.fed,
                runs.rows
            );
            assert!(tokens > 0 && runs.runs > 0);
            ratios.push(ratio);
        }
    }
    // Feeding forced tokens in one go keeps even the runner-picked scheme
    // under one run per token; letting the runtime's picks stand costs
    // fewer runs still.
    assert!(ratios.iter().all(|&r| r < 1.0), "{ratios:?}");
    assert!(ratios[0] < ratios[2] && ratios[1] < ratios[3], "{ratios:?}");
}
