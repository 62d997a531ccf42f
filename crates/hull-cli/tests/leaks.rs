//! Nothing hull starts outlives it. `hull serve` processes create and destroy sandboxes and exit,
//! or are SIGKILLed at random points (starting, creating a sandbox, running a box, idle); then
//! no process of theirs is left (without any sweep), and after one sweep (`hull doctor`) no
//! cgroup named after them and nothing in their temporary directory is left either.
//!
//! Only what this test started is counted: its servers carry a marker in their environment
//! (which every process they fork shows in `/proc/PID/environ` until it execs), box processes
//! are found by their cgroups (named after the server's pid), and the servers' TMPDIR is the
//! test's own.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Sandboxes created and destroyed by servers that then exit on their own.
const CYCLES: usize = 200;
/// Servers SIGKILLed at a random point.
const KILLED: usize = 20;
/// Servers at once: contention for the CPU widens the moments in which a server can die
/// between forking a helper and the helper asking to die with it.
const LANES: usize = 4;
const _: () = assert!(
    CYCLES.is_multiple_of(LANES),
    "the cycles are spread evenly over the lanes"
);

/// A small deterministic generator (xorshift64*), seeded per run and printed, so a failing
/// sequence can be replayed with HULL_LEAK_SEED.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next: i64,
}

impl Server {
    fn start(temp: &Path, marker: &str) -> Server {
        let mut child = Command::new(common::bin())
            .arg("serve")
            .env("TMPDIR", temp)
            .env("HULL_LEAK_TEST", marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn hull serve");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Server {
            child,
            stdin,
            stdout,
            next: 0,
        }
    }

    /// Sends a request without waiting for its answer; returns its id.
    fn send(&mut self, method: &str, params: Value) -> i64 {
        self.next += 1;
        let line = json!({"id": self.next, "method": method, "params": params});
        writeln!(self.stdin.as_mut().unwrap(), "{line}").unwrap();
        self.next
    }

    fn ok(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params.clone());
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "hull serve closed its output during {method} {params}"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id && v.get("event").is_none() {
                assert!(v.get("error").is_none(), "{method} {params}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Waits for the server to exit by itself (after `shutdown` or the end of its input).
    fn wait_exit(mut self) {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "hull serve exited with {st}");
                return;
            }
            if t.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("hull serve did not exit within 30 s of its shutdown");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// `n` sandboxes created and destroyed, each by a server of its own as the SDKs do (running
/// boxes in them, so the namespace pools and spares are being refilled as they go), which then
/// exits through `shutdown` or the end of its input.
fn cycles(temp: &Path, marker: &str, rng: &mut Rng, n: usize, pids: &mut Vec<u32>) {
    for i in 0..n {
        let mut s = Server::start(temp, marker);
        pids.push(s.child.id());
        let sb = s.ok("sandbox.create", json!({}))["sandbox"]
            .as_str()
            .unwrap()
            .to_string();
        let r = s.ok("sandbox.run", json!({"sandbox": sb, "argv": ["true"]}));
        assert_eq!(r["exit_code"], 0, "{r}");
        if i % 4 == 3 {
            let r = s.ok(
                "sandbox.run_code",
                json!({"sandbox": sb, "code": "print(1)"}),
            );
            assert_eq!(r["stdout"], "1\n", "{r}");
        }
        s.ok("sandbox.destroy", json!({"sandbox": sb}));
        if rng.below(2) == 0 {
            s.ok("shutdown", json!({}));
        }
        drop(s.stdin.take());
        s.wait_exit();
    }
}

/// A server SIGKILLed at a random point: just started (phase 0), creating a sandbox (1),
/// running a box in one (2), or idle with a sandbox (3); the phase is random unless given.
fn killed(temp: &Path, marker: &str, rng: &mut Rng, phase: Option<u64>, pids: &mut Vec<u32>) {
    let mut s = Server::start(temp, marker);
    pids.push(s.child.id());
    match phase.unwrap_or_else(|| rng.below(4)) {
        0 => sleep_ms(rng.below(30)),
        1 => {
            s.send("sandbox.create", json!({}));
            sleep_ms(rng.below(40));
        }
        2 => {
            let sb = s.ok("sandbox.create", json!({}))["sandbox"]
                .as_str()
                .unwrap()
                .to_string();
            if rng.below(2) == 0 {
                s.send(
                    "sandbox.run",
                    json!({"sandbox": sb, "argv": ["sleep", "30"]}),
                );
            } else {
                s.send(
                    "sandbox.run_code",
                    json!({"sandbox": sb, "code": "import time\ntime.sleep(30)"}),
                );
            }
            sleep_ms(rng.below(60));
        }
        _ => {
            let sb = s.ok("sandbox.create", json!({}))["sandbox"]
                .as_str()
                .unwrap()
                .to_string();
            s.ok("sandbox.run", json!({"sandbox": sb, "argv": ["true"]}));
            sleep_ms(rng.below(100));
        }
    }
    s.kill();
}

/// Processes this test's servers left: any that carries the marker in its environment, or that
/// sits in a cgroup named after one of the servers.
fn leftover_processes(marker: &str, pids: &[u32]) -> Vec<String> {
    let needle = format!("HULL_LEAK_TEST={marker}\0");
    // `hull-<pid>.<random>-...`: only this version's names, so another hull that happens to
    // have one of our servers' pids (other hulls run here) is not counted.
    let cgroup_names: Vec<String> = pids.iter().map(|p| format!("/hull-{p}.")).collect();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let marked = environ
            .windows(needle.len())
            .any(|w| w == needle.as_bytes());
        let cgroup = std::fs::read_to_string(e.path().join("cgroup")).unwrap_or_default();
        let boxed = cgroup_names.iter().any(|c| cgroup.contains(c.as_str()));
        if marked || boxed {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // A zombie is gone but for its exit status: not a leak.
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            if state != Some("Z") && !stat.is_empty() {
                found.push(format!("{pid}: {}", stat.trim()));
            }
        }
    }
    found
}

/// Directories under `dir` (down to `depth` levels) whose names carry one of `pids` the way hull
/// names what it makes (`hull-<pid>.<random>-`, and the `hull-ws-`, `hull-tmpl-` forms).
fn named_after(dir: &Path, pids: &[u32], depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = pids.iter().any(|p| {
            ["hull-", "hull-ws-", "hull-tmpl-"].iter().any(|pre| {
                name.strip_prefix(pre)
                    .and_then(|r| r.strip_prefix(&p.to_string()))
                    .is_some_and(|r| r.starts_with('.'))
            })
        });
        if ours {
            out.push(e.path());
        } else if depth > 1 {
            named_after(&e.path(), pids, depth - 1, out);
        }
    }
}

/// Directories named after `pids` (as [`named_after`] finds them) under every cgroup hierarchy.
fn cgroups_named_after(pids: &[u32]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    named_after(Path::new("/sys/fs/cgroup"), pids, 5, &mut dirs);
    dirs
}

/// Every box cgroup directory of any hull (`hull-<pid>.<random>-...`) under every hierarchy.
fn all_box_cgroups() -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let boxed = name.strip_prefix("hull-").is_some_and(|r| {
                let digits = r.bytes().take_while(u8::is_ascii_digit).count();
                digits > 0 && r[digits..].starts_with('.')
            });
            if boxed {
                out.push(e.path());
            } else if depth > 1 {
                walk(&e.path(), depth - 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new("/sys/fs/cgroup"), 5, &mut out);
    out
}

/// The tests of this file run one at a time: each counts what is named after its servers'
/// pids, and a pid one test's server had may be reused by the other's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn no_process_cgroup_or_temporary_directory_outlives_its_server() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Cgroups another hull left before this test (a pid of ours may have been its pid) are not
    // this test's.
    let before_test = all_box_cgroups();
    let started = Instant::now();
    let seed = std::env::var("HULL_LEAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            (d.as_secs() << 30) ^ u64::from(d.subsec_nanos()) | 1
        });
    println!("seed {seed} (HULL_LEAK_SEED={seed} replays this run)");
    let mut rng = Rng(seed);
    let marker = format!("{}-{seed}", std::process::id());
    let temp = tempfile::tempdir().unwrap();
    let mut pids = Vec::new();
    // The sandbox cycles and all kills but the last interleave, in lanes running at once (each
    // server sweeps the leftovers of those killed before it started).
    let lanes: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..LANES)
            .map(|lane| {
                // KILLED - 1 kills, spread over the lanes.
                let kills = (KILLED - 1) / LANES + usize::from(lane < (KILLED - 1) % LANES);
                let (temp, marker) = (temp.path(), marker.as_str());
                let lane_seed = rng.next() | 1;
                scope.spawn(move || {
                    let mut rng = Rng(lane_seed);
                    let mut pids = Vec::new();
                    let mut left = CYCLES / LANES;
                    for k in 0..kills {
                        let n = (left / (kills - k)).max(1).min(left);
                        cycles(temp, marker, &mut rng, n, &mut pids);
                        left -= n;
                        killed(temp, marker, &mut rng, None, &mut pids);
                    }
                    cycles(temp, marker, &mut rng, left, &mut pids);
                    pids
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for p in lanes {
        pids.extend(p);
    }
    // The last one is killed idle with a sandbox, so the final sweep has something to remove.
    killed(temp.path(), &marker, &mut rng, Some(3), &mut pids);
    println!(
        "{} servers ran {CYCLES} sandbox cycles and {KILLED} were SIGKILLed in {:.1} s",
        pids.len(),
        started.elapsed().as_secs_f64()
    );
    // No process may outlive its server, sweep or not (a SIGKILL in flight may take a moment).
    let t = Instant::now();
    let mut left = leftover_processes(&marker, &pids);
    while !left.is_empty() && t.elapsed() < Duration::from_secs(3) {
        sleep_ms(50);
        left = leftover_processes(&marker, &pids);
    }
    assert!(
        left.is_empty(),
        "{} processes outlived their hull serve:\n{}",
        left.len(),
        left.join("\n")
    );
    // What a SIGKILLed server cannot remove itself goes with the next sweep.
    let mut before = Vec::new();
    named_after(temp.path(), &pids, 1, &mut before);
    assert!(
        !before.is_empty(),
        "the killed servers left nothing to sweep: the kills missed their sandboxes"
    );
    let doctor = Command::new(common::bin())
        .args(["doctor", "--json"])
        .env("TMPDIR", temp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let doctor_pid = doctor.id();
    let out = doctor.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    println!(
        "{} directories of killed servers before the sweep; hull doctor: {}",
        before.len(),
        report
            .lines()
            .skip_while(|l| !l.contains("\"leftovers\""))
            .nth(2)
            .unwrap_or("")
            .trim()
    );
    let dirs: Vec<PathBuf> = cgroups_named_after(&pids)
        .into_iter()
        .filter(|d| !before_test.contains(d))
        .collect();
    assert!(
        dirs.is_empty(),
        "cgroups left after a sweep: {dirs:?}\n{report}"
    );
    let temp_left: Vec<String> = std::fs::read_dir(temp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // The sweeper's own lock file (it may have named something) is not a leftover.
        .filter(|n| !n.starts_with(&format!("hull-live-{doctor_pid}.")))
        .collect();
    assert!(
        temp_left.is_empty(),
        "left in the servers' TMPDIR after a sweep: {temp_left:?}\n{report}"
    );
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn a_sweep_placed_elsewhere_still_removes_a_killed_servers_cgroups() {
    // A hull SIGKILLed while its box runs leaves the box's cgroups under its cgroup parent. The
    // next hull sharing its TMPDIR sweeps them even when it makes its own cgroups elsewhere (or
    // none: here its HULL_CGROUP_PARENT does not exist), because the dead one's lock file says
    // where they are; and it keeps the lock file while any is left.
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let temp = tempfile::tempdir().unwrap();
    let marker = format!("{}-elsewhere", std::process::id());
    let before = all_box_cgroups();
    let mut s = Server::start(temp.path(), &marker);
    let pid = s.child.id();
    let sb = s.ok("sandbox.create", json!({}))["sandbox"]
        .as_str()
        .unwrap()
        .to_string();
    s.send(
        "sandbox.run",
        json!({"sandbox": sb, "argv": ["sleep", "30"]}),
    );
    let t = Instant::now();
    let mut made = Vec::new();
    while made.is_empty() && t.elapsed() < Duration::from_secs(10) {
        sleep_ms(20);
        made = cgroups_named_after(&[pid])
            .into_iter()
            .filter(|d| !before.contains(d))
            .collect();
    }
    s.kill();
    if made.is_empty() {
        hull_testkit::skip("the server made no box cgroup here (cgroups unusable)");
        return;
    }
    let t = Instant::now();
    while !leftover_processes(&marker, &[pid]).is_empty() && t.elapsed() < Duration::from_secs(3) {
        sleep_ms(50);
    }
    let out = Command::new(common::bin())
        .args(["doctor", "--json"])
        .env("TMPDIR", temp.path())
        .env("HULL_CGROUP_PARENT", "hull-no-such-parent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let left: Vec<PathBuf> = made.into_iter().filter(|d| d.exists()).collect();
    assert!(
        left.is_empty(),
        "a sweep with another cgroup parent left the killed server's cgroups: {left:?}\n{report}"
    );
}
