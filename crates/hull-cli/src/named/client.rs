//! The client side of a named sandbox: starting its keeper detached, and talking to it over
//! its control socket.

use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::state::Dir;
use super::wire::{self, Request};

/// Environment variables a keeper keeps from its starter: where things are, never what a
/// command should see (a command's environment is the sandbox's and its own `-e`s only).
const KEPT_ENV: &[&str] = &[
    "PATH",
    "TMPDIR",
    "HOME",
    "HULL_HOME",
    "HULL_CGROUP_PARENT",
    "HULL_SANDBOXES",
    "HULL_LOG_CAP",
    "HULL_OVERLAY",
    "HULL_NET_DNS",
    "HULL_NET_UPSTREAM_CA",
    // The host's proxy for the sandbox network's upstreams (net/proxy_env.rs).
    "HULL_NET_PROXY",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
];

/// Starts the sandbox's keeper detached (a launcher that calls `setsid` and starts the keeper,
/// then exits: the keeper is in a session of its own, not a session leader, and no longer
/// our child) and waits for it to say its box is up (or why not).
pub fn launch(dir: &Dir) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("find the hull binary: {e}"))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.file("keeper.log"))
        .map_err(|e| format!("open {}: {e}", dir.file("keeper.log").display()))?;
    // A gateway sandbox's secrets: their values are read here, in the environment of the
    // process that starts the sandbox, and handed to the keeper on its stdin (never its
    // environment, command line or disk).
    let values = secret_values(dir)?;
    let mut cmd = Command::new(exe);
    cmd.arg("__keeper")
        .arg("--launch")
        .arg(&dir.path)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log);
    for k in KEPT_ENV {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn().map_err(|e| format!("start the keeper: {e}"))?;
    if let Some(mut input) = child.stdin.take() {
        // A keeper that needs none reads nothing; a failed write shows as its own error.
        let _ = writeln!(input, "{values}");
    }
    let mut said = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_to_string(&mut said);
    }
    let _ = child.wait();
    match said.strip_prefix("error: ") {
        Some(e) => Err(e.trim_end().to_string()),
        None if said.starts_with("ok") => Ok(()),
        None => Err(format!(
            "the keeper ended without starting the sandbox (see {})",
            dir.file("keeper.log").display()
        )),
    }
}

/// `hull __keeper --launch DIR`: a session of its own, then the keeper itself, not waited for.
pub fn launcher(path: &std::path::Path) -> i32 {
    if let Err(e) = rustix::process::setsid() {
        eprintln!("hull: setsid: {e}");
        return 1;
    }
    let Ok(exe) = std::env::current_exe() else {
        return 1;
    };
    match Command::new(exe).arg("__keeper").arg(path).spawn() {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("hull: start the keeper: {e}");
            1
        }
    }
}

/// The values of the sandbox's secrets (`{name: value}`), read from this process's
/// environment; `{}` when it has none.
fn secret_values(dir: &Dir) -> Result<serde_json::Value, String> {
    let Ok(cfg) = dir.config() else {
        return Ok(serde_json::json!({}));
    };
    let mut m = serde_json::Map::new();
    for s in &cfg.secrets {
        let v = s.resolve().map_err(|e| {
            format!("{e} (a named sandbox's secrets are read from the environment of the process that starts it)")
        })?;
        m.insert(
            s.name.clone(),
            serde_json::Value::String(v.expose().to_string()),
        );
    }
    Ok(serde_json::Value::Object(m))
}

/// A connection to the running keeper, starting it first when the sandbox is stopped.
pub fn connect(dir: &Dir, start: bool) -> Result<Option<UnixStream>, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut launched = false;
    loop {
        let (path, _held) = dir.socket_path().map_err(|e| e.to_string())?;
        match UnixStream::connect(&path) {
            Ok(s) => return Ok(Some(s)),
            Err(e) => {
                if dir.running() {
                    // A keeper is starting (or stopping): give it a moment.
                    if Instant::now() > deadline {
                        return Err(format!("connect to the sandbox's keeper: {e}"));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                if !start || launched {
                    return Ok(None);
                }
                launch(dir)?;
                launched = true;
            }
        }
    }
}

/// How many connections a request is sent on before a keeper reads it (see [`open`]).
const ATTEMPTS: usize = 5;
/// How long a keeper may take to say it is ready.
const READY_WAIT: Duration = Duration::from_secs(30);

/// A connection to the sandbox's keeper (started first when `start` and the sandbox is
/// stopped) on which `req` was sent and read: the keeper's [`wire::READY`] came back. A
/// connection that ends before it (a keeper that was dying when we connected: its listening
/// socket takes connections until its last descriptor closes) never had the request read,
/// so it is sent again on a new connection, to the next keeper. `None`: not running and not
/// started.
pub fn open(dir: &Dir, start: bool, req: &Request) -> Result<Option<UnixStream>, String> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        let Some(mut conn) = connect(dir, start)? else {
            return Ok(None);
        };
        if let Err(e) = send(&mut conn, req) {
            last = e;
            continue;
        }
        // A live keeper greets at once; one that never does (stopped with SIGSTOP, wedged)
        // is named rather than waited on for ever.
        let _ = conn.set_read_timeout(Some(READY_WAIT));
        let greeting = wire::read_frame(&mut &conn);
        let _ = conn.set_read_timeout(None);
        match greeting {
            Ok(Some((wire::READY, _))) => return Ok(Some(conn)),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!(
                    "the sandbox's keeper (pid {}) did not answer within {} s (is it stopped?)",
                    dir.keeper_pid().map_or("unknown".into(), |p| p.to_string()),
                    READY_WAIT.as_secs()
                ))
            }
            Ok(Some((kind, _))) => {
                return Err(format!(
                    "the keeper answered frame {kind} before saying it was ready (a hull of another version?)"
                ))
            }
            Ok(None) => last = "it closed the connection".into(),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!(
        "the sandbox's keeper went away before reading the request, {ATTEMPTS} times (last: {last}; see {})",
        dir.file("keeper.log").display()
    ))
}

/// Sends `req` on `conn`.
fn send(conn: &mut UnixStream, req: &Request) -> Result<(), String> {
    let mut line = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    line.push(b'\n');
    conn.write_all(&line)
        .map_err(|e| format!("talk to the keeper: {e}"))
}

/// Asks a running keeper to stop and waits until it has; a stopped sandbox is left as it is.
pub fn stop(dir: &Dir) -> Result<(), String> {
    if let Some(conn) = open(dir, false, &Request::Stop)? {
        let mut r = BufReader::new(conn);
        while let Ok(Some(_)) = wire::read_frame(&mut r) {}
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while dir.running() {
        if Instant::now() > deadline {
            return Err(format!(
                "the keeper of `{}` did not stop within 30 s",
                dir.name
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Stops the sandbox and takes its keeper's lock, so that no keeper starts while the caller
/// holds the returned file (a keeper starting meanwhile is stopped in turn).
pub fn stop_and_hold(dir: &Dir) -> Result<std::fs::File, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // A keeper starting or ending right now may take the stop request and go away without
        // an answer (or not be listening yet): that is the race this loop is for, so its error
        // counts only once the deadline has passed.
        if let Err(e) = stop(dir) {
            if Instant::now() > deadline {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let lock = dir
            .lock_file()
            .map_err(|e| format!("open {}: {e}", dir.file("keeper.lock").display()))?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            return Ok(lock);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "`{}` kept being started while it was removed (30 s)",
                dir.name
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Streams the frames of an exec sent on `conn` (by [`open`]) to our stdout and stderr (and
/// our stdin to it when asked); its exit code, or the keeper's error.
pub fn run(conn: UnixStream, stdin: bool) -> Result<i32, String> {
    if stdin {
        let mut w = conn.try_clone().map_err(|e| e.to_string())?;
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut input = std::io::stdin().lock();
            loop {
                match input.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if wire::write_frame(&mut w, wire::STDIN, &buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = wire::write_frame(&mut w, wire::STDIN_END, &[]);
        });
    }
    let mut r = BufReader::new(conn);
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    loop {
        let frame = wire::read_frame(&mut r).map_err(|e| format!("read from the keeper: {e}"))?;
        let Some((kind, data)) = frame else {
            return Err("the sandbox stopped while the command ran".into());
        };
        match kind {
            wire::STDOUT => {
                let _ = out.write_all(&data).and_then(|()| out.flush());
            }
            wire::STDERR => {
                let _ = err.write_all(&data);
            }
            wire::EXIT => {
                let b: [u8; 4] = data
                    .as_slice()
                    .try_into()
                    .map_err(|_| "a malformed exit frame".to_string())?;
                return Ok(i32::from_le_bytes(b));
            }
            wire::ERROR => return Err(String::from_utf8_lossy(&data).into_owned()),
            _ => return Err(format!("an unknown frame kind {kind} from the keeper")),
        }
    }
}
