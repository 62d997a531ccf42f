//! `hull bench --sdk`: what a call costs through the SDKs, as their users call them: the Python
//! SDK (`hull_sandbox`) and the Node SDK each in its own driver process (`bench_driver.rs`),
//! interleaved call by call with bare `python3 -c 'print(1)'`, spaced as an agent loop spaces
//! its calls (50 ms apart) and back to back. Workloads: `prewarm` (`run_code("print(1)")` on a
//! Sandbox with `prewarm=2`), `cold_host` (the same on a Sandbox without prewarm, image `host`),
//! `cold_image` (the same on the image `bench-python:1`, built by `benches/python-image.sh`),
//! `kernel_start` (`kernel()` returns) and `kernel_cell` (`"1+1"` in a started kernel). Then a
//! call printing 16 MiB (`bench_sdk_output.rs`) when the run count is large enough.

use std::time::Instant;

use serde_json::{json, Value};

use crate::bench_driver::{node_runs, node_sdk, Driver};
use crate::bench_report::{find, load_average, skipped, Samples, Spacing, Stat};

/// The image of the cold_image workload (`benches/python-image.sh` builds and imports it).
pub const BENCH_IMAGE: &str = "bench-python:1";
/// The workloads, in the order each round runs them.
pub const WORKLOADS: [&str; 5] = [
    "prewarm",
    "cold_host",
    "cold_image",
    "kernel_start",
    "kernel_cell",
];
/// Rounds run before the timed ones (page cache, first boxes, the SDKs' imports).
const WARMUP: usize = 2;
/// The bare side's workload name.
pub const BARE: &str = "python3 -c 'print(1)'";
/// Runs from which the 16 MiB output case is measured (a few seconds per call in a debug build).
const LARGE_OUTPUT_FROM: usize = 20;

/// The interpreter of the bare side: the same one a `host` box runs (a PATH shim such as
/// pyenv's would skew the bare side).
pub fn bare_python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Milliseconds of one bare `python3 -c 'print(1)'`.
pub fn bare(python: &str) -> Result<f64, String> {
    let t = Instant::now();
    let ok = std::process::Command::new(python)
        .args(["-c", "print(1)"])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if ok {
        Ok(ms)
    } else {
        Err(format!("bare {python} failed"))
    }
}

/// Whether hull's store holds `name`; `Err` says why not.
pub fn image_present(name: &str) -> Result<(), String> {
    let store = hull_image::Store::open(&hull_image::default_home())
        .map_err(|e| format!("no image store: {}", hull_api::Chain(&e)))?;
    store.resolve(name).map(|_| ()).map_err(|e| {
        format!(
            "{name} is not in the store ({}); benches/python-image.sh builds and imports it",
            hull_api::Chain(&e)
        )
    })
}

/// Runs `rounds` interleaved rounds at `spacing`: the bare side (when `bare_side`), then each
/// driver's `workloads` it offers, one call each, `spacing.gap()` before every call. Rounds
/// before `WARMUP` are not recorded.
pub fn rounds(
    drivers: &mut [Driver],
    workloads: &[&str],
    bare_side: Option<&str>,
    spacing: Spacing,
    runs: usize,
    samples: &mut Samples,
) -> Result<(), String> {
    for i in 0..WARMUP + runs {
        let record = i >= WARMUP;
        if let Some(python) = bare_side {
            std::thread::sleep(spacing.gap());
            let ms = bare(python)?;
            if record {
                samples.push("bare", BARE, spacing, ms);
            }
        }
        for d in drivers.iter_mut() {
            for w in workloads {
                if !d.offers(w) {
                    continue;
                }
                std::thread::sleep(spacing.gap());
                let ms = d.sample(w)?;
                if record {
                    samples.push(&d.side, w, spacing, ms);
                }
            }
        }
    }
    Ok(())
}

/// The report: every stat with its ratio to bare python at the same spacing.
fn report(stats: &[Stat]) -> Vec<Value> {
    stats
        .iter()
        .map(|s| {
            let mut v = s.to_json();
            if let Some(b) = find(stats, "bare", BARE, s.spacing) {
                let (r50, r90) = s.ratio_to(b);
                v["ratio_to_bare_p50"] = json!(r50);
                v["ratio_to_bare_p90"] = json!(r90);
            }
            v
        })
        .collect()
}

/// `runs` timed rounds per spacing (at least 1); `json`: print the summary as JSON.
pub fn main(runs: usize, json: bool) -> i32 {
    let runs = runs.max(1);
    let python = bare_python();
    let load_start = load_average();
    let mut skips = Vec::new();
    let image = match image_present(BENCH_IMAGE) {
        Ok(()) => Some(BENCH_IMAGE),
        Err(why) => {
            if !json {
                println!("skipping cold_image: {why}");
            }
            skips.push(skipped("*", Some("cold_image"), &why));
            None
        }
    };
    let mut drivers = Vec::new();
    match Driver::python("python", "hull", None, image) {
        Ok(d) => drivers.push(d),
        Err(why) => {
            if !json {
                println!("skipping the Python SDK: {why}");
            }
            skips.push(skipped("python", None, &why));
        }
    }
    let node = if node_runs() {
        node_sdk().and_then(|sdk| Driver::node(&sdk, image))
    } else {
        Err("node is not installed".to_string())
    };
    match node {
        Ok(d) => drivers.push(d),
        Err(why) => {
            if !json {
                println!("skipping the Node SDK: {why}");
            }
            skips.push(skipped("node", None, &why));
        }
    }
    let mut samples = Samples::default();
    for spacing in [Spacing::Agent, Spacing::BackToBack] {
        if let Err(e) = rounds(
            &mut drivers,
            &WORKLOADS,
            Some(python),
            spacing,
            runs,
            &mut samples,
        ) {
            eprintln!("hull bench: {e}");
            return 1;
        }
    }
    drop(drivers);
    let load_end = load_average();
    let stats = samples.stats();
    let output = if runs >= LARGE_OUTPUT_FROM {
        // The SDK's interpreter (the one the drivers run), not the bare side's.
        crate::bench_sdk_output::measure("python3", (runs / 10).clamp(3, 10))
    } else {
        json!({ "skipped": format!("measured from --runs {LARGE_OUTPUT_FROM}") })
    };
    if json {
        println!(
            "{}",
            json!({
                "mode": "sdk",
                "runs": runs,
                "load_average": { "start": load_start, "end": load_end },
                "rows": report(&stats),
                "skipped": skips,
                "large_output": output,
            })
        );
        return 0;
    }
    println!(
        "run_code(\"print(1)\") and kernels through the SDKs, {runs} runs each, interleaved (ms); load average {:.2} at start, {:.2} at end",
        load_start[0], load_end[0]
    );
    println!(
        "{:<8} {:<22} {:<13} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "side", "workload", "spacing", "min", "p50", "p90", "p50/bare", "p90/bare"
    );
    for s in &stats {
        let (r50, r90) = find(&stats, "bare", BARE, s.spacing)
            .map(|b| s.ratio_to(b))
            .unwrap_or((f64::NAN, f64::NAN));
        println!(
            "{:<8} {:<22} {:<13} {:>8.2} {:>8.2} {:>8.2} {:>8.2}x {:>8.2}x",
            s.side,
            s.workload,
            s.spacing.name(),
            s.min,
            s.p50,
            s.p90,
            r50,
            r90
        );
    }
    if output.get("skipped").is_some() {
        println!("run_code printing 16 MiB: measured from --runs {LARGE_OUTPUT_FROM}");
    } else {
        crate::bench_sdk_output::print(&output);
    }
    0
}
