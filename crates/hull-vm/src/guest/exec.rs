//! One program run by the guest's init: its output relayed to the host as it comes, its end
//! (exit code or signal, and whether the guest's OOM killer acted while it ran).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rustix::fs::{openat, Mode, OFlags};
use rustix::process::{wait, WaitOptions, WaitStatus};

use crate::proto::{self, Exec, Stream, Tell};

/// The agent port's writing end, shared by the output relays: one frame at a time.
#[derive(Clone, Debug)]
pub struct Writer(Arc<Mutex<File>>);

impl Writer {
    pub fn new(port: File) -> Writer {
        Writer(Arc::new(Mutex::new(port)))
    }

    /// Sends one frame; a port that cannot be written leaves the host to its deadline.
    pub fn send(&self, tell: &Tell) {
        if let Ok(mut port) = self.0.lock() {
            let _ = port.write_all(&proto::line(tell));
        }
    }
}

/// The program cgroup's count of OOM kills so far (`memory.events`' `oom_kill`).
fn oom_kills(cg: &OwnedFd) -> u64 {
    let Ok(fd) = openat(
        cg,
        "memory.events",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let mut text = String::new();
    let _ = File::from(fd).read_to_string(&mut text);
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Writes `value` to the cgroup file `name`.
fn cg_write(cg: &OwnedFd, name: &str, value: &str) -> std::io::Result<()> {
    let fd = openat(cg, name, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    File::from(fd).write_all(value.as_bytes())
}

/// Sets the program's caps on its cgroup; returns its `cgroup.procs`, which the program's
/// process joins before its exec.
fn caps(e: &Exec, cg: &OwnedFd) -> std::io::Result<OwnedFd> {
    let cap = |v: Option<u64>| v.map_or_else(|| "max".to_owned(), |n| n.to_string());
    cg_write(cg, "pids.max", &cap(e.pids))?;
    cg_write(cg, "memory.max", &cap(e.memory))?;
    // No swap in the guest, but say so: the cap is memory, not memory and swap.
    let _ = cg_write(cg, "memory.swap.max", "0");
    Ok(openat(
        cg,
        "cgroup.procs",
        OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Relays `from` to the host as `stream` frames until its end.
fn relay(
    mut from: impl Read + Send + 'static,
    stream: Stream,
    to: Writer,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; proto::CHUNK];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => to.send(&Tell::Out {
                    stream,
                    b64: base64::engine::general_purpose::STANDARD.encode(&buf[..n]),
                }),
            }
        }
    })
}

/// Waits for the program's process `pid` to end, reaping every other process that ends
/// meanwhile: init is the parent of whatever the program orphans, and an unreaped zombie would
/// hold one of the program's pids.
fn reap_until(pid: u32) -> std::io::Result<WaitStatus> {
    loop {
        match wait(WaitOptions::empty()) {
            Ok(Some((p, st))) if p.as_raw_nonzero().get().unsigned_abs() == pid => return Ok(st),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Reaps every child that has ended, without waiting for others.
fn reap_all() {
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}

/// A program that could not be started: as a shell says it (127 not found, 126 not
/// executable) when exec's error is the program's; any other error is the guest's, with its step.
fn not_started(prog: &str, e: &Exec, err: &std::io::Error) -> Tell {
    let raw = err.raw_os_error().unwrap_or(0);
    let path = e
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("", |(_, v)| v.as_str());
    match raw {
        libc::ENOENT | libc::ENOTDIR => Tell::NotStarted {
            code: 127,
            reason: if prog.contains('/') {
                format!("{prog}: not found in the image")
            } else {
                format!("{prog}: not found in the image (searched PATH {path})")
            },
        },
        libc::EACCES | libc::ENOEXEC | libc::ETXTBSY | libc::EISDIR => Tell::NotStarted {
            code: 126,
            reason: format!("{prog}: cannot be executed: {err}"),
        },
        _ => Tell::Failed {
            step: format!("starting {prog} (its cgroup, capabilities and exec)"),
            error: err.to_string(),
        },
    }
}

/// Runs `e` to its end and says how it ended (output is sent as it comes, before this).
/// `input` is the read end of the program's input pipe (none: `/dev/null`).
pub fn run(e: &Exec, input: Option<OwnedFd>, out: &Writer, cg: &OwnedFd) -> Tell {
    let Some((prog, args)) = e.argv.split_first() else {
        return Tell::Failed {
            step: "starting the program".into(),
            error: "no program was given".into(),
        };
    };
    if let Err(err) = rustix::system::sethostname(e.hostname.as_bytes()) {
        return Tell::Failed {
            step: "setting the hostname".into(),
            error: err.to_string(),
        };
    }
    let procs = match caps(e, cg) {
        Ok(p) => p,
        Err(err) => {
            return Tell::Failed {
                step: "setting the program's caps".into(),
                error: err.to_string(),
            }
        }
    };
    let before = oom_kills(cg);
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env_clear()
        .envs(e.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&e.cwd)
        .stdin(input.map_or_else(Stdio::null, Stdio::from))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::sys::confine_on_exec(&mut cmd, &procs);
    // A working directory that is not there is the caller's mistake, named as such (not the
    // program's "not found").
    if let Err(err) = std::fs::read_dir(&e.cwd) {
        return Tell::Failed {
            step: format!("entering the working directory {}", e.cwd),
            error: err.to_string(),
        };
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(err) => return not_started(prog, e, &err),
    };
    // The pipe's read end went to the program with `cmd`, which is dropped here: at its end
    // only the program holds it, so a write to it then fails instead of blocking.
    drop(cmd);
    drop(procs);
    let relays: Vec<_> = [
        child
            .stdout
            .take()
            .map(|p| relay(p, Stream::Stdout, out.clone())),
        child
            .stderr
            .take()
            .map(|p| relay(p, Stream::Stderr, out.clone())),
    ]
    .into_iter()
    .flatten()
    .collect();
    let status = reap_until(child.id());
    // The program's end is the box's: what it left running is killed (cgroup.kill), so its
    // output pipes close and nothing of it outlives the answer.
    let _ = cg_write(cg, "cgroup.kill", "1");
    for r in relays {
        let _ = r.join();
    }
    // What the program wrote to /workspace reaches the host before the host hears the end.
    rustix::fs::sync();
    reap_all();
    match status {
        Ok(s) => Tell::Exit {
            code: s.exit_status(),
            signal: s.terminating_signal(),
            oom: oom_kills(cg) > before,
        },
        Err(err) => Tell::Failed {
            step: "waiting for the program".into(),
            error: err.to_string(),
        },
    }
}
