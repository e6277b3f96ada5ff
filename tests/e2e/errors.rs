//! Bad input of every kind gets the right error, and the connection goes
//! on serving the next valid request.

use serde_json::{Value, json};

use crate::harness::{Server, Ws, mock_config};

/// (raw message, expected error code or `None` for "no answer", expected id)
fn malformed_inputs() -> Vec<(String, Option<i64>, Value)> {
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let big_prompt = "x".repeat(300 * 1024);
    vec![
        // Broken JSON: the id is still echoed when it can be read.
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":".into(), Some(-32700), json!(1)),
        ("not json at all".into(), Some(-32700), Value::Null),
        (deep, Some(-32700), Value::Null),
        ("\"just a string\"".into(), Some(-32600), Value::Null),
        ("[]".into(), Some(-32600), Value::Null),
        ("[1,2]".into(), Some(-32600), Value::Null),
        (r#"{"id":1,"method":"ping"}"#.into(), Some(-32600), json!(1)),
        (r#"{"jsonrpc":"1.0","id":"v","method":"ping"}"#.into(), Some(-32600), json!("v")),
        (r#"{"jsonrpc":"2.0","id":2,"method":5}"#.into(), Some(-32600), json!(2)),
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#.into(), Some(-32600), Value::Null),
        (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#.into(), Some(-32600), Value::Null),
        (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#.into(), Some(-32600), Value::Null),
        (r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":"x"}"#.into(), Some(-32600), json!(3)),
        (r#"{"jsonrpc":"2.0","id":4,"method":"no_such_method"}"#.into(), Some(-32601), json!(4)),
        (r#"{"jsonrpc":"2.0","id":"s","method":"resources/list"}"#.into(), Some(-32601), json!("s")),
        (r#"{"jsonrpc":"2.0","id":5,"method":"run","params":{}}"#.into(), Some(-32602), json!(5)),
        (r#"{"jsonrpc":"2.0","id":6,"method":"run","params":{"prompt":5}}"#.into(), Some(-32602), json!(6)),
        (r#"{"jsonrpc":"2.0","id":7,"method":"run","params":[1,2]}"#.into(), Some(-32602), json!(7)),
        (r#"{"jsonrpc":"2.0","id":8,"method":"run","params":{"prompt":"x","max_tokens":1e30}}"#.into(), Some(-32602), json!(8)),
        (r#"{"jsonrpc":"2.0","id":9,"method":"run","params":{"prompt":"x","max_tokens":0}}"#.into(), Some(-32602), json!(9)),
        (r#"{"jsonrpc":"2.0","id":10,"method":"run","params":{"prompt":"x","max_tokens":99999999999999999999999}}"#.into(), Some(-32602), json!(10)),
        (r#"{"jsonrpc":"2.0","id":11,"method":"run","params":{"prompt":"x","temperature":"hot"}}"#.into(), Some(-32602), json!(11)),
        (r#"{"jsonrpc":"2.0","id":12,"method":"run","params":{"prompt":"x","role":"system"}}"#.into(), Some(-32602), json!(12)),
        (r#"{"jsonrpc":"2.0","id":13,"method":"run","params":{"stream_id":"abcdefghijklmnop","wait_ms":99999}}"#.into(), Some(-32602), json!(13)),
        (r#"{"jsonrpc":"2.0","id":14,"method":"run","params":{"prompt":"x","model":"nope"}}"#.into(), Some(-32003), json!(14)),
        (format!(r#"{{"jsonrpc":"2.0","id":15,"method":"run","params":{{"prompt":"{big_prompt}"}}}}"#), Some(-32007), json!(15)),
        (r#"{"jsonrpc":"2.0","id":16,"method":"stream_status","params":{"stream_id":"zzzzzzzzzzzzzzzz"}}"#.into(), Some(-32001), json!(16)),
        (r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"nope"}"#.into(), Some(-32601), json!(18446744073709551615u64)),
        // A NUL cannot reach the runtime (C strings): refused before queueing.
        (r#"{"jsonrpc":"2.0","id":18,"method":"run","params":{"prompt":"a\u0000b"}}"#.into(), Some(-32602), json!(18)),
        // A JSON object that is no JSON-RPC message at all.
        (r#"{"foo":1}"#.into(), Some(-32600), Value::Null),
        (r#"{"jsonrpc":"2.0"}"#.into(), Some(-32600), Value::Null),
        (r#"{"jsonrpc":"2.0","method":"no_such_notification"}"#.into(), None, Value::Null),
        (r#"{"jsonrpc":"2.0","method":"run","params":5}"#.into(), None, Value::Null),
        (r#"{"jsonrpc":"1.0","method":"ping"}"#.into(), None, Value::Null),
        (r#"{"jsonrpc":"2.0","id":17,"result":{}}"#.into(), None, Value::Null),
    ]
}

fn check_error(input: &str, response: &Value, code: i64, id: &Value) {
    let short: String = input.chars().take(80).collect();
    assert_eq!(response["jsonrpc"], "2.0", "{short}: {response}");
    assert_eq!(response["error"]["code"], code, "{short}: {response}");
    assert!(
        response["error"]["message"].is_string(),
        "{short}: {response}"
    );
    assert_eq!(&response["id"], id, "{short}: {response}");
    if code == -32602 {
        assert!(
            response["error"]["data"]["field"].is_string(),
            "{short}: {response}"
        );
    }
}

#[tokio::test]
async fn every_malformed_input_over_websocket_gets_its_error_and_the_connection_goes_on() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let mut ws = Ws::connect(&server).await;
    for (input, code, id) in malformed_inputs() {
        ws.send_text(&input).await;
        // A ping right behind it: when nothing is due for the bad input,
        // the ping's answer is the next message.
        // Requests are served concurrently, so the two answers may come in
        // either order; the ping's is told apart by its id.
        let ping = ws.request("ping", json!({})).await;
        let expected = json!({"jsonrpc": "2.0", "id": ping, "result": {}});
        let mut answers = vec![ws.recv().await];
        if code.is_some() {
            answers.push(ws.recv().await);
        }
        let pongs = answers.iter().filter(|a| **a == expected).count();
        assert_eq!(pongs, 1, "after {input:.80}: {answers:?}");
        if let Some(code) = code {
            let response = answers.iter().find(|a| **a != expected).unwrap();
            check_error(&input, response, code, &id);
        }
    }
    let id = ws.request("run", json!({"prompt": "still fine"})).await;
    let response = ws.recv().await;
    assert_eq!(response["id"], id);
    assert_eq!(response["result"]["finish_reason"], "stop");
}

#[tokio::test]
async fn every_malformed_input_over_http_gets_its_error_and_status() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    for (input, code, id) in malformed_inputs() {
        let (status, body) = server.post_raw(input.clone()).await;
        match code {
            None => {
                assert_eq!(status, 202, "{input:.80}");
                assert!(body.is_empty(), "{input:.80}: {body}");
            }
            Some(code) => {
                let expected_status = if code == -32700 { 400 } else { 200 };
                assert_eq!(status, expected_status, "{input:.80}: {body}");
                check_error(&input, &serde_json::from_str(&body).unwrap(), code, &id);
            }
        }
        let pong = server.ok("ping", json!({})).await;
        assert_eq!(pong, json!({}));
    }
}

#[tokio::test]
async fn http_refuses_a_body_over_the_limit_and_invalid_utf8() {
    let server = Server::start(
        &mock_config(
            0.0,
            0,
            "[limits]\nmax_request_bytes = 4096\nmax_prompt_bytes = 1024\n",
        ),
        &[],
    );
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"run","params":{{"prompt":"{}"}}}}"#,
        "y".repeat(8000)
    );
    let (status, body) = server.post_raw(big).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        -32007
    );
    let (status, body) = server.post_raw(vec![b'{', 0xff, 0xfe, b'}']).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        -32700
    );
    let (status, _) = server
        .post_raw("\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}")
        .await;
    assert_eq!(status, 200, "a leading BOM is accepted");
}

#[tokio::test]
async fn ids_are_echoed_with_their_json_type() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    for id in [
        json!(0),
        json!("0"),
        json!(-7),
        json!("a-string"),
        json!(9007199254740993u64),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string();
        let (_, text) = server.post_raw(body).await;
        let response: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(response["id"], id, "{text}");
    }
}

#[tokio::test]
async fn unknown_stream_ids_are_not_found_everywhere() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let missing = json!({"stream_id": "abcdefghij012345"});
    assert_eq!(
        server.error_code("stream_status", missing.clone()).await,
        -32001
    );
    assert_eq!(server.error_code("abort", missing.clone()).await, -32001);
    assert_eq!(server.error_code("run", missing.clone()).await, -32001);
    let mut ws = Ws::connect(&server).await;
    ws.request("subscribe", missing).await;
    assert_eq!(ws.recv().await["error"]["code"], -32001);
}

#[tokio::test]
async fn an_expired_stream_answers_expired() {
    let server = Server::start(
        &mock_config(50.0, 0, "[streams]\nidle_timeout_secs = 1\n"),
        &[],
    );
    let started = server
        .ok(
            "run",
            json!({"prompt": "abandoned @mock(length=100000)", "stream": true}),
        )
        .await;
    let stream_id = started["stream_id"].as_str().unwrap();
    // Nobody polls: the stream expires after the idle timeout (bounded wait).
    let deadline = tokio::time::Instant::now() + crate::harness::LIVENESS;
    loop {
        let response = server
            .call("stream_status", json!({"stream_id": stream_id}))
            .await;
        if response["error"]["code"] == -32005 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never expired: {response}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        server
            .error_code("run", json!({"stream_id": stream_id, "from_seq": 0}))
            .await,
        -32005
    );
    // Its generation was aborted: the model serves the next request.
    let next = server
        .ok("run", json!({"prompt": "next @mock(length=3)"}))
        .await;
    assert_eq!(next["finish_reason"], "stop");
}

#[tokio::test]
async fn subscribe_over_http_is_refused_with_a_hint() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let started = server
        .ok("run", json!({"prompt": "x", "stream": true}))
        .await;
    let response = server
        .call(
            "subscribe",
            json!({"stream_id": started["stream_id"], "from_seq": 0}),
        )
        .await;
    assert_eq!(response["error"]["code"], -32600);
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("poll"),
        "{response}"
    );
}
