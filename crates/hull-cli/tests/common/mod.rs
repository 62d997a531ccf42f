//! Helpers for the black-box tests: run the real `hull` binary and parse its JSON.
#![allow(dead_code)]

pub mod net;
pub mod tls;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The binary under test: `HULL_BIN` (CI copies it for the unprivileged run) or cargo's build.
pub fn bin() -> PathBuf {
    std::env::var_os("HULL_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_hull")), PathBuf::from)
}

pub fn hull(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull")
}

/// `hull run --json ARGS` and the parsed result object (panics on a JSON error object).
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let mut full = vec!["run", "--json"];
    full.extend_from_slice(args);
    let out = hull(&full);
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(v.get("error").is_none(), "hull refused: {v}");
    v
}

pub fn fault(v: &serde_json::Value) -> Option<String> {
    v["fault"]["type"].as_str().map(str::to_string)
}

pub fn stdout(v: &serde_json::Value) -> String {
    v["stdout"].as_str().unwrap_or_default().to_string()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `hull doctor` says the named cgroup cap is enforced; prints why not.
pub fn cap_enforced(controller: &str) -> bool {
    let out = hull(&["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let name = format!("cgroup {controller} cap");
    let found = v
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name.as_str()).cloned());
    match found {
        Some(c) if c["status"] == "enforced" => true,
        Some(c) => {
            // CI machines of this project have every cap; a skip there is a failure.
            assert!(
                std::env::var_os("CI").is_none(),
                "{name} not enforced in CI: {} (fix: {})",
                c["detail"],
                c["fix"]
            );
            hull_testkit::skip(format!(
                "{name} not enforced here: {} (fix: {})",
                c["detail"], c["fix"]
            ));
            false
        }
        None => {
            hull_testkit::skip(format!("hull doctor did not report {name}: {v}"));
            false
        }
    }
}

/// `hull serve` with `env` set, given `requests` then a shutdown: every line it wrote, in order.
pub fn serve_session(
    requests: &[serde_json::Value],
    env: &[(&str, &str)],
) -> Vec<serde_json::Value> {
    use std::io::{BufRead, Write};
    let (mut child, mut stdin, stdout) = serve_process(env);
    for r in requests {
        writeln!(stdin, "{r}").unwrap();
    }
    writeln!(
        stdin,
        "{}",
        serde_json::json!({"id": "end", "method": "shutdown"})
    )
    .unwrap();
    drop(stdin);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success());
    lines
}

/// `hull serve` with `env` set, its stdin and stdout piped here.
fn serve_process(
    env: &[(&str, &str)],
) -> (
    std::process::Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut child = Command::new(bin())
        .arg("serve")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn hull serve");
    let stdin = child.stdin.take().unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    (child, stdin, stdout)
}

/// An interactive `hull serve` for a test: one request at a time, its answer line returned
/// (events skipped); shut down when dropped.
pub struct Serve {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Serve {
    /// `hull serve` with `env` set.
    pub fn start(env: &[(&str, &str)]) -> Serve {
        let (child, stdin, stdout) = serve_process(env);
        Serve {
            child,
            stdin,
            stdout,
            next: 0,
        }
    }

    /// Sends one request; its answer (`{"id", "result"}` or `{"id", "error"}`).
    pub fn ask(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::{BufRead, Write};
        self.next += 1;
        let id = self.next;
        writeln!(
            self.stdin,
            "{}",
            serde_json::json!({"id": id, "method": method, "params": params})
        )
        .unwrap();
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "hull serve ended"
            );
            let a: serde_json::Value = serde_json::from_str(&line).unwrap();
            if a["id"] == id && a.get("event").is_none() {
                return a;
            }
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = writeln!(
            self.stdin,
            "{}",
            serde_json::json!({"id": 0, "method": "shutdown"})
        );
        let _ = self.child.wait();
    }
}
