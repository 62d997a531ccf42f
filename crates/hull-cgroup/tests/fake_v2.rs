//! Pure cgroup v2 layouts in a tempdir: which files get which values, and how the
//! no-internal-processes rule is handled for delegated, busy, empty-override and root parents.

mod common;

use common::FakeTree;
use hull_cgroup::{BackendKind, CgroupVersion, Controller, Limits};

const ALL: Limits = Limits {
    memory_bytes: Some(64 << 20),
    pids: Some(16),
    cpu_millis: Some(500),
};

fn v2_tree() -> (FakeTree, String) {
    let t = FakeTree::new();
    t.cgroup(
        "cg2",
        &[
            (
                "cgroup.controllers",
                "cpuset cpu io memory hugetlb pids rdma misc",
            ),
            ("cgroup.subtree_control", ""),
        ],
    );
    let mi = format!(
        "{}{}",
        t.mount_line(20, "/", "proc", "rw", "proc", "rw"),
        t.mount_line(30, "/", "cg2", "rw,nosuid", "cgroup2", "rw,nsdelegate")
    );
    (t, mi)
}

fn files(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut f = vec![
        ("cgroup.controllers", "cpu memory pids"),
        ("cgroup.type", "domain"),
        ("cgroup.procs", ""),
        ("cgroup.subtree_control", ""),
    ];
    f.extend_from_slice(extra);
    f
}

#[test]
fn delegated_parent_gets_v2_limit_files() {
    let (t, mi) = v2_tree();
    t.cgroup(
        "cg2/user.slice/app.scope",
        &files(&[
            ("cgroup.subtree_control", "cpu memory pids"),
            ("cgroup.procs", "1\n2\n"),
        ]),
    );
    let host = t.host(&mi, "0::/user.slice/app.scope\n", None);
    assert_eq!(host.kind(), BackendKind::V2);
    for r in host.report() {
        assert!(r.usable, "{r}");
        assert_eq!(r.version, Some(CgroupVersion::V2));
        assert_eq!(r.box_parent, Some(t.path("cg2/user.slice/app.scope")));
    }

    let cg = host.create("hull-1-0", &ALL).unwrap();
    let b = "cg2/user.slice/app.scope/hull-1-0";
    assert_eq!(t.read(&format!("{b}/memory.max")), "67108864");
    assert_eq!(t.read(&format!("{b}/memory.swap.max")), "0");
    assert_eq!(t.read(&format!("{b}/pids.max")), "16");
    assert_eq!(t.read(&format!("{b}/cpu.max")), "50000 100000");
    assert_eq!(cg.procs_files().len(), 1);
    assert_eq!(
        cg.procs_files()[0].to_str().unwrap(),
        t.path(&format!("{b}/cgroup.procs")).to_str().unwrap()
    );
    assert!(
        Controller::ALL.iter().all(|&c| cg.enforced(c)),
        "{:?}",
        cg.unenforced()
    );
    assert!(cg.unenforced().is_empty());
    // The parent already delegated: nothing was rewritten there.
    assert_eq!(
        t.read("cg2/user.slice/app.scope/cgroup.subtree_control"),
        "cpu memory pids"
    );

    // Stats come from v2 files.
    t.write(
        &format!("{b}/memory.events"),
        "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n",
    );
    t.write(&format!("{b}/memory.peak"), "12345\n");
    t.write(&format!("{b}/pids.events"), "max 3\n");
    assert_eq!(
        (cg.oom_kills(), cg.peak_memory(), cg.pids_limit_hits()),
        (2, Some(12345), 3)
    );

    assert!(cg.is_empty());
    cg.kill_all();
    assert_eq!(t.read(&format!("{b}/cgroup.kill")), "1");
    cg.remove().unwrap();
    assert!(!t.exists(b));
}

#[test]
fn unlimited_box_still_gets_a_dir_for_pids_and_stats() {
    let (t, mi) = v2_tree();
    t.cgroup(
        "cg2/d",
        &files(&[("cgroup.subtree_control", "memory pids cpu")]),
    );
    let host = t.host(&mi, "0::/d\n", None);
    let cg = host.create("b", &Limits::default()).unwrap();
    assert_eq!(t.read("cg2/d/b/pids.max"), "max\n", "no limit written");
    assert!(!cg.enforced(Controller::Pids));
    t.write("cg2/d/b/memory.peak", "99\n");
    assert_eq!(
        cg.peak_memory(),
        Some(99),
        "memory stats are there even without a memory cap"
    );
    cg.remove().unwrap();
}

#[test]
fn busy_parent_without_controllers_is_reported_not_rearranged() {
    let (t, mi) = v2_tree();
    t.cgroup(
        "cg2/session.scope",
        &files(&[("cgroup.procs", "1234\n5678\n")]),
    );
    let host = t.host(&mi, "0::/session.scope\n", None);
    for r in host.report() {
        assert!(!r.usable, "{r}");
        assert!(r.detail.contains("holds 2 process(es)"), "{}", r.detail);
        assert!(r.fix.as_deref().unwrap().contains("Delegate=yes"), "{r:?}");
    }
    let cg = host.create("b", &ALL).unwrap();
    let why: Vec<Controller> = cg.unenforced().iter().map(|(c, _)| *c).collect();
    assert_eq!(why, Controller::ALL);
    assert!(
        cg.unenforced()[0].1.contains("HULL_CGROUP_PARENT"),
        "{:?}",
        cg.unenforced()
    );
    assert!(cg.procs_files().is_empty() && cg.paths().is_empty());
    assert!(!t.exists("cg2/session.scope/b"));
    assert_eq!(
        t.read("cg2/session.scope/cgroup.subtree_control"),
        "",
        "nothing destructive"
    );
    assert_eq!(t.read("cg2/session.scope/cgroup.procs"), "1234\n5678\n");
}

#[test]
fn partly_delegated_parent_blocks_only_the_missing_controllers() {
    let (t, mi) = v2_tree();
    t.cgroup(
        "cg2/s",
        &files(&[("cgroup.subtree_control", "pids"), ("cgroup.procs", "1\n")]),
    );
    let host = t.host(&mi, "0::/s\n", None);
    let cg = host.create("b", &ALL).unwrap();
    assert!(cg.enforced(Controller::Pids));
    assert_eq!(t.read("cg2/s/b/pids.max"), "16");
    let missing: Vec<Controller> = cg.unenforced().iter().map(|(c, _)| *c).collect();
    assert_eq!(missing, [Controller::Memory, Controller::Cpu]);
    cg.remove().unwrap();
}

#[test]
fn empty_override_gets_controllers_enabled_and_undelegated_one_reported() {
    let (t, mi) = v2_tree();
    t.cgroup(
        "cg2/hull-tester",
        &[
            ("cgroup.controllers", "memory pids"),
            ("cgroup.subtree_control", ""),
            ("cgroup.procs", ""),
            ("cgroup.type", "domain"),
        ],
    );
    t.cgroup("cg2/elsewhere", &files(&[("cgroup.procs", "4242\n")]));
    let host = t.host(&mi, "0::/elsewhere\n", Some("/hull-tester/"));
    let cpu = &host.report()[2];
    assert!(
        !cpu.usable && cpu.detail.contains("cpu controller is not delegated"),
        "{cpu}"
    );
    assert!(
        host.report()[0].detail.contains("on the first box"),
        "{}",
        host.report()[0]
    );

    let cg = host.create("b", &ALL).unwrap();
    assert_eq!(
        t.read("cg2/hull-tester/cgroup.subtree_control"),
        "+memory +pids"
    );
    assert_eq!(t.read("cg2/hull-tester/b/memory.max"), "67108864");
    assert_eq!(t.read("cg2/hull-tester/b/pids.max"), "16");
    assert!(
        cg.enforced(Controller::Memory)
            && cg.enforced(Controller::Pids)
            && !cg.enforced(Controller::Cpu)
    );
    assert_eq!(cg.unenforced().len(), 1);
    assert_eq!(cg.unenforced()[0].0, Controller::Cpu);
    assert!(
        !t.exists("cg2/elsewhere/hull-supervisor"),
        "the override is used, our own cgroup untouched"
    );
    cg.remove().unwrap();
}

#[test]
fn missing_override_says_so() {
    let (t, mi) = v2_tree();
    let host = t.host(&mi, "0::/\n", Some("nope"));
    let r = &host.report()[0];
    assert!(!r.usable);
    assert!(r.detail.starts_with("HULL_CGROUP_PARENT=nope:"), "{r}");
    let cg = host.create("b", &ALL).unwrap();
    assert_eq!(cg.unenforced().len(), 3);
    assert!(cg.paths().is_empty());
}

#[test]
fn override_must_stay_inside_the_hierarchy() {
    let (t, mi) = v2_tree();
    for bad in ["../etc", "a/../../b", "./x"] {
        let err = hull_cgroup::Host::detect_from(&mi, "0::/\n", Some(bad)).unwrap_err();
        assert!(
            matches!(err, hull_cgroup::CgroupError::InvalidParent { .. }),
            "{bad}: {err}"
        );
    }
    drop(t);
}

#[test]
fn root_cgroup_as_root_uses_a_hull_leaf() {
    let (t, mi) = v2_tree();
    let host = t.host(&mi, "0::/\n", None);
    let r = &host.report()[0];
    assert_eq!(r.box_parent, Some(t.path("cg2/hull")), "{r}");

    let cg = host.create("b1", &ALL).unwrap();
    assert_eq!(t.read("cg2/cgroup.subtree_control"), "+memory +pids +cpu");
    assert_eq!(
        t.read("cg2/hull/cgroup.subtree_control"),
        "+memory +pids +cpu"
    );
    assert_eq!(t.read("cg2/hull/b1/memory.max"), "67108864");
    assert_eq!(t.read("cg2/hull/b1/cpu.max"), "50000 100000");
    assert!(cg.unenforced().is_empty(), "{:?}", cg.unenforced());
    let cg2 = host.create("b2", &ALL).unwrap();
    assert_eq!(t.read("cg2/hull/b2/pids.max"), "16");
    cg.remove().unwrap();
    cg2.remove().unwrap();
    assert!(
        t.exists("cg2/hull"),
        "the shared leaf stays for later boxes"
    );
}

#[test]
fn root_cgroup_as_non_root_is_unenforced() {
    let (t, mi) = v2_tree();
    let host = t.host_as(&mi, "0::/\n", None, 1000, 4242);
    let cg = host.create("b", &ALL).unwrap();
    assert_eq!(cg.unenforced().len(), 3);
    assert!(
        cg.unenforced()[0]
            .1
            .contains("root cgroup and hull is not root"),
        "{:?}",
        cg.unenforced()
    );
    assert!(!t.exists("cg2/hull") && !t.exists("cg2/b"));
}

#[test]
fn alone_in_a_delegated_scope_hull_moves_itself_to_a_leaf() {
    let (t, mi) = v2_tree();
    t.cgroup("cg2/run.scope", &files(&[("cgroup.procs", "4242\n")]));
    let host = t.host(&mi, "0::/run.scope\n", None);
    assert!(
        host.report()[1].detail.contains("hull-supervisor"),
        "{}",
        host.report()[1]
    );
    let cg = host.create("b", &ALL).unwrap();
    assert_eq!(t.read("cg2/run.scope/hull-supervisor/cgroup.procs"), "4242");
    assert_eq!(
        t.read("cg2/run.scope/cgroup.subtree_control"),
        "+memory +pids +cpu"
    );
    assert_eq!(t.read("cg2/run.scope/b/memory.max"), "67108864");
    assert!(cg.unenforced().is_empty(), "{:?}", cg.unenforced());
    cg.remove().unwrap();
}

#[test]
fn failed_enable_is_reported_per_controller() {
    let (t, mi) = v2_tree();
    // A parent whose subtree_control cannot be written (a directory stands in for the file).
    t.cgroup(
        "cg2/e",
        &[
            ("cgroup.controllers", "memory pids"),
            ("cgroup.procs", ""),
            ("cgroup.type", "domain"),
        ],
    );
    t.cgroup("cg2/e/cgroup.subtree_control", &[]);
    let host = t.host(&mi, "0::/e\n", None);
    let cg = host.create("b", &ALL).unwrap();
    let reasons: Vec<&str> = cg.unenforced().iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].contains("enabling memory in"), "{reasons:?}");
    assert!(host.report().iter().all(|r| !r.usable));
}

#[test]
fn remove_waits_then_reports_a_busy_dir() {
    let (t, mi) = v2_tree();
    t.cgroup(
        "cg2/d",
        &files(&[("cgroup.subtree_control", "memory pids cpu")]),
    );
    let host = t.host(&mi, "0::/d\n", None);
    let cg = host.create("b", &Limits::default()).unwrap();
    t.write("cg2/d/b/cgroup.procs", "999999\n");
    assert!(!cg.is_empty());
    let started = std::time::Instant::now();
    let err = cg.remove().unwrap_err();
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "retried before giving up"
    );
    assert!(
        matches!(err, hull_cgroup::CgroupError::Remove { .. }),
        "{err}"
    );
    assert!(t.exists("cg2/d/b"));
}
