//! `hull bench --sdk`, `--peers` and `--named` through the real binary, with tiny run counts: every
//! workload is reported with sane statistics, a side or peer that cannot run is named with the
//! reason, and flag combinations that mean nothing are refused. Speed itself is not asserted
//! here (that is what the bench is for).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use hull_testkit::{skip, skip_part};
use serde_json::Value;

const WORKLOADS: [&str; 5] = [
    "prewarm",
    "cold_host",
    "cold_image",
    "kernel_start",
    "kernel_cell",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python SDK from the source tree (the drivers point it at the hull under test).
fn python_path() -> PathBuf {
    repo().join("bindings/python/python")
}

fn node_sdk() -> Option<PathBuf> {
    let p = repo().join("bindings/node/dist/index.js");
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (node && p.is_file()).then_some(p)
}

fn python_imports(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A hull store and a kern cache holding bench-python:1 (benches/python-image.sh, run once per
/// test binary), or why they could not be made.
struct Homes {
    hull_home: PathBuf,
    xdg_cache: PathBuf,
}

fn image_homes() -> &'static Result<Homes, String> {
    static HOMES: OnceLock<Result<Homes, String>> = OnceLock::new();
    HOMES.get_or_init(|| {
        // Under cargo's target directory rather than a TempDir (a static is never dropped, so a
        // TempDir would stay in /tmp); the script replaces what an earlier run left there.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-image");
        let hull_home = dir.join("hull");
        let xdg_cache = dir.join("cache");
        let out = Command::new("bash")
            .arg(repo().join("benches/python-image.sh"))
            .env("HULL_BIN", common::bin())
            .env("HULL_HOME", &hull_home)
            .env("XDG_CACHE_HOME", &xdg_cache)
            .env("BENCH_IMAGE_DIR", dir.join("build"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run benches/python-image.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "benches/python-image.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(Homes {
            hull_home,
            xdg_cache,
        })
    })
}

/// `hull bench ARGS --json` with these homes, parsed.
fn bench_json(args: &[&str], hull_home: &Path, xdg_cache: &Path) -> Value {
    let mut cmd = Command::new(common::bin());
    cmd.arg("bench")
        .args(args)
        .arg("--json")
        .env("HULL_HOME", hull_home)
        .env("XDG_CACHE_HOME", xdg_cache)
        .env("PYTHONPATH", python_path())
        .stdin(Stdio::null());
    match node_sdk() {
        Some(p) => cmd.env("HULL_BENCH_NODE_SDK", p),
        None => cmd.env("HULL_BENCH_NODE_SDK", "/nonexistent/index.js"),
    };
    let out = cmd.output().expect("spawn hull bench");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "hull bench {args:?} failed ({}): {text}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = text.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"))
}

fn rows<'a>(v: &'a Value, side: &str, workload: &str) -> Vec<&'a Value> {
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["side"] == side && r["workload"] == workload)
        .collect()
}

/// A row's figures are positive, ordered and counted.
fn assert_sane(r: &Value, runs: u64) {
    let (min, p50, p90) = (
        r["min"].as_f64().unwrap(),
        r["p50"].as_f64().unwrap(),
        r["p90"].as_f64().unwrap(),
    );
    assert!(0.0 < min && min <= p50 && p50 <= p90, "{r}");
    assert_eq!(r["n"].as_u64(), Some(runs), "{r}");
}

fn skips_of<'a>(v: &'a Value, side: &str) -> Vec<&'a Value> {
    v["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .filter(|s| s["side"] == side)
        .collect()
}

#[test]
fn sdk_json_reports_every_workload_through_both_sdks_with_p50_at_most_p90() {
    let homes = match image_homes() {
        Ok(h) => h,
        Err(why) => return skip(why),
    };
    let v = bench_json(
        &["--sdk", "--runs", "2"],
        &homes.hull_home,
        &homes.xdg_cache,
    );
    assert_eq!(v["mode"], "sdk");
    for key in ["start", "end"] {
        let la = v["load_average"][key].as_array().expect("load average");
        assert_eq!(la.len(), 3, "{v}");
    }
    let mut sides = vec!["python"];
    if node_sdk().is_some() {
        sides.push("node");
    } else {
        skip_part(
            "node",
            "no built Node SDK (cd bindings/node && npm ci && npm run build)",
        );
        assert_eq!(skips_of(&v, "node").len(), 1, "{v}");
    }
    for spacing in ["agent", "back_to_back"] {
        let bare = rows(&v, "bare", "python3 -c 'print(1)'");
        let bare: Vec<_> = bare.iter().filter(|r| r["spacing"] == spacing).collect();
        assert_eq!(bare.len(), 1, "{v}");
        assert_sane(bare[0], 2);
        for side in &sides {
            for w in WORKLOADS {
                let r = rows(&v, side, w);
                let r: Vec<_> = r.iter().filter(|r| r["spacing"] == spacing).collect();
                assert_eq!(r.len(), 1, "{side} {w} {spacing} in {v}");
                assert_sane(r[0], 2);
                assert!(r[0]["ratio_to_bare_p50"].as_f64().unwrap() > 0.0, "{v}");
            }
        }
    }
}

#[test]
fn sdk_without_the_image_names_why_cold_image_is_skipped() {
    let empty = tempfile::tempdir().unwrap();
    let v = bench_json(&["--sdk", "--runs", "1"], empty.path(), empty.path());
    assert!(rows(&v, "python", "cold_image").is_empty(), "{v}");
    let why = skips_of(&v, "*");
    assert_eq!(why.len(), 1, "{v}");
    assert_eq!(why[0]["workload"], "cold_image");
    let text = why[0]["why"].as_str().unwrap();
    assert!(
        text.contains("bench-python:1") && text.contains("benches/python-image.sh"),
        "{text}"
    );
    assert_eq!(rows(&v, "python", "prewarm").len(), 2, "{v}");
}

#[test]
fn peers_report_kern_and_bwrap_beside_hull_or_say_why_not() {
    let homes = match image_homes() {
        Ok(h) => h,
        Err(why) => return skip(why),
    };
    let v = bench_json(
        &["--peers", "--runs", "1"],
        &homes.hull_home,
        &homes.xdg_cache,
    );
    assert_eq!(v["mode"], "peers");
    let kern = python_imports("kern_sandbox");
    for w in ["prewarm", "cold_image", "kernel_start", "kernel_cell"] {
        let k = rows(&v, "kern", w);
        if kern {
            let h = rows(&v, "hull", w);
            assert_eq!((h.len(), k.len()), (1, 1), "{w} in {v}");
            assert_sane(h[0], 1);
            assert_sane(k[0], 1);
            assert!(k[0]["ratio_to_hull_p50"].as_f64().unwrap() > 0.0, "{v}");
            assert!(k[0]["ratio_to_hull_p90"].as_f64().unwrap() > 0.0, "{v}");
        } else {
            assert!(k.is_empty(), "{v}");
        }
    }
    if !kern {
        skip_part("kern", "kern-sandbox is not installed");
        let why = skips_of(&v, "kern");
        assert!(
            why[0]["why"].as_str().unwrap().contains("kern-sandbox"),
            "{v}"
        );
    }
    let bwrap = Command::new("bwrap")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    for w in ["one-shot /bin/true", "one-shot python3 -c 'print(1)'"] {
        let (bare, hull, b) = (
            rows(&v, "bare", w),
            rows(&v, "hull", w),
            rows(&v, "bwrap", w),
        );
        assert_eq!((bare.len(), hull.len()), (1, 1), "{w} in {v}");
        assert_sane(hull[0], 1);
        if bwrap {
            assert_eq!(b.len(), 1, "{w} in {v}");
            assert_sane(b[0], 1);
            assert!(b[0]["ratio_to_hull_p50"].as_f64().unwrap() > 0.0, "{v}");
        } else {
            assert!(b.is_empty(), "{v}");
        }
    }
    if !bwrap {
        skip_part("bwrap", "bubblewrap is not installed");
        assert!(!skips_of(&v, "bwrap").is_empty(), "{v}");
    }
}

#[test]
fn peers_without_the_image_say_why_kern_is_skipped() {
    let empty = tempfile::tempdir().unwrap();
    let v = bench_json(&["--peers", "--runs", "1"], empty.path(), empty.path());
    assert!(rows(&v, "kern", "prewarm").is_empty(), "{v}");
    let why = skips_of(&v, "kern");
    assert_eq!(why.len(), 1, "{v}");
    assert!(
        why[0]["why"]
            .as_str()
            .unwrap()
            .contains("benches/python-image.sh"),
        "{v}"
    );
}

#[test]
fn flag_combinations_that_mean_nothing_are_refused_naming_the_flags() {
    for (args, a, b) in [
        (&["--sdk", "--image", "x"][..], "--sdk", "--image"),
        (&["--peers", "--image", "x"][..], "--peers", "--image"),
        (&["--peers", "--sdk"][..], "--peers", "--sdk"),
        (&["--sdk", "--back-to-back"][..], "--sdk", "--back-to-back"),
        (&["--named", "--peers"][..], "--named", "--peers"),
        (&["--named", "--image", "x"][..], "--named", "--image"),
        (&["--template-mb", "5"][..], "--template-mb", "--named"),
    ] {
        let mut full = vec!["bench"];
        full.extend_from_slice(args);
        let out = common::hull(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(a) && err.contains(b), "{args:?}: {err}");
    }
}

#[test]
fn named_reports_every_case_with_positive_figures_and_ratios_and_leaves_nothing() {
    let child = Command::new(common::bin())
        .args([
            "bench",
            "--named",
            "--runs",
            "2",
            "--template-mb",
            "2",
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hull bench");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "hull bench --named failed ({}): {text}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"));
    assert_eq!(v["mode"], "named");
    assert_eq!(v["runs"], 2);
    assert_eq!(v["template_mb"]["big"], 2);
    for (workload, side, base) in [
        ("exec true", "bare", Some("bare")),
        ("exec true", "keeper socket", Some("bare")),
        ("exec true", "hull exec process", Some("bare")),
        ("spawn to first output", "bare", Some("bare")),
        ("spawn to first output", "hull serve", Some("bare")),
        ("create + first exec", "hull run -- true", Some("image")),
        ("create + first exec", "image", Some("image")),
        ("create + first exec", "template 10 MB", Some("image")),
        ("create + first exec", "template 2 MB", Some("image")),
        ("stop, start", "stop", None),
        ("stop, start", "start", None),
    ] {
        let r = rows(&v, side, workload);
        assert_eq!(r.len(), 1, "{workload}/{side}: {v}");
        assert_sane(r[0], 2);
        match base {
            Some(b) => {
                assert_eq!(r[0]["base"], b, "{}", r[0]);
                let (r50, r90) = (r[0]["ratio_p50"].as_f64(), r[0]["ratio_p90"].as_f64());
                assert!(
                    r50.is_some_and(|x| x > 0.0) && r90.is_some_and(|x| x > 0.0),
                    "{}",
                    r[0]
                );
                if side == b {
                    assert_eq!(r50, Some(1.0), "{}", r[0]);
                }
            }
            None => assert!(r[0].get("ratio_p50").is_none(), "{}", r[0]),
        }
    }
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(11), "{v}");
    // Its state directory, sandboxes, templates and keepers are gone with it.
    for base in ["/var/tmp", "/tmp"] {
        let dir = Path::new(base).join(format!("hull-bench-named-{pid}"));
        assert!(!dir.exists(), "{} left behind", dir.display());
        let marker = format!("HULL_SANDBOXES={}", dir.display());
        let keepers: Vec<String> = std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(Result::ok)
            .filter(|e| {
                std::fs::read(e.path().join("environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == marker.as_bytes()))
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(keepers.is_empty(), "keepers left behind: {keepers:?}");
    }
}

/// `hull bench --network`: the host network and the gateway are measured side by side (every
/// figure present and ordered), slirp4netns is measured or its absence named; the box-start
/// figures are there. Traffic goes only to this host's own address.
#[test]
fn network_reports_the_gateway_beside_the_host_network_and_names_a_missing_slirp() {
    let out = Command::new(common::bin())
        .args(["bench", "--network", "--runs", "1", "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("run hull bench --network");
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success()
        && String::from_utf8_lossy(&out.stderr).contains("no non-loopback IPv4 address")
    {
        skip("this host has no non-loopback IPv4 address for the gateway to dial");
        return;
    }
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(text.trim()).expect("JSON");
    let sides = v["sides"].as_array().expect("sides");
    let side = |n: &str| {
        sides
            .iter()
            .find(|s| s["side"] == n)
            .cloned()
            .unwrap_or_default()
    };
    for n in ["host network", "hull gateway"] {
        let s = side(n);
        for f in ["connect_us", "rtt_us"] {
            let (p50, p90) = (s[f]["p50"].as_f64(), s[f]["p90"].as_f64());
            assert!(
                matches!((p50, p90), (Some(a), Some(b)) if a > 0.0 && a <= b),
                "{n} {f}: {s}"
            );
        }
        assert!(
            s["upload_mb_s"]["p50"].as_f64().is_some_and(|m| m > 0.0),
            "{n}: {s}"
        );
    }
    let slirp = side("slirp4netns");
    assert!(
        slirp["upload_mb_s"]["p50"].as_f64().is_some() || slirp["skipped"].is_string(),
        "{slirp}"
    );
    for k in ["no network", "gateway network"] {
        assert!(
            v["box_start_ms"][k]["p50"]
                .as_f64()
                .is_some_and(|m| m > 0.0),
            "{v}"
        );
    }
}
