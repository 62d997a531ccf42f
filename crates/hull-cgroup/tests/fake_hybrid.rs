//! The v1/v2 hybrid layout of the build machine, faked in a tempdir: every controller in its own
//! v1 hierarchy, a controller-less cgroup2 beside them, and this process in a memory sub-cgroup.

mod common;

use common::FakeTree;
use hull_cgroup::{BackendKind, CgroupError, CgroupVersion, Controller, Limits};

const ALL: Limits = Limits {
    memory_bytes: Some(64 << 20),
    pids: Some(16),
    cpu_millis: Some(1500),
};
const OWN: &str =
    "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n";
const MEMORY_FILES: &[(&str, &str)] = &[
    ("cgroup.procs", "1\n"),
    ("tasks", "1\n"),
    ("memory.limit_in_bytes", "9223372036854771712\n"),
    ("memory.memsw.limit_in_bytes", "9223372036854771712\n"),
    ("memory.max_usage_in_bytes", "0\n"),
    (
        "memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    ),
];
const PIDS_FILES: &[(&str, &str)] = &[
    ("cgroup.procs", "1\n"),
    ("pids.max", "max\n"),
    ("pids.events", "max 0\n"),
];
const CPU_FILES: &[(&str, &str)] = &[
    ("cgroup.procs", "1\n"),
    ("cpu.cfs_period_us", "100000\n"),
    ("cpu.cfs_quota_us", "-1\n"),
];

type Files = &'static [(&'static str, &'static str)];

/// The machine's layout; `skip` leaves hierarchies out of mountinfo.
fn hybrid(skip: &[&str]) -> (FakeTree, String) {
    let t = FakeTree::new();
    let mut mi = t.mount_line(31, "/", "", "rw,relatime", "tmpfs", "rw,mode=755");
    let hierarchies: [(&str, &str, Files); 5] = [
        ("cpu", "rw,cpu", CPU_FILES),
        ("cpuacct", "rw,cpuacct", &[("cgroup.procs", "1\n")]),
        ("memory", "rw,memory", MEMORY_FILES),
        ("pids", "rw,pids", PIDS_FILES),
        ("systemd", "rw,name=systemd", &[("cgroup.procs", "1\n")]),
    ];
    for (i, (name, opts, files)) in (32..).zip(hierarchies) {
        t.cgroup(name, files);
        if !skip.contains(&name) {
            mi.push_str(&t.mount_line(i, "/", name, "rw,relatime", "cgroup", opts));
        }
    }
    t.cgroup("memory/process_api/abc", MEMORY_FILES);
    t.cgroup(
        "unified",
        &[
            ("cgroup.controllers", ""),
            ("cgroup.subtree_control", ""),
            ("cgroup.procs", "1\n"),
        ],
    );
    mi.push_str(&t.mount_line(41, "/", "unified", "rw,relatime", "cgroup2", "rw"));
    (t, mi)
}

#[test]
fn each_controller_gets_its_v1_files() {
    let (t, mi) = hybrid(&[]);
    let host = t.host(&mi, OWN, None);
    assert_eq!(host.kind(), BackendKind::Hybrid);
    let parents: Vec<_> = host
        .report()
        .into_iter()
        .map(|r| (r.version, r.box_parent))
        .collect();
    assert_eq!(
        parents,
        [
            (
                Some(CgroupVersion::V1),
                Some(t.path("memory/process_api/abc"))
            ),
            (Some(CgroupVersion::V1), Some(t.path("pids"))),
            (Some(CgroupVersion::V1), Some(t.path("cpu"))),
        ]
    );

    let cg = host.create("hull-7-1", &ALL).unwrap();
    assert!(cg.unenforced().is_empty(), "{:?}", cg.unenforced());
    assert_eq!(
        t.read("memory/process_api/abc/hull-7-1/memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(
        t.read("memory/process_api/abc/hull-7-1/memory.memsw.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(t.read("pids/hull-7-1/pids.max"), "16");
    assert_eq!(t.read("cpu/hull-7-1/cpu.cfs_period_us"), "100000");
    assert_eq!(t.read("cpu/hull-7-1/cpu.cfs_quota_us"), "150000");
    assert!(!t.exists("unified/hull-7-1") && !t.exists("cpuacct/hull-7-1"));
    let procs: Vec<&str> = cg
        .procs_files()
        .iter()
        .map(|c| c.to_str().unwrap())
        .collect();
    let want = [
        "memory/process_api/abc/hull-7-1",
        "pids/hull-7-1",
        "cpu/hull-7-1",
    ]
    .map(|d| t.path(d).join("tasks").to_str().unwrap().to_owned());
    assert_eq!(procs, want);

    t.write(
        "memory/process_api/abc/hull-7-1/memory.oom_control",
        "oom_kill_disable 0\nunder_oom 1\noom_kill 1\n",
    );
    t.write(
        "memory/process_api/abc/hull-7-1/memory.max_usage_in_bytes",
        "4096\n",
    );
    t.write("pids/hull-7-1/pids.events", "max 5\n");
    assert_eq!(
        (cg.oom_kills(), cg.peak_memory(), cg.pids_limit_hits()),
        (1, Some(4096), 5)
    );

    let paths = cg.paths();
    assert_eq!(paths.len(), 3);
    cg.remove().unwrap();
    assert!(paths.iter().all(|p| !p.exists()));
}

#[test]
fn no_limits_makes_only_the_pids_dir() {
    let (t, mi) = hybrid(&[]);
    let cg = t
        .host(&mi, OWN, None)
        .create("b", &Limits::default())
        .unwrap();
    assert_eq!(cg.paths(), [t.path("pids/b")]);
    assert_eq!(cg.procs_files().len(), 1);
    assert_eq!(t.read("pids/b/pids.max"), "max\n");
    assert_eq!(cg.oom_kills(), 0);
    assert_eq!(cg.peak_memory(), None);
    cg.remove().unwrap();
}

#[test]
fn without_swap_accounting_memory_is_still_capped() {
    let (t, mi) = hybrid(&[]);
    std::fs::remove_file(t.path("memory/process_api/abc/memory.memsw.limit_in_bytes")).unwrap();
    let cg = t.host(&mi, OWN, None).create("b", &ALL).unwrap();
    assert!(cg.enforced(Controller::Memory), "{:?}", cg.unenforced());
    assert!(
        !t.exists("memory/process_api/abc/b/memory.memsw.limit_in_bytes"),
        "never created"
    );
    cg.remove().unwrap();
}

#[test]
fn co_mounted_controllers_share_one_dir() {
    let t = FakeTree::new();
    let files: Vec<(&str, &str)> = MEMORY_FILES.iter().chain(PIDS_FILES).copied().collect();
    t.cgroup("mp", &files);
    let mi = t.mount_line(40, "/", "mp", "rw", "cgroup", "rw,memory,pids");
    let host = t.host(&mi, "3:memory,pids:/\n", None);
    assert_eq!(host.kind(), BackendKind::V1);
    let cg = host.create("b", &ALL).unwrap();
    assert_eq!(cg.paths(), [t.path("mp/b")]);
    assert_eq!(t.read("mp/b/memory.limit_in_bytes"), "67108864");
    assert_eq!(t.read("mp/b/pids.max"), "16");
    let cpu: Vec<_> = cg
        .unenforced()
        .iter()
        .map(|(c, why)| (*c, why.contains("no cgroup2 filesystem")))
        .collect();
    assert_eq!(cpu, [(Controller::Cpu, true)]);
    cg.remove().unwrap();
}

#[test]
fn missing_hierarchy_is_unenforced_with_a_reason() {
    let (t, mi) = hybrid(&["pids"]);
    let host = t.host(&mi, OWN, None);
    let pids = &host.report()[1];
    assert!(!pids.usable);
    assert!(
        pids.detail.contains("pids controller is not delegated"),
        "{pids}"
    );
    let cg = host.create("b", &ALL).unwrap();
    assert!(cg.enforced(Controller::Memory) && !cg.enforced(Controller::Pids));
    assert_eq!(cg.unenforced().len(), 1);
    assert_eq!(cg.unenforced()[0].0, Controller::Pids);
    assert!(
        cg.unenforced()[0].1.contains("fix:"),
        "{:?}",
        cg.unenforced()
    );
    cg.remove().unwrap();
}

#[test]
fn parent_override_is_used_in_every_hierarchy_and_a_missing_one_is_named() {
    let (t, mi) = hybrid(&[]);
    t.cgroup("memory/hull-tester", MEMORY_FILES);
    t.cgroup("pids/hull-tester", PIDS_FILES);
    let host = t.host(&mi, OWN, Some("hull-tester"));
    let cpu = &host.report()[2];
    assert!(
        cpu.detail.starts_with("HULL_CGROUP_PARENT=hull-tester:")
            && cpu.detail.contains("does not exist"),
        "{cpu}"
    );
    assert!(cpu.fix.as_deref().unwrap().contains("chown"), "{cpu:?}");

    let cg = host.create("b", &ALL).unwrap();
    assert_eq!(
        cg.paths(),
        [t.path("memory/hull-tester/b"), t.path("pids/hull-tester/b")]
    );
    assert_eq!(
        t.read("memory/hull-tester/b/memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(cg.unenforced().len(), 1);
    assert_eq!(cg.unenforced()[0].0, Controller::Cpu);
    assert!(!t.exists("memory/process_api/abc/b"));
    cg.remove().unwrap();
}

#[test]
fn read_only_hierarchy_is_reported() {
    let (t, _) = hybrid(&[]);
    let mi = t.mount_line(35, "/", "memory", "ro,nosuid", "cgroup", "rw,memory")
        + &t.mount_line(39, "/", "pids", "rw", "cgroup", "rw,pids");
    let cg = t.host(&mi, OWN, None).create("b", &ALL).unwrap();
    let mem = cg
        .unenforced()
        .iter()
        .find(|(c, _)| *c == Controller::Memory)
        .unwrap();
    assert!(mem.1.contains("read-only"), "{mem:?}");
    assert!(cg.enforced(Controller::Pids));
    cg.remove().unwrap();
}

#[test]
fn bind_mounted_subtree_uses_the_mount_root() {
    let (t, _) = hybrid(&[]);
    // The memory hierarchy's /process_api shown at <tmp>/memory: our cgroup is then <tmp>/memory/abc.
    t.cgroup("memory/abc", MEMORY_FILES);
    let mi = t.mount_line(35, "/process_api", "memory", "rw", "cgroup", "rw,memory");
    let host = t.host(&mi, OWN, None);
    assert_eq!(host.report()[0].box_parent, Some(t.path("memory/abc")));

    let mi = t.mount_line(35, "/elsewhere", "memory", "rw", "cgroup", "rw,memory");
    let r = &t.host(&mi, OWN, None).report()[0];
    assert!(!r.usable && r.detail.contains("not visible"), "{r}");
}

#[test]
fn bad_names_are_rejected_before_anything_is_made() {
    let (t, mi) = hybrid(&[]);
    let host = t.host(&mi, OWN, None);
    for bad in ["../escape", "a/b", "..", "", ".x"] {
        let err = host.create(bad, &ALL).unwrap_err();
        assert!(
            matches!(err, CgroupError::InvalidName { .. }),
            "{bad}: {err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(t.path("pids"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_dir())
            .count(),
        0
    );
}

#[test]
fn existing_box_is_an_error_and_partial_dirs_are_undone() {
    let (t, mi) = hybrid(&[]);
    let host = t.host(&mi, OWN, None);
    t.cgroup("pids/taken", PIDS_FILES);
    let err = host.create("taken", &ALL).unwrap_err();
    assert!(
        matches!(&err, CgroupError::Exists { path } if *path == t.path("pids/taken")),
        "{err}"
    );
    assert!(
        !t.exists("memory/process_api/abc/taken"),
        "memory dir made before the clash was removed"
    );
}

#[test]
fn malformed_proc_files_are_errors() {
    let (t, mi) = hybrid(&[]);
    assert!(matches!(
        hull_cgroup::Host::detect_from(&mi, "4:memory\n", None),
        Err(CgroupError::Parse { .. })
    ));
    assert!(matches!(
        hull_cgroup::Host::detect_from("", OWN, None),
        Err(CgroupError::NotMounted)
    ));
    drop(t);
}
