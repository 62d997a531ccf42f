//! `hull serve`'s file operations on a named sandbox (`named.read_file`, `write_file`, `stat`,
//! `list_files`, `delete`). Each is one exec of a short `sh` script in the sandbox: the path is
//! resolved by the kernel inside the sandbox's own root (a symlink can never lead out of it),
//! and what is written belongs to the sandbox's user. A relative path is below `/workspace`.
//! A missing path is a `null` result (not an error); a directory where a file was asked is
//! `is_a_directory`.

use base64::Engine;
use serde_json::{json, Map, Value};

use crate::serve_named::{err, existing, file_script, invalid, number, string};

pub const METHODS: &[&str] = &[
    "named.read_file",
    "named.write_file",
    "named.stat",
    "named.list_files",
    "named.delete",
];

/// Exit 3: no such path; exit 4: a directory (where a file was asked) or not one (for a list).
const READ: &str = r#"[ -e "$1" ] || [ -L "$1" ] || exit 3; [ -d "$1" ] && exit 4
if [ -n "$2" ]; then exec head -c "$2" -- "$1"; else exec cat -- "$1"; fi"#;
const WRITE: &str = r#"[ -d "$1" ] && exit 4; mkdir -p -- "$(dirname -- "$1")" && cat > "$1""#;
const STAT: &str = r#"[ -e "$1" ] || [ -L "$1" ] || exit 3; exec stat -c '%F|%s|%Y|%a' -- "$1""#;
const LIST: &str = r#"[ -e "$1" ] || exit 3; [ -d "$1" ] || exit 4
exec find "$1" -mindepth 1 -maxdepth 1 -printf '%y|%s|%T@|%f\0'"#;
const DELETE: &str = r#"[ -e "$1" ] || [ -L "$1" ] || exit 3; exec rm -rf -- "$1""#;

fn kind_of(t: &str) -> &'static str {
    match t {
        "f" | "regular file" | "regular empty file" => "file",
        "d" | "directory" => "dir",
        "l" | "symbolic link" => "symlink",
        _ => "other",
    }
}

/// The outcome of one script: `Ok(None)` for a missing path.
fn run(
    p: &Map<String, Value>,
    script: &str,
    extra: &[&str],
    input: Option<Vec<u8>>,
) -> Result<Option<Vec<u8>>, Value> {
    let dir = existing(p)?;
    let path = string(p, "path")?.ok_or_else(|| invalid("path", "missing"))?;
    if path.is_empty() {
        return Err(invalid("path", "empty"));
    }
    let mut args = vec![path.as_str()];
    args.extend_from_slice(extra);
    let d = file_script(&dir, script, &args, input)?;
    let stderr = d.err;
    match d.code {
        Some(0) => Ok(Some(d.out)),
        Some(3) => Ok(None),
        Some(4) if script == LIST => {
            Err(err("not_a_directory", format!("{path} is not a directory")))
        }
        Some(4) => Err(err("is_a_directory", format!("{path} is a directory"))),
        c => Err(err(
            "io",
            format!(
                "{path}: {} (exit {c:?})",
                String::from_utf8_lossy(&stderr).trim_end()
            ),
        )),
    }
}

pub(crate) fn handle(method: &str, p: &Map<String, Value>) -> Result<Value, Value> {
    match method {
        "named.read_file" => {
            let max = number(p, "max_bytes")?.map(|m| format!("{m:.0}"));
            let extra: Vec<&str> = max.iter().map(String::as_str).collect();
            Ok(run(p, READ, &extra, None)?.map_or(Value::Null, |b| {
                json!({ "data_b64": base64::engine::general_purpose::STANDARD.encode(&b), "size": b.len() })
            }))
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
            let n = data.len();
            match run(p, WRITE, &[], Some(data))? {
                Some(_) => Ok(json!({ "bytes": n })),
                None => Err(err("io", "the write failed")),
            }
        }
        "named.stat" => Ok(run(p, STAT, &[], None)?.map_or(Value::Null, |b| {
            let text = String::from_utf8_lossy(&b);
            let f: Vec<&str> = text.trim_end().split('|').collect();
            json!({
                "type": kind_of(f.first().copied().unwrap_or("")),
                "size": f.get(1).and_then(|s| s.parse::<u64>().ok()),
                "mtime_s": f.get(2).and_then(|s| s.parse::<u64>().ok()),
                "mode": f.get(3).and_then(|s| u32::from_str_radix(s, 8).ok()),
            })
        })),
        "named.list_files" => Ok(run(p, LIST, &[], None)?.map_or(Value::Null, |b| {
            let entries: Vec<Value> = b
                .split(|&c| c == 0)
                .filter(|e| !e.is_empty())
                .filter_map(|e| {
                    let text = String::from_utf8_lossy(e);
                    let mut f = text.splitn(4, '|');
                    let (t, size, mtime, name) = (f.next()?, f.next()?, f.next()?, f.next()?);
                    Some(json!({
                        "name": name,
                        "type": kind_of(t),
                        "size": size.parse::<u64>().ok(),
                        "mtime_s": mtime.split('.').next().and_then(|s| s.parse::<u64>().ok()),
                    }))
                })
                .collect();
            json!({ "entries": entries })
        })),
        "named.delete" => Ok(json!({ "deleted": run(p, DELETE, &[], None)?.is_some() })),
        other => Err(err("unknown_method", format!("unknown method `{other}`"))),
    }
}
