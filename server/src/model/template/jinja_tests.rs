//! The published templates of real models (tests/fixtures/chat-templates),
//! rendered and compared with what `transformers`' own
//! `apply_chat_template` renders (reference.py there wrote the prompts).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value as Json;

use super::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/chat-templates")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).unwrap()
}

/// 2025-03-07T12:00:00Z, the instant reference.py renders at.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_741_348_800)
}

fn template(file: &str) -> JinjaTemplate {
    let (bos, eos) = match file {
        "llama3.2.jinja" => ("<|begin_of_text|>", "<|eot_id|>"),
        _ => ("", "<|im_end|>"),
    };
    JinjaTemplate {
        source: read(file),
        bos_token: bos.into(),
        eos_token: eos.into(),
    }
}

fn messages(case: &Json) -> Vec<TemplateMessage> {
    case["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| TemplateMessage {
            role: m["role"].as_str().unwrap().into(),
            content: m["content"].as_str().unwrap().into(),
            tool_calls: m["tool_calls"]
                .as_array()
                .map(|calls| {
                    calls
                        .iter()
                        .map(|c| TemplateCall {
                            id: c["id"].as_str().unwrap().into(),
                            name: c["name"].as_str().unwrap().into(),
                            arguments: c["arguments"].as_str().unwrap().into(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

#[test]
fn real_templates_render_as_transformers_renders_them() {
    let cases: Json = serde_json::from_str(&read("cases.json")).unwrap();
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 12);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let tools = case["tools"]
            .as_str()
            .map(|t| read(&format!("tools-{t}.json")));
        let rendered = template(case["template"].as_str().unwrap())
            .render(
                &messages(case),
                RenderOptions {
                    tools: tools.as_deref(),
                    enable_thinking: case["enable_thinking"].as_bool(),
                    now: now(),
                },
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(rendered, read(&format!("{name}.txt")), "case {name}");
    }
}

#[test]
fn qwen3_thinking_off_opens_an_empty_think_block() {
    let chat = [TemplateMessage {
        role: "user".into(),
        content: "hi".into(),
        tool_calls: Vec::new(),
    }];
    let render = |thinking| {
        template("qwen3.jinja")
            .render(
                &chat,
                RenderOptions {
                    tools: None,
                    enable_thinking: thinking,
                    now: now(),
                },
            )
            .unwrap()
    };
    assert!(render(Some(false)).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert!(render(Some(true)).ends_with("<|im_start|>assistant\n"));
    assert_eq!(render(None), render(Some(true)));
}

#[test]
fn a_template_that_raises_or_is_broken_is_an_error_naming_it() {
    let llama = template("llama3.2.jinja");
    let call = |id: &str| TemplateCall {
        id: id.into(),
        name: "f".into(),
        arguments: "{}".into(),
    };
    let two_calls = [
        TemplateMessage {
            role: "user".into(),
            content: "q".into(),
            tool_calls: Vec::new(),
        },
        TemplateMessage {
            role: "assistant".into(),
            content: String::new(),
            tool_calls: vec![call("a"), call("b")],
        },
    ];
    let err = llama
        .render(
            &two_calls,
            RenderOptions {
                tools: None,
                enable_thinking: None,
                now: now(),
            },
        )
        .unwrap_err();
    assert!(
        err.contains("This model only supports single tool-calls at once!"),
        "{err}"
    );
    let broken = JinjaTemplate {
        source: "{% for m in messages %}{{ m.content }".into(),
        bos_token: String::new(),
        eos_token: String::new(),
    };
    let err = broken.check().unwrap_err();
    assert!(err.starts_with("the model's chat template:"), "{err}");
    assert!(llama.check().is_ok());
}

#[test]
fn a_runaway_template_runs_out_of_fuel() {
    let runaway = JinjaTemplate {
        source:
            "{% for a in range(100000) %}{% for b in range(100000) %}{% set c = b %}{% endfor %}\
                 {% endfor %}"
                .into(),
        bos_token: String::new(),
        eos_token: String::new(),
    };
    let err = runaway
        .render(
            &[],
            RenderOptions {
                tools: None,
                enable_thinking: None,
                now: now(),
            },
        )
        .unwrap_err();
    assert!(err.contains("fuel"), "{err}");
}

#[test]
fn strftime_now_writes_python_directives() {
    assert_eq!(strftime(now(), "%d %b %Y"), "07 Mar 2025");
    assert_eq!(
        strftime(now(), "%A %B %-d %H:%M:%S %%"),
        "Friday March %-d 12:00:00 %"
    );
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(civil_from_days(19_782), (2024, 2, 29));
}

#[test]
fn tojson_writes_floats_as_python_repr_does() {
    let cases = [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (0.1, "0.1"),
        (1.5e-5, "1.5e-05"),
        (0.00015, "0.00015"),
        (1e15, "1000000000000000.0"),
        (9_999_999_999_999_998.0, "9999999999999998.0"),
        (1.5e16, "1.5e+16"),
        (1e100, "1e+100"),
        (-2.5e-300, "-2.5e-300"),
    ];
    for (value, python) in cases {
        assert_eq!(python_float(value), python, "{value:e}");
    }
}

#[test]
fn a_template_that_writes_past_the_bound_fails_before_it_is_held_whole() {
    let flood = JinjaTemplate {
        source: "{% for a in range(100000) %}{{ 'x' * 100 }}{% endfor %}".into(),
        bos_token: String::new(),
        eos_token: String::new(),
    };
    let err = flood
        .render(
            &[],
            RenderOptions {
                tools: None,
                enable_thinking: None,
                now: now(),
            },
        )
        .unwrap_err();
    assert!(
        err.contains(&format!("wrote more than {MAX_RENDERED_BYTES} bytes")),
        "{err}"
    );
}
