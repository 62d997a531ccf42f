//! Fake-tree tests of detection and limit writing; real-kernel tests are in tests/real.rs.

use super::*;

fn fake_v1(root: &Path) -> (String, String) {
    let mut mi = String::new();
    for (i, c) in ["memory", "pids", "cpu"].iter().enumerate() {
        let d = root.join(c).join("job");
        std::fs::create_dir_all(&d).unwrap();
        mi.push_str(&format!("{} 1 0:{} / {} rw - cgroup cgroup rw,{c}\n", 30 + i, 40 + i, root.join(c).display()));
    }
    let u = root.join("unified");
    std::fs::create_dir_all(&u).unwrap();
    std::fs::write(u.join("cgroup.controllers"), "hugetlb\n").unwrap();
    mi.push_str(&format!("50 1 0:60 / {} rw - cgroup2 cgroup2 rw\n", u.display()));
    let pc = "4:memory:/job\n3:pids:/job\n2:cpu:/job\n0::/\n".to_string();
    (mi, pc)
}

#[test]
fn hybrid_v1_writes_v1_files() {
    let t = tempfile::tempdir().unwrap();
    let (mi, pc) = fake_v1(t.path());
    let host = Host::detect_from(&mi, &pc, None);
    assert_eq!(host.kind(), BackendKind::Hybrid);
    let cg = host.create("box1", &Limits { memory_bytes: Some(64 << 20), pids: Some(16), cpu_millis: Some(500) }).unwrap();
    let mem = t.path().join("memory/job/box1");
    assert_eq!(std::fs::read_to_string(mem.join("memory.limit_in_bytes")).unwrap(), (64u64 << 20).to_string());
    assert_eq!(std::fs::read_to_string(t.path().join("pids/job/box1/pids.max")).unwrap(), "16");
    assert_eq!(std::fs::read_to_string(t.path().join("cpu/job/box1/cpu.cfs_quota_us")).unwrap(), "50000");
    assert_eq!(cg.procs_files().len(), 3);
    assert!(cg.procs_files()[0].to_str().unwrap().ends_with("memory/job/box1/cgroup.procs"));
    assert!(cg.unenforced().is_empty(), "{:?}", cg.unenforced());
    cg.remove().unwrap();
    assert!(!mem.exists());
}

#[test]
fn override_parent_is_used_and_missing_one_is_reported() {
    let t = tempfile::tempdir().unwrap();
    let (mi, pc) = fake_v1(t.path());
    for c in ["memory", "pids", "cpu"] {
        std::fs::create_dir_all(t.path().join(c).join("hull-tester")).unwrap();
    }
    let host = Host::detect_from(&mi, &pc, Some("hull-tester"));
    let cg = host.create("b", &Limits { memory_bytes: Some(1 << 30), pids: Some(8), cpu_millis: None }).unwrap();
    assert!(t.path().join("pids/hull-tester/b/pids.max").exists());
    cg.remove().unwrap();
    let host = Host::detect_from(&mi, &pc, Some("absent"));
    let cg = host.create("b", &Limits { memory_bytes: Some(1 << 30), pids: Some(8), cpu_millis: None }).unwrap();
    assert_eq!(cg.unenforced().len(), 2, "{:?}", cg.unenforced());
    assert!(cg.unenforced()[0].1.contains("HULL_CGROUP_PARENT"));
}

#[test]
fn pure_v2_uses_one_directory() {
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("cg");
    let parent = m.join("user.slice/app");
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::write(m.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    std::fs::write(parent.join("cgroup.subtree_control"), "cpu memory pids\n").unwrap();
    let mi = format!("50 1 0:60 / {} rw - cgroup2 cgroup2 rw\n", m.display());
    let host = Host::detect_from(&mi, "0::/user.slice/app\n", None);
    assert_eq!(host.kind(), BackendKind::V2);
    let cg = host.create("b", &Limits { memory_bytes: Some(32 << 20), pids: Some(4), cpu_millis: Some(2000) }).unwrap();
    let d = parent.join("b");
    assert_eq!(std::fs::read_to_string(d.join("memory.max")).unwrap(), (32u64 << 20).to_string());
    assert_eq!(std::fs::read_to_string(d.join("pids.max")).unwrap(), "4");
    assert_eq!(std::fs::read_to_string(d.join("cpu.max")).unwrap(), "200000 100000");
    assert_eq!(cg.procs_files().len(), 1);
    std::fs::write(d.join("memory.events"), "low 0\noom 1\noom_kill 3\n").unwrap();
    assert_eq!(cg.oom_kills(), 3);
}

#[test]
fn v2_without_controller_is_unenforced_with_reason() {
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("cg");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("cgroup.controllers"), "pids\n").unwrap();
    let mi = format!("50 1 0:60 / {} rw - cgroup2 cgroup2 rw\n", m.display());
    let host = Host::detect_from(&mi, "0::/\n", None);
    let cg = host.create("b", &Limits { memory_bytes: Some(32 << 20), pids: None, cpu_millis: None }).unwrap();
    assert!(cg.unenforced().iter().any(|(c, why)| *c == Controller::Memory && why.contains("memory")));
}

#[test]
fn names_are_checked() {
    let host = Host::detect_from("", "", None);
    for bad in ["", "a/b", "..", "."] {
        assert!(matches!(host.create(bad, &Limits::default()), Err(CgroupError::BadName(_))));
    }
}

#[test]
fn mountinfo_escapes() {
    assert_eq!(unescape("/a\\040b"), "/a b");
}
