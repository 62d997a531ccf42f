//! Real cgroups on this kernel: a memory cap OOM-kills, a pids cap refuses forks, `kill_all`
//! kills, a process in a fresh user namespace can join, and no directory is left behind.
//!
//! Each box's processes are forked children of this (multi-threaded) test process, so between
//! fork and exit they make raw syscalls only: no allocation, no locks, no panics.

use std::time::{Duration, Instant};

use hull_cgroup::{join_from_child, BoxCgroup, Controller, Host, Limits};

/// The host, if this machine can run these tests; otherwise prints why not.
fn host() -> Option<Host> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        hull_testkit::skip("needs root to create cgroups here");
        return None;
    }
    let host = match Host::detect() {
        Ok(h) => h,
        Err(e) => {
            hull_testkit::skip(format!("cgroup detection failed: {e}"));
            return None;
        }
    };
    let report = host.report();
    let v1_memory_pids = report.iter().filter(|r| {
        matches!(r.controller, Controller::Memory | Controller::Pids)
            && r.version == Some(hull_cgroup::CgroupVersion::V1)
    });
    if v1_memory_pids.count() < 2 {
        hull_testkit::skip(format!(
            "v1 memory and pids hierarchies are not both usable: {report:?}"
        ));
        return None;
    }
    Some(host)
}

fn name(tag: &str) -> String {
    format!("hull-test-{}-{tag}", std::process::id())
}

/// fork(); the child runs `child` (raw syscalls only) and `_exit`s with its return value.
fn fork_child(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only runs `child`, which makes raw syscalls, then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = child();
        // SAFETY: leaving the child without running the parent's destructors or atexit handlers.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return status;
        }
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINTR),
            "waitpid"
        );
    }
}

/// Waits for `pid` to die from a `kill_all` just made; after 5 s kills it directly and fails, so a
/// broken `kill_all` fails the test instead of hanging it.
fn wait_killed(pid: libc::pid_t) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out pointer.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return status;
        }
        if Instant::now() > deadline {
            // SAFETY: `pid` is our unreaped child, so the pid cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            wait(pid);
            panic!("kill_all did not kill pid {pid}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn killed_by_sigkill(status: i32) -> bool {
    libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL
}

/// Joins the box or exits with 100 + the index of the procs file that failed.
fn join_or_exit(procs: &[std::ffi::CString]) {
    if let Err(e) = join_from_child(procs) {
        // SAFETY: plain exit from the forked child.
        unsafe { libc::_exit(100 + i32::try_from(e.index).unwrap_or(0)) };
    }
}

fn wait_until_populated(cg: &BoxCgroup) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while cg.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the child never showed up in {:?}",
            cg.paths()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn remove_and_check(cg: BoxCgroup) {
    assert!(cg.is_empty(), "processes left in {:?}", cg.paths());
    let paths = cg.paths();
    cg.remove().unwrap();
    for p in paths {
        assert!(!p.exists(), "{} left behind", p.display());
    }
}

#[test]
fn memory_cap_oom_kills_the_box() {
    let Some(host) = host() else { return };
    let limits = Limits {
        memory_bytes: Some(64 << 20),
        pids: Some(16),
        cpu_millis: None,
    };
    let cg = host.create(&name("oom"), &limits).unwrap();
    assert!(
        cg.enforced(Controller::Memory) && cg.enforced(Controller::Pids),
        "{:?}",
        cg.unenforced()
    );
    let procs = cg.procs_files().to_vec();
    let pid = fork_child(|| {
        join_or_exit(&procs);
        const LEN: usize = 200 << 20;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return 2;
        }
        for off in (0..LEN).step_by(4096) {
            // SAFETY: `off` < LEN, so the byte is inside the LEN-byte mapping made above.
            let byte = unsafe { p.cast::<u8>().add(off) };
            // SAFETY: `byte` is inside that writable mapping, which nothing else uses.
            unsafe { std::ptr::write_volatile(byte, 1) };
        }
        0
    });
    let status = wait(pid);
    assert!(
        killed_by_sigkill(status),
        "expected an OOM SIGKILL, got status {status:#x}"
    );
    assert!(cg.oom_kills() >= 1, "oom_kills {}", cg.oom_kills());
    let peak = cg.peak_memory().expect("peak memory");
    assert!(peak > 32 << 20 && peak <= 64 << 20, "peak {peak}");
    remove_and_check(cg);
}

#[test]
fn pids_cap_refuses_forks() {
    let Some(host) = host() else { return };
    let limits = Limits {
        memory_bytes: Some(64 << 20),
        pids: Some(16),
        cpu_millis: None,
    };
    let cg = host.create(&name("pids"), &limits).unwrap();
    let procs = cg.procs_files().to_vec();
    let pid = fork_child(|| {
        join_or_exit(&procs);
        let mut kids = [0 as libc::pid_t; 64];
        let (mut made, mut eagain, mut other) = (0, 0, 0);
        for _ in 0..64 {
            // SAFETY: the grandchild only pauses until it is killed.
            match unsafe { libc::fork() } {
                0 => loop {
                    // SAFETY: pause has no preconditions.
                    unsafe { libc::pause() };
                },
                -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) => {
                    eagain += 1
                }
                -1 => other += 1,
                kid => {
                    kids[made] = kid;
                    made += 1;
                }
            }
        }
        for &kid in &kids[..made] {
            // SAFETY: `kid` is our own unreaped child, so the pid cannot have been reused.
            unsafe { libc::kill(kid, libc::SIGKILL) };
            // SAFETY: reaping our own child; a null status pointer is allowed.
            unsafe { libc::waitpid(kid, std::ptr::null_mut(), 0) };
        }
        match (made, eagain, other) {
            (15, 49, 0) => 0,
            (_, 0, _) => 1,
            _ => 3,
        }
    });
    let status = wait(pid);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "1: no fork was refused; 3: wrong count or errno"
    );
    assert!(
        cg.pids_limit_hits() >= 1,
        "pids.events max {}",
        cg.pids_limit_hits()
    );
    remove_and_check(cg);
}

#[test]
fn kill_all_kills_a_sleeping_member() {
    let Some(host) = host() else { return };
    let cg = host
        .create(
            &name("kill"),
            &Limits {
                pids: Some(8),
                ..Limits::default()
            },
        )
        .unwrap();
    let procs = cg.procs_files().to_vec();
    let pid = fork_child(|| {
        join_or_exit(&procs);
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    });
    wait_until_populated(&cg);
    cg.kill_all();
    let status = wait_killed(pid);
    assert!(killed_by_sigkill(status), "status {status:#x}");
    remove_and_check(cg);
}

#[test]
fn an_unmapped_user_namespace_child_can_join() {
    let Some(host) = host() else { return };
    let cg = host
        .create(
            &name("userns"),
            &Limits {
                pids: Some(8),
                ..Limits::default()
            },
        )
        .unwrap();
    let procs = cg.procs_files().to_vec();
    let pid = fork_child(|| {
        // SAFETY: the forked child is single-threaded, as CLONE_NEWUSER requires.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
            return 2;
        }
        // No uid_map written: our uid reads as the overflow uid inside, yet the kernel checks the
        // unchanged kuid against the files, so the join still works.
        join_or_exit(&procs);
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    });
    wait_until_populated(&cg);
    cg.kill_all();
    assert!(killed_by_sigkill(wait_killed(pid)));
    remove_and_check(cg);
}

#[test]
fn cpu_quota_and_report_on_this_machine() {
    let Some(host) = host() else { return };
    for r in host.report() {
        eprintln!("{r}");
        assert!(r.usable, "{r}");
    }
    let cg = host
        .create(
            &name("cpu"),
            &Limits {
                cpu_millis: Some(500),
                ..Limits::default()
            },
        )
        .unwrap();
    assert!(cg.enforced(Controller::Cpu), "{:?}", cg.unenforced());
    let cpu_dir = cg
        .paths()
        .into_iter()
        .find(|p| p.join("cpu.cfs_quota_us").exists())
        .expect("a cpu dir");
    assert_eq!(
        std::fs::read_to_string(cpu_dir.join("cpu.cfs_quota_us"))
            .unwrap()
            .trim(),
        "50000"
    );
    assert_eq!(
        std::fs::read_to_string(cpu_dir.join("cpu.cfs_period_us"))
            .unwrap()
            .trim(),
        "100000"
    );
    remove_and_check(cg);
}

#[test]
fn create_refuses_a_live_name_and_join_pid_works_from_outside() {
    let Some(host) = host() else { return };
    let cg = host.create(&name("twice"), &Limits::default()).unwrap();
    assert!(matches!(
        host.create(&name("twice"), &Limits::default()),
        Err(hull_cgroup::CgroupError::Exists { .. })
    ));
    let pid = fork_child(|| loop {
        // SAFETY: pause has no preconditions.
        unsafe { libc::pause() };
    });
    cg.join_pid(u32::try_from(pid).unwrap()).unwrap();
    assert!(!cg.is_empty());
    cg.kill_all();
    assert!(killed_by_sigkill(wait_killed(pid)));
    remove_and_check(cg);
}
