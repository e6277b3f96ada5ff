//! Tests of `wire.rs`.

use super::*;
use crate::service::OutputFormat;

fn translate(body: Value) -> Result<Translated, ServiceError> {
    let request: Request = crate::service::parse_body(body.to_string().as_bytes())?;
    request.translate()
}

#[test]
fn items_become_turns_with_calls_merged_and_reasoning_left_out() {
    let t = translate(json!({"input": [
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "id": "x", "content": [
            {"type": "input_text", "text": "weather?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
        {"type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "status": "completed", "call_id": "call_1",
         "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call", "call_id": "call_2", "name": "time", "arguments": "{}"},
        {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "21 C"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "noon"}]}
    ]}))
    .unwrap();
    let speakers: Vec<Speaker> = t.input.iter().map(|m| m.speaker).collect();
    assert_eq!(
        speakers,
        [
            Speaker::System,
            Speaker::User,
            Speaker::Assistant,
            Speaker::Tool,
            Speaker::Tool
        ]
    );
    assert_eq!(t.input[1].images().count(), 1);
    let assistant = &t.input[2];
    assert_eq!(assistant.parts, vec![Part::Text("Let me look.".into())]);
    let ids: Vec<&str> = assistant.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2"]);
    assert_eq!(assistant.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
    assert_eq!(t.input[4].rendered(), "noon");
    // A string is one user message.
    let t = translate(json!({"input": "hi", "instructions": "be kind"})).unwrap();
    let (sent, kept) = t.conversation(&[Message::text(Speaker::User, "before")]);
    assert_eq!(
        sent,
        vec![
            Message::text(Speaker::System, "be kind"),
            Message::text(Speaker::User, "before"),
            Message::text(Speaker::User, "hi")
        ]
    );
    assert_eq!(kept, sent[1..].to_vec());
}

#[test]
fn bad_items_and_options_are_refused_naming_their_field() {
    for (body, field) in [
        (json!({"input": [{"type": "computer_call"}]}), "input[0]"),
        (
            json!({"input": [{"type": "item_reference", "id": "a"}]}),
            "input[0]",
        ),
        (json!({"input": ["x"]}), "input[0]"),
        (
            json!({"input": [{"role": "user", "content": "a"}, {"type": "web_search_call"}]}),
            "input[1]",
        ),
        (
            json!({"input": [{"role": "robot", "content": "x"}]}),
            "input[0].role",
        ),
        (
            json!({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}),
            "input[0].arguments",
        ),
        (
            json!({"input": [{"type": "function_call_output", "output": "x"}]}),
            "input[0].call_id",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0]",
        ),
        (json!({"input": 5}), "input"),
        (
            json!({"input": "x", "tools": [{"type": "function"}]}),
            "tools[0]",
        ),
        (json!({"input": "x", "tool_choice": 5}), "tool_choice"),
        (
            json!({"input": "x", "tool_choice": {"type": "allowed_tools"}}),
            "tool_choice",
        ),
        (
            json!({"input": "x", "reasoning": {"effort": "huge"}}),
            "reasoning.effort",
        ),
        (
            json!({"input": "x", "text": {"format": {"type": "yaml"}}}),
            "text.format",
        ),
        (
            json!({"input": "x", "conversation": "conv_1"}),
            "conversation",
        ),
        (json!({"input": "x", "background": true}), "background"),
        (json!({"input": "x", "prompt": {"id": "pmpt_1"}}), "prompt"),
        (json!({"input": "x", "truncation": "middle"}), "truncation"),
        (json!({"input": "x", "store": "yes"}), "store"),
        (
            json!({"input": "x", "max_output_tokens": "many"}),
            "max_output_tokens",
        ),
        (json!({"input": "x", "metadata": []}), "metadata"),
    ] {
        let err = translate(body.clone()).unwrap_err();
        assert_eq!(err.field(), Some(field), "{body}: {err}");
        assert_eq!(err.status(), 400);
    }
}

#[test]
fn options_reach_the_service_and_the_echo() {
    let t = translate(json!({
        "model": "mock", "input": "x", "max_output_tokens": 9, "temperature": 0.5,
        "reasoning": {"effort": "none", "summary": "auto"}, "store": false, "stream": true,
        "tool_choice": "none", "parallel_tool_calls": false, "truncation": "auto",
        "tools": [
            {"type": "function", "name": "f", "description": "d",
             "parameters": {"type": "object", "properties": {}}, "strict": true},
            {"type": "web_search", "external_web_access": true},
            {"type": "namespace", "name": "ns", "tools": []},
            {"type": "custom", "name": "apply_patch"}
        ],
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {}}, "verbosity": "low"},
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k",
        "client_metadata": {"a": 1}, "service_tier": "auto", "user": "u",
        "metadata": {"k": "v"}, "unknown": true
    }))
    .unwrap();
    let g = &t.generate;
    assert_eq!(g.model.as_deref(), Some("mock"));
    assert_eq!(
        (g.max_tokens, g.thinking, g.sampling.temperature),
        (Some(9), Some(false), Some(0.5))
    );
    assert_eq!(g.tool_choice, ToolChoice::None);
    assert_eq!(g.tool_names(), ["f"]);
    assert_eq!(
        g.tools[0],
        json!({"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {}}}})
    );
    assert!(matches!(g.format, OutputFormat::JsonSchema { .. }));
    assert_eq!(g.format_field, "text.format");
    assert!(!t.store && t.stream);
    assert_eq!(t.echo["tools"].as_array().unwrap().len(), 1);
    assert_eq!(t.echo["parallel_tool_calls"], false);
    assert_eq!(t.echo["truncation"], "auto");
    assert_eq!(t.echo["text"]["verbosity"], "low");
    assert_eq!(t.echo["metadata"], json!({"k": "v"}));
    let on = translate(json!({"input": "x", "reasoning": {"effort": "high"}})).unwrap();
    assert_eq!(on.generate.thinking, Some(true));
    assert!(on.store);
    assert_eq!(on.echo["tool_choice"], "auto");
    assert_eq!(on.echo["text"], json!({"format": {"type": "text"}}));
    let named =
        translate(json!({"input": "x", "tool_choice": {"type": "function", "name": "f"}})).unwrap();
    assert_eq!(named.generate.tool_choice, ToolChoice::Function("f".into()));
}

#[test]
fn include_values_are_checked_and_log_probabilities_asked_through_them() {
    for (include, refused) in [
        (
            json!(["reasoning.encrypted_content", "web_search_call.results"]),
            None,
        ),
        (json!(["message.output_text.logprobs"]), None),
        (json!(["everything"]), Some("include")),
    ] {
        let result = translate(json!({"input": "x", "include": include}));
        assert_eq!(
            result
                .err()
                .and_then(|e| e.field().map(str::to_owned))
                .as_deref(),
            refused
        );
    }
    let asked = translate(
        json!({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 3}),
    )
    .unwrap();
    assert_eq!(asked.generate.sampling.logprobs, Some(3));
    assert!(asked.logprobs);
    let plain = translate(json!({"input": "x"})).unwrap();
    assert_eq!(plain.generate.sampling.logprobs, None);
    assert!(!plain.logprobs);
    for body in [
        json!({"input": "x", "top_logprobs": 2}),
        json!({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 21}),
    ] {
        let err = translate(body).unwrap_err();
        assert_eq!(err.field(), Some("top_logprobs"), "{err}");
    }
    let err = translate(json!({"input": "x", "service_tier": "flex"})).unwrap_err();
    assert_eq!(err.field(), Some("service_tier"));
    let t = translate(json!({"input": "x", "parallel_tool_calls": false})).unwrap();
    assert_eq!(t.generate.max_tool_calls, Some(1));
}
