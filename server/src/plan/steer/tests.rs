use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::model::constraint::{Constraint, ToolSchema};
use crate::model::tokenizer::Vocabulary;

fn mock() -> Arc<Vocabulary> {
    Arc::new(Vocabulary::parse(crate::model::tokenizer::MOCK_TOKENIZER).unwrap())
}

/// The mock vocabulary's token whose text is `text`.
fn token(vocabulary: &Vocabulary, text: &str) -> u32 {
    (0..vocabulary.len() as u32)
        .find(|&t| vocabulary.bytes(t) == text.as_bytes())
        .unwrap_or_else(|| panic!("no token {text:?}"))
}

/// A row of `width` values that wants `want` above all, then prefers
/// closing what is open (the runtime test double's shape).
fn row(vocabulary: &Vocabulary, width: usize, want: u32) -> Vec<f32> {
    (0..width as u32)
        .map(|t| {
            let bytes = vocabulary.bytes(t);
            let base = match bytes {
                _ if t as usize >= vocabulary.len() => -30.0,
                _ if t == vocabulary.eos() => 18.0,
                b"\"" => 15.0,
                b"}" | b"]" => 12.0,
                [b'0'..=b'9', ..] => 6.0,
                _ if bytes.contains(&b',') => 3.0,
                _ => -(bytes.len() as f32),
            };
            base + if t == want { 40.0 } else { 0.0 }
        })
        .collect()
}

fn steering(constraint: &Constraint, mode: ReasoningMode, cap: u32) -> Steering {
    Steering::new(
        &mock(),
        constraint,
        &SteerSettings {
            mode,
            params: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            runtime_top_k: 40,
            seed: 7,
            cap,
            implausible: 0,
        },
    )
    .unwrap()
}

/// One step where the runtime picks what the row wants; the text written.
fn pick(steering: &mut Steering, want: u32, text: &mut Vec<u8>) -> Step {
    let vocabulary = mock();
    let row = row(&vocabulary, vocabulary.len(), want);
    steering
        .step(&row, Some(want), &mut |bytes| {
            text.extend_from_slice(bytes);
            true
        })
        .unwrap()
}

fn name_schema() -> Constraint {
    Constraint::JsonSchema(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": false
    }))
}

#[test]
fn an_allowed_pick_stands_and_a_forbidden_one_is_corrected_with_the_forced_tokens() {
    let v = mock();
    let mut steering = steering(&name_schema(), ReasoningMode::Off, 100);
    let mut text = Vec::new();
    // The model wants to chat: `S` cannot open the object. The runner
    // picks `{` and feeds it with everything the schema then forces.
    let Step::Feed(fed) = pick(&mut steering, token(&v, "S"), &mut text) else {
        panic!("a forbidden pick must be corrected");
    };
    assert_eq!(String::from_utf8_lossy(&text), r#"{"name": ""#);
    let fed_text: Vec<u8> = fed.iter().flat_map(|&t| v.bytes(t).to_vec()).collect();
    assert_eq!(fed_text, text, "what is fed is what was written");
    assert!(fed.len() >= 3, "{fed:?}");
    assert_eq!(steering.counts.corrected, 1);
    assert_eq!(steering.counts.forced as usize, fed.len() - 1);
    // Inside the string the model's own text stands: no runtime call.
    assert_eq!(
        pick(&mut steering, token(&v, "S"), &mut text),
        Step::Continue
    );
    assert_eq!(
        pick(&mut steering, token(&v, " ok"), &mut text),
        Step::Continue
    );
    // A quote closes it; only `}` may follow, which one token does not
    // make worth a pause: the runtime goes on.
    assert_eq!(
        pick(&mut steering, token(&v, "\""), &mut text),
        Step::Continue
    );
    // It wants to stop there: the runner closes the object, and the
    // answer is complete without another run.
    assert_eq!(
        pick(&mut steering, v.eos(), &mut text),
        Step::End(Ending::Complete)
    );
    let answer: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(answer, json!({"name": "S ok"}));
    assert_eq!(steering.counts.stood, 3);
    assert_eq!(steering.counts.corrected, 2);
}

#[test]
fn a_standing_pick_with_many_forced_tokens_after_it_feeds_them_in_one_go() {
    let v = mock();
    let tools = vec![ToolSchema {
        name: "get_weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"], "additionalProperties": false}),
    }];
    let mut steering = steering(&Constraint::ToolCall(tools), ReasoningMode::Off, 100);
    let mut text = Vec::new();
    let call = token(&v, "<tool_call>");
    let Step::Feed(fed) = pick(&mut steering, call, &mut text) else {
        panic!("the forced call's head must be fed in one go");
    };
    assert_eq!(fed[0], call, "the pick goes first: it was not decoded");
    assert_eq!(
        String::from_utf8_lossy(&text),
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \""
    );
    assert_eq!(steering.counts.stood, 1);
    assert_eq!(steering.counts.corrected, 0);
    assert!(steering.counts.forced as usize >= FORCED_FEED_MIN);
}

#[test]
fn the_answer_ends_as_soon_as_only_the_end_may_follow() {
    let v = mock();
    let mut steering = steering(&Constraint::JsonObject, ReasoningMode::Off, 100);
    let mut text = Vec::new();
    assert_eq!(
        pick(&mut steering, token(&v, "{}"), &mut text),
        Step::End(Ending::Complete)
    );
    assert_eq!(text, b"{}");
}

#[test]
fn a_pick_past_the_tokenizer_or_no_pick_is_never_taken() {
    let v = mock();
    // A padded row: ids 308.. are past the tokenizer, and the best here.
    let width = v.len() + 12;
    let mut padded = row(&v, width, token(&v, "{}"));
    padded[v.len() + 3] = 100.0;
    let mut steering = steering(&Constraint::JsonObject, ReasoningMode::Off, 100);
    let mut text = Vec::new();
    let step = steering
        .step(&padded, Some(v.len() as u32 + 3), &mut |b| {
            text.extend_from_slice(b);
            true
        })
        .unwrap();
    assert_eq!(step, Step::End(Ending::Complete), "corrected to `{{}}`");
    assert_eq!(text, b"{}");
    assert_eq!(steering.counts.corrected, 1);
    let mut steering = steering_with_none();
    let mut text = Vec::new();
    let step = steering
        .step(&row(&v, v.len(), token(&v, "{")), None, &mut |b| {
            text.extend_from_slice(b);
            true
        })
        .unwrap();
    assert!(matches!(step, Step::Feed(_)), "{step:?}");
    assert_eq!(steering.counts.corrected, 1);
    assert_eq!(steering.counts.stood, 0);
}

fn steering_with_none() -> Steering {
    steering(&name_schema(), ReasoningMode::Off, 100)
}

#[test]
fn thinking_is_free_and_the_grammar_holds_the_answer_after_it() {
    let v = mock();
    let mut steering = steering(&Constraint::JsonObject, ReasoningMode::Opened, 100);
    let mut text = Vec::new();
    for free in ["<think>", "h", "m", "</think>", "\n", "\n"] {
        assert_eq!(
            pick(&mut steering, token(&v, free), &mut text),
            Step::Continue,
            "{free:?} is thinking or the white space after it"
        );
    }
    // The model goes on chatting: the answer is held from its first token.
    assert!(matches!(
        pick(&mut steering, token(&v, "S"), &mut text),
        Step::Feed(_)
    ));
    let text = String::from_utf8(text).unwrap();
    assert!(text.starts_with("<think>hm</think>\n\n{"), "{text:?}");
    // A model of the implicit shape that wants to end while thinking
    // closes the block instead.
    let mut steering = steering_implicit();
    let mut text = Vec::new();
    assert_eq!(
        pick(&mut steering, token(&v, "h"), &mut text),
        Step::Continue
    );
    assert_eq!(
        pick(&mut steering, v.eos(), &mut text),
        Step::Feed(vec![token(&v, "</think>")])
    );
    assert!(matches!(
        pick(&mut steering, token(&v, "S"), &mut text),
        Step::Feed(_)
    ));
    assert!(String::from_utf8_lossy(&text).starts_with("h</think>{"));
}

fn steering_implicit() -> Steering {
    steering(&Constraint::JsonObject, ReasoningMode::Implicit, 100)
}

#[test]
fn a_model_that_answers_without_thinking_is_held_from_its_first_token() {
    let v = mock();
    let mut steering = steering(&Constraint::JsonObject, ReasoningMode::Opened, 100);
    let mut text = Vec::new();
    // `<` might have begun `<think>`, but it is a token of its own: answer.
    assert!(matches!(
        pick(&mut steering, token(&v, "<"), &mut text),
        Step::Feed(_)
    ));
    assert_eq!(text.first(), Some(&b'{'));
}

#[test]
fn the_token_cap_ends_the_answer_with_length_and_a_closed_sink_ends_it_at_once() {
    let v = mock();
    let mut steering = steering(&name_schema(), ReasoningMode::Off, 2);
    let mut text = Vec::new();
    assert_eq!(
        pick(&mut steering, token(&v, "S"), &mut text),
        Step::End(Ending::Length)
    );
    assert_eq!(steering.emitted(), 2);
    let mut steering = steering_with_none();
    let step = steering
        .step(
            &row(&v, v.len(), token(&v, "{}")),
            Some(token(&v, "{")),
            &mut |_| false,
        )
        .unwrap();
    assert_eq!(step, Step::End(Ending::Closed));
}

#[test]
fn implausible_picks_are_corrected_and_three_stop_trusting_the_runtime() {
    let v = mock();
    let mut steering = steering(&name_schema(), ReasoningMode::Off, 1000);
    let mut text = Vec::new();
    let _ = pick(&mut steering, token(&v, "S"), &mut text);
    // Inside the string: a pick that ranks at the bottom of its row is
    // not what the runtime sampled from it.
    for round in 1..=3 {
        let mut low = row(&v, v.len(), token(&v, "x"));
        low[usize::from(b'y')] = -100.0;
        let step = steering
            .step(&low, Some(u32::from(b'y')), &mut |b| {
                text.extend_from_slice(b);
                true
            })
            .unwrap();
        assert!(matches!(step, Step::Feed(_)), "round {round}: {step:?}");
        assert_eq!(steering.counts.implausible, round);
    }
    assert_eq!(steering.implausible(), 3);
    // From now on even a likely pick is chosen by the runner.
    let step = pick(&mut steering, token(&v, "x"), &mut text);
    assert!(matches!(step, Step::Feed(_)), "{step:?}");
    assert!(!text.contains(&b'y'));
}

#[test]
fn a_row_fits_its_tokenizer_within_a_models_padding() {
    assert!(check_width(308, 308).is_ok());
    assert!(check_width(151_936, 151_665).is_ok());
    let short = check_width(100, 308).unwrap_err();
    assert!(short.contains("100") && short.contains("308"), "{short}");
    assert!(check_width(308 + ROW_PADDING_MAX + 1, 308).is_err());
}

#[test]
fn steering_may_move_to_the_thread_the_runtime_calls_back_on() {
    fn send<T: Send>() {}
    send::<Steering>();
}
