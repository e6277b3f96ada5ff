//! A web page must never drive the server, keys or not: a cross-site
//! `Origin` (the "simple" text/plain POST a page may send without CORS)
//! and a rebound `Host` are refused on every route, while the chat page,
//! clients without `Origin` and the names an operator lists keep working.

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{Server, mock_config};

const EVIL_ORIGIN: &str = "http://evil.example";

/// Every route that changes state or starts work, with a body that would
/// do it.
fn state_changing() -> Vec<(Method, &'static str, Value)> {
    let chat = json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}],
                      "stream": false});
    vec![
        (
            Method::POST,
            "/mcp",
            json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": {"prompt": "hi"}}),
        ),
        (Method::POST, "/v1/chat/completions", chat.clone()),
        (
            Method::POST,
            "/v1/completions",
            json!({"model": "mock", "prompt": "hi"}),
        ),
        (
            Method::POST,
            "/v1/embeddings",
            json!({"model": "mock", "input": "hi"}),
        ),
        (Method::POST, "/api/chat", chat),
        (
            Method::POST,
            "/api/generate",
            json!({"model": "mock", "prompt": "hi", "stream": false}),
        ),
        (
            Method::POST,
            "/api/embed",
            json!({"model": "mock", "input": "hi"}),
        ),
        (
            Method::POST,
            "/api/embeddings",
            json!({"model": "mock", "prompt": "hi"}),
        ),
        (
            Method::POST,
            "/api/pull",
            json!({"model": "owner/repo", "stream": false}),
        ),
        (Method::DELETE, "/api/delete", json!({"model": "mock"})),
        (Method::POST, "/api/show", json!({"model": "mock"})),
    ]
}

/// Every route that reads something.
const READING: &[&str] = &[
    "/v1/models",
    "/api/tags",
    "/api/ps",
    "/api/version",
    "/metrics",
    "/health",
    "/ready",
    "/",
    "/ui/app.js",
];

async fn send(
    server: &Server,
    method: Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = server
        .http
        .request(method, format!("http://{}{path}", server.addr));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        // What a page can send without a CORS preflight.
        request = request
            .header("content-type", "text/plain")
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn generations(server: &Server) -> Option<String> {
    server
        .metrics_text()
        .await
        .lines()
        .find(|l| l.starts_with("rkllm_generations_total"))
        .map(str::to_owned)
}

#[tokio::test]
async fn a_cross_site_page_can_neither_change_nor_start_anything() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let before = generations(&server).await;
    for (method, path, body) in state_changing() {
        let (status, error) = send(
            &server,
            method.clone(),
            path,
            Some(&body),
            &[("origin", EVIL_ORIGIN), ("sec-fetch-site", "cross-site")],
        )
        .await;
        assert_eq!(status, 403, "{method} {path}: {error}");
        let text = error.to_string();
        assert!(
            text.contains("allowed_origins") && text.contains(EVIL_ORIGIN),
            "{method} {path}: {text}"
        );
    }
    // Nothing ran and nothing changed: the model is still there, no
    // generation was counted.
    assert_eq!(generations(&server).await, before);
    let tags = server.get_json("/api/tags", None).await;
    assert_eq!(tags["models"][0]["name"], "mock", "{tags}");
    // The same requests from the server's own page, and from clients that
    // send no Origin (curl, the SDKs, Open WebUI's backend), are served.
    let own = format!("http://{}", server.addr);
    for origin in [Some(own.as_str()), None] {
        let headers: Vec<(&str, &str)> = origin.map(|o| ("origin", o)).into_iter().collect();
        let (status, body) = send(
            &server,
            Method::POST,
            "/v1/chat/completions",
            Some(&json!({"messages": [{"role": "user", "content": "hi"}]})),
            &headers,
        )
        .await;
        assert_eq!(status, 200, "{origin:?}: {body}");
        assert!(body["choices"][0]["message"]["content"].is_string());
    }
}

#[tokio::test]
async fn a_rebound_host_reads_nothing() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let rebound = format!("evil.example:{}", server.addr.port());
    for path in READING {
        let (status, body) = send(&server, Method::GET, path, None, &[("host", &rebound)]).await;
        assert_eq!(status, 403, "{path}: {body}");
    }
    for (method, path, body) in state_changing() {
        let (status, error) = send(
            &server,
            method.clone(),
            path,
            Some(&body),
            &[("host", &rebound)],
        )
        .await;
        assert_eq!(status, 403, "{method} {path}: {error}");
        assert!(
            error.to_string().contains("allowed_hosts"),
            "{method} {path}: {error}"
        );
    }
    // The WebSocket too.
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = server.ws_url().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("host", rebound.parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request).await.is_err());
    // Names that are this server's: its address, localhost, IP literals.
    let port = server.addr.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("192.168.1.5:{port}"),
        format!("[::1]:{port}"),
    ] {
        for path in READING {
            let (status, body) = send(&server, Method::GET, path, None, &[("host", &host)]).await;
            assert_eq!(status, 200, "{host} {path}: {body}");
        }
    }
}

#[tokio::test]
async fn listed_hosts_and_origins_pass_the_guard() {
    let config = mock_config(
        0.0,
        0,
        "[http]\nallowed_hosts = [\"llm.lan\"]\nallowed_origins = [\"http://webui.lan\"]\n",
    );
    let server = Server::start(&config, &[]);
    // A balancer's name.
    let (status, body) = send(
        &server,
        Method::GET,
        "/v1/models",
        None,
        &[("host", "llm.lan:8080")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A listed site, on any port.
    let (status, body) = send(
        &server,
        Method::POST,
        "/api/generate",
        Some(&json!({"model": "mock", "prompt": "hi", "stream": false})),
        &[("origin", "http://webui.lan:3000")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["response"].is_string(), "{body}");
    // The older [mcp] names still count.
    let legacy = Server::start(
        &mock_config(0.0, 0, "[mcp]\nallowed_hosts = [\"old.lan\"]\n"),
        &[],
    );
    let (status, _) = send(
        &legacy,
        Method::GET,
        "/api/tags",
        None,
        &[("host", "old.lan")],
    )
    .await;
    assert_eq!(status, 200);
}
