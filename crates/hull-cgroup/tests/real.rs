//! Real cgroup tests on this kernel: a memory cap OOM-kills, a pids cap refuses forks, and the
//! directories are gone afterwards. Skipped, with the reason printed, where not root or no
//! memory/pids controller is usable.

use hull_cgroup::{Controller, Host, Limits};

fn host() -> Option<Host> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: needs root to create cgroups");
        return None;
    }
    let h = Host::detect().ok()?;
    let usable = h.report().iter().filter(|r| r.usable && matches!(r.controller, Controller::Memory | Controller::Pids)).count();
    if usable < 2 {
        eprintln!("SKIP: memory and pids controllers are not both usable: {:?}", h.report());
        return None;
    }
    Some(h)
}

fn join(procs: &[std::ffi::CString]) {
    for p in procs {
        std::fs::write(p.to_str().unwrap(), "0").unwrap();
    }
}

#[test]
fn memory_cap_oom_kills_and_pids_cap_refuses_forks() {
    let Some(h) = host() else { return };
    let cg = h.create(&format!("hull-test-{}", std::process::id()), &Limits { memory_bytes: Some(64 << 20), pids: Some(16), cpu_millis: None }).unwrap();
    assert!(cg.enforced(Controller::Memory) && cg.enforced(Controller::Pids));
    let procs = cg.procs_files().to_vec();
    // SAFETY: the child only joins, allocates and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        join(&procs);
        let mut v: Vec<u8> = Vec::with_capacity(200 << 20);
        for i in 0..(200usize << 20) / 4096 {
            v.push(1);
            // SAFETY: writes inside the reserved capacity.
            unsafe { *v.as_mut_ptr().add(i * 4096) = 1 };
        }
        // SAFETY: plain exit.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting on our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL, "status {status:#x}");
    assert!(cg.oom_kills() >= 1);

    // SAFETY: the child joins, forks until refused and reports via exit code.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        join(&procs);
        let mut refused = 0;
        for _ in 0..64 {
            // SAFETY: children sleep briefly and exit.
            let c = unsafe { libc::fork() };
            if c == 0 {
                // SAFETY: plain sleep and exit.
                unsafe {
                    libc::sleep(1);
                    libc::_exit(0)
                };
            }
            if c < 0 {
                refused += 1;
            }
        }
        // SAFETY: plain exit.
        unsafe { libc::_exit(if refused > 0 { 0 } else { 1 }) };
    }
    // SAFETY: waiting on our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(libc::WEXITSTATUS(status), 0, "no fork was refused");
    assert!(cg.pids_limit_hits() >= 1);
    cg.kill_all();
    let paths = cg.paths();
    cg.remove().unwrap();
    assert!(paths.iter().all(|p| !p.exists()));
}
