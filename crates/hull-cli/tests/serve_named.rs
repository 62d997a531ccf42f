//! `hull serve`'s `named.*` methods, black-box: real `hull serve` processes talking to real
//! keepers. A sandbox is made through one server and used through another after the first has
//! exited. Each test keeps its sandboxes in a directory of its own (`HULL_SANDBOXES`) and
//! removes them at the end.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

/// A test's sandboxes: every one removed (`hull rm`) when dropped.
struct Sandboxes(tempfile::TempDir);

impl Sandboxes {
    fn new() -> Sandboxes {
        Sandboxes(
            tempfile::Builder::new()
                .prefix("hull-serve-named-")
                .tempdir()
                .expect("tempdir"),
        )
    }

    fn serve(&self) -> Server {
        let mut child = Command::new(common::bin())
            .arg("serve")
            .env("HULL_SANDBOXES", self.0.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start hull serve");
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Server {
            child,
            stdin,
            lines: rx,
            next: 0,
        }
    }
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        let names: Vec<String> = std::fs::read_dir(self.0.path())
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        for n in names {
            let _ = Command::new(common::bin())
                .args(["rm", &n])
                .env("HULL_SANDBOXES", self.0.path())
                .status();
        }
    }
}

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    next: u64,
}

impl Server {
    fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let line = json!({ "id": self.next, "method": method, "params": params });
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("write a request");
        self.next
    }

    /// The events and the answer of request `id` (other requests' lines are dropped).
    fn answer(&mut self, id: u64) -> (Vec<Value>, Value) {
        let mut events = Vec::new();
        loop {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("an answer within 60 s");
            if v["id"] != json!(id) {
                continue;
            }
            if v.get("event").is_some() {
                events.push(v);
            } else {
                return (events, v);
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let (_, a) = self.answer(id);
        assert!(a.get("error").is_none(), "{method}: {a}");
        a["result"].clone()
    }

    fn error(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let (_, a) = self.answer(id);
        a.get("error")
            .cloned()
            .unwrap_or_else(|| panic!("{method} succeeded: {a}"))
    }

    /// Closes stdin (the client is gone) and waits for the server to exit.
    fn close(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

fn sh(server: &mut Server, name: &str, cmd: &str) -> Value {
    server.call("named.exec", json!({ "sandbox": name, "shell": cmd }))
}

#[test]
fn hello_lists_the_named_methods() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    let hello = s.call("hello", json!({}));
    for m in [
        "named.create",
        "named.exec",
        "named.spawn",
        "named.wait",
        "named.kill",
    ] {
        assert!(
            hello["methods"].as_array().unwrap().contains(&json!(m)),
            "{m}"
        );
    }
    s.close();
}

#[test]
fn a_sandbox_made_through_one_server_runs_commands_for_another() {
    let sbs = Sandboxes::new();
    let mut a = sbs.serve();
    a.call(
        "named.create",
        json!({ "name": "dev", "setup": "echo made > /workspace/m", "memory_mb": 256 }),
    );
    a.close();
    let mut b = sbs.serve();
    let r = sh(&mut b, "dev", "cat /workspace/m");
    assert_eq!(
        (r["exit_code"].clone(), r["stdout"].clone()),
        (json!(0), json!("made\n"))
    );
    // Streamed: events in order, then the answer with the exit code.
    let id = b.send(
        "named.exec",
        json!({ "sandbox": "dev", "argv": ["sh", "-c", "echo a; echo b >&2; exit 3"], "stream": true }),
    );
    let (events, answer) = b.answer(id);
    assert_eq!(answer["result"]["exit_code"], json!(3));
    let got: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().into(),
                e["data"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(got.contains(&("stdout".into(), "a\n".into())), "{got:?}");
    assert!(got.contains(&("stderr".into(), "b\n".into())), "{got:?}");
    assert_eq!(sh(&mut b, "dev", "kill -KILL $$")["exit_code"], json!(137));
    // Adopting: the same configuration is fine, another is refused naming the argument.
    let same = json!({ "name": "dev", "adopt": true, "setup": "echo made > /workspace/m", "memory_mb": 256 });
    assert_eq!(b.call("named.create", same)["created"], json!(false));
    let e = b.error(
        "named.create",
        json!({ "name": "dev", "adopt": true, "setup": "echo made > /workspace/m", "memory_mb": 512 }),
    );
    assert_eq!(
        (e["kind"].clone(), e["arg"].clone()),
        (json!("config_mismatch"), json!("memory_mb"))
    );
    let e = b.error("named.create", json!({ "name": "dev" }));
    assert_eq!(e["kind"], json!("conflict"));
    b.call("named.rm", json!({ "sandbox": "dev" }));
    assert_eq!(
        b.error("named.exec", json!({ "sandbox": "dev", "shell": "true" }))["kind"],
        json!("not_found")
    );
    b.close();
}

#[test]
fn a_per_command_variable_is_seen_by_that_command_only() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call(
        "named.create",
        json!({ "name": "env", "env": { "BASE": "b" } }),
    );
    let r = s.call(
        "named.exec",
        json!({ "sandbox": "env", "shell": "echo $BASE $TOKEN ${HOME+home}", "env": { "TOKEN": "t1" } }),
    );
    assert_eq!(r["stdout"], json!("b t1 home\n"));
    assert_eq!(
        sh(&mut s, "env", "echo ${TOKEN-unset}")["stdout"],
        json!("unset\n")
    );
    // The server's own environment (HULL_SANDBOXES) is never a command's.
    assert_eq!(
        sh(&mut s, "env", "echo ${HULL_SANDBOXES-unset}")["stdout"],
        json!("unset\n")
    );
    s.call("named.rm", json!({ "sandbox": "env" }));
    s.close();
}

#[test]
fn a_spawned_process_outlives_its_server_is_killed_with_its_tree_and_ends_at_stop() {
    let sbs = Sandboxes::new();
    let mut a = sbs.serve();
    a.call("named.create", json!({ "name": "sp" }));
    let loop_ = "while :; do date +%s%N > /tmp/beat; sleep 0.05; done";
    let p = a.call("named.spawn", json!({ "sandbox": "sp", "shell": loop_ }))["process"].clone();
    // A wait in flight when the client goes away ends; the process does not.
    a.send(
        "named.wait",
        json!({ "sandbox": "sp", "process": p, "stream": true }),
    );
    a.close();
    let mut b = sbs.serve();
    let beat1 = sh(&mut b, "sp", "cat /tmp/beat")["stdout"].clone();
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(
        sh(&mut b, "sp", "cat /tmp/beat")["stdout"],
        beat1,
        "the spawned loop ended with its server"
    );

    let t = b.call(
        "named.spawn",
        json!({ "sandbox": "sp", "argv": ["sh", "-c", "sleep 301 & sleep 302 & echo started; wait"] }),
    )["process"]
        .clone();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        b.call("named.kill", json!({ "sandbox": "sp", "process": t }))["killed"],
        json!(true)
    );
    assert_eq!(
        b.call("named.kill", json!({ "sandbox": "sp", "process": t }))["killed"],
        json!(false)
    );
    let w = b.call("named.wait", json!({ "sandbox": "sp", "process": t }));
    assert_eq!(
        (w["exit_code"].clone(), w["stdout"].clone()),
        (json!(137), json!("started\n"))
    );
    let ps = sh(&mut b, "sp", "ps -eo args")["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !ps.contains("sleep 301") && !ps.contains("sleep 302"),
        "{ps}"
    );

    // One that ends on its own: its code, streamed output.
    let q = b.call(
        "named.spawn",
        json!({ "sandbox": "sp", "shell": "echo out; exit 5" }),
    )["process"]
        .clone();
    let id = b.send(
        "named.wait",
        json!({ "sandbox": "sp", "process": q, "stream": true }),
    );
    let (events, w) = b.answer(id);
    assert_eq!(w["result"]["exit_code"], json!(5));
    assert_eq!(
        events
            .iter()
            .map(|e| e["data"].as_str().unwrap())
            .collect::<String>(),
        "out\n"
    );

    b.call("named.stop", json!({ "sandbox": "sp" }));
    let ps = sh(&mut b, "sp", "ps -eo args")["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!ps.contains("date +%s%N"), "{ps}");
    let e = b.error("named.wait", json!({ "sandbox": "sp", "process": p }));
    assert_eq!(e["kind"], json!("not_found"));
    b.call("named.rm", json!({ "sandbox": "sp" }));
    assert_eq!(b.call("named.list", json!({}))["sandboxes"], json!([]));
    b.close();
}

#[test]
fn an_exec_past_its_timeout_is_killed() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "to" }));
    let r = s.call(
        "named.exec",
        json!({ "sandbox": "to", "argv": ["sleep", "30"], "timeout_s": 0.5 }),
    );
    assert_eq!(
        (r["exit_code"].clone(), r["timed_out"].clone()),
        (json!(137), json!(true))
    );
    let ps = sh(&mut s, "to", "ps -eo args")["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!ps.contains("sleep 30"), "{ps}");
    s.call("named.rm", json!({ "sandbox": "to" }));
    s.close();
}

#[test]
fn files_are_read_written_listed_and_deleted_inside_the_sandbox_root() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "fs" }));
    let f = |p: &str| json!({ "sandbox": "fs", "path": p });
    let w = s.call(
        "named.write_file",
        json!({ "sandbox": "fs", "path": "a/b/c.txt", "text": "hello\n" }),
    );
    assert_eq!(w["bytes"], json!(6));
    assert_eq!(
        sh(&mut s, "fs", "cat /workspace/a/b/c.txt")["stdout"],
        json!("hello\n")
    );
    let r = s.call("named.read_file", f("/workspace/a/b/c.txt"));
    assert_eq!(r["data_b64"], json!("aGVsbG8K"));
    assert_eq!(s.call("named.read_file", f("missing")), Value::Null);
    assert_eq!(
        s.error("named.read_file", f("a"))["kind"],
        json!("is_a_directory")
    );
    let st = s.call("named.stat", f("a/b/c.txt"));
    assert_eq!(
        (st["type"].clone(), st["size"].clone()),
        (json!("file"), json!(6))
    );
    let l = s.call("named.list_files", f("a/b"));
    assert_eq!(l["entries"][0]["name"], json!("c.txt"));
    // A symlink pointing at the host's files resolves inside the sandbox's root.
    sh(
        &mut s,
        "fs",
        "ln -s /../../../../etc/hostname /workspace/link",
    );
    let host = std::fs::read("/etc/hostname").unwrap_or_default();
    let inside = s.call("named.read_file", f("link"));
    if let Some(b) = inside["data_b64"].as_str() {
        use base64::Engine;
        let got = base64::engine::general_purpose::STANDARD.decode(b).unwrap();
        assert!(
            host.is_empty() || got != host,
            "read the host's /etc/hostname through a link"
        );
    }
    assert_eq!(s.call("named.delete", f("a"))["deleted"], json!(true));
    assert_eq!(s.call("named.delete", f("a"))["deleted"], json!(false));
    assert_eq!(s.call("named.stat", f("a")), Value::Null);
    s.call("named.rm", json!({ "sandbox": "fs" }));
    s.close();
}
