//! JSON-RPC 2.0 framing for MCP over stdio: one message per line, classified into requests,
//! notifications and (ignored) responses; standard error codes; protocol version negotiation.

use serde_json::{json, Value};

/// Protocol versions this server speaks, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// A request other than `initialize` or `ping` before `initialize` (the code LSP uses).
pub const NOT_INITIALIZED: i64 = -32002;

/// The version to answer a client's `initialize` with: the client's own when we support it,
/// otherwise our newest (the client then decides whether it can speak it).
pub fn negotiate(requested: &str) -> &'static str {
    SUPPORTED_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(SUPPORTED_VERSIONS[0])
}

/// One incoming line, classified.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// A response to a request we never sent, or a message with neither method nor id: ignored.
    Response,
    /// Not valid JSON-RPC: answer with this error (id null when none could be read).
    Invalid {
        id: Value,
        code: i64,
        message: String,
    },
}

/// Parses one line as read (JSON text is UTF-8: a line that is not gets a parse error naming
/// where, and is never guessed at).
pub fn parse(line: &[u8]) -> Incoming {
    let line = match std::str::from_utf8(line) {
        Ok(l) => l,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                code: PARSE_ERROR,
                message: format!(
                    "parse error: the line is not UTF-8 (invalid byte at offset {})",
                    e.valid_up_to()
                ),
            }
        }
    };
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                code: PARSE_ERROR,
                message: format!("parse error: not JSON ({e})"),
            }
        }
    };
    let Value::Object(m) = v else {
        let message = if v.is_array() {
            "batches are not supported; send one JSON-RPC message per line"
        } else {
            "a JSON-RPC message must be an object"
        };
        return Incoming::Invalid {
            id: Value::Null,
            code: INVALID_REQUEST,
            message: message.into(),
        };
    };
    let id = m.get("id").cloned();
    let id_ok = matches!(&id, Some(Value::String(_) | Value::Number(_)));
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Invalid {
            id: if id_ok {
                id.unwrap_or(Value::Null)
            } else {
                Value::Null
            },
            code: INVALID_REQUEST,
            message: "`jsonrpc` must be \"2.0\"".into(),
        };
    }
    let params = m.get("params").cloned().unwrap_or(Value::Null);
    match (m.get("method"), id) {
        (Some(Value::String(method)), None) => Incoming::Notification {
            method: method.clone(),
            params,
        },
        (Some(Value::String(method)), Some(id)) if id_ok => {
            if !matches!(params, Value::Null | Value::Object(_)) {
                return Incoming::Invalid {
                    id,
                    code: INVALID_PARAMS,
                    message: "`params` must be an object".into(),
                };
            }
            Incoming::Request {
                id,
                method: method.clone(),
                params,
            }
        }
        (Some(Value::String(_)), Some(_)) => Incoming::Invalid {
            id: Value::Null,
            code: INVALID_REQUEST,
            message: "`id` must be a string or a number".into(),
        },
        (Some(_), id) => Incoming::Invalid {
            id: id.filter(|_| id_ok).unwrap_or(Value::Null),
            code: INVALID_REQUEST,
            message: "`method` must be a string".into(),
        },
        (None, _) if m.contains_key("result") || m.contains_key("error") => Incoming::Response,
        (None, id) => Incoming::Invalid {
            id: id.filter(|_| id_ok).unwrap_or(Value::Null),
            code: INVALID_REQUEST,
            message: "a request needs a `method`".into(),
        },
    }
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_negotiated() {
        for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
            assert_eq!(negotiate(v), v);
        }
        assert_eq!(negotiate("2099-01-01"), "2025-11-25");
        assert_eq!(negotiate("2024-10-07"), "2025-11-25");
        assert_eq!(negotiate(""), "2025-11-25");
    }

    fn code(line: &str) -> i64 {
        match parse(line.as_bytes()) {
            Incoming::Invalid { code, .. } => code,
            other => panic!("{line} was accepted: {other:?}"),
        }
    }

    #[test]
    fn messages_are_classified() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Incoming::Request {
                id: json!(1),
                method: "ping".into(),
                params: Value::Null
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Incoming::Notification {
                method: "notifications/initialized".into(),
                params: Value::Null
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Incoming::Response
        );
        assert_eq!(code("{not json"), PARSE_ERROR);
        assert_eq!(code("[]"), INVALID_REQUEST);
        assert_eq!(code("3"), INVALID_REQUEST);
        assert_eq!(code(r#"{"id":1,"method":"ping"}"#), INVALID_REQUEST);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            INVALID_PARAMS
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_is_a_parse_error_with_a_null_id() {
        match parse(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffing\"}") {
            Incoming::Invalid { id, code, message } => {
                assert_eq!((id, code), (Value::Null, PARSE_ERROR));
                assert!(
                    message.contains("not UTF-8") && message.contains("offset 35"),
                    "{message}"
                );
            }
            other => panic!("accepted: {other:?}"),
        }
    }
}
