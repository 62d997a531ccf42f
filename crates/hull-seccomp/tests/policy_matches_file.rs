//! The compiled filter matches `policy/default.policy`.
//!
//! This file parses the policy text again with its own small parser (not the one build.rs
//! uses) and checks, for every rule that applies to this architecture, that the generated
//! table carries it and that `evaluate` on the compiled program gives exactly the file's
//! action, under both kill modes. It also checks the parts of the filter that no rule names:
//! the default errno, the arch check and the x32 check. The argument checks (namespaces in
//! `clone`, `TIOCSTI`, socket families, set-id modes) are checked with argument positions
//! written here from the kernel's prototypes, not taken from the crate.

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
                // With all-zero arguments: no flags, command 0, mode 0...
                "clone-no-ns" | "ioctl-no-tiocsti" | "mode-no-setid" | "open-no-setid" => ALLOW,
                // ...and family 0, AF_UNSPEC, which the kernel refuses the same way.
                "socket-families" => errno_ret(libc::EAFNOSUPPORT),
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

/// The rule for `name` and its number, if the policy lists it on this architecture.
fn listed(name: &str) -> Option<(i32, Action)> {
    default_policy()
        .iter()
        .find(|r| r.name == name)
        .map(|r| (nr_i32(r.nr), r.action))
}

/// Arguments with `value` at position `at` and zero elsewhere.
fn arg_at(at: usize, value: u64) -> [u64; 6] {
    let mut args = [0; 6];
    args[at] = value;
    args
}

fn af(family: i32) -> u64 {
    u64::try_from(family).expect("families are positive")
}

#[test]
fn socket_families_are_limited_in_socket_and_socketpair() {
    let allowed = [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];
    let refused = [
        libc::AF_UNSPEC,
        libc::AF_VSOCK,
        libc::AF_PACKET,
        libc::AF_BLUETOOTH,
        libc::AF_ALG,
        libc::AF_KEY,
        libc::AF_XDP,
        libc::AF_RDS,
        libc::AF_TIPC,
        libc::AF_CAN,
        libc::AF_NFC,
        libc::AF_LLC,
        libc::AF_X25,
        libc::AF_AX25,
        libc::AF_APPLETALK,
    ];
    for name in ["socket", "socketpair"] {
        let (nr, action) = listed(name).unwrap_or_else(|| panic!("{name} listed"));
        assert_eq!(action, Action::SocketFamilies, "{name}");
        for mode in MODES {
            let prog = program(mode);
            // socket(domain, type, protocol) and socketpair(domain, type, protocol, sv).
            let eval = |domain: u64, protocol: u64| {
                let args = [domain, 1, protocol, 0, 0, 0];
                evaluate(&prog, AUDIT_ARCH_NATIVE, nr, args)
            };
            for family in allowed {
                assert_eq!(eval(af(family), 0), ALLOW, "{name} family {family}");
                // The protocol matters only for netlink; high bits of the family are not read
                // by the kernel (an int), so they neither refuse nor hide a family.
                assert_eq!(eval(af(family), 99), ALLOW, "{name} family {family}");
                assert_eq!(eval(af(family) | 7 << 32, 0), ALLOW, "{name} {family}");
            }
            // 46 is AF_MCTP, 255 past AF_MAX, -1 a negative int.
            for family in refused.into_iter().chain([46, 255, -1]) {
                let family = u64::from(u32::from_ne_bytes(family.to_ne_bytes()));
                assert_eq!(
                    eval(family, 0),
                    errno_ret(libc::EAFNOSUPPORT),
                    "{name} family {family}"
                );
            }
            assert_eq!(
                eval(1 << 32 | af(libc::AF_VSOCK), 0),
                errno_ret(libc::EAFNOSUPPORT),
                "{name}: AF_VSOCK behind high bits"
            );
            let netlink = af(libc::AF_NETLINK);
            assert_eq!(eval(netlink, af(libc::NETLINK_ROUTE)), ALLOW, "{name}");
            for protocol in [
                libc::NETLINK_SOCK_DIAG,
                libc::NETLINK_AUDIT,
                libc::NETLINK_KOBJECT_UEVENT,
                libc::NETLINK_GENERIC,
                libc::NETLINK_NETFILTER,
                libc::NETLINK_XFRM,
                libc::NETLINK_SELINUX,
                31,
            ] {
                assert_eq!(
                    eval(netlink, af(protocol)),
                    errno_ret(libc::EPROTONOSUPPORT),
                    "{name} netlink protocol {protocol}"
                );
            }
            assert_eq!(
                eval(netlink, 1 << 32 | af(libc::NETLINK_AUDIT)),
                errno_ret(libc::EPROTONOSUPPORT),
                "{name}: NETLINK_AUDIT behind high bits"
            );
        }
    }
}

/// Syscalls that give a file a mode, with the position of the mode argument (from the
/// kernel's SYSCALL_DEFINEs), on this architecture.
fn mode_syscalls() -> Vec<(&'static str, usize)> {
    let mut out = vec![("fchmod", 1), ("fchmodat", 2), ("mknodat", 2)];
    if cfg!(target_arch = "x86_64") {
        out.extend([("chmod", 1), ("fchmodat2", 2), ("creat", 1), ("mknod", 1)]);
    }
    out
}

/// Syscalls that open and may create a file: (name, flags position, mode position).
fn open_syscalls() -> Vec<(&'static str, usize, usize)> {
    let mut out = vec![("openat", 2, 3)];
    if cfg!(target_arch = "x86_64") {
        out.push(("open", 1, 2));
    }
    out
}

#[test]
fn setid_modes_are_refused_wherever_a_mode_is_given() {
    let eperm = errno_ret(libc::EPERM);
    for mode in MODES {
        let prog = program(mode);
        for (name, at) in mode_syscalls() {
            let (nr, action) = listed(name).unwrap_or_else(|| panic!("{name} listed"));
            assert_eq!(action, Action::ModeNoSetId, "{name}");
            let eval = |m: u64| evaluate(&prog, AUDIT_ARCH_NATIVE, nr, arg_at(at, m));
            for m in [
                0o4755,
                0o2755,
                0o6755,
                0o4000,
                0o2000,
                0o104_755,
                1 << 32 | 0o4755,
            ] {
                assert_eq!(eval(m), eperm, "{name} mode {m:o}");
            }
            for m in [0, 0o755, 0o1777, 0o100_644, 0o777, 1 << 32] {
                assert_eq!(eval(m), ALLOW, "{name} mode {m:o}");
            }
            // The other arguments are not read: a setid value elsewhere changes nothing.
            for other in (0..6).filter(|&i| i != at) {
                let args = arg_at(other, 0o6755);
                assert_eq!(
                    evaluate(&prog, AUDIT_ARCH_NATIVE, nr, args),
                    ALLOW,
                    "{name} arg {other}"
                );
            }
        }
        let creating = [
            af(libc::O_CREAT),
            af(libc::O_TMPFILE),
            af(libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC),
        ];
        for (name, flags_at, mode_at) in open_syscalls() {
            let (nr, action) = listed(name).unwrap_or_else(|| panic!("{name} listed"));
            assert_eq!(action, Action::OpenNoSetId, "{name}");
            let eval = |flags: u64, m: u64| {
                let mut args = arg_at(flags_at, flags);
                args[mode_at] = m;
                evaluate(&prog, AUDIT_ARCH_NATIVE, nr, args)
            };
            for flags in creating {
                assert_eq!(eval(flags, 0o4755), eperm, "{name} {flags:o}");
                assert_eq!(eval(flags, 0o2700), eperm, "{name} {flags:o}");
                assert_eq!(eval(flags, 0o644), ALLOW, "{name} {flags:o}");
                assert_eq!(eval(flags, 0o1777), ALLOW, "{name} {flags:o}");
            }
            // Without O_CREAT or O_TMPFILE the kernel ignores the mode, and so does the filter.
            for flags in [0, af(libc::O_RDWR | libc::O_DIRECTORY | libc::O_TRUNC)] {
                assert_eq!(eval(flags, 0o6755), ALLOW, "{name} {flags:o}");
            }
        }
    }
    // openat2 carries its mode in a struct: it fails with ENOSYS so callers use openat.
    let (nr, action) = listed("openat2").expect("openat2 listed");
    assert_eq!(action, Action::Errno(38));
    assert_eq!(
        evaluate(&program(KillMode::UserNotif), AUDIT_ARCH_NATIVE, nr, [0; 6]),
        errno_ret(libc::ENOSYS)
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
