//! `hull serve`'s `named.*` methods: named sandboxes (`docs/named.md`) for the SDKs, through
//! each sandbox's keeper and its control socket, as the CLI verbs go (`named::client`).
//!
//! `named.exec` is one exec on the keeper's socket, its frames turned into streamed events.
//! `named.spawn`, `named.wait` and `named.kill` are the keeper's own operations (`Spawn`,
//! `Wait`, `Kill`, see `named/spawns.rs`): the keeper owns a spawned process, so it outlives
//! this server and any later server can wait on it or kill it by its handle.

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use hull_box::{OutputSink, Stream};
use serde_json::{json, Map, Value};

use crate::named::state::{self, Config, Dir};
use crate::named::{client, wire};
use crate::serve_out::{EventSink, Out};

pub const METHODS: &[&str] = &[
    "named.create",
    "named.start",
    "named.stop",
    "named.rm",
    "named.list",
    "named.logs",
    "named.exec",
    "named.spawn",
    "named.wait",
    "named.kill",
    "named.write_stdin",
    "named.set_network",
    "named.set_transformations",
];

/// Output kept per stream in an answer; more is cut (and said: `truncated`).
const MAX_CAPTURE: usize = 16 << 20;

/// Connections of calls in flight (and whether each only waits on a spawn), shut down by
/// [`end_all`]: the keeper then kills what they run (an exec's command, a wait's helper).
static OPEN: Mutex<Vec<(u64, bool, UnixStream)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Ends calls in flight: every one when the client is gone, the waits on spawns at `shutdown`
/// (they last as long as their process, which outlives this server). Spawned processes stay.
pub fn end_all(execs_too: bool) {
    let open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    // A call that connects after this (it was read before the end) is ended as it registers.
    ENDED.store(if execs_too { 2 } else { 1 }, Ordering::SeqCst);
    for (_, waits, c) in open.iter() {
        if *waits || execs_too {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// 0 while serving; 1 once waits end (`shutdown`), 2 once every call does (end of input).
static ENDED: AtomicU64 = AtomicU64::new(0);

fn track(conn: &UnixStream, waits: bool) -> u64 {
    let key = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    let ended = ENDED.load(Ordering::SeqCst);
    if ended == 2 || (ended == 1 && waits) {
        let _ = conn.shutdown(std::net::Shutdown::Both);
    }
    if let Ok(c) = conn.try_clone() {
        open.push((key, waits, c));
    }
    key
}

fn untrack(key: u64) {
    OPEN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|(k, _, _)| *k != key);
}

pub(crate) fn err(kind: &str, message: impl Into<String>) -> Value {
    let m: String = message.into();
    json!({ "kind": kind, "message": m, "chain": [m] })
}

pub(crate) fn invalid(arg: &str, message: impl Into<String>) -> Value {
    let mut v = err("invalid_argument", format!("{arg}: {}", message.into()));
    v["arg"] = json!(arg);
    v
}

/// The parameters as an object (null: none).
pub(crate) fn object(params: Value) -> Result<Map<String, Value>, Value> {
    match params {
        Value::Null => Ok(Map::new()),
        Value::Object(m) => Ok(m),
        _ => Err(invalid("params", "expected an object")),
    }
}

pub(crate) fn string(p: &Map<String, Value>, k: &str) -> Result<Option<String>, Value> {
    match p.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(invalid(k, format!("expected a string, got {v}"))),
    }
}

pub(crate) fn number(p: &Map<String, Value>, k: &str) -> Result<Option<f64>, Value> {
    match p.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f >= 0.0 && f.is_finite() => Ok(Some(f)),
            _ => Err(invalid(
                k,
                format!("expected a number of 0 or more, got {n}"),
            )),
        },
        Some(v) => Err(invalid(k, format!("expected a number, got {v}"))),
    }
}

fn boolean(p: &Map<String, Value>, k: &str) -> Result<bool, Value> {
    match p.get(k) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(invalid(k, format!("expected true or false, got {v}"))),
    }
}

fn strings(p: &Map<String, Value>, k: &str) -> Result<Vec<String>, Value> {
    match p.get(k) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| invalid(k, format!("expected a list of strings, got {v}")))
            })
            .collect(),
        Some(v) => Err(invalid(k, format!("expected a list of strings, got {v}"))),
    }
}

fn env(p: &Map<String, Value>) -> Result<Vec<(String, String)>, Value> {
    match p.get("env") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) if !k.is_empty() && !k.contains('=') => Ok((k.clone(), s.to_string())),
                _ => Err(invalid(
                    "env",
                    format!("expected a {{name: string}} object, got {k}={v}"),
                )),
            })
            .collect(),
        Some(v) => Err(invalid("env", format!("expected an object, got {v}"))),
    }
}

/// A number of 0 or more (as [`number`] gives them) as a whole one; `as` saturates.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn whole(n: f64) -> u64 {
    n as u64
}

/// The sandbox a call names (`sandbox`), which must exist.
pub(crate) fn existing(p: &Map<String, Value>) -> Result<Dir, Value> {
    let name = string(p, "sandbox")?.ok_or_else(|| invalid("sandbox", "missing"))?;
    let dir = Dir::of(&name).map_err(|e| invalid("sandbox", e))?;
    if !dir.exists() {
        return Err(err(
            "not_found",
            format!("no sandbox named `{name}` (see `named.list`)"),
        ));
    }
    Ok(dir)
}

/// How an SDK names each field of a sandbox's configuration (said when adopting one made with
/// another).
fn sdk_arg(field: &str) -> &str {
    match field {
        "memory" => "memory_mb",
        "idle_timeout_ms" => "idle_timeout_s",
        "max_duration_ms" => "max_duration_s",
        f => f,
    }
}

/// A keeper's message as an SDK caller spells its arguments: the keeper names `hull create
/// --user` and `hull exec -u/--user`, which are `user` here.
fn sdk_words(message: &str) -> String {
    message
        .replace("-u/--user", "`user`")
        .replace("--user", "`user`")
}

/// A configuration from `named.create`'s parameters, through its JSON form (fields added later
/// take their defaults).
fn config_of(name: &str, p: &Map<String, Value>) -> Result<Config, Value> {
    const KNOWN: &[&str] = &[
        "name",
        "image",
        "workspace",
        "ro_workspaces",
        "memory_mb",
        "cpus",
        "pids",
        "env",
        "setup",
        "idle_timeout_s",
        "max_duration_s",
        "adopt",
        "user",
        "template",
        "network",
        "secrets",
        "brokering",
    ];
    if let Some(k) = p.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(invalid(k, "unknown parameter"));
    }
    let abs =
        |k: &str, s: String| std::fs::canonicalize(&s).map_err(|e| invalid(k, format!("{s}: {e}")));
    let ms = |k: &str| -> Result<Option<u64>, Value> {
        Ok(number(p, k)?.map(|s| whole((s * 1000.0).round())))
    };
    let (network, secrets) = named_network(p)?;
    let brokering = boolean(p, "brokering")?;
    if brokering && !matches!(network, hull_api::network::Network::Gateway(_)) {
        return Err(invalid(
            "brokering",
            "credential brokering needs the gateway network: give `network` as deny-all, allow-all or custom",
        ));
    }
    let pids = match number(p, "pids")? {
        None => Some(1024),
        Some(n) => (n >= 1.0).then(|| whole(n)),
    };
    let v = json!({
        "name": name,
        "image": string(p, "image")?.unwrap_or_else(|| "host".into()),
        "workspace": string(p, "workspace")?.map(|w| abs("workspace", w)).transpose()?,
        "ro_workspaces": strings(p, "ro_workspaces")?.into_iter().map(|w| abs("ro_workspaces", w)).collect::<Result<Vec<_>, _>>()?,
        "memory": number(p, "memory_mb")?.map(|m| whole(m) << 20),
        "cpus": number(p, "cpus")?,
        "pids": pids,
        "env": env(p)?,
        "setup": strings(p, "setup")?,
        "idle_timeout_ms": ms("idle_timeout_s")?,
        "max_duration_ms": ms("max_duration_s")?,
        "created": state::now_secs(),
        "user": string(p, "user")?,
        "network": hull_api::network::to_value(&network),
        "secrets": secrets,
        "brokering": brokering,
    });
    serde_json::from_value(v).map_err(|e| invalid("params", e.to_string()))
}

/// `named.create`'s `network` and `secrets`: as `run`'s, but a secret only as a reference
/// (`env`): a sandbox's configuration lives on disk, and a value is never written there.
fn named_network(p: &Map<String, Value>) -> Result<(hull_api::Network, Value), Value> {
    let null = Value::Null;
    let network = hull_api::network::from_value(p.get("network").unwrap_or(&null), false)
        .map_err(|e| invalid("network", e))?;
    let secrets = hull_api::network::secrets_from_value(p.get("secrets").unwrap_or(&null))
        .map_err(|e| invalid("secrets", e))?;
    if let Some(s) = secrets
        .iter()
        .find(|s| matches!(s.value, hull_api::network::SecretValue::Value(_)))
    {
        return Err(invalid(
            "secrets",
            format!("secret {}: a named sandbox keeps its configuration on disk, where a value is never written: give `env` (a variable of hull serve's environment) instead of `value`", s.name),
        ));
    }
    hull_api::network::check_secrets_with(&network, &secrets)
        .map_err(|e| invalid("secrets", e.spelled(hull_api::network::Part::param)))?;
    let secrets = serde_json::to_value(&secrets).map_err(|e| invalid("secrets", e.to_string()))?;
    Ok((network, secrets))
}

/// The first field where `have` differs from `want` (creation time and name aside).
fn differing(have: &Config, want: &Config) -> Option<String> {
    let norm = |c: &Config| {
        let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
        if let Some(m) = v.as_object_mut() {
            m.remove("created");
            m.remove("name");
            if let Some(Value::Array(e)) = m.get_mut("env") {
                e.sort_by_key(|x| x.to_string());
            }
        }
        v
    };
    let (h, w) = (norm(have), norm(want));
    let (Some(h), Some(w)) = (h.as_object(), w.as_object()) else {
        return None;
    };
    w.iter()
        .find(|(k, v)| h.get(*k).unwrap_or(&Value::Null) != *v)
        .map(|(k, _)| k.clone())
}

/// `named.create`: makes and starts a sandbox; with `adopt`, one that exists with the same
/// configuration is started (if stopped) and used, one with another is refused naming the
/// differing argument.
fn create(p: &Map<String, Value>) -> Result<Value, Value> {
    let name = string(p, "name")?.ok_or_else(|| invalid("name", "missing"))?;
    let dir = Dir::of(&name).map_err(|e| invalid("name", e))?;
    let mut cfg = config_of(&name, p)?;
    // From a template: read, and the configuration naming its layers written, under the
    // store's shared lock (as `hull create --template`).
    let template = string(p, "template")?;
    let mut store = None;
    if let Some(t) = &template {
        store =
            Some(crate::named::template::Lock::take(false).map_err(|e| err("sandbox_error", e))?);
        let base = crate::named::template::get(t).map_err(|e| invalid("template", e))?;
        let given = crate::named::Given {
            image: p.contains_key("image"),
            workspace: p.contains_key("workspace"),
            pids: p.contains_key("pids"),
            user: p.contains_key("user"),
            network: p.contains_key("network")
                || p.contains_key("secrets")
                || p.contains_key("brokering"),
        };
        cfg = crate::named::over_template(&base, &name, cfg, given).map_err(|e| {
            // Its messages name the CLI's flags; the SDKs spell them as parameters.
            let arg = ["image", "workspace"]
                .into_iter()
                .find(|a| e.starts_with(&format!("--{a}")))
                .unwrap_or("template");
            let said = e
                .strip_prefix(&format!("--{arg}"))
                .map_or(e.as_str(), |r| r.trim_start_matches(':').trim_start());
            invalid(arg, said)
        })?;
    }
    // A network this build cannot give is refused as `run`'s is (kind, `mode`), before
    // anything is made (the keeper would refuse the same, as text).
    hull::boxspec::network(&cfg.network, &cfg.secrets).map_err(|error| {
        let v = crate::serve_out::error_json(
            "network_unavailable",
            &hull::error::Named {
                arg: "network",
                error: error.clone(),
            },
            Some("network"),
        );
        crate::serve_out::with_mode(v, &error)
    })?;
    let adopt = boolean(p, "adopt")?;
    if !(adopt && dir.path.exists()) {
        match crate::named::create_with(&dir, &cfg, store.take()) {
            Ok(()) => {
                return Ok(
                    json!({ "sandbox": name, "created": true, "ports": published(&dir, true) }),
                )
            }
            Err(e) if !(adopt && e.contains("(conflict)")) => {
                let kind = if e.contains("(conflict)") {
                    "conflict"
                } else {
                    "sandbox_error"
                };
                return Err(err(kind, sdk_words(&e)));
            }
            Err(_) => {}
        }
    }
    // Adopting: another creator may still be writing its configuration.
    let deadline = Instant::now() + Duration::from_secs(30);
    let have = loop {
        match dir.config() {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline || !dir.path.exists() => {
                return Err(err("sandbox_error", e))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    if let Some(f) = differing(&have, &cfg) {
        let arg = sdk_arg(&f);
        let mut v = err(
            "config_mismatch",
            format!("sandbox `{name}` exists with another `{arg}`: remove it (destroy) or pass the arguments it was created with"),
        );
        v["arg"] = json!(arg);
        return Err(v);
    }
    start(&dir)?;
    Ok(json!({ "sandbox": name, "created": false, "ports": published(&dir, true) }))
}

/// The published ports of the running keeper, `[{port, host_port}]` (`[]` when the sandbox is
/// stopped or publishes none): read from its `ports.json`, which each keeper removes as it
/// starts and stops and writes once its gateway answered (a restart gets new host ports).
/// With `wait`, a keeper still starting (another client's) is waited for, up to 30 s; a listing
/// does not wait (a sandbox still starting lists `[]`).
fn published(dir: &Dir, wait: bool) -> Value {
    let wanted = dir
        .config()
        .map(|c| match &c.network {
            hull_api::Network::Gateway(g) => !g.ports().is_empty(),
            _ => false,
        })
        .unwrap_or(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while wanted && dir.running() {
        if let Ok(Value::Array(ports)) = std::fs::read(dir.file("ports.json"))
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            return Value::Array(ports);
        }
        if !wait || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    json!([])
}

fn start(dir: &Dir) -> Result<(), Value> {
    if dir.running() {
        return Ok(());
    }
    client::launch(dir).map_err(|e| {
        err(
            "sandbox_error",
            format!("could not start sandbox `{}`: {e}", dir.name),
        )
    })
}

fn list() -> Value {
    let all: Vec<Value> = state::list()
        .into_iter()
        .filter_map(|d| {
            let cfg = d.config().ok()?;
            let st = if d.running() { "running" } else { "stopped" };
            Some(json!({
                "name": d.name, "state": st, "image": cfg.image,
                "user": cfg.user.as_deref().unwrap_or("root"),
                "age_s": state::now_secs().saturating_sub(cfg.created), "size_bytes": d.size(),
                "ports": published(&d, false),
            }))
        })
        .collect();
    json!({ "sandboxes": all })
}

/// `named.logs`: what every exec and spawn printed (the exec log, the older file first), as
/// `hull logs` prints it; `max_bytes` keeps its end.
fn logs(p: &Map<String, Value>) -> Result<Value, Value> {
    let dir = existing(p)?;
    let max = number(p, "max_bytes")?.map(whole);
    let mut all = Vec::new();
    crate::named::logs::print(&dir.logs(), &mut all, false, || true);
    let cut = max.map_or(0, |m| {
        all.len()
            .saturating_sub(usize::try_from(m).unwrap_or(usize::MAX))
    });
    Ok(json!({
        "logs": String::from_utf8_lossy(&all[cut..]),
        "truncated": cut > 0,
    }))
}

/// What one exec gave.
pub(crate) struct Done {
    /// None when it ran past its timeout (and was killed).
    pub(crate) code: Option<i32>,
    pub(crate) out: Vec<u8>,
    pub(crate) err: Vec<u8>,
    pub(crate) truncated: bool,
    /// The keeper knows no such spawn.
    pub(crate) missing: bool,
    /// Output of a spawn that came before what its wait was shown (only in the exec log).
    pub(crate) dropped: u64,
}

/// Runs `req` in `dir` (starting a stopped sandbox), its output streamed to `sink` when given
/// and kept (up to [`MAX_CAPTURE`] a stream); past `timeout` the connection is dropped, and the
/// keeper kills the command.
fn exec_in(
    dir: &Dir,
    req: &wire::Request,
    mut sink: Option<&mut EventSink>,
    timeout: Option<Duration>,
    waits: bool,
) -> Result<Done, Value> {
    let fail = |e: String| err("sandbox_error", e);
    let conn = client::open(dir, true, req).map_err(fail)?.ok_or_else(|| {
        err(
            "sandbox_error",
            format!("sandbox `{}` did not start", dir.name),
        )
    })?;
    let key = track(&conn, waits);
    let r = exec_on(conn, &mut sink, timeout, None);
    untrack(key);
    r.map_err(fail)
}

/// Reads the frames of a request sent on `conn` (by `client::open`) into a [`Done`].
fn exec_on(
    conn: UnixStream,
    sink: &mut Option<&mut EventSink>,
    timeout: Option<Duration>,
    input: Option<Vec<u8>>,
) -> Result<Done, String> {
    if let Some(data) = input {
        // From a thread: a command that stops reading must not stall its answer.
        let mut w = conn.try_clone().map_err(|e| e.to_string())?;
        std::thread::spawn(move || {
            for chunk in data.chunks(wire::MAX_FRAME as usize) {
                if wire::write_frame(&mut w, wire::STDIN, chunk).is_err() {
                    return;
                }
            }
            let _ = wire::write_frame(&mut w, wire::STDIN_END, &[]);
        });
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut done = Done {
        code: None,
        out: Vec::new(),
        err: Vec::new(),
        truncated: false,
        missing: false,
        dropped: 0,
    };
    let mut r = BufReader::new(conn);
    loop {
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(done);
            }
            let _ = r.get_ref().set_read_timeout(Some(left));
        }
        let frame = match wire::read_frame(&mut r) {
            Ok(f) => f,
            Err(e)
                if deadline.is_some()
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
            {
                return Ok(done)
            }
            Err(e) => return Err(format!("read from the keeper: {e}")),
        };
        let Some((kind, data)) = frame else {
            return Err("the sandbox stopped while the command ran".into());
        };
        let (stream, kept) = match kind {
            wire::STDOUT => (Stream::Stdout, &mut done.out),
            wire::STDERR => (Stream::Stderr, &mut done.err),
            wire::EXIT => {
                let b: [u8; 4] = data
                    .as_slice()
                    .try_into()
                    .map_err(|_| "a malformed exit frame".to_string())?;
                done.code = Some(i32::from_le_bytes(b));
                return Ok(done);
            }
            wire::ERROR => return Err(sdk_words(&String::from_utf8_lossy(&data))),
            wire::MISSING => {
                done.missing = true;
                return Ok(done);
            }
            wire::DROPPED => {
                let b: [u8; 8] = data.as_slice().try_into().unwrap_or_default();
                done.dropped = u64::from_le_bytes(b);
                continue;
            }
            _ => return Err(format!("an unknown frame kind {kind} from the keeper")),
        };
        if let Some(s) = sink.as_deref_mut() {
            s.chunk(stream, &data);
        }
        let room = MAX_CAPTURE.saturating_sub(kept.len());
        done.truncated |= data.len() > room;
        kept.extend_from_slice(&data[..data.len().min(room)]);
    }
}

/// A command from `argv` (a list) or `shell` (one string run by bash, else sh).
fn command(p: &Map<String, Value>) -> Result<(Vec<String>, bool), Value> {
    match (p.get("argv"), string(p, "shell")?) {
        (Some(Value::Array(_)), None) => {
            let argv = strings(p, "argv")?;
            if argv.is_empty() {
                return Err(invalid("argv", "an empty command"));
            }
            Ok((argv, false))
        }
        (None | Some(Value::Null), Some(s)) => Ok((vec![s], true)),
        _ => Err(invalid(
            "argv",
            "give `argv` (a list of strings) or `shell` (one string), one of the two",
        )),
    }
}

fn stream_flag(p: &Map<String, Value>) -> Result<bool, Value> {
    boolean(p, "stream")
}

fn exec(out: &Out, id: &Value, p: &Map<String, Value>) -> Result<Value, Value> {
    let dir = existing(p)?;
    let (argv, shell) = command(p)?;
    let req = wire::Request::Exec {
        argv,
        env: env(p)?,
        cwd: string(p, "cwd")?,
        stdin: false,
        shell,
        user: string(p, "user")?,
    };
    let timeout = number(p, "timeout_s")?.map(Duration::from_secs_f64);
    let mut sink = stream_flag(p)?.then(|| EventSink::new(out.clone(), id.clone()));
    let t0 = Instant::now();
    let d = exec_in(&dir, &req, sink.as_mut(), timeout, false)?;
    Ok(json!({
        "exit_code": d.code.unwrap_or(137),
        "success": d.code == Some(0),
        "timed_out": d.code.is_none(),
        "stdout": String::from_utf8_lossy(&d.out),
        "stderr": String::from_utf8_lossy(&d.err),
        "truncated": d.truncated,
        "duration_ms": t0.elapsed().as_secs_f64() * 1000.0,
    }))
}

/// A handle as given back to `wait`/`kill`, checked so it cannot name another path.
fn handle_of(p: &Map<String, Value>) -> Result<String, Value> {
    let h = string(p, "process")?.ok_or_else(|| invalid("process", "missing"))?;
    if h.is_empty() || h.len() > 64 || !h.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(invalid("process", format!("not a process handle: `{h}`")));
    }
    Ok(h)
}

/// `named.spawn`: the keeper's `Spawn`. The handle is acknowledged before it is answered; a
/// server that goes away before that (or the end of its input) leaves the keeper to kill what
/// it started.
fn spawn(p: &Map<String, Value>) -> Result<Value, Value> {
    let dir = existing(p)?;
    let (argv, shell) = command(p)?;
    let req = wire::Request::Spawn {
        argv,
        env: env(p)?,
        cwd: string(p, "cwd")?,
        shell,
        user: string(p, "user")?,
        stdin: boolean(p, "stdin")?,
    };
    let fail = |e: String| {
        err(
            "sandbox_error",
            format!("could not spawn in `{}`: {e}", dir.name),
        )
    };
    let mut conn = client::open(&dir, true, &req)
        .map_err(fail)?
        .ok_or_else(|| fail("the sandbox did not start".into()))?;
    let key = track(&conn, false);
    let r = (|| {
        let mut r = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
        match wire::read_frame(&mut r).map_err(|e| format!("read from the keeper: {e}"))? {
            Some((wire::HANDLE, id)) => {
                let id = String::from_utf8_lossy(&id).into_owned();
                if client_gone() {
                    // Never acknowledged: the keeper kills what it started.
                    return Err("the client went away before it got the handle".into());
                }
                wire::write_frame(&mut conn, wire::ACK, &[])
                    .map_err(|e| format!("talk to the keeper: {e}"))?;
                Ok(id)
            }
            Some((wire::ERROR, e)) => Err(String::from_utf8_lossy(&e).into_owned()),
            Some((k, _)) => Err(format!("an unknown frame kind {k} from the keeper")),
            None => Err("the sandbox stopped".into()),
        }
    })();
    untrack(key);
    Ok(json!({ "process": r.map_err(fail)? }))
}

/// Whether this server's client is gone: its input ended (seen by another thread), or our
/// stdin reports a hangup (a pipe's writer closed, a socket's peer shut down).
fn client_gone() -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    if ENDED.load(Ordering::SeqCst) == 2 {
        return true;
    }
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(&stdin, PollFlags::RDHUP)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&now)).is_ok_and(|n| n > 0)
        && fds[0]
            .revents()
            .intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR)
}

fn no_process(h: &str) -> Value {
    err(
        "not_found",
        format!("no process `{h}` in this sandbox (it stopped since, or the handle is another's)"),
    )
}

/// One call on a running keeper (a stopped sandbox has no spawns: `not_found`).
fn on_keeper(
    dir: &Dir,
    h: &str,
    req: &wire::Request,
    sink: &mut Option<&mut EventSink>,
    timeout: Option<Duration>,
) -> Result<Done, Value> {
    let fail = |e: String| err("sandbox_error", e);
    let conn = client::open(dir, false, req)
        .map_err(fail)?
        .ok_or_else(|| no_process(h))?;
    let key = track(&conn, true);
    let r = exec_on(conn, sink, timeout, None);
    untrack(key);
    let d = r.map_err(fail)?;
    if d.missing {
        return Err(no_process(h));
    }
    Ok(d)
}

/// `named.wait`: the spawn's exit code and output (from its start, the last 1 MiB of it); with
/// `stream`, its output as events as well. Past `timeout_s` only the wait ends.
fn wait(out: &Out, id: &Value, p: &Map<String, Value>) -> Result<Value, Value> {
    let dir = existing(p)?;
    let h = handle_of(p)?;
    let timeout = number(p, "timeout_s")?.map(Duration::from_secs_f64);
    let mut sink = stream_flag(p)?.then(|| EventSink::new(out.clone(), id.clone()));
    let req = wire::Request::Wait {
        id: h.clone(),
        output: true,
    };
    let d = on_keeper(&dir, &h, &req, &mut sink.as_mut(), timeout)?;
    match d.code {
        None => Ok(json!({ "exit_code": null, "timed_out": true })),
        Some(code) => Ok(json!({
            "exit_code": code, "success": code == 0, "timed_out": false,
            "stdout": String::from_utf8_lossy(&d.out), "stderr": String::from_utf8_lossy(&d.err),
            "dropped_bytes": d.dropped,
        })),
    }
}

/// `named.write_stdin`: bytes (`data_b64` or `text`) to the stdin of a spawn made with
/// `stdin`, then its close with `eof`; answered once the keeper has written them all.
fn write_stdin(p: &Map<String, Value>) -> Result<Value, Value> {
    use base64::Engine;
    let dir = existing(p)?;
    let h = handle_of(p)?;
    let data = match (string(p, "data_b64")?, string(p, "text")?) {
        (Some(b), None) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|e| invalid("data_b64", format!("not base64: {e}")))?,
        (None, Some(t)) => t.into_bytes(),
        (None, None) => Vec::new(),
        (Some(_), Some(_)) => return Err(invalid("text", "give `data_b64` or `text`, not both")),
    };
    let req = wire::Request::Stdin {
        id: h.clone(),
        eof: boolean(p, "eof")?,
    };
    let fail = |e: String| err("sandbox_error", e);
    let conn = client::open(&dir, false, &req)
        .map_err(fail)?
        .ok_or_else(|| no_process(&h))?;
    let key = track(&conn, false);
    let written = data.len();
    let r = (|| {
        // From a thread: the keeper may answer (an unknown handle) before it reads the data;
        // then what the thread could not write is moot (EXIT comes only after all of it).
        let mut w = conn.try_clone().map_err(|e| e.to_string())?;
        std::thread::spawn(move || {
            for chunk in data.chunks(wire::MAX_FRAME as usize) {
                if wire::write_frame(&mut w, wire::STDIN, chunk).is_err() {
                    return;
                }
            }
            let _ = wire::write_frame(&mut w, wire::STDIN_END, &[]);
        });
        let mut r = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
        match wire::read_frame(&mut r).map_err(|e| format!("read from the keeper: {e}"))? {
            Some((wire::EXIT, _)) => Ok(None),
            Some((wire::MISSING, _)) => Ok(Some(no_process(&h))),
            Some((wire::ERROR, e)) => Err(String::from_utf8_lossy(&e).into_owned()),
            Some((k, _)) => Err(format!("an unknown frame kind {k} from the keeper")),
            None => Err("the sandbox stopped".into()),
        }
    })();
    untrack(key);
    match r.map_err(fail)? {
        Some(missing) => Err(missing),
        None => Ok(json!({ "written": written })),
    }
}

/// `named.kill`: the spawn's whole process tree is killed; idempotent.
fn kill(p: &Map<String, Value>) -> Result<Value, Value> {
    let dir = existing(p)?;
    let h = handle_of(p)?;
    let d = on_keeper(
        &dir,
        &h,
        &wire::Request::Kill { id: h.clone() },
        &mut None,
        None,
    )?;
    Ok(json!({ "killed": d.code == Some(1) }))
}

/// `named.set_network`: replaces a gateway sandbox's policy (`network`: a gateway mode's name or
/// `{mode, allow_hosts, allow_cidrs, deny_cidrs}`): its running gateway judges the next DNS
/// queries and connections by it, and its next starts keep it (ports and the connection cap
/// stay as created). A sandbox made without the gateway network is refused.
fn set_network(p: &Map<String, Value>) -> Result<Value, Value> {
    use hull_api::network::{Network, NetworkMode, NetworkParts};
    let dir = existing(p)?;
    let g = &crate::net::plan::replacement(p.get("network")).map_err(|e| invalid("network", e))?;
    let mut cfg = dir.config().map_err(|e| err("sandbox_error", e))?;
    let Network::Gateway(old) = &cfg.network else {
        return Err(invalid(
            "network",
            format!("`{}` was created without the gateway network", dir.name),
        ));
    };
    let parts = NetworkParts {
        mode: Some(NetworkMode::Gateway(g.mode())),
        allow_hosts: g.allow_hosts().to_vec(),
        allow_cidrs: g.allow_cidrs().to_vec(),
        deny_cidrs: g.deny_cidrs().to_vec(),
        ports: old.ports().iter().map(|&p| u64::from(p)).collect(),
        max_tcp_connections: Some(u64::from(old.max_tcp_connections())),
    };
    cfg.network = parts
        .build(!cfg.secrets.is_empty())
        .map_err(|e| invalid("network", e.to_string()))?;
    dir.write_config(&cfg)
        .map_err(|e| err("sandbox_error", e))?;
    let req = wire::Request::SetNetwork {
        policy: crate::net::plan::policy_of(g),
    };
    let running = match client::open(&dir, false, &req).map_err(|e| err("sandbox_error", e))? {
        None => false,
        Some(conn) => {
            let mut r = BufReader::new(conn);
            match wire::read_frame(&mut r) {
                Ok(Some((wire::EXIT, _))) => true,
                Ok(Some((wire::ERROR, e))) => {
                    return Err(err("sandbox_error", String::from_utf8_lossy(&e)))
                }
                other => {
                    return Err(err(
                        "sandbox_error",
                        format!("the keeper answered {other:?}"),
                    ))
                }
            }
        }
    };
    Ok(json!({ "running": running }))
}

/// `named.set_transformations`: replaces the request transformations of a running sandbox made
/// with `brokering` (`transformations`: a list of hull-net's transformation objects, `[]` to
/// remove them all), or with `add` merges them in (the same match and header names replace). They live in its gateway only: never written to disk (a literal header
/// value can be a credential), withdrawn when it stops.
fn set_transformations(p: &Map<String, Value>) -> Result<Value, Value> {
    let dir = existing(p)?;
    let t = match p.get("transformations") {
        Some(Value::Array(a)) => Value::Array(a.clone()),
        Some(_) => {
            return Err(invalid(
                "transformations",
                "must be a list of transformations",
            ))
        }
        None => return Err(invalid("transformations", "missing")),
    };
    let cfg = dir.config().map_err(|e| err("sandbox_error", e))?;
    if !cfg.brokering {
        return Err(invalid(
            "transformations",
            format!("`{}` was created without brokering; create it with `brokering: true` (and the gateway network)", dir.name),
        ));
    }
    let req = wire::Request::SetTransformations {
        transformations: crate::net::wire::Hidden(t),
        add: boolean(p, "add")?,
    };
    let Some(conn) = client::open(&dir, false, &req).map_err(|e| err("sandbox_error", e))? else {
        return Err(invalid(
            "sandbox",
            format!("`{}` is stopped: request transformations live in its running gateway only; start it first", dir.name),
        ));
    };
    let mut r = BufReader::new(conn);
    match wire::read_frame(&mut r) {
        Ok(Some((wire::EXIT, _))) => Ok(json!({ "set": true })),
        Ok(Some((wire::ERROR, e))) => Err(invalid("transformations", String::from_utf8_lossy(&e))),
        other => Err(err(
            "sandbox_error",
            format!("the keeper answered {other:?}"),
        )),
    }
}

/// One `named.*` call; `Ok(Value)` is the result to send.
pub(crate) fn handle(out: &Out, id: &Value, method: &str, params: Value) -> Result<Value, Value> {
    let p = object(params)?;
    match method {
        "named.create" => create(&p),
        "named.start" => {
            let dir = existing(&p)?;
            start(&dir)?;
            Ok(json!({ "ports": published(&dir, true) }))
        }
        "named.set_network" => set_network(&p),
        "named.set_transformations" => set_transformations(&p),
        "named.stop" => {
            client::stop(&existing(&p)?).map_err(|e| err("sandbox_error", e))?;
            Ok(json!({}))
        }
        "named.rm" => {
            let name = string(&p, "sandbox")?.ok_or_else(|| invalid("sandbox", "missing"))?;
            let dir = Dir::of(&name).map_err(|e| invalid("sandbox", e))?;
            crate::named::remove(&dir).map_err(|e| err("sandbox_error", e))?;
            Ok(json!({ "removed": true }))
        }
        "named.list" => Ok(list()),
        "named.logs" => logs(&p),
        "named.exec" => exec(out, id, &p),
        "named.spawn" => spawn(&p),
        "named.wait" => wait(out, id, &p),
        "named.kill" => kill(&p),
        "named.write_stdin" => write_stdin(&p),
        other => Err(err(
            "unknown_method",
            format!("unknown method `{other}`; see `hello` for the list"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeper_messages_name_user_as_the_sdk_spells_it() {
        assert_eq!(
            sdk_words("-u/--user: no user `x` in the sandbox's /etc/passwd"),
            "`user`: no user `x` in the sandbox's /etc/passwd"
        );
        assert_eq!(
            sdk_words("--user 1000: see `usermod --add-subuids 1-2 u`"),
            "`user` 1000: see `usermod --add-subuids 1-2 u`"
        );
    }

    #[test]
    fn a_differing_argument_is_named_as_the_sdk_spells_it() {
        let p = |v: Value| v.as_object().cloned().unwrap();
        let a = config_of(
            "x",
            &p(json!({"memory_mb": 256, "env": {"A": "1", "B": "2"}})),
        )
        .unwrap();
        let b = config_of(
            "x",
            &p(json!({"memory_mb": 256, "env": {"B": "2", "A": "1"}})),
        )
        .unwrap();
        assert_eq!(differing(&a, &b), None);
        let c = config_of(
            "x",
            &p(json!({"memory_mb": 512, "env": {"A": "1", "B": "2"}})),
        )
        .unwrap();
        assert_eq!(differing(&a, &c).as_deref().map(sdk_arg), Some("memory_mb"));
        assert!(config_of("x", &p(json!({"memroy_mb": 1}))).is_err());
        assert!(handle_of(&p(json!({"process": "../x"}))).is_err());
    }
}
