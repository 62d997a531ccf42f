//! `hull bench --peers`: hull beside its peers on the same workloads, interleaved call by call
//! (A B A B), reporting each peer's p50 and p90 over hull's. kern (the `kern-sandbox` Python
//! package, whose wheel carries the kern binary) against hull's Python SDK on the image
//! `bench-python:1` (both load it from `benches/python-image.sh`): prewarmed `run_code`, a cold
//! call, kernel start, kernel cell. bubblewrap (`bwrap`) against one-shot `hull run` on the host
//! root: `/bin/true` and `python3 -c 'print(1)'`, with bare fork+exec beside them. A peer that
//! is not installed is named and skipped. A benchmark, not a gate: it fails only when a call does.

use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

use crate::bench_driver::{python_imports, Driver};
use crate::bench_report::{find, load_average, skipped, Samples, Spacing, Stat};
use crate::bench_sdk::{image_present, rounds, BENCH_IMAGE};

/// The SDK workloads both hull and kern have.
const SDK_WORKLOADS: [&str; 4] = ["prewarm", "cold_image", "kernel_start", "kernel_cell"];
/// kern's name for the same image (under localhost/, so a pull could only ask loopback).
const KERN_IMAGE: &str = "localhost/bench-python:1";

/// bubblewrap's arguments for a one-shot box on the host root: every namespace, a private /tmp.
const BWRAP: [&str; 11] = [
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
    "--unshare-all",
    "--die-with-parent",
];

/// Milliseconds of one process run to its exit, output discarded; `Err` names what failed.
fn timed(cmd: &mut Command, what: &str) -> Result<f64, String> {
    let t = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(ms)
}

/// One side of a one-shot command: `bare` (fork+exec), `hull` (`hull run --`), `bwrap`.
fn one_shot(argv: &[&str], side: &str, hull: &std::path::Path) -> Command {
    let mut cmd = match side {
        "hull" => {
            let mut c = Command::new(hull);
            c.args(["run", "--"]);
            c
        }
        "bwrap" => {
            let mut c = Command::new("bwrap");
            c.args(BWRAP).arg("--");
            c
        }
        _ => {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            return c;
        }
    };
    cmd.args(argv);
    cmd
}

/// Whether bwrap runs a box here; `Err` says why not.
fn bwrap_probe() -> Result<(), String> {
    let out = Command::new("bwrap")
        .args(BWRAP)
        .args(["--", "/bin/true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err("bwrap is not installed (apt-get install bubblewrap)".into())
        }
        Err(e) => Err(format!("bwrap: {e}")),
        Ok(o) if !o.status.success() => Err(format!(
            "bwrap cannot make a box here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => Ok(()),
    }
}

/// Every peer row with its ratios over hull's row of the same workload and spacing, and every
/// row with its ratio over bare where the workload has a bare side.
fn report(stats: &[Stat]) -> Vec<Value> {
    stats
        .iter()
        .map(|s| {
            let mut v = s.to_json();
            if s.side != "hull" && s.side != "bare" {
                if let Some(h) = find(stats, "hull", &s.workload, s.spacing) {
                    let (r50, r90) = s.ratio_to(h);
                    v["ratio_to_hull_p50"] = json!(r50);
                    v["ratio_to_hull_p90"] = json!(r90);
                }
            }
            if let Some(b) = find(stats, "bare", &s.workload, s.spacing) {
                v["ratio_to_bare_p50"] = json!(s.p50 / b.p50);
            }
            v
        })
        .collect()
}

/// `runs` timed rounds (at least 1); `back_to_back`: no gap between calls; `json`: print JSON.
pub fn main(runs: usize, back_to_back: bool, json: bool) -> i32 {
    let runs = runs.max(1);
    let spacing = if back_to_back {
        Spacing::BackToBack
    } else {
        Spacing::Agent
    };
    let load_start = load_average();
    let hull = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("hull bench: cannot find this hull: {e}");
            return 1;
        }
    };
    let mut skips = Vec::new();
    let say_skip = |side: &str, why: &str, skips: &mut Vec<Value>| {
        if !json {
            println!("skipping {side}: {why}");
        }
        skips.push(skipped(side, None, why));
    };

    // kern against hull's Python SDK, on the same image.
    let mut drivers = Vec::new();
    match image_present(BENCH_IMAGE) {
        Err(why) => say_skip("kern", &why, &mut skips),
        Ok(()) if !python_imports("kern_sandbox") => say_skip(
            "kern",
            "kern-sandbox is not installed (pip install kern-sandbox==0.2.49)",
            &mut skips,
        ),
        Ok(()) => match (
            Driver::python("hull", "hull", Some(BENCH_IMAGE), Some(BENCH_IMAGE)),
            Driver::python("kern", "kern", Some(KERN_IMAGE), Some(KERN_IMAGE)),
        ) {
            (Ok(h), Ok(k)) => drivers.extend([h, k]),
            (Err(why), _) => say_skip("kern (hull's Python SDK side failed)", &why, &mut skips),
            (_, Err(why)) => say_skip("kern", &why, &mut skips),
        },
    }
    let bwrap = match bwrap_probe() {
        Ok(()) => true,
        Err(why) => {
            say_skip("bwrap", &why, &mut skips);
            false
        }
    };

    let mut samples = Samples::default();
    if let Err(e) = rounds(
        &mut drivers,
        &SDK_WORKLOADS,
        None,
        spacing,
        runs,
        &mut samples,
    ) {
        eprintln!("hull bench: {e}");
        return 1;
    }
    drop(drivers);
    let python = crate::bench_sdk::bare_python();
    let commands: [(&str, [&str; 3]); 2] = [
        ("one-shot /bin/true", ["/bin/true", "", ""]),
        ("one-shot python3 -c 'print(1)'", [python, "-c", "print(1)"]),
    ];
    let sides: &[&str] = if bwrap {
        &["bare", "hull", "bwrap"]
    } else {
        &["bare", "hull"]
    };
    for (label, argv) in commands {
        let argv: Vec<&str> = argv.into_iter().filter(|a| !a.is_empty()).collect();
        for i in 0..2 + runs {
            for side in sides {
                std::thread::sleep(spacing.gap());
                match timed(
                    &mut one_shot(&argv, side, &hull),
                    &format!("{side} {label}"),
                ) {
                    Ok(ms) if i >= 2 => samples.push(side, label, spacing, ms),
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("hull bench: {e}");
                        return 1;
                    }
                }
            }
        }
    }
    let load_end = load_average();
    let stats = samples.stats();
    if json {
        println!(
            "{}",
            json!({
                "mode": "peers",
                "runs": runs,
                "spacing": spacing.name(),
                "load_average": { "start": load_start, "end": load_end },
                "rows": report(&stats),
                "skipped": skips,
            })
        );
        return 0;
    }
    println!(
        "hull beside its peers, {runs} runs each, interleaved, spacing {} (ms); load average {:.2} at start, {:.2} at end",
        spacing.name(),
        load_start[0],
        load_end[0]
    );
    println!(
        "{:<32} {:<6} {:>8} {:>8} {:>8} {:>10} {:>10} {:>9}",
        "workload", "side", "min", "p50", "p90", "p50/hull", "p90/hull", "p50/bare"
    );
    // Grouped by workload (hull and its peers on adjacent lines), in the order they ran.
    let mut order: Vec<&str> = Vec::new();
    for s in &stats {
        if !order.contains(&s.workload.as_str()) {
            order.push(&s.workload);
        }
    }
    let grouped = order
        .iter()
        .flat_map(|w| stats.iter().filter(move |s| s.workload == *w));
    for s in grouped {
        let hull_ratio = find(&stats, "hull", &s.workload, s.spacing)
            .filter(|_| s.side != "hull" && s.side != "bare")
            .map(|h| s.ratio_to(h));
        let bare_ratio = find(&stats, "bare", &s.workload, s.spacing).map(|b| s.p50 / b.p50);
        let fmt = |r: Option<f64>| r.map_or(String::new(), |r| format!("{r:.2}x"));
        println!(
            "{:<32} {:<6} {:>8.2} {:>8.2} {:>8.2} {:>10} {:>10} {:>9}",
            s.workload,
            s.side,
            s.min,
            s.p50,
            s.p90,
            fmt(hull_ratio.map(|r| r.0)),
            fmt(hull_ratio.map(|r| r.1)),
            fmt(bare_ratio)
        );
    }
    0
}
