//! `hull bench --image NAME`: what a box from a stored image costs over the same box given
//! `--rootfs` of that image's unpacked root. The image side does per box what `hull run --image`
//! does: open the store, resolve the reference, read the image's metadata and apply its Env and
//! WorkingDir. Interleaved in one process; min/median/p90 of each and the difference of medians.

use std::time::Instant;

use hull_box::{BoxSpec, NoSink, RootSpec, RunOptions, Runtime};
use hull_image::{default_home, Store};

/// What the box runs: a shell no-op, which every busybox or distribution image has.
const ARGV: [&str; 3] = ["/bin/sh", "-c", ":"];

fn argv() -> Vec<String> {
    ARGV.iter().map(|s| (*s).to_string()).collect()
}

/// The spec `hull run --image NAME -- /bin/sh -c :` builds, store look-up included.
fn image_spec(name: &str) -> Result<BoxSpec, String> {
    let store = Store::open(&default_home())
        .map_err(|e| format!("--image `{name}`: {}", hull_api::Chain(&e)))?;
    let info = store
        .resolve(name)
        .map_err(|e| format!("--image: {}", hull_api::Chain(&e)))?;
    let mut spec = BoxSpec::new(argv());
    spec.root = RootSpec::Dir(info.rootfs);
    spec.image_name = info.name;
    for kv in info.config.env.iter().flatten() {
        if let Some((k, v)) = kv.split_once('=') {
            spec.env.push((k.to_string(), v.to_string()));
        }
    }
    if let Some(wd) = info.config.working_dir.filter(|w| w.starts_with('/')) {
        spec.cwd = wd;
    }
    Ok(spec)
}

/// Milliseconds from building the spec to the box's result; teardown is not timed.
fn timed(rt: &Runtime, make: &dyn Fn() -> Result<BoxSpec, String>) -> Result<f64, String> {
    let t = Instant::now();
    let spec = make()?;
    let (r, teardown) = rt
        .run_detached(&spec, RunOptions { capture: true }, &mut NoSink)
        .map_err(|e| hull_api::Chain(&e).to_string())?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    teardown.finish();
    if !r.success {
        return Err(format!(
            "box in {} failed: exit {} {:?} {}",
            spec.image_name, r.exit_code, r.fault, r.stderr
        ));
    }
    Ok(ms)
}

pub fn main(name: &str, runs: usize, json: bool) -> i32 {
    let rt = match Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            crate::print_error(&e);
            return 125;
        }
    };
    let rootfs = match image_spec(name) {
        Ok(s) => match s.root {
            RootSpec::Dir(d) => d,
            RootSpec::Host => unreachable!("image_spec always sets a directory root"),
        },
        Err(e) => {
            eprintln!("hull: error: {e}");
            return 125;
        }
    };
    if !rootfs.join("bin/sh").exists() {
        eprintln!("hull: error: --image `{name}`: the image has no /bin/sh, which the benchmark runs (`/bin/sh -c :`)");
        return 125;
    }
    let with_rootfs = || {
        let mut spec = BoxSpec::new(argv());
        spec.root = RootSpec::Dir(rootfs.clone());
        spec.image_name = rootfs.display().to_string();
        Ok(spec)
    };
    let from_image = || image_spec(name);
    let (mut img, mut dir, mut lookup) = (
        Vec::with_capacity(runs),
        Vec::with_capacity(runs),
        Vec::with_capacity(runs),
    );
    for i in 0..runs + 3 {
        // The first three of each are warm-up (page cache, first cgroup) and not counted.
        let a = timed(&rt, &from_image);
        let b = timed(&rt, &with_rootfs);
        match (a, b) {
            (Ok(a), Ok(b)) if i >= 3 => {
                img.push(a);
                dir.push(b);
                // The look-up alone: what the image path adds, free of box-to-box noise.
                let t = Instant::now();
                let _ = image_spec(name);
                lookup.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            (Ok(_), Ok(_)) => {}
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("hull bench: {e}");
                return 1;
            }
        }
    }
    let (imin, imed, ip90) = crate::bench_stats::summary(&mut img);
    let (dmin, dmed, dp90) = crate::bench_stats::summary(&mut dir);
    let (lmin, lmed, lp90) = crate::bench_stats::summary(&mut lookup);
    let delta = imed - dmed;
    if json {
        println!(
            "{}",
            serde_json::json!({"image": name, "runs": runs, "argv": ARGV, "image_box": {"min": imin, "median": imed, "p90": ip90}, "rootfs_box": {"min": dmin, "median": dmed, "p90": dp90}, "lookup": {"min": lmin, "median": lmed, "p90": lp90}, "overhead_ms": delta, "target_ms": 0.5, "met": delta <= 0.5})
        );
    } else {
        println!(
            "`{}` in image {name} vs --rootfs {} ({runs} runs each, interleaved)",
            ARGV.join(" "),
            rootfs.display()
        );
        println!("  --image         min {imin:7.3} ms  median {imed:7.3} ms  p90 {ip90:7.3} ms  (store look-up included)");
        println!("  --rootfs        min {dmin:7.3} ms  median {dmed:7.3} ms  p90 {dp90:7.3} ms");
        println!("  look-up alone   min {lmin:7.3} ms  median {lmed:7.3} ms  p90 {lp90:7.3} ms  (store open, resolve, metadata)");
        println!(
            "  image overhead  median {delta:+.3} ms (target at most +0.5 ms: {})",
            if delta <= 0.5 { "met" } else { "not met" }
        );
    }
    0
}
