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
                id: readable_id(line),
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
                id: readable_id(line.as_bytes()),
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

/// The most one message may hold: a longer line is read in bounded chunks, thrown away and
/// answered with an error naming this limit (an 800 MiB line without a newline held 824 MB).
pub const MAX_FRAME: usize = 32 << 20;

/// How much of an over-long line is kept to find its id in.
const KEPT_HEAD: usize = 4 << 10;

/// What one bounded read of a line gave.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A line (without its newline) is in the buffer.
    Line,
    /// A line over `cap` was read past and dropped; its first bytes are in the buffer.
    TooLong,
    /// End of input (a last line without a newline is a `Line` first).
    Eof,
}

/// Reads one line of at most `cap` bytes into `buf` (cleared first), through `r`'s own buffer,
/// never holding more than `cap` bytes of it.
pub fn read_frame<R: std::io::BufRead>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Frame> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => Frame::TooLong,
                (false, true) => Frame::Eof,
                (false, false) => Frame::Line,
            });
        }
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !too_long && buf.len() + part.len() > cap {
            too_long = true;
            buf.truncate(KEPT_HEAD);
            buf.shrink_to(KEPT_HEAD);
        }
        let room = if too_long {
            KEPT_HEAD.saturating_sub(buf.len())
        } else {
            part.len()
        };
        buf.extend_from_slice(&part[..room.min(part.len())]);
        let used = done.unwrap_or(chunk.len());
        r.consume(used);
        if done.is_some() {
            return Ok(if too_long {
                Frame::TooLong
            } else {
                Frame::Line
            });
        }
    }
}

/// The id of a message that could not be parsed, when its text still shows one (`"id": 7` or
/// `"id": "a"`), so the client waiting on it is answered; else null.
pub fn readable_id(line: &[u8]) -> Value {
    let mut rest = line;
    while let Some(at) = find(rest, b"\"id\"") {
        let after = &rest[at + 4..];
        let after = trim_start(after);
        if let Some(after) = after.strip_prefix(b":") {
            let v = trim_start(after);
            if let Some(s) = v.strip_prefix(b"\"") {
                if let Some(end) = s.iter().position(|&b| b == b'"' || b == b'\\') {
                    if s[end] == b'"' {
                        if let Ok(t) = std::str::from_utf8(&s[..end]) {
                            return Value::String(t.to_string());
                        }
                    }
                }
            } else {
                let n = v
                    .iter()
                    .position(|b| !(b.is_ascii_digit() || *b == b'-'))
                    .unwrap_or(v.len());
                if let Some(i) = std::str::from_utf8(&v[..n])
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok())
                {
                    return json!(i);
                }
            }
        }
        rest = &rest[at + 4..];
    }
    Value::Null
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn trim_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[n..]
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
    fn a_line_that_is_not_utf8_is_a_parse_error_answered_with_its_id() {
        match parse(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffing\"}") {
            Incoming::Invalid { id, code, message } => {
                assert_eq!((id, code), (json!(1), PARSE_ERROR));
                assert!(
                    message.contains("not UTF-8") && message.contains("offset 35"),
                    "{message}"
                );
            }
            other => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn a_broken_message_is_answered_with_the_id_it_shows() {
        for (line, id) in [
            (
                &br#"{"jsonrpc":"2.0","id": 42,"method":"tools/call","params":{"#[..],
                json!(42),
            ),
            (
                br#"{"id":"abc","jsonrpc":"2.0","method":"x",}"#,
                json!("abc"),
            ),
            (br#"{"jsonrpc":"2.0","method":"x" "#, Value::Null),
            (br#"{"id":"a\"b" ,"#, Value::Null),
        ] {
            match parse(line) {
                Incoming::Invalid { id: got, code, .. } => {
                    assert_eq!(
                        (got, code),
                        (id, PARSE_ERROR),
                        "{}",
                        String::from_utf8_lossy(line)
                    )
                }
                other => panic!("accepted: {other:?}"),
            }
        }
    }

    #[test]
    fn a_line_over_the_cap_is_read_past_in_bounded_memory() {
        let mut input = Vec::new();
        input
            .extend_from_slice(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"x":""#);
        input.extend(std::iter::repeat_n(b'a', 100_000));
        input.extend_from_slice(b"\"}}\n{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"ping\"}\n");
        let mut r = std::io::BufReader::with_capacity(1024, input.as_slice());
        let mut buf = Vec::new();
        assert_eq!(
            read_frame(&mut r, &mut buf, 10_000).unwrap(),
            Frame::TooLong
        );
        assert!(
            buf.len() <= KEPT_HEAD && buf.capacity() <= 16 << 10,
            "{}",
            buf.capacity()
        );
        assert_eq!(readable_id(&buf), json!(9));
        assert_eq!(read_frame(&mut r, &mut buf, 10_000).unwrap(), Frame::Line);
        assert_eq!(
            parse(&buf),
            Incoming::Request {
                id: json!(10),
                method: "ping".into(),
                params: Value::Null
            }
        );
        assert_eq!(read_frame(&mut r, &mut buf, 10_000).unwrap(), Frame::Eof);
    }
}
