//! The Responses API against hostile clients: a key that names another
//! key's response, and zstd bodies made to cost the server work.

use serde_json::{Value, json};

use crate::harness::{Server, mock_config};

/// `POST path` with `body` as JSON and `key` as a bearer token: the status
/// and the body as JSON.
async fn post(server: &Server, path: &str, body: Value, key: &str) -> (u16, Value) {
    let response = server
        .send(reqwest::Method::POST, path, Some(body), Some(key))
        .await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// The text of a finished response's first message.
fn text(response: &Value) -> &str {
    response["output"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["type"] == "message"))
        .and_then(|m| m["content"][0]["text"].as_str())
        .unwrap_or_else(|| panic!("no message in {response}"))
}

#[tokio::test]
async fn a_key_cannot_continue_another_keys_response_and_cannot_tell_it_from_an_unknown_one() {
    let server = Server::start(
        &mock_config(0.0, 0, ""),
        &["--api-key", "key-a", "--api-key", "key-b"],
    );
    let secret = "pineapple";
    let (status, first) = post(
        &server,
        "/v1/responses",
        json!({"model": "mock", "input": format!("Keep this: @mock(echo=1) {secret}")}),
        "key-a",
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert!(text(&first).contains(secret), "{first}");
    let id = first["id"].as_str().unwrap().to_owned();

    // B names A's response, by either header B may send its key in: the
    // same refusal as for an id never made, and nothing of A's.
    let never_made = format!("resp_{}", "x".repeat(id.len() - "resp_".len()));
    let (status, unknown) = post(
        &server,
        "/v1/responses",
        json!({"model": "mock", "input": "Go on.", "previous_response_id": never_made}),
        "key-b",
    )
    .await;
    assert_eq!(status, 400, "{unknown}");
    assert_eq!(unknown["error"]["param"], "previous_response_id");
    let as_unknown = unknown.to_string().replace(&never_made, &id);
    for path in ["/v1/responses", "/v1/responses/input_tokens"] {
        let body = json!({"model": "mock", "input": "Go on.", "previous_response_id": id});
        let (status, foreign) = post(&server, path, body.clone(), "key-b").await;
        assert_eq!(status, 400, "{foreign}");
        assert_eq!(foreign.to_string(), as_unknown, "{path}");
        assert!(!foreign.to_string().contains(secret), "{foreign}");

        let response = server
            .http
            .post(format!("http://{}{path}", server.addr))
            .header("x-api-key", "key-b")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
        assert_eq!(response.text().await.unwrap(), as_unknown, "{path}");
    }
    // Streaming too: refused before any event.
    let (status, streamed) = post(
        &server,
        "/v1/responses",
        json!({"model": "mock", "input": "Go on.", "previous_response_id": id, "stream": true}),
        "key-b",
    )
    .await;
    assert_eq!((status, streamed.to_string()), (400, as_unknown.clone()));

    // A still continues its own response, with its conversation.
    let (status, second) = post(
        &server,
        "/v1/responses",
        json!({"model": "mock", "input": "And again.", "previous_response_id": id}),
        "key-a",
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["previous_response_id"], id.as_str());
    assert!(text(&second).contains(secret), "{second}");
    // And B's own responses are B's.
    let (status, own) = post(
        &server,
        "/v1/responses",
        json!({"model": "mock", "input": "mine @mock(length=3)"}),
        "key-b",
    )
    .await;
    assert_eq!(status, 200, "{own}");
    let (status, counted) = post(
        &server,
        "/v1/responses/input_tokens",
        json!({"model": "mock", "input": "more", "previous_response_id": own["id"]}),
        "key-b",
    )
    .await;
    assert_eq!(status, 200, "{counted}");
    let (status, _) = post(
        &server,
        "/v1/responses/input_tokens",
        json!({"model": "mock", "input": "more", "previous_response_id": own["id"]}),
        "key-a",
    )
    .await;
    assert_eq!(status, 400);
}

/// A zstd frame holding `content` in one raw block (no content size, a
/// 1 KiB window).
fn raw_frame(content: &[u8]) -> Vec<u8> {
    assert!(content.len() <= 1024);
    let header = (u32::try_from(content.len()).unwrap() << 3) | 1;
    [
        &[0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00][..],
        &header.to_le_bytes()[..3],
        content,
    ]
    .concat()
}

/// Posts `body` as a zstd-compressed Responses request: status and JSON.
async fn post_zstd(server: &Server, body: Vec<u8>) -> (u16, Value) {
    let response = server
        .http
        .post(format!("http://{}/v1/responses", server.addr))
        .header("content-type", "application/json")
        .header("content-encoding", "zstd")
        .body(body)
        .send()
        .await
        .expect("POST /v1/responses");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test]
async fn a_zstd_body_of_many_empty_frames_or_blocks_is_refused_naming_the_bound() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let request = json!({"model": "mock", "input": "hello @mock(length=3)"}).to_string();
    let (status, answer) = post_zstd(&server, raw_frame(request.as_bytes())).await;
    assert_eq!(status, 200, "{answer}");

    // The request, then 116,000 empty frames: about a megabyte, under the
    // body limit, that decodes to the same request.
    let mut frames = raw_frame(request.as_bytes());
    frames.extend(raw_frame(b"").repeat(116_000));
    assert!(frames.len() < 1 << 20);
    let (status, refused) = post_zstd(&server, frames).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "body");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("more than 64 frames"), "{message}");

    // One frame of the request's block after 300,000 empty raw blocks.
    let mut blocks = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00];
    blocks.extend([0u8; 3].repeat(300_000));
    blocks.extend(&raw_frame(request.as_bytes())[6..]);
    let (status, refused) = post_zstd(&server, blocks).await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("more than 1024 blocks"), "{message}");

    // The server still answers.
    let (status, answer) = post_zstd(&server, raw_frame(request.as_bytes())).await;
    assert_eq!(status, 200, "{answer}");
}
