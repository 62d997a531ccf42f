//! The keeper: one process per running sandbox (`hull __keeper DIR`, started detached by
//! [`super::client::launch`]) that holds its resident box (namespaces, cgroup, pid 1), its
//! control socket and its exec log, and serves execs until it is stopped.
//!
//! Its main thread cloned the box's pid 1, whose death signal follows that thread, so the main
//! thread only waits for the stop and ends the box; a thread reads pid 1's reports, another
//! accepts connections (one thread each), a third enforces `--idle-timeout` and
//! `--max-duration`. A keeper killed any way ends its box with it (pid 1's `PDEATHSIG` and
//! hung-up channel): the sandbox is then stopped, its disk as it was.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hull_api::RunRequest;
use hull_box::{
    BindMount, BoxSpec, Resident, ResidentEvent, ResidentIds, ResidentProgram, Runtime,
};

use super::files::Files;
use super::logs::ExecLog;
use super::spawns::{self, Spawned, Spawns};
use super::state::{Config, Dir};
use super::users::{self, User};
use super::wire::{self, Request};

/// How long a box's setup may take at start.
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);

/// How long one setup command may run when the config does not say (`--setup-timeout`'s
/// default).
const DEFAULT_SETUP_COMMAND_MS: u64 = 10 * 60 * 1000;

/// Why a setup command gave no exit code.
enum Captured {
    /// Killed at its time limit.
    TimedOut,
    Failed(String),
}

/// A program pid 1 was sent and has not answered for yet.
struct Pending {
    answer: mpsc::Sender<Result<(i32, Option<String>), String>>,
    exit: mpsc::Sender<i32>,
    /// Why it could not run, when pid 1's program process said so before `Spawned`.
    failure: Option<String>,
    argv0: String,
    cwd: String,
    /// The uid and gid it was to run as (None: root).
    ids: Option<(u32, u32)>,
}

/// What every thread of the keeper shares.
struct Keeper {
    resident: Resident,
    /// The box's network gateway (a gateway network only), for the keeper's life: dropped,
    /// it ends, and the box has no network. Its policy is replaced through it.
    gateway: Mutex<Option<crate::net::spawn::GatewayProcess>>,
    /// The request transformations its gateway holds (`named.set_transformations`), kept here
    /// for `add` to merge into; in memory only (their values can be credentials).
    transformations: Mutex<Vec<serde_json::Value>>,
    /// A brokered sandbox's CA directory on the host (bound into the box), for the keeper's life.
    _trust: Option<crate::net::plan::BoxTrust>,
    /// The sandbox's environment (the image's, the box defaults, `--env`), in order.
    env: Vec<(String, String)>,
    cwd: String,
    shell: &'static str,
    /// The box maps more than one id (its pid 1 can run programs as other users).
    subids: bool,
    /// Where its `/etc/passwd` is read from, top first (see [`users::read_etc`]).
    layers: Vec<std::path::PathBuf>,
    /// `--user`, resolved at start: every command's user unless an exec names another.
    user: std::sync::OnceLock<User>,
    /// The answer to a hand-over in flight (see [`Keeper::hand_over`]).
    handed: Mutex<Option<mpsc::Sender<i32>>>,
    log: Arc<ExecLog>,
    /// Sending a program and hearing its `Spawned` is one step at a time.
    spawn: Mutex<()>,
    pending: Mutex<Option<Pending>>,
    exits: Mutex<HashMap<i32, mpsc::Sender<i32>>>,
    stop: Mutex<mpsc::Sender<()>>,
    /// Milliseconds since `born` of the last exec's end (or start).
    last_activity: AtomicU64,
    active: AtomicUsize,
    born: Instant,
    execs: AtomicU64,
    /// Background processes the keeper owns (`Request::Spawn`).
    spawns: Spawns,
    /// File operations beneath the box's root (`Request::File`).
    files: Result<Files, String>,
    /// Rootless over fuse-overlayfs: the box's user namespace, which every file operation
    /// runs in (`hull __files`; the root is a FUSE mount of that namespace).
    fuse_in_box: Option<OwnedFd>,
    /// Rootless with a `--user`: the caller's sub-id ranges the box was mapped with, read once
    /// at start, which `hull __files` maps the same way.
    subid_ranges: Option<(hull_box::subids::IdRange, hull_box::subids::IdRange)>,
}

/// Whether the lock file we hold is still the one at the sandbox's path.
fn still_named(dir: &Dir, held: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(ours), Ok(named)) = (held.metadata(), std::fs::metadata(dir.file("keeper.lock")))
    else {
        return false;
    };
    ours.dev() == named.dev() && ours.ino() == named.ino()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `hull __keeper DIR`: runs the keeper of the sandbox in `DIR` (stdout: the creator's pipe, told
/// `ok` or `error: ...` once; stderr: `keeper.log`). Returns the exit code.
pub fn main(path: &std::path::Path) -> i32 {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let dir = Dir {
        name,
        path: path.to_path_buf(),
    };
    let Ok(lock_file) = dir.lock_file() else {
        return answer(Err(format!("open {}", dir.file("keeper.lock").display())));
    };
    // `Dir::running` probes with a shared lock for an instant: a few tries tell such a probe
    // from a keeper that holds the lock for life.
    let locked = (0..40).any(|i| {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        rustix::fs::flock(
            &lock_file,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        )
        .is_ok()
    });
    if !locked {
        // Another keeper runs (or is starting) this sandbox: the client connects to it.
        return answer(Ok(()));
    }
    // `hull rm` takes this lock before it moves the directory away: a lock won after that is
    // the removed directory's, and nothing may be made again at the sandbox's path.
    if !still_named(&dir, &lock_file) {
        return answer(Err(format!("the sandbox `{}` was removed", dir.name)));
    }
    // The secrets' values, from whoever started us (see `client::launch`); stdin is then closed.
    let mut values = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::stdin().lock(), &mut values);
    let values: std::collections::HashMap<String, String> =
        serde_json::from_str(values.trim()).unwrap_or_default();
    match start(&dir, &values) {
        Ok((keeper, stop_rx)) => {
            answer(Ok(()));
            // Only now may a sweep run: our own box is up and its cgroup is ours.
            std::thread::spawn(|| {
                if let Ok(rt) = Runtime::new() {
                    rt.sweep_leftovers();
                }
            });
            let _ = stop_rx.recv();
            keeper.resident.end();
            // Its gateway ended and reaped now, its cgroup removed (this process exits next).
            if let Some(g) = lock(&keeper.gateway).take() {
                g.end_now();
            }
            super::fuse::stop();
            let _ = std::fs::remove_file(dir.file("control.sock"));
            let _ = std::fs::remove_file(dir.file("keeper.pid"));
            let _ = std::fs::remove_file(dir.file("ports.json"));
            drop(lock_file);
            std::process::exit(0)
        }
        Err(e) => {
            super::fuse::stop();
            answer(Err(e))
        }
    }
}

/// Tells the creator how the start went, then lets go of its pipe.
fn answer(r: Result<(), String>) -> i32 {
    let mut out = std::io::stdout().lock();
    let code = match r {
        Ok(()) => {
            let _ = writeln!(out, "ok");
            0
        }
        Err(e) => {
            let _ = writeln!(out, "error: {}", e.replace('\n', "\n  "));
            eprintln!("hull keeper: {e}");
            1
        }
    };
    let _ = out.flush();
    drop(out);
    if let Ok(null) = File::options().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(null.as_fd());
    }
    code
}

/// The box spec a sandbox's configuration asks for.
pub fn spec_of(dir: &Dir, cfg: &Config) -> Result<BoxSpec, String> {
    // `/workspace` lives in the writable root unless a host directory is bound there, or
    // the sandbox predates that and has its own `workspace/` (then the engine's workspace
    // path is not opened: the state directory stands in for it).
    let in_root = cfg.workspace.is_none() && !dir.workspace().exists();
    let workspace = match &cfg.workspace {
        Some(w) => w.clone(),
        None if in_root => dir.path.clone(),
        None => dir.workspace(),
    };
    let req = RunRequest {
        argv: vec!["sh".into()],
        image: cfg.image.clone(),
        workspace: Some(workspace),
        memory: cfg.memory,
        pids: cfg.pids,
        cpus: cfg.cpus,
        env: cfg.env.clone(),
        timeout: SETUP_TIMEOUT,
        network: cfg.network.clone(),
        secrets: cfg.secrets.clone(),
        ..RunRequest::default()
    };
    let built = hull::boxspec::run_spec(&req).map_err(|e| chain(&e))?;
    let mut spec = built.spec;
    for ro in &cfg.ro_workspaces {
        spec.mounts.push(BindMount {
            source: ro.clone(),
            target: ro.display().to_string(),
            read_only: true,
        });
    }
    spec.hostname = cfg.name.clone();
    spec.writable_root = Some(dir.writable_root_over(&cfg.layers, in_root)?);
    if let Some(u) = cfg.user.as_deref() {
        users::check_spec(u).map_err(|e| format!("--user: {e}"))?;
    }
    if let Some(u) = cfg.user.as_deref().filter(|u| !users::is_root(u)) {
        if cfg.workspace.is_some() {
            return Err(format!(
                "--user {u} with --workspace: a host directory at /workspace cannot be handed to a user of the sandbox (its files would belong to ids of the sandbox's range on the host); leave --workspace out (the sandbox's own /workspace is handed to {u})"
            ));
        }
        let dumpable = std::fs::read_to_string("/proc/sys/fs/suid_dumpable").unwrap_or_default();
        users::check_dumpable(&dumpable).map_err(|e| format!("--user {u}: {e}"))?;
        // Ids besides root: host root's own range, or the caller's /etc/subuid range.
        spec.subids = true;
        if !rustix::process::geteuid().is_root() {
            let (uid, gid) = (
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            );
            hull_box::subids::lookup(uid, gid).map_err(|e| {
                format!(
                    "--user {u}: a user other than root needs ids besides yours in the sandbox: {}",
                    chain(&e)
                )
            })?;
        }
    }
    Ok(spec)
}

/// Where a box of `spec` has its `/etc/passwd`, top first: its writable root's upper layer,
/// its template layers, the image.
fn etc_layers(spec: &BoxSpec) -> Vec<std::path::PathBuf> {
    let mut layers = Vec::new();
    if let Some(w) = &spec.writable_root {
        layers.push(w.upper.clone());
        layers.extend(w.lowers.iter().cloned());
    }
    if let hull_box::RootSpec::Dir(d) = &spec.root {
        layers.push(d.clone());
    }
    layers
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    hull_api::Chain(e).to_string()
}

/// A thread that ends the box if the starter (the reader of our stdout) goes away while the
/// setup runs.
struct StarterWatch {
    /// (the setup is still running, the starter went away and the box was ended)
    state: Arc<Mutex<(bool, bool)>>,
}

impl StarterWatch {
    /// Stops watching; whether the starter went away (and the box was ended).
    fn finish(self) -> bool {
        let mut st = lock(&self.state);
        st.0 = false;
        st.1
    }
}

fn watch_starter(keeper: &Arc<Keeper>) -> StarterWatch {
    let state = Arc::new(Mutex::new((true, false)));
    let (k, st) = (Arc::clone(keeper), Arc::clone(&state));
    std::thread::spawn(move || {
        let out = std::io::stdout();
        let tick = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        loop {
            // The write end of a pipe whose reader is gone polls POLLERR.
            let mut fds = [rustix::event::PollFd::new(
                &out,
                rustix::event::PollFlags::empty(),
            )];
            let gone = rustix::event::poll(&mut fds, Some(&tick)).is_ok()
                && fds[0]
                    .revents()
                    .intersects(rustix::event::PollFlags::ERR | rustix::event::PollFlags::HUP);
            let mut s = lock(&st);
            if !s.0 {
                return;
            }
            if gone {
                s.1 = true;
                k.resident.end();
                return;
            }
        }
    });
    StarterWatch { state }
}

/// Starts the box, runs the setup commands, opens the control socket and the threads.
fn start(
    dir: &Dir,
    values: &std::collections::HashMap<String, String>,
) -> Result<(Arc<Keeper>, mpsc::Receiver<()>), String> {
    // The last keeper's host ports are not this one's (serve answers what this file says).
    let _ = std::fs::remove_file(dir.file("ports.json"));
    let cfg = dir.config()?;
    let mut spec = spec_of(dir, &cfg)?;
    // Before any thread starts: host root's fallback takes a mount namespace of the keeper's
    // own; a rootless one's box mounts the FUSE file system itself and the keeper serves it.
    let image = match &spec.root {
        hull_box::RootSpec::Dir(d) => Some(d.clone()),
        hull_box::RootSpec::Host => None,
    };
    let mut in_box = None;
    let mut staged = None;
    if super::fuse::mode()? == super::fuse::Overlay::Fuse {
        if let Some(w) = spec.writable_root.as_mut() {
            let user = cfg.user.as_deref().filter(|u| !users::is_root(u));
            if rustix::process::geteuid().is_root() && user.is_none() {
                let merged = super::fuse::mount(&dir.path, w, image.as_deref())?;
                w.merged = Some(merged);
            } else if rustix::process::geteuid().is_root() {
                staged = Some(super::fuse::prepare_in_box_staged(
                    &dir.path,
                    w,
                    image.as_deref(),
                )?);
                in_box = Some(w.clone());
            } else {
                super::fuse::prepare_in_box(&dir.path, w)?;
                in_box = Some(w.clone());
            }
        }
    }
    let runtime = Runtime::new().map_err(|e| chain(&e))?;
    // The box's user namespace, for the daemon and every file operation's `hull __files`,
    // opened while its pid 1 still lets us: it turns non-dumpable only at the end of its setup,
    // which waits for the daemon started here after the open.
    let mut box_userns: Option<OwnedFd> = None;
    // A gateway network: its gateway serves the box's TAP from before the box is ready, for the
    // keeper's life; its connection log is the state directory's `net.log`.
    // Its secrets are brokered with the values the starter handed over (placeholders made
    // anew at each start: the box's processes start anew too).
    let mut trust = None;
    let gateway_start = match &cfg.network {
        hull_api::network::Network::Gateway(g) => {
            let mut s = crate::net::plan::start_of(g)?;
            let mut secrets = Vec::new();
            for sec in &cfg.secrets {
                let v = values.get(&sec.name).ok_or_else(|| {
                    format!("secret {}: its value was not handed to the keeper (start the sandbox with hull create, start or exec)", sec.name)
                })?;
                let mut given = sec.clone();
                given.value = hull_api::network::SecretValue::Value(
                    hull_api::network::Hidden::new(v.clone()),
                );
                secrets.push(given);
            }
            trust = crate::net::plan::brokered(&mut s, &secrets, cfg.brokering)?;
            if let Some(t) = &trust {
                t.apply(&mut spec);
            }
            Some(s)
        }
        _ => None,
    };
    let mut gateway = None;
    let net_log = dir.file("net.log");
    let mut take = gateway_start
        .as_ref()
        .map(|s| crate::net::plan::handler(s, Some(&net_log), true, &mut gateway, |_| {}));
    let mut serve_fuse = |pid: libc::pid_t, dev: OwnedFd| -> std::io::Result<()> {
        let Some(w) = &in_box else {
            return Err(std::io::Error::other("no FUSE root was asked for"));
        };
        let ns: OwnedFd = File::open(format!("/proc/{pid}/ns/user"))?.into();
        box_userns = Some(ns.try_clone()?);
        super::fuse::serve_in_box(ns, dev, w, image.as_deref(), staged.as_ref())
    };
    let handoff = hull_box::Handoff {
        fuse: in_box
            .is_some()
            .then_some(&mut serve_fuse as &mut hull_box::FuseServer<'_>),
        tap: take.as_mut().map(|t| t as &mut hull_box::TapHandler<'_>),
    };
    let resident = runtime
        .start_resident_with(&spec, handoff)
        .map_err(|e| chain(&e))?;
    drop(take);
    if let Some(g) = &gateway {
        let ports: Vec<serde_json::Value> = g
            .ports
            .iter()
            .map(|(inner, host)| serde_json::json!({"port": inner, "host_port": host}))
            .collect();
        super::state::write_atomic(
            &dir.file("ports.json"),
            serde_json::Value::Array(ports).to_string().as_bytes(),
        )?;
    }
    for w in resident.warnings() {
        crate::verbosity::warn("hull keeper", w);
    }
    // Asked before anything else reads pid 1's channel.
    let files = resident
        .root_dir()
        .map_err(|e| format!("the sandbox's root is not reachable: {}", chain(&e)))
        .and_then(|root| Files::new(root, spec.cwd.clone(), resident.pid()));
    if let Err(e) = &files {
        eprintln!("hull keeper: file operations refused: {e}");
    }
    let mut spawns = Spawns::new(&resident.cgroup_paths());
    if let Some(why) = spawns.probe(resident.pid()) {
        eprintln!(
            "hull keeper: warning: spawns get no cgroup of their own ({why}); a kill reaches their process group only"
        );
    }
    let (stop_tx, stop_rx) = mpsc::channel();
    let subid_ranges = if spec.subids && !rustix::process::geteuid().is_root() {
        Some(
            hull_box::subids::lookup(
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            )
            .map_err(|e| chain(&e))?,
        )
    } else {
        None
    };
    let keeper = Arc::new(Keeper {
        gateway: Mutex::new(gateway),
        transformations: Mutex::new(Vec::new()),
        _trust: trust,
        files,
        fuse_in_box: box_userns,
        subid_ranges,
        env: hull_box::assemble::box_env(&spec),
        cwd: spec.cwd.clone(),
        shell: shell_of(&spec),
        subids: spec.subids,
        layers: etc_layers(&spec),
        user: std::sync::OnceLock::new(),
        handed: Mutex::new(None),
        log: Arc::new(ExecLog::open(dir.logs())),
        spawn: Mutex::new(()),
        pending: Mutex::new(None),
        exits: Mutex::new(HashMap::new()),
        stop: Mutex::new(stop_tx),
        last_activity: AtomicU64::new(0),
        active: AtomicUsize::new(0),
        born: Instant::now(),
        execs: AtomicU64::new(0),
        spawns,
        resident,
    });
    {
        let k = Arc::clone(&keeper);
        std::thread::spawn(move || k.dispatch());
    }
    // Setup commands run once, at creation: a later start finds them done.
    let done = dir.file("setup.done");
    let setup: &[String] = if done.exists() { &[] } else { &cfg.setup };
    // A starter that goes away during the setup (killed, ^C) takes it with it: the box ends,
    // and the keeper with it, so nothing goes on in the starter's name (and a template build
    // it started can be taken over by the next creator).
    let watch = (!setup.is_empty()).then(|| watch_starter(&keeper));
    for cmd in setup {
        let argv = vec![keeper.shell.to_string(), "-c".into(), cmd.clone()];
        let limit = Duration::from_millis(cfg.setup_timeout_ms.unwrap_or(DEFAULT_SETUP_COMMAND_MS));
        let (code, stderr) = match keeper.run_captured(&argv, Some(limit)) {
            Err(Captured::TimedOut) => {
                keeper.resident.end();
                return Err(format!(
                    "setup command `{cmd}` did not finish within {} s (--setup-timeout) and was killed",
                    limit.as_secs_f64()
                ));
            }
            Err(Captured::Failed(e)) => return Err(e),
            Ok(r) => r,
        };
        if code != 0 {
            keeper.resident.end();
            return Err(format!(
                "setup command `{cmd}` failed with exit code {code}; its stderr:\n{}",
                String::from_utf8_lossy(&stderr).trim_end()
            ));
        }
    }
    if let Some(w) = watch {
        if w.finish() {
            return Err("its starter went away during the setup".into());
        }
    }
    // The user is looked up after the setup (which may have added it), at every start.
    if let Some(u) = cfg.user.as_deref().filter(|u| !users::is_root(u)) {
        let user = match keeper.resolve(u) {
            Ok(user) => user,
            Err(e) => {
                keeper.resident.end();
                return Err(format!("--user: {e}"));
            }
        };
        if !done.exists() {
            // Once, before any command of the user's: its /workspace (the sandbox's own,
            // never a host directory, see `spec_of`) and its home are made its.
            // A home below /home is the user's whether the image made it or not (a rootless
            // store unpacks every file as the caller, the box's root); any other (`/usr/sbin`
            // of `daemon`, `/nonexistent`) only when it is made here.
            let mut dirs = vec![("/workspace", false)];
            if user.home.starts_with('/') && user.home != "/" {
                dirs.push((&user.home, !user.home.starts_with("/home/")));
            }
            for (d, only_made) in dirs {
                if let Err(e) = keeper.hand_over(d, user.uid, user.gid, only_made) {
                    keeper.resident.end();
                    return Err(format!("--user {u}: {e}"));
                }
            }
        }
        let _ = keeper.user.set(user);
    }
    if !done.exists() {
        super::state::write_atomic(&done, b"")?;
    }
    let (sock, _dirfd) = dir.socket_path().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(dir.file("control.sock"));
    // Made 0600 from the start (no window where another user could connect).
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let listener = UnixListener::bind(&sock);
    rustix::process::umask(old);
    let listener = listener.map_err(|e| format!("bind {}: {e}", sock.display()))?;
    super::state::write_atomic(
        &dir.file("keeper.pid"),
        format!("{}\n", std::process::id()).as_bytes(),
    )?;
    {
        let k = Arc::clone(&keeper);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(conn) => {
                        let k = Arc::clone(&k);
                        std::thread::spawn(move || k.serve(conn));
                    }
                    // Out of descriptors or memory: not a reason to spin.
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
    }
    if cfg.idle_timeout_ms.is_some() || cfg.max_duration_ms.is_some() {
        let k = Arc::clone(&keeper);
        std::thread::spawn(move || k.enforce_timeouts(cfg.idle_timeout_ms, cfg.max_duration_ms));
    }
    Ok((keeper, stop_rx))
}

/// `bash` where the image has one, else `sh`.
fn shell_of(spec: &BoxSpec) -> &'static str {
    let root = match &spec.root {
        hull_box::RootSpec::Host => std::path::PathBuf::from("/"),
        hull_box::RootSpec::Dir(d) => d.clone(),
    };
    if ["bin/bash", "usr/bin/bash"]
        .iter()
        .any(|p| root.join(p).exists())
    {
        "bash"
    } else {
        "sh"
    }
}

/// A command as it is sent to pid 1: argv, its whole environment, its working directory.
type Command = (Vec<String>, Vec<(String, String)>, String);

/// A started command: its pid in the box, output pipes and exit status to come.
struct Started {
    /// Its pid in the box.
    pid: i32,
    out: std::io::PipeReader,
    err: std::io::PipeReader,
    exit: mpsc::Receiver<i32>,
}

impl Keeper {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn request_stop(&self) {
        let _ = lock(&self.stop).send(());
    }

    /// Reads pid 1's reports for good: answers the pending start, hands exit statuses to the
    /// execs waiting for them. Pid 1 gone means the sandbox stops.
    fn dispatch(&self) {
        loop {
            let event = match self.resident.recv() {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("hull keeper: {}", chain(&e));
                    ResidentEvent::Closed
                }
            };
            match event {
                ResidentEvent::Spawned { pid } => {
                    if let Some(p) = lock(&self.pending).take() {
                        lock(&self.exits).insert(pid, p.exit);
                        let _ = p.answer.send(Ok((pid, p.failure)));
                    }
                }
                ResidentEvent::Exited { pid, status } => {
                    if let Some(tx) = lock(&self.exits).remove(&pid) {
                        let _ = tx.send(status);
                    }
                }
                ResidentEvent::HandedOver { errno } => {
                    if let Some(tx) = lock(&self.handed).take() {
                        let _ = tx.send(errno);
                    }
                }
                ResidentEvent::ExecFailed { errno }
                | ResidentEvent::ChdirFailed { errno }
                | ResidentEvent::IdsFailed { errno } => {
                    if let Some(p) = lock(&self.pending).as_mut() {
                        let what = match event {
                            ResidentEvent::ChdirFailed { .. } => {
                                format!("enter the working directory {} of", p.cwd)
                            }
                            ResidentEvent::IdsFailed { .. } => {
                                let (uid, gid) = p.ids.unwrap_or((0, 0));
                                format!("take uid {uid} and gid {gid} for")
                            }
                            _ => "execute".to_string(),
                        };
                        p.failure = Some(format!(
                            "hull: cannot {what} `{}`: {}\n",
                            p.argv0,
                            std::io::Error::from_raw_os_error(errno)
                        ));
                    }
                }
                ResidentEvent::Refused { errno } => {
                    if let Some(p) = lock(&self.pending).take() {
                        let _ = p.answer.send(Err(format!(
                            "the sandbox could not start the command: {}",
                            std::io::Error::from_raw_os_error(errno)
                        )));
                    }
                }
                ResidentEvent::Closed => {
                    lock(&self.pending).take();
                    lock(&self.handed).take();
                    lock(&self.exits).clear();
                    self.request_stop();
                    return;
                }
            }
        }
    }

    /// Resolves `spec` (`--user`, `-u`) in the sandbox's `/etc/passwd` and `/etc/group`.
    fn resolve(&self, spec: &str) -> Result<User, String> {
        let passwd = users::read_etc(&self.layers, "passwd");
        let group = users::read_etc(&self.layers, "group");
        users::resolve(spec, &passwd, &group)
    }

    /// Has pid 1 make `path` and give it to `uid`:`gid` (see [`Resident::hand_over`]).
    fn hand_over(&self, path: &str, uid: u32, gid: u32, only_made: bool) -> Result<(), String> {
        let (tx, rx) = mpsc::channel();
        let _one = lock(&self.spawn);
        *lock(&self.handed) = Some(tx);
        if let Err(e) = self.resident.hand_over(path, uid, gid, only_made) {
            lock(&self.handed).take();
            return Err(chain(&e));
        }
        match rx.recv() {
            Ok(0) => Ok(()),
            Ok(errno) => Err(format!(
                "could not make {path} the user's (uid {uid}, gid {gid}): {}",
                std::io::Error::from_raw_os_error(errno)
            )),
            Err(_) => Err("the sandbox stopped".into()),
        }
    }

    /// Who a command runs as: `asked` (an exec's `-u`), else the sandbox's `--user`. None: as
    /// ever (root, the sandbox's environment untouched); else the ids to send (None for root)
    /// and the user whose `HOME`, `USER` and `LOGNAME` the command gets.
    fn identity(&self, asked: Option<&str>) -> Result<Option<(Option<ResidentIds>, User)>, String> {
        let user = match asked {
            None => match self.user.get() {
                Some(u) => u.clone(),
                None => return Ok(None),
            },
            Some(a) => {
                let resolved = self.resolve(a).or_else(|e| {
                    // Root is root even in an image without a passwd entry for it.
                    if users::is_root(a) {
                        Ok(User {
                            name: "root".into(),
                            uid: 0,
                            gid: 0,
                            groups: vec![0],
                            home: "/root".into(),
                        })
                    } else {
                        Err(e)
                    }
                });
                resolved.map_err(|e| format!("-u/--user: {e}"))?
            }
        };
        if user.uid == 0 && user.gid == 0 {
            return Ok(Some((None, user)));
        }
        if !self.subids {
            return Err(format!(
                "-u/--user {}: this sandbox maps only root (it was created without a --user other than root); create it with --user USER to run commands as other users",
                asked.unwrap_or(&user.name)
            ));
        }
        let ids = ResidentIds {
            uid: user.uid,
            gid: user.gid,
            groups: user.groups.clone(),
        };
        Ok(Some((Some(ids), user)))
    }

    /// Starts `argv` in the box with `env` (the whole environment) in `cwd`, as `ids` (None:
    /// root).
    fn start(
        &self,
        argv: &[String],
        env: &[(String, String)],
        cwd: &str,
        stdin: &OwnedFd,
        group: Option<&std::path::Path>,
        ids: Option<&ResidentIds>,
    ) -> Result<(Started, Option<String>), String> {
        let pipe = |what| std::io::pipe().map_err(|e| format!("create the {what} pipe: {e}"));
        let (out, out_w) = pipe("stdout")?;
        let (err, err_w) = pipe("stderr")?;
        let (answer, answer_rx) = mpsc::channel();
        let (exit_tx, exit) = mpsc::channel();
        let program = ResidentProgram {
            argv,
            env,
            cwd,
            ids,
        };
        {
            let _one = lock(&self.spawn);
            // A spawn is born in its own cgroup: pid 1 stands in it while it starts the
            // program (starts are one at a time), and goes back after.
            let back = match (group, &self.spawns.box_group) {
                (Some(g), Some(b)) => {
                    spawns::move_into(g, self.resident.pid())?;
                    Some(b.as_path())
                }
                _ => None,
            };
            let hand_over = move || {
                *lock(&self.pending) = Some(Pending {
                    answer,
                    exit: exit_tx,
                    failure: None,
                    argv0: argv.first().cloned().unwrap_or_default(),
                    cwd: cwd.to_string(),
                    ids: ids.map(|i| (i.uid, i.gid)),
                });
                if let Err(e) = self
                    .resident
                    .send(&program, [stdin.as_fd(), out_w.as_fd(), err_w.as_fd()])
                {
                    lock(&self.pending).take();
                    return Err(chain(&e));
                }
                drop((out_w, err_w));
                answer_rx
                    .recv()
                    .map_err(|_| "the sandbox stopped".to_string())?
            };
            let r = hand_over();
            if let Some(b) = back {
                if let Err(e) = spawns::move_into(b, self.resident.pid()) {
                    // Pid 1 left in a spawn's cgroup would die with the spawn: stop instead.
                    eprintln!("hull keeper: {e}");
                    self.request_stop();
                    return Err(e);
                }
            }
            let (pid, failure) = r?;
            Ok((
                Started {
                    pid,
                    out,
                    err,
                    exit,
                },
                failure,
            ))
        }
    }

    /// Runs `argv` to its end with stdin closed, killing it (its process group) past `limit`;
    /// its exit code and stderr (setup commands).
    fn run_captured(
        &self,
        argv: &[String],
        limit: Option<Duration>,
    ) -> Result<(i32, Vec<u8>), Captured> {
        let null: OwnedFd = File::open("/dev/null")
            .map_err(|e| Captured::Failed(format!("open /dev/null: {e}")))?
            .into();
        self.log_header(argv);
        let (s, failure) = self
            .start(argv, &self.env, &self.cwd, &null, None, None)
            .map_err(Captured::Failed)?;
        let mut stderr = failure.map(String::into_bytes).unwrap_or_default();
        let pid = s.pid;
        let (done, finished) = mpsc::channel::<()>();
        let timed_out = std::sync::atomic::AtomicBool::new(false);
        let status = std::thread::scope(|scope| {
            if let Some(limit) = limit {
                let timed_out = &timed_out;
                scope.spawn(move || {
                    if finished.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout) {
                        timed_out.store(true, Ordering::SeqCst);
                        let _ = self.resident.kill(pid, libc::SIGKILL);
                    }
                });
            }
            let status = drain(
                s,
                None,
                |_| {},
                |kind, data| {
                    self.log.write(data);
                    if kind == wire::STDERR && stderr.len() < 64 << 10 {
                        stderr.extend_from_slice(data);
                    }
                },
                &self.log,
            );
            drop(done);
            status
        })
        .map_err(|()| Captured::Failed("the sandbox stopped during setup".to_string()))?;
        if timed_out.load(Ordering::SeqCst) {
            self.log.write(b"[hull] killed at --setup-timeout\n");
            return Err(Captured::TimedOut);
        }
        let code = wire::exit_code(status);
        self.log.write(format!("[hull] exit {code}\n").as_bytes());
        Ok((code, stderr))
    }

    fn log_header(&self, argv: &[String]) {
        let n = self.execs.fetch_add(1, Ordering::Relaxed) + 1;
        let shown = serde_json::to_string(argv).unwrap_or_default();
        self.log.write(
            format!(
                "[hull] exec #{n} at {}: {shown}\n",
                super::state::now_secs()
            )
            .as_bytes(),
        );
    }

    /// One client connection: a request line, then its frames.
    fn serve(&self, conn: UnixStream) {
        if let Err(e) = super::peer::check(&conn) {
            eprintln!("hull keeper: refused a connection: {}", hull_api::Chain(&e));
            return;
        }
        // Before the request is read (see `wire::READY`).
        if wire::write_frame(&mut &conn, wire::READY, &[]).is_err() {
            return;
        }
        let Ok(read_half) = conn.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(read_half);
        let mut line = String::new();
        if reader.by_ref().take(4 << 20).read_line(&mut line).is_err() {
            return;
        }
        let mut w = conn;
        match serde_json::from_str::<Request>(&line) {
            Ok(Request::Stop) => {
                let _ = wire::write_frame(&mut w, wire::EXIT, &0i32.to_le_bytes());
                self.request_stop();
            }
            Ok(Request::Exec {
                argv,
                env,
                cwd,
                stdin,
                shell,
                user,
            }) => {
                self.active.fetch_add(1, Ordering::SeqCst);
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
                let r = self.exec(
                    &mut w,
                    reader,
                    &argv,
                    &env,
                    cwd,
                    stdin,
                    shell,
                    user.as_deref(),
                );
                if let Err(e) = r {
                    let _ = wire::write_frame(&mut w, wire::ERROR, e.as_bytes());
                }
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
                self.active.fetch_sub(1, Ordering::SeqCst);
            }
            Ok(Request::Spawn {
                argv,
                env,
                cwd,
                shell,
                user,
                stdin,
            }) => {
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
                let how = SpawnHow {
                    cwd,
                    shell,
                    user: user.as_deref(),
                    stdin,
                };
                let r = self.spawn_one(&mut w, reader, &argv, &env, how);
                if let Err(e) = r {
                    let _ = wire::write_frame(&mut w, wire::ERROR, e.as_bytes());
                }
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
            }
            Ok(Request::File { file }) => {
                self.active.fetch_add(1, Ordering::SeqCst);
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
                let owner = super::files::owner_of_written_files(self.user.get());
                let mut input = StdinFrames(reader, false, Vec::new());
                let answer = match (&self.files, w.try_clone()) {
                    (Ok(files), Ok(_))
                        if files.needs_namespace(owner) || self.fuse_in_box.is_some() =>
                    {
                        // Rootless, as a user of sub-ids or over a FUSE root of the box's
                        // user namespace: `hull __files` answers itself.
                        let (root, cwd) = files.root();
                        let enter = match (&self.fuse_in_box, &self.subid_ranges) {
                            (Some(ns), _) => Ok(super::files_ns::Enter::Join(ns.as_fd())),
                            (None, Some(ranges)) => Ok(super::files_ns::Enter::Mapped(ranges)),
                            (None, None) => Err("the sandbox maps no sub-ids".to_string()),
                        };
                        let relayed = enter.and_then(|enter| {
                            super::files_ns::run(root, cwd, &file, owner, enter, &mut input, &mut w)
                        });
                        relayed
                            .err()
                            .map(|e| super::files::refused("sandbox_error", e))
                    }
                    (Ok(files), Ok(mut out)) => Some(super::files::answer(files.run(
                        &file,
                        owner,
                        &mut |d| wire::write_frame(&mut out, wire::STDOUT, d),
                        &mut input,
                    ))),
                    (Err(e), _) => Some(super::files::refused("sandbox_error", e.clone())),
                    (_, Err(e)) => Some(super::files::refused("io", e.to_string())),
                };
                if let Some(answer) = answer {
                    let _ = wire::write_frame(&mut w, wire::RESULT, answer.to_string().as_bytes());
                }
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
                self.active.fetch_sub(1, Ordering::SeqCst);
            }
            Ok(Request::Wait { id, output }) => {
                self.active.fetch_add(1, Ordering::SeqCst);
                self.wait_one(&mut w, &id, output);
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
                self.active.fetch_sub(1, Ordering::SeqCst);
            }
            Ok(Request::Stdin { id, eof }) => {
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
                match self.spawns.get(&id) {
                    None => {
                        let _ = wire::write_frame(&mut w, wire::MISSING, id.as_bytes());
                    }
                    Some(sp) => {
                        let _ = match write_stdin(&sp, reader, eof) {
                            Ok(()) => wire::write_frame(&mut w, wire::EXIT, &0i32.to_le_bytes()),
                            Err(e) => wire::write_frame(&mut w, wire::ERROR, e.as_bytes()),
                        };
                    }
                }
            }
            Ok(Request::SetNetwork { policy }) => {
                let done = match lock(&self.gateway).as_mut() {
                    None => Err("the sandbox has no gateway network (create it with --network deny-all, allow-all or custom)".to_string()),
                    Some(g) => g
                        .set_policy(&policy)
                        .map_err(|e| hull_api::Chain(&e).to_string()),
                };
                let _ = match done {
                    Ok(()) => wire::write_frame(&mut w, wire::EXIT, &0i32.to_le_bytes()),
                    Err(e) => wire::write_frame(&mut w, wire::ERROR, e.as_bytes()),
                };
            }
            Ok(Request::SetTransformations {
                transformations,
                add,
            }) => {
                // Held while the gateway takes them, so changes apply one at a time, in order.
                let mut current = lock(&self.transformations);
                let done = match (transformations.0, lock(&self.gateway).as_mut()) {
                    (_, None) => Err("the sandbox has no gateway network".to_string()),
                    (serde_json::Value::Array(given), Some(g)) => {
                        let next = if add {
                            crate::net::brokering::merge_transformations(&current, given)
                        } else {
                            given
                        };
                        g.set_transformations(serde_json::Value::Array(next.clone()))
                            .map(|()| next)
                            .map_err(|e| hull_api::Chain(&e).to_string())
                    }
                    (_, Some(_)) => Err("transformations must be a list".to_string()),
                };
                let done = done.map(|next| *current = next);
                let _ = match done {
                    Ok(()) => wire::write_frame(&mut w, wire::EXIT, &0i32.to_le_bytes()),
                    Err(e) => wire::write_frame(&mut w, wire::ERROR, e.as_bytes()),
                };
            }
            Ok(Request::Kill { id }) => {
                self.last_activity.store(self.now_ms(), Ordering::SeqCst);
                match self.spawns.get(&id) {
                    None => {
                        let _ = wire::write_frame(&mut w, wire::MISSING, id.as_bytes());
                    }
                    Some(sp) => {
                        let was = self.kill_spawn(&sp, "killed");
                        let _ =
                            wire::write_frame(&mut w, wire::EXIT, &i32::from(was).to_le_bytes());
                    }
                }
            }
            Err(e) => {
                let _ =
                    wire::write_frame(&mut w, wire::ERROR, format!("bad request: {e}").as_bytes());
            }
        }
    }

    /// The argv, whole environment and working directory of a command as a client gave it.
    fn command_of(
        &self,
        argv: &[String],
        env: &[(String, String)],
        cwd: Option<String>,
        shell: bool,
        user: Option<&str>,
    ) -> Result<(Command, Option<ResidentIds>), String> {
        let identity = self.identity(user)?;
        let argv: Vec<String> = if shell {
            vec![self.shell.to_string(), "-c".into(), argv.join(" ")]
        } else {
            argv.to_vec()
        };
        if argv.is_empty() {
            return Err("no command given".into());
        }
        let mut merged = self.env.clone();
        let who = identity.as_ref().map(|(_, u)| {
            [
                ("HOME".to_string(), u.home.clone()),
                ("USER".to_string(), u.name.clone()),
                ("LOGNAME".to_string(), u.name.clone()),
            ]
        });
        for (k, v) in who.iter().flatten().chain(env) {
            match merged.iter_mut().find(|(mk, _)| mk == k) {
                Some(slot) => slot.1 = v.clone(),
                None => merged.push((k.clone(), v.clone())),
            }
        }
        let ids = identity.and_then(|(i, _)| i);
        Ok(((argv, merged, cwd.unwrap_or_else(|| self.cwd.clone())), ids))
    }

    /// `Request::Spawn`: starts the process in a cgroup of its own (where the box has one),
    /// sends its handle and waits for the client's `ACK`; a client gone before that is an
    /// aborted call, and what it started is killed.
    #[allow(clippy::too_many_arguments)]
    fn spawn_one(
        &self,
        w: &mut UnixStream,
        mut reader: BufReader<UnixStream>,
        argv: &[String],
        env: &[(String, String)],
        how: SpawnHow<'_>,
    ) -> Result<(), String> {
        let ((argv, merged, cwd), ids) =
            self.command_of(argv, env, how.cwd, how.shell, how.user)?;
        // Its stdin: /dev/null, or a pipe whose write end the keeper keeps for `Stdin` requests.
        let (null, writer): (OwnedFd, _) = if how.stdin {
            let (r, w) = std::io::pipe().map_err(|e| format!("create the stdin pipe: {e}"))?;
            (r.into(), Some(w))
        } else {
            let null = File::open("/dev/null").map_err(|e| format!("open /dev/null: {e}"))?;
            (null.into(), None)
        };
        let sp = self.spawns.add()?;
        *lock(&sp.stdin) = writer;
        let shown = serde_json::to_string(&argv).unwrap_or_default();
        self.log.write(
            format!(
                "[hull] spawn {} at {}: {shown}\n",
                sp.id,
                super::state::now_secs()
            )
            .as_bytes(),
        );
        let (s, failure) = match self.start(
            &argv,
            &merged,
            &cwd,
            &null,
            sp.group.as_deref(),
            ids.as_ref(),
        ) {
            Ok(r) => r,
            Err(e) => {
                self.spawns.forget(&sp);
                return Err(e);
            }
        };
        *lock(&sp.pid) = s.pid;
        if let Some(f) = failure {
            self.log.write(f.as_bytes());
            sp.push(wire::STDERR, f.as_bytes());
        }
        self.follow(&sp, s);
        let acked = wire::write_frame(w, wire::HANDLE, sp.id.as_bytes()).is_ok()
            && matches!(wire::read_frame(&mut reader), Ok(Some((wire::ACK, _))));
        if !acked {
            self.kill_spawn(&sp, "killed: the client went away before it got the handle");
        }
        Ok(())
    }

    /// Threads that read a spawn's output into the exec log and its buffer, and hear its exit.
    fn follow(&self, sp: &Arc<Spawned>, s: Started) {
        for (mut r, kind) in [(s.out, wire::STDOUT), (s.err, wire::STDERR)] {
            let (sp, log) = (Arc::clone(sp), Arc::clone(&self.log));
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    log.write(&buf[..n]);
                    sp.push(kind, &buf[..n]);
                }
                sp.closed();
            });
        }
        let (sp, log) = (Arc::clone(sp), Arc::clone(&self.log));
        let exit = s.exit;
        std::thread::spawn(move || {
            if let Ok(status) = exit.recv() {
                sp.exited(status);
                // Nobody reads it any more.
                lock(&sp.stdin).take();
                // Its cgroup goes once empty (rmdir refuses one that still holds what it left
                // running: that stays for a kill, until the sandbox stops).
                if let Some(g) = &sp.group {
                    let _ = std::fs::remove_dir(g);
                }
                log.write(
                    format!("[hull] spawn {} exit {}\n", sp.id, wire::exit_code(status)).as_bytes(),
                );
            }
        });
    }

    /// Kills a spawn's whole tree (see `named/spawns.rs`) and waits (bounded) for its exit
    /// status; whether anything of it was still running.
    fn kill_spawn(&self, sp: &Spawned, why: &str) -> bool {
        let was = sp.running();
        if was {
            self.log
                .write(format!("[hull] spawn {}: {why}\n", sp.id).as_bytes());
            match &sp.group {
                Some(g) => spawns::kill_group(g),
                None => {
                    let pid = *lock(&sp.pid);
                    if pid > 1 {
                        let _ = self.resident.kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while sp.status().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        was
    }

    /// `Request::Wait`: the spawn's output (with `output`) from its start, then its exit code.
    /// A client that goes away ends only the wait.
    fn wait_one(&self, w: &mut UnixStream, id: &str, output: bool) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let Some(sp) = self.spawns.get(id) else {
            let _ = wire::write_frame(w, wire::MISSING, id.as_bytes());
            return;
        };
        let mut seq = 0;
        loop {
            let sl = sp.slice(seq, Duration::from_millis(100));
            seq = sl.next;
            if output {
                if let Some(d) = sl.dropped_before {
                    if wire::write_frame(w, wire::DROPPED, &d.to_le_bytes()).is_err() {
                        return;
                    }
                }
                for (kind, data) in &sl.chunks {
                    if wire::write_frame(w, *kind, data).is_err() {
                        return;
                    }
                }
            }
            if let Some(st) = sl.done {
                let _ = wire::write_frame(w, wire::EXIT, &wire::exit_code(st).to_le_bytes());
                return;
            }
            let mut fds = [PollFd::new(&*w, PollFlags::RDHUP)];
            let now = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            if poll(&mut fds, Some(&now)).is_ok_and(|n| n > 0) {
                return;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn exec(
        &self,
        w: &mut UnixStream,
        reader: BufReader<UnixStream>,
        argv: &[String],
        env: &[(String, String)],
        cwd: Option<String>,
        stdin: bool,
        shell: bool,
        user: Option<&str>,
    ) -> Result<(), String> {
        let ((argv, merged, cwd), ids) = self.command_of(argv, env, cwd, shell, user)?;
        let input: OwnedFd = if stdin {
            let (r, w) = std::io::pipe().map_err(|e| format!("create the stdin pipe: {e}"))?;
            std::thread::spawn(move || feed_stdin(reader, w));
            r.into()
        } else {
            File::open("/dev/null")
                .map_err(|e| format!("open /dev/null: {e}"))?
                .into()
        };
        self.log_header(&argv);
        let (s, failure) = self.start(&argv, &merged, &cwd, &input, None, ids.as_ref())?;
        drop(input);
        if let Some(f) = failure {
            self.log.write(f.as_bytes());
            let _ = wire::write_frame(w, wire::STDERR, f.as_bytes());
        }
        let client = w.try_clone().map_err(|e| e.to_string())?;
        let gone = |pid: i32| {
            // The client went away (killed, interrupted): what it started goes too.
            let _ = self.resident.kill(pid, libc::SIGKILL);
            self.log
                .write(b"[hull] the client went away: the command was killed\n");
        };
        let status = drain(
            s,
            Some(&client),
            gone,
            |kind, data| {
                self.log.write(data);
                let _ = wire::write_frame(w, kind, data);
            },
            &self.log,
        )
        .map_err(|()| "the sandbox stopped while the command ran".to_string())?;
        let code = wire::exit_code(status);
        self.log.write(format!("[hull] exit {code}\n").as_bytes());
        wire::write_frame(w, wire::EXIT, &code.to_le_bytes()).map_err(|e| e.to_string())
    }

    /// Stops the sandbox after `idle_ms` without an exec, or `max_ms` in all.
    fn enforce_timeouts(&self, idle_ms: Option<u64>, max_ms: Option<u64>) {
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.now_ms();
            if max_ms.is_some_and(|m| now >= m) {
                eprintln!("hull keeper: stopped after --max-duration");
                break;
            }
            let idle = now.saturating_sub(self.last_activity.load(Ordering::SeqCst));
            if self.active.load(Ordering::SeqCst) == 0 && idle_ms.is_some_and(|m| idle >= m) {
                eprintln!("hull keeper: stopped after --idle-timeout");
                break;
            }
        }
        self.request_stop();
    }
}

/// Hands `each` the command's output as it comes (stdout and stderr, read in this thread), then
/// returns its wait status; `gone` is called (once, with the command's pid) if `client` hangs
/// up first. A command that exited while something it left behind holds its
/// output open: what comes within 200 ms of its exit is passed on, the rest goes to `log`.
/// A command that closed its output is waited for with the client still watched.
/// `Err` if the sandbox stopped before the status came.
fn drain(
    s: Started,
    mut client: Option<&UnixStream>,
    mut gone: impl FnMut(i32),
    mut each: impl FnMut(u8, &[u8]),
    log: &Arc<ExecLog>,
) -> Result<i32, ()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut open = [Some((s.out, wire::STDOUT)), Some((s.err, wire::STDERR))];
    let mut buf = vec![0u8; 64 << 10];
    let mut status = None;
    let mut grace: Option<Instant> = None;
    while open.iter().any(Option::is_some) {
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd<'_>> = open
                .iter()
                .flatten()
                .map(|(r, _)| PollFd::new(r, PollFlags::IN))
                .collect();
            // The client's hangup only (its stdin frames belong to the stdin thread).
            if let Some(c) = client {
                fds.push(PollFd::new(c, PollFlags::RDHUP));
            }
            let tick = Timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            if poll(&mut fds, Some(&tick)).is_err() {
                return Err(());
            }
            fds.iter().map(|f| !f.revents().is_empty()).collect()
        };
        if client.is_some() && ready.last().copied().unwrap_or(false) {
            client = None;
            gone(s.pid);
        }
        let mut at = 0;
        for slot in &mut open {
            let Some((r, kind)) = slot else { continue };
            let hit = ready.get(at).copied().unwrap_or(false);
            at += 1;
            if !hit {
                continue;
            }
            match r.read(&mut buf) {
                Ok(0) | Err(_) => *slot = None,
                Ok(n) => each(*kind, &buf[..n]),
            }
        }
        if !ready.iter().any(|&r| r) {
            if status.is_none() {
                status = s.exit.try_recv().ok();
            }
            if status.is_some() {
                let since = *grace.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(200) {
                    // What the command left running keeps its output: read on into the
                    // exec log (else its next write would die of SIGPIPE).
                    for (r, _) in open.iter_mut().filter_map(Option::take) {
                        keep_logging(r, Arc::clone(log));
                    }
                    break;
                }
            }
        }
    }
    if let Some(st) = status {
        return Ok(st);
    }
    // The output is closed (the command redirected it, `nohup server >log 2>&1`) and the
    // command runs on: wait for its exit, still watching the client's hangup.
    loop {
        if let Some(c) = client {
            let mut fds = [PollFd::new(c, PollFlags::RDHUP)];
            let now = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            if poll(&mut fds, Some(&now)).is_ok_and(|n| n > 0) {
                client = None;
                gone(s.pid);
            }
        }
        match s.exit.recv_timeout(Duration::from_millis(50)) {
            Ok(st) => return Ok(st),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(()),
        }
    }
}

/// Reads what a command's background processes print, after the command's end, into the exec
/// log until they close it.
fn keep_logging(mut r: std::io::PipeReader, log: Arc<ExecLog>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 << 10];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            log.write(&buf[..n]);
        }
    });
}

/// A client's STDIN frames, to their STDIN_END, as a reader (a file write's data): the
/// connection, whether the end came, what is left of the last frame.
struct StdinFrames(BufReader<UnixStream>, bool, Vec<u8>);

impl Read for StdinFrames {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if !self.2.is_empty() || self.1 {
                let n = self.2.len().min(buf.len());
                buf[..n].copy_from_slice(&self.2[..n]);
                self.2.drain(..n);
                return Ok(n);
            }
            match wire::read_frame(&mut self.0)? {
                Some((wire::STDIN, data)) => self.2 = data,
                Some((wire::STDIN_END, _)) => self.1 = true,
                _ => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the client went away before the end of the data",
                    ))
                }
            }
        }
    }
}

/// How a spawn is started (beside its argv and environment).
struct SpawnHow<'a> {
    cwd: Option<String>,
    shell: bool,
    user: Option<&'a str>,
    stdin: bool,
}

/// A `Stdin` request: the client's frames into the spawn's stdin pipe, then its close with
/// `eof`. The pipe is taken out of the spawn while written, so a write blocked on a process that
/// does not read holds no lock (a second writer meanwhile is told the stdin is busy).
fn write_stdin(sp: &Spawned, mut reader: BufReader<UnixStream>, eof: bool) -> Result<(), String> {
    let mut pipe = lock(&sp.stdin).take();
    // The data is read to its end either way, so the client's frames are never refused mid-way.
    let mut result = match pipe {
        Some(_) => Ok(()),
        None => Err(format!(
            "spawn {} has no stdin to write to (made without `stdin`, closed, busy with another write, or ended)",
            sp.id
        )),
    };
    loop {
        match wire::read_frame(&mut reader) {
            Ok(Some((wire::STDIN, data))) => {
                if let (Ok(()), Some(p)) = (&result, pipe.as_mut()) {
                    if let Err(e) = p.write_all(&data) {
                        result = Err(format!("write to the stdin of spawn {}: {e}", sp.id));
                    }
                }
            }
            Ok(Some((wire::STDIN_END, _))) => break,
            _ => {
                result = Err("the client went away before the end of the data".to_string());
                break;
            }
        }
    }
    // Kept for the next write unless closed (a process that closed its end will not read).
    if !eof && result.is_ok() {
        *lock(&sp.stdin) = pipe;
    }
    result
}

/// Copies the client's stdin frames into the command's stdin until their end.
fn feed_stdin(mut reader: BufReader<UnixStream>, mut w: std::io::PipeWriter) {
    while let Ok(Some((kind, data))) = wire::read_frame(&mut reader) {
        match kind {
            wire::STDIN => {
                if w.write_all(&data).is_err() {
                    break;
                }
            }
            _ => break,
        }
    }
}
