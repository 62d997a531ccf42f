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

/// A test's sandboxes: every one removed (`hull rm`) when dropped; `HULL_HOME` (an image
/// store) when the test made one.
struct Sandboxes(tempfile::TempDir, Option<std::path::PathBuf>);

impl Sandboxes {
    fn new() -> Sandboxes {
        Sandboxes(
            tempfile::Builder::new()
                .prefix("hull-serve-named-")
                .tempdir()
                .expect("tempdir"),
            None,
        )
    }

    /// `hull ARGS` with this test's sandboxes (and image store).
    fn hull(&self, args: &[&str]) -> std::process::Output {
        let mut c = Command::new(common::bin());
        c.args(args)
            .env("HULL_SANDBOXES", self.0.path())
            .stdin(Stdio::null());
        if let Some(h) = &self.1 {
            c.env("HULL_HOME", h);
        }
        c.output().expect("run hull")
    }

    fn serve(&self) -> Server {
        let mut cmd = Command::new(common::bin());
        if let Some(h) = &self.1 {
            cmd.env("HULL_HOME", h);
        }
        let mut child = cmd
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

/// Whether a process whose command line is `args` runs in the sandbox (`ps` in it).
fn running_in(server: &mut Server, name: &str, args: &str) -> bool {
    let ps = sh(server, name, "ps -eo args")["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    ps.lines().any(|l| l.trim() == args)
}

#[test]
fn a_spawned_server_keeps_serving_across_execs_and_is_gone_after_stop() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "srv" }));
    let server = "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', 8765)); s.listen(8)\nwhile True:\n    c, _ = s.accept(); c.sendall(b'pong'); c.close()\n";
    s.call(
        "named.write_file",
        json!({ "sandbox": "srv", "path": "server.py", "text": server }),
    );
    s.call(
        "named.spawn",
        json!({ "sandbox": "srv", "argv": ["python3", "/workspace/server.py"] }),
    );
    let client = "import socket,time\nfor i in range(100):\n    try:\n        c = socket.create_connection(('127.0.0.1', 8765), timeout=2); print(c.recv(4).decode()); break\n    except OSError: time.sleep(0.05)\nelse: print('refused')";
    let ask = |s: &mut Server| {
        s.call(
            "named.exec",
            json!({ "sandbox": "srv", "argv": ["python3", "-c", client] }),
        )["stdout"]
            .clone()
    };
    // Served across several execs, and through another server once the spawning one is gone.
    for _ in 0..3 {
        assert_eq!(ask(&mut s), json!("pong\n"));
        sh(&mut s, "srv", "true");
    }
    s.close();
    let mut b = sbs.serve();
    assert_eq!(ask(&mut b), json!("pong\n"));
    b.call("named.stop", json!({ "sandbox": "srv" }));
    // The next exec starts the sandbox again: the server is not in it.
    let quick = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 8765), timeout=2); print('pong')\nexcept OSError: print('refused')";
    let r = b.call(
        "named.exec",
        json!({ "sandbox": "srv", "argv": ["python3", "-c", quick] }),
    );
    assert_eq!(r["stdout"], json!("refused\n"));
    assert!(!running_in(&mut b, "srv", "python3 /workspace/server.py"));
    b.close();
}

#[test]
fn kill_ends_the_whole_tree_even_a_setsid_double_forked_grandchild() {
    let sbs = Sandboxes::new();
    let mut a = sbs.serve();
    a.call("named.create", json!({ "name": "tree" }));
    // A daemon: a new session, its parent gone at once (so pid 1 adopts it), then the
    // spawned command's own child.
    let cmd = "setsid sh -c 'sleep 4242 & exit 0'; sleep 4243 & echo up; wait";
    let h = a.call("named.spawn", json!({ "sandbox": "tree", "shell": cmd }))["process"].clone();
    let t0 = std::time::Instant::now();
    while !running_in(&mut a, "tree", "sleep 4242") {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the daemon never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The spawning server goes; another one kills the handle.
    a.close();
    let mut b = sbs.serve();
    assert_eq!(
        b.call("named.kill", json!({ "sandbox": "tree", "process": h }))["killed"],
        json!(true)
    );
    assert!(
        !running_in(&mut b, "tree", "sleep 4242"),
        "the setsid'd grandchild outlived the kill"
    );
    assert!(!running_in(&mut b, "tree", "sleep 4243"));
    // Killing again is fine, and the wait says 137 with what it printed.
    assert_eq!(
        b.call("named.kill", json!({ "sandbox": "tree", "process": h }))["killed"],
        json!(false)
    );
    let w = b.call("named.wait", json!({ "sandbox": "tree", "process": h }));
    assert_eq!(
        (w["exit_code"].clone(), w["stdout"].clone()),
        (json!(137), json!("up\n"))
    );
    let e = b.error(
        "named.kill",
        json!({ "sandbox": "tree", "process": "s1n999" }),
    );
    assert_eq!(e["kind"], json!("not_found"));
    b.close();
}

#[test]
fn a_spawns_output_is_in_hull_logs() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "lg" }));
    // Never waited for (a wait's own output would be logged as well), and printing what its
    // command line (logged too) does not say: the spawn's own output reaches the log.
    s.call(
        "named.spawn",
        json!({ "sandbox": "lg", "shell": "echo spawned-marker-$((6+1)); echo to-stderr-$((6+1)) >&2; sleep 600" }),
    );
    s.close();
    let t0 = std::time::Instant::now();
    loop {
        let out = sbs.hull(&["logs", "lg"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("spawned-marker-7") && text.contains("to-stderr-7") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "hull logs lacks the spawn's output:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An OCI layout of one layer with no program at all (no sh, no coreutils): a file, a
/// directory, and symlinks that point out of the root (absolute, and by `..`s) at `outside`.
fn files_only_layout(dir: &std::path::Path, outside: &str) {
    use hull_image::oci::Digest;
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut add = |path: &str, data: &[u8], kind: tar::EntryType, link: Option<&str>| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(if kind == tar::EntryType::Regular {
            0o644
        } else {
            0o755
        });
        h.set_size(data.len() as u64);
        if let Some(l) = link {
            h.set_link_name(l).unwrap();
        }
        b.append_data(&mut h, path, data).unwrap();
    };
    add("srv/", b"", tar::EntryType::Directory, None);
    add(
        "srv/notes.txt",
        b"one\ntwo\nthree\nfour\n",
        tar::EntryType::Regular,
        None,
    );
    add("abs", b"", tar::EntryType::Symlink, Some(outside));
    let up = format!("../../../../../../../..{outside}");
    add("srv/up", b"", tar::EntryType::Symlink, Some(&up));
    add("shadow", b"", tar::EntryType::Symlink, Some("/etc/shadow"));
    let layer = b.into_inner().unwrap().finish().unwrap();
    let config = br#"{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"]}}"#;
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let put = |bytes: &[u8], media: &str| {
        let d = Digest::of(bytes);
        std::fs::write(dir.join("blobs/sha256").join(d.hex()), bytes).unwrap();
        json!({"digest": d.to_string(), "size": bytes.len(), "mediaType": media})
    };
    let l = put(&layer, "application/vnd.oci.image.layer.v1.tar+gzip");
    let c = put(config, "application/vnd.oci.image.config.v1+json");
    let manifest = serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": c, "layers": [l]})).unwrap();
    let mut m = put(&manifest, "application/vnd.oci.image.manifest.v1+json");
    m["annotations"] = json!({"org.opencontainers.image.ref.name": "v1"});
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [m]})).unwrap(),
    )
    .unwrap();
}

fn b64(v: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(v["data_b64"].as_str().expect("data_b64"))
        .unwrap()
}

#[test]
fn file_operations_work_without_sh_and_never_follow_a_symlink_out_of_the_root() {
    // A host file the sandbox's links point at: never read, never written.
    let host = tempfile::Builder::new()
        .prefix("hull-host-secret-")
        .tempdir()
        .unwrap();
    let secret = host.path().join("secret.txt");
    std::fs::write(&secret, "host secret\n").unwrap();
    let outside = secret.to_str().unwrap().to_string();
    let layout = tempfile::tempdir().unwrap();
    files_only_layout(layout.path(), &outside);
    let home = tempfile::tempdir().unwrap();
    let mut sbs = Sandboxes::new();
    sbs.1 = Some(home.path().to_path_buf());
    let imported = sbs.hull(&[
        "import",
        layout.path().to_str().unwrap(),
        "--name",
        "files:1",
    ]);
    assert!(imported.status.success(), "{imported:?}");
    let mut s = sbs.serve();
    s.call(
        "named.create",
        json!({ "name": "nosh", "image": "files:1" }),
    );
    let f = |p: &str| json!({ "sandbox": "nosh", "path": p });
    // No sh in the image: exec and spawn find nothing to run, file operations work.
    assert_eq!(
        s.call(
            "named.exec",
            json!({ "sandbox": "nosh", "argv": ["sh", "-c", "true"] })
        )["exit_code"],
        json!(127)
    );
    assert_eq!(
        b64(&s.call("named.read_file", f("/srv/notes.txt"))),
        b"one\ntwo\nthree\nfour\n"
    );
    let lines = s.call(
        "named.read_file",
        json!({ "sandbox": "nosh", "path": "/srv/notes.txt", "start_line": 2, "end_line": 3 }),
    );
    assert_eq!(b64(&lines), b"two\nthree\n");
    let w = s.call(
        "named.write_file",
        json!({ "sandbox": "nosh", "path": "deep/er/new.txt", "text": "made\n" }),
    );
    assert_eq!(w["bytes"], json!(5));
    assert_eq!(
        b64(&s.call("named.read_file", f("/workspace/deep/er/new.txt"))),
        b"made\n"
    );
    s.call(
        "named.write_file",
        json!({ "sandbox": "nosh", "path": "deep/er/new.txt", "text": "over" }),
    );
    assert_eq!(
        b64(&s.call("named.read_file", f("deep/er/new.txt"))),
        b"over"
    );
    let st = s.call("named.stat", f("/srv/notes.txt"));
    assert_eq!(
        (st["type"].clone(), st["size"].clone()),
        (json!("file"), json!(19))
    );
    assert_eq!(s.call("named.stat", f("/abs"))["type"], json!("symlink"));
    let names: Vec<String> = s.call("named.list_files", f("/srv"))["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.contains(&"notes.txt".to_string()) && names.contains(&"up".to_string()),
        "{names:?}"
    );
    // Missing: null; a directory where a file was asked, or a file where a directory was: typed.
    assert_eq!(s.call("named.read_file", f("/nope")), Value::Null);
    assert_eq!(s.call("named.stat", f("/nope/deeper")), Value::Null);
    assert_eq!(s.call("named.list_files", f("/nope")), Value::Null);
    assert_eq!(
        s.error("named.read_file", f("/srv"))["kind"],
        json!("is_a_directory")
    );
    assert_eq!(
        s.error(
            "named.write_file",
            json!({ "sandbox": "nosh", "path": "/srv", "text": "x" })
        )["kind"],
        json!("is_a_directory")
    );
    assert_eq!(
        s.error("named.list_files", f("/srv/notes.txt"))["kind"],
        json!("not_a_directory")
    );

    // Links out of the root resolve inside it: the host file is never read...
    for link in ["/abs", "/srv/up"] {
        let r = s.call("named.read_file", f(link));
        assert!(
            r.is_null() || b64(&r) != b"host secret\n",
            "{link} read the host's file"
        );
    }
    if let Ok(shadow) = std::fs::read("/etc/shadow") {
        let r = s.call("named.read_file", f("/shadow"));
        assert!(
            r.is_null() || b64(&r) != shadow,
            "read the host's /etc/shadow"
        );
    }
    // ...nor written: a write through a link lands in the sandbox's root, or fails.
    s.call(
        "named.write_file",
        json!({ "sandbox": "nosh", "path": format!("{}/x", host.path().display()), "text": "" }),
    );
    for link in ["/abs", "/srv/up"] {
        let id = s.send(
            "named.write_file",
            json!({ "sandbox": "nosh", "path": link, "text": "pwned\n" }),
        );
        let _ = s.answer(id);
    }
    // The last write went to the sandbox's copy of the path (its parent exists now).
    let id = s.send("named.read_file", f(&outside));
    let (_, inside) = s.answer(id);
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "host secret\n",
        "a write followed a link out of the sandbox's root"
    );
    assert_eq!(b64(&inside["result"]), b"pwned\n", "{inside}");
    // Deleting a link deletes the link, not what it points at.
    assert_eq!(s.call("named.delete", f("/abs"))["deleted"], json!(true));
    assert_eq!(s.call("named.delete", f("/abs"))["deleted"], json!(false));
    assert!(secret.exists());
    assert_eq!(s.call("named.delete", f("deep"))["deleted"], json!(true));
    assert_eq!(s.call("named.stat", f("deep")), Value::Null);
    s.call("named.rm", json!({ "sandbox": "nosh" }));
    s.close();
}

#[test]
fn files_written_belong_to_the_sandboxs_user() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "own" }));
    s.call(
        "named.write_file",
        json!({ "sandbox": "own", "path": "made/by/sdk.txt", "text": "x" }),
    );
    let r = sh(
        &mut s,
        "own",
        "stat -c %u:%g /workspace/made /workspace/made/by/sdk.txt; id -u",
    );
    assert_eq!(r["stdout"], json!("0:0\n0:0\n0\n"), "{r}");
    // The sandbox's user can change what was written (it owns it).
    assert_eq!(
        sh(
            &mut s,
            "own",
            "echo more >> /workspace/made/by/sdk.txt && rm -r /workspace/made"
        )["exit_code"],
        json!(0)
    );
    s.call("named.rm", json!({ "sandbox": "own" }));
    s.close();
}

#[test]
fn a_wait_replays_the_last_mebibyte_and_says_how_much_came_before() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "big" }));
    let h = s.call(
        "named.spawn",
        json!({ "sandbox": "big", "shell": "head -c 3000000 /dev/zero | tr '\\0' a; echo; echo tail-$((1+1))" }),
    )["process"]
        .clone();
    // A wait that comes once it has all been printed (a wait in flight reads it as it comes).
    std::thread::sleep(Duration::from_millis(1500));
    let w = s.call("named.wait", json!({ "sandbox": "big", "process": h }));
    assert_eq!(w["exit_code"], json!(0));
    let out = w["stdout"].as_str().unwrap();
    let dropped = w["dropped_bytes"].as_u64().unwrap();
    assert!(
        out.ends_with("\ntail-2\n"),
        "{}",
        &out[out.len().saturating_sub(20)..]
    );
    assert!(
        out.len() <= (1 << 20) + (64 << 10),
        "{} bytes replayed",
        out.len()
    );
    assert_eq!(
        dropped + out.len() as u64,
        3_000_000 + 8,
        "every byte replayed or counted"
    );
    s.call("named.rm", json!({ "sandbox": "big" }));
    s.close();
}

#[test]
fn a_spawn_whose_client_went_away_before_the_answer_does_not_run_on() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "gone" }));
    // The client sends a spawn and is gone at once (its end of the pipe closed): it never
    // gets the handle, so nothing of the spawn may run on.
    s.send(
        "named.spawn",
        json!({ "sandbox": "gone", "argv": ["sleep", "4271"] }),
    );
    s.close();
    let mut b = sbs.serve();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !running_in(&mut b, "gone", "sleep 4271"),
        "a spawn nobody got the handle of runs on"
    );
    b.call("named.rm", json!({ "sandbox": "gone" }));
    b.close();
}

/// `named.create` from a template (as `hull create --template`), `named.logs` (what `hull logs`
/// prints) and `named.list` with each sandbox's user.
#[test]
fn create_from_a_template_logs_and_list_through_serve() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call(
        "named.create",
        json!({ "name": "base", "env": { "FROM_BASE": "1" } }),
    );
    assert_eq!(
        sh(
            &mut s,
            "base",
            "mkdir -p /opt && echo baked > /opt/baked && echo logged-$((6*7))"
        )["exit_code"],
        json!(0)
    );
    s.call("named.stop", json!({ "sandbox": "base" }));
    let out = sbs.hull(&["template", "save", "base", "t1"]);
    assert!(out.status.success(), "{out:?}");
    let made = s.call(
        "named.create",
        json!({ "name": "child", "template": "t1", "env": { "MINE": "2" } }),
    );
    assert_eq!(made["created"], json!(true));
    let r = sh(&mut s, "child", "cat /opt/baked; echo $FROM_BASE$MINE");
    assert_eq!(r["stdout"], json!("baked\n12\n"), "{r}");
    // The template's image is the only one its layers lie over; a missing template is named.
    let e = s.error(
        "named.create",
        json!({ "name": "other", "template": "t1", "image": "busybox:1" }),
    );
    assert_eq!(
        (e["kind"].as_str(), e["arg"].as_str()),
        (Some("invalid_argument"), Some("image")),
        "{e}"
    );
    let e = s.error(
        "named.create",
        json!({ "name": "other", "template": "nope" }),
    );
    assert_eq!(e["arg"], json!("template"), "{e}");
    assert!(
        sbs.hull(&["ps", "--json"]).stdout.len() > 2
            && !String::from_utf8_lossy(&sbs.hull(&["ps"]).stdout).contains("other"),
        "a refused creation left a sandbox"
    );
    // Logs: what the base's commands printed, its end with max_bytes.
    let l = s.call("named.logs", json!({ "sandbox": "base" }));
    assert!(l["logs"].as_str().unwrap().contains("logged-42\n"), "{l}");
    assert_eq!(l["truncated"], json!(false));
    let tail = s.call("named.logs", json!({ "sandbox": "base", "max_bytes": 10 }));
    assert_eq!(tail["logs"].as_str().unwrap().len(), 10, "{tail}");
    assert_eq!(tail["truncated"], json!(true));
    let e = s.error("named.logs", json!({ "sandbox": "ghost" }));
    assert_eq!(e["kind"], json!("not_found"), "{e}");
    let list = s.call("named.list", json!({}));
    let names: Vec<(&str, &str, &str)> = list["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["name"].as_str().unwrap(),
                x["state"].as_str().unwrap(),
                x["user"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(names.contains(&("base", "stopped", "root")), "{list}");
    assert!(names.contains(&("child", "running", "root")), "{list}");
    s.call("named.rm", json!({ "sandbox": "child" }));
    s.call("named.rm", json!({ "sandbox": "base" }));
    s.close();
}

#[test]
fn templates_are_saved_listed_removed_and_pruned_through_serve() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "base" }));
    assert_eq!(
        sh(&mut s, "base", "echo baked > /workspace/baked")["exit_code"],
        json!(0)
    );
    // A running sandbox is refused, and no template is made.
    let e = s.error(
        "named.template_save",
        json!({ "sandbox": "base", "name": "t1" }),
    );
    assert_eq!(e["kind"], json!("sandbox_running"), "{e}");
    assert_eq!(
        s.call("named.template_list", json!({}))["templates"],
        json!([])
    );
    s.call("named.stop", json!({ "sandbox": "base" }));
    let saved = s.call(
        "named.template_save",
        json!({ "sandbox": "base", "name": "t1" }),
    );
    assert_eq!(saved["template"], json!("t1"));
    // The same name again is a conflict; a bad name and a missing sandbox are named.
    let e = s.error(
        "named.template_save",
        json!({ "sandbox": "base", "name": "t1" }),
    );
    assert_eq!(e["kind"], json!("conflict"), "{e}");
    let e = s.error(
        "named.template_save",
        json!({ "sandbox": "base", "name": "Bad/Name" }),
    );
    assert_eq!(
        (e["kind"].as_str(), e["arg"].as_str()),
        (Some("invalid_argument"), Some("name")),
        "{e}"
    );
    let e = s.error(
        "named.template_save",
        json!({ "sandbox": "ghost", "name": "t2" }),
    );
    assert_eq!(e["kind"], json!("not_found"), "{e}");
    // Listed as `hull template ls` lists it, and the CLI sees it.
    let list = s.call("named.template_list", json!({}));
    let t = &list["templates"][0];
    assert_eq!(
        (
            &t["name"],
            &t["from"],
            &t["image"],
            &t["user"],
            &t["layers"]
        ),
        (
            &json!("t1"),
            &json!("base"),
            &json!("host"),
            &json!("root"),
            &json!(1)
        ),
        "{list}"
    );
    assert!(t["size_bytes"].as_u64().unwrap() >= 6, "{list}");
    let ls = sbs.hull(&["template", "ls"]);
    assert!(String::from_utf8_lossy(&ls.stdout).contains("t1"), "{ls:?}");
    // A sandbox made from it keeps working after the template is removed.
    s.call("named.create", json!({ "name": "child", "template": "t1" }));
    assert_eq!(
        s.call("named.template_rm", json!({ "name": "t1" }))["removed"],
        json!(true)
    );
    assert_eq!(
        s.call("named.template_rm", json!({ "name": "t1" }))["removed"],
        json!(false)
    );
    assert_eq!(
        sh(&mut s, "child", "cat /workspace/baked")["stdout"],
        json!("baked\n")
    );
    // Prune: a young template stays under a long age, goes with age 0.
    s.call(
        "named.template_save",
        json!({ "sandbox": "base", "name": "t2" }),
    );
    assert_eq!(
        s.call("named.template_prune", json!({ "older_than_s": 3600 }))["removed"],
        json!([])
    );
    assert_eq!(
        s.call("named.template_prune", json!({}))["removed"],
        json!(["t2"])
    );
    assert_eq!(
        s.call("named.template_list", json!({}))["templates"],
        json!([])
    );
    s.call("named.rm", json!({ "sandbox": "child" }));
    s.call("named.rm", json!({ "sandbox": "base" }));
    s.close();
}

#[test]
fn a_spawn_made_with_stdin_reads_what_is_written_until_eof() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    s.call("named.create", json!({ "name": "in" }));
    let p = s.call(
        "named.spawn",
        json!({ "sandbox": "in", "shell": "while read l; do echo \"got $l\"; done; echo eof", "stdin": true }),
    )["process"]
        .clone();
    let w = s.call(
        "named.write_stdin",
        json!({ "sandbox": "in", "process": p, "text": "a\n" }),
    );
    assert_eq!(w["written"], json!(2));
    // Bytes too; a later server writes to the same stdin (the keeper holds it).
    s.close();
    let mut s = sbs.serve();
    s.call(
        "named.write_stdin",
        json!({ "sandbox": "in", "process": p, "data_b64": "Ygo=", "eof": true }),
    );
    let r = s.call("named.wait", json!({ "sandbox": "in", "process": p }));
    assert_eq!(
        (r["exit_code"].clone(), r["stdout"].clone()),
        (json!(0), json!("got a\ngot b\neof\n")),
        "{r}"
    );
    // Closed: nothing more is taken; a spawn without stdin has none; an unknown one is named.
    let e = s.error(
        "named.write_stdin",
        json!({ "sandbox": "in", "process": p, "text": "late" }),
    );
    assert!(e["message"].as_str().unwrap().contains("no stdin"), "{e}");
    let plain =
        s.call("named.spawn", json!({ "sandbox": "in", "shell": "cat" }))["process"].clone();
    let r = s.call("named.wait", json!({ "sandbox": "in", "process": plain }));
    assert_eq!(r["exit_code"], json!(0), "{r}");
    let e = s.error(
        "named.write_stdin",
        json!({ "sandbox": "in", "process": plain, "text": "x" }),
    );
    assert!(e["message"].as_str().unwrap().contains("no stdin"), "{e}");
    let e = s.error(
        "named.write_stdin",
        json!({ "sandbox": "in", "process": "s1n999", "text": "x" }),
    );
    assert_eq!(e["kind"], json!("not_found"), "{e}");
    // A process waiting on its stdin is killed with its tree as any spawn.
    let q = s.call(
        "named.spawn",
        json!({ "sandbox": "in", "shell": "cat > /dev/null; echo never", "stdin": true }),
    )["process"]
        .clone();
    s.call(
        "named.write_stdin",
        json!({ "sandbox": "in", "process": q, "text": "x\n" }),
    );
    assert_eq!(
        s.call("named.kill", json!({ "sandbox": "in", "process": q }))["killed"],
        json!(true)
    );
    let r = s.call("named.wait", json!({ "sandbox": "in", "process": q }));
    assert_eq!(
        (r["exit_code"].clone(), r["stdout"].clone()),
        (json!(137), json!(""))
    );
    s.call("named.rm", json!({ "sandbox": "in" }));
    s.close();
}

/// Connects to `127.0.0.1:port` (retrying while the box's server starts) and reads its line.
fn read_from_host(port: u16) -> String {
    use std::io::Read;
    for _ in 0..100 {
        if let Ok(mut c) = std::net::TcpStream::connect_timeout(
            &([127, 0, 0, 1], port).into(),
            Duration::from_secs(2),
        ) {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut got = String::new();
            if c.read_to_string(&mut got).is_ok() && !got.is_empty() {
                return got;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    "nothing".into()
}

/// The published ports' host ports come back from `named.create`, `named.start` and
/// `named.list`, and a server in the box on a published port is reached through its host port
/// on the host's loopback; a restart publishes new host ports, and the answers follow it.
#[test]
fn published_ports_are_answered_and_reach_the_boxs_server_from_the_host() {
    let sbs = Sandboxes::new();
    let mut s = sbs.serve();
    let made = s.call(
        "named.create",
        json!({ "name": "pub", "network": {"mode": "deny-all", "ports": [8080]} }),
    );
    let ports = made["ports"]
        .as_array()
        .expect("ports in the answer")
        .clone();
    assert_eq!(ports.len(), 1, "{made}");
    assert_eq!(ports[0]["port"], json!(8080));
    let host_port = |v: &Value| u16::try_from(v["host_port"].as_u64().expect("host_port")).unwrap();
    assert!(host_port(&ports[0]) > 0);
    let server = "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', 8080)); s.listen(8)\nwhile True:\n    c, _ = s.accept(); c.sendall(b'from the box\\n'); c.close()\n";
    let serve_in_box = |s: &mut Server| {
        s.call(
            "named.spawn",
            json!({ "sandbox": "pub", "argv": ["python3", "-c", server] }),
        );
    };
    serve_in_box(&mut s);
    assert_eq!(read_from_host(host_port(&ports[0])), "from the box\n");
    let listed = s.call("named.list", json!({}));
    let entry = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "pub")
        .cloned()
        .expect("listed");
    assert_eq!(entry["ports"], json!(ports), "{listed}");
    // Stopped: nothing is published. Started again: the answer gives the new keeper's ports.
    s.call("named.stop", json!({ "sandbox": "pub" }));
    let listed = s.call("named.list", json!({}));
    assert_eq!(listed["sandboxes"][0]["ports"], json!([]), "{listed}");
    let started = s.call("named.start", json!({ "sandbox": "pub" }));
    let again = started["ports"].as_array().expect("ports").clone();
    assert_eq!(again.len(), 1, "{started}");
    assert_eq!(again[0]["port"], json!(8080));
    serve_in_box(&mut s);
    assert_eq!(read_from_host(host_port(&again[0])), "from the box\n");
    // A sandbox without published ports answers an empty list.
    let plain = s.call("named.create", json!({ "name": "plain" }));
    assert_eq!(plain["ports"], json!([]), "{plain}");
    s.close();
}
