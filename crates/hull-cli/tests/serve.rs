//! `hull serve`: the JSON-lines protocol, driven through a real child process.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// Sends `requests` and `shutdown` (which waits for every call), closes stdin, and returns
/// every line the server wrote. (Closing stdin alone would end the calls still running.)
fn session(requests: &[Value]) -> Vec<Value> {
    session_env(requests, &[])
}

/// [`session`] with a server started with `env` set.
fn session_env(requests: &[Value], env: &[(&str, &str)]) -> Vec<Value> {
    common::serve_session(requests, env)
}

fn answer(lines: &[Value], id: i64) -> &Value {
    lines
        .iter()
        .find(|l| l["id"] == id && l.get("event").is_none())
        .unwrap_or_else(|| panic!("no answer for {id}: {lines:?}"))
}

#[test]
fn hello_then_run_and_errors_are_typed() {
    let lines = session(&[
        json!({"id": 1, "method": "hello"}),
        json!({"id": 2, "method": "run", "params": {"code": "print(6 * 7)"}}),
        json!({"id": 3, "method": "run", "params": {"tmp_size": "64"}}),
        json!({"id": 4, "method": "frobnicate"}),
        json!({"id": 5, "method": "run", "params": {"colour": "blue"}}),
        json!({"id": 6, "method": "run", "params": {"argv": ["no-such-binary"]}}),
    ]);
    assert_eq!(answer(&lines, 1)["result"]["protocol"], 1);
    let r = &answer(&lines, 2)["result"];
    assert_eq!(r["stdout"], "42\n");
    assert!(r["duration_ms"].as_u64().unwrap() > 0 || r["stats"]["setup_us"].as_u64().unwrap() > 0);
    assert_eq!(answer(&lines, 3)["error"]["kind"], "invalid_argument");
    assert!(answer(&lines, 3)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unit"));
    assert_eq!(answer(&lines, 4)["error"]["kind"], "unknown_method");
    assert!(answer(&lines, 5)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("colour"));
    assert_eq!(answer(&lines, 6)["result"]["fault"]["type"], "exec_failed");
}

/// With `require_limits`, the caps that cannot be enforced are listed by controller with their
/// reason (`unenforced`), for `run` and `sandbox.create` alike; a host whose cgroups cannot be
/// used at all gives the cgroup error as the chain's own level, not folded into the text.
#[test]
fn caps_that_cannot_be_enforced_are_listed_by_controller() {
    let requests = [
        json!({"id": 1, "method": "run", "params": {"argv": ["true"], "memory": "64m", "require_limits": true}}),
        json!({"id": 2, "method": "sandbox.create", "params": {"memory_mb": 64, "require_limits": true}}),
    ];
    // A parent cgroup that does not exist: hull-cgroup says why for each controller.
    let lines = session_env(&requests, &[("HULL_CGROUP_PARENT", "hull-no-such-parent")]);
    for id in [1, 2] {
        let e = &answer(&lines, id)["error"];
        assert_eq!(e["kind"], "limits_unenforced", "{e}");
        assert_eq!(e["arg"], "require_limits", "{e}");
        let memory = e["unenforced"]
            .as_array()
            .unwrap_or_else(|| panic!("no unenforced list: {e}"))
            .iter()
            .find(|u| u["controller"] == "memory")
            .unwrap_or_else(|| panic!("memory is not listed: {e}"));
        assert!(
            memory["reason"]
                .as_str()
                .unwrap()
                .contains("hull-no-such-parent"),
            "{e}"
        );
    }
    // A parent that is not a plain relative path: no cgroup at all.
    let lines = session_env(&requests, &[("HULL_CGROUP_PARENT", "../escape")]);
    for id in [1, 2] {
        let e = &answer(&lines, id)["error"];
        assert_eq!(e["kind"], "limits_unenforced", "{e}");
        let listed: Vec<&str> = e["unenforced"]
            .as_array()
            .unwrap_or_else(|| panic!("no unenforced list: {e}"))
            .iter()
            .map(|u| u["controller"].as_str().unwrap())
            .collect();
        assert!(listed.contains(&"memory"), "{e}");
        let chain: Vec<&str> = e["chain"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert!(
            chain
                .last()
                .is_some_and(|l| l.starts_with("invalid HULL_CGROUP_PARENT")),
            "{e}"
        );
        assert!(!chain[0].contains("invalid HULL_CGROUP_PARENT"), "{e}");
    }
}

/// An image that is not in the store is refused naming the argument once: `image: `x` not
/// found ...`, not `image: image `x` not found`.
#[test]
fn a_missing_image_is_named_once() {
    let lines = session(&[
        json!({"id": 1, "method": "run", "params": {"argv": ["true"], "image": "no-such-image:1"}}),
        json!({"id": 2, "method": "sandbox.create", "params": {"image": "no-such-image:1"}}),
    ]);
    for id in [1, 2] {
        let e = &answer(&lines, id)["error"];
        assert_eq!(e["kind"], "invalid_argument", "{e}");
        assert_eq!(e["arg"], "image", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(
            message.starts_with("image: `no-such-image:1` not found"),
            "{e}"
        );
        assert_eq!(message.matches("image `").count(), 0, "{e}");
    }
}

#[test]
fn malformed_lines_get_a_protocol_error_and_the_session_goes_on() {
    let mut child = Command::new(common::bin())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "this is not json").unwrap();
        writeln!(stdin, "{}", json!({"id": 1, "params": {}})).unwrap();
        writeln!(stdin, "{}", json!({"id": 2, "method": "hello"})).unwrap();
    }
    let lines: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    child.wait().unwrap();
    assert_eq!(lines[0]["error"]["kind"], "protocol");
    assert_eq!(lines[1]["error"]["kind"], "protocol");
    assert_eq!(lines[2]["result"]["protocol"], 1);
}

#[test]
fn streamed_output_arrives_as_events_before_the_result() {
    let lines = session(&[
        json!({"id": 7, "method": "run", "params": {"argv": ["sh", "-c", "echo a; sleep 0.3; echo b >&2"], "stream": true}}),
    ]);
    let events: Vec<&Value> = lines.iter().filter(|l| l.get("event").is_some()).collect();
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "stdout" && e["data"] == "a\n"),
        "{lines:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "stderr" && e["data"] == "b\n"),
        "{lines:?}"
    );
    // The answer comes after every event (and before shutdown's).
    let last = &lines[lines.len() - 2];
    assert_eq!(last["id"], 7);
    assert_eq!(last["result"]["stdout"], "a\n");
}

#[test]
fn concurrent_runs_in_one_session_all_answer() {
    let reqs: Vec<Value> = (0..20)
        .map(|i| json!({"id": i, "method": "run", "params": {"code": format!("print({i} + 1)")}}))
        .collect();
    let lines = session(&reqs);
    for i in 0..20 {
        assert_eq!(
            answer(&lines, i)["result"]["stdout"],
            format!("{}\n", i + 1)
        );
    }
}

/// Whether a process whose command line contains `marker` is alive on this host.
fn alive_with(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
            String::from_utf8_lossy(&c)
                .replace('\0', " ")
                .contains(marker)
        })
    })
}

#[test]
fn a_client_that_stops_reading_does_not_hold_off_deadlines() {
    let (read, write) = std::io::pipe().unwrap();
    stalled_client_keeps_deadlines(Stdio::from(write), Box::new(read), 0);
}

/// The same through a socket: Node's `child_process` (libuv) hands its children a socket pair,
/// not a pipe, as stdout.
#[test]
fn a_client_on_a_socket_that_stops_reading_does_not_hold_off_deadlines() {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    stalled_client_keeps_deadlines(
        Stdio::from(std::os::fd::OwnedFd::from(theirs)),
        Box::new(ours),
        1,
    );
}

/// hull serve must not make a stdout it shares with other processes non-blocking (the flag
/// belongs to the open file description, so a shell or a sibling writing to the same pipe
/// would start failing with EAGAIN).
#[test]
fn the_callers_stdout_is_left_blocking() {
    let (read, write) = std::io::pipe().unwrap();
    let kept = write.try_clone().unwrap();
    let mut child = Command::new(common::bin())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(write))
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", json!({"id": 1, "method": "hello"})).unwrap();
    let mut lines = BufReader::new(read).lines();
    let hello: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(hello["id"], 1, "{hello}");
    let flags = rustix::fs::fcntl_getfl(&kept).unwrap();
    drop(stdin);
    child.wait().unwrap();
    assert!(
        !flags.contains(rustix::fs::OFlags::NONBLOCK),
        "hull serve set O_NONBLOCK on the stdout it shares with its caller"
    );
}

/// `salt` keeps the sleeper's marker apart from another test's in this process.
fn stalled_client_keeps_deadlines(stdout: Stdio, reader: Box<dyn std::io::Read>, salt: u32) {
    let mut child = Command::new(common::bin())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(stdout)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A streamed flood fills the stdout pipe, which nobody reads...
    let flood = json!({"id": 1, "method": "run", "params": {"code": "import sys\nfor _ in range(4000): sys.stdout.write('x' * 65536)", "stream": true, "max_output": "1m", "timeout": "20s"}});
    // ...while another streaming box must still be killed at its deadline (its supervisor has
    // output to hand over too).
    let marker = format!("{}", 31_000_000 + 4_000_000 * salt + std::process::id());
    let sleeper = json!({"id": 2, "method": "run", "params": {"argv": ["sh", "-c", format!("echo started; exec sleep {marker}")], "timeout": "1s", "stream": true}});
    writeln!(stdin, "{flood}").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    writeln!(stdin, "{sleeper}").unwrap();
    let t = std::time::Instant::now();
    while !alive_with(&format!("sleep {marker}"))
        && t.elapsed() < std::time::Duration::from_secs(10)
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        alive_with(&format!("sleep {marker}")),
        "the sleeper never started"
    );
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert!(
        !alive_with(&format!("sleep {marker}")),
        "the sleeper outlived its 1 s deadline while stdout was not read"
    );
    // Now read: both answers arrive, the sleeper's as a timeout.
    writeln!(stdin, "{}", json!({"id": "end", "method": "shutdown"})).unwrap();
    drop(stdin);
    let lines: Vec<Value> = BufReader::new(reader)
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        answer(&lines, 2)["result"]["fault"]["type"],
        "timeout",
        "{:?}",
        answer(&lines, 2)
    );
    assert!(
        answer(&lines, 1)["result"]["truncated"]
            .as_bool()
            .unwrap_or(false),
        "{:?}",
        answer(&lines, 1)
    );
}

/// A `hull serve` child with piped stdin/stdout, read line by line.
struct Server {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(common::bin())
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Server {
            child,
            stdin,
            stdout,
        }
    }

    fn send_raw(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, v: &Value) {
        self.send_raw(v.to_string().as_bytes());
    }

    /// The next line that is not a streamed event.
    fn answer(&mut self) -> Value {
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "hull serve closed its output"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("event").is_none() {
                return v;
            }
        }
    }

    fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&json!({"id": id, "method": method, "params": params}));
        let a = self.answer();
        assert_eq!(a["id"], id, "{a}");
        a
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_line_that_is_not_utf8_is_answered_and_the_server_goes_on() {
    let mut s = Server::start();
    let created = s.call(1, "sandbox.create", json!({}));
    let sb = created["result"]["sandbox"].as_str().unwrap().to_string();
    // One byte that is never UTF-8, inside an otherwise fine request.
    let mut bad = br#"{"id": 2, "method": "sandbox.run", "params": {"sandbox": ""#.to_vec();
    bad.extend_from_slice(sb.as_bytes());
    bad.extend_from_slice(b"\", \"argv\": [\"echo\", \"\xff\"]}}");
    s.send_raw(&bad);
    let a = s.answer();
    assert_eq!(a["id"], Value::Null, "{a}");
    assert_eq!(a["error"]["kind"], "protocol", "{a}");
    assert!(
        a["error"]["message"].as_str().unwrap().contains("UTF-8"),
        "{a}"
    );
    // The same server, and the sandbox made before the bad line, still answer.
    assert_eq!(s.call(3, "hello", json!({}))["result"]["protocol"], 1);
    let r = s.call(
        4,
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["echo", "still here"]}),
    );
    assert_eq!(r["result"]["stdout"], "still here\n", "{r}");
}

/// Box cgroups and session directories named for hull `pid` (what its sweep would remove).
fn leftovers_of(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    let mut visit = vec![(std::path::PathBuf::from("/sys/fs/cgroup"), 0)];
    // Names carry the owner identity `<pid>.<random>` (see hull-box's `owner.rs`).
    let cg = format!("hull-{pid}.");
    while let Some((d, depth)) = visit.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) && depth < 6 {
                if e.file_name().to_string_lossy().starts_with(&cg) {
                    found.push(e.path().display().to_string());
                }
                visit.push((e.path(), depth + 1));
            }
        }
    }
    let ws = format!("hull-ws-{pid}.");
    for e in std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(&ws) {
            found.push(e.path().display().to_string());
        }
    }
    found
}

#[test]
fn closing_stdin_ends_every_running_box_at_once() {
    let mut s = Server::start();
    let pid = s.child.id();
    let sb = s.call(1, "sandbox.create", json!({"timeout_s": 60}))["result"]["sandbox"]
        .as_str()
        .unwrap()
        .to_string();
    let kernel = s.call(2, "kernel.start", json!({"sandbox": sb}))["result"]["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    // Four long calls of every kind, each sleeping with a marker no other process has.
    let base = 40_000_000 + u64::from(std::process::id()) * 10;
    let marker = |i: u64| format!("sleep {}.5", base + i);
    let py = |i: u64| {
        format!(
            "import subprocess\nsubprocess.run(['sleep', '{}.5'])",
            base + i
        )
    };
    s.send(&json!({"id": 10, "method": "run", "params": {"argv": ["sleep", format!("{}.5", base)], "timeout": "60s"}}));
    s.send(&json!({"id": 11, "method": "sandbox.run", "params": {"sandbox": sb, "argv": ["sleep", format!("{}.5", base + 1)]}}));
    s.send(
        &json!({"id": 12, "method": "sandbox.run_code", "params": {"sandbox": sb, "code": py(2)}}),
    );
    s.send(&json!({"id": 13, "method": "kernel.run_code", "params": {"sandbox": sb, "kernel": kernel, "code": py(3)}}));
    let t = std::time::Instant::now();
    while !(0..4).all(|i| alive_with(&marker(i))) {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "not every call started: {:?}",
            (0..4).map(|i| alive_with(&marker(i))).collect::<Vec<_>>()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The check below looks where the server's things are: its session directory at least.
    assert!(
        !leftovers_of(pid).is_empty(),
        "nothing named for hull {pid} found while it runs"
    );
    // The client goes away (as when the SDK's process is SIGKILLed): its end of stdin closes.
    drop(s.stdin.take());
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "hull serve still runs 10 s after its stdin closed (the calls' deadline is 60 s)"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    for i in 0..4 {
        assert!(!alive_with(&marker(i)), "{} outlived the server", marker(i));
    }
    // It cleaned up after itself, rather than dying and leaving it to the next sweep.
    assert_eq!(leftovers_of(pid), Vec::<String>::new());
}
