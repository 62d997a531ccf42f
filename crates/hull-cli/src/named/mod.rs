//! Named sandboxes that live on: `hull create`, `exec`, `stop`, `start`, `rm`, `ps`, `logs`.
//!
//! A sandbox is a state directory ([`state`]) and, while it runs, one keeper process
//! ([`keeper`]) holding its resident box (hull-box's `Resident`: a box whose pid 1 starts
//! programs on request). Every verb but `create` finds the sandbox by name, and any process of
//! the same user can use it: the keeper outlives whoever started it. See `docs/named.md`.

pub mod client;
pub mod files;
pub mod files_ns;
pub mod fuse;
pub mod keeper;
pub mod logs;
pub mod peer;
pub mod spawns;
pub mod state;
pub mod template;
pub mod tidy;
pub mod users;
pub mod wire;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use hull_api::{duration, size};

use state::{Config, Dir};
use wire::Request;

#[derive(Args, Debug)]
#[command(
    after_help = "The sandbox keeps running after this command exits; `hull exec NAME -- CMD` runs commands in it, `hull stop NAME` stops it (its disk stays), `hull rm NAME` removes it.\n\nTemplates: `--template T` starts from template T's disk and configuration. With `--template-setup CMD`, a missing T is built first (a sandbox of the image with CMD as its setup, stopped and saved as T; one creator builds while others wait, and a failed build leaves nothing); an existing T is used as it is, CMD not run. `--setup` always runs once in the new sandbox itself, over the template's disk.\n\nExamples:\n  hull create dev --setup 'mkdir -p /workspace/src'\n  hull create ci --image busybox:1 --memory 512m --idle-timeout 30m\n  hull create dev2 --template py --template-setup 'python3 -m venv /opt/venv' --setup 'git -C /workspace init'"
)]
pub struct CreateArgs {
    /// The sandbox's name: 1 to 63 of a-z, 0-9, `_`, `.`, `-`, starting with a letter or digit.
    pub name: String,
    /// Image: `host` (the default) or one of the local store (with --template: the template's).
    #[arg(long)]
    pub image: Option<String>,
    /// Start from this template (`hull template save`): its disk and configuration, its setup
    /// not run again. Other options given here override the template's.
    #[arg(long, value_name = "NAME")]
    pub template: Option<String>,
    /// With --template T: when T does not exist, build it first from the image (with --env, the
    /// caps and --ro-workspace given here) with these commands as its setup, and save it as T.
    /// When T exists they are not run (T must have been built with the same commands).
    /// Concurrent creators build T once. Repeatable.
    #[arg(long, value_name = "CMD", requires = "template")]
    pub template_setup: Vec<String>,
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
    /// Process/thread cap for the whole sandbox (0 = none; default 1024).
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// An environment variable of every command, NAME=VALUE, or NAME to take this one's value.
    /// Repeatable.
    #[arg(long, short = 'e', value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// A shell command run once at creation, in this sandbox (with --template: over the
    /// template's disk, every time a sandbox is made from it); a failure removes the sandbox.
    /// Repeatable.
    #[arg(long, value_name = "CMD")]
    pub setup: Vec<String>,
    /// How long each --setup command may run before it is killed and the creation fails.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub setup_timeout: String,
    /// Stop the sandbox after this long without an exec (e.g. 30m).
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    /// Stop the sandbox after this long in all, once started (e.g. 8h).
    #[arg(long, value_name = "DURATION")]
    pub max_duration: Option<String>,
    /// Run every command as this user of the image (NAME, UID, NAME:GROUP or UID:GID, from
    /// its /etc/passwd); --setup commands run as root, /workspace and the user's home are
    /// made the user's. Default: root.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    #[command(flatten)]
    pub net: crate::net_args::NetworkArgs,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: the command's (128+N if it died of signal N, 127 if it was not found, 126 if it could not be executed); 125 if hull could not run it.\n\nExamples:\n  hull exec dev -- python3 -c 'print(1)'\n  hull exec dev -e TOKEN=x -w /tmp --shell -- 'echo $TOKEN > f && cat f'"
)]
pub struct ExecArgs {
    pub name: String,
    /// An environment variable for this command only, NAME=VALUE, or NAME to pass this one's
    /// value without writing it on the command line (merged over the sandbox's). Repeatable.
    #[arg(long, short = 'e', value_name = "NAME[=VALUE]")]
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
    /// Run this command as this user of the image (NAME, UID, NAME:GROUP or UID:GID; `root`
    /// too) instead of the sandbox's --user.
    #[arg(long, short = 'u', value_name = "USER")]
    pub user: Option<String>,
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
            // A bare NAME takes its value from our own environment, so a secret need not be
            // written on hull's command line (where `ps` shows it), as docker's `-e NAME`.
            None if !kv.is_empty() => std::env::var(kv)
                .map(|v| (kv.clone(), v))
                .map_err(|_| {
                    format!(
                        "{flag} `{kv}`: no variable {kv} in this environment (or not UTF-8); give NAME=VALUE, or export {kv} first"
                    )
                }),
            _ => Err(format!("{flag} `{kv}`: expected NAME=VALUE or NAME")),
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

/// The default process cap of a sandbox.
const DEFAULT_PIDS: u64 = 1024;

/// The configuration `a` asks for, over template `base`'s when given.
fn config_of(a: &CreateArgs, base: Option<&template::Template>) -> Result<Config, String> {
    let c = config_of_args(a)?;
    match base {
        None => Ok(c),
        Some(t) => over_template(
            t,
            &a.name,
            c,
            Given {
                image: a.image.is_some(),
                workspace: a.workspace.is_some(),
                pids: a.pids.is_some(),
                user: a.user.is_some(),
                network: a.net != crate::net_args::NetworkArgs::default(),
            },
        ),
    }
}

/// Which options of a creation from a template the caller gave (the others are the template's).
#[derive(Debug, Clone, Copy)]
pub struct Given {
    pub image: bool,
    pub workspace: bool,
    pub pids: bool,
    pub user: bool,
    /// The network or secrets (given, they replace the template's).
    pub network: bool,
}

/// The configuration of sandbox `name` made from template `t` with the options of `c` that the
/// caller gave over the template's (`hull create --template`, `named.create` with `template`):
/// another image or a `--workspace` is refused (the layers lie over the template's image, and
/// `/workspace` is the template's); `--ro-workspace`s and `--env` are added; setup runs again
/// only as given here.
pub fn over_template(
    t: &template::Template,
    name: &str,
    mut c: Config,
    given: Given,
) -> Result<Config, String> {
    let mut b = template::config_for(t, name);
    if given.image && c.image != b.image {
        return Err(format!(
            "--image {}: template `{}` is of image `{}` (its layers lie over that image)",
            c.image, t.name, b.image
        ));
    }
    if given.workspace {
        return Err(
            "--workspace: a sandbox made from a template has its /workspace from the template"
                .into(),
        );
    }
    for w in c.ro_workspaces.drain(..) {
        // The same directory given again (as a template built on demand was) is mounted once.
        if !b.ro_workspaces.contains(&w) {
            b.ro_workspaces.push(w);
        }
    }
    b.memory = c.memory.or(b.memory);
    b.cpus = c.cpus.or(b.cpus);
    if given.pids {
        b.pids = c.pids;
    }
    b.env.append(&mut c.env);
    b.setup = std::mem::take(&mut c.setup);
    b.setup_timeout_ms = c.setup_timeout_ms;
    b.idle_timeout_ms = c.idle_timeout_ms.or(b.idle_timeout_ms);
    b.max_duration_ms = c.max_duration_ms.or(b.max_duration_ms);
    if given.user {
        b.user = c.user;
    }
    if given.network {
        b.network = c.network;
        b.secrets = c.secrets;
        b.brokering = c.brokering;
    }
    Ok(b)
}

fn config_of_args(a: &CreateArgs) -> Result<Config, String> {
    let memory = a
        .memory
        .as_deref()
        .map(|m| size::parse_size(m).map_err(|e| format!("--memory: {e}")))
        .transpose()?;
    let (network, secrets) = a.net.request()?;
    let abs = |p: &PathBuf, flag: &str| {
        std::fs::canonicalize(p).map_err(|e| format!("{flag} {}: {e}", p.display()))
    };
    Ok(Config {
        name: a.name.clone(),
        image: a.image.clone().unwrap_or_else(|| "host".into()),
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
        pids: Some(a.pids.unwrap_or(DEFAULT_PIDS)).filter(|&p| p != 0),
        env: env_pairs(&a.env, "--env")?,
        setup: a.setup.clone(),
        setup_timeout_ms: millis("--setup-timeout", Some(&a.setup_timeout))?,
        idle_timeout_ms: millis("--idle-timeout", a.idle_timeout.as_deref())?,
        max_duration_ms: millis("--max-duration", a.max_duration.as_deref())?,
        created: state::now_secs(),
        layers: Vec::new(),
        template: None,
        user: a.user.clone(),
        network,
        secrets,
        brokering: false,
    })
}

/// `hull create`.
pub fn create(a: &CreateArgs) -> i32 {
    let dir = match Dir::of(&a.name) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    if let (Some(t), false) = (&a.template, a.template_setup.is_empty()) {
        // Refused before a template is built for it.
        if a.workspace.is_some() {
            return fail(
                "--workspace: a sandbox made from a template has its /workspace from the template",
            );
        }
        if dir.path.exists() {
            return fail(&format!(
                "a sandbox named `{}` already exists (conflict): `hull rm {}` first, or pick another name",
                a.name, a.name
            ));
        }
        if let Err(e) = ensure_template(a, t) {
            return fail(&format!("could not build template `{t}`: {e}"));
        }
    }
    // A template is read, and the new sandbox's configuration (naming its layers) written,
    // under the store's shared lock: its layers cannot go meanwhile.
    let store = match &a.template {
        Some(_) => match template::Lock::take(false) {
            Ok(l) => Some(l),
            Err(e) => return fail(&e),
        },
        None => None,
    };
    let base = match a.template.as_deref().map(template::get).transpose() {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    let cfg = match config_of(a, base.as_ref()) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    match create_with(&dir, &cfg, store) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

/// Template `name` built on demand for `a` (`--template-setup`): returns once it exists, built
/// by this process or, while another builds it, by that one (waited for under the build lock).
/// A template that exists must have been built with the same commands.
fn ensure_template(a: &CreateArgs, name: &str) -> Result<(), String> {
    let existing = || -> Result<Option<template::Template>, String> {
        let _store = template::Lock::take(false)?;
        template::find(name)
    };
    let same = |t: template::Template| {
        if t.config.setup == a.template_setup {
            Ok(())
        } else {
            Err(format!(
                "--template-setup: template `{name}` exists with other setup commands ({:?}), which are not run again; leave --template-setup out to use it as it is, or `hull template rm {name}` to build it anew",
                t.config.setup
            ))
        }
    };
    if let Some(t) = existing()? {
        return same(t);
    }
    let _building = template::BuildLock::take(name, || {
        crate::verbosity::notice(
            "hull",
            format!("waiting for template `{name}`: another process is building it"),
        );
    })?;
    if let Some(t) = existing()? {
        return same(t);
    }
    crate::verbosity::notice(
        "hull",
        format!(
            "building template `{name}` ({} setup command{})",
            a.template_setup.len(),
            if a.template_setup.len() == 1 { "" } else { "s" }
        ),
    );
    build_template(a, name)
}

/// Builds template `name` (the caller holds its build lock): a hidden sandbox `.build-NAME`
/// of `a`'s image and options with the `--template-setup` commands as its setup, stopped,
/// saved and removed. A failure removes it and saves nothing.
fn build_template(a: &CreateArgs, name: &str) -> Result<(), String> {
    let builder = Dir {
        name: format!(".build-{name}"),
        path: state::root().join(format!(".build-{name}")),
    };
    // One a builder that died midway left (we hold the build lock, so no build is live).
    if builder.path.exists() {
        remove(&builder)?;
    }
    let mut cfg = config_of_args(a)?;
    cfg.name = name.to_string();
    cfg.setup = a.template_setup.clone();
    make(&builder, &cfg, None)?;
    let saved = client::stop(&builder).and_then(|()| template::save_dir(&builder, "(built)", name));
    // The template holds the layer now; the builder goes (and, after a failure, its disk too).
    let removed = remove(&builder);
    saved.and(removed)
}

/// Makes the sandbox `dir` with `cfg` and starts it (`hull create`, `named.create` of `hull
/// serve`): a taken name is a conflict; a failure leaves nothing. `store`, the template store's
/// lock when `cfg` names template layers, is held until the configuration is written.
pub fn create_with(dir: &Dir, cfg: &Config, store: Option<template::Lock>) -> Result<(), String> {
    make(dir, cfg, store).map_err(|e| format!("could not create sandbox `{}`: {e}", dir.name))
}

/// [`create_with`] without naming the sandbox in its error.
fn make(dir: &Dir, cfg: &Config, store: Option<template::Lock>) -> Result<(), String> {
    dir.make()?;
    // A spec that cannot work is refused before any keeper starts; a failure leaves nothing.
    let written = dir.write_config(cfg);
    drop(store);
    let made = written
        .and_then(|()| keeper::spec_of(dir, cfg))
        .and_then(|spec| spec.validate().map_err(|e| hull_api::Chain(&e).to_string()))
        .and_then(|()| client::launch(dir));
    made.inspect_err(|_| {
        let _ = remove_dir(dir);
        if !cfg.layers.is_empty() {
            template::collect_locked();
        }
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
    if let Some(w) = a.workdir.as_deref().filter(|w| !w.starts_with('/')) {
        return fail(&format!(
            "-w/--workdir: `{w}` is not an absolute path; give the directory in the sandbox from /, e.g. /workspace/{w}"
        ));
    }
    let stdin = a.interactive || stdin_is_piped();
    let req = Request::Exec {
        argv: a.command.clone(),
        env,
        cwd: a.workdir.clone(),
        stdin,
        shell: a.shell,
        user: a.user.clone(),
    };
    let conn = match client::open(&dir, true, &req) {
        Ok(Some(c)) => c,
        Ok(None) => return fail(&format!("sandbox `{}` did not start", a.name)),
        Err(e) => return fail(&e),
    };
    match client::run(conn, stdin) {
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

/// Removes the sandbox `dir`, running or stopped (`hull rm`, `named.rm` of `hull serve`); a
/// missing one is fine.
pub fn remove(dir: &Dir) -> Result<(), String> {
    if !dir.path.exists() {
        return Ok(());
    }
    // Stopped, and kept stopped: holding the keeper's lock, no keeper can start (an exec of the
    // same name racing this one would), and the directory leaves its name before it is
    // emptied, so no later launcher finds half of it.
    let _held = client::stop_and_hold(dir)?;
    let tomb = dir
        .path
        .with_file_name(format!(".removing-{}-{}", dir.name, std::process::id()));
    if let Err(e) = std::fs::rename(&dir.path, &tomb) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Ok(());
        }
        return Err(format!("remove {}: {e}", dir.path.display()));
    }
    let gone = Dir {
        name: dir.name.clone(),
        path: tomb,
    };
    let layers = gone.config().is_ok_and(|c| !c.layers.is_empty());
    remove_dir(&gone).map_err(|e| format!("remove {}: {e}", gone.path.display()))?;
    // The last sandbox on a removed template's layers frees them.
    if layers {
        template::collect_locked();
    }
    Ok(())
}

#[derive(clap::Subcommand, Debug)]
pub enum TemplateCommand {
    /// Freeze a stopped sandbox's disk and configuration as a template.
    Save { sandbox: String, name: String },
    /// List templates.
    Ls {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove a template (sandboxes made from it keep working).
    Rm { name: String },
    /// Remove templates saved longer ago than a duration (e.g. 7d).
    Prune {
        #[arg(long, value_name = "DURATION")]
        older_than: String,
    },
}

#[cfg(test)]
mod tests {
    #[test]
    fn ages_have_a_unit() {
        assert_eq!(super::age_secs("0s"), Some(0));
        assert_eq!(super::age_secs("30d"), Some(30 * 86400));
        assert_eq!(super::age_secs("5m"), Some(300));
        for bad in ["", "5", "d", "-1d", "1.5h", "1w"] {
            assert_eq!(super::age_secs(bad), None, "{bad}");
        }
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "A template is saved from a stopped sandbox and restored as a read-only layer under a new sandbox's own (nothing is copied; its setup does not run again).\n\nExamples:\n  hull create base --setup 'mkdir -p /opt/tools'\n  hull stop base && hull template save base tools\n  hull create dev --template tools"
)]
pub struct TemplateArgs {
    #[command(subcommand)]
    pub command: TemplateCommand,
}

/// `hull template ...`.
pub fn template_main(a: &TemplateArgs) -> i32 {
    match &a.command {
        TemplateCommand::Save { sandbox, name } => match template::save(sandbox, name) {
            Ok(()) => 0,
            Err(e) => fail(&format!("could not save template `{name}`: {e}")),
        },
        TemplateCommand::Ls { json } => {
            template::print_list(*json);
            0
        }
        TemplateCommand::Rm { name } => match template::rm(name) {
            Ok(()) => 0,
            Err(e) => fail(&e),
        },
        TemplateCommand::Prune { older_than } => {
            let Some(secs) = age_secs(older_than) else {
                return fail(&format!(
                    "--older-than `{older_than}`: expected a whole number with a unit s, m, h or d (e.g. 30m, 7d)"
                ));
            };
            match template::prune(secs) {
                Ok(gone) => {
                    for n in gone {
                        println!("{n}");
                    }
                    0
                }
                Err(e) => fail(&e),
            }
        }
    }
}

fn remove_dir(dir: &Dir) -> std::io::Result<()> {
    tidy::remove_tree(&dir.path)
}

/// An age like `90s`, `30m`, `12h`, `30d` in seconds (longer than a timeout's durations go,
/// and `0s` for everything).
fn age_secs(text: &str) -> Option<u64> {
    let unit = match text.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86400,
        _ => return None,
    };
    let n: u64 = text[..text.len() - 1].parse().ok()?;
    n.checked_mul(unit)
}

/// `hull ps`.
pub fn ps(a: &PsArgs) -> i32 {
    let mut out = std::io::stdout().lock();
    if !a.json {
        let _ = writeln!(
            out,
            "{:<24} {:<8} {:<20} {:<12} {:>6} {:>10}",
            "NAME", "STATE", "IMAGE", "USER", "AGE", "SIZE"
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
                serde_json::json!({"name": d.name, "state": st, "image": cfg.image, "user": cfg.user.as_deref().unwrap_or("root"), "template": cfg.template, "age_s": age_s, "size_bytes": size})
            )
        } else {
            writeln!(
                out,
                "{:<24} {:<8} {:<20} {:<12} {:>6} {:>10}",
                d.name,
                st,
                cfg.image,
                cfg.user.as_deref().unwrap_or("root"),
                tidy::age(age_s),
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
    logs::print(&dir.logs(), &mut out, a.follow, || dir.path.exists());
    0
}

/// `hull __keeper`.
pub fn keeper_main(a: &KeeperArgs) -> i32 {
    if a.launch {
        client::launcher(&a.dir)
    } else {
        keeper::main(&a.dir)
    }
}
