use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::model::constraint::Constraint;

fn vocabulary() -> Arc<Vocabulary> {
    Arc::new(Vocabulary::parse(crate::model::tokenizer::MOCK_TOKENIZER).unwrap())
}

/// The answer the mock writes from its text `own` under `constraint`,
/// greedily, and whether it ended by itself (within 2,000 tokens).
fn written(constraint: &Constraint, own: &str) -> (String, bool) {
    let vocabulary = vocabulary();
    let mut guide = Guide::new(&vocabulary, constraint).unwrap();
    let logits = super::super::mock_logits(&vocabulary, 7);
    let params = SamplingParams {
        temperature: 0.0,
        top_p: 1.0,
        top_k: 0,
        repeat_penalty: 1.0,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
    };
    let mut writer = Writer::new(&vocabulary, own.as_bytes().to_vec(), logits, params, 7);
    let mut out = Vec::new();
    for _ in 0..2000 {
        match writer.next(&mut guide).unwrap() {
            Some(token) => {
                guide.accept(token).unwrap();
                out.extend_from_slice(vocabulary.bytes(token));
            }
            None => {
                // It ends only where the grammar lets it.
                assert!(guide.is_done() || guide.may_end().unwrap());
                return (String::from_utf8(out).unwrap(), true);
            }
        }
    }
    (String::from_utf8(out).unwrap(), false)
}

/// A finished answer, parsed.
fn value(constraint: &Constraint, own: &str) -> Value {
    let (text, ended) = written(constraint, own);
    assert!(ended, "it did not end: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn city() -> Constraint {
    Constraint::JsonSchema(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["name", "population"]
    }))
}

fn format_schema(format: &str) -> Constraint {
    Constraint::JsonSchema(json!({
        "type": "object",
        "properties": {"value": {"type": "string", "format": format}},
        "required": ["value"],
        "additionalProperties": false
    }))
}

/// The mock's default reply, free text (its words).
const WORDS: &str =
    "the NPU streams tokens quickly to every client héllo 東京 🦀 and a small board";

#[test]
fn its_own_json_comes_back_unchanged() {
    let own = r#"{"name": "Paris", "population": 2100000}"#;
    assert_eq!(written(&city(), own), (own.to_owned(), true));
    // Under JSON mode too, and with members the schema does not name.
    let more = r#"{"name": "Paris", "population": 2100000, "tags": ["a", "b"], "ok": true}"#;
    assert_eq!(
        written(&Constraint::JsonObject, more),
        (more.to_owned(), true)
    );
    assert_eq!(written(&city(), more), (more.to_owned(), true));
}

#[test]
fn its_white_space_gives_way_to_the_grammars() {
    let own = "{\n  \"name\":\"Paris\" ,\n  \"population\":   2100000\n}\n";
    assert_eq!(
        written(&city(), own),
        (
            r#"{"name": "Paris", "population": 2100000}"#.to_owned(),
            true
        )
    );
}

#[test]
fn a_text_that_breaks_the_schema_is_corrected_keeping_what_fits() {
    // A number where a string is due is written as a string; the missing
    // member is the least that fits.
    assert_eq!(
        value(&city(), r#"{"name": 5}"#),
        json!({"name": "5", "population": 1})
    );
    // A string that holds a number, where a number is due.
    assert_eq!(
        value(&city(), r#"{"name": "Lyon", "population": "513000"}"#),
        json!({"name": "Lyon", "population": 513_000})
    );
    // A value of the wrong kind is replaced, the rest kept.
    assert_eq!(
        value(&city(), r#"{"name": {"x": 1}, "population": 7}"#),
        json!({"name": "test", "population": 7})
    );
    // A member the schema forbids is left out; the object ends there.
    let closed = Constraint::JsonSchema(json!({
        "type": "object", "properties": {"name": {"type": "string"}},
        "required": ["name"], "additionalProperties": false
    }));
    assert_eq!(
        value(&closed, r#"{"name": "Paris", "extra": 1}"#),
        json!({"name": "Paris"})
    );
    // The forced start is written and its value is the mock's.
    assert_eq!(
        value(&city(), r#""Paris", "population": 9}"#),
        json!({"name": "Paris", "population": 9})
    );
    // JSON after free text is found.
    assert_eq!(
        value(
            &city(),
            r#"Sure! Here it is: {"name": "Oslo", "population": 700000} Enjoy."#
        ),
        json!({"name": "Oslo", "population": 700_000})
    );
}

fn is_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    matches!(parts.as_slice(), [y, m, d]
        if y.len() == 4 && y.bytes().all(|b| b.is_ascii_digit())
            && m.parse::<u32>().is_ok_and(|m| (1..=12).contains(&m)) && m.len() == 2
            && d.parse::<u32>().is_ok_and(|d| (1..=31).contains(&d)) && d.len() == 2)
}

#[test]
fn an_invented_value_is_plausible_for_its_format() {
    for own in [WORDS, "", r#"{"value": 5}"#, r#"{"value": "Paris"}"#] {
        let date = value(&format_schema("date"), own);
        assert!(is_date(date["value"].as_str().unwrap()), "{own}: {date}");
        let email = value(&format_schema("email"), own);
        let email = email["value"].as_str().unwrap();
        let (local, domain) = email.split_once('@').unwrap();
        assert!(!local.is_empty() && domain.contains('.'), "{own}: {email}");
        let stamp = value(&format_schema("date-time"), own);
        let stamp = stamp["value"].as_str().unwrap();
        assert!(
            is_date(&stamp[..10]) && stamp[10..].starts_with('T'),
            "{stamp}"
        );
        let uri = value(&format_schema("uri"), own);
        assert!(uri["value"].as_str().unwrap().contains("://"), "{uri}");
        for format in ["time", "uuid", "ipv4", "ipv6", "hostname", "duration"] {
            value(&format_schema(format), own);
        }
    }
    // Its own value in the format is kept.
    assert_eq!(
        value(&format_schema("date"), r#"{"value": "1999-12-31"}"#),
        json!({"value": "1999-12-31"})
    );
    // A date of its own that goes wrong midway is completed into a date.
    let fixed = value(&format_schema("date"), r#"{"value": "2024-1-5"}"#);
    assert!(is_date(fixed["value"].as_str().unwrap()), "{fixed}");
}

#[test]
fn free_text_under_json_mode_is_valid_json_and_ends() {
    assert_eq!(value(&Constraint::JsonObject, WORDS), json!({}));
    assert_eq!(value(&Constraint::JsonObject, ""), json!({}));
    // Where a string is forced, its text is the string's.
    let said = Constraint::JsonSchema(json!({
        "type": "object", "properties": {"answer": {"type": "string", "maxLength": 24}},
        "required": ["answer"]
    }));
    assert_eq!(
        value(&said, WORDS),
        json!({"answer": "the NPU streams tokens q"})
    );
    // Any JSON value.
    value(&Constraint::JsonSchema(json!(true)), WORDS);
}

#[test]
fn a_forced_tool_call_takes_its_json_as_the_arguments() {
    let tools = Constraint::ToolCall(vec![crate::model::constraint::ToolSchema {
        name: "get_weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"},
            "days": {"type": "integer"}}, "required": ["city", "days"]}),
    }]);
    let (text, ended) = written(&tools, r#"{"city": "Lyon", "days": 3}"#);
    assert!(ended);
    assert_eq!(
        text,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\", \"days\": 3}}\n</tool_call>"
    );
    let (text, ended) = written(&tools, WORDS);
    assert!(
        ended && text.starts_with("<tool_call>\n{\"name\": \"get_weather\""),
        "{text}"
    );
}

#[test]
fn bounded_and_enumerated_values_are_followed() {
    let schema = Constraint::JsonSchema(json!({
        "type": "object",
        "properties": {
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "population": {"type": "integer", "minimum": 1000},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "name": {"type": "string", "minLength": 1, "maxLength": 5}
        },
        "required": ["unit", "days", "population", "tags", "name"],
        "additionalProperties": false
    }));
    for own in [
        WORDS,
        r#"{"unit": "Celsius", "days": 30, "population": 12, "tags": "x", "name": "Kyoto-fu"}"#,
    ] {
        let (text, ended) = written(&schema, own);
        assert!(ended, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(
            ["celsius", "fahrenheit"].contains(&v["unit"].as_str().unwrap()),
            "{v}"
        );
        assert!((1..=7).contains(&v["days"].as_i64().unwrap()), "{v}");
        assert!(v["population"].as_i64().unwrap() >= 1000, "{v}");
        assert!(v["tags"].as_array().unwrap().len() >= 2, "{v}");
        assert!(
            (1..=5).contains(&v["name"].as_str().unwrap().chars().count()),
            "{v}"
        );
    }
    // Its own values, where they fit.
    assert_eq!(
        value(
            &schema,
            r#"{"unit": "celsius", "days": 3, "population": 513000, "tags": ["a", "b"], "name": "Lyon"}"#
        ),
        json!({"unit": "celsius", "days": 3, "population": 513_000, "tags": ["a", "b"], "name": "Lyon"})
    );
}
