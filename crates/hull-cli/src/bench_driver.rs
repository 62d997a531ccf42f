//! The driver processes of `hull bench --sdk` and `--peers`: a Python process holding
//! `hull_sandbox`'s (or `kern_sandbox`'s) sandboxes, a Node process holding the Node SDK's. Each
//! reads a workload name per line and answers one JSON line per sample, so every side runs as
//! its users run it (its own process, its own client) while this process interleaves the sides
//! and does the statistics. The scripts are `bench_drivers/`, shipped inside the binary.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

/// The Python driver (`python3 -c DRIVER SDK BASE_IMAGE COLD_IMAGE`).
const PY_DRIVER: &str = include_str!("bench_drivers/sdk_driver.py");
/// The Node driver (`node --input-type=module -e DRIVER -- COLD_IMAGE`).
const NODE_DRIVER: &str = include_str!("bench_drivers/sdk_driver.mjs");

/// A running driver and the workloads it offers.
#[derive(Debug)]
pub struct Driver {
    /// Its column in the report: `python`, `node`, `kern`.
    pub side: String,
    pub workloads: Vec<String>,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Driver {
    /// Starts a driver and waits for it to set up its sandboxes; `Err` says why it could not.
    fn start(side: &str, mut cmd: Command) -> Result<Driver, String> {
        let hull = std::env::current_exe().map_err(|e| format!("cannot find this hull: {e}"))?;
        let mut child = cmd
            .env("HULL_BIN", hull)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the {side} driver: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the {side} driver has no pipes"));
        };
        let mut d = Driver {
            side: side.to_string(),
            workloads: Vec::new(),
            child,
            stdin,
            stdout: BufReader::new(stdout),
        };
        let first = d.read()?;
        if let Some(why) = first.get("fatal") {
            return Err(format!(
                "the {side} driver could not set up: {}",
                why.as_str().unwrap_or("")
            ));
        }
        let Some(ready) = first.get("ready").and_then(Value::as_array) else {
            return Err(format!("the {side} driver said {first} instead of ready"));
        };
        d.workloads = ready
            .iter()
            .filter_map(|w| w.as_str().map(str::to_string))
            .collect();
        Ok(d)
    }

    /// The Python SDK's driver: `sdk` is `hull` or `kern`; `base_image` runs the prewarm and
    /// kernel workloads (None: the SDK's default), `cold_image` the cold_image one (None: none).
    pub fn python(
        side: &str,
        sdk: &str,
        base_image: Option<&str>,
        cold_image: Option<&str>,
    ) -> Result<Driver, String> {
        let module = if sdk == "kern" {
            "kern_sandbox"
        } else {
            "hull_sandbox"
        };
        if !python_imports(module) {
            return Err(format!(
                "python3 cannot import {module} ({})",
                if sdk == "kern" {
                    "pip install kern-sandbox==0.2.49"
                } else {
                    "pip install ./bindings/python"
                }
            ));
        }
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            PY_DRIVER,
            sdk,
            base_image.unwrap_or(""),
            cold_image.unwrap_or(""),
        ]);
        Driver::start(side, cmd)
    }

    /// The Node SDK's driver, with the built SDK at `sdk` (`bindings/node/dist/index.js`).
    pub fn node(sdk: &Path, cold_image: Option<&str>) -> Result<Driver, String> {
        let mut cmd = Command::new("node");
        cmd.args(["--input-type=module", "-e", NODE_DRIVER, "--"])
            .arg(cold_image.unwrap_or(""))
            .env("HULL_BENCH_NODE_SDK", sdk);
        Driver::start("node", cmd)
    }

    fn read(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err(format!("the {} driver exited", self.side)),
            Err(e) => Err(format!("the {} driver: {e}", self.side)),
            Ok(_) => serde_json::from_str(&line)
                .map_err(|e| format!("the {} driver printed {line:?}: {e}", self.side)),
        }
    }

    /// Milliseconds of one call of `workload`, as the driver timed it.
    pub fn sample(&mut self, workload: &str) -> Result<f64, String> {
        writeln!(self.stdin, "{workload}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("the {} driver: {e}", self.side))?;
        let v = self.read()?;
        match (v.get("ms").and_then(Value::as_f64), v.get("error")) {
            (Some(ms), _) => Ok(ms),
            (None, Some(e)) => Err(format!(
                "{} {workload}: {}",
                self.side,
                e.as_str().unwrap_or("")
            )),
            (None, None) => Err(format!("the {} driver said {v}", self.side)),
        }
    }

    pub fn offers(&self, workload: &str) -> bool {
        self.workloads.iter().any(|w| w == workload)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The driver destroys its sandboxes when told to quit (or when its stdin closes).
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// Whether `python3` imports `module`.
pub fn python_imports(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The built Node SDK: `$HULL_BENCH_NODE_SDK`, else `bindings/node/dist/index.js` above this
/// binary (a build in the source tree) or above the working directory; `Err` says why not.
pub fn node_sdk() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("HULL_BENCH_NODE_SDK") {
        return Ok(PathBuf::from(p));
    }
    let rel = Path::new("bindings/node/dist/index.js");
    let starts = [std::env::current_exe().ok(), std::env::current_dir().ok()];
    for start in starts.iter().flatten() {
        for dir in start.ancestors() {
            let p = dir.join(rel);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err("no built Node SDK (cd bindings/node && npm ci && npm run build, or set HULL_BENCH_NODE_SDK)".into())
}

/// Whether `node` runs.
pub fn node_runs() -> bool {
    Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
