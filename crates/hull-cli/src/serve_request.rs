//! One request line of `hull serve` (untrusted bytes) as a [`Request`]: a leaf of the server,
//! shared by `serve` (which re-exports it) and `serve_loop` (which reads the lines).

use serde_json::{json, Value};

/// One request, as read from a line.
#[derive(Debug)]
pub struct Request {
    /// Echoed in the answer (any JSON value; null when the line had none).
    pub id: Value,
    pub method: String,
    /// Null when the line had none.
    pub params: Value,
}

/// Parses one line as read from stdin (untrusted bytes): `Ok(None)` for a blank line, which is
/// ignored; `Err` holds the whole answer to send (with the request's id when it could be read).
pub fn parse_request(raw: &[u8]) -> Result<Option<Request>, Value> {
    let protocol = |id: Value, message: String| json!({ "id": id, "error": { "kind": "protocol", "message": message, "chain": [] } });
    let line = request_text(raw).map_err(|m| protocol(Value::Null, m))?;
    if line.trim().is_empty() {
        return Ok(None);
    }
    let req: Value = serde_json::from_str(line)
        .map_err(|e| protocol(Value::Null, format!("not a JSON object: {e}")))?;
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let Some(method) = req.get("method").and_then(Value::as_str) else {
        return Err(protocol(id, "a request needs a string `method`".into()));
    };
    Ok(Some(Request {
        method: method.to_string(),
        params: req.get("params").cloned().unwrap_or(Value::Null),
        id,
    }))
}

/// A request line as text: one that is not UTF-8 is refused (naming where), never guessed at.
fn request_text(raw: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(raw).map_err(|e| {
        format!(
            "the request line is not UTF-8 (invalid byte at offset {}); send one UTF-8 JSON object per line",
            e.valid_up_to()
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_lines_parse_into_id_method_and_params() {
        let r = super::parse_request(
            b"{\"id\": 7, \"method\": \"run\", \"params\": {\"code\": \"1\"}}\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (r.id, r.method.as_str(), r.params),
            (
                serde_json::json!(7),
                "run",
                serde_json::json!({"code": "1"})
            )
        );
        assert!(super::parse_request(b"  \n").unwrap().is_none());
        let e = super::parse_request(b"{\"id\": \"a\", \"method\": 3}").unwrap_err();
        assert_eq!(
            (&e["id"], &e["error"]["kind"]),
            (&serde_json::json!("a"), &serde_json::json!("protocol"))
        );
        let e = super::parse_request(b"{\"id\": 1,").unwrap_err();
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a JSON object"),
            "{e}"
        );
        assert_eq!(e["id"], serde_json::Value::Null);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_refused_naming_the_offset() {
        assert_eq!(super::request_text(b"{}\n"), Ok("{}\n"));
        let e = super::request_text(b"{\"a\": \"\xff\"}").unwrap_err();
        assert!(e.contains("not UTF-8") && e.contains("offset 7"), "{e}");
    }
}
