//! MCP 2026-07-28 over Streamable HTTP beside the handshake revisions: a
//! request carries its version and the client's capabilities in `_meta`
//! and needs no session; its headers must repeat its body (version,
//! method, the tool's name, `=?base64?…?=` for a name that is not ASCII);
//! the status follows the error (404 for a method the revision does not
//! have, 400 for a request its rules refuse); results are complete, name
//! the server and, for lists, can be cached. Errors a transport answers
//! before reading the request carry its id when it could be read.

use serde_json::{Value, json};

use crate::harness::{Server, mock_config};

const MODERN: &str = "2026-07-28";

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": MODERN,
           "io.modelcontextprotocol/clientCapabilities": {},
           "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}})
}

fn request(id: Value, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Posts `body` with the stateless revision's headers for it, changed by
/// `headers` (a value of `None` leaves that header out).
async fn post(server: &Server, body: &Value, headers: &[(&str, Option<&str>)]) -> (u16, Value) {
    let method = body["method"].as_str().unwrap_or_default().to_owned();
    let name = body["params"]["name"].as_str().map(str::to_owned);
    let mut sent: Vec<(String, String)> = vec![
        ("content-type".into(), "application/json".into()),
        (
            "accept".into(),
            "application/json, text/event-stream".into(),
        ),
        ("mcp-protocol-version".into(), MODERN.into()),
        ("mcp-method".into(), method),
    ];
    if let Some(name) = name {
        sent.push(("mcp-name".into(), name));
    }
    for (key, value) in headers {
        sent.retain(|(k, _)| k != key);
        if let Some(value) = value {
            sent.push(((*key).to_owned(), (*value).to_owned()));
        }
    }
    let mut call = server.http.post(server.mcp_url());
    for (k, v) in &sent {
        call = call.header(k, v);
    }
    let response = call.body(body.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn stateless_requests_need_no_session_and_their_headers_must_say_what_the_body_says() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);

    // `server/discover` tells the revisions; it needs no handshake.
    let (status, found) = post(
        &server,
        &request(json!(1), "server/discover", json!({})),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{found}");
    let result = &found["result"];
    assert_eq!(result["supportedVersions"][0], MODERN);
    assert_eq!(result["resultType"], "complete");
    assert!(
        result["instructions"]
            .as_str()
            .unwrap()
            .contains("`generate` tool")
    );

    // A list can be cached and names the server; a session id is not read.
    let list = request(json!("l"), "tools/list", json!({}));
    let (status, listed) = post(&server, &list, &[("mcp-session-id", Some("0000"))]).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["id"], "l");
    assert_eq!(listed["result"]["tools"][0]["name"], "generate");
    assert_eq!(listed["result"]["resultType"], "complete");
    assert_eq!(listed["result"]["cacheScope"], "public");
    assert!(listed["result"]["ttlMs"].as_u64().unwrap() > 0);
    assert_eq!(
        listed["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "rkllm-server"
    );

    // A call, its name in `Mcp-Name` as is or in base64.
    let call = request(
        json!(3),
        "tools/call",
        json!({"name": "generate", "arguments": {"prompt": "hi", "max_tokens": 3}}),
    );
    let (status, called) = post(&server, &call, &[]).await;
    assert_eq!(status, 200, "{called}");
    assert_eq!(called["result"]["isError"], false);
    assert_eq!(called["result"]["resultType"], "complete");
    let encoded = [("mcp-name", Some("=?base64?Z2VuZXJhdGU=?="))];
    assert_eq!(post(&server, &call, &encoded).await.0, 200);

    // Headers that do not say what the body says: 400, -32020, the id.
    for headers in [
        vec![("mcp-name", Some("other"))],
        vec![("mcp-name", None)],
        vec![("mcp-name", Some("=?base64?not base64!?="))],
        vec![("mcp-method", Some("tools/list"))],
        vec![("mcp-method", Some("TOOLS/CALL"))],
        vec![("mcp-protocol-version", Some("2025-11-25"))],
    ] {
        let (status, refused) = post(&server, &call, &headers).await;
        assert_eq!(
            (status, &refused["error"]["code"]),
            (400, &json!(-32020)),
            "{headers:?}: {refused}"
        );
        assert_eq!(refused["id"], 3);
    }
    // White space around a value is not part of it.
    assert_eq!(
        post(&server, &call, &[("mcp-method", Some("  tools/call "))])
            .await
            .0,
        200
    );

    // `_meta` without the client's capabilities: -32602; another version:
    // -32022 with the versions spoken.
    let mut bare = list.clone();
    bare["params"]["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": MODERN});
    let (status, refused) = post(&server, &bare, &[]).await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (400, &json!(-32602)),
        "{refused}"
    );
    let mut later = list.clone();
    later["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let (status, refused) = post(
        &server,
        &later,
        &[("mcp-protocol-version", Some("2099-01-01"))],
    )
    .await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (400, &json!(-32022)),
        "{refused}"
    );
    assert_eq!(refused["error"]["data"]["requested"], "2099-01-01");
    assert_eq!(refused["id"], "l");

    // The handshake's methods are not this revision's: 404, -32601.
    for method in ["initialize", "ping", "no/such"] {
        let (status, missing) = post(&server, &request(json!(9), method, json!({})), &[]).await;
        assert_eq!(
            (status, &missing["error"]["code"]),
            (404, &json!(-32601)),
            "{method}"
        );
    }
    // No sessions to end.
    let delete = server
        .http
        .delete(server.mcp_url())
        .header("mcp-protocol-version", MODERN)
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 405);

    // The handshake revisions go on: `initialize` opens a session, and its
    // instructions name the tool there is.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}});
    let response = server
        .http
        .post(server.mcp_url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert!(response.headers().contains_key("mcp-session-id"));
    let body: Value = response.json().await.unwrap();
    let instructions = body["result"]["instructions"].as_str().unwrap();
    assert!(instructions.contains("`generate` tool") && !instructions.contains("`run`"));
}

#[tokio::test]
async fn transport_errors_carry_the_requests_id_when_it_can_be_read() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}).to_string();
    let send = |headers: Vec<(&'static str, &'static str)>, body: String| {
        let mut call = server.http.post(server.mcp_url());
        for (k, v) in headers {
            call = call.header(k, v);
        }
        async move {
            let response = call.body(body).send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let json_accept = || {
        vec![
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ]
    };
    for (headers, status) in [
        (vec![("mcp-protocol-version", "1999-01-01")], 400),
        (
            vec![("mcp-session-id", "00000000000000000000000000000000")],
            404,
        ),
        (vec![("accept", "text/html")], 406),
        (vec![("content-type", "text/plain")], 415),
    ] {
        let mut all = json_accept();
        for (k, v) in headers {
            all.retain(|(key, _)| *key != k);
            all.push((k, v));
        }
        let (got, body) = send(all.clone(), ping.clone()).await;
        assert_eq!(got, status, "{all:?}: {body}");
        assert_eq!(body["id"], 7, "{all:?}: {body}");
    }
    // An id that cannot be read is left out, never null.
    let mut unknown = json_accept();
    unknown.push(("mcp-session-id", "00000000000000000000000000000000"));
    let (status, body) = send(unknown, "{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}".into()).await;
    assert_eq!(status, 404);
    assert!(body.get("id").is_none(), "{body}");
}
