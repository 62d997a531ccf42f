//! Helpers shared by the kernel tests: run a closure in a forked child (optionally under a
//! filter), collect its wait status, and skip with a printed reason when the kernel lacks a
//! feature.
//!
//! Child code runs between fork and `_exit` of a multi-threaded test binary, so it sticks to
//! raw syscalls (glibc resets its malloc locks in a forked child, but nothing here relies on
//! that except where a test says so).

#![allow(dead_code)] // each test binary uses a different subset

use hull_seccomp::{compile, default_policy, CompileOptions, KillMode, Program};

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// Kills and reaps the child on drop, so a failed assertion leaves no process behind.
pub struct Child {
    pub pid: libc::pid_t,
    reaped: bool,
}

impl Child {
    pub fn wait(mut self) -> Exit {
        self.reaped = true;
        wait_pid(self.pid)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: signals our own unreaped child by pid (so the pid is still its); no memory
            // involved.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            // SAFETY: reaps our own child; a null status pointer asks for no status.
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
        }
    }
}

fn wait_pid(pid: libc::pid_t) -> Exit {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a live local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(err.raw_os_error(), Some(libc::EINTR), "waitpid: {err}");
    }
    if libc::WIFEXITED(status) {
        Exit::Code(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Exit::Signal(libc::WTERMSIG(status))
    } else {
        panic!("unexpected wait status {status:#x}");
    }
}

/// Forks; the child runs `body` and `_exit`s with its result.
pub fn spawn(body: impl FnOnce() -> i32) -> Child {
    // SAFETY: fork in a test binary; the child only runs `body` (which the callers keep to
    // async-signal-safe work) and then `_exit`s without returning into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // A panic must not unwind into the harness's copy in the child.
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(PANICKED);
        // SAFETY: terminates the child immediately, skipping the harness's atexit state.
        unsafe { libc::_exit(code) };
    }
    Child { pid, reaped: false }
}

/// Exit code of a child whose body panicked.
pub const PANICKED: i32 = 250;

/// Exit code a child uses when it could not install its filter.
pub const INSTALL_FAILED: i32 = 200;

/// Forks; the child sets no_new_privs, installs `program` (no listener), runs `body`.
pub fn run_filtered(program: &Program, body: impl FnOnce() -> i32) -> Exit {
    let fprog = program.as_fprog();
    spawn(move || {
        if hull_seccomp::set_no_new_privs().is_err() {
            return INSTALL_FAILED;
        }
        // SAFETY: `fprog` points into `program`, which the parent keeps alive (the child has
        // its own copy of the address space).
        match unsafe { hull_seccomp::install_raw(&fprog, false) } {
            Ok(_) => body(),
            Err(_) => INSTALL_FAILED,
        }
    })
    .wait()
}

/// Forks and runs `body` without a filter, to learn what the kernel does natively.
pub fn run_unfiltered(body: impl FnOnce() -> i32) -> Exit {
    spawn(body).wait()
}

pub fn default_program(kill_mode: KillMode) -> Program {
    let opts = CompileOptions {
        kill_mode,
        ..CompileOptions::default()
    };
    compile(default_policy(), &opts).expect("default policy compiles")
}

/// The calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Prints why a test is skipped and returns false when `ok` is false.
pub fn require(ok: bool, what: &str) -> bool {
    if !ok {
        hull_testkit::skip(what);
    }
    ok
}

/// Prints why `part` of a test is skipped and returns false when `ok` is false.
pub fn require_part(ok: bool, part: &str, what: &str) -> bool {
    if !ok {
        hull_testkit::skip_part(part, what);
    }
    ok
}

/// Skips unless seccomp filters with KILL_PROCESS work here.
pub fn require_kill_process() -> bool {
    let s = hull_seccomp::probe();
    require(
        s.filter && s.kill_process,
        "kernel lacks seccomp filters with SECCOMP_RET_KILL_PROCESS",
    )
}

/// Skips unless user notification works here.
pub fn require_user_notif() -> bool {
    let s = hull_seccomp::probe();
    require(
        s.filter && s.user_notif,
        "kernel lacks SECCOMP_RET_USER_NOTIF",
    )
}

/// Encodes "syscall returned -1 with errno `e`" as a child exit code (errno < 200).
pub fn failed_with(ret: libc::c_long, e: i32) -> bool {
    ret == -1 && errno() == e
}

/// Looks a syscall up in the default policy.
pub fn rule(name: &str) -> hull_seccomp::Rule {
    *default_policy()
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("{name} not in policy"))
}
