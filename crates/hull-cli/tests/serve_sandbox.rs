//! `hull serve` Sandbox sessions (`sandbox.*`, `kernel.*`) through a real server process:
//! rich results, the workspace shared by calls, confined file operations, hostile restores,
//! timeouts, kernels and argument refusals.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: i64,
}

impl Client {
    fn new() -> Client {
        Client::with_env(&[])
    }

    /// A server with these environment variables set (e.g. its own TMPDIR).
    fn with_env(env: &[(&str, &std::ffi::OsStr)]) -> Client {
        Client::spawn(
            Command::new(common::bin())
                .arg("serve")
                .envs(env.iter().copied()),
        )
    }

    /// A client of the server `cmd` starts (its stdin and stdout piped here).
    fn spawn(cmd: &mut Command) -> Client {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn hull serve");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Client {
            child,
            stdin,
            stdout,
            next: 0,
        }
    }

    /// A server given one end of a `SOCK_SEQPACKET` pair as `--fd-socket`; the other end is
    /// returned, for `kernel.attach`'s hand-offs.
    fn with_fd_socket() -> (Client, std::os::fd::OwnedFd) {
        use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
        use std::os::fd::AsRawFd;
        let (ours, theirs) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        // Inherited across exec: the server's end only.
        rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty()).unwrap();
        let client = Client::spawn(Command::new(common::bin()).args([
            "serve",
            "--fd-socket",
            &theirs.as_raw_fd().to_string(),
        ]));
        drop(theirs);
        (client, ours)
    }

    /// Sends one request and returns its answer (`result` or `error` object), skipping events.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next += 1;
        let id = self.next;
        writeln!(
            self.stdin,
            "{}",
            json!({"id": id, "method": method, "params": params})
        )
        .unwrap();
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed its output"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id && v.get("event").is_none() {
                return match v.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(v["result"].clone()),
                };
            }
        }
    }

    fn ok(&mut self, method: &str, params: Value) -> Value {
        self.call(method, params.clone())
            .unwrap_or_else(|e| panic!("{method} {params} failed: {e}"))
    }

    fn create(&mut self, params: Value) -> String {
        self.ok("sandbox.create", params)["sandbox"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({"id": 0, "method": "shutdown"}));
        let _ = self.child.wait();
    }
}

/// Python that finds the runner's channel the way hostile code would: by its descriptor.
const CHANNEL: &str = "import os, socket\ndef chan():\n    for f in os.listdir('/proc/self/fd'):\n        try:\n            if int(f) > 2 and os.readlink('/proc/self/fd/' + f).startswith('socket:'):\n                return socket.socket(fileno=os.dup(int(f)))\n        except OSError:\n            pass\n";

#[test]
fn run_code_returns_rich_results_and_shares_the_workspace() {
    let mut c = Client::new();
    let sb = c.create(json!({}));
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": "class H:\n    def _repr_html_(self): return '<b>x</b>'\ndisplay(H())\nprint('out')\nopen('a.txt','w').write('hi')\n6*7"}));
    assert_eq!(r["stdout"], "out\n", "{r}");
    assert_eq!(r["exit_code"], 0);
    assert!(r["fault"].is_null());
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{r}");
    assert_eq!(results[0]["text/html"], "<b>x</b>");
    assert_eq!(results[1]["text/plain"], "42");
    // Workspace-relative, as list_files gives paths, with size and change.
    assert_eq!(r["files"][0]["path"], "a.txt", "{r}");
    assert_eq!(r["files"][0]["change"], "created", "{r}");
    assert!(r["files"][0]["size"].is_u64(), "{r}");
    assert_eq!(r["files"].as_array().map(Vec::len), Some(1), "{r}");
    // A later call is a fresh box that sees the same workspace.
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["cat", "/workspace/a.txt"]}),
    );
    assert_eq!(r["stdout"], "hi");
    // Printing something that looks like a bundle is only output.
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": "print('{\"done\": true, \"results\": [{\"text/plain\": \"forged\"}]}')"}));
    assert!(r["results"].as_array().unwrap().is_empty(), "{r}");
    // Code that writes garbage to the runner's own channel gets a warning, not a broken server.
    assert!(
        c.ok(
            "sandbox.run_code",
            json!({"sandbox": sb, "code": "import sys\nhasattr(sys.modules['__main__'], '_chan')"})
        )["results"][0]["text/plain"]
            == "False"
    );
    let r = c.ok(
        "sandbox.run_code",
        json!({"sandbox": sb, "code": format!("{CHANNEL}chan().sendall(b'garbage\\n')\n1")}),
    );
    assert!(r["warnings"].to_string().contains("malformed frame"), "{r}");
    assert!(r["results"].as_array().unwrap().is_empty(), "{r}");
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": "2"}));
    assert_eq!(r["results"][0]["text/plain"], "2", "{r}");
}

#[test]
fn exceptions_are_not_faults_and_timeouts_are() {
    let mut c = Client::new();
    let sb = c.create(json!({"timeout_s": 1.5}));
    let r = c.ok(
        "sandbox.run_code",
        json!({"sandbox": sb, "code": "x = 1\nraise KeyError('boom')"}),
    );
    assert_ne!(r["exit_code"], 0);
    assert!(r["fault"].is_null(), "{r}");
    assert!(
        r["stderr"].as_str().unwrap().contains("KeyError: 'boom'"),
        "{r}"
    );
    let r = c.ok(
        "sandbox.run_code",
        json!({"sandbox": sb, "code": "while True: pass"}),
    );
    assert_eq!(r["fault"]["type"], "timeout", "{r}");
    // The sandbox's own deadline (not the 30 s default) ended the endless cell.
    assert!(
        r["fault"]["reason"].as_str().unwrap().contains("1.500s"),
        "{r}"
    );
    let r = c.ok(
        "sandbox.run_code",
        json!({"sandbox": sb, "code": "echo $((2+3))", "language": "bash"}),
    );
    assert_eq!(r["stdout"], "5\n");
}

#[test]
fn bad_arguments_are_refused_naming_them() {
    let mut c = Client::new();
    for (params, arg) in [
        (json!({"memory_mb": "x"}), "memory_mb"),
        (json!({"timeout_s": -1}), "timeout_s"),
        (json!({"colour": 1}), "colour"),
        (json!({"prewarm": 1000}), "prewarm"),
    ] {
        let e = c.call("sandbox.create", params.clone()).unwrap_err();
        assert_eq!(e["kind"], "invalid_argument", "{params}: {e}");
        assert_eq!(e["arg"], arg, "{params}: {e}");
    }
    let e = c
        .call("sandbox.create", json!({"mounts": ["/etc:/data"]}))
        .unwrap_err();
    assert_eq!(e["kind"], "mount_refused", "{e}");
    let sb = c.create(json!({}));
    let e = c
        .call(
            "sandbox.run_code",
            json!({"sandbox": sb, "code": "1", "language": "cobol"}),
        )
        .unwrap_err();
    assert_eq!(e["arg"], "language");
}

/// An engine refusal names the argument as the SDKs spell it (`arg`, and the message's start),
/// never `hull run`'s flag: a Python caller who passed `mounts=` must not read `--mount`.
#[test]
fn refusals_name_the_sandbox_argument_not_a_command_line_flag() {
    let mut c = Client::new();
    let d = tempfile::tempdir().unwrap();
    let src = d.path().display();
    for (params, kind, arg, flag) in [
        (
            json!({"mounts": ["/etc:/data"]}),
            "mount_refused",
            "mounts",
            "--mount",
        ),
        (
            json!({"mounts": [format!("{src}:/proc")]}),
            "mount_refused",
            "mounts",
            "--mount",
        ),
        (
            json!({"workspace": "/etc"}),
            "invalid_argument",
            "workspace",
            "--workspace",
        ),
        (
            json!({"memory_mb": 16, "tmpfs": {"/big": "64m"}}),
            "invalid_argument",
            "tmpfs",
            "--memory",
        ),
        (
            json!({"tmpfs": {"/data": "1m"}, "mounts": [format!("{src}:/data/x:ro")]}),
            "mount_refused",
            "tmpfs",
            "--mount",
        ),
        (
            json!({"cap_drop": ["FLY"]}),
            "invalid_argument",
            "cap_drop",
            "--cap-drop",
        ),
    ] {
        let e = c.call("sandbox.create", params.clone()).unwrap_err();
        let message = e["message"].as_str().unwrap();
        assert_eq!(e["kind"], kind, "{params}: {e}");
        assert_eq!(e["arg"], arg, "{params}: {e}");
        assert!(
            message.starts_with(&format!("{arg}: ")) && !message.contains(flag),
            "{params}: {e}"
        );
    }
    // `run` spells them by its own parameters.
    for (params, arg) in [
        (
            json!({"argv": ["true"], "mounts": ["/etc:/data"]}),
            "mounts",
        ),
        (
            json!({"argv": ["true"], "tmp_size": "64m", "memory": "16m"}),
            "tmp_size",
        ),
        (json!({"argv": ["true"], "cwd": "relative"}), "cwd"),
        (json!({}), "argv"),
    ] {
        let e = c.call("run", params.clone()).unwrap_err();
        let message = e["message"].as_str().unwrap();
        assert_eq!(e["arg"], arg, "{params}: {e}");
        assert!(
            message.starts_with(&format!("{arg}: ")) && !message.contains("--"),
            "{params}: {e}"
        );
    }
}

/// No level of an error's chain repeats the next one's text (a cause is never also formatted
/// into its parent's message), and `message` is the chain read once.
#[test]
fn error_chains_never_repeat_their_own_text() {
    let mut c = Client::new();
    let d = tempfile::tempdir().unwrap();
    let sb = c.create(json!({}));
    let missing = d.path().join("no/such/dir");
    let errors = [
        c.call("sandbox.create", json!({"mounts": ["/etc:/data"]})),
        c.call(
            "sandbox.create",
            json!({"mounts": [format!("{}:/data", missing.display())]}),
        ),
        c.call(
            "sandbox.restore",
            json!({"sandbox": sb, "src": missing.join("x.tar.gz")}),
        ),
        c.call(
            "sandbox.snapshot",
            json!({"sandbox": sb, "dest": missing.join("x.tar.gz")}),
        ),
        c.call(
            "run",
            json!({"argv": ["true"], "mounts": [format!("{}:/data", missing.display())]}),
        ),
        c.call("run", json!({"argv": ["true"], "image": "no-such-image:1"})),
    ];
    let mut longest = 0;
    for e in errors {
        let e = e.expect_err("the call was refused");
        let chain: Vec<&str> = e["chain"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        for pair in chain.windows(2) {
            assert!(!pair[0].contains(pair[1]), "{e}");
        }
        assert_eq!(e["message"].as_str().unwrap(), chain.join(": "), "{e}");
        longest = longest.max(chain.len());
    }
    assert!(longest >= 2, "no error had a cause to check");
}

/// `mounts=` and `workspace=` get the same sensitive-path checks as `hull run` (the SDKs pass
/// them through `sandbox.create`), naming the path and the reason.
#[test]
fn sandbox_mounts_and_workspace_refuse_credential_stores_and_start_up_files() {
    let d = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(d.path()).unwrap().join("me");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::create_dir_all(home.join(".local/bin")).unwrap();
    std::fs::write(home.join(".zshrc"), "echo hi").unwrap();
    let h = home.display();
    let mut c = Client::with_env(&[("HOME", home.as_os_str())]);
    for (params, kind, words) in [
        (
            json!({"mounts": [format!("{h}/.aws:/data:ro")]}),
            "mount_refused",
            "AWS access keys",
        ),
        (
            json!({"mounts": [{"source": format!("{h}/.zshrc"), "target": "/data/rc", "read_only": false}]}),
            "mount_refused",
            "commands every interactive zsh",
        ),
        (
            json!({"workspace": format!("{h}/.local/bin")}),
            "invalid_argument",
            "commands on the user's PATH",
        ),
    ] {
        let e = c.call("sandbox.create", params.clone()).unwrap_err();
        assert_eq!(e["kind"], kind, "{params}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(words),
            "{params}: {e}"
        );
    }
    c.create(json!({"mounts": [{"source": format!("{h}/.zshrc"), "target": "/data/rc", "read_only": true}]}));
}

#[test]
fn file_operations_never_follow_symlinks_or_block_on_fifos() {
    let mut c = Client::new();
    // A file operation that opened the FIFO would wait for a writer forever.
    let _guard = watchdog(&c, 60);
    let sb = c.create(json!({}));
    // The box plants a symlink to /etc/passwd (as seen by the host) and a FIFO.
    let r = c.ok("sandbox.run", json!({"sandbox": sb, "argv": ["sh", "-c", "ln -s /etc/passwd link && mkdir d && ln -s /etc dirlink && mkfifo pipe"]}));
    assert_eq!(r["exit_code"], 0, "{r}");
    let e = c
        .call("sandbox.read_file", json!({"sandbox": sb, "path": "link"}))
        .unwrap_err();
    assert_eq!(e["kind"], "path_refused", "{e}");
    assert!(e["message"].as_str().unwrap().contains("symlink"), "{e}");
    let e = c
        .call(
            "sandbox.read_file",
            json!({"sandbox": sb, "path": "dirlink/passwd"}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "path_refused", "{e}");
    let e = c
        .call(
            "sandbox.write_file",
            json!({"sandbox": sb, "path": "link", "text": "owned"}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "path_refused", "{e}");
    let e = c
        .call(
            "sandbox.write_file",
            json!({"sandbox": sb, "path": "dirlink/x", "text": "owned"}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "path_refused", "{e}");
    assert!(!std::path::Path::new("/etc/x").exists());
    let e = c
        .call("sandbox.read_file", json!({"sandbox": sb, "path": "pipe"}))
        .unwrap_err();
    assert!(e["message"].as_str().unwrap().contains("fifo"), "{e}");
    let e = c
        .call(
            "sandbox.write_file",
            json!({"sandbox": sb, "path": "pipe", "text": "x"}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "path_refused", "{e}");
    for p in ["../x", "/etc/passwd", "d/../../x"] {
        let e = c
            .call("sandbox.read_file", json!({"sandbox": sb, "path": p}))
            .unwrap_err();
        assert_eq!(e["kind"], "path_refused", "{p}: {e}");
    }
    // Ordinary files work, max_bytes truncates, listings show the planted entries as what they are.
    c.ok(
        "sandbox.write_file",
        json!({"sandbox": sb, "path": "d/e/f.bin", "data_b64": "AAEC/w=="}),
    );
    let r = c.ok(
        "sandbox.read_file",
        json!({"sandbox": sb, "path": "/workspace/d/e/f.bin", "max_bytes": 2}),
    );
    assert_eq!(r["data_b64"], "AAE=");
    assert_eq!(r["size"], 4);
    assert_eq!(r["truncated"], true);
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    let kinds: Vec<(String, String)> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        kinds.contains(&("link".into(), "symlink".into()))
            && kinds.contains(&("pipe".into(), "fifo".into()))
            && kinds.contains(&("d/e/f.bin".into(), "file".into())),
        "{kinds:?}"
    );
}

fn tar_gz(path: &std::path::Path, members: &[(&str, tar::EntryType, &str)]) {
    let f = std::fs::File::create(path).unwrap();
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        f,
        flate2::Compression::fast(),
    ));
    for (name, kind, extra) in members {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(0o644);
        let data = if *kind == tar::EntryType::Regular {
            extra.as_bytes()
        } else {
            b""
        };
        h.set_size(data.len() as u64);
        if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
            h.set_link_name(extra).unwrap();
        }
        // Raw names, so `..` and absolute paths reach the archive as a hostile tool would write them.
        let raw = &mut h.as_old_mut().name;
        raw.fill(0);
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap();
}

#[test]
fn snapshot_round_trips_and_hostile_restores_are_refused() {
    let mut c = Client::new();
    let sb = c.create(json!({}));
    c.ok(
        "sandbox.write_file",
        json!({"sandbox": sb, "path": "keep/data.txt", "text": "precious"}),
    );
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap.tar.gz");
    let r = c.ok("sandbox.snapshot", json!({"sandbox": sb, "dest": snap}));
    assert_eq!(r["files"], 1, "{r}");
    c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["sh", "-c", "rm -r keep; echo junk > junk"]}),
    );
    c.ok("sandbox.restore", json!({"sandbox": sb, "src": snap}));
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["sh", "-c", "cat keep/data.txt; ls"]}),
    );
    assert_eq!(r["stdout"], "preciouskeep\n", "{r}");
    for (members, bad) in [
        (
            vec![
                ("ok.txt", tar::EntryType::Regular, "x"),
                ("../escape", tar::EntryType::Regular, "x"),
            ],
            "../escape",
        ),
        (vec![("/abs", tar::EntryType::Regular, "x")], "/abs"),
        (vec![("ln", tar::EntryType::Symlink, "/etc/passwd")], "ln"),
        (vec![("hard", tar::EntryType::Link, "/etc/passwd")], "hard"),
        (vec![("dev", tar::EntryType::Char, "")], "dev"),
        (vec![("fifo", tar::EntryType::Fifo, "")], "fifo"),
    ] {
        let p = dir.path().join("bad.tar.gz");
        tar_gz(&p, &members);
        let e = c
            .call("sandbox.restore", json!({"sandbox": sb, "src": p}))
            .unwrap_err();
        assert_eq!(e["member"], bad, "{e}");
        // Refused before anything was touched.
        let r = c.ok(
            "sandbox.read_file",
            json!({"sandbox": sb, "path": "keep/data.txt"}),
        );
        assert_eq!(r["data_b64"], "cHJlY2lvdXM=");
    }
}

#[test]
fn kernels_keep_state_and_die_cleanly() {
    let mut c = Client::new();
    let sb = c.create(json!({"timeout_s": 2}));
    let k = c.ok("kernel.start", json!({"sandbox": sb}))["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.ok("kernel.run_code", json!({"sandbox": sb, "kernel": k, "code": "import os\ncount = 41\nprint('pid', os.getpid())"}));
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = c.ok(
        "kernel.run_code",
        json!({"sandbox": sb, "kernel": k, "code": "count += 1\ncount"}),
    );
    assert_eq!(r["results"][0]["text/plain"], "42", "{r}");
    let r = c.ok(
        "kernel.run_code",
        json!({"sandbox": sb, "kernel": k, "code": "1/0"}),
    );
    assert!(
        r["stderr"].as_str().unwrap().contains("ZeroDivisionError") && r["fault"].is_null(),
        "{r}"
    );
    let r = c.ok(
        "kernel.run_code",
        json!({"sandbox": sb, "kernel": k, "code": "count"}),
    );
    assert_eq!(
        r["results"][0]["text/plain"], "42",
        "an exception lost the kernel's state: {r}"
    );
    let r = c.ok(
        "kernel.run_code",
        json!({"sandbox": sb, "kernel": k, "code": "while True: pass"}),
    );
    assert_eq!(r["fault"]["type"], "timeout", "{r}");
    let e = c
        .call(
            "kernel.run_code",
            json!({"sandbox": sb, "kernel": k, "code": "count"}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "kernel_dead", "{e}");
}

#[test]
fn a_killed_server_leaves_nothing_the_next_hull_does_not_sweep() {
    let mut c = Client::new();
    let sb = c.create(json!({}));
    let ws = c.ok("sandbox.create", json!({}))["workspace"]
        .as_str()
        .unwrap()
        .to_string();
    c.ok(
        "sandbox.write_file",
        json!({"sandbox": sb, "path": "f", "text": "x"}),
    );
    let session = std::path::Path::new(&ws).parent().unwrap().to_path_buf();
    // `hull-ws-<owner id>-sb-...`, the owner identity starting with the server's pid.
    let name = session.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        name.starts_with(&format!("hull-ws-{}.", c.child.id())) && name.contains("-sb-"),
        "{}",
        session.display()
    );
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    assert!(session.exists());
    let out = common::hull(&["doctor"]);
    assert!(out.status.code().is_some());
    assert!(
        !session.exists(),
        "hull doctor did not sweep {}",
        session.display()
    );
}

/// Whether `name` is one of the things hull process `pid` names on the host (`hull-ws-<pid>.…`,
/// `hull-tmpl-<pid>.…`, `hull-<pid>.…` cgroups, `hull-live-<pid>.…` locks: the owner identity,
/// see hull_box::owner). The `.` leaves out an older hull's `hull-<pid>-…` of the same pid.
fn named_for(name: &str, pid: u32) -> bool {
    ["hull-ws-", "hull-tmpl-", "hull-live-", "hull-"]
        .iter()
        .any(|p| {
            name.strip_prefix(p)
                .and_then(|rest| rest.strip_prefix(&pid.to_string()))
                .is_some_and(|rest| rest.starts_with('.'))
        })
}

/// Directories under `dir` (down to `depth` levels) named for hull process `pid`.
fn dirs_named_for(
    dir: &std::path::Path,
    pid: u32,
    depth: usize,
    out: &mut Vec<std::path::PathBuf>,
) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if named_for(&e.file_name().to_string_lossy(), pid) {
            out.push(e.path());
        } else if depth > 1 {
            dirs_named_for(&e.path(), pid, depth - 1, out);
        }
    }
}

/// The command that runs a program in a new pid namespace (with its own /proc) here: plain
/// `unshare` as root, inside a new user namespace (mapping us to its root) otherwise. None,
/// with the reason printed, where neither works.
fn in_new_pid_namespace() -> Option<Vec<&'static str>> {
    let cmd: Vec<&str> = if common::is_root() {
        vec!["unshare", "--pid", "--fork", "--mount-proc"]
    } else {
        vec![
            "unshare",
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--mount-proc",
        ]
    };
    // The probe: a process there sees itself as pid 1.
    let probe = Command::new(cmd[0])
        .args(&cmd[1..])
        .args(["sh", "-c", "echo $$"])
        .output();
    match probe {
        Ok(o) if o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "1" => {
            Some(cmd)
        }
        Ok(o) => {
            hull_testkit::skip(format!(
                "`{}` does not give a new pid namespace here: {}",
                cmd.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            None
        }
        Err(e) => {
            hull_testkit::skip(format!("cannot run unshare(1): {e}"));
            None
        }
    }
}

#[test]
fn a_sweep_from_another_pid_namespace_leaves_a_live_sandbox_working() {
    // A hull in another pid namespace (a container, `unshare -p`) that shares our TMPDIR and
    // cgroup parent cannot see our pid; its leftover sweep must still know we live.
    let Some(unshare) = in_new_pid_namespace() else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let mut c = Client::with_env(&[("TMPDIR", temp.path().as_os_str())]);
    let pid = c.child.id();
    let r = c.ok("sandbox.create", json!({}));
    let sb = r["sandbox"].as_str().unwrap().to_string();
    c.ok(
        "sandbox.write_file",
        json!({"sandbox": sb, "path": "kept", "text": "still here"}),
    );
    let ran = c.ok("sandbox.run", json!({"sandbox": sb, "argv": ["true"]}));
    assert_eq!(ran["exit_code"], 0, "{ran}");
    // What the server named on the host: its session directory, spare workspaces and box
    // cgroups (made ahead by its threads; wait until they stop changing).
    let named = || {
        let mut v = Vec::new();
        dirs_named_for(temp.path(), pid, 1, &mut v);
        dirs_named_for(std::path::Path::new("/sys/fs/cgroup"), pid, 5, &mut v);
        v.sort();
        v
    };
    let mut before = named();
    let t = std::time::Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let now = named();
        if now == before || t.elapsed() > std::time::Duration::from_secs(10) {
            break;
        }
        before = now;
    }
    assert!(
        before.iter().any(|p| p.starts_with(temp.path())),
        "no directory of server {pid} in {}: {before:?}",
        temp.path().display()
    );
    // `hull doctor` sweeps leftovers; here it runs where our server's pid does not exist.
    let out = Command::new(unshare[0])
        .args(&unshare[1..])
        .arg(common::bin())
        .args(["doctor", "--json"])
        .env("TMPDIR", temp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("leftovers"),
        "doctor did not sweep: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gone: Vec<_> = before.iter().filter(|p| !p.exists()).collect();
    assert!(
        gone.is_empty(),
        "a sweep from another pid namespace removed live {gone:?}\n{report}"
    );
    // The sandbox still works, with its workspace.
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["cat", "/workspace/kept"]}),
    );
    assert_eq!(r["stdout"], "still here", "{r}");
    let r = c.ok(
        "sandbox.run_code",
        json!({"sandbox": sb, "code": "print(open('/workspace/kept').read())"}),
    );
    assert_eq!(r["stdout"], "still here\n", "{r}");
}

#[test]
fn a_deep_tree_does_not_crash_the_server_and_is_removed() {
    let mut c = Client::new();
    let r = c.ok("sandbox.create", json!({}));
    let sb = r["sandbox"].as_str().unwrap().to_string();
    let session = std::path::Path::new(r["workspace"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    // Deeper than a recursive walk survives on a 2 MiB thread stack; the scans after the call
    // (change tracking) walk it first.
    let mk = "import os\nfor i in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nopen('deep.txt', 'w').write('x')";
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["python3", "-c", mk]}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(
        r["warnings"].to_string().contains("levels of directories"),
        "{r}"
    );
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    assert_eq!(l["complete"], false);
    assert_eq!(
        l["entries"].as_array().unwrap().len(),
        256,
        "directories 256 levels down the depth cap are listed, not entered"
    );
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": "6*7"}));
    assert_eq!(r["results"][0]["text/plain"], "42", "{r}");
    // Restore empties the deep tree, then destroy removes the session directory.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("one.tar.gz");
    tar_gz(&p, &[("one.txt", tar::EntryType::Regular, "1")]);
    c.ok("sandbox.restore", json!({"sandbox": sb, "src": p}));
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    assert_eq!(l["entries"].as_array().unwrap().len(), 1, "{l}");
    c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["python3", "-c", mk]}),
    );
    assert_eq!(
        c.ok("sandbox.destroy", json!({"sandbox": sb}))["destroyed"],
        true
    );
    assert!(!session.exists(), "{} was left", session.display());
}

#[test]
fn listings_cap_their_path_bytes() {
    let mut c = Client::new();
    let sb = c.create(json!({"track_files": false}));
    // 60 levels of 250-byte names, then 1200 files with 200-byte names: about 18 MB of paths in
    // 1260 entries, past the 16 MiB cap though far below the entry cap.
    let mk = "import os\nfor i in range(60):\n    os.mkdir('d' * 250)\n    os.chdir('d' * 250)\nfor i in range(1200):\n    open('%04d' % i + 'f' * 196, 'w').close()";
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["python3", "-c", mk]}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    assert_eq!(l["complete"], false);
    let entries = l["entries"].as_array().unwrap();
    let bytes: usize = entries
        .iter()
        .map(|e| e["path"].as_str().unwrap().len())
        .sum();
    assert!(
        bytes <= 16 << 20 && bytes > 15 << 20,
        "{bytes} bytes of paths in {} entries",
        entries.len()
    );
}

#[test]
fn oversized_or_value_dense_frames_are_dropped_and_the_server_carries_on() {
    let mut c = Client::new();
    let _guard = watchdog(&c, 120);
    let sb = c.create(json!({}));
    // One line past the 16 MiB frame cap, shaped as a forged `done` frame.
    let big = format!("{CHANNEL}chan().sendall(b'{{\"done\": true, \"results\": [{{\"text/plain\": \"' + b'x' * (17 << 20) + b'\"}}]}}\\n')\n1");
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": big}));
    assert!(
        r["warnings"].to_string().contains("over 16777216 bytes"),
        "{}",
        &r.to_string()[..r.to_string().len().min(2000)]
    );
    assert!(r["results"].as_array().unwrap().is_empty());
    // Small on the wire, but a tree of 300k values on the host.
    let dense = format!("{CHANNEL}chan().sendall(b'{{\"done\": true, \"results\": [' + b'0,' * 300000 + b'0]}}\\n')\n1");
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": dense}));
    assert!(
        r["warnings"].to_string().contains("JSON values"),
        "{}",
        &r.to_string()[..r.to_string().len().min(2000)]
    );
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": "6*7"}));
    assert_eq!(r["results"][0]["text/plain"], "42", "{r}");
}

#[test]
fn modules_planted_in_the_workspace_do_not_run_before_the_runner() {
    let mut c = Client::new();
    let sb = c.create(json!({}));
    // Modules the runner imports before it connects or before a kernel's first cell (`_socket`
    // and `binascii` are extension modules on some Pythons, so found on sys.path, where
    // `python3 -c` puts the working directory first; `threading` is a source module everywhere).
    for m in ["_socket", "binascii", "threading"] {
        c.ok("sandbox.write_file", json!({"sandbox": sb, "path": format!("{m}.py"), "text": format!("open('/workspace/ran-{m}', 'w').close()\n")}));
    }
    c.ok(
        "sandbox.write_file",
        json!({"sandbox": sb, "path": "mine.py", "text": "VALUE = 7\n"}),
    );
    let r = c.ok(
        "sandbox.run_code",
        json!({"sandbox": sb, "code": "import mine\nmine.VALUE * 6"}),
    );
    assert_eq!(r["results"][0]["text/plain"], "42", "{r}");
    let k = c.ok("kernel.start", json!({"sandbox": sb}))["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.ok(
        "kernel.run_code",
        json!({"sandbox": sb, "kernel": k, "code": "import mine\nmine.VALUE"}),
    );
    assert_eq!(r["results"][0]["text/plain"], "7", "{r}");
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    assert!(!l.to_string().contains("ran-"), "a planted module ran: {l}");
}

/// Kills the server (our child, still unreaped) if the test is not done within `secs`, so a
/// hang fails the test instead of stalling the run.
fn watchdog(c: &Client, secs: u64) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let pid = i32::try_from(c.child.id()).unwrap();
    std::thread::spawn(move || {
        if rx.recv_timeout(std::time::Duration::from_secs(secs))
            == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        {
            eprintln!("watchdog: killing hull serve {pid}");
            // SAFETY: kill has no memory preconditions; pid is our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    tx
}

/// The server's child processes (its boxes).
fn children(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        out.extend(
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string),
        );
    }
    out
}

#[test]
fn a_stopped_kernel_times_out_and_close_and_destroy_do_not_wait_for_cells() {
    let mut c = Client::new();
    let done = watchdog(&c, 40);
    let r = c.ok("sandbox.create", json!({"timeout_s": 2}));
    let sb = r["sandbox"].as_str().unwrap().to_string();
    let session = std::path::Path::new(r["workspace"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    let k = c.ok("kernel.start", json!({"sandbox": sb}))["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    // Cell 1 leaves a thread that stops the runner after the cell; cell 2 is bigger than the
    // socket's buffer, so sending it blocks on a runner that no longer reads.
    let r = c.ok("kernel.run_code", json!({"sandbox": sb, "kernel": k, "code": "import os, signal, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGSTOP)), daemon=True).start()"}));
    assert_eq!(r["exit_code"], 0, "{r}");
    std::thread::sleep(std::time::Duration::from_millis(800));
    let r = c.ok(
        "kernel.run_code",
        json!({"sandbox": sb, "kernel": k, "code": format!("x = '{}'", "a".repeat(8 << 20))}),
    );
    assert_eq!(
        r["fault"]["type"],
        "timeout",
        "{}",
        &r.to_string()[..r.to_string().len().min(2000)]
    );
    // Closing the stopped kernel does not wait for it (it would wait forever: the watchdog
    // would end the test).
    c.ok("kernel.close", json!({"sandbox": sb, "kernel": k}));
    // A kernel busy in a cell that would outlast the watchdog (an hour, under a 10-minute
    // deadline): close kills it at once instead of waiting for the cell or its deadline.
    let sb2 = c.create(json!({"timeout_s": 600}));
    for _ in 0..2 {
        let k2 = c.ok("kernel.start", json!({"sandbox": sb2}))["kernel"]
            .as_str()
            .unwrap()
            .to_string();
        c.next += 1;
        writeln!(c.stdin, "{}", json!({"id": c.next, "method": "kernel.run_code", "params": {"sandbox": sb2, "kernel": k2, "code": "import time\ntime.sleep(3600)"}})).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        c.ok("kernel.close", json!({"sandbox": sb2, "kernel": k2}));
    }
    // Destroy kills a kernel in the middle of a cell, too.
    let k3 = c.ok("kernel.start", json!({"sandbox": sb2}))["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    c.next += 1;
    writeln!(c.stdin, "{}", json!({"id": c.next, "method": "kernel.run_code", "params": {"sandbox": sb2, "kernel": k3, "code": "import time\ntime.sleep(3600)"}})).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    c.ok("sandbox.destroy", json!({"sandbox": sb2}));
    c.ok("sandbox.destroy", json!({"sandbox": sb}));
    // Give the reaping a moment (a hang guard: the assertions below are about what is left).
    let t0 = std::time::Instant::now();
    while (!children(c.child.id()).is_empty() || session.exists()) && t0.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        children(c.child.id()).is_empty(),
        "boxes left: {:?}",
        children(c.child.id())
    );
    assert!(!session.exists(), "{} was left", session.display());
    let _ = done.send(());
}

#[test]
fn session_directories_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let mut c = Client::new();
    let r = c.ok("sandbox.create", json!({"setup": "true"}));
    let sb = r["sandbox"].as_str().unwrap().to_string();
    let ws = std::path::PathBuf::from(r["workspace"].as_str().unwrap());
    let session = ws.parent().unwrap().to_path_buf();
    c.ok("kernel.start", json!({"sandbox": sb}));
    let io: Vec<std::path::PathBuf> = std::fs::read_dir(session.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&format!("hull-ws-{}.", c.child.id())) && n.contains("-io-")
        })
        .map(|e| e.path())
        .collect();
    assert!(!io.is_empty(), "no runner io directory found");
    for d in [session.clone(), ws.clone(), session.join("deps")]
        .iter()
        .chain(&io)
    {
        let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} is {mode:o}", d.display());
    }
    // The boxes still use them.
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": "open('x', 'w').write('y')\nimport os\nos.listdir('/deps') is not None"}));
    assert_eq!(r["results"][0]["text/plain"], "True", "{r}");
}

#[test]
fn snapshots_refuse_huge_sparse_files_and_never_follow_a_planted_partial_file() {
    let mut c = Client::new();
    let done = watchdog(&c, 60);
    let r = c.ok("sandbox.create", json!({}));
    let sb = r["sandbox"].as_str().unwrap().to_string();
    let ws = std::path::PathBuf::from(r["workspace"].as_str().unwrap());
    let host = tempfile::tempdir().unwrap();
    let victim = host.path().join("victim");
    // The box plants a symlink where the old snapshot wrote its partial file (dest with extension `partial`).
    let plant = format!(
        "ln -s {} snap.tar.partial && echo x > small",
        victim.display()
    );
    assert_eq!(
        c.ok(
            "sandbox.run",
            json!({"sandbox": sb, "argv": ["sh", "-c", plant]})
        )["exit_code"],
        0
    );
    let r = c.ok(
        "sandbox.snapshot",
        json!({"sandbox": sb, "dest": ws.join("snap.tar.gz")}),
    );
    assert_eq!(r["files"], 1, "{r}");
    assert!(
        !victim.exists(),
        "the snapshot followed a symlink the box planted"
    );
    assert!(std::fs::symlink_metadata(ws.join("snap.tar.partial"))
        .unwrap()
        .file_type()
        .is_symlink());
    // A 1 TiB sparse file costs the box nothing; the snapshot is refused without reading it
    // (reading it would take far longer than the watchdog allows), naming it.
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["sh", "-c", "truncate -s 1T big"]}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let dest = host.path().join("s.tar.gz");
    let e = c
        .call("sandbox.snapshot", json!({"sandbox": sb, "dest": dest}))
        .unwrap_err();
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("/workspace/big (1099511627776 bytes)"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(host.path()).unwrap().count(),
        0,
        "a partial snapshot was left"
    );
    let _ = done.send(());
}

#[test]
fn restore_refuses_huge_long_names_without_reading_them() {
    let mut c = Client::new();
    let sb = c.create(json!({}));
    let dir = tempfile::tempdir().unwrap();
    let build = |name: &str, pax: Option<&str>| {
        let p = dir
            .path()
            .join(format!("{}.tar.gz", name.len() + pax.map_or(0, str::len)));
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
            std::fs::File::create(&p).unwrap(),
            flate2::Compression::best(),
        ));
        if let Some(path) = pax {
            b.append_pax_extensions([("path", path.as_bytes())])
                .unwrap();
        }
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(1);
        b.append_data(&mut h, name, &b"x"[..]).unwrap();
        b.into_inner().unwrap().finish().unwrap();
        p
    };
    // A 4 MiB GNU long name and a 4 MiB PAX path: small compressed, and refused by their size.
    let huge = "a/".repeat(2 << 20);
    for p in [build(&huge, None), build("short", Some(&huge))] {
        assert!(std::fs::metadata(&p).unwrap().len() < 64 << 10);
        let e = c
            .call("sandbox.restore", json!({"sandbox": sb, "src": p}))
            .unwrap_err();
        assert_eq!(
            e["kind"],
            "path_refused",
            "{}",
            &e.to_string()[..e.to_string().len().min(500)]
        );
        assert!(
            e["message"].as_str().unwrap().contains("at most 65536"),
            "{}",
            &e.to_string()[..e.to_string().len().min(500)]
        );
        assert!(
            e.to_string().len() < 2000,
            "the error repeats the name: {} bytes",
            e.to_string().len()
        );
    }
    // Ordinary long names (GNU and PAX) still restore.
    let long = format!("{}/f.txt", "d".repeat(150));
    let r = c.ok(
        "sandbox.restore",
        json!({"sandbox": sb, "src": build(&long, None)}),
    );
    assert_eq!(r["files"], 1, "{r}");
    let r = c.ok(
        "sandbox.restore",
        json!({"sandbox": sb, "src": build("ignored", Some("pax/name.txt"))}),
    );
    assert_eq!(r["files"], 1, "{r}");
    assert_eq!(
        c.ok(
            "sandbox.read_file",
            json!({"sandbox": sb, "path": "pax/name.txt"})
        )["data_b64"],
        "eA=="
    );
}

/// The host's python3 `major.minor` (the default image is a view of the host).
fn python_version() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn site_code_runs_after_the_runner_connects_and_cells_see_python_c_paths() {
    let mut c = Client::new();
    let done = watchdog(&c, 60);
    let sb = c.create(json!({"setup": "true", "deps_readonly": false, "timeout_s": 2, "env": {"HOME": "/workspace"}}));
    // The same sys.path as `python3 -c`, and sitecustomize (here from /deps) still runs for cells.
    c.ok("sandbox.run", json!({"sandbox": sb, "argv": ["sh", "-c", "echo 'import builtins; builtins.SITE_RAN = 1' > /deps/sitecustomize.py"]}));
    // A user site in the (writable) home, with a .pth: it is read for the cell, in python3 -c's
    // place (before the system site-packages), never before the cell arrives.
    let user_site = "import site, os; d = site.getusersitepackages(); os.makedirs(d, exist_ok=True); open(d + '/hull-user.pth', 'w').write('/usr/share\\n'); print(d)";
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["python3", "-c", user_site]}),
    );
    assert_eq!(
        r["stdout"].as_str().unwrap().trim(),
        format!(
            "/workspace/.local/lib/python{}/site-packages",
            python_version()
        ),
        "{r}"
    );
    let want = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["python3", "-c", "import sys; print(sys.path)"]}),
    )["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .to_string();
    let r = c.ok(
        "sandbox.run_code",
        json!({"sandbox": sb, "code": "import sys\nprint(sys.path)\nSITE_RAN"}),
    );
    assert_eq!(r["stdout"].as_str().unwrap().trim(), want, "{r}");
    assert!(
        want.contains("'/workspace/.local/lib/")
            && want.contains("'/usr/share'")
            && want.contains("/deps"),
        "{want}"
    );
    assert_eq!(r["results"][0]["text/plain"], "1", "{r}");
    // A sitecustomize that never returns holds a cell to its deadline, not kernel.start for 24 h
    // (which the watchdog would end).
    c.ok("sandbox.run", json!({"sandbox": sb, "argv": ["sh", "-c", "echo 'import time; time.sleep(3600)' > /deps/sitecustomize.py"]}));
    let k = c.ok("kernel.start", json!({"sandbox": sb}))["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.ok(
        "kernel.run_code",
        json!({"sandbox": sb, "kernel": k, "code": "1"}),
    );
    assert_eq!(r["fault"]["type"], "timeout", "{r}");
    let r = c.ok("sandbox.run_code", json!({"sandbox": sb, "code": "1"}));
    assert_eq!(r["fault"]["type"], "timeout", "{r}");
    let _ = done.send(());
}

#[test]
fn names_that_are_not_utf8_are_tracked_listed_and_cleared() {
    let mut c = Client::new();
    let sb = c.create(json!({}));
    // Two names that differ only in bytes that are not UTF-8, and a file under such a directory.
    let mk = "import os\nfor n in (b'a\\xff', b'a\\xfe'):\n    open(n, 'w').write('x')\nos.mkdir(b'd\\xff')\nopen(b'd\\xff/inner', 'w').write('y')";
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["python3", "-c", mk]}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["files"].as_array().unwrap().len(), 3, "{r}");
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    assert_eq!(l["entries"].as_array().unwrap().len(), 4, "{l}");
    assert!(l.to_string().contains("d\u{fffd}/inner"), "{l}");
    // Restore empties the workspace, these names included.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("one.tar.gz");
    tar_gz(&p, &[("one.txt", tar::EntryType::Regular, "1")]);
    c.ok("sandbox.restore", json!({"sandbox": sb, "src": p}));
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    assert_eq!(l["entries"].as_array().unwrap().len(), 1, "{l}");
}

/// Snapshot destinations and restore sources through links a box planted (in its own
/// workspace, where a caller may well write or read archives) are refused: nothing is written
/// into the host directory the link names, no host file reaches another sandbox, and a restore
/// whose members conflict leaves the workspace as it was.
#[test]
fn snapshot_and_restore_never_follow_planted_links_and_a_failed_restore_changes_nothing() {
    let mut c = Client::new();
    let r = c.ok("sandbox.create", json!({}));
    let (a, ws_a) = (
        r["sandbox"].as_str().unwrap().to_string(),
        std::path::PathBuf::from(r["workspace"].as_str().unwrap()),
    );
    let b = c.create(json!({}));
    let host = tempfile::tempdir().unwrap();
    let exports = host.path().join("exports");
    std::fs::create_dir(&exports).unwrap();
    let private = host.path().join("private.tar.gz");
    tar_gz(
        &private,
        &[("secret.txt", tar::EntryType::Regular, "host secret")],
    );
    let plant = format!(
        "ln -s {} out && ln -s {} export.tar.gz",
        exports.display(),
        private.display()
    );
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": a, "argv": ["sh", "-c", plant]}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let e = c
        .call(
            "sandbox.snapshot",
            json!({"sandbox": b, "dest": ws_a.join("out/b.tar.gz")}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "path_refused", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("symbolic link"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&exports).unwrap().count(), 0);
    c.ok(
        "sandbox.write_file",
        json!({"sandbox": b, "path": "mine.txt", "text": "mine"}),
    );
    let e = c
        .call(
            "sandbox.restore",
            json!({"sandbox": b, "src": ws_a.join("export.tar.gz")}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "path_refused", "{e}");
    let conflict = host.path().join("conflict.tar.gz");
    tar_gz(
        &conflict,
        &[
            ("x", tar::EntryType::Regular, "1"),
            ("x/", tar::EntryType::Directory, ""),
        ],
    );
    let e = c
        .call("sandbox.restore", json!({"sandbox": b, "src": conflict}))
        .unwrap_err();
    assert_eq!(e["member"], "x/", "{e}");
    let l = c.ok("sandbox.list_files", json!({"sandbox": b}));
    assert_eq!(
        l["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["mine.txt"],
        "{l}"
    );
    assert_eq!(
        c.ok(
            "sandbox.read_file",
            json!({"sandbox": b, "path": "mine.txt"})
        )["data_b64"],
        "bWluZQ=="
    );
}

/// A restore replaces directories the box made read-only (moving a directory to another parent
/// needs write permission on it, which an unprivileged hull must first give itself).
#[test]
fn a_restore_replaces_directories_the_box_made_read_only() {
    let mut c = Client::new();
    let sb = c.create(json!({}));
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["sh", "-c", "mkdir -p ro/inner && echo x > ro/inner/f && chmod 555 ro/inner ro && chmod 000 ro/inner/f"]}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("one.tar.gz");
    tar_gz(&p, &[("one.txt", tar::EntryType::Regular, "1")]);
    c.ok("sandbox.restore", json!({"sandbox": sb, "src": p}));
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    assert_eq!(l["entries"].as_array().unwrap().len(), 1, "{l}");
}

/// Names that differ only in bytes that are not UTF-8 are listed distinctly (`path_b64`, their
/// bytes, beside the lossy `path`), and `read_file`, `write_file` and `list_files` take those
/// bytes back (`path_b64`, `subdir_b64`), each reaching its own file.
#[test]
fn names_that_are_not_utf8_round_trip_through_path_b64() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut c = Client::new();
    let sb = c.create(json!({}));
    let mk = "import os\nopen(b'a\\xff', 'w').write('ff')\nopen(b'a\\xfe', 'w').write('fe')\nos.mkdir(b'd\\xff')\nopen(b'd\\xff/inner', 'w').write('in')\nopen('plain', 'w').write('p')";
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["python3", "-c", mk]}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let l = c.ok("sandbox.list_files", json!({"sandbox": sb}));
    let entries = l["entries"].as_array().unwrap();
    let raw: Vec<Vec<u8>> = entries
        .iter()
        .filter_map(|e| e["path_b64"].as_str())
        .map(|s| b64.decode(s).unwrap())
        .collect();
    for want in [&b"a\xff"[..], b"a\xfe", b"d\xff", b"d\xff/inner"] {
        assert!(
            raw.iter().any(|r| r == want),
            "{want:?} not listed by its bytes: {l}"
        );
    }
    let plain = entries.iter().find(|e| e["path"] == "plain").unwrap();
    assert!(plain.get("path_b64").is_none(), "{plain}");
    for (name, content) in [
        (&b"a\xff"[..], "ff"),
        (b"a\xfe", "fe"),
        (b"d\xff/inner", "in"),
    ] {
        let r = c.ok(
            "sandbox.read_file",
            json!({"sandbox": sb, "path_b64": b64.encode(name)}),
        );
        assert_eq!(r["data_b64"], b64.encode(content), "{name:?}: {r}");
    }
    c.ok(
        "sandbox.write_file",
        json!({"sandbox": sb, "path_b64": b64.encode(b"d\xff/new\xfd"), "text": "written"}),
    );
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["python3", "-c", "print(open(b'd\\xff/new\\xfd').read())"]}),
    );
    assert_eq!(r["stdout"], "written\n", "{r}");
    let l = c.ok(
        "sandbox.list_files",
        json!({"sandbox": sb, "subdir_b64": b64.encode(b"d\xff")}),
    );
    let inner: Vec<Vec<u8>> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| b64.decode(e["path_b64"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(
        inner,
        [b"d\xff/inner".to_vec(), b"d\xff/new\xfd".to_vec()],
        "{l}"
    );
    let e = c
        .call(
            "sandbox.read_file",
            json!({"sandbox": sb, "path": "plain", "path_b64": b64.encode("plain")}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "invalid_argument", "{e}");
}

/// `sandbox.run`'s `stdin` (text) and `stdin_b64` (bytes) are the program's standard input,
/// whole and byte for byte; without them it reads nothing; `run_code` refuses one, naming it.
#[test]
fn run_takes_the_programs_standard_input() {
    use base64::Engine as _;
    let mut c = Client::new();
    let sb = c.create(json!({}));
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["cat"], "stdin": "one\ntwo\n"}),
    );
    assert_eq!(
        (r["stdout"].as_str(), r["exit_code"].as_i64()),
        (Some("one\ntwo\n"), Some(0)),
        "{r}"
    );
    // Bytes that are not UTF-8, and more than a pipe's buffer, arrive whole.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let b64 = base64::engine::general_purpose::STANDARD;
    let r = c.ok(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["sh", "-c", "cat > /workspace/in; wc -c < /workspace/in"], "stdin_b64": b64.encode(&data)}),
    );
    assert_eq!(r["stdout"].as_str().map(str::trim), Some("300000"), "{r}");
    let back = c.ok("sandbox.read_file", json!({"sandbox": sb, "path": "in"}));
    assert_eq!(
        b64.decode(back["data_b64"].as_str().unwrap()).unwrap(),
        data
    );
    let r = c.ok("sandbox.run", json!({"sandbox": sb, "argv": ["cat"]}));
    assert_eq!(r["stdout"], "", "{r}");
    for (method, params, arg) in [
        (
            "sandbox.run_code",
            json!({"sandbox": sb, "code": "1", "stdin": "x"}),
            "stdin",
        ),
        (
            "sandbox.run_code",
            json!({"sandbox": sb, "code": "echo", "language": "bash", "stdin": "x"}),
            "stdin",
        ),
        (
            "sandbox.run",
            json!({"sandbox": sb, "argv": ["cat"], "stdin": "x", "stdin_b64": "eA=="}),
            "stdin",
        ),
        (
            "sandbox.run",
            json!({"sandbox": sb, "argv": ["cat"], "stdin_b64": "%%"}),
            "stdin_b64",
        ),
    ] {
        let e = c.call(method, params).unwrap_err();
        assert_eq!(
            (e["kind"].as_str(), e["arg"].as_str()),
            (Some("invalid_argument"), Some(arg)),
            "{e}"
        );
    }
}

/// `sandbox.set_network` replaces a session's policy while it lives: its kernel (a box started
/// before) and its later calls judge their next names and connections by the new one; a
/// session made without the gateway network, or a policy with ports, is refused naming
/// `network`. Loopback only: a test DNS server and echo server are the only upstreams.
#[test]
fn a_sessions_policy_is_replaced_while_it_lives() {
    let server = std::net::Ipv4Addr::new(127, 0, 0, 17);
    let echo = common::net::Echo::start(server);
    let dns = common::net::Dns::start(&[("api.example.test", server)]);
    let dns_addr = dns.addr.to_string();
    let mut c = Client::with_env(&[("HULL_NET_DNS", std::ffi::OsStr::new(&dns_addr))]);
    let sid = c.create(json!({"network": {"mode": "custom", "allow_hosts": ["api.example.test"], "allow_cidrs": ["127.0.0.17/32"]}}));
    let connect = format!(
        "import socket\ntry:\n    s = socket.create_connection(('api.example.test', {}), timeout=10)\n    s.sendall(b'hi\\n'); print(s.makefile().readline().strip())\nexcept OSError as e:\n    print('refused', type(e).__name__)",
        echo.addr.port()
    );
    let k = c.ok("kernel.start", json!({"sandbox": sid}))["kernel"].clone();
    let cell = |c: &mut Client| {
        c.ok(
            "kernel.run_code",
            json!({"sandbox": sid, "kernel": k, "code": connect}),
        )["stdout"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(cell(&mut c), "echo: hi\n");
    let told = c.ok(
        "sandbox.set_network",
        json!({"sandbox": sid, "network": "deny-all"}),
    );
    assert!(told["gateways"].as_u64().unwrap() >= 1, "{told}");
    // The kernel's box, started before, now judged by deny-all; so is a new call's box.
    assert_eq!(cell(&mut c), "refused gaierror\n");
    let call = c.ok("sandbox.run_code", json!({"sandbox": sid, "code": connect}));
    assert_eq!(call["stdout"], "refused gaierror\n", "{call}");
    // And back: allowed again, in both.
    c.ok(
        "sandbox.set_network",
        json!({"sandbox": sid, "network": {"mode": "custom", "allow_hosts": ["api.example.test"], "allow_cidrs": ["127.0.0.17/32"]}}),
    );
    assert_eq!(cell(&mut c), "echo: hi\n");
    let call = c.ok("sandbox.run_code", json!({"sandbox": sid, "code": connect}));
    assert_eq!(call["stdout"], "echo: hi\n", "{call}");
    // Refusals name the argument.
    let e = c
        .call(
            "sandbox.set_network",
            json!({"sandbox": sid, "network": {"mode": "custom", "ports": [80]}}),
        )
        .unwrap_err();
    assert_eq!(e["arg"], "network", "{e}");
    let e = c
        .call(
            "sandbox.set_network",
            json!({"sandbox": sid, "network": "host"}),
        )
        .unwrap_err();
    assert_eq!(e["arg"], "network", "{e}");
    let plain = c.create(json!({}));
    let e = c
        .call(
            "sandbox.set_network",
            json!({"sandbox": plain, "network": "deny-all"}),
        )
        .unwrap_err();
    assert!(
        e["arg"] == "network"
            && e["message"]
                .as_str()
                .unwrap()
                .contains("without the gateway"),
        "{e}"
    );
    assert_eq!(echo.accepted(), 3);
}

/// One hand-off from the server's descriptor socket: its tag and descriptor.
fn handed_over(sock: &std::os::fd::OwnedFd) -> (String, std::os::fd::OwnedFd) {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut tag = [0u8; 256];
    let got = rustix::net::recvmsg(
        sock,
        &mut [std::io::IoSliceMut::new(&mut tag)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .unwrap();
    let mut fds: Vec<std::os::fd::OwnedFd> = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(f) = m {
            fds.extend(f);
        }
    }
    assert_eq!(fds.len(), 1, "one descriptor per hand-off");
    (
        String::from_utf8_lossy(&tag[..got.bytes]).into_owned(),
        fds.pop().unwrap(),
    )
}

/// Sends one cell over a runner's channel and reads its frames up to `done` (None at EOF).
fn direct_cell(chan: &mut std::os::unix::net::UnixStream, code: &str) -> Option<Vec<Value>> {
    write!(chan, "{}\n{code}", code.len()).unwrap();
    let mut r = BufReader::new(chan.try_clone().unwrap());
    let mut frames = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let f: Value = serde_json::from_str(&line).unwrap();
        let done = f.get("done").is_some();
        frames.push(f);
        if done {
            return Some(frames);
        }
    }
}

#[test]
fn an_attached_kernel_takes_cells_over_its_own_channel_and_ends_through_the_server() {
    // Without a descriptor socket there is nothing to hand the channel over on.
    let mut plain = Client::new();
    let sb = plain.create(json!({}));
    let k = plain.ok("kernel.start", json!({"sandbox": sb}))["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    let e = plain
        .call("kernel.attach", json!({"sandbox": sb, "kernel": k}))
        .unwrap_err();
    assert!(
        e["message"].as_str().unwrap().contains("--fd-socket"),
        "{e}"
    );
    drop(plain);
    // A descriptor that is not inherited is refused up front, naming the option.
    let out = Command::new(common::bin())
        .args(["serve", "--fd-socket", "77"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--fd-socket 77"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (mut c, sock) = Client::with_fd_socket();
    let sb = c.create(json!({"timeout_s": 2, "max_output_bytes": 1000}));
    let k = c.ok("kernel.start", json!({"sandbox": sb}))["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    let a = c.ok("kernel.attach", json!({"sandbox": sb, "kernel": k}));
    assert_eq!(a["max_output"], 1000, "{a}");
    assert_eq!(a["timeout_s"], 2.0, "{a}");
    assert!(a["workspace"].is_string(), "{a}");
    let (tag, fd) = handed_over(&sock);
    assert_eq!(tag, k);
    let mut chan = std::os::unix::net::UnixStream::from(fd);
    let frames = direct_cell(&mut chan, "x = 41\nprint('hi')\nx + 1").unwrap();
    // Output may come in more than one frame (the pump sends what each read gets).
    let out: Vec<u8> = frames
        .iter()
        .filter(|f| f["stream"] == "stdout")
        .flat_map(|f| {
            base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                f["data"].as_str().unwrap(),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(out, b"hi\n", "{frames:?}");
    let done = frames.last().unwrap();
    assert_eq!(done["results"][0]["text/plain"], "42", "{done}");
    // The state lives on between cells sent over the channel.
    let frames = direct_cell(&mut chan, "x").unwrap();
    assert_eq!(frames.last().unwrap()["results"][0]["text/plain"], "41");
    // The server no longer runs cells of this kernel, nor hands its channel over twice.
    let e = c
        .call(
            "kernel.run_code",
            json!({"sandbox": sb, "kernel": k, "code": "1"}),
        )
        .unwrap_err();
    assert!(e["message"].as_str().unwrap().contains("attached"), "{e}");
    let e = c
        .call("kernel.attach", json!({"sandbox": sb, "kernel": k}))
        .unwrap_err();
    assert!(
        e["message"].as_str().unwrap().contains("attached already"),
        "{e}"
    );
    // A cell past its deadline: the caller says so, the server kills the kernel and answers
    // with the box's result; the channel then ends (the interpreter is gone).
    write!(chan, "16\nwhile True: pass").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = c.ok(
        "kernel.end",
        json!({"sandbox": sb, "kernel": k, "end": "timeout", "timeout_s": 0.3}),
    );
    assert_eq!(r["fault"]["type"], "timeout", "{r}");
    assert_eq!(r["success"], false, "{r}");
    chan.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(
        std::io::Read::read_to_end(&mut chan, &mut rest).unwrap(),
        0,
        "the kernel's channel still carried frames"
    );
    let e = c
        .call(
            "kernel.end",
            json!({"sandbox": sb, "kernel": k, "end": "gone"}),
        )
        .unwrap_err();
    assert_eq!(e["kind"], "kernel_dead", "{e}");
    // An interpreter that exits: the channel ends, and the server reports how it ended.
    let k2 = c.ok("kernel.start", json!({"sandbox": sb}))["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    c.ok("kernel.attach", json!({"sandbox": sb, "kernel": k2}));
    let (tag, fd) = handed_over(&sock);
    assert_eq!(tag, k2);
    let mut chan = std::os::unix::net::UnixStream::from(fd);
    assert!(direct_cell(&mut chan, "import os\nos._exit(3)").is_none());
    let r = c.ok(
        "kernel.end",
        json!({"sandbox": sb, "kernel": k2, "end": "gone"}),
    );
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_eq!(r["success"], false, "{r}");
    let e = c
        .call(
            "kernel.end",
            json!({"sandbox": sb, "kernel": k2, "end": "sideways"}),
        )
        .unwrap_err();
    assert_eq!(e["arg"], "end", "{e}");
    // Started and attached in one round trip.
    let r = c.ok("kernel.start", json!({"sandbox": sb, "attach": true}));
    let k3 = r["kernel"].as_str().unwrap().to_string();
    assert_eq!(r["attached"]["max_output"], 1000, "{r}");
    let (tag, fd) = handed_over(&sock);
    assert_eq!(tag, k3);
    let mut chan = std::os::unix::net::UnixStream::from(fd);
    let frames = direct_cell(&mut chan, "6 * 7").unwrap();
    assert_eq!(frames.last().unwrap()["results"][0]["text/plain"], "42");
    let e = c
        .call("kernel.start", json!({"sandbox": sb, "attach": "yes"}))
        .unwrap_err();
    assert_eq!(e["arg"], "attach", "{e}");
}
