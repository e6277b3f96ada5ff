use super::*;
use crate::model::Role;

/// Open WebUI's title request as it sends it: its task template with the
/// last two messages filled in where `{{MESSAGES:END:2}}` stands (one
/// `ROLE: text` line each), as the only user message, after the model's
/// system prompt when it has one. The guidelines are shortened here; the
/// lines the template is built of are kept.
fn open_webui_title(system: Option<&str>) -> Input {
    let filled = "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat \
                  history.\n### Guidelines:\n- The title should clearly represent the main theme \
                  of the conversation.\n### Output:\nJSON format: { \"title\": \"your concise \
                  title here\" }\n### Chat History:\n<chat_history>\nUSER: How do I bake bread at \
                  home?\nASSISTANT: Mix flour, water, salt and yeast, knead, let it rise, bake at \
                  230 °C.\n</chat_history>";
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(Message::text(Speaker::System, system));
    }
    messages.push(Message::text(Speaker::User, filled));
    Input::Chat(messages)
}

fn chat(texts: &[(Speaker, &str)]) -> Input {
    Input::Chat(
        texts
            .iter()
            .map(|(speaker, text)| Message::text(*speaker, *text))
            .collect(),
    )
}

#[test]
fn open_webui_title_request_is_background() {
    assert_eq!(signature(&open_webui_title(None)), Some("open-webui title"));
    assert_eq!(
        signature(&open_webui_title(Some("You are a friendly baker."))),
        Some("open-webui title")
    );
}

#[test]
fn open_webui_tags_follow_ups_queries_and_autocomplete_are_background() {
    let task = |body: &str| {
        chat(&[(
            Speaker::User,
            &format!(
                "### Task:\n{body}\n### Chat History:\n<chat_history>\nUSER: hi\n</chat_history>"
            ),
        )])
    };
    assert_eq!(
        signature(&task(
            "Generate 1-3 broad tags categorizing the main themes"
        )),
        Some("open-webui tags")
    );
    assert_eq!(
        signature(&task("Suggest 3-5 relevant follow-up questions or prompts")),
        Some("open-webui follow-ups")
    );
    assert_eq!(
        signature(&task(
            "Analyze the chat history to determine the necessity of generating search queries"
        )),
        Some("open-webui queries")
    );
    assert_eq!(
        signature(&chat(&[(
            Speaker::User,
            "### Task:\nYou are an autocompletion system. Continue the text in `<text>`.\n<text>The sun</text>",
        )])),
        Some("open-webui autocomplete")
    );
}

#[test]
fn home_assistant_ai_task_is_background() {
    let input = chat(&[
        (
            Speaker::System,
            "You are a Home Assistant expert and help users with their tasks.",
        ),
        (Speaker::User, "Summarise who is home in one sentence."),
    ]);
    assert_eq!(signature(&input), Some("home-assistant ai task"));
}

#[test]
fn an_ordinary_chat_is_interactive() {
    let input = chat(&[
        (Speaker::System, "You are a helpful assistant."),
        (Speaker::User, "Suggest a title for my essay about bread."),
        (Speaker::Assistant, "\"Rising Slowly\"?"),
        (Speaker::User, "What tags would you give it?"),
    ]);
    assert_eq!(signature(&input), None);
    let prompt = Input::Prompt {
        text: "Write a haiku about the sea.".into(),
        system: None,
        role: Role::User,
        images: Vec::new(),
    };
    assert_eq!(signature(&prompt), None);
}

#[test]
fn only_the_last_user_message_is_read_for_a_clients_task() {
    // A person who pasted a task template earlier in the chat, then asks
    // something else, is waiting for the answer.
    let Input::Chat(mut messages) = open_webui_title(None) else {
        unreachable!()
    };
    messages.push(Message::text(Speaker::Assistant, "{\"title\": \"Bread\"}"));
    messages.push(Message::text(
        Speaker::User,
        "Thanks! Now, how long do I knead?",
    ));
    assert_eq!(signature(&Input::Chat(messages)), None);
}

#[tokio::test]
async fn the_header_names_the_lane_and_the_field_wins_over_it() {
    assert_eq!(asked(None), Ok(None));
    let background = with_header(Some("background".into()), async { asked(None) }).await;
    assert_eq!(background, Ok(Some(Priority::Background)));
    let field_wins = with_header(Some("background".into()), async {
        asked(Some(Priority::Interactive))
    })
    .await;
    assert_eq!(field_wins, Ok(Some(Priority::Interactive)));
    let bad = with_header(Some("urgent".into()), async { asked(None) }).await;
    let (field, message) = bad.unwrap_err();
    assert_eq!(field, "X-Rkllm-Priority");
    assert!(
        message.contains("`interactive` or `background`"),
        "{message}"
    );
}
