//! Every API's structured output on the double, both ABIs, streamed and
//! not: the reply parses and fits its schema; a forced call names an
//! offered tool and its arguments fit that tool's schema; a reasoning
//! model thinks freely first, in both shapes.

use serde_json::{Value, json};

use super::{
    ABIS, Npu, Setup, THINKING, check_call, check_pet, ndjson, parse, pet_schema, runs_in, sse,
    weather_tools,
};
use crate::harness::{Server, Ws, check_chunks};

/// An OpenAI chat stream's content, finish reason and (joined) tool calls.
struct Streamed {
    thinking: String,
    content: String,
    finish_reason: Option<String>,
    calls: Vec<(String, String)>,
}

fn read_stream(events: &[Value]) -> Streamed {
    let mut out = Streamed {
        thinking: String::new(),
        content: String::new(),
        finish_reason: None,
        calls: Vec::new(),
    };
    for event in events {
        let Some(choice) = event["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(thinking) = delta["reasoning_content"].as_str() {
            assert!(out.content.is_empty(), "thinking after the answer: {event}");
            out.thinking.push_str(thinking);
        }
        out.content
            .push_str(delta["content"].as_str().unwrap_or_default());
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().expect("a call's index") as usize;
            if index == out.calls.len() {
                let name = call["function"]["name"]
                    .as_str()
                    .expect("a new call's name");
                out.calls.push((name.to_owned(), String::new()));
            }
            let fragment = call["function"]["arguments"].as_str().unwrap_or_default();
            out.calls[index].1.push_str(fragment);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            out.finish_reason = Some(reason.to_owned());
        }
    }
    out
}

fn chat(model: &str, content: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": content}]});
    for (key, value) in extra.as_object().expect("an object") {
        body[key] = value.clone();
    }
    body
}

fn schema_format() -> Value {
    json!({"type": "json_schema",
           "json_schema": {"name": "pet", "schema": pet_schema(), "strict": true}})
}

/// A JSON-RPC `run` streamed over WebSocket push; its text.
async fn pushed_text(server: &Server, params: Value) -> (String, Value) {
    let mut ws = Ws::connect(server).await;
    let (stream_id, notes) = ws.start_stream(params).await;
    let chunks = ws.chunks_to_end(&stream_id, notes).await;
    ws.close().await;
    let text = check_chunks(&chunks);
    (text, chunks.last().cloned().unwrap_or_default())
}

#[tokio::test]
async fn json_objects_and_schemas_parse_and_fit_on_every_api_on_both_abis() {
    for (fake, abi) in ABIS {
        let npu = Npu::start(&Setup::new(fake));
        let server = &npu.server;
        let ask = "Describe a pet.";

        let at = format!("ABI {abi}, OpenAI json_object");
        let whole = server
            .post_json(
                "/v1/chat/completions",
                chat(
                    "npu",
                    ask,
                    json!({"response_format": {"type": "json_object"}}),
                ),
            )
            .await;
        let content = whole["choices"][0]["message"]["content"].as_str();
        assert!(
            parse(content.unwrap_or_default(), &at).is_object(),
            "{at}: {whole}"
        );
        assert_eq!(
            whole["choices"][0]["finish_reason"], "stop",
            "{at}: {whole}"
        );

        let at = format!("ABI {abi}, OpenAI json_schema");
        let whole = server
            .post_json(
                "/v1/chat/completions",
                chat("npu", ask, json!({"response_format": schema_format()})),
            )
            .await;
        let content = whole["choices"][0]["message"]["content"].as_str();
        check_pet(&parse(content.unwrap_or_default(), &at), &at);
        assert_eq!(
            whole["choices"][0]["finish_reason"], "stop",
            "{at}: {whole}"
        );
        let completion = whole["usage"]["completion_tokens"].as_u64().unwrap();
        assert!(completion > 10, "{at}: {whole}");

        let at = format!("ABI {abi}, OpenAI json_schema streamed");
        let events = sse(
            server,
            "/v1/chat/completions",
            chat(
                "npu",
                ask,
                json!({"response_format": schema_format(), "stream": true}),
            ),
        )
        .await;
        let streamed = read_stream(&events);
        check_pet(&parse(&streamed.content, &at), &at);
        assert_eq!(streamed.finish_reason.as_deref(), Some("stop"), "{at}");
        let pieces = events
            .iter()
            .filter(|e| e["choices"][0]["delta"]["content"].is_string())
            .count();
        assert!(
            pieces > 3,
            "{at}: the answer streams as it is made: {events:?}"
        );

        let at = format!("ABI {abi}, Ollama chat format schema");
        let reply = server
            .post_json(
                "/api/chat",
                chat("npu", ask, json!({"format": pet_schema(), "stream": false})),
            )
            .await;
        check_pet(
            &parse(
                reply["message"]["content"].as_str().unwrap_or_default(),
                &at,
            ),
            &at,
        );
        assert_eq!(reply["done_reason"], "stop", "{at}: {reply}");

        let at = format!("ABI {abi}, Ollama chat format json streamed");
        let lines = ndjson(
            server,
            "/api/chat",
            chat("npu", ask, json!({"format": "json"})),
        )
        .await;
        let content: String = lines
            .iter()
            .filter_map(|l| l["message"]["content"].as_str())
            .collect();
        assert!(parse(&content, &at).is_object(), "{at}: {lines:?}");

        let at = format!("ABI {abi}, Ollama generate format schema streamed");
        let lines = ndjson(
            server,
            "/api/generate",
            json!({"model": "npu", "prompt": ask, "format": pet_schema()}),
        )
        .await;
        let response: String = lines
            .iter()
            .filter_map(|l| l["response"].as_str())
            .collect();
        check_pet(&parse(&response, &at), &at);

        let at = format!("ABI {abi}, JSON-RPC run format");
        let params = json!({"model": "npu", "prompt": ask, "format": pet_schema()});
        let run = server.ok("run", params.clone()).await;
        check_pet(&parse(run["text"].as_str().unwrap_or_default(), &at), &at);
        assert_eq!(run["finish_reason"], "stop", "{at}: {run}");

        let at = format!("ABI {abi}, JSON-RPC run format pushed");
        let (text, end) = pushed_text(server, params).await;
        check_pet(&parse(&text, &at), &at);
        assert_eq!(end["finish_reason"], "stop", "{at}: {end}");

        let at = format!("ABI {abi}, JSON-RPC run format json");
        let run = server
            .ok(
                "run",
                json!({"model": "npu", "prompt": ask, "format": "json"}),
            )
            .await;
        assert!(parse(run["text"].as_str().unwrap_or_default(), &at).is_object());

        // Both paths ran: runtime picks that stood (more rows than runs)
        // and corrections fed back (runs after the first of a generation).
        let log = npu.log();
        let runs = runs_in(&log);
        assert!(runs.feeds > 0, "ABI {abi}: no correction was fed: {runs:?}");
        assert!(runs.steps > runs.runs, "ABI {abi}: no pick stood: {runs:?}");
        assert!(!log.contains("run-continues-paused"), "ABI {abi}: {log}");
        // Each generation cleared what its pauses left.
        let prompts = log
            .lines()
            .filter(|l| l.starts_with("logits-run input=prompt"))
            .count();
        let clears = log.lines().filter(|l| l.starts_with("clear-kv")).count();
        assert!(
            prompts >= 9 && clears >= prompts,
            "ABI {abi}: {prompts} {clears}"
        );
    }
}

#[tokio::test]
async fn a_forced_tool_call_names_an_offered_tool_and_its_arguments_fit_on_both_abis() {
    for (fake, abi) in ABIS {
        let npu = Npu::start(&Setup::new(fake));
        let server = &npu.server;
        let ask = "What is the weather in Paris?";
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        for (choice, stream) in [
            (named.clone(), false),
            (json!("required"), false),
            (named, true),
            (json!("required"), true),
        ] {
            let at = format!("ABI {abi}, tool_choice {choice}, stream {stream}");
            let body = chat(
                "npu",
                ask,
                json!({"tools": weather_tools(), "tool_choice": choice, "stream": stream}),
            );
            let (calls, reason) = if stream {
                let streamed = read_stream(&sse(server, "/v1/chat/completions", body).await);
                assert_eq!(streamed.content, "", "{at}");
                (streamed.calls, streamed.finish_reason)
            } else {
                let whole = server.post_json("/v1/chat/completions", body).await;
                let message = &whole["choices"][0]["message"];
                let calls = message["tool_calls"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{at}: no tool call: {whole}"))
                    .iter()
                    .map(|c| {
                        (
                            c["function"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                            c["function"]["arguments"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                        )
                    })
                    .collect();
                let reason = whole["choices"][0]["finish_reason"]
                    .as_str()
                    .map(str::to_owned);
                (calls, reason)
            };
            assert_eq!(calls.len(), 1, "{at}: {calls:?}");
            let (name, arguments) = &calls[0];
            if choice.is_object() {
                assert_eq!(name, "get_weather", "{at}");
            }
            check_call(name, arguments, &at);
            assert_eq!(reason.as_deref(), Some("tool_calls"), "{at}");
        }
        assert!(npu.log().contains("set-function-tools"), "ABI {abi}");
    }
}

/// One reasoning model's thinking, then its answer in the schema, through
/// OpenAI whole and streamed and JSON-RPC, thinking switched on and off.
async fn check_thinking(server: &Server, model: &str, marker: &str, at: &str) {
    let ask = format!("Describe a pet. {marker}");
    let whole = server
        .post_json(
            "/v1/chat/completions",
            chat(
                model,
                &ask,
                json!({"response_format": schema_format(), "reasoning_effort": "high"}),
            ),
        )
        .await;
    let message = &whole["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], THINKING, "{at}: {whole}");
    check_pet(
        &parse(message["content"].as_str().unwrap_or_default(), at),
        at,
    );
    let reasoning = &whole["usage"]["completion_tokens_details"]["reasoning_tokens"];
    assert!(reasoning.as_u64().unwrap_or(0) > 0, "{at}: {whole}");

    let events = sse(
        server,
        "/v1/chat/completions",
        chat(
            model,
            &ask,
            json!({"response_format": schema_format(), "stream": true,
                   "chat_template_kwargs": {"enable_thinking": true}}),
        ),
    )
    .await;
    let streamed = read_stream(&events);
    assert_eq!(streamed.thinking, THINKING, "{at}: {events:?}");
    check_pet(&parse(&streamed.content, at), at);

    let off = server
        .post_json(
            "/v1/chat/completions",
            chat(
                model,
                &ask,
                json!({"response_format": schema_format(), "reasoning_effort": "none"}),
            ),
        )
        .await;
    let message = &off["choices"][0]["message"];
    assert!(
        message["reasoning_content"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{at}: {off}"
    );
    check_pet(
        &parse(message["content"].as_str().unwrap_or_default(), at),
        at,
    );

    let run = server
        .ok(
            "run",
            json!({"model": model, "prompt": ask, "format": pet_schema(), "enable_thinking": true}),
        )
        .await;
    assert_eq!(run["thinking"], THINKING, "{at}: {run}");
    check_pet(&parse(run["text"].as_str().unwrap_or_default(), at), at);
}

#[tokio::test]
async fn a_reasoning_model_thinks_freely_then_answers_in_the_schema_in_both_shapes() {
    for (fake, abi) in ABIS {
        // Qwen3's shape: the reply opens the block.
        let mut setup = Setup::new(fake);
        setup.name = "qwen3-npu";
        let npu = Npu::start(&setup);
        check_thinking(
            &npu.server,
            "qwen3-npu",
            "@fake-think=1",
            &format!("ABI {abi}, qwen3"),
        )
        .await;
        // The thinking's own picks stood: none of it was fed back.
        let log = npu.log();
        assert!(log.contains("think=1 enable_thinking=1"), "{log}");
        drop(npu);
        // DeepSeek-R1's: the template opened it.
        let mut setup = Setup::new(fake);
        setup.name = "deepseek-r1-distill-qwen-npu";
        let npu = Npu::start(&setup);
        check_thinking(
            &npu.server,
            "deepseek-r1-distill-qwen-npu",
            "@fake-think=2",
            &format!("ABI {abi}, r1"),
        )
        .await;
    }
}
