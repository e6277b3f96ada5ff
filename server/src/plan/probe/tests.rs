use super::*;

/// What a runtime that does all the ABI notes say shows the probes, for a
/// model with a tokenizer and the server's template.
fn honest() -> Observed {
    Observed {
        server_template: true,
        ids: true,
        greedy: true,
        vocabulary: Some(151_665),
        a_prefill: Some(20),
        aa_prefill: Some(39),
        paused_at_prefill: true,
        first_rows: Some((20, 151_936)),
        kv_after_pause: Some(20),
        b1_ids: 14,
        kv_after_tokens: Some(34),
        chunked_text: Some("Sure, here".into()),
        one_run_text: Some("Sure, here".into()),
        argmax_agreed: 6,
        argmax_compared: 6,
        mid_paused: true,
        kv_mid: Some(22),
        mid_continued: true,
        mid_ended_after: None,
        cache_prefill: Some(9),
        c_prefill: Some(9),
        cache_trouble: None,
        abort_ms: Some(400.0),
        prefill_ms: Some(420.0),
        runs: 12,
        prefilled: 300,
        generated: 30,
    }
}

fn basis() -> Basis {
    Basis {
        tokenizer: true,
        server_template: true,
        chunk_tokens: 160,
    }
}

fn check<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn a_runtime_that_does_what_the_notes_say_passes_every_probe_but_the_abort() {
    let o = honest();
    let checks = judge(&o);
    assert_eq!(checks.len(), NAMES.len());
    for c in &checks {
        // The abort waits for the prefill's end, as rknn-llm #400 reports.
        assert_eq!(c.passed, c.name != ABORT_DURING_PREFILL, "{c:?}");
        assert!(c.ran, "{c:?}");
    }
    let f = features(basis(), &checks, &o);
    for (name, feature) in [
        ("chunked_prefill", &f.chunked_prefill),
        ("thinking_budget", &f.thinking_budget),
        ("logprobs", &f.logprobs),
        ("constrained", &f.constrained),
        ("snapshots", &f.snapshots),
        ("server_template", &f.server_template),
    ] {
        assert!(feature.on, "{name}: {feature:?}");
    }
    assert_eq!(f.rows_at_once, Some(20));
}

/// Each broken behaviour: the observation it leaves, the probe that must
/// fail, and the features that must close.
#[test]
fn each_broken_behaviour_fails_its_probe_and_closes_what_rests_on_it() {
    type Break = fn(&mut Observed);
    let cases: [(&str, Break, &str, &[&str]); 7] = [
        (
            "a pause that drops the KV cache",
            |o| {
                o.kv_after_pause = Some(0);
                o.kv_after_tokens = Some(14);
                o.kv_mid = Some(0);
            },
            PAUSE_KEEPS_KV,
            &["chunked_prefill", "constrained", "thinking_budget"],
        ),
        (
            "token input taken but not prefilled",
            |o| o.kv_after_tokens = Some(20),
            TOKEN_INPUT,
            &["chunked_prefill", "constrained", "thinking_budget"],
        ),
        (
            "the paused token in the KV cache",
            |o| {
                o.kv_after_pause = Some(21);
                o.kv_after_tokens = Some(36);
            },
            PAUSED_TOKEN_NOT_IN_KV,
            &["chunked_prefill", "constrained"],
        ),
        (
            "picks that are not their rows' likeliest",
            |o| o.argmax_agreed = 0,
            LOGITS_ROWS,
            &["logprobs", "constrained"],
        ),
        (
            "a cache after token input that holds only the first prompt",
            |o| o.cache_prefill = Some(25),
            PROMPT_CACHE_AFTER_TOKEN_INPUT,
            &["snapshots"],
        ),
        (
            "an empty template that leaves the built-in one on",
            |o| {
                o.a_prefill = Some(33);
                o.aa_prefill = Some(52);
            },
            TEMPLATE_OFF,
            &["server_template", "chunked_prefill"],
        ),
        (
            "a continuation after token input that is not the text's",
            |o| o.chunked_text = Some("Other".into()),
            TOKEN_INPUT,
            &["chunked_prefill", "constrained", "thinking_budget"],
        ),
    ];
    for (what, broken, probe, closed) in cases {
        let mut o = honest();
        broken(&mut o);
        let checks = judge(&o);
        let c = check(&checks, probe);
        assert!(!c.passed && c.ran, "{what}: {c:?}");
        let f = features(basis(), &checks, &o);
        let by_name = |name: &str| match name {
            "chunked_prefill" => &f.chunked_prefill,
            "thinking_budget" => &f.thinking_budget,
            "logprobs" => &f.logprobs,
            "constrained" => &f.constrained,
            "snapshots" => &f.snapshots,
            "server_template" => &f.server_template,
            _ => unreachable!(),
        };
        for name in closed {
            let feature = by_name(name);
            assert!(!feature.on, "{what}: {name} stays on: {feature:?}");
            assert!(feature.reason.contains("probe "), "{what}: {feature:?}");
        }
        // The rest stays as it was.
        let open = ["logprobs", "server_template"]
            .into_iter()
            .filter(|n| !closed.contains(n));
        for name in open {
            assert!(by_name(name).on, "{what}: {name} closed");
        }
    }
}

#[test]
fn probes_that_need_ids_or_the_servers_template_do_not_run_without_them() {
    let o = Observed {
        ids: false,
        chunked_text: None,
        one_run_text: None,
        kv_after_tokens: None,
        ..honest()
    };
    let checks = judge(&o);
    for name in [TOKEN_INPUT, PROMPT_CACHE_AFTER_TOKEN_INPUT] {
        let c = check(&checks, name);
        assert!(
            !c.ran && !c.passed && c.detail.starts_with("not run"),
            "{c:?}"
        );
    }
    // Without a tokenizer the features that need one are off for that,
    // not for a probe.
    let f = features(
        Basis {
            tokenizer: false,
            ..basis()
        },
        &checks,
        &o,
    );
    assert!(!f.chunked_prefill.on && f.chunked_prefill.reason.contains("tokenizer"));
    assert!(!f.logprobs.on && f.logprobs.reason.contains("tokenizer"));
    // The runtime's own template: the template and cache probes are not
    // for it, and what they gate stays as it is.
    let o = Observed {
        server_template: false,
        one_run_text: None,
        ..honest()
    };
    let checks = judge(&o);
    assert!(!check(&checks, TEMPLATE_OFF).ran);
    assert!(!check(&checks, PROMPT_CACHE_AFTER_TOKEN_INPUT).ran);
    assert!(
        check(&checks, TOKEN_INPUT).passed,
        "{:?}",
        check(&checks, TOKEN_INPUT)
    );
    let f = features(
        Basis {
            server_template: false,
            ..basis()
        },
        &checks,
        &o,
    );
    assert!(f.server_template.on && f.snapshots.on && !f.chunked_prefill.on);
    assert!(f.thinking_budget.on && f.constrained.on);
}

#[test]
fn an_abort_is_judged_only_on_a_prefill_long_enough_to_tell() {
    let landed = Observed {
        abort_ms: Some(30.0),
        prefill_ms: Some(600.0),
        ..honest()
    };
    assert!(check(&judge(&landed), ABORT_DURING_PREFILL).passed);
    let short = Observed {
        abort_ms: Some(1.0),
        prefill_ms: Some(2.0),
        ..honest()
    };
    let c = judge(&short);
    let c = check(&c, ABORT_DURING_PREFILL);
    assert!(!c.passed && c.detail.contains("too short"), "{c:?}");
}

#[test]
fn a_row_narrower_than_the_tokenizer_is_said_but_is_the_tokenizers_setting() {
    let o = Observed {
        first_rows: Some((20, 400)),
        ..honest()
    };
    let c = judge(&o);
    let c = check(&c, LOGITS_ROWS);
    assert!(
        c.passed && c.detail.contains("fewer than the tokenizer"),
        "{c:?}"
    );
}

#[test]
fn an_answer_that_ends_before_the_pause_leaves_the_mid_generation_probe_unjudged() {
    let o = Observed {
        mid_paused: false,
        mid_ended_after: Some(1),
        ..honest()
    };
    let checks = judge(&o);
    let c = check(&checks, PAUSE_MID_GENERATION);
    assert!(!c.ran && c.detail.contains("ended after 1"), "{c:?}");
    let f = features(basis(), &checks, &o);
    assert!(!f.thinking_budget.on && f.thinking_budget.reason.contains("not run"));
}
