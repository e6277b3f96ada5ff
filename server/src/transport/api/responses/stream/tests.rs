//! Tests of `stream.rs`.

use super::*;
use crate::vocab::{EndError, EndErrorKind};

fn ending(finish: Finish) -> Ending {
    Ending {
        finish,
        usage: Usage {
            prompt_tokens: 5,
            completion_tokens: 7,
            reasoning_tokens: 2,
        },
        timings: None,
        error: None,
        expired: false,
        stop_sequence: None,
    }
}

fn events(batches: &[Batch]) -> (Output, Vec<Value>) {
    let mut output = Output::new("resp_abc".into(), Map::new(), true);
    let mut frames = Vec::new();
    output.start(&mut frames);
    for batch in batches {
        output.batch(batch, &mut frames);
    }
    let values = frames
        .iter()
        .map(|f| {
            let v: Value = serde_json::from_str(&f.data).unwrap();
            assert_eq!(v["type"], f.kind);
            v
        })
        .collect();
    (output, values)
}

fn batch(events: Vec<Event>, end: Option<Ending>) -> Batch {
    Batch {
        events,
        produced_ns: None,
        tokens: 0,
        end,
        logprobs: Vec::new(),
    }
}

fn kinds(values: &[Value]) -> Vec<&str> {
    values.iter().map(|v| v["type"].as_str().unwrap()).collect()
}

#[test]
fn thinking_text_and_a_call_make_three_items_in_order() {
    let call = ToolCall {
        id: "call_1".into(),
        name: "f".into(),
        arguments: "{\"a\":1}".into(),
    };
    let (output, values) = events(&[
        batch(
            vec![
                Event::Thinking("hm".into()),
                Event::Thinking("m".into()),
                Event::Text("Hi".into()),
            ],
            None,
        ),
        batch(
            vec![
                Event::Text("\n".into()),
                Event::CallStart {
                    index: 0,
                    id: "call_1".into(),
                    name: "f".into(),
                },
                Event::CallArguments {
                    index: 0,
                    fragment: "{\"a\":".into(),
                },
                Event::CallArguments {
                    index: 0,
                    fragment: "1}".into(),
                },
                Event::CallEnd(0, call.clone()),
                Event::Text("\n".into()),
            ],
            Some(ending(Finish::ToolCalls)),
        ),
    ]);
    assert_eq!(
        kinds(&values),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (n, v) in values.iter().enumerate() {
        assert_eq!(v["sequence_number"], n as u64);
    }
    let done: Vec<&Value> = values
        .iter()
        .filter(|v| v["type"] == "response.output_item.done")
        .map(|v| &v["item"])
        .collect();
    let completed = values.last().unwrap();
    assert_eq!(completed["response"]["status"], "completed");
    let output_items: Vec<&Value> = completed["response"]["output"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(output_items, done);
    assert_eq!(
        done[0]["content"],
        json!([{"type": "reasoning_text", "text": "hmm"}])
    );
    assert_eq!(done[1]["content"][0]["text"], "Hi\n");
    assert_eq!(done[2]["arguments"], "{\"a\":1}");
    assert_eq!(done[2]["call_id"], "call_1");
    // Indexes: each item's events carry its position in `output`.
    for v in &values {
        if let Some(index) = v.get("output_index").and_then(Value::as_u64) {
            let id = &output_items[index as usize]["id"];
            let named = v.get("item_id").or_else(|| v.get("item").map(|i| &i["id"]));
            assert_eq!(named, Some(id), "{v}");
        }
        if v.get("content_index").is_some() {
            assert_eq!(v["content_index"], 0, "{v}");
        }
    }
    assert_eq!(
        completed["response"]["usage"],
        json!({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
               "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 12})
    );
    let turn = output.assistant_turn();
    assert_eq!(turn.parts, vec![Part::Text("Hi\n".into())]);
    assert_eq!(turn.tool_calls, vec![call]);
}

#[test]
fn the_token_limit_is_incomplete_and_a_failure_failed() {
    let (_, values) = events(&[batch(
        vec![Event::Text("cut".into())],
        Some(ending(Finish::Length)),
    )]);
    let last = values.last().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(
        last["response"]["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(last["response"]["output"][0]["status"], "incomplete");

    let mut failed = ending(Finish::Error);
    failed.error = Some(EndError {
        kind: EndErrorKind::Internal,
        message: "runtime failed".into(),
    });
    let (_, values) = events(&[batch(vec![Event::Text("x".into())], Some(failed))]);
    let last = values.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(
        last["response"]["error"],
        json!({"code": "server_error", "message": "runtime failed"})
    );
}

#[test]
fn an_empty_answer_is_one_empty_message_and_whitespace_alone_opens_none_before_calls() {
    let (_, values) = events(&[batch(vec![], Some(ending(Finish::Stop)))]);
    let output = &values.last().unwrap()["response"]["output"];
    assert_eq!(output.as_array().unwrap().len(), 1);
    assert_eq!(output[0]["content"][0]["text"], "");

    let call = ToolCall {
        id: "c".into(),
        name: "f".into(),
        arguments: "{}".into(),
    };
    let (_, values) = events(&[batch(
        vec![
            Event::Text("  \n".into()),
            Event::CallStart {
                index: 0,
                id: "c".into(),
                name: "f".into(),
            },
            Event::CallEnd(0, call),
            Event::Text("\n".into()),
        ],
        Some(ending(Finish::ToolCalls)),
    )]);
    let output = &values.last().unwrap()["response"]["output"];
    assert_eq!(output.as_array().unwrap().len(), 1);
    assert_eq!(output[0]["type"], "function_call");
}

#[test]
fn without_emit_no_events_are_made_and_the_response_is_the_same() {
    let mut output = Output::new("resp_x".into(), Map::new(), false);
    let mut frames = Vec::new();
    output.start(&mut frames);
    output.batch(
        &batch(
            vec![Event::Text("hello".into())],
            Some(ending(Finish::Stop)),
        ),
        &mut frames,
    );
    assert!(frames.is_empty());
    let whole = output.finished(&ending(Finish::Stop));
    assert_eq!(whole["status"], "completed");
    assert_eq!(whole["output"][0]["content"][0]["text"], "hello");
    assert_eq!(whole["id"], "resp_x");
    assert_eq!(whole["object"], "response");
}
