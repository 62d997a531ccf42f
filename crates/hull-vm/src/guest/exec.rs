//! One program run by the guest's init: its output relayed to the host as it comes, its end
//! (exit code or signal, and whether the guest's OOM killer acted while it ran).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine as _;

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

/// The guest's count of OOM kills so far (`/proc/vmstat`'s `oom_kill`).
fn oom_kills() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
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

/// Runs `e` to its end and says how it ended (output is sent as it comes, before this).
pub fn run(e: &Exec, out: &Writer) -> Tell {
    let Some((prog, args)) = e.argv.split_first() else {
        return Tell::Failed {
            step: "starting the program".into(),
            error: "no program was given".into(),
        };
    };
    let stdin = match &e.stdin_b64 {
        None => None,
        Some(b) => match base64::engine::general_purpose::STANDARD.decode(b) {
            Ok(bytes) => Some(bytes),
            Err(err) => {
                return Tell::Failed {
                    step: "reading the program's input".into(),
                    error: err.to_string(),
                }
            }
        },
    };
    let before = oom_kills();
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env_clear()
        .envs(e.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&e.cwd)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(err) => {
            return Tell::Failed {
                step: format!("starting {prog}"),
                error: err.to_string(),
            }
        }
    };
    let feeder = child.stdin.take().zip(stdin).map(|(mut pipe, bytes)| {
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        })
    });
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
    let status = child.wait();
    for r in relays {
        let _ = r.join();
    }
    if let Some(f) = feeder {
        let _ = f.join();
    }
    // What the program wrote to /workspace reaches the host before the host hears the end.
    rustix::fs::sync();
    match status {
        Ok(s) => Tell::Exit {
            code: s.code(),
            signal: s.signal(),
            oom: oom_kills() > before,
        },
        Err(err) => Tell::Failed {
            step: "waiting for the program".into(),
            error: err.to_string(),
        },
    }
}
