//! `hull run`: one fresh box per call.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use hull_box::size::parse_size;
use hull_box::spec::{DEFAULT_PIDS, DEFAULT_TIMEOUT};
use hull_box::{
    BindMount, BoxError, BoxSpec, Network, OutputSink, RootSpec, RunOptions, Runtime, Stdin,
    Stream, TmpfsMount,
};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Language {
    Python,
    Bash,
    Sh,
    Node,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum NetworkArg {
    /// A private network namespace with loopback only.
    None,
    /// The host's network: an explicit relaxation of the box.
    Host,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: the program's own exit code (128+N if it died of signal N; 127 if it could not be executed); 125 if the box could not be built.\n\nExamples:\n  hull run -- python3 -c 'print(1)'\n  hull run --code 'import sys; print(sys.version)'\n  hull run --json --memory 64m --timeout 2s --code 'x = bytearray(200 << 20)'"
)]
pub struct RunArgs {
    /// Code to run with --language's interpreter instead of a command.
    #[arg(long, conflicts_with = "command")]
    pub code: Option<String>,
    /// Interpreter for --code.
    #[arg(long, value_enum, default_value = "python", requires = "code")]
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
    /// Bind a host path into the box: SRC:DST[:ro|rw] (default rw). Repeatable.
    #[arg(long, value_name = "SRC:DST[:ro]")]
    pub mount: Vec<String>,
    /// Network: none (loopback only, the default) or host.
    #[arg(long, value_enum, default_value = "none")]
    pub network: NetworkArg,
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
    /// Wall-clock deadline (e.g. 30s, 500ms, 2m; a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub timeout: String,
    /// Output cap per stream, with a unit; past it bytes are discarded and `truncated` is set.
    #[arg(long, value_name = "SIZE", default_value = "64m")]
    pub max_output: String,
    /// Set an environment variable in the box, NAME=VALUE. Repeatable. The host's environment is never passed.
    #[arg(long, short = 'e', value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Working directory in the box (default: the image's WorkingDir, else /workspace).
    #[arg(long)]
    pub cwd: Option<String>,
    /// Give the box this process's standard input (default: /dev/null).
    #[arg(long, short = 'i')]
    pub interactive: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Parses `30s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(arg: &str, text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{arg} `{text}` is not a duration; write e.g. 30s, 500ms or 2m"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "{arg} `{text}` has an unknown unit `{unit}`; use ms, s, m or h"
            ))
        }
    };
    // At least 1 ms: shorter is no use as a deadline, and under 1 ns it would round to zero.
    if !secs.is_finite() || !(0.001..=7.0 * 86400.0).contains(&secs) {
        return Err(format!("{arg} `{text}` must be between 1ms and 7 days"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn size_arg(arg: &str, text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| format!("{arg}: {e}"))
}

/// Turns the arguments into a spec; errors name the argument.
pub fn spec_from(args: &RunArgs) -> Result<BoxSpec, String> {
    let argv = match &args.code {
        Some(code) => match args.language {
            Language::Python => vec!["python3".into(), "-c".into(), code.clone()],
            Language::Bash => vec!["bash".into(), "-c".into(), code.clone()],
            Language::Sh => vec!["sh".into(), "-c".into(), code.clone()],
            Language::Node => vec!["node".into(), "-e".into(), code.clone()],
        },
        None => args.command.clone(),
    };
    let mut spec = BoxSpec::new(argv);
    let mut image_config = None;
    if let Some(dir) = &args.rootfs {
        spec.root = RootSpec::Dir(dir.clone());
        spec.image_name = dir.display().to_string();
    } else if args.image != "host" {
        let store = hull_image::Store::open(&hull_image::default_home())
            .map_err(|e| format!("--image `{}`: {e}", args.image))?;
        let info = store
            .resolve(&args.image)
            .map_err(|e| format!("--image: {e}"))?;
        spec.root = RootSpec::Dir(info.rootfs.clone());
        spec.image_name = info.name.clone();
        image_config = Some(info.config);
    }
    if let Some(cfg) = &image_config {
        if spec.argv.is_empty() {
            spec.argv = cfg
                .entrypoint
                .iter()
                .flatten()
                .chain(cfg.cmd.iter().flatten())
                .cloned()
                .collect();
        }
        for kv in cfg.env.iter().flatten() {
            if let Some((k, v)) = kv.split_once('=') {
                spec.env.push((k.to_string(), v.to_string()));
            }
        }
        if let Some(wd) = cfg.working_dir.as_ref().filter(|w| w.starts_with('/')) {
            spec.cwd = wd.clone();
        }
        if let Some(u) = cfg
            .user
            .as_ref()
            .filter(|u| !u.is_empty() && *u != "root" && *u != "0" && *u != "0:0")
        {
            eprintln!("hull: warning: the image asks for user `{u}`; boxes run as uid 0 of their own user namespace (a single-uid map)");
        }
    }
    spec.workspace = args.workspace.clone();
    spec.tmp_size = size_arg("--tmp-size", &args.tmp_size)?;
    for t in &args.tmpfs {
        let (path, size) = t
            .split_once('=')
            .ok_or_else(|| format!("--tmpfs `{t}`: write it as PATH=SIZE, e.g. /cache=128m"))?;
        let size = size_arg("--tmpfs", size)?;
        if path == "/tmp" {
            spec.tmp_size = size;
        } else {
            spec.tmpfs.push(TmpfsMount {
                target: path.to_string(),
                size,
            });
        }
    }
    for m in &args.mount {
        let parts: Vec<&str> = m.split(':').collect();
        let (src, dst, ro) = match parts.as_slice() {
            [s, d] => (*s, *d, false),
            [s, d, "ro"] => (*s, *d, true),
            [s, d, "rw"] => (*s, *d, false),
            [_, _, mode] => return Err(format!("--mount `{m}`: mode `{mode}` must be ro or rw")),
            _ => return Err(format!("--mount `{m}`: write it as SRC:DST or SRC:DST:ro")),
        };
        if src.is_empty() || dst.is_empty() {
            return Err(format!("--mount `{m}`: both SRC and DST are needed"));
        }
        spec.mounts.push(BindMount {
            source: PathBuf::from(src),
            target: dst.to_string(),
            read_only: ro,
        });
    }
    spec.network = if args.network == NetworkArg::Host {
        Network::Host
    } else {
        Network::None
    };
    spec.cap_add = args.cap_add.clone();
    spec.cap_drop = args.cap_drop.clone();
    spec.memory = args
        .memory
        .as_deref()
        .map(|m| size_arg("--memory", m))
        .transpose()?;
    spec.pids = if args.pids == 0 {
        None
    } else {
        Some(args.pids)
    };
    spec.cpus = args.cpus;
    spec.require_limits = args.require_limits;
    spec.subids = args.subids;
    spec.timeout = if args.timeout.is_empty() {
        DEFAULT_TIMEOUT
    } else {
        parse_duration("--timeout", &args.timeout)?
    };
    spec.max_output = size_arg("--max-output", &args.max_output)?;
    for e in &args.env {
        let (k, v) = e
            .split_once('=')
            .ok_or_else(|| format!("--env `{e}`: write it as NAME=VALUE"))?;
        spec.env.push((k.to_string(), v.to_string()));
    }
    if let Some(cwd) = &args.cwd {
        spec.cwd = cwd.clone();
    }
    spec.stdin = if args.interactive {
        Stdin::Inherit
    } else {
        Stdin::Null
    };
    Ok(spec)
}

/// Streams box output straight to our own stdout and stderr.
///
/// A writer thread does the writing, so a reader that stops reading (`hull run ... | stalled`)
/// cannot stall the supervisor and with it the deadline. The queue holds what the box may emit
/// under --max-output per stream, so nothing within the cap is dropped.
struct Passthrough {
    tx: Option<std::sync::mpsc::Sender<(Stream, Vec<u8>)>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Passthrough {
    fn new() -> Passthrough {
        let (tx, rx) = std::sync::mpsc::channel::<(Stream, Vec<u8>)>();
        let writer = std::thread::spawn(move || {
            for (stream, data) in rx {
                let _ = match stream {
                    Stream::Stdout => std::io::stdout()
                        .lock()
                        .write_all(&data)
                        .and_then(|()| std::io::stdout().flush()),
                    Stream::Stderr => std::io::stderr().lock().write_all(&data),
                };
            }
        });
        Passthrough {
            tx: Some(tx),
            writer: Some(writer),
        }
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
        if let Some(tx) = &self.tx {
            let _ = tx.send((stream, data.to_vec()));
        }
    }
}

fn json_error(err: &BoxError) -> serde_json::Value {
    serde_json::json!({ "error": { "kind": err.kind(), "message": err.to_string(), "chain": crate::error_chain(err) } })
}

pub fn main(args: RunArgs) -> i32 {
    let spec = match spec_from(&args) {
        Ok(s) => s,
        Err(msg) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "error": { "kind": "invalid_argument", "message": msg, "chain": [msg] } })
                );
            } else {
                eprintln!("hull: error: {msg}");
            }
            return 125;
        }
    };
    let runtime = match Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            crate::print_error(&e);
            return 125;
        }
    };
    if args.plan {
        return match runtime.plan(&spec) {
            Ok(plan) => {
                let _ = write!(std::io::stdout(), "{plan}");
                0
            }
            Err(e) => {
                crate::print_error(&e);
                125
            }
        };
    }
    // The result is printed as soon as it is known; the box's teardown (reaping, cgroup and
    // workspace removal) finishes before hull exits.
    let result = if args.json {
        runtime.run_detached(&spec, RunOptions { capture: true }, &mut hull_box::NoSink)
    } else {
        let mut sink = Passthrough::new();
        let r = runtime.run_detached(&spec, RunOptions { capture: false }, &mut sink);
        sink.finish();
        r
    };
    match result {
        Ok((r, teardown)) => {
            if args.json {
                let _ = writeln!(
                    std::io::stdout(),
                    "{}",
                    serde_json::to_string(&r).unwrap_or_default()
                );
            } else {
                for w in &r.warnings {
                    eprintln!("hull: warning: {w}");
                }
                if let Some(f) = &r.fault {
                    eprintln!("hull: {}: {}", f.kind.as_str(), f.reason);
                }
            }
            let _ = std::io::stdout().flush();
            teardown.finish();
            // After the result is out: remove what SIGKILLed hulls left behind.
            runtime.sweep_leftovers();
            r.exit_code
        }
        Err(e) => {
            if args.json {
                println!("{}", json_error(&e));
            } else {
                crate::print_error(&e);
            }
            125
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("--timeout", "2s"),
            Ok(Duration::from_secs(2))
        );
        assert_eq!(parse_duration("--timeout", "2"), Ok(Duration::from_secs(2)));
        assert_eq!(
            parse_duration("--timeout", "500ms"),
            Ok(Duration::from_millis(500))
        );
        assert!(parse_duration("--timeout", "2x")
            .unwrap_err()
            .contains("--timeout"));
        assert!(parse_duration("--timeout", "0").is_err());
    }

    #[test]
    fn durations_under_a_millisecond_are_refused_as_the_message_says() {
        // Found by the size_duration fuzz target: these parsed, the last two as zero.
        for short in [
            "0.5ms",
            "0.0001s",
            "0.0000000001",
            "0.000000000000000000001m",
        ] {
            let e = parse_duration("--timeout", short).unwrap_err();
            assert!(e.contains("between 1ms and 7 days"), "{short}: {e}");
        }
        assert_eq!(
            parse_duration("--timeout", "1ms"),
            Ok(Duration::from_millis(1))
        );
        assert_eq!(
            parse_duration("--timeout", "7d"),
            Err("--timeout `7d` has an unknown unit `d`; use ms, s, m or h".into())
        );
        assert_eq!(
            parse_duration("--timeout", "168h"),
            Ok(Duration::from_secs(7 * 86400))
        );
    }
}
