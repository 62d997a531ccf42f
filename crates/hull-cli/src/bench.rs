//! `hull bench`: box overhead against bare fork+exec, interleaved in one process so both see the
//! same machine load. Reports min/median/p90 and the ratio of medians.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use hull_box::{BoxSpec, NoSink, RunOptions, Runtime, WarmOptions};

use crate::bench_stats::summary;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Runs of each case (interleaved).
    #[arg(long, default_value_t = 200)]
    pub runs: usize,
    /// Boxes started at once in the concurrency case.
    #[arg(long, default_value_t = 50)]
    pub concurrent: usize,
    /// Instead: compare a box from this stored image against the same box with `--rootfs` of
    /// its unpacked root (runs `/bin/sh -c :`; the image side includes the store look-up).
    #[arg(long, value_name = "NAME")]
    pub image: Option<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Measure through the SDKs instead: the Python SDK (hull_sandbox) and the Node SDK, each in
    /// its own process, interleaved with bare python3, calls spaced as an agent spaces them
    /// (50 ms) and back to back (both are always measured): prewarmed and cold run_code, a cold
    /// call on the image bench-python:1 (benches/python-image.sh), kernel start and cell.
    #[arg(long, conflicts_with_all = ["image", "back_to_back"])]
    pub sdk: bool,
    /// Measure hull beside its peers instead, interleaved: kern (pip install kern-sandbox) through
    /// its Python SDK against hull's on bench-python:1, and bubblewrap (bwrap) against one-shot
    /// `hull run`. A peer that is not installed is named and skipped.
    #[arg(long, conflicts_with_all = ["image", "sdk"])]
    pub peers: bool,
    /// Measure named sandboxes instead (`hull create/exec/stop/start`, templates, `hull serve`'s
    /// named.spawn), interleaved round by round: exec round trip of `true` against bare
    /// fork+exec, create to first exec from the image and from a 10 MB and a big template,
    /// spawn to first output, stop and start.
    #[arg(long, conflicts_with_all = ["image", "sdk", "peers", "back_to_back"])]
    pub named: bool,
    /// Measure the gateway network instead (`--network deny-all|allow-all|custom`), interleaved
    /// round by round beside the host's network and slirp4netns (root, when installed): connect
    /// latency, one-byte round trips on an open connection and a 64 MiB upload from a box to a
    /// server on this host, and the start of a box with the gateway beside one with no network.
    #[arg(long = "network", conflicts_with_all = ["image", "sdk", "peers", "named", "back_to_back"])]
    pub network: bool,
    /// With --named: the big template's size in MiB (written by its setup as 1 MiB files).
    #[arg(long, value_name = "MB", default_value_t = 256, requires = "named")]
    pub template_mb: u64,
    /// Time each call at once after the last, without first waiting (up to 50 ms) for the boxes
    /// set up ahead: that background work then shares the CPU with the timed runs.
    #[arg(long)]
    pub back_to_back: bool,
}

fn bare(argv: &[&str]) -> f64 {
    let t = Instant::now();
    let st = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let el = t.elapsed().as_secs_f64() * 1000.0;
    assert!(st.is_ok_and(|s| s.success()), "bare {argv:?} failed");
    el
}

/// One box: (ms to its result, ms to result plus teardown: reaping, cgroup and workspace
/// removal).
fn boxed(rt: &Runtime, argv: &[&str]) -> Result<(f64, f64), String> {
    let spec = BoxSpec::new(argv.iter().map(|s| (*s).to_string()).collect());
    let t = Instant::now();
    let (r, teardown) = rt
        .run_detached(&spec, RunOptions { capture: true }, &mut NoSink)
        .map_err(|e| hull_api::Chain(&e).to_string())?;
    let el = t.elapsed().as_secs_f64() * 1000.0;
    teardown.finish();
    let total = t.elapsed().as_secs_f64() * 1000.0;
    if !r.success {
        return Err(format!(
            "box {argv:?} failed: exit {} {:?} {}",
            r.exit_code, r.fault, r.stderr
        ));
    }
    Ok((el, total))
}

pub fn main(args: &BenchArgs) -> i32 {
    if let Some(name) = &args.image {
        return crate::image_bench::main(name, args.runs.max(5), args.json);
    }
    if args.sdk {
        return crate::bench_sdk::main(args.runs, args.json);
    }
    if args.named {
        return crate::bench_named::main(args.runs, args.template_mb, args.json);
    }
    if args.network {
        return crate::bench_net::main(args.runs.min(50), args.json);
    }
    if args.peers {
        return crate::bench_peers::main(args.runs, args.back_to_back, args.json);
    }
    // `rt` is a long-lived front end's Runtime (hull serve, the SDKs): boxes enter a shared
    // read-only skeleton. `cold` builds every box from scratch, as a one-shot `hull run` does.
    let (rt, cold) = match (Runtime::with_warm(WarmOptions::ALL), Runtime::new()) {
        (Ok(r), Ok(c)) => (Arc::new(r), c),
        (Err(e), _) | (_, Err(e)) => {
            crate::print_error(&e);
            return 125;
        }
    };
    let runs = args.runs.max(5);
    // The same interpreter in and out of the box (a PATH shim such as pyenv's would skew the bare side).
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let cases: [(&str, &[&str]); 2] = [
        ("/bin/true", &["/bin/true"]),
        ("python3 -c 'print(1)'", &[python, "-c", "print(1)"]),
    ];
    let mut out = serde_json::Map::new();
    for (label, argv) in cases {
        // Warm-up: page cache, dynamic loader, first cgroup.
        for _ in 0..3 {
            bare(argv);
            if let Err(e) = boxed(&rt, argv).and_then(|_| boxed(&cold, argv)) {
                eprintln!("hull bench: {e}");
                return 1;
            }
        }
        let (mut b, mut x, mut nc, mut full) = (
            Vec::with_capacity(runs),
            Vec::with_capacity(runs),
            Vec::with_capacity(runs),
            Vec::with_capacity(runs),
        );
        let ready_before = rt.warm_stats().ready_used;
        for _ in 0..runs {
            // Background work of the last box (the boxes a long-lived Runtime sets up ahead) is
            // done before the next pair is timed, as between an agent's tool calls.
            if !args.back_to_back {
                rt.settle(std::time::Duration::from_millis(50));
            }
            b.push(bare(argv));
            match boxed(&cold, argv) {
                Ok((ms, _)) => nc.push(ms),
                Err(e) => {
                    eprintln!("hull bench: {e}");
                    return 1;
                }
            }
            match boxed(&rt, argv) {
                Ok((ms, total)) => {
                    x.push(ms);
                    full.push(total);
                }
                Err(e) => {
                    eprintln!("hull bench: {e}");
                    return 1;
                }
            }
        }
        let ready = rt.warm_stats().ready_used - ready_before;
        let (bmin, bmed, bp90) = summary(&mut b);
        let (xmin, xmed, xp90) = summary(&mut x);
        let (nmin, nmed, np90) = summary(&mut nc);
        let (fmin, fmed, fp90) = summary(&mut full);
        if !args.json {
            println!("{label} ({runs} runs each, interleaved)");
            println!(
                "  bare fork+exec  min {bmin:7.3} ms  median {bmed:7.3} ms  p90 {bp90:7.3} ms"
            );
            println!("  in a box        min {xmin:7.3} ms  median {xmed:7.3} ms  p90 {xp90:7.3} ms  (to the result; {ready} of {runs} in a box set up ahead{})", if args.back_to_back { ", back to back" } else { ", each after the last one's background set-up" });
            println!("  + teardown      min {fmin:7.3} ms  median {fmed:7.3} ms  p90 {fp90:7.3} ms  (box reaped, cgroup and workspace removed)");
            println!("  box, cold path  min {nmin:7.3} ms  median {nmed:7.3} ms  p90 {np90:7.3} ms  (no template: the box mounts its whole root, as one-shot `hull run` does)");
            println!(
                "  overhead        median {:+.3} ms, ratio {:.2}x (cold path: {:+.3} ms)",
                xmed - bmed,
                xmed / bmed,
                nmed - bmed
            );
        }
        out.insert(label.to_string(), serde_json::json!({"bare": {"min": bmin, "median": bmed, "p90": bp90}, "box": {"min": xmin, "median": xmed, "p90": xp90}, "box_with_teardown": {"min": fmin, "median": fmed, "p90": fp90}, "box_cold": {"min": nmin, "median": nmed, "p90": np90}, "overhead_ms": xmed - bmed, "ratio": xmed / bmed, "ready_boxes_used": ready}));
    }

    // Concurrency: N boxes at once, each from its own thread.
    let n = args.concurrent.max(1);
    let t = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let rt = Arc::clone(&rt);
            std::thread::spawn(move || boxed(&rt, &[python, "-c", "print(1)"]).map(|(ms, _)| ms))
        })
        .collect();
    let results: Vec<Result<f64, String>> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
        .collect();
    let wall = t.elapsed().as_secs_f64() * 1000.0;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        eprintln!("hull bench: a concurrent box failed: {e}");
    }
    let mut lat: Vec<f64> = results.into_iter().filter_map(Result::ok).collect();
    let (cmin, cmed, cp90) = if lat.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        summary(&mut lat)
    };
    if args.json {
        out.insert("concurrent".into(), serde_json::json!({"boxes": n, "succeeded": ok, "wall_ms": wall, "min": cmin, "median": cmed, "p90": cp90}));
        println!("{}", serde_json::Value::Object(out));
    } else {
        println!("{n} concurrent boxes (python3 -c 'print(1)'): {ok}/{n} succeeded in {wall:.1} ms wall; per box min {cmin:.2} median {cmed:.2} p90 {cp90:.2} ms");
    }
    i32::from(ok != n)
}
