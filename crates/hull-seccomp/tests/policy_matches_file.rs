//! The compiled filter matches `policy/default.policy`.
//!
//! This file parses the policy text again with its own small parser (not the one build.rs
//! uses) and checks, for every rule that applies to this architecture, that the generated
//! table carries it and that `evaluate` on the compiled program gives exactly the file's
//! action, under both kill modes. It also checks the parts of the filter that no rule names:
//! the default errno, the arch check and the x32 check.

use std::collections::HashSet;

use hull_seccomp::{
    compile, default_policy, evaluate, Action, CompileOptions, KillMode, Program, AUDIT_ARCH_NATIVE,
};

const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;
fn errno_ret(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | u32::try_from(e).expect("errno is positive")
}

#[cfg(target_arch = "x86_64")]
const ARCH: &str = "x86_64";
#[cfg(target_arch = "aarch64")]
const ARCH: &str = "aarch64";

/// One line of the file as this test reads it.
struct Line {
    number: usize,
    name: String,
    action: String,
    reason: String,
}

/// errno names the policy may use. A new one makes this test fail until it is added here.
fn errno_value(name: &str) -> i32 {
    match name {
        "EPERM" => libc::EPERM,
        "ENOSYS" => libc::ENOSYS,
        "EACCES" => libc::EACCES,
        "EINVAL" => libc::EINVAL,
        "EOPNOTSUPP" => libc::EOPNOTSUPP,
        _ => panic!("test does not know errno {name}; add it to errno_value"),
    }
}

/// Rules from the file that apply to this architecture.
fn file_rules() -> Vec<Line> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/policy/default.policy"
    ))
    .expect("read policy file");
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.find('#').map_or(raw, |at| &raw[..at]);
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let (arch, rest) = match words.get(1) {
            Some(w) if w.starts_with('[') => (Some(w.trim_matches(['[', ']'])), &words[2..]),
            _ => (None, &words[1..]),
        };
        assert!(
            rest.len() >= 2,
            "line {}: rule without action and reason",
            i + 1
        );
        if arch.is_some_and(|a| a != ARCH) {
            continue;
        }
        out.push(Line {
            number: i + 1,
            name: words[0].to_owned(),
            action: rest[0].to_owned(),
            reason: rest[1..].join(" "),
        });
    }
    out
}

fn program(kill_mode: KillMode) -> Program {
    let opts = CompileOptions {
        kill_mode,
        default_errno: 38,
    };
    compile(default_policy(), &opts).expect("default policy compiles")
}

fn kill_ret(kill_mode: KillMode) -> u32 {
    match kill_mode {
        KillMode::UserNotif => libc::SECCOMP_RET_USER_NOTIF,
        KillMode::KillProcess => KILL_PROCESS,
    }
}

fn nr_i32(nr: i64) -> i32 {
    i32::try_from(nr).expect("syscall numbers fit in i32")
}

const MODES: [KillMode; 2] = [KillMode::UserNotif, KillMode::KillProcess];

#[test]
fn every_file_rule_is_compiled_with_its_action() {
    let lines = file_rules();
    assert!(lines.len() > 250, "suspiciously few rules: {}", lines.len());
    assert_eq!(
        lines.len(),
        default_policy().len(),
        "generated table and file disagree on count"
    );
    for mode in MODES {
        let prog = program(mode);
        let kill = kill_ret(mode);
        for line in &lines {
            let rule = default_policy()
                .iter()
                .find(|r| r.name == line.name)
                .unwrap_or_else(|| {
                    panic!("line {}: {} missing from table", line.number, line.name)
                });
            let joined: Vec<&str> = rule.reason.split_whitespace().collect();
            assert_eq!(
                joined.join(" "),
                line.reason,
                "line {}: reason",
                line.number
            );
            let nr = nr_i32(rule.nr);
            let got = evaluate(&prog, AUDIT_ARCH_NATIVE, nr, [0; 6]);
            let expected = match line.action.as_str() {
                "allow" => ALLOW,
                "kill" => kill,
                "clone-no-ns" | "ioctl-no-tiocsti" => ALLOW, // with all-zero arguments
                a => {
                    errno_ret(errno_value(a.strip_prefix("errno:").unwrap_or_else(|| {
                        panic!("line {}: unknown action {a}", line.number)
                    })))
                }
            };
            assert_eq!(
                got, expected,
                "line {} {} under {mode:?}: {got:#x}",
                line.number, line.name
            );
        }
    }
}

#[test]
fn clone_kills_namespace_flags_and_allows_threads() {
    let clone = default_policy()
        .iter()
        .find(|r| r.name == "clone")
        .expect("clone listed");
    assert_eq!(clone.action, Action::CloneNoNamespaces);
    let nr = nr_i32(clone.nr);
    let ns_flags = [
        0x80, // CLONE_NEWTIME
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ];
    let thread = libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID;
    let as_arg = |flags: i32| u64::from(u32::try_from(flags).expect("flags are positive"));
    for mode in MODES {
        let prog = program(mode);
        let eval = |flags: u64| evaluate(&prog, AUDIT_ARCH_NATIVE, nr, [flags, 0, 0, 0, 0, 0]);
        assert_eq!(eval(as_arg(thread)), ALLOW, "pthread_create flags");
        assert_eq!(eval(as_arg(libc::SIGCHLD)), ALLOW, "fork flags");
        assert_eq!(
            eval(as_arg(libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD)),
            ALLOW
        );
        for flag in ns_flags {
            assert_eq!(
                eval(as_arg(flag | libc::SIGCHLD)),
                kill_ret(mode),
                "flag {flag:#x}"
            );
            assert_eq!(
                eval(as_arg(flag | thread)),
                kill_ret(mode),
                "flag {flag:#x} + thread"
            );
        }
        // Other arguments do not matter.
        let args = [
            as_arg(thread),
            u64::MAX,
            u64::MAX,
            u64::MAX,
            u64::MAX,
            u64::MAX,
        ];
        assert_eq!(evaluate(&prog, AUDIT_ARCH_NATIVE, nr, args), ALLOW);
    }
}

#[test]
fn ioctl_refuses_tiocsti_even_with_high_bits() {
    let nr = nr_i32(
        default_policy()
            .iter()
            .find(|r| r.name == "ioctl")
            .unwrap()
            .nr,
    );
    let prog = program(KillMode::UserNotif);
    let eval = |cmd: u64| evaluate(&prog, AUDIT_ARCH_NATIVE, nr, [0, cmd, 0, 0, 0, 0]);
    assert_eq!(eval(0x5401), ALLOW, "TCGETS");
    assert_eq!(eval(0x541B), ALLOW, "FIONREAD");
    assert_eq!(eval(0x5412), errno_ret(libc::EPERM), "TIOCSTI");
    assert_eq!(eval(0x541C), errno_ret(libc::EPERM), "TIOCLINUX");
    assert_eq!(
        eval(0xdead_0000_0000_5412),
        errno_ret(libc::EPERM),
        "TIOCSTI, high bits set"
    );
}

#[test]
fn unlisted_numbers_get_the_default_errno() {
    let listed: HashSet<i64> = default_policy().iter().map(|r| r.nr).collect();
    for mode in MODES {
        let prog = program(mode);
        let mut unlisted = 0;
        for nr in 0..1024 {
            if listed.contains(&i64::from(nr)) {
                continue;
            }
            unlisted += 1;
            assert_eq!(
                evaluate(&prog, AUDIT_ARCH_NATIVE, nr, [0; 6]),
                errno_ret(libc::ENOSYS),
                "nr {nr}"
            );
        }
        assert!(unlisted > 600);
        // nr -1 (syscall(-1), or a tracer skipping a call) gets ENOSYS as the kernel would.
        assert_eq!(
            evaluate(&prog, AUDIT_ARCH_NATIVE, -1, [0; 6]),
            errno_ret(libc::ENOSYS)
        );
    }
    let opts = CompileOptions {
        kill_mode: KillMode::KillProcess,
        default_errno: 1,
    };
    let eperm = compile(default_policy(), &opts).unwrap();
    assert_eq!(
        evaluate(&eperm, AUDIT_ARCH_NATIVE, 1000, [0; 6]),
        errno_ret(libc::EPERM)
    );
}

#[test]
fn foreign_arch_is_killed() {
    let read = nr_i32(
        default_policy()
            .iter()
            .find(|r| r.name == "read")
            .unwrap()
            .nr,
    );
    for mode in MODES {
        let prog = program(mode);
        for arch in [
            hull_seccomp::AUDIT_ARCH_I386,
            hull_seccomp::AUDIT_ARCH_X86_64,
            hull_seccomp::AUDIT_ARCH_AARCH64,
            0,
            u32::MAX,
        ] {
            if arch == AUDIT_ARCH_NATIVE {
                continue;
            }
            for nr in [read, 0, 1, 59, 4000] {
                assert_eq!(
                    evaluate(&prog, arch, nr, [0; 6]),
                    kill_ret(mode),
                    "arch {arch:#x} nr {nr}"
                );
            }
        }
        assert_eq!(evaluate(&prog, AUDIT_ARCH_NATIVE, read, [0; 6]), ALLOW);
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_numbers_are_killed() {
    let x32 = hull_seccomp::X32_SYSCALL_BIT;
    for mode in MODES {
        let prog = program(mode);
        for nr in [0u32, 1, 39, 512, 547, 0x3fff_ffff, 0x7fff_fff0, 0xffff_fffe] {
            let nr = i32::from_ne_bytes((nr | x32).to_ne_bytes());
            assert_eq!(
                evaluate(&prog, AUDIT_ARCH_NATIVE, nr, [0; 6]),
                kill_ret(mode),
                "nr {nr:#x}"
            );
        }
    }
}

#[test]
fn numbers_match_the_kernel_abi() {
    // Independent of libc: a few numbers from the kernel's syscall tables.
    let nr = |name: &str| {
        default_policy()
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.nr)
    };
    #[cfg(target_arch = "x86_64")]
    let expected = [
        ("read", 0),
        ("ptrace", 101),
        ("clone", 56),
        ("unshare", 272),
        ("ioctl", 16),
    ];
    #[cfg(target_arch = "aarch64")]
    let expected = [
        ("read", 63),
        ("ptrace", 117),
        ("clone", 220),
        ("unshare", 97),
        ("ioctl", 29),
    ];
    for (name, number) in expected {
        assert_eq!(nr(name), Some(number), "{name}");
        assert_eq!(hull_seccomp::syscall_name(number), Some(name));
    }
}
