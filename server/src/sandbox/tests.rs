use super::*;
use crate::model::JinjaTemplate;
use crate::model::template::TemplateMessage;

fn job(source: &str) -> RenderJob {
    RenderJob {
        template: JinjaTemplate {
            source: source.into(),
            bos_token: String::new(),
            eos_token: String::new(),
        },
        messages: vec![TemplateMessage {
            role: "user".into(),
            content: "hi".into(),
            tool_calls: Vec::new(),
        }],
        tools: None,
        enable_thinking: None,
        now_unix: 0,
        continue_final: false,
    }
}

#[tokio::test]
async fn in_thread_a_template_renders_and_its_errors_name_it() {
    let sandbox = Sandbox::new(SandboxSettings::in_thread());
    let prompt = sandbox
        .render(job("{{ messages[0].content }}!"))
        .await
        .unwrap();
    assert_eq!(prompt, "hi!");
    let err = sandbox
        .render(job("{{ raise_exception('no') }}"))
        .await
        .unwrap_err();
    assert!(err.starts_with("the model's chat template: no"), "{err}");
}

#[tokio::test]
async fn a_template_that_writes_too_much_fails_its_own_render() {
    let sandbox = Sandbox::new(SandboxSettings::in_thread());
    let err = sandbox
        .render(job(
            "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        ))
        .await
        .unwrap_err();
    assert!(err.contains("wrote more than"), "{err}");
}

#[tokio::test]
async fn a_helper_that_cannot_start_is_said_so() {
    let sandbox = Sandbox::new(SandboxSettings::new(vec![
        "/nonexistent/rkllm-server".into(),
    ]));
    let err = sandbox.render(job("x")).await.unwrap_err();
    assert!(err.contains("cannot start a helper"), "{err}");
}
