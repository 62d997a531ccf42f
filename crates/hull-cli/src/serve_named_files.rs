//! `hull serve`'s file operations on a named sandbox (`named.read_file`, `write_file`, `stat`,
//! `list_files`, `delete`): each is the keeper's `File` operation (`named/files.rs`), which
//! resolves the path beneath the sandbox's root with `openat2(RESOLVE_IN_ROOT)` (a symlink can
//! never lead out of it) and writes as the sandbox's user; nothing runs in the sandbox, so an
//! image without `sh` is served the same. A relative path is below `/workspace`. A missing path
//! is a `null` result (not an error); a directory where a file was asked is `is_a_directory`.

use std::io::BufReader;

use base64::Engine;
use serde_json::{json, Map, Value};

use crate::named::files::FileOp;
use crate::named::{client, wire};
use crate::serve_named::{err, existing, invalid, number, string};

pub const METHODS: &[&str] = &[
    "named.read_file",
    "named.write_file",
    "named.stat",
    "named.list_files",
    "named.delete",
];

/// Reads are cut here unless `max_bytes` says otherwise (an answer is one JSON line).
const MAX_READ: u64 = 64 << 20;

/// One operation on the sandbox's keeper (started if stopped): a read's bytes and the result.
fn call(
    p: &Map<String, Value>,
    op: &FileOp,
    input: Option<Vec<u8>>,
) -> Result<(Vec<u8>, Value), Value> {
    let dir = existing(p)?;
    let fail = |e: String| err("sandbox_error", e);
    let conn = client::open(&dir, true, &wire::Request::File { file: op.clone() })
        .map_err(fail)?
        .ok_or_else(|| err("sandbox_error", "the sandbox did not start"))?;
    if let Some(data) = input {
        // From a thread: the keeper may answer (refuse) before it reads the data.
        let mut w = conn.try_clone().map_err(|e| fail(e.to_string()))?;
        std::thread::spawn(move || {
            for chunk in data.chunks(wire::MAX_FRAME as usize) {
                if wire::write_frame(&mut w, wire::STDIN, chunk).is_err() {
                    return;
                }
            }
            let _ = wire::write_frame(&mut w, wire::STDIN_END, &[]);
        });
    }
    let mut r = BufReader::new(conn);
    let mut data = Vec::new();
    loop {
        match wire::read_frame(&mut r).map_err(|e| fail(format!("read from the keeper: {e}")))? {
            Some((wire::STDOUT, d)) => data.extend_from_slice(&d),
            Some((wire::RESULT, d)) => {
                let v: Value = serde_json::from_slice(&d)
                    .map_err(|e| fail(format!("a malformed answer from the keeper: {e}")))?;
                if let Some(e) = v.get("error") {
                    let kind = e["kind"].as_str().unwrap_or("io");
                    let message = e["message"].as_str().unwrap_or_default();
                    if kind == "invalid_argument" {
                        return Err(invalid("path", message.trim_start_matches("path: ")));
                    }
                    return Err(err(kind, message));
                }
                return Ok((data, v["ok"].clone()));
            }
            Some((wire::ERROR, d)) => return Err(fail(String::from_utf8_lossy(&d).into_owned())),
            Some((k, _)) => return Err(fail(format!("an unknown frame kind {k} from the keeper"))),
            None => return Err(fail("the sandbox stopped during the operation".into())),
        }
    }
}

fn path(p: &Map<String, Value>) -> Result<String, Value> {
    let path = string(p, "path")?.ok_or_else(|| invalid("path", "missing"))?;
    if path.is_empty() {
        return Err(invalid("path", "empty; give a path in the sandbox"));
    }
    Ok(path)
}

/// A whole number parameter (lines, bytes).
fn count(p: &Map<String, Value>, k: &str) -> Result<Option<u64>, Value> {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(number(p, k)?.map(|n| n as u64))
}

pub(crate) fn handle(method: &str, p: &Map<String, Value>) -> Result<Value, Value> {
    let path = path(p)?;
    match method {
        "named.read_file" => {
            // One byte past the limit is read, so a larger file is refused, never cut short.
            let limit = count(p, "max_bytes")?.unwrap_or(MAX_READ).min(MAX_READ);
            let shown = path.clone();
            let op = FileOp::Read {
                path,
                max_bytes: Some(limit + 1),
                start_line: count(p, "start_line")?,
                end_line: count(p, "end_line")?,
            };
            let (data, v) = call(p, &op, None)?;
            if !v.is_null() && data.len() as u64 > limit {
                let why = if limit == MAX_READ {
                    format!("{shown} is larger than {MAX_READ} bytes, the most one read returns; read a range of lines")
                } else {
                    format!("{shown} is larger than max_bytes={limit}; raise max_bytes, or read a range of lines")
                };
                return Err(invalid("max_bytes", &why));
            }
            Ok(if v.is_null() {
                Value::Null
            } else {
                json!({ "data_b64": base64::engine::general_purpose::STANDARD.encode(&data), "size": data.len() })
            })
        }
        "named.write_file" => {
            let data = match (string(p, "data_b64")?, string(p, "text")?) {
                (Some(b), None) => base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| invalid("data_b64", e.to_string()))?,
                (None, Some(t)) => t.into_bytes(),
                _ => {
                    return Err(invalid(
                        "data_b64",
                        "give `data_b64` or `text`, one of the two",
                    ))
                }
            };
            Ok(call(p, &FileOp::Write { path }, Some(data))?.1)
        }
        "named.stat" => Ok(call(p, &FileOp::Stat { path }, None)?.1),
        "named.list_files" => Ok(call(p, &FileOp::List { path }, None)?.1),
        "named.delete" => Ok(call(p, &FileOp::Delete { path }, None)?.1),
        other => Err(err("unknown_method", format!("unknown method `{other}`"))),
    }
}
