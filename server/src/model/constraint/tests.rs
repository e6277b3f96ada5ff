use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

fn mock() -> Arc<Vocabulary> {
    Arc::new(Vocabulary::parse(crate::model::tokenizer::MOCK_TOKENIZER).unwrap())
}

/// Logits that end what is open soonest: the end token first, then a
/// lone quote (closing a string), then `}` and `]`, then a comma (to the
/// next required member), then digits, then shorter tokens. A walk over
/// them makes a small instance.
fn closing_logits(vocabulary: &Vocabulary) -> Vec<f32> {
    (0..vocabulary.len() as u32)
        .map(|t| {
            let bytes = vocabulary.bytes(t);
            match bytes {
                _ if t == vocabulary.eos() => 100.0,
                b"\"" => 50.0,
                b"}" | b"]" => 40.0,
                _ if bytes.contains(&b',') => -3.0,
                [b'0'..=b'9', ..] => -5.0,
                _ => -5.0 - bytes.len() as f32,
            }
        })
        .collect()
}

/// The answer a guide makes, greedily, from `logits`.
fn walk(constraint: &Constraint, temperature: f32) -> String {
    let vocabulary = mock();
    let logits = closing_logits(&vocabulary);
    let mut guide = Guide::new(&vocabulary, constraint).unwrap();
    let params = SamplingParams {
        temperature,
        ..SamplingParams::default()
    };
    let mut rng = 7;
    let mut out = Vec::new();
    for _ in 0..400 {
        if guide.is_done() {
            break;
        }
        let history = guide.tokens().to_vec();
        let mask = guide.mask().unwrap().clone();
        let token = sample(&logits, &mask, &params, &history, &mut rng).unwrap();
        if token == vocabulary.eos() {
            break;
        }
        guide.accept(token).unwrap();
        out.extend_from_slice(vocabulary.bytes(token));
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn the_mock_vocabulary_loads_with_its_end_token() {
    let vocabulary = mock();
    assert_eq!(vocabulary.len(), 308);
    assert_eq!(vocabulary.bytes(vocabulary.eos()), b"<|endoftext|>");
    assert!(vocabulary.is_special(vocabulary.eos()));
    assert_eq!(vocabulary.bytes(u32::from(b'{')), b"{");
}

#[test]
fn a_schema_walk_gives_a_valid_instance() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1},
            "ok": {"type": "boolean"}
        },
        "required": ["name", "age", "tags", "ok"],
        "additionalProperties": false
    });
    for temperature in [0.0, 0.7] {
        let text = walk(&Constraint::JsonSchema(schema.clone()), temperature);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(value["name"].is_string(), "{value}");
        assert!(value["age"].as_u64().is_some(), "{value}");
        let tags = value["tags"].as_array().unwrap();
        assert!(
            !tags.is_empty() && tags.iter().all(|t| t == "a" || t == "b"),
            "{value}"
        );
        assert!(value["ok"].is_boolean(), "{value}");
        assert_eq!(value.as_object().unwrap().len(), 4, "{value}");
    }
    let any: Value = serde_json::from_str(&walk(&Constraint::JsonObject, 0.0)).unwrap();
    assert!(any.is_object());
}

#[test]
fn a_forced_call_names_a_tool_and_fits_its_schema() {
    let tools = vec![
        ToolSchema {
            name: "get_weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}),
        },
        ToolSchema {
            name: "noop".into(),
            parameters: Value::Null,
        },
    ];
    let text = walk(&Constraint::ToolCall(tools), 0.0);
    let body = text
        .strip_prefix("<tool_call>\n")
        .and_then(|t| t.strip_suffix("\n</tool_call>"))
        .unwrap_or_else(|| panic!("{text:?}"));
    let call: Value = serde_json::from_str(body).unwrap();
    match call["name"].as_str() {
        Some("get_weather") => assert!(call["arguments"]["city"].is_string(), "{call}"),
        Some("noop") => assert!(call["arguments"].is_object(), "{call}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_schema_the_engine_cannot_compile_is_refused_with_why() {
    let bad = Constraint::JsonSchema(
        json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}),
    );
    let err = check(&mock(), &bad).unwrap_err();
    assert!(!err.is_empty());
    assert!(check(&mock(), &Constraint::JsonObject).is_ok());
}

#[test]
fn sampling_keeps_to_the_allowed_tokens_and_the_settings() {
    let mut allowed = toktrie::SimpleVob::alloc(8);
    allowed.allow_token(2);
    allowed.allow_token(5);
    let logits = [9.0, 0.0, 1.0, 0.0, 0.0, 3.0, 0.0, 0.0];
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let mut rng = 1;
    assert_eq!(sample(&logits, &allowed, &greedy, &[], &mut rng), Some(5));
    // A strong repetition penalty turns the choice.
    let penalised = SamplingParams {
        presence_penalty: 5.0,
        ..greedy
    };
    assert_eq!(
        sample(&logits, &allowed, &penalised, &[5], &mut rng),
        Some(2)
    );
    // Drawn at temperature 1, both come, token 5 more often.
    let warm = SamplingParams {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        ..SamplingParams::default()
    };
    let picks: Vec<u32> = (0..400)
        .filter_map(|_| sample(&logits, &allowed, &warm, &[], &mut rng))
        .collect();
    let fives = picks.iter().filter(|&&t| t == 5).count();
    assert!(picks.iter().all(|&t| t == 2 || t == 5));
    assert!(fives > 300 && fives < 400, "{fives}");
    // top_k 1 is greedy.
    let one = SamplingParams { top_k: 1, ..warm };
    assert_eq!(sample(&logits, &allowed, &one, &[], &mut rng), Some(5));
    assert_eq!(
        sample(&logits, &toktrie::SimpleVob::alloc(8), &warm, &[], &mut rng),
        None
    );
}

/// What [`sampler::candidates`] must give, the slow way: every allowed
/// token with a finite logit, penalised, sorted, the best `top_k`.
fn all_candidates(
    logits: &[f32],
    allowed: &toktrie::SimpleVob,
    params: &SamplingParams,
    history: &[u32],
) -> Vec<(u32, f32)> {
    let mut out: Vec<(u32, f32)> = (0..logits.len() as u32)
        .filter(|&t| (t as usize) < allowed.len() && allowed.is_allowed(t))
        .filter(|&t| logits[t as usize].is_finite())
        .map(|t| {
            let mut logit = logits[t as usize];
            let count = history.iter().filter(|&&h| h == t).count();
            if count > 0 {
                if params.repeat_penalty > 0.0 && params.repeat_penalty != 1.0 {
                    logit = if logit > 0.0 {
                        logit / params.repeat_penalty
                    } else {
                        logit * params.repeat_penalty
                    };
                }
                logit -= params.frequency_penalty * count as f32 + params.presence_penalty;
            }
            (t, logit)
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let keep = match params.top_k {
        _ if params.temperature <= 0.0 => 1,
        0 => sampler::MAX_CANDIDATES,
        k => k.min(sampler::MAX_CANDIDATES),
    };
    out.truncate(keep);
    out
}

#[test]
fn the_one_pass_choice_of_candidates_is_the_full_sorts() {
    let mut state = 0x1234_5678_u64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    for case in 0..300 {
        let size = 1 + next(5000) as usize;
        // Few distinct values, so ties are common; some not finite.
        let logits: Vec<f32> = (0..size)
            .map(|_| match next(50) {
                0 => f32::NEG_INFINITY,
                1 => f32::NAN,
                v => (v % 13) as f32 - 6.0,
            })
            .collect();
        // The mask may be shorter or longer than the row.
        let mut allowed = toktrie::SimpleVob::alloc(size + next(3) as usize * 7);
        let share = 1 + next(10);
        for t in 0..allowed.len() as u32 {
            if next(share) == 0 {
                allowed.allow_token(t);
            }
        }
        let history: Vec<u32> = (0..next(40))
            .map(|_| next(size as u64 + 3) as u32)
            .collect();
        let params = SamplingParams {
            temperature: [0.0, 0.7, 1.0][next(3) as usize],
            top_k: [0, 1, 3, 40, 2000][next(5) as usize],
            repeat_penalty: [1.0, 1.3, 0.8][next(3) as usize],
            frequency_penalty: [0.0, 0.5, -1.5][next(3) as usize],
            presence_penalty: [0.0, 2.0, -2.0][next(3) as usize],
            ..SamplingParams::default()
        };
        let fast = sampler::candidates(&logits, &allowed, &params, &history);
        let slow = all_candidates(&logits, &allowed, &params, &history);
        let bits = |c: &[(u32, f32)]| c.iter().map(|&(t, l)| (t, l.to_bits())).collect::<Vec<_>>();
        assert_eq!(bits(&fast), bits(&slow), "case {case}: {params:?}");
    }
}

#[test]
fn the_tokens_a_grammar_forces_are_cut_from_its_forced_bytes() {
    let vocabulary = mock();
    let token = |text: &str| {
        (0..vocabulary.len() as u32)
            .find(|&t| vocabulary.bytes(t) == text.as_bytes())
            .unwrap()
    };
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": false
    });
    let mut guide = Guide::new(&vocabulary, &Constraint::JsonSchema(schema)).unwrap();
    // The first key is forced from the start, then the rest of a key once
    // it is begun; the longest tokens that make the bytes.
    assert_eq!(
        guide.forced(),
        [token("{\""), token("name"), token("\": \"")]
    );
    guide.accept(token("{\"")).unwrap();
    assert_eq!(guide.forced(), [token("name"), token("\": \"")]);
    // Inside the string the grammar leaves a choice.
    for t in [token("name"), token("\": \"")] {
        guide.accept(t).unwrap();
    }
    assert!(guide.forced().is_empty());
}

#[test]
fn min_properties_beyond_the_required_names_is_refused_anywhere_in_a_schema() {
    let vocabulary = mock();
    let refused = [
        json!({"type": "object", "minProperties": 2}),
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "minProperties": 2}),
        json!({"$defs": {"open": {"type": "object", "minProperties": 1}},
               "type": "object", "properties": {"x": {"$ref": "#/$defs/open"}}}),
        json!({"type": "array", "items": {"anyOf": [{"type": "object", "minProperties": 3}]}}),
    ];
    for schema in refused {
        let err = check(&vocabulary, &Constraint::JsonSchema(schema.clone())).unwrap_err();
        assert!(err.contains("`minProperties`"), "{schema}: {err}");
    }
    let tool = Constraint::ToolCall(vec![ToolSchema {
        name: "f".into(),
        parameters: json!({"type": "object", "minProperties": 1}),
    }]);
    assert!(
        check(&vocabulary, &tool)
            .unwrap_err()
            .contains("`minProperties`")
    );
    // Met by the required names, or only data: followed.
    for schema in [
        json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
               "required": ["a", "b"], "minProperties": 2}),
        json!({"type": "object", "properties": {"a": {"const": {"minProperties": 5}}}}),
    ] {
        check(&vocabulary, &Constraint::JsonSchema(schema.clone()))
            .unwrap_or_else(|e| panic!("{schema}: {e}"));
    }
}

/// The one-token check a standing pick gets answers as the step's mask
/// does, for every token of the vocabulary, at every step of an answer;
/// and the answer is complete exactly when only the end may follow.
#[test]
fn a_picks_check_and_completeness_agree_with_the_mask() {
    let vocabulary = mock();
    let logits = closing_logits(&vocabulary);
    let constraint = Constraint::JsonSchema(json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "n": {"type": "integer", "minimum": 0, "maximum": 99},
        },
        "required": ["name", "n"],
        "additionalProperties": false
    }));
    let mut guide = Guide::new(&vocabulary, &constraint).unwrap();
    let eos = vocabulary.eos();
    let mut steps = 0;
    loop {
        let checked: Vec<bool> = (0..vocabulary.len() as u32)
            .filter(|&t| t != eos)
            .map(|t| guide.allows(t).unwrap())
            .collect();
        let mask = guide.mask().unwrap().clone();
        let from_mask: Vec<bool> = (0..vocabulary.len() as u32)
            .filter(|&t| t != eos)
            .map(|t| mask.is_allowed(t))
            .collect();
        assert_eq!(checked, from_mask, "step {steps}");
        let only_end = mask.num_set() == 1 && mask.is_allowed(eos);
        assert_eq!(guide.only_end_follows().unwrap(), only_end, "step {steps}");
        if only_end {
            break;
        }
        let token = sample(&logits, &mask, &SamplingParams::default(), &[], &mut 1).unwrap();
        guide.accept(token).unwrap();
        steps += 1;
        assert!(steps < 100, "the walk ends");
    }
    assert!(steps > 5, "{steps} steps");
}

#[test]
fn a_ref_cycle_or_an_empty_language_is_refused_without_the_parsers_state() {
    let vocabulary = mock();
    for (schema, says) in [
        (
            json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
            "#/$defs/a → #/$defs/a",
        ),
        (
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                   "type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}}),
            "never to a schema",
        ),
    ] {
        let err = check(&vocabulary, &Constraint::JsonSchema(schema.clone())).unwrap_err();
        assert!(err.contains(says), "{schema}: {err}");
        assert!(
            !err.contains("<state>") && !err.contains("Tokens:"),
            "{err}"
        );
        let tools = Constraint::ToolCall(vec![ToolSchema {
            name: "f".into(),
            parameters: schema.clone(),
        }]);
        assert!(check(&vocabulary, &tools).is_err(), "{schema}");
    }
    // Recursion that can end is fine.
    check(
        &vocabulary,
        &Constraint::JsonSchema(json!({
            "type": "object", "properties": {"child": {"$ref": "#"}}
        })),
    )
    .unwrap();
}

#[test]
fn compiled_parsers_are_kept_within_their_byte_budget() {
    let vocabulary = mock();
    // Schemas of about 256 KiB, each counted for about 8 MiB: the budget
    // keeps at most eight of them, whatever number is compiled.
    let big = |n: usize| {
        let values: Vec<String> = (0..12_000).map(|i| format!("v{n}-{i:08}")).collect();
        Constraint::JsonSchema(json!({"enum": values}))
    };
    for n in 0..12 {
        check(&vocabulary, &big(n)).unwrap();
        let (bytes, _) = compiled_held();
        assert!(bytes <= COMPILED_MAX_BYTES, "{bytes}");
    }
    let too_big = COMPILED_MAX_BYTES / BYTES_PER_SCHEMA_BYTE;
    assert!(compiled_bytes(too_big) > COMPILED_MAX_BYTES);
}
