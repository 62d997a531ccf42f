//! Named sandboxes (`hull create/exec/stop/start/rm/ps/logs`), black-box: every command is a
//! real `hull` process, so the sandbox is always used by a process other than the one that
//! created it, after that one exited. Each test keeps its sandboxes in a directory of its own
//! (`HULL_SANDBOXES`) and removes them at the end; the keepers carry that directory in their
//! environment, which is how a test finds the ones it started.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A test's sandboxes: removed (and checked gone) when dropped.
struct Sandboxes {
    dir: tempfile::TempDir,
    /// `HULL_HOME` (an image store) for every command, when the test made one.
    home: Option<PathBuf>,
}

impl Sandboxes {
    fn new() -> Sandboxes {
        Sandboxes {
            dir: tempfile::Builder::new()
                .prefix("hull-named-test-")
                .tempdir()
                .expect("tempdir"),
            home: None,
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(common::bin());
        c.args(args)
            .env("HULL_SANDBOXES", self.root())
            .stdin(Stdio::null());
        if let Some(h) = &self.home {
            c.env("HULL_HOME", h);
        }
        c
    }

    fn hull(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("spawn hull")
    }

    /// Runs `args` and expects success.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.hull(args);
        assert!(
            out.status.success(),
            "hull {args:?} failed ({:?}): {}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn state(&self, name: &str) -> String {
        let ps = self.ok(&["ps", "--json"]);
        ps.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["name"] == name)
            .map(|v| v["state"].as_str().unwrap_or_default().to_string())
            .unwrap_or_else(|| "absent".into())
    }

    fn wait_state(&self, name: &str, want: &str) {
        let t0 = Instant::now();
        while self.state(name) != want {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{name} never became {want}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn keeper_pid(&self, name: &str) -> i32 {
        std::fs::read_to_string(self.root().join(name).join("keeper.pid"))
            .expect("keeper.pid")
            .trim()
            .parse()
            .expect("a pid")
    }

    /// No keeper of ours runs (one that let go of its lock may take a moment to exit).
    fn assert_no_keepers(&self) {
        let t0 = Instant::now();
        while !self.keepers().is_empty() {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "keepers left behind: {:?}",
                self.keepers()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Pids of live processes whose environment names our sandbox directory (our keepers).
    fn keepers(&self) -> Vec<i32> {
        let marker = format!("HULL_SANDBOXES={}", self.root().display());
        processes_where(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|e| e.split(|&b| b == 0).any(|v| v == marker.as_bytes()))
        })
    }
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        let names: Vec<String> = std::fs::read_dir(self.root())
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        for n in names {
            let _ = self.hull(&["rm", &n]);
        }
        if !std::thread::panicking() {
            self.assert_no_keepers();
        }
    }
}

/// Live processes (not zombies) for which `f(pid)` holds.
fn processes_where(f: impl Fn(i32) -> bool) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !stat.is_empty() && f(pid)
        })
        .collect()
}

/// Pids of processes whose command line is exactly `argv`.
fn running(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    processes_where(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
}

fn wait_gone(argv: &[&str]) {
    let t0 = Instant::now();
    while !running(argv).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{argv:?} still runs: {:?}",
            running(argv)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A number of seconds unique to this test process, so `sleep N` names our processes.
fn unique_secs(offset: u32) -> String {
    (100_000 + std::process::id() * 10 + offset).to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_sandbox_made_by_one_process_runs_commands_for_another() {
    let s = Sandboxes::new();
    s.ok(&["create", "one"]);
    let out = s.hull(&[
        "exec",
        "one",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");
    // 128+N for a signal.
    let out = s.hull(&["exec", "one", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    // -w, the working directory; --shell, one string.
    let out = s.ok(&[
        "exec",
        "one",
        "-w",
        "/tmp",
        "--shell",
        "--",
        "pwd; echo $((6*7))",
    ]);
    assert_eq!(out, "/tmp\n42\n");
    // A relative -w is refused naming the flag and the fix.
    let out = s.hull(&["exec", "one", "-w", "src", "--", "pwd"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        text(&out.stderr).contains("-w/--workdir: `src` is not an absolute path"),
        "{out:?}"
    );
    // A command that is not there: 127, said once on stderr; one that cannot run: 126.
    let out = s.hull(&["exec", "one", "--", "no-such-program"]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(text(&out.stderr).contains("no-such-program"), "{out:?}");
    let out = s.hull(&["exec", "one", "--", "/etc/passwd"]);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(text(&out.stderr).contains("Permission denied"), "{out:?}");
    // Piped stdin reaches the command; without it the command's stdin is closed.
    let mut c = s.cmd(&["exec", "one", "--", "tr", "a-z", "A-Z"]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(text(&out.stdout), "HELLO\n");
    assert_eq!(s.ok(&["exec", "one", "--", "cat"]), "");
}

#[test]
fn every_command_runs_confined() {
    let s = Sandboxes::new();
    s.ok(&["create", "conf"]);
    let status = s.ok(&["exec", "conf", "--", "cat", "/proc/self/status"]);
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l[name.len()..].trim().to_string())
            .unwrap_or_default()
    };
    assert_eq!(field("CapEff:"), "0000000000000000", "{status}");
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    assert_eq!(field("Seccomp:"), "2", "{status}");
    // A refused call kills the process that made it (SIGSYS), not the sandbox.
    let out = s.hull(&["exec", "conf", "--", "unshare", "-U", "true"]);
    assert_eq!(out.status.code(), Some(128 + libc::SIGSYS), "{out:?}");
    assert_eq!(s.ok(&["exec", "conf", "--", "echo", "alive"]), "alive\n");
    // Its own pid namespace: pid 1 is hull's.
    let comm = s.ok(&["exec", "conf", "--", "cat", "/proc/1/comm"]);
    assert_eq!(comm, "hull-init\n");
}

#[test]
fn files_survive_stop_and_start_and_a_stopped_sandbox_starts_on_exec() {
    let s = Sandboxes::new();
    s.ok(&["create", "disk"]);
    s.ok(&["exec", "disk", "--", "sh", "-c", "echo kept > /workspace/f"]);
    // The root is writable on disk (overlayfs over the image), the image's own directories
    // (the host's, here) are not.
    s.ok(&[
        "exec",
        "disk",
        "--shell",
        "--",
        "mkdir -p /opt/tool && echo tool > /opt/tool/x && echo conf > /etc/added",
    ]);
    let out = s.hull(&["exec", "disk", "--", "touch", "/usr/hull-named-test"]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(!Path::new("/usr/hull-named-test").exists());
    s.ok(&["stop", "disk"]);
    assert_eq!(s.state("disk"), "stopped");
    s.assert_no_keepers();
    s.ok(&["start", "disk"]);
    assert_eq!(s.state("disk"), "running");
    assert_eq!(
        s.ok(&["exec", "disk", "--", "cat", "/workspace/f"]),
        "kept\n"
    );
    assert_eq!(
        s.ok(&["exec", "disk", "--", "cat", "/opt/tool/x", "/etc/added"]),
        "tool\nconf\n"
    );
    s.ok(&["stop", "disk"]);
    // The next exec starts it again.
    assert_eq!(
        s.ok(&["exec", "disk", "--", "cat", "/workspace/f"]),
        "kept\n"
    );
    assert_eq!(s.state("disk"), "running");
    // stop and start are idempotent.
    s.ok(&["start", "disk"]);
    s.ok(&["stop", "disk"]);
    s.ok(&["stop", "disk"]);
}

#[test]
fn a_background_process_is_gone_after_stop() {
    let s = Sandboxes::new();
    s.ok(&["create", "bg"]);
    let secs = unique_secs(1);
    let script = format!("sleep {secs} >/dev/null 2>&1 &");
    s.ok(&["exec", "bg", "--", "sh", "-c", &script]);
    // It outlives the exec that started it, and later execs.
    assert_eq!(running(&["sleep", &secs]).len(), 1);
    s.ok(&["exec", "bg", "--", "true"]);
    assert_eq!(running(&["sleep", &secs]).len(), 1);
    s.ok(&["stop", "bg"]);
    wait_gone(&["sleep", &secs]);
}

#[test]
fn sigkill_of_the_keeper_leaves_a_stopped_sandbox_that_starts_again() {
    let s = Sandboxes::new();
    s.ok(&["create", "killed"]);
    let secs = unique_secs(2);
    let script = format!("echo on-disk > /workspace/f; sleep {secs} >/dev/null 2>&1 &");
    s.ok(&["exec", "killed", "--", "sh", "-c", &script]);
    assert_eq!(running(&["sleep", &secs]).len(), 1);
    let pid = s.keeper_pid("killed");
    // SAFETY: kill takes plain integers; the pid is our keeper's, read from its state.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    s.wait_state("killed", "stopped");
    wait_gone(&["sleep", &secs]);
    assert_eq!(
        s.ok(&["exec", "killed", "--", "cat", "/workspace/f"]),
        "on-disk\n"
    );
    assert_ne!(s.keeper_pid("killed"), pid);
}

#[test]
fn twenty_commands_run_side_by_side() {
    let s = Sandboxes::new();
    s.ok(&["create", "many"]);
    // Each command waits (at most ~10 s) until all twenty have started: they can only all
    // finish if they ran at once.
    let script = "touch /tmp/in.$N; i=0; while [ $(ls /tmp/in.* | wc -l) -lt 20 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; echo $N $(ls /tmp/in.* | wc -l)";
    let handles: Vec<_> = (0..20)
        .map(|n| {
            let mut c = s.cmd(&[
                "exec",
                "many",
                "-e",
                &format!("N={n}"),
                "--",
                "sh",
                "-c",
                script,
            ]);
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
            (n, c.spawn().expect("spawn"))
        })
        .collect();
    for (n, h) in handles {
        let out = h.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(text(&out.stdout), format!("{n} 20\n"));
    }
}

#[test]
fn a_command_sees_the_sandbox_environment_and_its_own_only() {
    let s = Sandboxes::new();
    s.ok(&["create", "envs", "--env", "SHARED=yes"]);
    let secret = format!("s3cret-{}", std::process::id());
    // `-e NAME` passes the caller's value without it being on hull's command line; an unset
    // one is refused naming it.
    let out = s
        .cmd(&[
            "exec",
            "envs",
            "-e",
            "HULL_T_PASSED",
            "--",
            "printenv",
            "HULL_T_PASSED",
        ])
        .env("HULL_T_PASSED", &secret)
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), format!("{secret}\n"), "{out:?}");
    let out = s.hull(&["exec", "envs", "-e", "HULL_T_UNSET_X", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        text(&out.stderr).contains("-e `HULL_T_UNSET_X`: no variable HULL_T_UNSET_X"),
        "{out:?}"
    );
    let secs = unique_secs(3);
    // A command holding a per-command variable runs while others look for it.
    let mut holder = s.cmd(&[
        "exec",
        "envs",
        "-e",
        &format!("TOKEN={secret}"),
        "--",
        "sleep",
        &secs,
    ]);
    holder.stdout(Stdio::null()).stderr(Stdio::null());
    let mut holder = holder.spawn().unwrap();
    let t0 = Instant::now();
    while running(&["sleep", &secs]).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = s
        .cmd(&["exec", "envs", "--", "env"])
        .env("CALLER_ONLY", "1")
        .output()
        .unwrap();
    let env = text(&out.stdout);
    assert!(env.contains("SHARED=yes\n"), "{env}");
    assert!(!env.contains(&secret), "{env}");
    assert!(
        !env.contains("CALLER_ONLY"),
        "the caller's environment leaked: {env}"
    );
    let cmdlines = s.ok(&[
        "exec",
        "envs",
        "--shell",
        "--",
        "cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
    ]);
    assert!(!cmdlines.contains(&secret), "{cmdlines}");
    // Nor in the keeper's command line or environment on the host.
    let keeper = s.keeper_pid("envs");
    for f in ["cmdline", "environ"] {
        let b = std::fs::read(format!("/proc/{keeper}/{f}")).unwrap();
        assert!(!text(&b).contains(&secret), "{f}");
    }
    let _ = holder.kill();
    let _ = holder.wait();
    s.ok(&["stop", "envs"]);
    wait_gone(&["sleep", &secs]);
}

#[test]
fn a_failed_setup_is_an_error_with_its_command_code_and_stderr_and_leaves_nothing() {
    let s = Sandboxes::new();
    let out = s.hull(&[
        "create",
        "broken",
        "--setup",
        "echo fine",
        "--setup",
        "echo boom >&2; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("echo boom >&2; exit 7"), "{err}");
    assert!(err.contains("exit code 7"), "{err}");
    assert!(err.contains("boom"), "{err}");
    assert!(!s.root().join("broken").exists(), "state left behind");
    assert_eq!(s.state("broken"), "absent");
    s.assert_no_keepers();
    // A setup that works runs once, at creation.
    s.ok(&[
        "create",
        "built",
        "--setup",
        "echo made >> /workspace/setup.log",
    ]);
    s.ok(&["stop", "built"]);
    assert_eq!(
        s.ok(&["exec", "built", "--", "cat", "/workspace/setup.log"]),
        "made\n"
    );
}

#[test]
fn bad_and_taken_names_are_refused() {
    let s = Sandboxes::new();
    for bad in ["Bad", ".x", "a/b", "", &"a".repeat(64)] {
        let out = s.hull(&["create", bad]);
        assert_eq!(out.status.code(), Some(125), "{bad}: {out:?}");
        assert!(
            text(&out.stderr).contains("lowercase letters, digits"),
            "{bad}: {}",
            text(&out.stderr)
        );
    }
    s.ok(&["create", "taken"]);
    let out = s.hull(&["create", "taken"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("already exists (conflict)"),
        "{out:?}"
    );
    // The first one is untouched.
    assert_eq!(s.ok(&["exec", "taken", "--", "echo", "ok"]), "ok\n");
    let out = s.hull(&["exec", "nobody", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("no sandbox named `nobody`"),
        "{out:?}"
    );
}

#[test]
fn ps_and_logs_show_sandboxes_and_what_their_commands_printed() {
    let s = Sandboxes::new();
    s.ok(&["create", "listed"]);
    s.ok(&["create", "other"]);
    s.ok(&["stop", "other"]);
    let table = s.ok(&["ps"]);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} not in {table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(table.starts_with("NAME"), "{table}");
    assert_eq!(row("listed")[1..3], ["running", "host"]);
    assert_eq!(row("other")[1..3], ["stopped", "host"]);
    s.ok(&[
        "exec",
        "listed",
        "--",
        "sh",
        "-c",
        "echo to-out; echo to-err >&2",
    ]);
    let logs = s.ok(&["logs", "listed"]);
    assert!(logs.contains("to-out\n"), "{logs}");
    assert!(logs.contains("to-err\n"), "{logs}");
    assert!(logs.contains("[hull] exit 0"), "{logs}");
    // Past the cap the log rotates: what is kept stays bounded.
    s.ok(&["stop", "listed"]);
    let mut big = s.cmd(&["exec", "listed", "--", "sh", "-c", "i=0; while [ $i -lt 400 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done"]);
    big.env("HULL_LOG_CAP", "4096");
    assert!(big.output().unwrap().status.success());
    let logs = s.ok(&["logs", "listed"]);
    assert!(logs.len() <= 2 * 4096 + 200, "{} bytes kept", logs.len());
    assert!(logs.contains("line-399-"), "the newest output is kept");
    let files: Vec<PathBuf> = std::fs::read_dir(s.root().join("listed/logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
}

#[test]
fn rm_removes_a_running_or_stopped_sandbox_and_is_idempotent() {
    let s = Sandboxes::new();
    s.ok(&["create", "gone"]);
    s.ok(&["exec", "gone", "--", "touch", "/workspace/x"]);
    s.ok(&["rm", "gone"]);
    assert!(!s.root().join("gone").exists());
    s.assert_no_keepers();
    s.ok(&["rm", "gone"]);
    s.ok(&["rm", "never-made"]);
    s.ok(&["create", "gone"]);
    s.ok(&["stop", "gone"]);
    s.ok(&["rm", "gone"]);
    assert_eq!(s.state("gone"), "absent");
}

#[test]
fn a_request_sent_to_a_keeper_that_dies_before_reading_it_goes_to_the_next_keeper() {
    // A SIGKILLed keeper's listening socket takes connections until its last descriptor
    // closes; a request queued there is never read. Stopped, the keeper holds an exec's
    // connection unread; killed, it resets it: the client sends the request again, to a new
    // keeper, and the command runs (once).
    let s = Sandboxes::new();
    s.ok(&["create", "k"]);
    let keeper = rustix::process::Pid::from_raw(s.keeper_pid("k")).expect("a pid");
    rustix::process::kill_process(keeper, rustix::process::Signal::STOP).expect("stop it");
    let client = s
        .cmd(&[
            "exec",
            "k",
            "--",
            "sh",
            "-c",
            "echo run >> /workspace/runs; cat /workspace/runs",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hull exec");
    // Its request is queued once it holds a socket (and an instant more).
    let t0 = Instant::now();
    while !std::fs::read_dir(format!("/proc/{}/fd", client.id()))
        .map(|d| {
            d.flatten().any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
        })
        .unwrap_or(false)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the client never connected"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    rustix::process::kill_process(keeper, rustix::process::Signal::KILL).expect("kill it");
    let out = client.wait_with_output().expect("wait for hull exec");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "run\n");
    assert_ne!(s.keeper_pid("k"), keeper.as_raw_nonzero().get());
}

#[test]
fn an_idle_sandbox_stops_and_the_next_exec_starts_it() {
    let s = Sandboxes::new();
    s.ok(&["create", "idle", "--idle-timeout", "300ms"]);
    s.ok(&["exec", "idle", "--", "touch", "/workspace/y"]);
    s.wait_state("idle", "stopped");
    assert_eq!(s.ok(&["exec", "idle", "--", "ls", "/workspace"]), "y\n");
}

/// The host cgroup directories (v1 or v2) process `pid` is in, as absolute paths.
fn cgroup_dirs(pid: i32) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            // The mount of this hierarchy: cgroup2 for "", else the one listing a controller.
            let mount = mounts.lines().find_map(|m| {
                let (left, right) = m.split_once(" - ")?;
                let point = left.split_whitespace().nth(4)?;
                let mut r = right.split_whitespace();
                let fstype = r.next()?;
                let opts = r.nth(1).unwrap_or("");
                let matches = if controllers.is_empty() {
                    fstype == "cgroup2"
                } else {
                    fstype == "cgroup"
                        && controllers.split(',').all(|c| {
                            opts.split(',').any(|o| {
                                o == c || o == format!("name={}", c.trim_start_matches("name="))
                            })
                        })
                };
                matches.then(|| point.to_string())
            })?;
            Some(PathBuf::from(format!("{mount}{path}")))
        })
        .filter(|p| p.to_string_lossy().contains("hull-"))
        .collect()
}

#[test]
fn a_leftover_sweep_leaves_a_live_sandbox_alone() {
    let s = Sandboxes::new();
    s.ok(&["create", "swept"]);
    let secs = unique_secs(4);
    let script = format!("sleep {secs} >/dev/null 2>&1 &");
    s.ok(&["exec", "swept", "--", "sh", "-c", &script]);
    let pids = running(&["sleep", &secs]);
    assert_eq!(pids.len(), 1);
    let dirs = cgroup_dirs(pids[0]);
    assert!(
        !dirs.is_empty(),
        "the sandbox's process is in no hull cgroup"
    );
    // `hull doctor` sweeps what dead hulls left (in the same TMPDIR as the keeper's lock).
    let out = s.hull(&["doctor"]);
    assert!(out.status.code().is_some(), "{out:?}");
    for d in &dirs {
        assert!(
            d.is_dir(),
            "the sweep removed a live sandbox's cgroup {}",
            d.display()
        );
    }
    assert_eq!(running(&["sleep", &secs]), pids);
    assert_eq!(s.ok(&["exec", "swept", "--", "echo", "still"]), "still\n");
    assert_eq!(s.state("swept"), "running");
}

#[test]
fn host_directories_mount_at_workspace_or_read_only_at_their_own_path() {
    let s = Sandboxes::new();
    let rw = tempfile::tempdir().unwrap();
    let ro = tempfile::tempdir().unwrap();
    std::fs::write(ro.path().join("input"), "given\n").unwrap();
    let ro_path = ro.path().to_str().unwrap();
    s.ok(&[
        "create",
        "mounted",
        "--workspace",
        rw.path().to_str().unwrap(),
        "--ro-workspace",
        ro_path,
    ]);
    s.ok(&[
        "exec",
        "mounted",
        "--",
        "sh",
        "-c",
        "echo made > /workspace/out",
    ]);
    assert_eq!(
        std::fs::read_to_string(rw.path().join("out")).unwrap(),
        "made\n"
    );
    let input = format!("{ro_path}/input");
    assert_eq!(s.ok(&["exec", "mounted", "--", "cat", &input]), "given\n");
    let out = s.hull(&["exec", "mounted", "--", "touch", &format!("{ro_path}/new")]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(!ro.path().join("new").exists());
    // The sandbox's own disk is not used for /workspace then.
    assert!(!s.root().join("mounted/workspace").exists());
    assert!(!s.root().join("mounted/upper/workspace/out").exists());
    // Both host directories are mounted nosuid and nodev (the ro one read-only too).
    let info = s.ok(&["exec", "mounted", "--", "cat", "/proc/self/mountinfo"]);
    for (at, ro) in [("/workspace", false), (ro_path, true)] {
        let line = info
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(at))
            .unwrap_or_else(|| panic!("{at} not mounted:\n{info}"));
        let opts: Vec<&str> = line.split(' ').nth(5).unwrap().split(',').collect();
        assert!(
            opts.contains(&"nosuid") && opts.contains(&"nodev"),
            "{line}"
        );
        assert_eq!(opts.contains(&"ro"), ro, "{line}");
    }
}

#[test]
fn a_sandbox_stops_at_its_max_duration() {
    let s = Sandboxes::new();
    s.ok(&["create", "short", "--max-duration", "500ms"]);
    s.wait_state("short", "stopped");
    assert_eq!(s.ok(&["exec", "short", "--", "echo", "again"]), "again\n");
}

#[test]
fn a_command_whose_client_goes_away_is_killed_with_what_it_started() {
    let s = Sandboxes::new();
    s.ok(&["create", "abort"]);
    let (outer, inner) = (unique_secs(5), unique_secs(6));
    // The command starts a child of its own, then waits; its client is killed meanwhile.
    let script = format!("sleep {inner} & sleep {outer}");
    let mut c = s.cmd(&["exec", "abort", "--", "sh", "-c", &script]);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut client = c.spawn().unwrap();
    let t0 = Instant::now();
    while running(&["sleep", &outer]).is_empty() || running(&["sleep", &inner]).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    client.kill().unwrap();
    client.wait().unwrap();
    wait_gone(&["sleep", &outer]);
    wait_gone(&["sleep", &inner]);
    // The sandbox itself runs on.
    assert_eq!(s.ok(&["exec", "abort", "--", "echo", "on"]), "on\n");
    assert!(s.ok(&["logs", "abort"]).contains("the client went away"));
    // The same for a command that closed its output first (`nohup server >log 2>&1`): the
    // keeper then only waits for its exit, and must still watch the client.
    let quiet = unique_secs(7);
    let script = format!("exec >/dev/null 2>&1; sleep {quiet}");
    let mut c = s.cmd(&["exec", "abort", "--", "sh", "-c", &script]);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut client = c.spawn().unwrap();
    let t0 = Instant::now();
    while running(&["sleep", &quiet]).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the quiet command never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Past the 200 ms the keeper gives output after EOF.
    std::thread::sleep(Duration::from_millis(400));
    client.kill().unwrap();
    client.wait().unwrap();
    wait_gone(&["sleep", &quiet]);
}

#[test]
fn logs_follow_prints_what_later_commands_print() {
    use std::io::{BufRead, BufReader};
    let s = Sandboxes::new();
    s.ok(&["create", "follow"]);
    let mut c = s.cmd(&["logs", "follow", "-f"]);
    c.stdout(Stdio::piped());
    let mut f = c.spawn().unwrap();
    let mut lines = BufReader::new(f.stdout.take().unwrap()).lines();
    s.ok(&["exec", "follow", "--", "echo", "followed-line"]);
    let t0 = Instant::now();
    let found = loop {
        match lines.next() {
            Some(Ok(l)) if l == "followed-line" => break true,
            Some(Ok(_)) => {}
            _ => break false,
        }
        assert!(t0.elapsed() < Duration::from_secs(10));
    };
    let _ = f.kill();
    let _ = f.wait();
    assert!(found, "logs -f never printed the command's output");
}

/// `logs -f` across rotations of the exec log: every command's output arrives, once and in
/// order, even when the new file has grown past the old one's length by the next look.
#[test]
fn logs_follow_loses_nothing_when_the_log_rotates() {
    use std::io::Read;
    let s = Sandboxes::new();
    let mut create = s.cmd(&["create", "rotating"]);
    create.env("HULL_LOG_CAP", "4096");
    assert!(create.output().unwrap().status.success());
    let mut c = s.cmd(&["logs", "rotating", "-f"]);
    c.stdout(Stdio::piped());
    let mut f = c.spawn().unwrap();
    let mut out = f.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = out.read_to_string(&mut all);
        all
    });
    // Each command prints ~3 KiB, so every second one rotates the 4 KiB log, and the new file
    // is as long as the old one was when `logs -f` last looked.
    for i in 0..8 {
        let script = format!(
            "j=0; while [ $j -lt 60 ]; do echo cmd-{i}-line-$j-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; j=$((j+1)); done"
        );
        s.ok(&["exec", "rotating", "--", "sh", "-c", &script]);
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_millis(500));
    s.ok(&["rm", "rotating"]);
    let t0 = Instant::now();
    while f.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "logs -f did not end with its sandbox"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let all = reader.join().unwrap();
    let lines: Vec<&str> = all.lines().filter(|l| l.starts_with("cmd-")).collect();
    let want: Vec<String> = (0..8)
        .flat_map(|i| (0..60).map(move |j| format!("cmd-{i}-line-{j}-")))
        .collect();
    assert_eq!(lines.len(), want.len(), "lines followed:\n{all}");
    for (got, want) in lines.iter().zip(&want) {
        assert!(got.starts_with(want.as_str()), "{got} where {want} was due");
    }
}

/// An OCI layout of one layer: a static busybox as /bin/sh, a /srv directory and /marker.
fn busybox_layout(dir: &Path) -> bool {
    busybox_layout_with(dir, &[])
}

/// [`busybox_layout`] with `files` (path, text) added, each 0644.
fn busybox_layout_with(dir: &Path, files: &[(&str, &str)]) -> bool {
    use hull_image::oci::Digest;
    let Ok(busybox) = std::fs::read("/bin/busybox") else {
        hull_testkit::skip("/bin/busybox (busybox-static) is not installed");
        return false;
    };
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut add = |path: &str, data: &[u8], mode: u32, kind: tar::EntryType, link: Option<&str>| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        if let Some(l) = link {
            h.set_link_name(l).unwrap();
        }
        b.append_data(&mut h, path, data).unwrap();
    };
    add("bin/", b"", 0o755, tar::EntryType::Directory, None);
    add(
        "bin/busybox",
        &busybox,
        0o755,
        tar::EntryType::Regular,
        None,
    );
    for tool in [
        "sh", "cat", "echo", "touch", "ls", "id", "stat", "grep", "chmod", "mkdir",
    ] {
        add(
            &format!("bin/{tool}"),
            b"",
            0o777,
            tar::EntryType::Symlink,
            Some("busybox"),
        );
    }
    add("srv/", b"", 0o755, tar::EntryType::Directory, None);
    add(
        "marker",
        b"from the image\n",
        0o644,
        tar::EntryType::Regular,
        None,
    );
    for (path, text) in files {
        add(path, text.as_bytes(), 0o644, tar::EntryType::Regular, None);
    }
    let layer = b.into_inner().unwrap().finish().unwrap();
    let config = br#"{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"]}}"#;
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let put = |bytes: &[u8], media: &str| {
        let d = Digest::of(bytes);
        std::fs::write(dir.join("blobs/sha256").join(d.hex()), bytes).unwrap();
        serde_json::json!({"digest": d.to_string(), "size": bytes.len(), "mediaType": media})
    };
    let l = put(&layer, "application/vnd.oci.image.layer.v1.tar+gzip");
    let c = put(config, "application/vnd.oci.image.config.v1+json");
    let manifest = serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": c, "layers": [l]})).unwrap();
    let mut m = put(&manifest, "application/vnd.oci.image.manifest.v1+json");
    m["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": "v1"});
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [m]})).unwrap(),
    )
    .unwrap();
    true
}

#[test]
fn an_images_files_are_writable_through_the_overlay_and_the_image_is_untouched() {
    let home = tempfile::tempdir().unwrap();
    let layout = tempfile::tempdir().unwrap();
    if !busybox_layout(layout.path()) {
        return;
    }
    let mut s = Sandboxes::new();
    s.home = Some(home.path().to_path_buf());
    s.ok(&["import", layout.path().to_str().unwrap(), "--name", "bb:1"]);
    s.ok(&["create", "onimage", "--image", "bb:1"]);
    s.ok(&[
        "exec",
        "onimage",
        "--",
        "sh",
        "-c",
        "echo changed > /marker; echo new > /srv/new; touch /bin/added",
    ]);
    s.ok(&["stop", "onimage"]);
    assert_eq!(
        s.ok(&["exec", "onimage", "--", "cat", "/marker", "/srv/new"]),
        "changed\nnew\n"
    );
    // The store's copy is the lower layer: unchanged, and another box still sees it as it was.
    assert_eq!(
        s.ok(&["run", "--image", "bb:1", "--", "cat", "/marker"]),
        "from the image\n"
    );
    s.ok(&["create", "second", "--image", "bb:1"]);
    assert_eq!(s.ok(&["exec", "second", "--", "ls", "/srv"]), "");
}

/// Template store entries: (template files, layer directories).
fn store(s: &Sandboxes) -> (Vec<String>, usize) {
    let t = s.root().join(".templates");
    let mut names: Vec<String> = std::fs::read_dir(&t)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".json")
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let layers = std::fs::read_dir(t.join("layers")).map_or(0, |rd| rd.count());
    (names, layers)
}

/// A stopped sandbox `base` whose setup counts its runs in /opt/tool/count and leaves a file
/// in /workspace, saved as template `name`.
fn saved_template(s: &Sandboxes, name: &str) {
    s.ok(&[
        "create",
        "base",
        "--env",
        "FROM_BASE=1",
        "--setup",
        "mkdir -p /opt/tool && echo run >> /opt/tool/count && echo hi > /workspace/f",
    ]);
    s.ok(&[
        "exec",
        "base",
        "--",
        "sh",
        "-c",
        "echo installed > /opt/tool/bin",
    ]);
    s.ok(&["stop", "base"]);
    s.ok(&["template", "save", "base", name]);
}

#[test]
fn a_template_restores_disk_and_configuration_without_running_setup_again() {
    let s = Sandboxes::new();
    saved_template(&s, "tools");
    // The sandbox saved stands on its frozen layer: it sees what it saw.
    assert_eq!(
        s.ok(&[
            "exec",
            "base",
            "--",
            "cat",
            "/opt/tool/count",
            "/workspace/f"
        ]),
        "run\nhi\n"
    );
    s.ok(&[
        "create",
        "dev",
        "--template",
        "tools",
        "--setup",
        "echo more >> /opt/tool/count",
    ]);
    // The template's setup did not run again; the new sandbox's own did, once.
    let out = s.ok(&[
        "exec",
        "dev",
        "--shell",
        "--",
        "cat /opt/tool/count /opt/tool/bin /workspace/f; echo $FROM_BASE; pwd",
    ]);
    assert_eq!(out, "run\nmore\ninstalled\nhi\n1\n/workspace\n");
    // Its writes are its own: neither the template nor the sandbox saved sees them.
    s.ok(&[
        "exec",
        "dev",
        "--",
        "sh",
        "-c",
        "echo mine > /workspace/f; rm /opt/tool/bin",
    ]);
    s.ok(&["stop", "dev"]);
    s.ok(&["start", "dev"]);
    assert_eq!(
        s.ok(&["exec", "dev", "--", "cat", "/workspace/f"]),
        "mine\n"
    );
    let out = s.hull(&["exec", "dev", "--", "cat", "/opt/tool/bin"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        s.ok(&["exec", "base", "--", "cat", "/workspace/f", "/opt/tool/bin"]),
        "hi\ninstalled\n"
    );
    s.ok(&["create", "dev2", "--template", "tools"]);
    let ps = s.ok(&["ps", "--json"]);
    assert!(
        ps.lines()
            .any(|l| l.contains(r#""name":"dev2""#) && l.contains(r#""template":"tools""#)),
        "{ps}"
    );
    assert_eq!(
        s.ok(&["exec", "dev2", "--", "cat", "/workspace/f", "/opt/tool/bin"]),
        "hi\ninstalled\n"
    );
    // A template of a sandbox made from a template stacks its layer on the first's.
    s.ok(&["stop", "dev"]);
    s.ok(&["template", "save", "dev", "tools2"]);
    s.ok(&["create", "dev3", "--template", "tools2"]);
    assert_eq!(
        s.ok(&[
            "exec",
            "dev3",
            "--",
            "cat",
            "/opt/tool/count",
            "/workspace/f"
        ]),
        "run\nmore\nmine\n"
    );
    assert_eq!(store(&s), (vec!["tools".into(), "tools2".into()], 2));
}

#[test]
fn removing_a_template_leaves_the_sandboxes_made_from_it_working() {
    let s = Sandboxes::new();
    saved_template(&s, "tools");
    s.ok(&["create", "dev", "--template", "tools"]);
    s.ok(&["template", "rm", "tools"]);
    // Idempotent, like `hull rm`.
    s.ok(&["template", "rm", "tools"]);
    assert_eq!(store(&s), (vec![], 1));
    let out = s.hull(&["create", "dev2", "--template", "tools"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("no template named `tools`"),
        "{out:?}"
    );
    s.ok(&["stop", "dev"]);
    assert_eq!(
        s.ok(&["exec", "dev", "--", "cat", "/opt/tool/bin", "/workspace/f"]),
        "installed\nhi\n"
    );
    // The layer goes with the last sandbox standing on it.
    s.ok(&["rm", "base"]);
    assert_eq!(store(&s), (vec![], 1));
    s.ok(&["rm", "dev"]);
    assert_eq!(store(&s), (vec![], 0));
}

#[test]
fn template_errors_are_named_and_leave_nothing() {
    let s = Sandboxes::new();
    s.ok(&["create", "base"]);
    let out = s.hull(&["template", "save", "base", "t"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("is running: `hull stop base` first"),
        "{out:?}"
    );
    assert_eq!(store(&s), (vec![], 0));
    let out = s.hull(&["template", "save", "nosuch", "t"]);
    assert!(
        text(&out.stderr).contains("no sandbox named `nosuch`"),
        "{out:?}"
    );
    let out = s.hull(&["template", "save", "base", "Bad/Name"]);
    assert!(text(&out.stderr).contains("bad template name"), "{out:?}");
    let out = s.hull(&["create", "dev", "--template", "nosuch"]);
    assert!(
        text(&out.stderr).contains("no template named `nosuch`"),
        "{out:?}"
    );
    assert_eq!(s.state("dev"), "absent");
    s.ok(&["stop", "base"]);
    s.ok(&["template", "save", "base", "t"]);
    let out = s.hull(&["template", "save", "base", "t"]);
    assert!(
        text(&out.stderr).contains("already exists (conflict)"),
        "{out:?}"
    );
    let out = s.hull(&["create", "dev", "--template", "t", "--image", "busybox:1"]);
    assert!(text(&out.stderr).contains("is of image `host`"), "{out:?}");
    assert_eq!(s.state("dev"), "absent");
    assert_eq!(store(&s), (vec!["t".into()], 1));
}

#[test]
fn concurrent_creators_all_start_from_one_template_and_concurrent_saves_make_one() {
    let s = Sandboxes::new();
    saved_template(&s, "tools");
    let outs: Vec<Output> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let s = &s;
                sc.spawn(move || s.hull(&["create", &format!("c{i}"), "--template", "tools"]))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for o in &outs {
        assert!(o.status.success(), "{o:?}");
    }
    for i in 0..4 {
        assert_eq!(
            s.ok(&["exec", &format!("c{i}"), "--", "cat", "/opt/tool/count"]),
            "run\n"
        );
        s.ok(&["stop", &format!("c{i}")]);
    }
    // Two saves of one name at once: one makes it, the other is told it exists.
    let outs: Vec<Output> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let s = &s;
                sc.spawn(move || s.hull(&["template", "save", &format!("c{i}"), "same"]))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(
        outs.iter().filter(|o| o.status.success()).count(),
        1,
        "{outs:?}"
    );
    let loser = outs.iter().find(|o| !o.status.success()).expect("a loser");
    assert!(
        text(&loser.stderr).contains("already exists (conflict)"),
        "{loser:?}"
    );
    assert_eq!(store(&s), (vec!["same".into(), "tools".into()], 2));
    // The loser's sandbox is as it was.
    for i in 0..2 {
        assert_eq!(
            s.ok(&["exec", &format!("c{i}"), "--", "cat", "/opt/tool/count"]),
            "run\n"
        );
    }
}

#[test]
fn template_ls_and_prune_show_and_remove_templates() {
    let s = Sandboxes::new();
    saved_template(&s, "tools");
    let ls = s.ok(&["template", "ls"]);
    let mut lines = ls.lines();
    let head = lines.next().unwrap_or_default();
    for col in ["NAME", "FROM", "IMAGE", "AGE", "SIZE"] {
        assert!(head.contains(col), "{ls}");
    }
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(&row[..3], &["tools", "base", "host"], "{ls}");
    let json: serde_json::Value =
        serde_json::from_str(s.ok(&["template", "ls", "--json"]).trim()).expect("json");
    assert_eq!(json["name"], "tools");
    assert_eq!(json["from"], "base");
    assert_eq!(json["layers"], 1);
    assert!(json["size_bytes"].as_u64().unwrap_or(0) > 0, "{json}");
    assert_eq!(s.ok(&["template", "prune", "--older-than", "1h"]), "");
    assert_eq!(store(&s).0, vec!["tools".to_string()]);
    assert_eq!(
        s.ok(&["template", "prune", "--older-than", "0s"]),
        "tools\n"
    );
    assert_eq!(s.ok(&["template", "ls", "--json"]), "");
    // The sandbox it was saved from still stands on its layer.
    assert_eq!(store(&s), (vec![], 1));
    assert_eq!(s.ok(&["exec", "base", "--", "cat", "/workspace/f"]), "hi\n");
}

#[test]
fn a_template_of_an_image_sandbox_keeps_its_changes_and_deletions_over_the_image() {
    let home = tempfile::tempdir().unwrap();
    let layout = tempfile::tempdir().unwrap();
    if !busybox_layout(layout.path()) {
        return;
    }
    let mut s = Sandboxes::new();
    s.home = Some(home.path().to_path_buf());
    s.ok(&["import", layout.path().to_str().unwrap(), "--name", "bb:1"]);
    s.ok(&[
        "create",
        "onimage",
        "--image",
        "bb:1",
        "--setup",
        "echo changed > /marker; echo new > /srv/new; rm /bin/touch; echo w > /workspace/w",
    ]);
    s.ok(&["stop", "onimage"]);
    s.ok(&["template", "save", "onimage", "bb-tools"]);
    s.ok(&["create", "fromimage", "--template", "bb-tools"]);
    assert_eq!(
        s.ok(&[
            "exec",
            "fromimage",
            "--",
            "cat",
            "/marker",
            "/srv/new",
            "/workspace/w"
        ]),
        "changed\nnew\nw\n"
    );
    // A deletion (an overlay whiteout in the frozen layer) stays a deletion.
    let out = s.hull(&["exec", "fromimage", "--", "ls", "/bin/touch"]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    // Written over the template's layer: copied up into its own upper.
    s.ok(&[
        "exec",
        "fromimage",
        "--",
        "sh",
        "-c",
        "echo again > /marker",
    ]);
    assert_eq!(
        s.ok(&["exec", "onimage", "--", "cat", "/marker"]),
        "changed\n"
    );
    assert_eq!(
        s.ok(&["run", "--image", "bb:1", "--", "cat", "/marker"]),
        "from the image\n"
    );
}

#[test]
fn a_save_that_fails_midway_leaves_nothing_and_the_sandbox_as_it_was() {
    let s = Sandboxes::new();
    s.ok(&["create", "base", "--setup", "echo kept > /workspace/k"]);
    s.ok(&["stop", "base"]);
    // The sandbox's configuration cannot be rewritten (its temporary file's name is taken by a
    // directory): the last step of a save fails, after the layer moved and the template was
    // written.
    let blocker = s.root().join("base/config.tmp");
    std::fs::create_dir(&blocker).unwrap();
    let out = s.hull(&["template", "save", "base", "t"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        text(&out.stderr).contains("could not save template `t`"),
        "{out:?}"
    );
    assert_eq!(store(&s), (vec![], 0));
    assert!(s.root().join("base/upper/workspace/k").exists());
    std::fs::remove_dir(&blocker).unwrap();
    assert_eq!(
        s.ok(&["exec", "base", "--", "cat", "/workspace/k"]),
        "kept\n"
    );
    s.ok(&["stop", "base"]);
    s.ok(&["template", "save", "base", "t"]);
    assert_eq!(store(&s), (vec!["t".into()], 1));
}

/// A box that can see a sandbox's control socket (here a read-only `--mount` of the sandboxes
/// directory) cannot drive its keeper. Rootless, the box's root is the host user, so the
/// socket's 0600 mode lets it connect; as host root the mount reaches the box idmapped to its
/// own root, so it can connect too. The keeper must refuse a peer of another uid or in another
/// user namespace (before that check, this ran the command and wrote the sandbox's workspace).
#[test]
fn a_box_that_sees_a_control_socket_cannot_drive_the_keeper() {
    let s = Sandboxes::new();
    s.ok(&["create", "victim"]);
    let script = r#"
import json, socket, sys
c = socket.socket(socket.AF_UNIX)
try:
    c.connect("/mnt/sb/victim/control.sock")
except OSError as e:
    print("connect refused", e.errno)
    sys.exit(0)
req = {"op": "exec", "argv": ["sh", "-c", "echo pwned > /workspace/pwned"], "env": [], "cwd": None, "stdin": False}
got = b""
try:
    c.sendall(json.dumps(req).encode() + b"\n")
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += b
except ConnectionError as e:
    print("connection reset", e.errno)
    sys.exit(0)
print("answered", len(got))
"#;
    let out = Command::new(common::bin())
        .args([
            "run",
            "--timeout",
            "20s",
            "--mount",
            &format!("{}:/mnt/sb:ro", s.root().display()),
            "--",
            "python3",
            "-c",
            script,
        ])
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.starts_with("connect refused")
            || said.starts_with("connection reset")
            || said == "answered 0\n",
        "the keeper answered a box: {said:?} {}",
        text(&out.stderr)
    );
    let check = s.hull(&["exec", "victim", "--", "test", "-e", "/workspace/pwned"]);
    assert_eq!(
        check.status.code(),
        Some(1),
        "a command sent from another box ran in the sandbox"
    );
}

#[test]
fn sandboxes_and_templates_work_in_the_default_state_directory() {
    // The default place (host root: /var/lib/hull/sandboxes; a user: ~/.local/state/hull/
    // sandboxes) is on the list of sources no box may mount: the sandbox's own layers there
    // are still its root's.
    let name = format!("zz-default-{}", std::process::id());
    let tname = format!("{name}-t");
    let run = |args: &[&str]| {
        let out = Command::new(common::bin())
            .args(args)
            .env_remove("HULL_SANDBOXES")
            .env_remove("XDG_STATE_HOME")
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        (out.status.code(), text(&out.stdout) + &text(&out.stderr))
    };
    let derived = format!("{name}-d");
    let steps: Vec<Vec<&str>> = vec![
        vec!["create", &name, "--setup", "echo x > /workspace/x"],
        vec!["stop", &name],
        vec!["template", "save", &name, &tname],
        vec!["create", &derived, "--template", &tname],
        vec!["exec", &derived, "--", "cat", "/workspace/x"],
    ];
    let mut outs = Vec::new();
    for s in &steps {
        outs.push(run(s));
        if outs.last().is_some_and(|o| o.0 != Some(0)) {
            break;
        }
    }
    for s in [
        vec!["rm", &name],
        vec!["rm", &derived],
        vec!["template", "rm", &tname],
    ] {
        run(&s);
    }
    assert_eq!(outs.len(), steps.len(), "{outs:?}");
    assert_eq!(outs.last().map(|o| o.1.as_str()), Some("x\n"), "{outs:?}");
}

/// `hull rm` racing an exec that starts the same stopped sandbox: rm always succeeds, the
/// sandbox is gone afterwards, and no keeper of it is left running on a half-removed disk
/// (before, rm failed with "Directory not empty" about four runs in ten while the exec's
/// keeper recreated the overlay directories under it).
#[test]
fn rm_racing_an_exec_that_starts_the_sandbox_leaves_nothing() {
    let s = Sandboxes::new();
    let mut rm_failures = Vec::new();
    for i in 0u64..12 {
        let name = format!("race{i}");
        s.ok(&["create", &name]);
        s.ok(&["stop", &name]);
        let mut exec = s.cmd(&["exec", &name, "--", "true"]);
        exec.stdout(Stdio::null()).stderr(Stdio::null());
        let mut exec = exec.spawn().unwrap();
        std::thread::sleep(Duration::from_millis((i % 4) * 3));
        let rm = s.hull(&["rm", &name]);
        let _ = exec.wait();
        if !rm.status.success() {
            rm_failures.push(format!("{name}: {}", text(&rm.stderr)));
        }
        assert!(
            !s.root().join(&name).exists(),
            "{name} is still there after rm: {:?}",
            rm
        );
        // A keeper that lost the race may still be on its way out; one that runs on does not
        // leave within the wait.
        let marker = s.root().join(&name);
        let keepers = || {
            processes_where(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*marker.to_string_lossy()))
            })
        };
        let t0 = Instant::now();
        while !keepers().is_empty() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            keepers().is_empty(),
            "{name}: a keeper outlived rm: {:?}",
            keepers()
        );
        assert!(!s.root().join(&name).exists(), "{name} came back after rm");
    }
    assert!(rm_failures.is_empty(), "rm failed: {rm_failures:?}");
}

#[test]
fn a_template_removed_while_sandboxes_are_made_from_it_leaves_each_whole_or_absent() {
    let s = Sandboxes::new();
    saved_template(&s, "tools");
    for round in 0..3 {
        let t = format!("t{round}");
        s.ok(&["stop", "base"]);
        s.ok(&["template", "save", "base", &t]);
        let (made, removed) = std::thread::scope(|sc| {
            let creator = sc.spawn(|| s.hull(&["create", &format!("r{round}"), "--template", &t]));
            let remover = sc.spawn(|| s.hull(&["template", "rm", &t]));
            (
                creator.join().expect("thread"),
                remover.join().expect("thread"),
            )
        });
        assert!(removed.status.success(), "{removed:?}");
        let name = format!("r{round}");
        if made.status.success() {
            // Its layers stayed: it works, and keeps working after a restart.
            s.ok(&["stop", &name]);
            assert_eq!(
                s.ok(&["exec", &name, "--", "cat", "/opt/tool/bin"]),
                "installed\n"
            );
        } else {
            assert!(
                text(&made.stderr).contains(&format!("no template named `{t}`")),
                "{made:?}"
            );
            assert_eq!(s.state(&name), "absent");
        }
    }
    // Every save froze one more layer under `base`, which still stands on all four.
    assert_eq!(store(&s), (vec!["tools".to_string()], 4));
    s.ok(&["rm", "base"]);
    for round in 0..3 {
        s.ok(&["rm", &format!("r{round}")]);
    }
    s.ok(&["template", "rm", "tools"]);
    assert_eq!(store(&s), (vec![], 0));
}

/// A sandboxes directory others may write is refused: whoever can swap a sandbox's directory
/// chooses what its keeper runs.
#[test]
fn a_sandboxes_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let s = Sandboxes::new();
    std::fs::set_permissions(s.root(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = s.hull(&["create", "open"]);
    assert!(!out.status.success(), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains(&*s.root().to_string_lossy()) && said.contains("HULL_SANDBOXES"),
        "{said}"
    );
    assert!(!s.root().join("open").exists());
    std::fs::set_permissions(s.root(), std::fs::Permissions::from_mode(0o700)).unwrap();
    s.ok(&["create", "open"]);
}

/// A background process a command left holding its output keeps running when it prints after
/// the command's end (its output goes to the exec log; before, its write died of SIGPIPE).
#[test]
fn a_background_process_that_prints_after_its_command_ends_lives_on() {
    let s = Sandboxes::new();
    s.ok(&["create", "bg"]);
    let out = s.ok(&[
        "exec",
        "bg",
        "--",
        "sh",
        "-c",
        "(sleep 0.6; echo late-line; echo done > /workspace/bg-done) & echo now",
    ]);
    assert_eq!(out, "now\n");
    let t0 = Instant::now();
    loop {
        let got = s.hull(&["exec", "bg", "--", "cat", "/workspace/bg-done"]);
        if got.status.success() {
            assert_eq!(text(&got.stdout), "done\n");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the background process never finished: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(s.ok(&["logs", "bg"]).contains("late-line"));
}

/// `hull ps` (and every state check) probes the keeper's lock with a shared lock for an
/// instant; a keeper starting at that instant must still start (before, `hull start` answered
/// success and the sandbox stayed stopped).
#[test]
fn a_state_probe_at_the_wrong_moment_does_not_stop_a_start() {
    let s = Sandboxes::new();
    s.ok(&["create", "probe"]);
    s.ok(&["stop", "probe"]);
    let lock = std::fs::File::open(s.root().join("probe/keeper.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockShared).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(60));
        drop(lock);
    });
    s.ok(&["start", "probe"]);
    release.join().unwrap();
    assert_eq!(s.state("probe"), "running");
}

/// A setup command that does not end is killed at `--setup-timeout`; the creation fails naming
/// the command and the flag, and leaves nothing (before, `hull create` waited forever).
#[test]
fn a_setup_command_past_its_timeout_is_killed_and_leaves_nothing() {
    let s = Sandboxes::new();
    let secs = unique_secs(9);
    let cmd = format!("sleep {secs}");
    let out = s.hull(&["create", "slow", "--setup", &cmd, "--setup-timeout", "1s"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!(
            "setup command `{cmd}` did not finish within 1 s (--setup-timeout)"
        )),
        "{said}"
    );
    assert!(!s.root().join("slow").exists());
    wait_gone(&["sleep", &secs]);
    let out = s.hull(&["create", "bad", "--setup-timeout", "soon"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(text(&out.stderr).contains("--setup-timeout"), "{out:?}");
}

/// A busybox image whose /etc/passwd has a user `dev` (1000:1000, home /home/dev, not in the
/// image) in the groups `dev` and `tools` (1500), imported as `bb:users` into `s`'s store.
fn users_image(s: &mut Sandboxes, home: &Path) -> bool {
    let layout = tempfile::tempdir().unwrap();
    let files = [
        ("etc/", ""),
        (
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000:dev:/home/dev:/bin/sh\nsvc:x:1200:1200::/srv:/bin/sh\nlib:x:1300:1300::/var/lib/lib:/bin/sh\n",
        ),
        ("etc/group", "root:x:0:\ndev:x:1000:\ntools:x:1500:dev\n"),
    ];
    // `etc/` as a file entry would be wrong: only the two files.
    if !busybox_layout_with(layout.path(), &files[1..]) {
        return false;
    }
    s.home = Some(home.to_path_buf());
    s.ok(&[
        "import",
        layout.path().to_str().unwrap(),
        "--name",
        "bb:users",
    ]);
    true
}

/// Sandboxes with the `bb:users` image in their store (and the store's home, kept for the test's
/// life), or None (skipped) where this user cannot map more ids than its own.
fn user_sandboxes() -> Option<(tempfile::TempDir, Sandboxes)> {
    if !can_map_users() {
        return None;
    }
    let home = tempfile::tempdir().unwrap();
    let mut s = Sandboxes::new();
    users_image(&mut s, home.path()).then_some((home, s))
}

/// The `Cap*` lines of /proc/self/status of `sh -c` run by `hull exec NAME ARGS...`.
fn caps_of(s: &Sandboxes, name: &str, args: &[&str]) -> String {
    let mut all = vec!["exec", name];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "grep", "^Cap", "/proc/self/status"]);
    s.ok(&all)
}

/// The host uid that uid `id` of a sandbox with more than one id is: host root's range, or
/// the caller's /etc/subuid range.
fn host_uid_of(id: u32) -> u32 {
    if common::is_root() {
        return 0x7FFD_0000 + id;
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let name = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2) == Some(&me.to_string().as_str())).then(|| f[0].to_string())
        })
        .unwrap();
    let start: u32 = std::fs::read_to_string("/etc/subuid")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f[0] == name || f[0] == me.to_string()).then(|| f[1].parse().unwrap())
        })
        .expect("a subuid range (see SECURITY.md)");
    start + id - 1
}

/// Whether this caller can give a sandbox more than one id (root, or a range in /etc/subuid
/// and the uidmap helpers); else a skip is printed.
fn can_map_users() -> bool {
    if common::is_root() {
        return true;
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let named = std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2) == Some(&me.to_string().as_str())).then(|| f[0].to_string())
        })
        .unwrap_or_default();
    let ranged = std::fs::read_to_string("/etc/subuid")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(':').next() == Some(named.as_str()));
    if !ranged || !Path::new("/usr/bin/newuidmap").exists() {
        hull_testkit::skip(
            "this user has no /etc/subuid range (or no newuidmap): --user needs one rootless",
        );
        return false;
    }
    true
}

#[test]
fn a_sandbox_user_runs_every_command_with_its_ids_home_and_workspace() {
    let Some((_home, s)) = user_sandboxes() else {
        return;
    };
    s.ok(&[
        "create",
        "dev",
        "--image",
        "bb:users",
        "--user",
        "dev",
        "--setup",
        "echo from-setup > /workspace/setup-file; echo secret > /secret; chmod 600 /secret; mkdir /private; chmod 700 /private",
    ]);
    // The user's ids, groups and environment.
    assert_eq!(
        s.ok(&["exec", "dev", "--", "sh", "-c", "id -u; id -g; id -G"]),
        "1000\n1000\n1000 1500\n"
    );
    assert_eq!(
        s.ok(&[
            "exec",
            "dev",
            "--shell",
            "--",
            "echo $HOME $USER $LOGNAME; pwd"
        ]),
        "/home/dev dev dev\n/workspace\n"
    );
    // Its home (not in the image) was made, and is its own; /workspace is its own.
    assert_eq!(
        s.ok(&[
            "exec",
            "dev",
            "--shell",
            "--",
            "touch $HOME/h /workspace/mine && stat -c %u:%g $HOME /workspace /workspace/mine"
        ]),
        "1000:1000\n1000:1000\n1000:1000\n"
    );
    // On the host the file belongs to uid 1000 of the sandbox's range, never to a host user.
    let host = std::fs::metadata(s.root().join("dev/upper/workspace/mine")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(host.uid(), host_uid_of(1000));
    // The setup ran as root: its file is root's, and the user cannot change it.
    assert_eq!(
        s.ok(&[
            "exec",
            "dev",
            "--",
            "stat",
            "-c",
            "%u",
            "/workspace/setup-file"
        ]),
        "0\n"
    );
    let out = s.hull(&[
        "exec",
        "dev",
        "--shell",
        "--",
        "echo x >> /workspace/setup-file",
    ]);
    assert_ne!(out.status.code(), Some(0), "the user wrote root's file");
    // A root-only file: the user cannot read it, root (exec -u root) can.
    let out = s.hull(&["exec", "dev", "--", "cat", "/secret"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    assert_eq!(
        s.ok(&["exec", "dev", "-u", "root", "--", "cat", "/secret"]),
        "secret\n"
    );
    // The working directory is entered as the user: root's 0700 directory is refused (126).
    let out = s.hull(&["exec", "dev", "-w", "/private", "--", "sh", "-c", "pwd"]);
    assert_eq!(out.status.code(), Some(126), "{}", text(&out.stderr));
    assert_eq!(
        s.ok(&["exec", "dev", "-u", "root", "-w", "/private", "--", "sh", "-c", "pwd"]),
        "/private\n"
    );
    assert_eq!(
        s.ok(&[
            "exec",
            "dev",
            "-u",
            "root",
            "--shell",
            "--",
            "id -u; echo $HOME $USER"
        ]),
        "0\n/root root\n"
    );
    // -u of another id of the image's range, and a missing one named by the flag.
    assert_eq!(
        s.ok(&["exec", "dev", "-u", "1234:1500", "--", "id", "-u"]),
        "1234\n"
    );
    let out = s.hull(&["exec", "dev", "-u", "ghost", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-u/--user") && err.contains("ghost") && err.contains("/etc/passwd"),
        "{err}"
    );
    // Capabilities: none for the user; a root command has what it had in a sandbox without
    // --user (pid 1's own capabilities never reach a program).
    let user_caps = caps_of(&s, "dev", &[]);
    for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert!(
            user_caps.contains(&format!("{set}:\t0000000000000000")),
            "{user_caps}"
        );
    }
    s.ok(&["create", "plain", "--image", "bb:users"]);
    assert_eq!(
        caps_of(&s, "dev", &["-u", "root"]),
        caps_of(&s, "plain", &[])
    );
    // Pid 1 alone keeps CHOWN, KILL, SETGID and SETUID, and none is in the bounding set.
    let pid1 = s.ok(&["exec", "dev", "--", "grep", "^Cap", "/proc/1/status"]);
    assert!(pid1.contains("CapEff:\t00000000000000e1"), "{pid1}");
    assert!(pid1.contains("CapBnd:\t0000000000000000"), "{pid1}");
    // A sandbox made without --user maps only root: -u of another user is refused.
    let out = s.hull(&["exec", "plain", "-u", "dev", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("maps only root"));
    // ps shows the user; stop/start and a template keep it.
    let ps = s.ok(&["ps", "--json"]);
    let row = ps
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["name"] == "dev")
        .unwrap();
    assert_eq!(row["user"], "dev");
    assert!(s
        .ok(&["ps"])
        .lines()
        .any(|l| l.starts_with("dev ") && l.contains(" dev ")));
    s.ok(&["stop", "dev"]);
    assert_eq!(s.ok(&["exec", "dev", "--", "id", "-u"]), "1000\n");
    s.ok(&["stop", "dev"]);
    s.ok(&["template", "save", "dev", "devt"]);
    s.ok(&["create", "fromt", "--template", "devt"]);
    assert_eq!(
        s.ok(&[
            "exec",
            "fromt",
            "--shell",
            "--",
            "id -u; cat /workspace/mine && echo kept"
        ]),
        "1000\nkept\n"
    );
    // rm removes what the user's ids own too (rootless: ids of the caller's range, which the
    // caller cannot remove as itself), and so does the removal of the template's layer.
    s.ok(&[
        "exec",
        "fromt",
        "--",
        "sh",
        "-c",
        "mkdir /workspace/d && touch /workspace/d/f",
    ]);
    s.ok(&["rm", "fromt"]);
    s.ok(&["rm", "dev"]);
    s.ok(&["template", "rm", "devt"]);
    let left: Vec<_> = std::fs::read_dir(s.root())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "plain" && n != ".templates")
        .collect();
    assert_eq!(left, Vec::<String>::new(), "rm left directories behind");
    let layers = s.root().join(".templates/layers");
    assert_eq!(
        std::fs::read_dir(&layers).map_or(0, Iterator::count),
        0,
        "a layer was left"
    );
}

#[test]
fn a_home_outside_home_is_handed_over_only_when_it_is_made() {
    let Some((_home, s)) = user_sandboxes() else {
        return;
    };
    // svc's home is the image's /srv: a directory of the image's, left as it is.
    s.ok(&["create", "svc", "--image", "bb:users", "--user", "svc"]);
    assert_eq!(
        s.ok(&[
            "exec",
            "svc",
            "--shell",
            "--",
            "echo $HOME; stat -c %u /srv"
        ]),
        "/srv\n0\n"
    );
    // lib's home is missing: made, and lib's.
    s.ok(&["create", "lib", "--image", "bb:users", "--user", "lib"]);
    assert_eq!(
        s.ok(&[
            "exec",
            "lib",
            "--shell",
            "--",
            "stat -c %u:%g $HOME /var/lib"
        ]),
        "1300:1300\n0:0\n"
    );
}

#[test]
fn a_missing_user_is_refused_naming_the_flag_and_leaves_nothing() {
    let Some((_home, s)) = user_sandboxes() else {
        return;
    };
    let out = s.hull(&["create", "x", "--image", "bb:users", "--user", "ghost"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--user") && err.contains("ghost") && err.contains("/etc/passwd"),
        "{err}"
    );
    assert_eq!(s.state("x"), "absent");
    let out = s.hull(&["create", "y", "--image", "bb:users", "--user", "a b"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--user"));
    assert_eq!(s.state("y"), "absent");
}

#[test]
fn without_a_subid_range_a_user_is_refused_naming_etc_subuid_and_the_fix() {
    if !common::is_root() {
        hull_testkit::skip("needs root: it runs hull as nobody, a user without an /etc/subuid range (an unprivileged caller cannot switch users)");
        return;
    }
    // nobody (65534) has no range: hull run as nobody, with a sandboxes directory of its own.
    let grep = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
    if grep
        .lines()
        .any(|l| l.starts_with("nobody:") || l.starts_with("65534:"))
    {
        hull_testkit::skip("nobody has an /etc/subuid range here");
        return;
    }
    let stage = tempfile::tempdir().unwrap();
    let bin = stage.path().join("hull");
    std::fs::copy(common::bin(), &bin).unwrap();
    let dir = stage.path().join("sandboxes");
    std::fs::create_dir(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(stage.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin)
        .args(["create", "x", "--user", "1000"])
        .env("HULL_SANDBOXES", &dir)
        .env("HOME", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("--user 1000"), "{err}");
    assert!(err.contains("/etc/subuid"), "{err}");
    assert!(
        err.contains("usermod --add-subuids 100000-165535 --add-subgids 100000-165535"),
        "{err}"
    );
    assert!(
        !dir.join("x").exists(),
        "the refused sandbox was left behind"
    );
}

#[test]
fn a_users_command_whose_client_goes_away_is_killed_by_pid_1() {
    if !can_map_users() {
        return;
    }
    let s = Sandboxes::new();
    // Pid 1 (root) ends a command of another uid: it keeps CAP_KILL for that.
    s.ok(&["create", "uabort", "--user", "1000"]);
    let secs = unique_secs(8);
    let mut c = s.cmd(&["exec", "uabort", "--", "sleep", &secs]);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut client = c.spawn().unwrap();
    let t0 = Instant::now();
    while running(&["sleep", &secs]).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    client.kill().unwrap();
    client.wait().unwrap();
    wait_gone(&["sleep", &secs]);
    assert_eq!(s.ok(&["exec", "uabort", "--", "id", "-u"]), "1000\n");
}

/// A host directory (0755) holding a FIFO `runs` any box user may write, given to sandboxes with
/// `--ro-workspace` (a FIFO is written through a read-only mount): what setup commands write
/// there reaches the test, so it can count them. The test's end stays open for reading (and
/// writing, so a writer never blocks and a read never sees the end).
struct Counter {
    dir: tempfile::TempDir,
    fifo: std::fs::File,
}

impl Counter {
    fn new() -> Counter {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let dir = tempfile::Builder::new()
            .prefix("hull-named-count-")
            .tempdir()
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let path = dir.path().join("runs");
        let made = Command::new("mkfifo")
            .args(["-m", "0666"])
            .arg(&path)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let fifo = std::fs::File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .expect("open the fifo");
        Counter { dir, fifo }
    }

    fn path(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// What was written since the last call.
    fn take(&mut self) -> String {
        use std::io::Read;
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match self.fifo.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("read the fifo: {e}"),
            }
        }
        text(&all)
    }
}

/// Entries of the sandboxes' directory and of the template store other than `layers`, `.lock`
/// and the templates' files: what a build left behind.
fn build_leftovers(s: &Sandboxes) -> Vec<String> {
    let names = |p: PathBuf| -> Vec<String> {
        std::fs::read_dir(p)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut left: Vec<String> = names(s.root().to_path_buf())
        .into_iter()
        .filter(|n| n.starts_with('.') && n != ".templates")
        .collect();
    left.extend(
        names(s.root().join(".templates"))
            .into_iter()
            .filter(|n| n != "layers" && n != ".lock" && !n.ends_with(".json")),
    );
    left
}

#[test]
fn a_missing_template_is_built_once_by_concurrent_creators_and_restores_do_not_run_its_setup() {
    let s = Sandboxes::new();
    let mut count = Counter::new();
    let d = count.path();
    // Slow enough that the second creator comes while the first builds.
    let setup = format!(
        "echo built > {d}/runs && mkdir -p /opt/t && cat /proc/sys/kernel/random/uuid > /opt/t/id && sleep 1"
    );
    let args = |name: &str| -> Vec<String> {
        [
            "create",
            name,
            "--ro-workspace",
            &d,
            "--env",
            "FROM_T=1",
            "--template",
            "t",
            "--template-setup",
            &setup,
        ]
        .map(str::to_string)
        .to_vec()
    };
    let outs: Vec<Output> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let (s, a) = (&s, args(&format!("c{i}")));
                sc.spawn(move || {
                    let a: Vec<&str> = a.iter().map(String::as_str).collect();
                    s.hull(&a)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for o in &outs {
        assert!(o.status.success(), "{o:?}");
    }
    // The setup ran once, and one creator says it built the template.
    assert_eq!(count.take(), "built\n");
    let builders = outs
        .iter()
        .filter(|o| text(&o.stderr).contains("building template `t`"))
        .count();
    assert_eq!(builders, 1, "{outs:?}");
    assert_eq!(store(&s), (vec!["t".into()], 1));
    assert_eq!(build_leftovers(&s), Vec::<String>::new());
    let ls = s.ok(&["template", "ls", "--json"]);
    assert!(ls.contains(r#""from":"(built)""#), "{ls}");
    // Both sandboxes stand on that one build, with its configuration.
    let id = s.ok(&["exec", "c0", "--", "cat", "/opt/t/id"]);
    assert!(!id.trim().is_empty());
    assert_eq!(
        s.ok(&["exec", "c1", "--shell", "--", "cat /opt/t/id; echo $FROM_T"]),
        format!("{id}1\n")
    );
    // A restore of the existing template does not build: the template setup is not run, the
    // sandbox's own --setup is, once.
    let mut a = args("c2");
    a.extend(["--setup".into(), format!("echo own > {d}/runs")]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = s.hull(&a);
    assert!(out.status.success(), "{out:?}");
    assert!(!text(&out.stderr).contains("building"), "{out:?}");
    assert_eq!(count.take(), "own\n");
    assert_eq!(s.ok(&["exec", "c2", "--", "cat", "/opt/t/id"]), id);
    // Nor does a restart of a sandbox made from it.
    s.ok(&["stop", "c0"]);
    s.ok(&["start", "c0"]);
    s.ok(&["stop", "c2"]);
    assert_eq!(s.ok(&["exec", "c2", "--", "cat", "/opt/t/id"]), id);
    assert_eq!(count.take(), "");
    // Other commands for an existing template are refused, naming the flag and the fix.
    let mut a = args("c3");
    let last = a.len() - 1;
    a[last] = "echo something else".into();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = s.hull(&a);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains("--template-setup: template `t` exists with other setup commands")
            && said.contains("hull template rm t"),
        "{said}"
    );
    assert_eq!(s.state("c3"), "absent");
    assert_eq!(count.take(), "");
    // Without --template the flag means nothing: refused by the parser.
    let out = s.hull(&["create", "c4", "--template-setup", "true"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(text(&out.stderr).contains("--template"), "{out:?}");
}

#[test]
fn a_failed_template_build_leaves_nothing_and_the_next_attempt_builds() {
    let s = Sandboxes::new();
    let mut count = Counter::new();
    let d = count.path();
    std::fs::write(count.dir.path().join("fail"), "").expect("write");
    let setup = format!(
        "echo try > {d}/runs && test ! -e {d}/fail && mkdir -p /opt/t && echo ok > /opt/t/f"
    );
    let create = || {
        s.hull(&[
            "create",
            "x",
            "--ro-workspace",
            &d,
            "--template",
            "t",
            "--template-setup",
            &setup,
        ])
    };
    let out = create();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains("could not build template `t`: setup command")
            && said.contains("failed with exit code 1"),
        "{said}"
    );
    assert_eq!(count.take(), "try\n");
    // No template, no layer, no sandbox, no builder, no lock file.
    assert_eq!(store(&s), (vec![], 0));
    assert_eq!(s.state("x"), "absent");
    assert!(!s.root().join("x").exists());
    assert_eq!(build_leftovers(&s), Vec::<String>::new());
    s.assert_no_keepers();
    // The next attempt builds again, and this time it works.
    std::fs::remove_file(count.dir.path().join("fail")).expect("rm");
    let out = create();
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stderr).contains("building template `t`"),
        "{out:?}"
    );
    assert_eq!(count.take(), "try\n");
    assert_eq!(s.ok(&["exec", "x", "--", "cat", "/opt/t/f"]), "ok\n");
    assert_eq!(store(&s), (vec!["t".into()], 1));
}

#[test]
fn a_creator_killed_during_a_template_build_leaves_the_next_creator_to_build_it() {
    let s = Sandboxes::new();
    let mut count = Counter::new();
    let d = count.path();
    let secs = unique_secs(8);
    std::fs::write(count.dir.path().join("slow"), "").expect("write");
    let setup = format!(
        "echo try > {d}/runs; if [ -e {d}/slow ]; then sleep {secs}; fi; mkdir -p /opt/t && echo ok > /opt/t/f"
    );
    let args = [
        "create",
        "x",
        "--ro-workspace",
        &d,
        "--template",
        "t",
        "--template-setup",
        &setup,
    ];
    let mut first = s
        .cmd(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let t0 = Instant::now();
    let mut seen = String::new();
    while seen.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the setup never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
        seen = count.take();
    }
    assert_eq!(seen, "try\n");
    first.kill().expect("kill the creator");
    let _ = first.wait();
    // Its setup goes with it (the builder's keeper saw its starter go), and the next creator
    // builds the template, removing what the first one left.
    wait_gone(&["sleep", &secs]);
    std::fs::remove_file(count.dir.path().join("slow")).expect("rm");
    let out = s.hull(&args);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stderr).contains("building template `t`"),
        "{out:?}"
    );
    assert_eq!(count.take(), "try\n");
    assert_eq!(s.ok(&["exec", "x", "--", "cat", "/opt/t/f"]), "ok\n");
    assert_eq!(store(&s), (vec!["t".into()], 1));
    assert_eq!(build_leftovers(&s), Vec::<String>::new());
    assert_eq!(s.keepers().len(), 1, "{:?}", s.keepers());
}

/// `hull doctor --json`'s "writable root" check with HULL_OVERLAY set to `mode` (or unset).
fn doctor_writable_root(mode: Option<&str>) -> serde_json::Value {
    let mut c = Command::new(common::bin());
    c.args(["doctor", "--json"]).stdin(Stdio::null());
    match mode {
        Some(m) => c.env("HULL_OVERLAY", m),
        None => c.env_remove("HULL_OVERLAY"),
    };
    let out = c.output().expect("spawn hull doctor");
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor's JSON");
    all.as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == "writable root"))
        .cloned()
        .unwrap_or_else(|| panic!("no writable root check: {all}"))
}

#[test]
fn a_sandbox_works_over_fuse_overlayfs() {
    // Doctor says which one named sandboxes use (this kernel allows overlayfs in a user
    // namespace: the kernel's unless forced).
    let d = doctor_writable_root(None);
    assert_eq!(d["status"], "ok", "{d}");
    assert!(
        d["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("overlayfs, mounted in the box's user namespace"),
        "{d}"
    );
    let d = doctor_writable_root(Some("fuse"));
    let detail = d["detail"].as_str().unwrap_or_default().to_string();
    if Command::new("fuse-overlayfs")
        .arg("--version")
        .output()
        .is_err()
    {
        hull_testkit::skip("fuse-overlayfs is not installed (scripts/setup.sh installs it)");
        return;
    }
    let host_root = rustix::process::geteuid().is_root();
    // Rootless, each box opens /dev/fuse itself: doctor names the fix where it cannot.
    let dev_fuse = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse");
    if !host_root && dev_fuse.is_err() {
        assert_eq!(d["status"], "missing", "{d}");
        assert!(detail.contains("cannot open /dev/fuse"), "{d}");
        assert!(
            d["fix"]
                .as_str()
                .unwrap_or_default()
                .contains("chmod 0666 /dev/fuse"),
            "{d}"
        );
        hull_testkit::skip(
            "this user cannot open /dev/fuse (scripts/setup.sh makes it 0666, the distributions' default)",
        );
        return;
    }
    assert_eq!(d["status"], "ok", "{d}");
    let said = if host_root {
        "fuse-overlayfs, run by each keeper (HULL_OVERLAY=fuse)"
    } else {
        "fuse-overlayfs, mounted by each box in its user namespace and served by its keeper (HULL_OVERLAY=fuse)"
    };
    assert!(detail.contains(said), "{d}");
    let s = Sandboxes::new();
    let fuse = |args: &[&str]| {
        let out = s
            .cmd(args)
            .env("HULL_OVERLAY", "fuse")
            .output()
            .expect("spawn hull");
        assert!(out.status.success(), "hull {args:?}: {out:?}");
        text(&out.stdout)
    };
    fuse(&[
        "create",
        "f",
        "--setup",
        "mkdir -p /opt/t && echo hi > /opt/t/x && echo ws > /workspace/w",
    ]);
    // The root is fuse-overlayfs's, and everything written lands in the sandbox's upper.
    let mounts = fuse(&["exec", "f", "--", "cat", "/proc/mounts"]);
    let root = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some("/"))
        .unwrap_or_default();
    assert!(root.contains("fuse.fuse-overlayfs"), "{mounts}");
    assert_eq!(
        fuse(&["exec", "f", "--", "cat", "/opt/t/x", "/workspace/w"]),
        "hi\nws\n"
    );
    assert!(s.root().join("f/upper/opt/t/x").is_file());
    if !host_root {
        // What the box's root made belongs to the caller, as with the kernel's overlay.
        use std::os::unix::fs::MetadataExt;
        let made = std::fs::metadata(s.root().join("f/upper/opt/t/x")).expect("stat");
        assert_eq!(made.uid(), rustix::process::geteuid().as_raw());
        // The daemon runs in the box's user namespace (which owns the FUSE mount), but in the
        // keeper's mount and pid namespaces, not the box's (a namespace's link reads the same
        // inside and outside the box).
        let keeper = s.keeper_pid("f");
        let children = std::fs::read_to_string(format!("/proc/{keeper}/task/{keeper}/children"))
            .expect("the keeper's children");
        let comm = |p: &str| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        let daemon = children
            .split_whitespace()
            .find(|p| comm(p).starts_with("fuse-overlayfs"))
            .unwrap_or_else(|| panic!("no fuse-overlayfs among {children:?}"))
            .to_string();
        let ns = |p: &str, n: &str| {
            std::fs::read_link(format!("/proc/{p}/ns/{n}"))
                .unwrap_or_else(|e| panic!("/proc/{p}/ns/{n}: {e}"))
                .display()
                .to_string()
        };
        let in_box = fuse(&[
            "exec",
            "f",
            "--",
            "readlink",
            "/proc/self/ns/user",
            "/proc/self/ns/mnt",
            "/proc/self/ns/pid",
        ]);
        let in_box: Vec<&str> = in_box.lines().collect();
        assert_eq!(ns(&daemon, "user"), in_box[0]);
        assert_ne!(ns(&daemon, "user"), ns("self", "user"));
        assert_eq!(ns(&daemon, "mnt"), ns("self", "mnt"));
        assert_ne!(ns(&daemon, "mnt"), in_box[1]);
        assert_eq!(ns(&daemon, "pid"), ns("self", "pid"));
        assert_ne!(ns(&daemon, "pid"), in_box[2]);
    }
    fuse(&[
        "exec",
        "f",
        "--",
        "sh",
        "-c",
        "rm /opt/t/x && echo e > /etc/hull-fuse-test",
    ]);
    // Across a stop and a start, and into a template and a sandbox made from it.
    // Host root's keeper stages the layers for its daemon; a rootless one needs no stage.
    let keeper = s.keeper_pid("f");
    let stage = std::env::temp_dir().join(format!("hull-fuse-{keeper}"));
    assert_eq!(stage.is_dir(), host_root, "{}", stage.display());
    fuse(&["stop", "f"]);
    // The daemon (which carries the keeper's environment) went with the keeper, and its stage.
    s.assert_no_keepers();
    assert!(!stage.exists(), "{} left behind", stage.display());
    fuse(&["start", "f"]);
    assert_eq!(
        fuse(&[
            "exec",
            "f",
            "--",
            "sh",
            "-c",
            "ls /opt/t; cat /etc/hull-fuse-test"
        ]),
        "e\n"
    );
    fuse(&["stop", "f"]);
    fuse(&["template", "save", "f", "t"]);
    fuse(&["create", "g", "--template", "t"]);
    assert_eq!(
        fuse(&[
            "exec",
            "g",
            "--",
            "sh",
            "-c",
            "ls /opt/t; cat /etc/hull-fuse-test /workspace/w"
        ]),
        "e\nws\n"
    );
    // A SIGKILLed keeper takes its daemon with it; the next start sweeps its stage.
    let keeper = s.keeper_pid("g");
    let stage = std::env::temp_dir().join(format!("hull-fuse-{keeper}"));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(keeper).expect("a pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill the keeper");
    s.assert_no_keepers();
    assert_eq!(
        fuse(&["exec", "g", "--", "cat", "/etc/hull-fuse-test"]),
        "e\n"
    );
    assert!(!stage.exists(), "{} left behind", stage.display());
    // The host's /etc is as it was; the box is confined as any.
    assert!(!Path::new("/etc/hull-fuse-test").exists());
    let out = s
        .cmd(&[
            "exec",
            "g",
            "--",
            "sh",
            "-c",
            "echo x > /usr/hull-fuse-test",
        ])
        .env("HULL_OVERLAY", "fuse")
        .output()
        .expect("spawn");
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(!Path::new("/usr/hull-fuse-test").exists());
    // The keeper's file operations reach the FUSE root (rootless: from the box's user
    // namespace, which owns the mount), as the box's root.
    let a = serve_call(
        &s,
        "named.write_file",
        serde_json::json!({ "sandbox": "g", "path": "/opt/n/made", "text": "by serve" }),
    );
    assert_eq!(a["result"]["bytes"], 8, "{a}");
    let a = serve_call(
        &s,
        "named.read_file",
        serde_json::json!({ "sandbox": "g", "path": "/etc/hull-fuse-test" }),
    );
    assert_eq!(a["result"]["data_b64"], "ZQo=", "{a}");
    assert_eq!(fuse(&["exec", "g", "--", "cat", "/opt/n/made"]), "by serve");
    assert!(s.root().join("g/upper/opt/n/made").is_file());
}

#[test]
fn a_user_works_over_fuse_overlayfs() {
    use std::os::unix::fs::MetadataExt;
    if Command::new("fuse-overlayfs")
        .arg("--version")
        .output()
        .is_err()
    {
        hull_testkit::skip("fuse-overlayfs is not installed (scripts/setup.sh installs it)");
        return;
    }
    if std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_err()
    {
        hull_testkit::skip(
            "this user cannot open /dev/fuse (scripts/setup.sh makes it 0666, the distributions' default)",
        );
        return;
    }
    if !can_map_users() {
        return;
    }
    let s = Sandboxes::new();
    let fuse = |args: &[&str]| {
        s.cmd(args)
            .env("HULL_OVERLAY", "fuse")
            .output()
            .expect("spawn hull")
    };
    let out = fuse(&[
        "create",
        "h",
        "--user",
        "1000",
        "--setup",
        "echo r > /etc/hull-root-only && chmod 600 /etc/hull-root-only",
    ]);
    assert!(out.status.success(), "{out:?}");
    // The user's commands run as the user over the FUSE root: what it writes is its own on
    // the host (the range's id), root's 0600 file stays closed to it.
    let out = fuse(&[
        "exec",
        "h",
        "--",
        "sh",
        "-c",
        "id -u; echo u > /workspace/u; cat /etc/hull-root-only",
    ]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "1000\n", "{out:?}");
    assert!(text(&out.stderr).contains("ermission denied"), "{out:?}");
    let upper = s.root().join("h/upper");
    let uid = |p: &str| std::fs::metadata(upper.join(p)).expect(p).uid();
    assert_eq!(uid("workspace/u"), host_uid_of(1000));
    // The setup's file is the box root's: hull's range as host root, the caller rootless.
    let box_root = if common::is_root() {
        host_uid_of(0)
    } else {
        rustix::process::geteuid().as_raw()
    };
    assert_eq!(uid("etc/hull-root-only"), box_root);
    // File operations too (hull __files in the box's user namespace, as the user).
    let a = serve_call(
        &s,
        "named.write_file",
        serde_json::json!({ "sandbox": "h", "path": "/workspace/s", "text": "s" }),
    );
    assert_eq!(a["result"]["bytes"], 1, "{a}");
    assert_eq!(uid("workspace/s"), host_uid_of(1000));
    let a = serve_call(
        &s,
        "named.read_file",
        serde_json::json!({ "sandbox": "h", "path": "/etc/hull-root-only" }),
    );
    assert!(
        a["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("ermission denied"),
        "{a}"
    );
}

#[test]
fn an_aborted_spawn_kills_what_it_started() {
    use std::io::Write;
    let s = Sandboxes::new();
    s.ok(&["create", "ab"]);
    // A client that asks for a spawn and goes away before it reads the handle (the keeper's
    // wire protocol, as `hull serve` speaks it).
    {
        let mut c = std::os::unix::net::UnixStream::connect(s.root().join("ab/control.sock"))
            .expect("connect to the keeper");
        let req = serde_json::json!({
            "op": "spawn", "argv": ["sh", "-c", "echo began-$((1+1)); exec sleep 4246"],
            "env": [], "cwd": null, "shell": false,
        });
        writeln!(c, "{req}").unwrap();
        // The keeper's READY (it reads the request after it): the request is taken.
        let mut ready = [0u8; 5];
        std::io::Read::read_exact(&mut c, &mut ready).unwrap();
        assert_eq!(ready, [11, 0, 0, 0, 0], "a ready frame");
    }
    let t0 = Instant::now();
    loop {
        let logs = s.ok(&["logs", "ab"]);
        if logs.contains("killed: the client went away before it got the handle") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the aborted spawn was not killed:\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ps = s.ok(&["exec", "ab", "--", "ps", "-eo", "args"]);
    assert!(!ps.lines().any(|l| l.trim() == "sleep 4246"), "{ps}");
    // One whose client took the handle stays: the keeper owns it.
    let mut c = std::os::unix::net::UnixStream::connect(s.root().join("ab/control.sock")).unwrap();
    let req = serde_json::json!({
        "op": "spawn", "argv": ["sleep", "4247"], "env": [], "cwd": null, "shell": false,
    });
    writeln!(c, "{req}").unwrap();
    let mut head = [0u8; 5];
    std::io::Read::read_exact(&mut c, &mut head).unwrap();
    assert_eq!(head[0], 11, "a ready frame");
    std::io::Read::read_exact(&mut c, &mut head).unwrap();
    assert_eq!(head[0], 6, "a handle frame");
    let mut id = vec![0u8; u32::from_le_bytes(head[1..].try_into().unwrap()) as usize];
    std::io::Read::read_exact(&mut c, &mut id).unwrap();
    c.write_all(&[7, 0, 0, 0, 0]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    let ps = s.ok(&["exec", "ab", "--", "ps", "-eo", "args"]);
    assert!(ps.lines().any(|l| l.trim() == "sleep 4247"), "{ps}");
}

/// One `hull serve` call (its own server: request, end of input, answer) against `s`'s
/// sandboxes and store.
fn serve_call(s: &Sandboxes, method: &str, params: serde_json::Value) -> serde_json::Value {
    use std::io::Write;
    let mut c = s.cmd(&["serve"]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().expect("spawn hull serve");
    let line = serde_json::json!({ "id": 1, "method": method, "params": params });
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{line}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["id"] == serde_json::json!(1) && v.get("event").is_none())
        .unwrap_or_else(|| panic!("no answer to {method}: {text}"))
}

/// What a file operation writes is the sandbox's user's, root and rootless alike (rootless the
/// keeper cannot take the user's sub-ids: pid 1 gives each file and directory it made).
#[test]
fn files_written_through_serve_belong_to_the_sandbox_user() {
    let Some((_home, s)) = user_sandboxes() else {
        return;
    };
    s.ok(&["create", "fw", "--image", "bb:users", "--user", "dev"]);
    let a = serve_call(
        &s,
        "named.write_file",
        serde_json::json!({ "sandbox": "fw", "path": "new/dir/f.txt", "text": "x\n" }),
    );
    assert!(a.get("error").is_none(), "{a}");
    assert_eq!(
        s.ok(&[
            "exec",
            "fw",
            "--",
            "stat",
            "-c",
            "%u:%g",
            "/workspace/new",
            "/workspace/new/dir",
            "/workspace/new/dir/f.txt",
        ]),
        "1000:1000\n1000:1000\n1000:1000\n"
    );
    // So the user's programs can change and remove it.
    s.ok(&[
        "exec",
        "fw",
        "--",
        "sh",
        "-c",
        "echo more >> /workspace/new/dir/f.txt && rm -r /workspace/new",
    ]);
    // Overwriting a file the user made keeps it the user's.
    s.ok(&[
        "exec",
        "fw",
        "--",
        "sh",
        "-c",
        "echo mine > /workspace/kept",
    ]);
    let a = serve_call(
        &s,
        "named.write_file",
        serde_json::json!({ "sandbox": "fw", "path": "kept", "text": "again\n" }),
    );
    assert!(a.get("error").is_none(), "{a}");
    assert_eq!(
        s.ok(&[
            "exec",
            "fw",
            "--",
            "sh",
            "-c",
            "stat -c %u /workspace/kept; cat /workspace/kept"
        ]),
        "1000\nagain\n"
    );
    // With the user's permissions: a root-only file is neither read nor replaced.
    s.ok(&[
        "exec",
        "fw",
        "-u",
        "root",
        "--",
        "sh",
        "-c",
        "echo secret > /root-only; chmod 600 /root-only",
    ]);
    let a = serve_call(
        &s,
        "named.read_file",
        serde_json::json!({ "sandbox": "fw", "path": "/root-only" }),
    );
    assert!(
        a["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("ermission denied"),
        "{a}"
    );
    let a = serve_call(
        &s,
        "named.write_file",
        serde_json::json!({ "sandbox": "fw", "path": "/root-only", "text": "mine\n" }),
    );
    assert!(a.get("error").is_some(), "{a}");
    assert_eq!(
        s.ok(&["exec", "fw", "-u", "root", "--", "cat", "/root-only"]),
        "secret\n"
    );
}

/// Host root's fuse-overlayfs keeper sweeps dead keepers' stages in the shared temporary
/// directory: a `hull-fuse-PID` another user planted there as a symlink is never followed (root
/// would otherwise remove the empty directories wherever it points).
#[test]
fn a_planted_fuse_stage_symlink_is_never_swept_through() {
    if !common::is_root() {
        hull_testkit::skip_part(
            "planted-stage",
            "the keeper-mounted fuse-overlayfs and its stage sweep are host root's",
        );
        return;
    }
    if Command::new("fuse-overlayfs")
        .arg("--version")
        .output()
        .is_err()
    {
        hull_testkit::skip("fuse-overlayfs is not installed (scripts/setup.sh installs it)");
        return;
    }
    let victim = tempfile::tempdir().unwrap();
    std::fs::create_dir(victim.path().join("empty")).unwrap();
    // A pid no process has (above the kernel's pid_max ceiling).
    let planted = std::env::temp_dir().join("hull-fuse-4194305");
    let _ = std::fs::remove_file(&planted);
    std::os::unix::fs::symlink(victim.path(), &planted).unwrap();
    let s = Sandboxes::new();
    let out = s
        .cmd(&["create", "swept"])
        .env("HULL_OVERLAY", "fuse")
        .output()
        .unwrap();
    let kept = victim.path().join("empty").is_dir();
    let link_left = std::fs::symlink_metadata(&planted).is_ok();
    let _ = std::fs::remove_file(&planted);
    assert!(out.status.success(), "{out:?}");
    assert!(
        kept,
        "the keeper removed an empty directory through a planted symlink"
    );
    assert!(
        link_left,
        "the planted symlink itself is another user's: left alone"
    );
}

/// `hull create --network host` keeps the host's network namespace through a stop and start
/// (it is in the configuration); without it the sandbox has one of its own, as before.
#[test]
fn the_network_asked_at_create_is_kept_across_starts() {
    let s = Sandboxes::new();
    let host_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    let host_ns = host_ns.to_string_lossy();
    s.ok(&["create", "nethost", "--network", "host"]);
    s.ok(&["create", "netnone"]);
    let ns = |name: &str| {
        s.ok(&["exec", name, "--", "readlink", "/proc/self/ns/net"])
            .trim()
            .to_string()
    };
    assert_eq!(ns("nethost"), host_ns);
    assert_ne!(ns("netnone"), host_ns);
    s.ok(&["stop", "nethost"]);
    s.ok(&["start", "nethost"]);
    assert_eq!(ns("nethost"), host_ns);
    let cfg = std::fs::read_to_string(s.root().join("nethost/config.json")).unwrap();
    assert!(cfg.contains(r#""network": "host""#), "{cfg}");
    s.ok(&["rm", "nethost"]);
    s.ok(&["rm", "netnone"]);
}

/// A named sandbox's disk is its own to change: a link it plants where a mount's target will
/// be made (the parent of a `--ro-workspace` path) must not steer the next start's mount point
/// out of it. Before the fix the start made the mount point by path, through the link, in a
/// host directory the box's user could write.
#[test]
fn a_link_planted_on_a_mount_targets_path_does_not_reach_the_host_at_the_next_start() {
    let s = Sandboxes::new();
    // Targets outside /tmp (the box's own scratch tmpfs), so they are made in the disk.
    let ro = tempfile::Builder::new()
        .prefix("hull-named-ro-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let victim = tempfile::Builder::new()
        .prefix("hull-named-victim-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(
        victim.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    std::fs::set_permissions(
        ro.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ro_path = ro.path().to_str().unwrap();
    s.ok(&["create", "planted", "--ro-workspace", ro_path]);
    // /var/tmp, the target's parent in the sandbox's disk, becomes a link to the victim.
    let plant = format!(
        "mv /var/tmp /var/tmp-moved && ln -s {} /var/tmp",
        victim.path().display()
    );
    s.ok(&["exec", "planted", "-u", "root", "--", "sh", "-c", &plant]);
    s.ok(&["stop", "planted"]);
    let started = s.hull(&["start", "planted"]);
    let name = ro.path().file_name().unwrap();
    assert!(
        !victim.path().join(name).exists(),
        "the start made {} on the host through the planted link ({started:?})",
        victim.path().join(name).display()
    );
    // Refused, naming the mount, rather than placed somewhere else.
    if started.status.success() {
        let out = s.hull(&["exec", "planted", "--", "cat", "/proc/self/mountinfo"]);
        let info = String::from_utf8_lossy(&out.stdout);
        assert!(!info.contains(&*victim.path().to_string_lossy()), "{info}");
    } else {
        let err = String::from_utf8_lossy(&started.stderr);
        assert!(err.contains(ro_path) || err.contains("mount"), "{err}");
    }
}

/// The memory cgroup directory of process `pid` (v1's memory hierarchy, else v2's).
fn memory_cgroup_of(pid: u32) -> Option<String> {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    cgroup
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            ctl.split(',')
                .any(|c| c == "memory")
                .then(|| format!("/sys/fs/cgroup/memory{path}"))
        })
        .or_else(|| {
            cgroup
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|p| format!("/sys/fs/cgroup{p}"))
        })
}

/// The gateway processes (`hull __net`) of keepers that run with `sandboxes` as their
/// HULL_SANDBOXES.
fn gateways_of(sandboxes: &Path) -> Vec<u32> {
    let want = format!("HULL_SANDBOXES={}", sandboxes.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !cmd.split(|b| *b == 0).any(|a| a == b"__net") {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some(ppid) = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1))
        else {
            continue;
        };
        let env = std::fs::read(format!("/proc/{ppid}/environ")).unwrap_or_default();
        if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// A named sandbox's gateway (which lives for the sandbox's life, outside the box's caps) runs
/// in a cgroup of its own whose memory is capped; the cgroup goes when the sandbox stops.
#[test]
fn a_named_sandboxs_gateway_runs_under_a_memory_cap_of_its_own() {
    if !common::cap_enforced("Memory") {
        return;
    }
    let s = Sandboxes::new();
    s.ok(&["create", "capped", "--network", "deny-all"]);
    let gw = gateways_of(s.root());
    assert_eq!(gw.len(), 1, "the sandbox's gateway: {gw:?}");
    // Moved in by a thread once its cgroup exists (off the start's path).
    let t0 = Instant::now();
    let mut dir = String::new();
    while t0.elapsed() < Duration::from_secs(5) {
        dir = memory_cgroup_of(gw[0]).unwrap_or_default();
        if dir.contains("-net-") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        dir.contains("-net-"),
        "the gateway is not in a cgroup of its own: {dir}"
    );
    let limit = ["memory.limit_in_bytes", "memory.max"]
        .iter()
        .find_map(|f| std::fs::read_to_string(format!("{dir}/{f}")).ok())
        .unwrap_or_default();
    assert_eq!(
        limit.trim(),
        hull_cli::net::spawn::GATEWAY_MEMORY.to_string(),
        "{dir}"
    );
    s.ok(&["stop", "capped"]);
    let t0 = Instant::now();
    while Path::new(&dir).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!Path::new(&dir).exists(), "{dir} was left");
}
