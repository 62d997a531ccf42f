//! Named sandboxes that live on: `hull create`, `exec`, `stop`, `start`, `rm`, `ps`, `logs`.
//!
//! A sandbox is a state directory ([`state`]) and, while it runs, one keeper process
//! ([`keeper`]) holding its resident box (hull-box's `Resident`: a box whose pid 1 starts
//! programs on request). Every verb but `create` finds the sandbox by name, and any process of
//! the same user can use it: the keeper outlives whoever started it. See `docs/named.md`.

pub mod client;
pub mod keeper;
pub mod logs;
pub mod state;
pub mod wire;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use hull_api::{duration, size};

use state::{Config, Dir};
use wire::Request;

#[derive(Args, Debug)]
#[command(
    after_help = "The sandbox keeps running after this command exits; `hull exec NAME -- CMD` runs commands in it, `hull stop NAME` stops it (its disk stays), `hull rm NAME` removes it.\n\nExamples:\n  hull create dev --setup 'mkdir -p /workspace/src'\n  hull create ci --image busybox:1 --memory 512m --idle-timeout 30m"
)]
pub struct CreateArgs {
    /// The sandbox's name: 1 to 63 of a-z, 0-9, `_`, `.`, `-`, starting with a letter or digit.
    pub name: String,
    /// Image: `host` (the default) or one of the local store.
    #[arg(long, default_value = "host")]
    pub image: String,
    /// Host directory at /workspace, read-write (default: the sandbox's own disk).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Host directory mounted read-only at the same path in the sandbox. Repeatable.
    #[arg(long, value_name = "DIR")]
    pub ro_workspace: Vec<PathBuf>,
    /// Memory cap with a unit (e.g. 512m).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// CPU cap in CPUs (e.g. 0.5, 2).
    #[arg(long, value_name = "N")]
    pub cpus: Option<f64>,
    /// Process/thread cap for the whole sandbox (0 = none).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub pids: u64,
    /// An environment variable of every command, NAME=VALUE. Repeatable.
    #[arg(long, short = 'e', value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// A shell command run once at creation; a failure removes the sandbox. Repeatable.
    #[arg(long, value_name = "CMD")]
    pub setup: Vec<String>,
    /// Stop the sandbox after this long without an exec (e.g. 30m).
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    /// Stop the sandbox after this long in all, once started (e.g. 8h).
    #[arg(long, value_name = "DURATION")]
    pub max_duration: Option<String>,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: the command's (128+N if it died of signal N, 127 if it could not be executed); 125 if hull could not run it.\n\nExamples:\n  hull exec dev -- python3 -c 'print(1)'\n  hull exec dev -e TOKEN=x -w /tmp --shell -- 'echo $TOKEN > f && cat f'"
)]
pub struct ExecArgs {
    pub name: String,
    /// An environment variable for this command only, NAME=VALUE (merged over the sandbox's). Repeatable.
    #[arg(long, short = 'e', value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Working directory in the sandbox (default: the image's, else /workspace).
    #[arg(long, short = 'w', value_name = "DIR")]
    pub workdir: Option<String>,
    /// Give the command this process's standard input (default: closed, unless it is piped).
    #[arg(long, short = 'i')]
    pub interactive: bool,
    /// The command is one shell string, run by bash (sh where the image has no bash).
    #[arg(long)]
    pub shell: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct NameArgs {
    pub name: String,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    pub name: String,
    /// Keep printing what later commands print.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

#[derive(Args, Debug)]
pub struct PsArgs {
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct KeeperArgs {
    /// Start a session and the keeper, then exit (what `hull create`/`start` run).
    #[arg(long)]
    pub launch: bool,
    pub dir: PathBuf,
}

/// Prints `e` as hull's errors are printed and returns 125.
fn fail(e: &str) -> i32 {
    eprintln!("hull: {e}");
    125
}

fn env_pairs(list: &[String], flag: &str) -> Result<Vec<(String, String)>, String> {
    list.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!("{flag} `{kv}`: expected NAME=VALUE")),
        })
        .collect()
}

fn millis(flag: &str, text: Option<&str>) -> Result<Option<u64>, String> {
    text.map(|t| {
        duration::parse_duration(t)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .map_err(|e| format!("{flag}: {e}"))
    })
    .transpose()
}

fn config_of(a: &CreateArgs) -> Result<Config, String> {
    let memory = a
        .memory
        .as_deref()
        .map(|m| size::parse_size(m).map_err(|e| format!("--memory: {e}")))
        .transpose()?;
    let abs = |p: &PathBuf, flag: &str| {
        std::fs::canonicalize(p).map_err(|e| format!("{flag} {}: {e}", p.display()))
    };
    Ok(Config {
        name: a.name.clone(),
        image: a.image.clone(),
        workspace: a
            .workspace
            .as_ref()
            .map(|w| abs(w, "--workspace"))
            .transpose()?,
        ro_workspaces: a
            .ro_workspace
            .iter()
            .map(|w| abs(w, "--ro-workspace"))
            .collect::<Result<_, _>>()?,
        memory,
        cpus: a.cpus,
        pids: (a.pids != 0).then_some(a.pids),
        env: env_pairs(&a.env, "--env")?,
        setup: a.setup.clone(),
        idle_timeout_ms: millis("--idle-timeout", a.idle_timeout.as_deref())?,
        max_duration_ms: millis("--max-duration", a.max_duration.as_deref())?,
        created: state::now_secs(),
    })
}

/// `hull create`.
pub fn create(a: &CreateArgs) -> i32 {
    let dir = match Dir::of(&a.name) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let cfg = match config_of(a) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    match create_with(&dir, &cfg) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

/// Makes the sandbox `dir` with `cfg` and starts it (`hull create`, `named.create` of `hull
/// serve`): a taken name is a conflict; a failure leaves nothing.
pub fn create_with(dir: &Dir, cfg: &Config) -> Result<(), String> {
    dir.make()?;
    // A spec that cannot work is refused before any keeper starts; a failure leaves nothing.
    let made = dir
        .write_config(cfg)
        .and_then(|()| {
            std::fs::create_dir(dir.workspace())
                .map_err(|e| format!("create {}: {e}", dir.workspace().display()))
        })
        .and_then(|()| keeper::spec_of(dir, cfg))
        .and_then(|spec| spec.validate().map_err(|e| hull_api::Chain(&e).to_string()))
        .and_then(|()| client::launch(dir));
    made.map_err(|e| {
        let _ = remove_dir(dir);
        format!("could not create sandbox `{}`: {e}", dir.name)
    })
}

/// `hull exec`.
pub fn exec(a: &ExecArgs) -> i32 {
    let dir = match Dir::of(&a.name) {
        Ok(d) if d.exists() => d,
        Ok(_) => return fail(&format!("no sandbox named `{}` (see `hull ps`)", a.name)),
        Err(e) => return fail(&e),
    };
    let env = match env_pairs(&a.env, "-e") {
        Ok(e) => e,
        Err(e) => return fail(&e),
    };
    let stdin = a.interactive || stdin_is_piped();
    let req = Request::Exec {
        argv: a.command.clone(),
        env,
        cwd: a.workdir.clone(),
        stdin,
        shell: a.shell,
    };
    let conn = match client::connect(&dir, true) {
        Ok(Some(c)) => c,
        Ok(None) => return fail(&format!("sandbox `{}` did not start", a.name)),
        Err(e) => return fail(&e),
    };
    match client::run(conn, &req, stdin) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

/// Whether our stdin is a pipe or a file (given to the command as it is).
fn stdin_is_piped() -> bool {
    let Ok(st) = rustix::fs::fstat(std::io::stdin()) else {
        return false;
    };
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    matches!(
        kind,
        rustix::fs::FileType::Fifo | rustix::fs::FileType::RegularFile
    )
}

/// `hull stop`.
pub fn stop(a: &NameArgs) -> i32 {
    match Dir::of(&a.name) {
        Ok(d) if d.exists() => match client::stop(&d) {
            Ok(()) => 0,
            Err(e) => fail(&e),
        },
        Ok(_) => fail(&format!("no sandbox named `{}` (see `hull ps`)", a.name)),
        Err(e) => fail(&e),
    }
}

/// `hull start`.
pub fn start(a: &NameArgs) -> i32 {
    let dir = match Dir::of(&a.name) {
        Ok(d) if d.exists() => d,
        Ok(_) => return fail(&format!("no sandbox named `{}` (see `hull ps`)", a.name)),
        Err(e) => return fail(&e),
    };
    if dir.running() {
        return 0;
    }
    match client::launch(&dir) {
        Ok(()) => 0,
        Err(e) => fail(&format!("could not start sandbox `{}`: {e}", a.name)),
    }
}

/// `hull rm`: stops the sandbox if it runs and removes its directory; a missing one is fine.
pub fn rm(a: &NameArgs) -> i32 {
    let dir = match Dir::of(&a.name) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    match remove(&dir) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

/// Stops the sandbox if it runs and removes its directory; a missing one is fine.
pub fn remove(dir: &Dir) -> Result<(), String> {
    if !dir.path.exists() {
        return Ok(());
    }
    client::stop(dir)?;
    remove_dir(dir).map_err(|e| format!("remove {}: {e}", dir.path.display()))
}

fn remove_dir(dir: &Dir) -> std::io::Result<()> {
    match std::fs::remove_dir_all(&dir.path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            // Directories the sandbox (or overlayfs: `work/work` is mode 000) made unreadable
            // to their owner: opened up, then removed.
            open_up(&dir.path, 0);
            std::fs::remove_dir_all(&dir.path)
        }
        r => r,
    }
}

/// Gives every directory under `p` (not following links) its owner's rwx.
fn open_up(p: &std::path::Path, depth: usize) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return;
    };
    if !md.is_dir() || depth > 256 {
        return;
    }
    let mode = md.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            open_up(&e.path(), depth + 1);
        }
    }
}

/// A short age: `42s`, `5m`, `3h`, `2d`.
fn age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `hull ps`.
pub fn ps(a: &PsArgs) -> i32 {
    let mut out = std::io::stdout().lock();
    if !a.json {
        let _ = writeln!(
            out,
            "{:<24} {:<8} {:<20} {:>6} {:>10}",
            "NAME", "STATE", "IMAGE", "AGE", "SIZE"
        );
    }
    for d in state::list() {
        let Ok(cfg) = d.config() else { continue };
        let st = if d.running() { "running" } else { "stopped" };
        let age_s = state::now_secs().saturating_sub(cfg.created);
        let size = d.size();
        let _ = if a.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({"name": d.name, "state": st, "image": cfg.image, "age_s": age_s, "size_bytes": size})
            )
        } else {
            writeln!(
                out,
                "{:<24} {:<8} {:<20} {:>6} {:>10}",
                d.name,
                st,
                cfg.image,
                age(age_s),
                hull_box::size::Human(size).to_string()
            )
        };
    }
    0
}

/// `hull logs`.
pub fn logs(a: &LogsArgs) -> i32 {
    let dir = match Dir::of(&a.name) {
        Ok(d) if d.exists() => d,
        Ok(_) => return fail(&format!("no sandbox named `{}` (see `hull ps`)", a.name)),
        Err(e) => return fail(&e),
    };
    let mut out = std::io::stdout().lock();
    let older = dir.logs().join("exec.log.1");
    let current = dir.logs().join("exec.log");
    if let Ok(b) = std::fs::read(&older) {
        let _ = out.write_all(&b);
    }
    let mut at = match std::fs::read(&current) {
        Ok(b) => {
            let _ = out.write_all(&b);
            b.len() as u64
        }
        Err(_) => 0,
    };
    let _ = out.flush();
    if !a.follow {
        return 0;
    }
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if !dir.path.exists() {
            return 0;
        }
        let Ok(mut f) = std::fs::File::open(&current) else {
            continue;
        };
        let len = f.metadata().map_or(0, |m| m.len());
        if len < at {
            // Rotated: the new file from its start.
            at = 0;
        }
        if len > at {
            use std::io::{Read, Seek, SeekFrom};
            let mut buf = Vec::new();
            if f.seek(SeekFrom::Start(at)).is_ok() && f.read_to_end(&mut buf).is_ok() {
                at += buf.len() as u64;
                if out.write_all(&buf).and_then(|()| out.flush()).is_err() {
                    return 0;
                }
            }
        }
    }
}

/// `hull __keeper`.
pub fn keeper_main(a: &KeeperArgs) -> i32 {
    if a.launch {
        client::launcher(&a.dir)
    } else {
        keeper::main(&a.dir)
    }
}
