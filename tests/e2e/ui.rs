//! The chat page's HTTP side: its files, their security headers and
//! caching, the page open while the APIs need a key, `[ui] enabled =
//! false`, and the echo directive the browser tests rely on. The page
//! itself runs in headless Chromium in `tests/python/test_ui.py`.

use serde_json::json;

use crate::harness::{Server, mock_config};

async fn get(server: &Server, path: &str) -> reqwest::Response {
    server
        .http
        .get(format!("http://{}{path}", server.addr))
        .send()
        .await
        .expect("GET")
}

#[tokio::test]
async fn the_page_and_its_files_are_served_with_a_strict_policy_and_etags() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    for (path, kind, needle) in [
        (
            "/",
            "text/html",
            "<script type=\"module\" src=\"/ui/app.js\">",
        ),
        ("/ui/app.js", "text/javascript", "import { renderMarkdown }"),
        (
            "/ui/markdown.js",
            "text/javascript",
            "export function renderMarkdown",
        ),
        ("/ui/app.css", "text/css", "prefers-color-scheme: dark"),
        ("/ui/icon.svg", "image/svg+xml", "<svg"),
    ] {
        let response = get(&server, path).await;
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        let header = |name: &str| {
            headers
                .get(name)
                .unwrap_or_else(|| panic!("{path}: no {name}"))
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert!(header("content-type").starts_with(kind), "{path}");
        let policy = header("content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(policy.contains(directive), "{path}: {policy}");
        }
        assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"));
        assert_eq!(header("x-frame-options"), "DENY");
        assert_eq!(header("x-content-type-options"), "nosniff");
        let etag = header("etag");
        let body = response.text().await.unwrap();
        assert!(body.contains(needle), "{path}");

        // The browser's copy is current: 304, no body.
        let again = server
            .http
            .get(format!("http://{}{path}", server.addr))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path}");
        assert!(again.text().await.unwrap().is_empty());
    }
    assert_eq!(get(&server, "/ui/nothing.js").await.status(), 404);
}

#[tokio::test]
async fn with_api_keys_the_page_is_open_and_the_apis_it_calls_are_not() {
    let server = Server::start(&mock_config(0.0, 0, ""), &["--api-key", "k1"]);
    assert_eq!(get(&server, "/").await.status(), 200);
    assert_eq!(get(&server, "/ui/app.js").await.status(), 200);
    assert_eq!(get(&server, "/v1/models").await.status(), 401);
    assert_eq!(get(&server, "/metrics").await.status(), 401);
    assert_eq!(get(&server, "/ready").await.status(), 200);
}

#[tokio::test]
async fn with_the_page_switched_off_its_paths_are_404() {
    let server = Server::start(&mock_config(0.0, 0, "[ui]\nenabled = false"), &[]);
    for path in ["/", "/ui/app.js", "/ui/app.css"] {
        assert_eq!(get(&server, path).await.status(), 404, "{path}");
    }
    // The APIs are unaffected.
    assert_eq!(get(&server, "/v1/models").await.status(), 200);
}

#[tokio::test]
async fn v1_models_reports_each_models_load_state() {
    let server = Server::start(
        &mock_config(0.0, 0, "[[models]]\nname = \"a\"\n[[models]]\nname = \"b\""),
        &[],
    );
    let states = |list: serde_json::Value| {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["id"].as_str().unwrap().to_owned(), m["state"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        states(server.get_json("/v1/models", None).await),
        [
            ("a".into(), json!("available")),
            ("b".into(), json!("available"))
        ]
    );
    server
        .ok(
            "run",
            json!({"model": "b", "prompt": "hi", "max_tokens": 2}),
        )
        .await;
    assert_eq!(
        states(server.get_json("/v1/models", None).await),
        [
            ("a".into(), json!("available")),
            ("b".into(), json!("loaded"))
        ]
    );
}

#[tokio::test]
async fn the_echo_directive_repeats_the_text_after_it_and_max_tokens_cuts_it() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let said = "<script>alert(1)</script> **bold** é 🙂";
    let chat = |max_tokens: u32| {
        json!({"messages": [{"role": "user", "content": format!("x @mock(echo=1) {said}")}],
               "max_tokens": max_tokens})
    };
    let answer = |max_tokens| server.post_json("/v1/chat/completions", chat(max_tokens));
    let reply = answer(500).await;
    assert_eq!(reply["choices"][0]["message"]["content"], said);
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    let cut = answer(3).await;
    let text = cut["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(said.starts_with(text) && text.len() < said.len(), "{text}");
    assert_eq!(cut["choices"][0]["finish_reason"], "length");
    assert_eq!(cut["usage"]["completion_tokens"], 3);
}
