//! `hull serve`: the JSON-lines protocol, driven through a real child process.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// Sends `requests`, closes stdin, and returns every line the server wrote.
fn session(requests: &[Value]) -> Vec<Value> {
    let mut child = Command::new(common::bin())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for r in requests {
            writeln!(stdin, "{r}").unwrap();
        }
    }
    let lines: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success());
    lines
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
    let last = lines.last().unwrap();
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
    let mut child = Command::new(common::bin())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A streamed flood fills the stdout pipe, which nobody reads...
    let flood = json!({"id": 1, "method": "run", "params": {"code": "import sys\nfor _ in range(4000): sys.stdout.write('x' * 65536)", "stream": true, "max_output": "1m", "timeout": "20s"}});
    // ...while another streaming box must still be killed at its deadline (its supervisor has
    // output to hand over too).
    let marker = format!("{}", 31_000_000 + std::process::id());
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
    drop(stdin);
    let lines: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
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
