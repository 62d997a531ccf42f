//! `hull bench --named`: named sandboxes' speed, every case interleaved round by round (A B C
//! ... A B C) in a state directory of its own, so all see the same machine load:
//!
//! - `exec true`: bare fork+exec of `/bin/true` (this process) against an exec of `true` in a
//!   running sandbox through its keeper's socket (connect, request, frames, exit code; what an
//!   SDK does), and against a whole `hull exec NAME -- true` process;
//! - `create + first exec`: `hull create` then `hull exec -- true` (two processes) from the image,
//!   from a 10 MB template and from a big one (`--template-mb`), with one-shot `hull run -- true`
//!   beside them; each sandbox removed after its round, untimed. The ratios are to the image's:
//!   a restore flat in the template's size keeps both template rows near 1x;
//! - `spawn to first output`: `named.spawn` of `echo hi` then a streamed `named.wait` through one
//!   `hull serve` (the SDKs' path), to the first stdout event; bare: `echo hi` forked with a pipe,
//!   to its first byte;
//! - `stop` and `start` of a stopped/running sandbox (`hull stop`, `hull start` processes).
//!
//! A benchmark, not a gate: it fails only when a call does.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

use crate::bench_report::{find, load_average, Samples, Spacing, Stat};
use crate::named::state::Dir;
use crate::named::{client, wire};

const EXEC: &str = "exec true";
const CREATE: &str = "create + first exec";
const SPAWN: &str = "spawn to first output";
const STOP_START: &str = "stop, start";
/// The side each workload's ratios are to.
const BASES: [(&str, &str); 3] = [(EXEC, "bare"), (CREATE, "image"), (SPAWN, "bare")];
/// The small template's size.
const SMALL_MB: u64 = 10;

/// A state directory of the bench's own (`HULL_SANDBOXES` of every hull it starts): its
/// sandboxes and templates are removed, and it with them, when dropped.
struct Root {
    path: PathBuf,
    hull: PathBuf,
}

impl Root {
    fn new() -> Result<Root, String> {
        let hull = std::env::current_exe().map_err(|e| format!("cannot find this hull: {e}"))?;
        // On the disk rather than a tmpfs /tmp: the big template is written there.
        let base = ["/var/tmp", "/tmp"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let path = base.join(format!("hull-bench-named-{}", std::process::id()));
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&path)
            .map_err(|e| format!("create {}: {e}", path.display()))?;
        Ok(Root { path, hull })
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.hull);
        c.args(args)
            .env("HULL_SANDBOXES", &self.path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `hull ARGS` to success; its milliseconds.
    fn hull(&self, args: &[&str]) -> Result<f64, String> {
        let t = Instant::now();
        let out = self
            .cmd(args)
            .output()
            .map_err(|e| format!("hull {}: {e}", args.join(" ")))?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if !out.status.success() {
            return Err(format!(
                "hull {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(ms)
    }

    fn dir(&self, name: &str) -> Dir {
        Dir {
            name: name.to_string(),
            path: self.path.join(name),
        }
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        if let Ok(rd) = std::fs::read_dir(&self.path) {
            for e in rd.flatten() {
                if let Some(n) = e.file_name().to_str().filter(|n| !n.starts_with('.')) {
                    let _ = self.cmd(&["rm", n]).output();
                }
            }
        }
        for t in ["small", "big"] {
            let _ = self.cmd(&["template", "rm", t]).output();
        }
        let _ = crate::named::tidy::remove_tree(&self.path);
    }
}

/// Milliseconds of bare fork+exec of `/bin/true` to its exit.
fn bare_true() -> Result<f64, String> {
    let t = Instant::now();
    let st = Command::new("/bin/true")
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("/bin/true: {e}"))?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    st.success()
        .then_some(ms)
        .ok_or_else(|| "/bin/true failed".to_string())
}

/// Milliseconds of bare fork+exec of `echo hi` to the first byte of its output.
fn bare_first_output() -> Result<f64, String> {
    let t = Instant::now();
    let mut child = Command::new("echo")
        .arg("hi")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("echo: {e}"))?;
    let mut b = [0u8; 1];
    let got = child.stdout.as_mut().map(|o| o.read(&mut b));
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let _ = child.wait();
    match got {
        Some(Ok(1)) => Ok(ms),
        _ => Err("echo printed nothing".into()),
    }
}

/// Milliseconds of one exec of `true` through the keeper's socket: connect, the request, the
/// frames up to the exit code.
fn socket_exec(dir: &Dir) -> Result<f64, String> {
    let t = Instant::now();
    let conn = client::open(
        dir,
        false,
        &wire::Request::Exec {
            argv: vec!["true".into()],
            env: Vec::new(),
            cwd: None,
            stdin: false,
            shell: false,
            user: None,
        },
    )?
    .ok_or_else(|| format!("sandbox `{}` is not running", dir.name))?;
    let mut r = BufReader::new(conn);
    loop {
        match wire::read_frame(&mut r).map_err(|e| format!("read from the keeper: {e}"))? {
            Some((wire::EXIT, data)) => {
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                return if data == 0i32.to_le_bytes() {
                    Ok(ms)
                } else {
                    Err(format!("`true` in the sandbox exited {data:?}"))
                };
            }
            Some((wire::ERROR, e)) => return Err(String::from_utf8_lossy(&e).into_owned()),
            Some(_) => {}
            None => return Err("the keeper hung up before the exit code".into()),
        }
    }
}

/// One `hull serve`, talked to a request at a time.
struct Serve {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Serve {
    fn start(root: &Root) -> Result<Serve, String> {
        let mut child = root
            .cmd(&["serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("hull serve: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("hull serve has no pipes".into());
        };
        Ok(Serve {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            next: 0,
        })
    }

    fn send(&mut self, method: &str, params: Value) -> Result<u64, String> {
        self.next += 1;
        let line = json!({"id": self.next, "method": method, "params": params});
        writeln!(self.stdin, "{line}").map_err(|e| format!("write to hull serve: {e}"))?;
        Ok(self.next)
    }

    fn line(&mut self) -> Result<Value, String> {
        let mut s = String::new();
        match self.stdout.read_line(&mut s) {
            Ok(0) => Err("hull serve ended".into()),
            Ok(_) => serde_json::from_str(&s).map_err(|e| format!("hull serve said {s}: {e}")),
            Err(e) => Err(format!("read from hull serve: {e}")),
        }
    }

    /// The result of request `id` (events of other requests are not expected here).
    fn result(&mut self, id: u64, on_event: &mut dyn FnMut(&Value)) -> Result<Value, String> {
        loop {
            let v = self.line()?;
            if v["id"] != id {
                return Err(format!("hull serve answered another request: {v}"));
            }
            if v.get("event").is_some() {
                on_event(&v);
                continue;
            }
            if let Some(e) = v.get("error") {
                return Err(format!("hull serve: {e}"));
            }
            return Ok(v["result"].clone());
        }
    }

    /// Milliseconds from `named.spawn` of `echo hi` to the first stdout event of a streamed
    /// `named.wait` on it.
    fn spawn_first_output(&mut self, sandbox: &str) -> Result<f64, String> {
        let t = Instant::now();
        let id = self.send(
            "named.spawn",
            json!({"sandbox": sandbox, "argv": ["echo", "hi"]}),
        )?;
        let spawned = self.result(id, &mut |_| {})?;
        let handle = spawned["process"].clone();
        let id = self.send(
            "named.wait",
            json!({"sandbox": sandbox, "process": handle, "stream": true, "timeout_s": 30}),
        )?;
        let mut first = None;
        let done = self.result(id, &mut |ev| {
            if first.is_none() && ev["event"] == "stdout" {
                first = Some(t.elapsed().as_secs_f64() * 1000.0);
            }
        })?;
        if done["exit_code"] != 0 {
            return Err(format!("the spawned `echo hi` ended with {done}"));
        }
        first.ok_or_else(|| format!("no stdout event from the spawned `echo hi` ({done})"))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(id) = self.send("shutdown", json!({})) {
            let _ = self.result(id, &mut |_| {});
        }
        let _ = self.child.wait();
    }
}

/// A template of about `mb` MiB (1 MiB files in /workspace, a small file each in /opt/t),
/// built on demand by the create of a sandbox then removed.
fn template(root: &Root, name: &str, mb: u64) -> Result<(), String> {
    let setup = format!(
        "mkdir -p /opt/t && for i in $(seq {mb}); do head -c 1048576 /dev/zero > /workspace/f$i; echo $i > /opt/t/n$i; done"
    );
    let seed = format!("seed-{name}");
    root.hull(&[
        "create",
        &seed,
        "--template",
        name,
        "--template-setup",
        &setup,
    ])?;
    root.hull(&["rm", &seed]).map(|_| ())
}

/// Create + first exec of sandbox `name` (`extra`: its `--template`), removed after (untimed).
fn create_exec(root: &Root, name: &str, extra: &[&str]) -> Result<f64, String> {
    let mut args = vec!["create", name];
    args.extend_from_slice(extra);
    let ms = root.hull(&args)? + root.hull(&["exec", name, "--", "true"])?;
    root.hull(&["rm", name])?;
    Ok(ms)
}

/// Every row with its ratios to its workload's base side.
fn report(stats: &[Stat]) -> Vec<Value> {
    stats
        .iter()
        .map(|s| {
            let mut v = s.to_json();
            let base = BASES.iter().find(|(w, _)| *w == s.workload);
            if let Some(b) = base.and_then(|(w, side)| find(stats, side, w, s.spacing)) {
                let (r50, r90) = s.ratio_to(b);
                v["base"] = json!(b.side);
                v["ratio_p50"] = json!(r50);
                v["ratio_p90"] = json!(r90);
            }
            v
        })
        .collect()
}

/// One round of every case, in turn; `timed`: record the figures (else a warm-up).
fn round(
    root: &Root,
    serve: &mut Serve,
    r: usize,
    big: &str,
    samples: &mut Samples,
    timed: bool,
) -> Result<(), String> {
    let sp = Spacing::BackToBack;
    let dir = root.dir("bench");
    let mut put = |side: &str, workload: &str, ms: f64| {
        if timed {
            samples.push(side, workload, sp, ms);
        }
    };
    put("bare", EXEC, bare_true()?);
    put("keeper socket", EXEC, socket_exec(&dir)?);
    put(
        "hull exec process",
        EXEC,
        root.hull(&["exec", "bench", "--", "true"])?,
    );
    put("bare", SPAWN, bare_first_output()?);
    put("hull serve", SPAWN, serve.spawn_first_output("bench")?);
    put(
        "hull run -- true",
        CREATE,
        root.hull(&["run", "--", "true"])?,
    );
    put("image", CREATE, create_exec(root, &format!("i{r}"), &[])?);
    put(
        "template 10 MB",
        CREATE,
        create_exec(root, &format!("s{r}"), &["--template", "small"])?,
    );
    put(
        big,
        CREATE,
        create_exec(root, &format!("b{r}"), &["--template", "big"])?,
    );
    put("stop", STOP_START, root.hull(&["stop", "cycle"])?);
    put("start", STOP_START, root.hull(&["start", "cycle"])?);
    Ok(())
}

/// `runs` timed rounds (at least 1) after one warm-up round; `big_mb`: the big template's size.
pub fn main(runs: usize, big_mb: u64, json: bool) -> i32 {
    match run(runs.max(1), big_mb, json) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hull bench: {e}");
            1
        }
    }
}

fn run(runs: usize, big_mb: u64, json: bool) -> Result<(), String> {
    let load_start = load_average();
    let root = Root::new()?;
    if !json {
        println!(
            "building templates of {SMALL_MB} MB and {big_mb} MB in {} ...",
            root.path.display()
        );
    }
    template(&root, "small", SMALL_MB)?;
    template(&root, "big", big_mb)?;
    root.hull(&["create", "bench"])?;
    root.hull(&["create", "cycle"])?;
    let mut serve = Serve::start(&root)?;
    let big = format!("template {big_mb} MB");
    let mut samples = Samples::default();
    for r in 0..=runs {
        round(&root, &mut serve, r, &big, &mut samples, r > 0)?;
    }
    drop(serve);
    let load_end = load_average();
    let stats = samples.stats();
    if json {
        println!(
            "{}",
            json!({
                "mode": "named",
                "runs": runs,
                "template_mb": { "small": SMALL_MB, "big": big_mb },
                "load_average": { "start": load_start, "end": load_end },
                "rows": report(&stats),
            })
        );
        return Ok(());
    }
    println!(
        "named sandboxes, {runs} rounds, every case once a round, interleaved (ms); load average {:.2} at start, {:.2} at end",
        load_start[0], load_end[0]
    );
    println!(
        "{:<24} {:<20} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "workload", "side", "min", "p50", "p90", "p50/base", "p90/base"
    );
    for (s, v) in stats.iter().zip(report(&stats)) {
        let fmt = |k: &str| v[k].as_f64().map_or(String::new(), |r| format!("{r:.2}x"));
        println!(
            "{:<24} {:<20} {:>8.2} {:>8.2} {:>8.2} {:>9} {:>9}",
            s.workload,
            s.side,
            s.min,
            s.p50,
            s.p90,
            fmt("ratio_p50"),
            fmt("ratio_p90")
        );
    }
    println!("(base: bare fork+exec for exec and spawn, the image for create + first exec)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(side: &str, workload: &str, p50: f64) -> Stat {
        Stat {
            side: side.into(),
            workload: workload.into(),
            spacing: Spacing::BackToBack,
            n: 1,
            min: p50,
            p50,
            p90: p50 * 2.0,
        }
    }

    #[test]
    fn rows_carry_ratios_to_their_workloads_base() {
        let stats = [
            stat("bare", EXEC, 1.0),
            stat("keeper socket", EXEC, 2.0),
            stat("image", CREATE, 10.0),
            stat("template 10 MB", CREATE, 12.0),
            stat("stop", STOP_START, 5.0),
        ];
        let r = report(&stats);
        assert_eq!(r[1]["ratio_p50"], 2.0);
        assert_eq!(r[1]["base"], "bare");
        assert_eq!(r[3]["ratio_p50"], 1.2);
        assert_eq!(r[3]["base"], "image");
        assert!(r[4].get("ratio_p50").is_none());
    }

    #[test]
    fn the_state_directory_goes_with_the_bench() {
        let root = Root::new().expect("root");
        assert!(root.path.is_dir());
        let p = root.path.clone();
        drop(root);
        assert!(!p.exists());
    }
}
