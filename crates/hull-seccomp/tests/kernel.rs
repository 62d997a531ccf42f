//! Real-kernel tests: each installs the compiled default policy in a forked child, makes
//! syscalls, and the parent checks how the child ended.

mod common;

use common::{
    default_program, failed_with, require, require_kill_process, require_part, rule, run_filtered,
    run_unfiltered, Exit,
};
use hull_seccomp::{Action, KillMode};

/// Exit code for "the call did what the test expected".
const OK: i32 = 0;

#[test]
fn unshare_newuser_is_killed_with_sigsys() {
    if !require_kill_process() {
        return;
    }
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        // SAFETY: a plain syscall with an integer argument.
        unsafe { libc::unshare(libc::CLONE_NEWUSER) };
        OK // reached only if the filter let unshare through
    });
    assert_eq!(exit, Exit::Signal(libc::SIGSYS));
}

#[test]
fn clone_with_namespace_flags_is_killed() {
    if !require_kill_process() {
        return;
    }
    let program = default_program(KillMode::KillProcess);
    for flag in [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
    ] {
        let flags = libc::c_long::from(flag | libc::SIGCHLD);
        let exit = run_filtered(&program, || {
            // SAFETY: raw clone without CLONE_VM behaves like fork; a stack of 0 means "share
            // the parent's stack pointer", which is safe without CLONE_VM.
            let r = unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) };
            if r == 0 {
                // SAFETY: the unexpected grandchild leaves at once.
                unsafe { libc::_exit(OK) };
            }
            OK
        });
        assert_eq!(exit, Exit::Signal(libc::SIGSYS), "clone flag {flag:#x}");
    }
}

#[test]
fn fork_and_threads_still_work() {
    if !require_kill_process() {
        return;
    }
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        // SAFETY: fork in the filtered child; the grandchild only `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: leave the grandchild at once.
            unsafe { libc::_exit(7) };
        }
        if pid < 0 {
            return 1;
        }
        let mut status = 0;
        // SAFETY: reaps our own child into a live local.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid || libc::WEXITSTATUS(status) != 7 {
            return 2;
        }
        // A real thread: glibc tries clone3 (ENOSYS from the filter) and falls back to clone
        // with CLONE_VM|CLONE_THREAD|...; glibc reset its locks in this forked child.
        match std::thread::spawn(|| 40 + 2).join() {
            Ok(42) => OK,
            _ => 3,
        }
    });
    assert_eq!(exit, Exit::Code(OK));
}

/// New syscalls with the same number on x86_64 and aarch64 that the policy does not list.
const UNLISTED_CANDIDATES: [(&str, libc::c_long); 3] =
    [("cachestat", 451), ("listmount", 458), ("statmount", 457)];

#[test]
fn unlisted_syscall_returns_enosys() {
    if !require_kill_process() {
        return;
    }
    let listed = |nr: libc::c_long| hull_seccomp::default_policy().iter().any(|r| r.nr == nr);
    // Bad arguments everywhere: natively each fails with EBADF/EFAULT/EINVAL, never ENOSYS
    // when the kernel implements it, so ENOSYS below can only come from the filter.
    let call = |nr: libc::c_long| {
        // SAFETY: invalid fd / NULL pointers; the kernel rejects them without side effects.
        unsafe { libc::syscall(nr, -1, 0, 0, 0) }
    };
    let native = UNLISTED_CANDIDATES.iter().find(|&&(_, nr)| {
        !listed(nr)
            && run_unfiltered(|| {
                if failed_with(call(nr), libc::ENOSYS) {
                    1
                } else {
                    OK
                }
            }) == Exit::Code(OK)
    });
    let Some(&(name, nr)) = native else {
        require(
            false,
            "kernel implements none of cachestat/listmount/statmount",
        );
        return;
    };
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        if failed_with(call(nr), libc::ENOSYS) {
            OK
        } else {
            1
        }
    });
    assert_eq!(
        exit,
        Exit::Code(OK),
        "{name} ({nr}) should fail with ENOSYS under the filter"
    );
}

#[test]
fn errno_rules_fail_calls_that_would_otherwise_succeed() {
    if !require_kill_process() {
        return;
    }
    assert_eq!(
        rule("syslog").action,
        Action::Errno(1),
        "test assumes syslog is errno:EPERM"
    );
    assert_eq!(
        rule("clone3").action,
        Action::Errno(38),
        "test assumes clone3 is errno:ENOSYS"
    );
    const SYSLOG_ACTION_SIZE_BUFFER: libc::c_long = 10;
    let size_buffer = || {
        // SAFETY: SYSLOG_ACTION_SIZE_BUFFER reads nothing from and writes nothing to memory.
        unsafe { libc::syscall(libc::SYS_syslog, SYSLOG_ACTION_SIZE_BUFFER, 0, 0) }
    };
    let clone3_null = || {
        // SAFETY: a NULL clone_args with size 0 is rejected (EINVAL) before anything happens.
        unsafe { libc::syscall(libc::SYS_clone3, 0, 0) }
    };

    let natively_allowed = run_unfiltered(|| if size_buffer() >= 0 { OK } else { 1 });
    if require_part(
        natively_allowed == Exit::Code(OK),
        "syslog",
        "syslog(SIZE_BUFFER) fails natively (not root?)",
    ) {
        let program = default_program(KillMode::KillProcess);
        let exit = run_filtered(&program, || {
            if failed_with(size_buffer(), libc::EPERM) {
                OK
            } else {
                1
            }
        });
        assert_eq!(
            exit,
            Exit::Code(OK),
            "syslog should fail with EPERM under the filter"
        );
    }

    let native = run_unfiltered(|| {
        if failed_with(clone3_null(), libc::ENOSYS) {
            1
        } else {
            OK
        }
    });
    assert_eq!(
        native,
        Exit::Code(OK),
        "clone3 exists natively on this kernel"
    );
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        if failed_with(clone3_null(), libc::ENOSYS) {
            OK
        } else {
            1
        }
    });
    assert_eq!(
        exit,
        Exit::Code(OK),
        "clone3 should fail with ENOSYS under the filter"
    );
}

#[test]
fn tiocsti_is_refused_other_ioctls_pass() {
    if !require_kill_process() {
        return;
    }
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into a live array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return 1;
        }
        let byte = b'x';
        let cmd = libc::c_ulong::from(hull_seccomp::TIOCSTI);
        // On a pipe the kernel answers ENOTTY, so EPERM can only come from the filter; the
        // high-bit variant checks the filter compares the truncated command like the kernel.
        for request in [cmd, cmd | (1 << 32)] {
            // SAFETY: ioctl on our own pipe with a pointer to a live byte.
            let r = unsafe { libc::syscall(libc::SYS_ioctl, fds[0], request, &byte) };
            if !failed_with(r, libc::EPERM) {
                return 2;
            }
        }
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int into a live local.
        if unsafe { libc::ioctl(fds[0], libc::FIONREAD, &mut n) } != 0 {
            return 3;
        }
        OK
    });
    assert_eq!(exit, Exit::Code(OK));
}

#[test]
fn ordinary_work_still_succeeds() {
    if !require_kill_process() {
        return;
    }
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into a live array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return 1;
        }
        // SAFETY: writes 5 bytes of a static buffer into our own pipe.
        let wrote = unsafe { libc::write(fds[1], b"hello".as_ptr().cast(), 5) } == 5;
        let mut buf = [0u8; 5];
        let moved = wrote
            // SAFETY: reads at most 5 bytes from our own pipe into a live 5-byte local.
            && unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), 5) } == 5
            && &buf == b"hello";
        if !moved {
            return 2;
        }
        // SAFETY: getpid has no arguments.
        if unsafe { libc::getpid() } <= 0 {
            return 3;
        }
        let len = 1 << 20;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let mapped = p != libc::MAP_FAILED && {
            // SAFETY: `p` is the start of the writable `len`-byte mapping just made.
            unsafe { p.cast::<u8>().write_bytes(0xab, len) };
            // SAFETY: unmaps that mapping, which nothing refers to any more.
            let unmapped = unsafe { libc::munmap(p, len) };
            unmapped == 0
        };
        if !mapped {
            return 4;
        }
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: the raw syscall (not the vDSO) writes one timespec into a live local.
        if unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
            return 5;
        }
        // SAFETY: opens a static NUL-terminated path and closes the fd.
        let fd = unsafe {
            libc::openat(
                libc::AT_FDCWD,
                c"/proc/self/status".as_ptr(),
                libc::O_RDONLY,
            )
        };
        // SAFETY: closing the fd just opened.
        if fd < 0 || unsafe { libc::close(fd) } != 0 {
            return 6;
        }
        OK
    });
    assert_eq!(exit, Exit::Code(OK));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_syscall_is_killed() {
    if !require_kill_process() {
        return;
    }
    let program = default_program(KillMode::KillProcess);
    let nr = libc::c_long::from(hull_seccomp::X32_SYSCALL_BIT) | libc::SYS_getpid;
    let exit = run_filtered(&program, || {
        // SAFETY: x32 getpid takes no arguments (natively ENOSYS without CONFIG_X86_X32_ABI).
        unsafe { libc::syscall(nr) };
        OK
    });
    assert_eq!(exit, Exit::Signal(libc::SIGSYS));
}

/// i386 `getpid` through `int 0x80`: `seccomp_data.arch` is AUDIT_ARCH_I386.
#[cfg(target_arch = "x86_64")]
fn int80_getpid() -> i32 {
    let ret: i32;
    // SAFETY: `int 0x80` with eax = 20 (i386 getpid) touches no memory; the kernel returns in
    // eax and we list r8-r11 as clobbered to be safe about the compat entry path.
    unsafe {
        std::arch::asm!(
            "int 0x80",
            inlateout("eax") 20 => ret,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "x86_64")]
#[test]
fn foreign_arch_syscall_is_killed() {
    if !require_kill_process() {
        return;
    }
    let native = run_unfiltered(|| {
        // SAFETY: getpid has no arguments.
        let pid = unsafe { libc::getpid() };
        if int80_getpid() == pid {
            OK
        } else {
            1
        }
    });
    if !require(
        native == Exit::Code(OK),
        "int 0x80 (ia32 emulation) is not available",
    ) {
        return;
    }
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        int80_getpid();
        OK
    });
    assert_eq!(exit, Exit::Signal(libc::SIGSYS));
}

#[test]
fn install_raw_rejects_an_empty_program() {
    if !require_kill_process() {
        return;
    }
    let exit = run_unfiltered(|| {
        if hull_seccomp::set_no_new_privs().is_err() {
            return 1;
        }
        let empty = libc::sock_fprog {
            len: 0,
            filter: std::ptr::null_mut(),
        };
        // SAFETY: a zero-length program; the kernel rejects it without reading instructions.
        match unsafe { hull_seccomp::install_raw(&empty, false) } {
            Err(libc::EINVAL) => OK,
            _ => 2,
        }
    });
    assert_eq!(exit, Exit::Code(OK));
}

fn seccomp_status_line() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find(|l| l.starts_with("Seccomp:"))
        .unwrap_or("no Seccomp line")
        .to_owned()
}

/// A minimal filter: `getpid -> kill`, exiting allowed, everything else ENOSYS.
fn getpid_kill_program(kill_mode: KillMode) -> hull_seccomp::Program {
    let make = |name: &'static str, action| hull_seccomp::Rule {
        name,
        nr: rule(name).nr,
        action,
        reason: "probe cross-check",
    };
    let rules = [
        make("getpid", Action::Kill),
        make("exit_group", Action::Allow),
        make("exit", Action::Allow),
    ];
    let opts = hull_seccomp::CompileOptions {
        kill_mode,
        default_errno: 38,
    };
    hull_seccomp::compile(&rules, &opts).expect("compiles")
}

#[test]
fn probe_matches_what_the_kernel_actually_does() {
    let before = seccomp_status_line();
    let support = hull_seccomp::probe();
    let after = seccomp_status_line();
    eprintln!("probe: {support:?}");
    assert_eq!(before, after, "probe changed this process's seccomp mode");

    // Cross-check each answer against a real install in a child, so a probe that wrongly
    // says "unsupported" (and would make every other test skip) fails here.
    let program = getpid_kill_program(KillMode::KillProcess);
    let fprog = program.as_fprog();
    let exit = run_unfiltered(|| {
        if hull_seccomp::set_no_new_privs().is_err() {
            return 1;
        }
        // SAFETY: `fprog` points into `program`, alive in the parent and so in this child.
        if unsafe { hull_seccomp::install_raw(&fprog, false) }.is_err() {
            return 2;
        }
        // SAFETY: getpid has no arguments.
        unsafe { libc::syscall(libc::SYS_getpid) };
        3
    });
    let filter_works = exit != Exit::Code(2);
    let kill_process_works = exit == Exit::Signal(libc::SIGSYS);
    assert_eq!(
        support.filter, filter_works,
        "probe.filter vs real install ({exit:?})"
    );
    assert_eq!(
        support.kill_process, kill_process_works,
        "probe.kill_process ({exit:?})"
    );

    let program = getpid_kill_program(KillMode::UserNotif);
    let fprog = program.as_fprog();
    let exit = run_unfiltered(|| {
        if hull_seccomp::set_no_new_privs().is_err() {
            return 1;
        }
        // SAFETY: as above; the listener fd is dropped with the child.
        match unsafe { hull_seccomp::install_raw(&fprog, true) } {
            Ok(fd) if fd > 0 => OK,
            _ => 2,
        }
    });
    assert_eq!(
        support.user_notif,
        exit == Exit::Code(OK),
        "probe.user_notif ({exit:?})"
    );
}

/// `S_ISUID | S_ISGID`: the bits that make an executable run with its owner's or group's ids.
const SETID: u32 = libc::S_ISUID | libc::S_ISGID;

fn c_path(p: &std::path::Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).expect("no NUL in a temp path")
}

fn mode_of(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).expect("stat").mode()
}

/// Turns "the call returned -1 with errno `e`" into true, for syscalls returning `c_int`.
fn int_failed_with(ret: libc::c_int, e: i32) -> bool {
    failed_with(libc::c_long::from(ret), e)
}

#[test]
fn setid_modes_are_refused_and_no_setid_file_appears() {
    if !require_kill_process() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f");
    std::fs::write(&file, b"#!/bin/sh\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // Natively the owner may set both bits, so EPERM under the filter is the filter's answer.
    let native = dir.path().join("native");
    std::fs::write(&native, b"").expect("write");
    std::fs::set_permissions(&native, std::fs::Permissions::from_mode(0o6755))
        .expect("the owner can set setuid and setgid natively");
    assert_eq!(mode_of(&native) & SETID, SETID, "native chmod 6755");

    let made = ["openat", "open", "creat", "mknod", "mknodat", "plain"].map(|n| dir.path().join(n));
    let [at_new, open_new, creat_new, mknod_new, mknodat_new, plain_new] =
        made.each_ref().map(|p| c_path(p));
    let (f, d) = (c_path(&file), c_path(dir.path()));
    let creat_flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;

    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        // Every call below gets NUL-terminated paths prepared before fork (alive for the
        // closure), integer modes and flags, or an fd this closure opened; nothing else.
        // SAFETY: `f` is a NUL-terminated path made before fork.
        let fd = unsafe { libc::open(f.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return 1;
        }
        // fchmod: setuid, setgid, both, and setuid hidden behind high bits the kernel
        // drops (mode is a 16-bit umode_t there).
        for mode in [0o4755u64, 0o2755, 0o6755, (1 << 32) | 0o4755] {
            // SAFETY: integer arguments only; `fd` is ours.
            let r = unsafe { libc::syscall(libc::SYS_fchmod, fd, mode) };
            if !failed_with(r, libc::EPERM) {
                return 2;
            }
        }
        // Ordinary modes and the sticky bit still work.
        for mode in [0o700, 0o1755, 0o755] {
            // SAFETY: integer arguments only; `fd` is ours.
            if unsafe { libc::fchmod(fd, mode) } != 0 {
                return 3;
            }
        }
        // SAFETY: `f` is a NUL-terminated path made before fork.
        let r = unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, f.as_ptr(), 0o4755) };
        if !failed_with(r, libc::EPERM) {
            return 4;
        }
        // SAFETY: as above.
        if unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, f.as_ptr(), 0o750) } != 0 {
            return 5;
        }
        // Creating with a setid mode; the mode is read only with O_CREAT or O_TMPFILE.
        // SAFETY: `at_new` is a NUL-terminated path made before fork.
        let r = unsafe { libc::openat(libc::AT_FDCWD, at_new.as_ptr(), creat_flags, 0o4755) };
        if !int_failed_with(r, libc::EPERM) {
            return 6;
        }
        // SAFETY: `d` is a NUL-terminated path made before fork.
        let r = unsafe {
            libc::openat(
                libc::AT_FDCWD,
                d.as_ptr(),
                libc::O_TMPFILE | libc::O_WRONLY,
                0o2755,
            )
        };
        if !int_failed_with(r, libc::EPERM) {
            return 7;
        }
        // SAFETY: `f` is a NUL-terminated path made before fork.
        let r = unsafe { libc::openat(libc::AT_FDCWD, f.as_ptr(), libc::O_RDONLY, 0o6755) };
        // SAFETY: closes `r`, which this closure just opened (when `r` >= 0).
        if r < 0 || unsafe { libc::close(r) } != 0 {
            return 8; // without O_CREAT the mode is ignored, so it must not matter
        }
        // SAFETY: `plain_new` is a NUL-terminated path made before fork.
        let r = unsafe { libc::openat(libc::AT_FDCWD, plain_new.as_ptr(), creat_flags, 0o755) };
        // SAFETY: closes `r`, which this closure just opened (when `r` >= 0).
        if r < 0 || unsafe { libc::close(r) } != 0 {
            return 9;
        }
        // SAFETY: `mknodat_new` is a NUL-terminated path made before fork.
        let r = unsafe {
            libc::mknodat(
                libc::AT_FDCWD,
                mknodat_new.as_ptr(),
                libc::S_IFREG | 0o2755,
                0,
            )
        };
        if !int_failed_with(r, libc::EPERM) {
            return 10;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let legacy = [
                // SAFETY: `f` is a NUL-terminated path made before fork.
                unsafe { libc::syscall(libc::SYS_chmod, f.as_ptr(), 0o4755) },
                // SAFETY: as above.
                unsafe {
                    libc::syscall(libc::SYS_fchmodat2, libc::AT_FDCWD, f.as_ptr(), 0o2755, 0)
                },
                // SAFETY: `open_new` is a NUL-terminated path made before fork.
                unsafe { libc::syscall(libc::SYS_open, open_new.as_ptr(), creat_flags, 0o4755) },
                // SAFETY: `creat_new` is a NUL-terminated path made before fork.
                unsafe { libc::syscall(libc::SYS_creat, creat_new.as_ptr(), 0o6755) },
                // SAFETY: `mknod_new` is a NUL-terminated path made before fork.
                unsafe {
                    libc::syscall(
                        libc::SYS_mknod,
                        mknod_new.as_ptr(),
                        libc::S_IFREG | 0o4755,
                        0,
                    )
                },
            ];
            if let Some(i) = legacy.iter().position(|&r| !failed_with(r, libc::EPERM)) {
                return 20 + i32::try_from(i).unwrap_or(0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (&open_new, &creat_new, &mknod_new);
        OK
    });
    assert_eq!(exit, Exit::Code(OK), "the step numbered by the exit code");
    assert_eq!(
        mode_of(&file) & 0o7777,
        0o750,
        "only the ordinary chmods took effect"
    );
    for p in &made[..5] {
        assert!(!p.exists(), "{} was created", p.display());
    }
    assert_eq!(mode_of(&made[5]) & SETID, 0);
}

/// `openat2(path, O_RDONLY)` with an otherwise empty `open_how`.
fn openat2_read(path: &std::ffi::CStr) -> libc::c_long {
    // `struct open_how { u64 flags, mode, resolve; }`, all zero: a plain read-only open.
    let how = [0u64; 3];
    // SAFETY: a NUL-terminated path and a live open_how with its exact size.
    unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            how.as_ptr(),
            std::mem::size_of_val(&how),
        )
    }
}

#[test]
fn openat2_fails_with_enosys_so_callers_fall_back() {
    if !require_kill_process() {
        return;
    }
    let path = c"/proc/self/status";
    let native = run_unfiltered(|| if openat2_read(path) >= 0 { OK } else { 1 });
    if !require(native == Exit::Code(OK), "the kernel lacks openat2") {
        return;
    }
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        if failed_with(openat2_read(path), libc::ENOSYS) {
            OK
        } else {
            1
        }
    });
    assert_eq!(exit, Exit::Code(OK), "openat2 should fail with ENOSYS");
}

/// `socket(domain, type, protocol)` through the raw syscall, so `domain` can carry high bits.
fn raw_socket(domain: u64, ty: libc::c_int, protocol: libc::c_int) -> libc::c_long {
    // SAFETY: integer arguments only; a returned fd is closed by the caller or at exit.
    unsafe { libc::syscall(libc::SYS_socket, domain, ty, protocol) }
}

fn af(domain: libc::c_int) -> u64 {
    u64::try_from(domain).expect("address families are positive")
}

/// Whether `socket(domain, ty, protocol)` succeeds here without a filter.
fn natively_creates(domain: libc::c_int, ty: libc::c_int, protocol: libc::c_int) -> bool {
    run_unfiltered(|| {
        if raw_socket(af(domain), ty, protocol) >= 0 {
            OK
        } else {
            1
        }
    }) == Exit::Code(OK)
}

/// A TCP connection over 127.0.0.1 within the calling process, one byte each way; raw calls
/// only, since it runs in a forked child.
fn loopback_tcp_round_trip() -> bool {
    // Sockets this function creates, a sockaddr_in and its length as locals, one-byte buffers.
    // SAFETY: integer arguments only.
    let listener =
        unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    addr.sin_family = libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(0);
    addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_in>()).unwrap_or(0);
    let sa = (&raw mut addr).cast::<libc::sockaddr>();
    if listener < 0
        // SAFETY: `sa` points at the live `addr`, `len` bytes long.
        || unsafe { libc::bind(listener, sa, len) } != 0
        // SAFETY: integer arguments only.
        || unsafe { libc::listen(listener, 1) } != 0
        // SAFETY: writes at most `len` bytes into the live `addr`, and its length into `len`.
        || unsafe { libc::getsockname(listener, sa, &mut len) } != 0
    {
        return false;
    }
    // SAFETY: integer arguments only.
    let client = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    // SAFETY: `sa` points at the live `addr`, `len` bytes long (the listener's address).
    if client < 0 || unsafe { libc::connect(client, sa, len) } != 0 {
        return false;
    }
    // SAFETY: null address pointers ask for no peer address.
    let server = unsafe { libc::accept(listener, std::ptr::null_mut(), std::ptr::null_mut()) };
    let mut byte = 0u8;
    server >= 0
        // SAFETY: writes one byte of a static buffer to our own socket.
        && unsafe { libc::write(client, b"t".as_ptr().cast(), 1) } == 1
        // SAFETY: reads at most one byte from our own socket into the live `byte`.
        && unsafe { libc::read(server, (&raw mut byte).cast(), 1) } == 1
        && byte == b't'
}

#[test]
fn only_unix_inet_and_netlink_route_sockets_can_be_made() {
    if !require_kill_process() {
        return;
    }
    let (stream, raw, dgram) = (libc::SOCK_STREAM, libc::SOCK_RAW, libc::SOCK_DGRAM);
    // What the kernel does without the filter: AF_VSOCK creates a socket wherever the vsock
    // transport is loaded (it is on Firecracker and cloud VMs), AF_PACKET succeeds for root
    // and fails with EPERM otherwise; neither says EAFNOSUPPORT, so that errno under the
    // filter is the filter's.
    let vsock_native = natively_creates(libc::AF_VSOCK, stream, 0);
    eprintln!(
        "AF_VSOCK natively: {}",
        if vsock_native { "created" } else { "refused" }
    );
    require(
        vsock_native,
        "AF_VSOCK is refused natively here (no vsock transport), so its check below is weak",
    );
    let packet_native = run_unfiltered(|| {
        if failed_with(raw_socket(af(libc::AF_PACKET), raw, 0), libc::EAFNOSUPPORT) {
            1
        } else {
            OK
        }
    });
    assert_eq!(packet_native, Exit::Code(OK), "AF_PACKET exists natively");
    assert!(
        natively_creates(libc::AF_NETLINK, dgram, libc::NETLINK_KOBJECT_UEVENT),
        "NETLINK_KOBJECT_UEVENT sockets are created natively"
    );
    let ipv6 = natively_creates(libc::AF_INET6, stream, 0);
    require(ipv6, "IPv6 is disabled here; AF_INET6 is not checked");

    let refused_families = [
        (libc::AF_VSOCK, stream),
        (libc::AF_PACKET, raw),
        (libc::AF_BLUETOOTH, raw),
        (libc::AF_ALG, libc::SOCK_SEQPACKET),
        (libc::AF_KEY, raw),
        (libc::AF_XDP, raw),
        (libc::AF_RDS, libc::SOCK_SEQPACKET),
        (libc::AF_TIPC, libc::SOCK_RDM),
        (libc::AF_CAN, raw),
        (libc::AF_UNSPEC, stream),
    ];
    let refused_netlink = [
        libc::NETLINK_KOBJECT_UEVENT,
        libc::NETLINK_AUDIT,
        libc::NETLINK_GENERIC,
        libc::NETLINK_SOCK_DIAG,
        libc::NETLINK_NETFILTER,
        libc::NETLINK_XFRM,
    ];
    let program = default_program(KillMode::KillProcess);
    let exit = run_filtered(&program, || {
        for (i, &(domain, ty)) in refused_families.iter().enumerate() {
            if !failed_with(raw_socket(af(domain), ty, 0), libc::EAFNOSUPPORT) {
                return 10 + i32::try_from(i).unwrap_or(0);
            }
        }
        // The kernel reads the family as an int: high bits neither hide a family nor refuse one.
        if !failed_with(
            raw_socket((1 << 32) | af(libc::AF_VSOCK), stream, 0),
            libc::EAFNOSUPPORT,
        ) {
            return 2;
        }
        if raw_socket((1 << 32) | af(libc::AF_UNIX), stream, 0) < 0 {
            return 3;
        }
        for (i, &protocol) in refused_netlink.iter().enumerate() {
            if !failed_with(
                raw_socket(af(libc::AF_NETLINK), dgram, protocol),
                libc::EPROTONOSUPPORT,
            ) {
                return 30 + i32::try_from(i).unwrap_or(0);
            }
        }
        // getifaddrs and if_nameindex speak NETLINK_ROUTE.
        if raw_socket(af(libc::AF_NETLINK), raw, libc::NETLINK_ROUTE) < 0 {
            return 4;
        }
        if raw_socket(af(libc::AF_UNIX), stream, 0) < 0
            || raw_socket(af(libc::AF_INET), dgram, 0) < 0
        {
            return 5;
        }
        if ipv6 && raw_socket(af(libc::AF_INET6), stream, 0) < 0 {
            return 6;
        }
        if !loopback_tcp_round_trip() {
            return 7;
        }
        let mut pair = [0; 2];
        // SAFETY: socketpair writes two fds into a live array.
        let r = unsafe { libc::socketpair(libc::AF_VSOCK, stream, 0, pair.as_mut_ptr()) };
        if !int_failed_with(r, libc::EAFNOSUPPORT) {
            return 8;
        }
        let mut b = 0u8;
        // SAFETY: socketpair writes two fds into the live `pair`.
        let unix_pair = unsafe { libc::socketpair(libc::AF_UNIX, stream, 0, pair.as_mut_ptr()) }
            == 0
            // SAFETY: writes one byte of a static buffer to our own socket.
            && unsafe { libc::write(pair[0], b"u".as_ptr().cast(), 1) } == 1
            // SAFETY: reads at most one byte from our own socket into the live `b`.
            && unsafe { libc::read(pair[1], (&raw mut b).cast(), 1) } == 1
            && b == b'u';
        if !unix_pair {
            return 9;
        }
        OK
    });
    assert_eq!(exit, Exit::Code(OK), "the step numbered by the exit code");
}
