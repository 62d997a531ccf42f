//! `hull bench --sdk`, large output: one `run_code` that prints 16 MiB, timed through the
//! Python SDK (`hull_sandbox`, when python3 can import it) and through a bare client of
//! `hull serve` (this process reading the pipe with a plain buffered reader), each against the
//! box's own time (the call's `duration_ms`: box start, the program, capturing its output). The
//! gap is what carrying the answer to the caller costs: the server's JSON line, the pipe, the
//! client's parsing (the SDK once read it one byte per read(2): 35 s for 64 MiB).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

/// Bytes the program prints.
pub const SIZE: usize = 16 << 20;

/// The program: one write of SIZE bytes (nothing else, so the box's time is its own).
fn code() -> String {
    format!("import sys\n_ = sys.stdout.write('x' * {SIZE})")
}

/// The Python side: one Sandbox, a warm-up call, then `runs` timed calls, printed as JSON
/// `[[wall_ms, box_ms], ...]`.
const PY: &str = r#"
import json, sys, time
from hull_sandbox import Sandbox
code, size, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
with Sandbox(timeout_s=120) as sb:
    sb.run_code(code)
    for _ in range(runs):
        t = time.perf_counter()
        r = sb.run_code(code)
        wall = (time.perf_counter() - t) * 1000
        if len(r.stdout) != size or r.exit_code != 0:
            sys.exit("hull bench: the call printed %d bytes, exit %d: %s" % (len(r.stdout), r.exit_code, r.stderr[-500:]))
        out.append([wall, r.duration_ms])
print(json.dumps(out))
"#;

/// Median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `[[wall_ms, box_ms], ...]` through the Python SDK, or why it could not run.
fn through_python(python: &str, runs: usize) -> Result<Vec<(f64, f64)>, String> {
    let hull = std::env::current_exe().map_err(|e| format!("cannot find this hull: {e}"))?;
    let probe = Command::new(python)
        .args(["-c", "import hull_sandbox"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        return Err(format!(
            "{python} cannot import hull_sandbox (pip install ./bindings/python, or PYTHONPATH=bindings/python/python)"
        ));
    }
    let out = Command::new(python)
        .args(["-c", PY, &code(), &SIZE.to_string(), &runs.to_string()])
        .env("HULL_BIN", &hull)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        return Err(format!("the Python side failed ({})", out.status));
    }
    let v: Vec<(f64, f64)> = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the Python side printed no timings ({e})"))?;
    Ok(v)
}

/// A minimal client of `hull serve`: lines in, lines out, answers by id.
struct Serve {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Serve {
    fn start() -> Result<Serve, String> {
        let hull = std::env::current_exe().map_err(|e| format!("cannot find this hull: {e}"))?;
        let mut child = Command::new(hull)
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start hull serve: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("hull serve has no pipes".into());
        };
        Ok(Serve {
            child,
            stdin,
            stdout: BufReader::with_capacity(1 << 20, stdout),
            next: 0,
        })
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next += 1;
        let id = self.next;
        writeln!(
            self.stdin,
            "{}",
            json!({ "id": id, "method": method, "params": params })
        )
        .map_err(|e| format!("hull serve: {e}"))?;
        let mut line = String::new();
        loop {
            line.clear();
            match self.stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return Err("hull serve closed its output".into()),
                Ok(_) => {}
            }
            let v: Value = serde_json::from_str(&line).map_err(|e| format!("hull serve: {e}"))?;
            if v["id"] == id && v.get("event").is_none() {
                return match v.get("error") {
                    Some(e) => Err(format!("{method}: {e}")),
                    None => Ok(v["result"].clone()),
                };
            }
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({ "id": 0, "method": "shutdown" }));
        let _ = self.child.wait();
    }
}

/// `[[wall_ms, box_ms], ...]` through a bare client of `hull serve`.
fn through_pipe(runs: usize) -> Result<Vec<(f64, f64)>, String> {
    let mut s = Serve::start()?;
    let sb = s.call("sandbox.create", json!({ "timeout_s": 120 }))?["sandbox"].clone();
    let params = json!({ "sandbox": sb, "code": code() });
    s.call("sandbox.run_code", params.clone())?;
    let mut v = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let r = s.call("sandbox.run_code", params.clone())?;
        let wall = t.elapsed().as_secs_f64() * 1000.0;
        if r["stdout"].as_str().map(str::len) != Some(SIZE) {
            return Err(format!(
                "the call did not print {SIZE} bytes: {}",
                r["stderr"]
            ));
        }
        #[allow(clippy::cast_precision_loss)] // milliseconds, far below 2^52
        v.push((wall, r["duration_ms"].as_u64().unwrap_or(0) as f64));
    }
    Ok(v)
}

/// One client's figures: median wall time, median box time, and their ratio.
fn summary(v: &[(f64, f64)]) -> Value {
    let mut wall: Vec<f64> = v.iter().map(|x| x.0).collect();
    let mut boxed: Vec<f64> = v.iter().map(|x| x.1).collect();
    let (w, b) = (median(&mut wall), median(&mut boxed));
    json!({ "call_ms_p50": w, "box_ms_p50": b, "ratio": w / b.max(1.0) })
}

/// Runs both clients `runs` times and returns `{bytes, python_sdk, bare_pipe}` (a client that
/// could not run has `skipped` with the reason).
pub fn measure(python: &str, runs: usize) -> Value {
    let one = |r: Result<Vec<(f64, f64)>, String>| match r {
        Ok(v) if !v.is_empty() => summary(&v),
        Ok(_) => json!({ "skipped": "no runs" }),
        Err(why) => json!({ "skipped": why }),
    };
    json!({
        "bytes": SIZE,
        "python_sdk": one(through_python(python, runs)),
        "bare_pipe": one(through_pipe(runs)),
    })
}

/// The figures as text lines.
pub fn print(v: &Value) {
    println!(
        "run_code printing {} MiB (median ms: the whole call, the box's own duration_ms)",
        SIZE >> 20
    );
    for (name, key) in [
        ("Python SDK (hull_sandbox)", "python_sdk"),
        ("bare hull serve client", "bare_pipe"),
    ] {
        let c = &v[key];
        match c.get("skipped") {
            Some(why) => println!("{name:<34} skipped: {}", why.as_str().unwrap_or("")),
            None => println!(
                "{name:<34} call {:>8.1}  box {:>8.1}  {:>6.2}x the box",
                c["call_ms_p50"].as_f64().unwrap_or(0.0),
                c["box_ms_p50"].as_f64().unwrap_or(0.0),
                c["ratio"].as_f64().unwrap_or(0.0)
            ),
        }
    }
}
