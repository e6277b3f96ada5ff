//! Classifies one parsed JSON value as a request, a notification, a
//! response (ignored) or an invalid message, and writes responses.
//!
//! Rules (PROTOCOL §2): ids are strings or integers and are echoed with
//! their JSON type; a message with a `method` and without `id` is a
//! notification and is never answered, even when invalid; an invalid
//! request (an object without `method`, too) is answered with the id when
//! it can be read, else `null`.

use serde::Serialize;
use serde_json::{Map, Value};

use super::RpcError;

/// One incoming JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: answer it.
    Request {
        /// Echoed verbatim.
        id: Value,
        /// Method name.
        method: String,
        /// `params`, if any (an object or an array).
        params: Option<Value>,
    },
    /// A notification: act on it, never answer.
    Notification {
        /// Method name.
        method: String,
        /// `params`, if any.
        params: Option<Value>,
    },
    /// A response from the peer: never answered.
    Response,
    /// Not a valid message. `answer` is false for broken notifications.
    Invalid {
        /// The id when it could be read, else `null`.
        id: Value,
        /// The error to send.
        error: RpcError,
        /// Whether an answer is due (false for notifications).
        answer: bool,
    },
}

fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// Classifies a parsed message.
pub fn classify(value: Value) -> Incoming {
    let Value::Object(mut obj) = value else {
        return Incoming::Invalid {
            id: Value::Null,
            error: RpcError::invalid_request("a message must be a JSON object"),
            answer: true,
        };
    };
    let id = obj.remove("id");
    let has_method = obj.contains_key("method");
    if !has_method {
        if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) {
            return Incoming::Response;
        }
        // Without `method` it is no notification either: always answered.
        return Incoming::Invalid {
            id: id.filter(valid_id).unwrap_or(Value::Null),
            error: RpcError::invalid_request("not a JSON-RPC 2.0 message: missing `method`"),
            answer: true,
        };
    }
    if let Some(id) = &id {
        if !valid_id(id) {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::invalid_request("`id` must be a string or an integer"),
                answer: true,
            };
        }
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id, "`jsonrpc` must be \"2.0\"");
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        _ => return invalid(id, "`method` must be a string"),
    };
    let params = match obj.remove("params") {
        None => None,
        Some(p @ (Value::Object(_) | Value::Array(_))) => Some(p),
        Some(_) => return invalid(id, "`params` must be an object or an array"),
    };
    match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    }
}

fn invalid(id: Option<Value>, detail: &str) -> Incoming {
    let answer = id.is_some();
    Incoming::Invalid {
        id: id.filter(valid_id).unwrap_or(Value::Null),
        error: RpcError::invalid_request(detail),
        answer,
    }
}

#[derive(Serialize)]
struct Response<'a, T: Serialize> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

/// A success response as compact JSON.
pub fn success_response(id: &Value, result: &impl Serialize) -> String {
    serde_json::to_string(&Response {
        jsonrpc: "2.0",
        id,
        result: Some(result),
        error: None,
    })
    .unwrap_or_else(|e| {
        error_response(
            id,
            &RpcError::new(super::codes::INTERNAL_ERROR, e.to_string()),
        )
    })
}

/// An error response as compact JSON.
pub fn error_response(id: &Value, error: &RpcError) -> String {
    let response: Response<'_, ()> = Response {
        jsonrpc: "2.0",
        id,
        result: None,
        error: Some(error),
    };
    serde_json::to_string(&response).unwrap_or_else(|_| {
        String::from(
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error"}}"#,
        )
    })
}

/// Bytes of a bad input kept for logs and messages.
pub const PREVIEW_BYTES: usize = 64;

/// A short, printable preview of bad input for logs.
pub fn preview(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(PREVIEW_BYTES)];
    let mut text: String = String::from_utf8_lossy(cut)
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .collect();
    if bytes.len() > PREVIEW_BYTES {
        text.push('…');
    }
    text
}

/// Reads the `"id"` of a message that is not valid JSON, when it stands
/// as `"id": <integer or simple string>` in the broken text.
pub fn recover_id(text: &str) -> Option<Value> {
    let at = text.find("\"id\"")?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(quoted) = rest.strip_prefix('"') {
        let end = quoted.find(['"', '\\'])?;
        return (quoted.as_bytes()[end] == b'"').then(|| Value::String(quoted[..end].to_owned()));
    }
    let digits = rest
        .char_indices()
        .take_while(|&(i, c)| c.is_ascii_digit() || (i == 0 && c == '-'))
        .count();
    rest[..digits].parse::<i64>().ok().map(Value::from)
}

/// The params object, or an empty one when absent; arrays are refused.
pub(super) fn params_object(params: Option<Value>) -> Result<Map<String, Value>, RpcError> {
    match params {
        None => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map),
        Some(_) => Err(RpcError::invalid_params(
            "params",
            "`params` must be an object for this method",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","id":0,"method":"ping"})),
            Incoming::Request { id, .. } if id == json!(0)
        ));
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","method":"notifications/initialized"})),
            Incoming::Notification { .. }
        ));
        assert_eq!(
            classify(json!({"jsonrpc":"2.0","id":3,"result":{}})),
            Incoming::Response
        );
    }

    #[test]
    fn bad_ids_are_answered_with_a_null_id() {
        for id in [json!(1.5), json!({}), json!([1]), json!(null), json!(true)] {
            match classify(json!({"jsonrpc":"2.0","id":id,"method":"ping"})) {
                Incoming::Invalid { id, error, answer } => {
                    assert_eq!(id, Value::Null);
                    assert_eq!(error.code, -32600);
                    assert!(answer);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_broken_notification_is_not_answered() {
        match classify(json!({"jsonrpc":"1.0","method":"x"})) {
            Incoming::Invalid { answer, .. } => assert!(!answer),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_object_that_is_no_message_is_answered_as_an_invalid_request() {
        for value in [json!({"foo": 1}), json!({}), json!({"jsonrpc": "2.0"})] {
            match classify(value) {
                Incoming::Invalid { id, error, answer } => {
                    assert_eq!((id, error.code, answer), (Value::Null, -32600, true));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn ids_are_recovered_from_broken_text_when_plain() {
        assert_eq!(
            recover_id(r#"{"jsonrpc":"2.0","id":42,"method":"#),
            Some(json!(42))
        );
        assert_eq!(
            recover_id(r#"{"id" : "abc", "method": [}"#),
            Some(json!("abc"))
        );
        assert_eq!(recover_id(r#"{"id":-3,"#), Some(json!(-3)));
        assert_eq!(recover_id(r#"{"id":"a\"b"}"#), None);
        assert_eq!(recover_id(r#"{"method":"x""#), None);
        assert_eq!(recover_id("garbage"), None);
    }

    #[test]
    fn responses_echo_the_id_type() {
        assert_eq!(
            success_response(&json!("7"), &json!({})),
            r#"{"jsonrpc":"2.0","id":"7","result":{}}"#
        );
        assert_eq!(
            error_response(&json!(7), &RpcError::method_not_found("x")),
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found: x"}}"#
        );
    }
}
