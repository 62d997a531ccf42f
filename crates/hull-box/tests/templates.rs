//! Boxes that enter a shared template (a long-lived Runtime's fast path) keep every property of
//! a box built from scratch. Real namespaces and mounts; runs as root and, in CI, unprivileged.

use std::sync::Arc;

use hull_box::{BoxSpec, NoSink, RunOptions, RunResult, Runtime, WarmOptions};

fn runtime() -> Runtime {
    Runtime::with_warm(WarmOptions::ALL).expect("runtime")
}

fn python(rt: &Runtime, code: &str) -> RunResult {
    let spec = BoxSpec::new(vec!["python3".into(), "-c".into(), code.into()]);
    rt.run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect("box runs")
}

#[test]
fn a_templated_box_is_read_only_with_its_own_writable_places() {
    let rt = runtime();
    let code = "import os, errno\nfor p in ['/usr/x', '/etc/x', '/x', '/dev/x']:\n    try:\n        open(p, 'w'); print(p, 'WROTE')\n    except OSError as e:\n        print(p, errno.errorcode[e.errno])\nopen('/tmp/a', 'w').write('1'); open('/workspace/a', 'w').write('1')\nprint('uid', os.getuid(), 'pid', os.getpid())\nprint(sorted(os.listdir('/')))";
    let r = python(&rt, code);
    assert!(r.success, "{r:?}");
    assert_eq!(r.stdout.matches("EROFS").count(), 4, "{}", r.stdout);
    assert!(!r.stdout.contains("WROTE"), "{}", r.stdout);
    // Our own pid namespace (pid 1 is the reaper, the program is 2) and uid 0 inside only.
    assert!(r.stdout.contains("uid 0 pid 2"), "{}", r.stdout);
    // Nothing of the host's root or of the staging directory leaks into the box's root.
    let top = r.stdout.lines().last().unwrap_or_default();
    for name in ["'home'", "'root'", "'var'", "'run'", "hull-tmpl"] {
        assert!(!top.contains(name), "{name} visible: {top}");
    }
    assert_eq!(rt.warm_stats().templates, 1);
}

#[test]
fn a_templated_box_mounts_only_its_own_tree_and_sees_only_its_own_processes() {
    // The template pivots into its sealed root once, so a box's copy holds no host mount (no
    // cgroup, sysfs or staging directory), and its /proc (over the template's own, of an empty
    // pid namespace) lists only the box's processes.
    let rt = runtime();
    let code = "import os\nfor l in open('/proc/self/mountinfo'): print('M', l.split()[4], l.split(' - ')[1].split()[0])\nprint('P', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))";
    let r = python(&rt, code);
    assert!(r.success, "{r:?}");
    let points: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("M "))
        .collect();
    assert!(points.iter().any(|l| l.starts_with("/usr ")), "{points:?}");
    // One root, and every other mount point is a place of the box's own layout: the skeleton's
    // binds (/usr, files and directories of /etc, devices), its writable mounts and its procfs.
    assert_eq!(
        points.iter().filter(|l| l.starts_with("/ ")).count(),
        1,
        "{points:?}"
    );
    let own = ["/usr", "/etc/", "/dev", "/tmp", "/workspace", "/proc"];
    for l in &points {
        let point = l.split(' ').next().unwrap_or_default();
        assert!(
            point == "/"
                || own.iter().any(|p| point == p.trim_end_matches('/')
                    || point.starts_with(p)
                        && (p.ends_with('/') || point[p.len()..].starts_with('/'))),
            "host mount {l} in {points:?}"
        );
    }
    assert!(r.stdout.contains("P [1, 2]"), "{}", r.stdout);
    // Uncovering the template's procfs takes an unmount, which the filter refuses even to a box
    // that keeps CAP_SYS_ADMIN in its own user namespace.
    let mut spec = BoxSpec::new(vec![
        "python3".into(),
        "-c".into(),
        "import ctypes; print(ctypes.CDLL(None, use_errno=True).umount2(b'/proc', 2))".into(),
    ]);
    spec.cap_add = vec!["SYS_ADMIN".into()];
    let r = rt
        .run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect("box runs");
    assert_eq!(
        r.fault.as_ref().map(|f| f.kind),
        Some(hull_box::FaultType::EscapeBlocked),
        "{r:?}"
    );
}

#[test]
fn the_template_mounts_cannot_be_reopened_writable() {
    // Capabilities are dropped and seccomp kills mount calls, so try from the one place that
    // could: a box keeping CAP_SYS_ADMIN in its own user namespace still meets locked mounts.
    let rt = runtime();
    let mut spec = BoxSpec::new(vec![
        "python3".into(),
        "-c".into(),
        "import os; print(os.access('/usr', os.W_OK), os.statvfs('/usr').f_flag & 1)".into(),
    ]);
    spec.cap_add = vec!["SYS_ADMIN".into()];
    let r = rt
        .run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect("box runs");
    assert!(r.success, "{r:?}");
    assert_eq!(r.stdout.trim(), "False 1", "{r:?}");
}

#[test]
fn one_template_serves_many_boxes_at_once() {
    let rt = Arc::new(runtime());
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let rt = Arc::clone(&rt);
            std::thread::spawn(move || python(&rt, &format!("import os; print({i}, os.getpid())")))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = h.join().expect("thread");
        assert!(r.success, "{r:?}");
        assert_eq!(r.stdout.trim(), format!("{i} 2"));
    }
    assert_eq!(rt.warm_stats().templates, 1);
    // Another hostname is another skeleton (/etc/hostname), so another template.
    let mut spec = BoxSpec::new(vec!["cat".into(), "/etc/hostname".into()]);
    spec.hostname = "other".into();
    let r = rt
        .run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect("box runs");
    assert_eq!(r.stdout.trim(), "other", "{r:?}");
    assert_eq!(rt.warm_stats().templates, 2);
}

#[test]
fn a_setup_failure_after_the_template_names_its_step() {
    let rt = runtime();
    let mut spec = BoxSpec::new(vec!["true".into()]);
    spec.cwd = "/no/such/dir".into();
    let err = rt
        .run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("enter working directory") && err.contains("/no/such/dir"),
        "{err}"
    );
}

#[test]
fn the_network_stays_off_and_timeouts_kill_the_box() {
    let rt = runtime();
    let r = python(&rt, "import os; print(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'nosys')\nimport socket\ns = socket.socket(); s.settimeout(1)\ntry:\n    s.connect(('127.0.0.1', 9)); print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno)");
    assert!(r.stdout.contains("refused 111"), "{r:?}");
    let mut spec = BoxSpec::new(vec![
        "python3".into(),
        "-c".into(),
        "while True: pass".into(),
    ]);
    spec.timeout = std::time::Duration::from_secs(1);
    let r = rt
        .run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect("box runs");
    assert_eq!(r.fault.map(|f| f.kind.as_str()), Some("timeout"));
}

#[test]
fn pooled_network_and_user_namespaces_are_fresh_per_box() {
    let rt = runtime();
    let code = "import os, socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\nc = socket.create_connection(s.getsockname(), timeout=2)\nprint(*(os.readlink('/proc/self/ns/' + n) for n in ('net', 'user', 'ipc', 'uts')), 'uid', os.getuid(), socket.gethostname(), 'lo-ok')";
    // The pool fills in the background; give a loaded machine time (up to 30 boxes, 200 ms
    // apart) for three boxes to have used it.
    for _ in 0..30 {
        let r = python(&rt, code);
        // uid 0 of the box's own user namespace, and the hostname it set in its uts namespace.
        assert!(r.success && r.stdout.contains("uid 0 hull lo-ok"), "{r:?}");
        if rt.warm_stats().pooled_nets >= 3 && rt.warm_stats().pooled_users >= 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        rt.warm_stats().pooled_nets >= 3,
        "only {} boxes used the pool",
        rt.warm_stats().pooled_nets
    );
    assert!(
        rt.warm_stats().pooled_users >= 3,
        "only {} boxes used the user namespace pool",
        rt.warm_stats().pooled_users
    );
    // Boxes alive at the same time never share a network, user, ipc or uts namespace (namespace
    // numbers are only unique among live namespaces, so compare boxes that overlap).
    let rt = Arc::new(rt);
    let overlapping = format!("{code}\nimport time; time.sleep(0.7)");
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (rt, c) = (Arc::clone(&rt), overlapping.clone());
            std::thread::spawn(move || python(&rt, &c))
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    for h in handles {
        let r = h.join().expect("thread");
        assert!(r.success && r.stdout.contains("lo-ok"), "{r:?}");
        for ns in r.stdout.split_whitespace().take(4) {
            assert!(
                seen.insert(ns.to_string()),
                "two live boxes shared a namespace: {}",
                r.stdout
            );
        }
    }
    // A box that keeps a network capability gets a namespace of its own user namespace instead.
    let before = rt.warm_stats().pooled_nets;
    let mut spec = BoxSpec::new(vec![
        "python3".into(),
        "-c".into(),
        "import socket; s = socket.socket(); s.bind(('127.0.0.1', 80)); print('bound 80')".into(),
    ]);
    spec.cap_add = vec!["NET_BIND_SERVICE".into()];
    let r = rt
        .run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect("box runs");
    assert!(r.stdout.contains("bound 80"), "{r:?}");
    assert_eq!(rt.warm_stats().pooled_nets, before);
}

#[test]
fn a_background_process_holding_the_output_ends_with_the_program() {
    // When the program exits, pid 1 kills the rest of the box before reporting (its own exit
    // waits for the teardown), so a leftover holding stdout neither stalls the result until the
    // deadline nor writes after it. Both a templated and a from-scratch box.
    for rt in [runtime(), Runtime::new().expect("runtime")] {
        let mut spec = BoxSpec::new(vec![
            "sh".into(),
            "-c".into(),
            "(sleep 20; echo late) & echo early".into(),
        ]);
        spec.timeout = std::time::Duration::from_secs(15);
        let (r, teardown) = rt
            .run_detached(&spec, RunOptions { capture: true }, &mut NoSink)
            .expect("box runs");
        teardown.finish();
        assert!(r.success && r.fault.is_none(), "{r:?}");
        assert_eq!(r.stdout.trim(), "early", "{r:?}");
    }
}

#[test]
fn spare_cgroups_and_workspaces_are_fresh_per_box_and_go_with_the_runtime() {
    // A long-lived Runtime makes box cgroups and temporary workspaces ahead of time; each goes to
    // one box only, a cgroup carries the limits of the box that takes it, and the unused ones are
    // removed with the Runtime.
    let rt = runtime();
    let code = "import os\nprint('ws', sorted(os.listdir('/workspace')))\nopen('/workspace/mark', 'w').write('x')\nb = bytearray(24 << 20)\nprint('ok')";
    let mut spec = BoxSpec::new(vec!["python3".into(), "-c".into(), code.into()]);
    spec.memory = Some(96 << 20);
    for _ in 0..30 {
        let r = rt
            .run(&spec, RunOptions { capture: true }, &mut NoSink)
            .expect("box runs");
        // An empty workspace every time: none is handed to a second box.
        assert!(
            r.success && r.stdout.contains("ws []") && r.stdout.contains("ok"),
            "{r:?}"
        );
        let w = rt.warm_stats();
        let (cgroups, workspaces) = (w.spare_cgroups, w.spare_workspaces);
        if cgroups >= 3 && workspaces >= 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let w = rt.warm_stats();
    let (cgroups, workspaces) = (w.spare_cgroups, w.spare_workspaces);
    assert!(
        workspaces >= 3,
        "only {workspaces} boxes used a spare workspace"
    );
    if rt.cgroups().is_ok() {
        assert!(cgroups >= 3, "only {cgroups} boxes used a spare cgroup");
        // A box asking for other limits gets them, not the spares' 96 MiB: 64 MiB of 16 is OOM.
        let mut small = BoxSpec::new(vec![
            "python3".into(),
            "-c".into(),
            "b = bytearray(64 << 20); print('fits')".into(),
        ]);
        small.memory = Some(16 << 20);
        (small.tmp_size, small.shm_size) = (8 << 20, 8 << 20);
        for _ in 0..3 {
            let r = rt
                .run(&small, RunOptions { capture: true }, &mut NoSink)
                .expect("box runs");
            assert_eq!(
                r.fault.as_ref().map(|f| f.kind),
                Some(hull_box::FaultType::Oom),
                "{r:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    // Let the thread refill, then check the ready ones are removed with the Runtime.
    let mut spare = Vec::new();
    for _ in 0..100 {
        spare = rt.warm_stats().spare_paths;
        if spare.len() >= 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!spare.is_empty(), "no spares were ready");
    assert!(spare.iter().all(|p| p.is_dir()), "{spare:?}");
    drop(rt);
    for p in &spare {
        assert!(!p.exists(), "{} outlived its Runtime", p.display());
    }
}

/// Runs `code` with `arg` as argv[1] and HULL_T=`arg` in the environment.
fn python_with(rt: &Runtime, code: &str, arg: &str, tweak: impl Fn(&mut BoxSpec)) -> RunResult {
    let mut spec = BoxSpec::new(vec!["python3".into(), "-c".into(), code.into(), arg.into()]);
    spec.env = vec![("HULL_T".into(), arg.into())];
    tweak(&mut spec);
    rt.run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect("box runs")
}

#[test]
fn boxes_set_up_ahead_run_each_program_once_with_its_own_argv_env_and_setup() {
    let rt = runtime();
    let code = "import os, sys, socket\nprint('arg', sys.argv[1], 'env', os.environ.get('HULL_T'), 'pid', os.getpid(), 'host', socket.gethostname(), 'cwd', os.getcwd())\nprint('ws', sorted(os.listdir('/workspace')), 'tmp', sorted(os.listdir('/tmp')))\nopen('/workspace/m', 'w').write('x'); open('/tmp/m', 'w').write('x')";
    let mut i = 0;
    while rt.warm_stats().ready_used < 3 && i < 40 {
        i += 1;
        let arg = format!("a{i}");
        let r = python_with(&rt, code, &arg, |_| {});
        // Its own argv and environment (sent with the go datagram), its own pid namespace, and
        // an empty workspace and /tmp: nothing of an earlier box.
        assert!(r.success, "{r:?}");
        assert!(
            r.stdout.contains(&format!(
                "arg {arg} env {arg} pid 2 host hull cwd /workspace"
            )),
            "{}",
            r.stdout
        );
        assert!(r.stdout.contains("ws [] tmp []"), "{}", r.stdout);
        assert!(
            rt.settle(std::time::Duration::from_secs(5)),
            "boxes were not set up ahead in 5 s"
        );
    }
    assert!(
        rt.warm_stats().ready_used >= 3,
        "only {} boxes ran in a box set up ahead",
        rt.warm_stats().ready_used
    );
    // A box whose setup differs (hostname, working directory) gets its own, never a ready one
    // of another shape.
    let r = python_with(&rt, code, "b", |s| {
        s.hostname = "other".into();
        s.cwd = "/tmp".into();
    });
    assert!(
        r.stdout.contains("arg b env b pid 2 host other cwd /tmp"),
        "{r:?}"
    );
    // A bind source is resolved when a box is set up, so a box with --mount never takes a ready
    // one: it sees its directory as it is at the call.
    let src = tempfile::tempdir().unwrap();
    let before = rt.warm_stats().ready_used;
    for i in 0..3 {
        std::fs::write(src.path().join("v"), format!("{i}")).unwrap();
        let r = python_with(&rt, "print(open('/in/v').read())", "m", |s| {
            s.mounts = vec![hull_box::BindMount {
                source: src.path().to_path_buf(),
                target: "/in".into(),
                read_only: true,
            }]
        });
        assert_eq!(r.stdout.trim(), i.to_string(), "{r:?}");
        rt.settle(std::time::Duration::from_secs(2));
    }
    assert_eq!(
        rt.warm_stats().ready_used,
        before,
        "a box with a bind mount ran in a box set up ahead"
    );
    // The filter holds in a ready box (its listener came with Ready): unshare is an escape.
    let used = rt.warm_stats().ready_used;
    let mut escaped = None;
    for _ in 0..20 {
        let r = python_with(
            &rt,
            "import ctypes, sys; print(ctypes.CDLL(None).unshare(0x10000000))",
            "c",
            |_| {},
        );
        if rt.warm_stats().ready_used > used {
            escaped = Some(r);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let r = escaped.expect("a ready box ran the escape");
    assert_eq!(
        r.fault.as_ref().map(|f| f.kind),
        Some(hull_box::FaultType::EscapeBlocked),
        "{r:?}"
    );
    // A missing program, and the deadline counted from the go datagram.
    let r = python_with(&rt, "", "d", |s| {
        s.argv = vec!["no-such-program-hull".into()]
    });
    assert_eq!(
        r.fault.as_ref().map(|f| f.kind),
        Some(hull_box::FaultType::ExecFailed),
        "{r:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t = std::time::Instant::now();
    let r = python_with(&rt, "import time; time.sleep(10)", "e", |s| {
        s.timeout = std::time::Duration::from_secs(1)
    });
    assert_eq!(
        r.fault.as_ref().map(|f| f.kind),
        Some(hull_box::FaultType::Timeout),
        "{r:?}"
    );
    // The program would sleep 10 s, so the timeout fault means the 1 s deadline cut it short.
    // It was counted from the go datagram, not from when the box was set up ahead (300 ms
    // and more before this call): it never fired before a whole second of this call.
    assert!(
        r.fault.as_ref().unwrap().reason.contains("deadline of 1s"),
        "{r:?}"
    );
    assert!(
        t.elapsed() >= std::time::Duration::from_secs(1),
        "the deadline fired {:?} into the call",
        t.elapsed()
    );
    // A program too big for one datagram (100 KiB in argv and as much in the environment)
    // takes the ordinary path, whole.
    let big = "x".repeat(100 * 1024);
    let r = python_with(
        &rt,
        "import os, sys; print(len(sys.argv[1]) + len(os.environ['HULL_T']))",
        &big,
        |_| {},
    );
    assert_eq!(r.stdout.trim(), "204800", "{r:?}");
    // The boxes still waiting end with the Runtime.
    let mut pids = Vec::new();
    for _ in 0..100 {
        pids = rt.warm_stats().ready_pids;
        if !pids.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!pids.is_empty(), "no box was waiting");
    drop(rt);
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "ready box pid 1 {pid} outlived its Runtime"
        );
    }
}

#[test]
fn a_box_with_sub_ids_is_built_whole_by_a_templated_runtime() {
    // A template's user namespace maps one id, so a `subids` box skips the template (and the
    // boxes set up ahead) and maps its range through the uidmap helpers; a caller without a
    // range is refused before anything runs.
    let rt = runtime();
    let mut spec = BoxSpec::new(vec![
        "sh".into(),
        "-c".into(),
        "cat /proc/self/uid_map".into(),
    ]);
    spec.subids = true;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let has_range = std::fs::read_to_string("/etc/subuid")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let f: Vec<&str> = l.split(':').collect();
            f.len() == 3
                && (f[0] == uid.to_string()
                    || std::fs::read_to_string("/etc/passwd")
                        .unwrap_or_default()
                        .lines()
                        .any(|p| {
                            p.split(':').nth(2) == Some(&uid.to_string())
                                && p.split(':').next() == Some(f[0])
                        }))
        });
    let result = rt.run(&spec, RunOptions { capture: true }, &mut NoSink);
    if uid == 0 {
        // Host root's boxes map to hull's own range, all 65536 ids of it with sub-ids, written
        // by the supervisor (no helper, no /etc/subuid entry needed).
        let r = result.expect("host root's sub-ids come from hull's range");
        let map: Vec<&str> = r.stdout.split_whitespace().collect();
        assert_eq!(
            map,
            ["0", &hull_box::remap::BASE.to_string(), "65536"],
            "{r:?}"
        );
        assert_eq!(rt.warm_stats().ready_used, 0);
        return;
    }
    match result {
        Ok(r) => {
            assert!(has_range, "ran without a range: {r:?}");
            let lines: Vec<&str> = r.stdout.lines().collect();
            assert_eq!(lines.len(), 2, "{r:?}");
            assert!(
                lines[1].split_whitespace().collect::<Vec<_>>()[0] == "1",
                "{r:?}"
            );
        }
        Err(e) => {
            assert!(!has_range, "refused with a range: {e}");
            assert_eq!(e.kind(), "subids_unavailable", "{e}");
        }
    }
    assert_eq!(rt.warm_stats().ready_used, 0);
}

#[test]
fn pid_1_of_a_templated_or_ready_box_shows_no_host_command_line() {
    // Pid 1 is a copy of the process running the Runtime (this test binary, whose argv and
    // environment are the host's): it shows a neutral name, and its environment is not
    // readable.
    let rt = runtime();
    for _ in 0..3 {
        let r = python(
            &rt,
            "print(repr(open('/proc/1/cmdline', 'rb').read()), open('/proc/1/comm').read().strip())\ntry:\n    open('/proc/1/environ', 'rb').read(); print('ENVIRON')\nexcept OSError as e:\n    print('environ', e.errno)",
        );
        assert!(r.success, "{r:?}");
        assert!(
            r.stdout.starts_with("b'hull-init\\x00' hull-init\n"),
            "{}",
            r.stdout
        );
        assert!(r.stdout.contains("environ 13"), "{}", r.stdout);
        rt.settle(std::time::Duration::from_secs(10));
    }
    assert!(
        rt.warm_stats().ready_used > 0,
        "no box set up ahead was used"
    );
}

#[test]
fn warm_options_turn_on_only_the_pools_they_name() {
    // A box is set up ahead by entering a template: ready boxes alone are refused.
    let e = Runtime::with_warm(WarmOptions {
        ready: true,
        ..WarmOptions::default()
    })
    .expect_err("ready boxes need templates");
    assert!(e.to_string().contains("ready needs templates"), "{e}");
    // Templates alone: boxes enter one; nothing else is made ahead.
    let rt = Runtime::with_warm(WarmOptions {
        templates: true,
        ..WarmOptions::default()
    })
    .expect("runtime");
    for _ in 0..3 {
        let r = python(&rt, "print(1)");
        assert!(r.success, "{r:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let w = rt.warm_stats();
    assert_eq!(w.templates, 1, "{w:?}");
    assert_eq!(
        (w.spare_cgroups, w.spare_workspaces, w.ready_used),
        (0, 0, 0)
    );
    assert!(w.spare_paths.is_empty() && w.ready_pids.is_empty(), "{w:?}");
    drop(rt);
    // Spares alone: boxes take workspaces made ahead and are built from scratch.
    let rt = Runtime::with_warm(WarmOptions {
        spares: true,
        ..WarmOptions::default()
    })
    .expect("runtime");
    for _ in 0..30 {
        let r = python(&rt, "print(1)");
        assert!(r.success, "{r:?}");
        if rt.warm_stats().spare_workspaces >= 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let w = rt.warm_stats();
    assert!(w.spare_workspaces >= 1, "{w:?}");
    assert_eq!(
        (w.templates, w.pooled_users, w.ready_used),
        (0, 0, 0),
        "{w:?}"
    );
    drop(rt);
    // None: a one-shot front end's Runtime keeps nothing warm.
    let rt = Runtime::new().expect("runtime");
    assert!(python(&rt, "print(1)").success);
    assert_eq!(rt.warm_stats(), hull_box::WarmStats::default());
}
