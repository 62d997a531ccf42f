//! `hull run`: one fresh box per call.

use std::io::Write;
use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;
use hull::error::Named;
use hull_api::{duration, size, Chain, Language, Mount, RunRequest, Tmpfs};
use hull_box::spec::DEFAULT_PIDS;
use hull_box::{BoxError, OutputSink, RunOptions, Runtime, SpecField, Stream};

/// `--language`: the names (and aliases) [`Language`] reads.
fn language_parser() -> impl TypedValueParser<Value = Language> {
    PossibleValuesParser::new([
        PossibleValue::new("python").alias("python3"),
        PossibleValue::new("bash"),
        PossibleValue::new("sh"),
        PossibleValue::new("node").alias("javascript"),
    ])
    .map(|s| {
        s.parse::<Language>()
            .expect("every listed name is a language")
    })
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: the program's own exit code (128+N if it died of signal N; 127 if it was not found, 126 if it could not be executed); 125 if the box could not be built.\n\nExamples:\n  hull run -- python3 -c 'print(1)'\n  hull run --code 'import sys; print(sys.version)'\n  hull run --json --memory 64m --timeout 2s --code 'x = bytearray(200 << 20)'"
)]
pub struct RunArgs {
    /// Code to run with --language's interpreter instead of a command.
    #[arg(long, conflicts_with = "command")]
    pub code: Option<String>,
    /// Interpreter for --code.
    #[arg(long, default_value = "python", requires = "code", value_parser = language_parser())]
    pub language: Language,
    /// Print the result as one JSON object instead of streaming the output.
    #[arg(long)]
    pub json: bool,
    /// Print the ordered setup steps of the box and exit without running anything.
    #[arg(long)]
    pub plan: bool,
    /// Image to run on. `host` (the default) is a read-only view of this host's /usr, /bin, /lib* and a curated /etc.
    #[arg(long, default_value = "host", conflicts_with = "rootfs")]
    pub image: String,
    /// An unpacked root filesystem directory to use as the box's read-only root.
    #[arg(long, value_name = "DIR")]
    pub rootfs: Option<PathBuf>,
    /// Host directory mounted read-write at /workspace (default: a fresh temporary directory, deleted at exit).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Size of the private /tmp tmpfs, with a unit (e.g. 64m, 1g).
    #[arg(long, value_name = "SIZE", default_value = "64m")]
    pub tmp_size: String,
    /// An extra tmpfs, PATH=SIZE (e.g. /cache=128m). Repeatable.
    #[arg(long, value_name = "PATH=SIZE")]
    pub tmpfs: Vec<String>,
    /// Bind a host path into the box: SRC:DST[:ro|rw] (default rw). Repeatable. `-v`/`--volume`
    /// is docker's spelling of the same.
    #[arg(
        long,
        short = 'v',
        visible_alias = "volume",
        value_name = "SRC:DST[:ro]"
    )]
    pub mount: Vec<String>,
    /// `--network` and the gateway's flags.
    #[command(flatten)]
    pub net: crate::net_args::NetworkArgs,
    /// Keep a capability inside the box's user namespace (all are dropped by default). Repeatable; ALL allowed.
    #[arg(long, value_name = "CAP")]
    pub cap_add: Vec<String>,
    /// Drop a capability kept by --cap-add (e.g. --cap-add ALL --cap-drop SYS_ADMIN). Repeatable.
    #[arg(long, value_name = "CAP")]
    pub cap_drop: Vec<String>,
    /// Memory cap with a unit (e.g. 512m). Default: none.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Process/thread cap (0 = none).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PIDS)]
    pub pids: u64,
    /// CPU cap in CPUs (e.g. 0.5, 2).
    #[arg(long, value_name = "N")]
    pub cpus: Option<f64>,
    /// Refuse to run when a requested cap cannot be enforced on this host.
    #[arg(long)]
    pub require_limits: bool,
    /// Map uids and gids 1-65536 inside the box to your ranges in /etc/subuid and /etc/subgid
    /// (through newuidmap/newgidmap, package uidmap), beside root to you, so the box can own
    /// files as other users. Root needs ranges of its own there.
    #[arg(long)]
    pub subids: bool,
    /// Run the command as this user of the image (NAME, UID, NAME:GROUP or UID:GID, from the
    /// box's /etc/passwd and /etc/group; the `host` image has root and nobody, or give ids).
    /// Implies --subids; a temporary workspace is given to the user; HOME, USER and LOGNAME
    /// are the user's unless -e sets them.
    #[arg(long, short = 'u', value_name = "USER")]
    pub user: Option<String>,
    /// Wall-clock deadline (e.g. 30s, 500ms, 2m; a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub timeout: String,
    /// Output cap per stream, with a unit; past it bytes are discarded and `truncated` is set.
    #[arg(long, value_name = "SIZE", default_value = "64m")]
    pub max_output: String,
    /// Set an environment variable in the box, NAME=VALUE (NAME alone: this process's value, as
    /// docker's `-e NAME`). Repeatable. The host's environment is never passed whole.
    #[arg(long, short = 'e', value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Working directory in the box (default: the image's WorkingDir, else /workspace).
    /// `-w`/`--workdir` is docker's spelling of the same.
    #[arg(long, short = 'w', visible_alias = "workdir")]
    pub cwd: Option<String>,
    /// Accepted for docker's spelling: every box is removed when its program ends.
    #[arg(long)]
    pub rm: bool,
    /// The box's hostname (default `hull`).
    #[arg(long, value_name = "NAME")]
    pub hostname: Option<String>,
    /// Read environment variables from a file: NAME=VALUE lines (blank lines and `#` comments
    /// skipped), before the `-e`s. Repeatable.
    #[arg(long, value_name = "FILE")]
    pub env_file: Vec<std::path::PathBuf>,
    /// Give the box this process's standard input (default: /dev/null). A terminal is relayed
    /// through a pipe: the box reads what is typed but can never change or resize the terminal.
    #[arg(long, short = 'i')]
    pub interactive: bool,
    /// Give the box a terminal of its own (a pseudo-terminal hull makes and relays): the
    /// program's stdin, stdout and stderr, so it runs as on a terminal. With -i (-it) what is
    /// typed goes to it raw (Ctrl-C is SIGINT for the program, not the box's end) and the
    /// caller's terminal modes are restored at exit; window-size changes follow. Output is
    /// relayed, not captured (no --json).
    #[arg(long, short = 't')]
    pub tty: bool,
    /// The box's boundary: `namespace` (namespaces, seccomp and cgroups on this kernel) or
    /// `vm` (a microVM with a guest kernel of its own, QEMU microvm: docs/vm.md; emulated,
    /// and slow, where KVM cannot run it).
    #[arg(long, value_name = "KIND", default_value = "namespace")]
    pub isolation: hull_api::Isolation,
    /// With --isolation vm: refuse to run where the VM would be emulated (no usable KVM).
    #[arg(long)]
    pub require_kvm: bool,
    /// The command and its arguments: after `--`, or from the first argument that is not one
    /// of hull's options (as docker's `run IMAGE CMD...`): everything from there is the
    /// command's, its own `-flags` included.
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The flags as a request; an error names the flag and what is wrong with its value.
pub fn request_from(args: &RunArgs) -> Result<RunRequest, String> {
    let size = |flag: &str, text: &str| size::parse_size(text).map_err(|e| format!("{flag}: {e}"));
    let mut r = RunRequest {
        argv: args.command.clone(),
        code: args.code.clone(),
        language: args.language,
        image: args.image.clone(),
        rootfs: args.rootfs.clone(),
        workspace: args.workspace.clone(),
        tmp_size: size("--tmp-size", &args.tmp_size)?,
        cap_add: args.cap_add.clone(),
        cap_drop: args.cap_drop.clone(),
        memory: args
            .memory
            .as_deref()
            .map(|m| size("--memory", m))
            .transpose()?,
        pids: (args.pids != 0).then_some(args.pids),
        cpus: args.cpus,
        require_limits: args.require_limits,
        subids: args.subids,
        max_output: size("--max-output", &args.max_output)?,
        cwd: args.cwd.clone(),
        inherit_stdin: args.interactive,
        isolation: args.isolation,
        require_kvm: args.require_kvm,
        ..RunRequest::default()
    };
    if args.require_kvm && args.isolation != hull_api::Isolation::Vm {
        return Err("--require-kvm: only with --isolation vm".into());
    }
    (r.network, r.secrets) = args.net.request()?;
    for t in &args.tmpfs {
        r.tmpfs.push(
            t.parse::<Tmpfs>()
                .map_err(|e| format!("--tmpfs: {}", Chain(&e)))?,
        );
    }
    for m in &args.mount {
        r.mounts.push(
            m.parse::<Mount>()
                .map_err(|e| format!("--mount: {}", Chain(&e)))?,
        );
    }
    if !args.timeout.is_empty() {
        r.timeout =
            duration::parse_duration(&args.timeout).map_err(|e| format!("--timeout: {e}"))?;
    }
    let mut from_files = Vec::new();
    for f in &args.env_file {
        let text =
            std::fs::read_to_string(f).map_err(|e| format!("--env-file {}: {e}", f.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line.split_once('=').ok_or_else(|| {
                format!(
                    "--env-file {} line {}: write it as NAME=VALUE",
                    f.display(),
                    n + 1
                )
            })?;
            if !env_name_ok(k) {
                return Err(format!(
                    "--env-file {} line {}: `{k}` is not an environment variable's name",
                    f.display(),
                    n + 1
                ));
            }
            from_files.push((k.to_string(), v.to_string()));
        }
    }
    r.env.extend(from_files);
    for e in &args.env {
        // `-e NAME` passes this process's value, as docker's does (never the whole environment).
        let (k, v) = match e.split_once('=') {
            Some((k, v)) => (k, v.to_string()),
            None => (
                e.as_str(),
                std::env::var(e).map_err(|_| {
                    format!("--env: `{e}` is not set in this environment (write NAME=VALUE, or export {e})")
                })?,
            ),
        };
        if !env_name_ok(k) {
            return Err(format!(
                "--env: `{k}` is not an environment variable's name: letters, digits and `_`, not starting with a digit"
            ));
        }
        r.env.push((k.to_string(), v));
    }
    if let Some(p) = r.pids {
        let max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
        if let Some(max) = max.filter(|&m| p > m) {
            return Err(format!(
                "--pids {p}: more than this kernel's pid_max ({max}), so no cap at all: give at most {max}, or 0 for no cap"
            ));
        }
    }
    if let Some(c) = r.cpus {
        let host = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        #[allow(clippy::cast_precision_loss)] // a CPU count
        let host_f = host as f64;
        if c > host_f {
            return Err(format!(
                "--cpus {c}: this host has {host} CPU(s) for hull: give at most {host}"
            ));
        }
    }
    Ok(r)
}

/// A portable environment variable name: letters, digits and `_`, not starting with a digit.
fn env_name_ok(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// How `hull run` spells a field of the box's spec: the flag that sets it.
pub fn flag(field: SpecField, r: &RunRequest) -> &'static str {
    match field {
        SpecField::Command => "CMD",
        SpecField::Env => "--env",
        SpecField::Root if r.rootfs.is_some() => "--rootfs",
        SpecField::Root => "--image",
        SpecField::Workspace => "--workspace",
        SpecField::TmpSize => "--tmp-size",
        SpecField::Tmpfs => "--tmpfs",
        SpecField::Mounts => "--mount",
        SpecField::CapAdd => "--cap-add",
        SpecField::CapDrop => "--cap-drop",
        SpecField::Memory => "--memory",
        SpecField::Pids => "--pids",
        SpecField::Cpus => "--cpus",
        SpecField::Timeout => "--timeout",
        SpecField::MaxOutput => "--max-output",
        SpecField::Cwd => "--cwd",
        SpecField::Hostname => "--hostname",
        SpecField::Subids => "--subids",
        SpecField::RequireLimits => "--require-limits",
        SpecField::Network => "--network",
        SpecField::User => "--user",
        SpecField::Stdin if r.inherit_stdin => "-i",
        SpecField::Stdin => "-t",
    }
}

/// A box error as `hull run` shows it: named by the flag it is about, when it is about one.
fn shown(e: BoxError, r: &RunRequest) -> Result<Named<BoxError>, BoxError> {
    match e.field() {
        Some(f) => Ok(Named {
            arg: flag(f, r),
            error: e,
        }),
        None => Err(e),
    }
}

/// Streams box output straight to our own stdout and stderr.
///
/// A writer thread does the writing, so a reader that stops reading (`hull run ... | stalled`)
/// cannot stall the supervisor and with it the deadline. It starts with the first output (a box
/// that prints nothing, like most `/bin/true`s, pays for no thread), with the forwarded signals
/// blocked: SIGINT must reach the thread watching the box, which kills it and cleans up. The
/// queue holds what the box may emit under --max-output per stream, so nothing within the cap
/// is dropped.
#[derive(Default)]
struct Passthrough {
    tx: Option<std::sync::mpsc::Sender<(Stream, Vec<u8>)>>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// The writer thread could not be made: output is written here, in the watch's thread.
    inline: bool,
}

impl Passthrough {
    /// Writes `data` to our own `stream`.
    fn write(stream: Stream, data: &[u8]) {
        let _ = match stream {
            Stream::Stdout => std::io::stdout()
                .lock()
                .write_all(data)
                .and_then(|()| std::io::stdout().flush()),
            Stream::Stderr => std::io::stderr().lock().write_all(data),
        };
    }

    /// The queue to the writer thread, started now if it is not yet.
    fn queue(&mut self) -> Option<&std::sync::mpsc::Sender<(Stream, Vec<u8>)>> {
        if self.tx.is_none() && !self.inline {
            let (tx, rx) = std::sync::mpsc::channel::<(Stream, Vec<u8>)>();
            match hull_box::spawn_helper("hull-output", move || {
                for (stream, data) in rx {
                    Passthrough::write(stream, &data);
                }
            }) {
                Some(w) => {
                    self.tx = Some(tx);
                    self.writer = Some(w);
                }
                None => self.inline = true,
            }
        }
        self.tx.as_ref()
    }

    /// Waits until everything queued has been written.
    fn finish(&mut self) {
        self.tx.take();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl OutputSink for Passthrough {
    fn chunk(&mut self, stream: Stream, data: &[u8]) {
        match self.queue() {
            Some(tx) => {
                let _ = tx.send((stream, data.to_vec()));
            }
            None => Passthrough::write(stream, data),
        }
    }
}

/// The version of `hull run --json`'s output (a result or an error object), documented in
/// docs/json.md: raised when a field changes meaning or goes away, not when one is added.
pub const JSON_SCHEMA_VERSION: u32 = 1;

fn json_error(kind: &str, err: &(dyn std::error::Error + 'static)) -> serde_json::Value {
    serde_json::json!({ "schema_version": JSON_SCHEMA_VERSION, "error": { "kind": kind, "message": Chain(err).to_string(), "chain": hull_api::error::chain(err) } })
}

/// Prints an error once: as JSON with `--json`, else on stderr with its causes.
fn report(args: &RunArgs, kind: &str, err: &(dyn std::error::Error + 'static)) -> i32 {
    report_with(args, json_error(kind, err), err)
}

/// Prints `json` with `--json`, else `err` on stderr with its causes.
fn report_with(
    args: &RunArgs,
    json: serde_json::Value,
    err: &(dyn std::error::Error + 'static),
) -> i32 {
    if args.json {
        println!("{json}");
    } else {
        crate::print_error(err);
    }
    125
}

/// The warnings as a terminal shows them: the caps this host does not enforce in one short
/// line (each with its reason, without the long fix `hull doctor` gives), the rest as they are.
/// A rootless run without a delegated cgroup would otherwise print ~350 characters per cap on
/// every run; `--json` keeps every warning whole.
fn terminal_warnings(warnings: &[String]) -> Vec<String> {
    let mut caps = Vec::new();
    let mut whys: Vec<String> = Vec::new();
    let mut rest = Vec::new();
    for w in warnings {
        match w.split_once(" cap not enforced: ") {
            Some((cap, why)) if !cap.contains(' ') => {
                caps.push(cap.to_lowercase());
                let why = why.split_once("; fix: ").map_or(why, |(why, _)| why);
                // The same refusal in each hierarchy is said once, without the paths.
                let why = match why.strip_prefix("cannot create cgroups in ") {
                    Some(tail) => tail.split_once(": ").map_or(why.to_string(), |(_, e)| {
                        format!("cannot create cgroups: {e}")
                    }),
                    None => why.to_string(),
                };
                if !whys.contains(&why) {
                    whys.push(why);
                }
            }
            _ => rest.push(w.clone()),
        }
    }
    if !caps.is_empty() {
        rest.insert(
            0,
            format!(
                "{} cap{} not enforced here ({}); `hull doctor` says how to fix it",
                caps.join(", "),
                if caps.len() > 1 { "s" } else { "" },
                whys.join("; ")
            ),
        );
    }
    rest
}

/// A box error, named by its flag; in JSON with the caps it could not enforce, when that is
/// why (`unenforced`, as `hull serve` lists them).
fn report_box(args: &RunArgs, r: &RunRequest, e: BoxError) -> i32 {
    let kind = e.kind();
    let unenforced = match &e {
        BoxError::LimitsUnenforced(caps) => Some(serde_json::json!(caps.0)),
        _ => None,
    };
    let shown = shown(e, r);
    let err: &(dyn std::error::Error + 'static) = match &shown {
        Ok(named) => named,
        Err(e) => e,
    };
    let mut json = json_error(kind, err);
    if let Some(u) = unenforced {
        json["error"]["unenforced"] = u;
    }
    report_with(args, json, err)
}

/// A refusal of the flags themselves, before any box.
fn report_invalid(args: &RunArgs, msg: &str) -> i32 {
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "schema_version": JSON_SCHEMA_VERSION, "error": { "kind": "invalid_argument", "message": msg, "chain": [msg] } })
        );
    } else {
        eprintln!("hull: error: {msg}");
    }
    125
}

/// `-u USER`: the user's ids from the box's own /etc/passwd and /etc/group (the `host` image's
/// are hull's; an image's are read from its root, never through a link), its variables under
/// the caller's `-e`, and the ids mapped (`subids`). Root needs none of that.
fn run_as(
    spec: &mut hull_box::spec::BoxSpec,
    who: &str,
    env_flags: &[String],
) -> Result<(), String> {
    use crate::named::users;
    users::check_spec(who)?;
    if users::is_root(who) {
        return Ok(());
    }
    let dumpable = std::fs::read_to_string("/proc/sys/fs/suid_dumpable").unwrap_or_default();
    users::check_dumpable(&dumpable)?;
    let (passwd, group) = match &spec.root {
        hull_box::spec::RootSpec::Host => (
            hull_box::assemble::HOST_PASSWD.to_string(),
            hull_box::assemble::HOST_GROUP.to_string(),
        ),
        hull_box::spec::RootSpec::Dir(root) => {
            let layers = [root.clone()];
            (
                users::read_etc(&layers, "passwd"),
                users::read_etc(&layers, "group"),
            )
        }
    };
    let user = users::resolve(who, &passwd, &group)?;
    let given = |name: &str| {
        env_flags
            .iter()
            .any(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) == name)
    };
    for (k, v) in [
        ("HOME", &user.home),
        ("USER", &user.name),
        ("LOGNAME", &user.name),
    ] {
        if !given(k) {
            spec.env.retain(|(n, _)| n != k);
            spec.env.push((k.to_string(), v.clone()));
        }
    }
    spec.subids = true;
    spec.user = Some(hull_box::proto::resident::Ids {
        uid: user.uid,
        gid: user.gid,
        groups: user.groups,
    });
    Ok(())
}

/// What `-v` says of a box before it starts: its program, image, caps, network and deadline.
fn describe_box(spec: &hull_box::spec::BoxSpec) -> String {
    let mib = |b: u64| format!("{} MiB", b >> 20);
    format!(
        "box: `{}` on image {}, memory {}, pids {}, cpus {}, network {:?}, deadline {:?}, workspace {}",
        spec.argv.join(" "),
        if spec.image_name.is_empty() { "host" } else { &spec.image_name },
        spec.memory.map_or("uncapped".into(), mib),
        spec.pids.map_or("uncapped".into(), |p| p.to_string()),
        spec.cpus.map_or("uncapped".into(), |c| c.to_string()),
        spec.network,
        spec.timeout,
        spec.workspace.as_ref().map_or("a temporary one".into(), |w| w.display().to_string()),
    )
}

pub fn main(args: RunArgs) -> i32 {
    main_ahead(args, None)
}

/// [`main`] with a temporary workspace made ahead (started before the arguments were parsed;
/// removed when the box does not use it).
pub fn main_ahead(args: RunArgs, ahead: Option<hull_box::WorkspaceAhead>) -> i32 {
    use hull_box::trace::step;
    hull_box::trace::hold();
    let code = run(args, ahead);
    step("run: exit");
    hull_box::trace::flush();
    code
}

fn run(args: RunArgs, ahead: Option<hull_box::WorkspaceAhead>) -> i32 {
    use hull_box::trace::step;
    let req = match request_from(&args) {
        Ok(r) => r,
        Err(msg) => return report_invalid(&args, &msg),
    };
    let built = match hull::boxspec::run_spec(&req) {
        Ok(b) => b,
        Err(hull::boxspec::BuildError::Image(error)) => {
            let arg = flag(SpecField::Root, &req);
            return report(&args, "invalid_argument", &Named { arg, error });
        }
        Err(hull::boxspec::BuildError::Network(error)) => {
            let arg = "--network";
            return report(&args, "network_unavailable", &Named { arg, error });
        }
    };
    for w in &built.warnings {
        crate::verbosity::warn("hull", w);
    }
    if args.tty && args.json {
        return report_invalid(&args, "-t: the box's terminal output goes to this terminal, so there is none for --json; drop one of them");
    }
    let mut pty = None;
    if args.tty {
        match crate::pty_relay::PtyRelay::start(args.interactive) {
            Ok(p) => pty = Some(p),
            Err(e) => {
                return report_invalid(&args, &format!("-t: cannot make the box's terminal: {e}"))
            }
        }
    } else if args.interactive {
        if let Err(e) = crate::tty_relay::start_if_terminal() {
            return report_invalid(
                &args,
                &format!("-i: cannot relay this terminal to the box: {e}"),
            );
        }
    }
    let mut spec = built.spec;
    if let Some(h) = &args.hostname {
        spec.hostname.clone_from(h);
    }
    if pty.is_some() {
        spec.stdin = hull_box::spec::Stdin::Terminal;
    }
    if let Some(u) = args.user.as_deref() {
        if let Err(msg) = run_as(&mut spec, u, &args.env) {
            return report_invalid(&args, &format!("-u/--user {u}: {msg}"));
        }
    }
    step("run: spec built");
    if spec.argv.is_empty() {
        return report_invalid(&args, "no command given: name one after hull's options (e.g. `hull run python3 -c 'print(1)'`, or after `--`) or use --code");
    }
    if crate::verbosity::enabled(crate::verbosity::Level::Info) {
        crate::verbosity::info("hull", describe_box(&spec));
    }
    if req.isolation == hull_api::Isolation::Vm {
        return run_in_vm(&args, &req, &spec);
    }
    let runtime = match Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            crate::print_error(&e);
            return 125;
        }
    };
    step("run: runtime ready (seccomp compiled, cgroups detected)");
    if args.plan {
        return match runtime.plan(&spec) {
            Ok(plan) => {
                let _ = write!(std::io::stdout(), "{plan}");
                0
            }
            Err(e) => report_box(&args, &req, e),
        };
    }
    // What SIGKILLed hulls left behind is removed beside this box's setup and run, and waited
    // for before hull exits. The result is printed as soon as it is known; the box's teardown
    // (reaping, cgroup and workspace removal) finishes before hull exits.
    let sweep = runtime.sweep_leftovers_in_background();
    // A gateway network: the box's TAP is served by its gateway process, started before the
    // program runs; its published ports are said on stderr (and in --json's result) at once.
    // With secrets, the box gets their placeholders and the gateway CA (`trust`, kept until
    // the box is done), and the gateway their values.
    let (gateway_start, _trust) = match gateway_of(&req, &mut spec) {
        Ok(g) => g,
        Err(msg) => return report_invalid(&args, &msg),
    };
    let mut gateway = None;
    let mut published: Vec<(u16, u16)> = Vec::new();
    let mut take = gateway_start
        .as_ref()
        .map(|s| port_noticing_handler(s, args.json, &mut gateway, &mut published));
    let run = |opts: RunOptions, sink: &mut dyn hull_box::OutputSink| {
        let handoff = hull_box::Handoff {
            fuse: None,
            tap: take.as_mut().map(|t| t as &mut hull_box::TapHandler<'_>),
        };
        runtime.run_detached_with(&spec, opts, sink, ahead, handoff)
    };
    let result = if args.json {
        run(RunOptions { capture: true }, &mut hull_box::NoSink)
    } else {
        let mut sink = Passthrough::default();
        let r = run(RunOptions { capture: false }, &mut sink);
        step("run: box ended");
        sink.finish();
        if let Some(p) = pty.take() {
            p.finish();
        }
        step("run: output writer joined");
        r
    };
    match result {
        Ok((r, teardown)) => {
            step("run: result returned");
            drop(take);
            show_result(&args, &r, gateway_start.is_some().then_some(&published[..]));
            step("run: result printed");
            // The gateway ends with its stdin (its TAP's close, ~23 ms, is its own exit's).
            drop(gateway);
            teardown.finish();
            step("run: teardown finished");
            sweep.finish();
            step("run: leftovers swept");
            r.exit_code
        }
        Err(e) => report_box(&args, &req, e),
    }
}

/// `--isolation vm`: `spec` run by the microVM tier (hull's `VmBackend`, through the engine's
/// Backend seam), its output streamed and its result shown as a namespace box's; the exit
/// status as `hull run`'s.
/// The gateway start of `req`'s gateway network (`None` without one) and, with secrets, the
/// box's side of them, already applied to `spec` (kept until the box is done).
fn gateway_of(
    req: &RunRequest,
    spec: &mut hull_box::BoxSpec,
) -> Result<
    (
        Option<crate::net::wire::Start>,
        Option<crate::net::plan::BoxTrust>,
    ),
    String,
> {
    let hull_api::network::Network::Gateway(g) = &req.network else {
        return Ok((None, None));
    };
    let mut start = crate::net::plan::start_of(g)?;
    let trust = crate::net::plan::brokered(&mut start, &req.secrets, false)?;
    if let Some(t) = &trust {
        t.apply(spec);
    }
    Ok((Some(start), trust))
}

/// The TAP handler of a one-shot box's gateway: the gateway kept in `slot`, its published
/// ports in `published` and, without `--json`, said on stderr at once.
fn port_noticing_handler<'a>(
    start: &'a crate::net::wire::Start,
    json: bool,
    slot: &'a mut Option<crate::net::spawn::GatewayProcess>,
    published: &'a mut Vec<(u16, u16)>,
) -> impl FnMut(hull_box::Tap) -> std::io::Result<()> + 'a {
    crate::net::plan::handler(start, None, false, slot, move |g| {
        published.clone_from(&g.ports);
        if !json {
            for (inner, host) in &g.ports {
                crate::verbosity::notice(
                    "hull",
                    format!("the box's port {inner} is published at 127.0.0.1:{host}"),
                );
            }
        }
    })
}

fn run_in_vm(args: &RunArgs, req: &RunRequest, spec: &hull_box::BoxSpec) -> i32 {
    use hull::Backend as _;
    if args.plan {
        return report_invalid(
            args,
            "--plan: the steps shown are a namespace box's; a VM's are its guest's (not with --isolation vm)",
        );
    }
    if args.tty {
        return report_invalid(
            args,
            "-t: a terminal in a VM is not supported yet (--isolation vm)",
        );
    }
    let backend = hull::VmBackend::new(req.require_kvm);
    if let Err(e) = backend.check(spec) {
        return report_box(args, req, e);
    }
    let mut spec = spec.clone();
    let (gateway_start, _trust) = match gateway_of(req, &mut spec) {
        Ok(g) => g,
        Err(msg) => return report_invalid(args, &msg),
    };
    let mut gateway = None;
    let mut published: Vec<(u16, u16)> = Vec::new();
    let mut take = gateway_start
        .as_ref()
        .map(|s| port_noticing_handler(s, args.json, &mut gateway, &mut published));
    let mut run = |sink: &mut dyn hull_box::OutputSink| match take.as_mut() {
        Some(t) => backend.run_served(&spec, sink, t),
        None => backend.run(&spec, sink),
    };
    let result = if args.json {
        run(&mut hull_box::NoSink)
    } else {
        let mut sink = Passthrough::default();
        let r = run(&mut sink);
        sink.finish();
        r
    };
    drop(take);
    match result {
        Ok((r, destroy)) => {
            show_result(args, &r, gateway_start.is_some().then_some(&published[..]));
            drop(gateway);
            destroy();
            r.exit_code
        }
        Err(e) => report_box(args, req, e),
    }
}

/// Prints a box's result: one JSON object with `--json` (with the published `ports` of a
/// gateway network), else the warnings, the fault and (with -v) a summary on stderr.
fn show_result(args: &RunArgs, r: &hull_box::RunResult, ports: Option<&[(u16, u16)]>) {
    if args.json {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        v["schema_version"] = serde_json::json!(JSON_SCHEMA_VERSION);
        if let Some(ports) = ports {
            v["ports"] = ports
                .iter()
                .map(|(inner, host)| serde_json::json!({"port": inner, "host_port": host}))
                .collect();
        }
        let _ = writeln!(std::io::stdout(), "{v}");
    } else {
        for w in terminal_warnings(&r.warnings) {
            crate::verbosity::warn("hull", w);
        }
        if crate::verbosity::enabled(crate::verbosity::Level::Info) {
            let peak = r.stats.peak_memory.map_or("not measured".into(), |b| {
                format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
            });
            crate::verbosity::info(
                "hull",
                format!(
                    "the box ended: exit code {}, {} ms, {} ms of CPU, peak memory {peak}",
                    r.exit_code, r.duration_ms, r.stats.cpu_ms
                ),
            );
        }
        if let Some(f) = &r.fault {
            eprintln!("hull: {}: {}", f.kind.as_str(), f.reason);
        }
    }
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {

    #[test]
    fn unenforced_caps_are_one_short_line_and_other_warnings_stay_whole() {
        let fix = "; fix: run hull as root, or have root create a cgroup owned by your user in each v1 hierarchy";
        let warnings = vec![
            format!("Memory cap not enforced: cannot create cgroups in /sys/fs/cgroup/memory/a: Permission denied (os error 13){fix}"),
            format!("Pids cap not enforced: cannot create cgroups in /sys/fs/cgroup/pids: Permission denied (os error 13){fix}"),
            "something else: said as it is".to_string(),
        ];
        let shown = terminal_warnings(&warnings);
        assert_eq!(
            shown,
            [
                "memory, pids caps not enforced here (cannot create cgroups: Permission denied (os error 13)); `hull doctor` says how to fix it",
                "something else: said as it is",
            ]
        );
        assert!(shown[0].len() < 130, "{}", shown[0]);
    }
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn req(args: &[&str]) -> Result<RunRequest, String> {
        let cli = Cli::try_parse_from(std::iter::once("hull").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        request_from(&cli.run)
    }

    #[test]
    fn flags_become_a_request_with_real_units() {
        let r = req(&[
            "--memory",
            "1g",
            "--timeout",
            "500ms",
            "--pids",
            "0",
            "--tmpfs",
            "/c=4m",
            "--mount",
            "/a:/b:ro",
            "-e",
            "A=1",
            "--",
            "true",
        ])
        .unwrap();
        assert_eq!(r.memory, Some(1 << 30));
        assert_eq!(r.timeout, std::time::Duration::from_millis(500));
        assert_eq!(
            (r.pids, r.tmpfs[0].size, r.mounts[0].read_only),
            (None, 4 << 20, true)
        );
        assert_eq!(r.env, [("A".to_string(), "1".to_string())]);
        assert_eq!(
            req(&["--code", "1", "--language", "javascript"])
                .unwrap()
                .command(),
            ["node", "-e", "1"]
        );
        assert_eq!(
            req(&["--network", "host", "--", "true"]).unwrap().network,
            hull_api::Network::Host
        );
    }

    #[test]
    fn network_flags_become_the_request_and_contradictions_name_both_flags() {
        use hull_api::NetworkMode;
        let r = req(&[
            "--allow-host",
            "*.pypi.org",
            "--publish",
            "8080",
            "--",
            "true",
        ])
        .unwrap();
        assert_eq!(r.network.mode().to_string(), "custom");
        let hull_api::Network::Gateway(g) = &r.network else {
            panic!("{:?}", r.network)
        };
        assert_eq!(
            (g.allow_hosts(), g.ports()),
            (&["*.pypi.org".to_string()][..], &[8080][..])
        );
        assert_eq!(
            req(&["--network", "deny-all", "--", "true"])
                .unwrap()
                .network
                .mode(),
            NetworkMode::Gateway(hull_api::network::GatewayMode::DenyAll)
        );
        assert_eq!(
            req(&["--", "true"]).unwrap().network,
            hull_api::Network::None
        );
        for (args, said) in [
            (
                &["--network", "none", "--allow-host", "x.com", "--", "true"][..],
                "--network none with --allow-host: ",
            ),
            (
                &["--network", "host", "--publish", "80", "--", "true"],
                "--network host with --publish: ",
            ),
            (
                &["--deny-cidr", "10.0.0.0/8", "--", "true"],
                "--network none with --deny-cidr: ",
            ),
            (
                &[
                    "--network",
                    "deny-all",
                    "--allow-cidr",
                    "1.2.3.4",
                    "--",
                    "true",
                ],
                "--network deny-all with --allow-cidr: ",
            ),
            (
                &["--allow-host", "a..b", "--", "true"],
                "--allow-host: allowed host `a..b`",
            ),
            (
                &[
                    "--network",
                    "allow-all",
                    "--max-tcp-connections",
                    "0",
                    "--",
                    "true",
                ],
                "--max-tcp-connections: 0",
            ),
            (
                &[
                    "--network",
                    "custom",
                    "--secret",
                    "K=sk-1@a.com",
                    "--",
                    "true",
                ],
                "--secret: `K=...`",
            ),
            (
                &[
                    "--network",
                    "custom",
                    "--secret",
                    "K=env:HULL_TEST_UNSET_VAR_1@a.com",
                    "--",
                    "true",
                ],
                "--secret: secret K: no variable HULL_TEST_UNSET_VAR_1",
            ),
        ] {
            let e = req(args).unwrap_err();
            assert!(e.starts_with(said), "{args:?}: {e}");
        }
    }

    #[test]
    fn bad_values_name_the_flag() {
        for (args, flag) in [
            (&["--tmp-size", "64", "--", "true"][..], "--tmp-size: "),
            (&["--timeout", "soon", "--", "true"], "--timeout: "),
            (&["--tmpfs", "/c=10", "--", "true"], "--tmpfs: "),
            (&["--mount", "/etc", "--", "true"], "--mount: "),
            (&["-e", "NOVALUE", "--", "true"], "--env: "),
        ] {
            let e = req(args).unwrap_err();
            assert!(e.starts_with(flag), "{args:?}: {e}");
        }
    }
}
