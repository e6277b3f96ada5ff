//! MCP 2026-07-28, the stateless revision, served beside the handshake
//! revisions. A request whose `params._meta` names a protocol version is
//! of this revision: it needs no `initialize` and no session, carries the
//! client's capabilities itself, and is answered with a result that says
//! it is complete (`resultType`) and names the server in its `_meta`. Lists
//! carry caching hints (`ttlMs`, `cacheScope`). `server/discover` tells a
//! client which revisions the server speaks (it answers in either era: it
//! is how a client finds out). `initialize`, `ping` and
//! `logging/setLevel` are not methods of this revision.
//!
//! The server asks a client for nothing (no sampling, elicitation or
//! roots), so no result is ever `input_required` and no request needs a
//! client capability.

use serde_json::{Map, Value, json};

use super::context::{Handled, raw};
use super::{PROTOCOL_VERSIONS, RpcError};

/// The revision.
pub const MODERN: &str = "2026-07-28";

/// `_meta` key of the request's protocol version.
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client's capabilities.
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of the server's name and version in a result.
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The server's own extension, as the stateless revision declares
/// extensions (`capabilities.extensions`): JSON-RPC streaming, the
/// methods that start and read a stream by its `stream_id` (docs/protocol.md).
/// The handshake revisions' `initialize` says the same as
/// `capabilities.streaming`.
pub const STREAMING_EXTENSION: &str = "rkllm-server/streaming";

/// How long a client may keep the tool list: the tools never change while
/// the server runs.
const LIST_TTL_MS: u64 = 3_600_000;

/// This revision's error codes.
pub mod codes {
    /// A header does not say what the body says (or is missing).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// The request needs a capability the client did not declare.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// The request's protocol version is not spoken here.
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// Every revision the server speaks, newest first.
pub fn supported_versions() -> Vec<&'static str> {
    std::iter::once(MODERN)
        .chain(PROTOCOL_VERSIONS.iter().copied())
        .collect()
}

/// The protocol version a request's `_meta` names: set for a request of
/// the stateless revision (or of one the server does not speak).
pub fn requested_version(params: Option<&Value>) -> Option<&str> {
    params?.get("_meta")?.get(META_VERSION)?.as_str()
}

/// The refusal of a version the server does not speak.
///
/// An earlier revision the server speaks in sessions is not called
/// unsupported: the message says where it is spoken.
pub fn unsupported_version(requested: &str) -> RpcError {
    let message = if PROTOCOL_VERSIONS.contains(&requested) {
        format!(
            "protocol version `{requested}` is spoken in sessions (after `initialize`), not in a \
             request that carries its version in `_meta`; such a request must name {MODERN}"
        )
    } else {
        format!(
            "unsupported protocol version `{requested}`; supported: {}",
            supported_versions().join(", ")
        )
    };
    RpcError::new(codes::UNSUPPORTED_VERSION, message)
        .with_data(json!({"supported": supported_versions(), "requested": requested}))
}

/// Checks that a stateless request's `_meta` carries what the revision
/// asks of every request: the protocol version (a string) and the
/// client's capabilities (an object).
///
/// # Errors
/// -32602 naming what is missing.
pub fn check_meta_shape(params: Option<&Value>) -> Result<(), RpcError> {
    let meta = params.and_then(|p| p.get("_meta"));
    let missing = |what: &str| {
        Err(RpcError::invalid_params(
            "_meta",
            format!("`_meta` must carry `{what}` in {MODERN}"),
        ))
    };
    if !meta
        .and_then(|m| m.get(META_VERSION))
        .is_some_and(Value::is_string)
    {
        return missing(META_VERSION);
    }
    if !meta
        .and_then(|m| m.get(META_CAPABILITIES))
        .is_some_and(Value::is_object)
    {
        return missing(META_CAPABILITIES);
    }
    Ok(())
}

/// Checks a stateless request's `_meta`: its shape
/// ([`check_meta_shape`]), then a version of this revision.
///
/// # Errors
/// -32602 for a field missing; -32022 for another version.
pub fn check_meta(params: Option<&Value>) -> Result<(), RpcError> {
    check_meta_shape(params)?;
    let version = requested_version(params).unwrap_or_default();
    if version != MODERN {
        return Err(unsupported_version(version));
    }
    Ok(())
}

fn server_info() -> Value {
    json!({"name": "rkllm-server", "version": env!("CARGO_PKG_VERSION")})
}

/// What a host may tell its model of the server.
pub const INSTRUCTIONS: &str = "Generates text on a Rockchip NPU. Call the `generate` tool \
                                with a prompt; with a progress token, each new fragment of the \
                                answer arrives as a progress notification.";

/// `server/discover`'s result: the revisions, the capabilities (tools
/// only) and the instructions.
pub(super) fn discover() -> Result<Handled, RpcError> {
    let mut result = json!({
        "supportedVersions": supported_versions(),
        "capabilities": {
            "tools": {"listChanged": false},
            "extensions": {STREAMING_EXTENSION: {
                "methods": ["run", "subscribe", "stream_status", "abort"],
            }},
        },
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "public",
    });
    complete(&mut result);
    super::context::done(&result)
}

/// Marks `result` complete and names the server in its `_meta`.
fn complete(result: &mut Value) {
    if let Value::Object(map) = result {
        map.insert("resultType".into(), json!("complete"));
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(META_SERVER_INFO.into(), server_info());
        }
    }
}

/// A method's result as this revision answers it: complete, the server
/// named, and with caching hints when it is a list.
///
/// # Errors
/// A result that cannot be encoded again (never, for the methods here).
pub(super) fn answer(handled: Handled, list: bool) -> Result<Handled, RpcError> {
    let mut result: Value = serde_json::from_str(handled.result.get()).map_err(|e| {
        RpcError::new(
            super::codes::INTERNAL_ERROR,
            format!("cannot read the result: {e}"),
        )
    })?;
    complete(&mut result);
    if list && let Value::Object(map) = &mut result {
        map.insert("ttlMs".into(), json!(LIST_TTL_MS));
        map.insert("cacheScope".into(), json!("public"));
    }
    Ok(Handled {
        result: raw(&result)?,
        ..handled
    })
}

/// The methods the handshake revisions have and this one does not.
pub(super) fn removed(method: &str) -> bool {
    matches!(
        method,
        "initialize" | "ping" | "logging/setLevel" | "notifications/initialized"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stateless_request_needs_this_version_and_the_clients_capabilities() {
        let meta = |meta: Value| Some(json!({"_meta": meta}));
        assert_eq!(
            requested_version(meta(json!({META_VERSION: MODERN})).as_ref()),
            Some(MODERN)
        );
        assert_eq!(requested_version(Some(&json!({"name": "x"}))), None);
        let ok = meta(json!({META_VERSION: MODERN, META_CAPABILITIES: {}}));
        assert!(check_meta(ok.as_ref()).is_ok());
        let other =
            check_meta(meta(json!({META_VERSION: "2099-01-01", META_CAPABILITIES: {}})).as_ref())
                .unwrap_err();
        assert_eq!(other.code, codes::UNSUPPORTED_VERSION);
        assert_eq!(other.data.as_ref().unwrap()["requested"], "2099-01-01");
        assert_eq!(other.data.as_ref().unwrap()["supported"][0], MODERN);
        assert!(
            other
                .message
                .contains("unsupported protocol version `2099-01-01`")
        );
        // A revision spoken in sessions is never called unsupported.
        let earlier = PROTOCOL_VERSIONS[0];
        let session =
            check_meta(meta(json!({META_VERSION: earlier, META_CAPABILITIES: {}})).as_ref())
                .unwrap_err();
        assert_eq!(session.code, codes::UNSUPPORTED_VERSION);
        assert!(
            !session.message.contains("unsupported"),
            "{}",
            session.message
        );
        assert!(session.message.contains(MODERN), "{}", session.message);
        let bare = check_meta(meta(json!({META_VERSION: MODERN})).as_ref()).unwrap_err();
        assert_eq!(bare.code, super::super::codes::INVALID_PARAMS);
    }

    #[test]
    fn discover_declares_the_streaming_extension() {
        let handled = discover().unwrap();
        let value: Value = serde_json::from_str(handled.result.get()).unwrap();
        let methods = &value["capabilities"]["extensions"][STREAMING_EXTENSION]["methods"];
        assert_eq!(methods[0], "run");
        assert_eq!(value["supportedVersions"][0], MODERN);
    }

    #[test]
    fn an_answer_is_complete_names_the_server_and_a_list_can_be_cached() {
        let handled = super::super::context::done(&json!({"tools": []})).unwrap();
        let listed = answer(handled, true).unwrap();
        let value: Value = serde_json::from_str(listed.result.get()).unwrap();
        assert_eq!(value["resultType"], "complete");
        assert_eq!(value["_meta"][META_SERVER_INFO]["name"], "rkllm-server");
        assert_eq!(value["cacheScope"], "public");
        assert!(value["ttlMs"].as_u64().unwrap() > 0);
    }
}
