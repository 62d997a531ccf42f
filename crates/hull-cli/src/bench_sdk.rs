//! `hull bench --sdk`: what a Sandbox call costs, against bare `python3 -c 'print(1)'`,
//! interleaved in one process: `run_code("print(1)")` on one Sandbox cold (a fresh box per call,
//! the runner started by the call) and with `prewarm=2` (a box with the runner already waiting;
//! the pool is allowed to refill between calls, and that wait is not timed). Then a call that
//! prints 16 MiB, through the Python SDK and a bare `hull serve` client (`bench_sdk_output.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hull::{Language, Sandbox, SandboxRequest};
use hull_box::{NoSink, Runtime};

use crate::bench_stats::quantile as p;

fn call(sb: &Sandbox) -> Result<f64, String> {
    let t = Instant::now();
    let r = sb
        .run_code("print(1)", Language::Python, Box::new(NoSink))
        .map_err(|e| hull_api::Chain(&e).to_string())?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if r.run.stdout != "1\n" || !r.run.success {
        return Err(format!(
            "run_code failed: exit {} {:?} {}",
            r.run.exit_code, r.run.fault, r.run.stderr
        ));
    }
    Ok(ms)
}

/// `runs` pairs (at least 5); `json`: print the summary as JSON.
pub fn main(runs: usize, json: bool, rt: Arc<Runtime>) -> i32 {
    let runs = runs.max(5);
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let make = |prewarm: usize, id: &str| {
        let cfg = SandboxRequest {
            prewarm,
            ..SandboxRequest::default()
        };
        Sandbox::create(Arc::<Runtime>::clone(&rt), id.to_string(), cfg)
    };
    let (cold, warm) = match (make(0, "bench-cold"), make(2, "bench-warm")) {
        (Ok(c), Ok(w)) => (c, w),
        (Err(e), _) | (_, Err(e)) => {
            crate::print_error(&e);
            return 125;
        }
    };
    let wait_pool = |sb: &Sandbox| {
        let until = Instant::now() + Duration::from_secs(10);
        while sb.warm_stats().ready < 2 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    let (mut b, mut c, mut w) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs + 3 {
        let t = Instant::now();
        let ok = std::process::Command::new(python)
            .args(["-c", "print(1)"])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let bare = t.elapsed().as_secs_f64() * 1000.0;
        if !ok {
            eprintln!("hull bench: bare {python} failed");
            return 1;
        }
        wait_pool(&warm);
        let (cc, ww) = match (call(&cold), call(&warm)) {
            (Ok(x), Ok(y)) => (x, y),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("hull bench: {e}");
                return 1;
            }
        };
        if i >= 3 {
            b.push(bare);
            c.push(cc);
            w.push(ww);
        }
    }
    cold.destroy();
    warm.destroy();
    let (bp, cp, wp) = (p(&mut b, 0.5), p(&mut c, 0.5), p(&mut w, 0.5));
    let (b9, c9, w9) = (p(&mut b, 0.9), p(&mut c, 0.9), p(&mut w, 0.9));
    // Large answers: a few runs are enough (each moves 16 MiB through JSON and a pipe).
    let output = crate::bench_sdk_output::measure(python, (runs / 10).clamp(3, 10));
    if json {
        println!(
            "{}",
            serde_json::json!({
                "runs": runs,
                "bare_python_ms": {"min": b[0], "p50": bp, "p90": b9},
                "sandbox_cold_ms": {"min": c[0], "p50": cp, "p90": c9, "ratio_to_bare": cp / bp},
                "sandbox_prewarm2_ms": {"min": w[0], "p50": wp, "p90": w9, "ratio_to_bare": wp / bp},
                "large_output": output,
            })
        );
    } else {
        println!("run_code(\"print(1)\") on one Sandbox, {runs} runs each, interleaved (ms)");
        println!(
            "{:<34} {:>8} {:>8} {:>8} {:>8}",
            "case", "min", "p50", "p90", "p50/bare"
        );
        println!(
            "{:<34} {:>8.2} {:>8.2} {:>8.2} {:>8}",
            format!("bare {python} -c 'print(1)'"),
            b[0],
            bp,
            b9,
            "1.00x"
        );
        println!(
            "{:<34} {:>8.2} {:>8.2} {:>8.2} {:>7.2}x",
            "Sandbox, cold",
            c[0],
            cp,
            c9,
            cp / bp
        );
        println!(
            "{:<34} {:>8.2} {:>8.2} {:>8.2} {:>7.2}x",
            "Sandbox, prewarm=2",
            w[0],
            wp,
            w9,
            wp / bp
        );
        println!(
            "targets: cold within 1.5x of bare: {}; prewarmed p50 under 3 ms: {}",
            if cp <= 1.5 * bp { "met" } else { "NOT met" },
            if wp < 3.0 { "met" } else { "NOT met" }
        );
        crate::bench_sdk_output::print(&output);
    }
    0
}
