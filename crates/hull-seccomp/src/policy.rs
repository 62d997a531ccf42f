//! The policy as data: [`Action`], [`Rule`], and the default table that `build.rs` generates
//! from `policy/default.policy`.

/// What the filter does with one syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Run the syscall.
    Allow,
    /// Fail with this errno (1..=4095) without running it.
    Errno(u16),
    /// An escape primitive: encoded per [`crate::KillMode`] (the supervisor is notified and
    /// kills the box, or the kernel kills the process).
    Kill,
    /// `clone` only: allow, unless `args[0]` has any `CLONE_NEW*` flag, then [`Action::Kill`].
    CloneNoNamespaces,
    /// `ioctl` only: allow, unless the command (low 32 bits of `args[1]`, which is all the
    /// kernel looks at) is `TIOCSTI` or `TIOCLINUX`, then fail with `EPERM`. Those two inject
    /// input into a terminal the box may share with its caller (CVE-2017-5226).
    IoctlNoTiocsti,
    /// `socket` and `socketpair` only: allow `AF_UNIX`, `AF_INET`, `AF_INET6`, and
    /// `AF_NETLINK` with protocol `NETLINK_ROUTE`; another netlink protocol fails with
    /// `EPROTONOSUPPORT`, any other family with `EAFNOSUPPORT` (both the low 32 bits of their
    /// argument, which is all the kernel reads). A network namespace does not isolate every
    /// family: `AF_VSOCK` reaches the hypervisor's services from any namespace.
    SocketFamilies,
    /// The `chmod` family, `creat`, `mknod`, `mknodat` only: fail with `EPERM` when the mode
    /// argument has `S_ISUID` or `S_ISGID`, so the box cannot leave a set-id file where
    /// another host user may run it.
    ModeNoSetId,
    /// `open` and `openat` only: like [`Action::ModeNoSetId`] for the mode argument, when the
    /// flags have `O_CREAT` or `O_TMPFILE` (without them the kernel ignores the mode).
    OpenNoSetId,
}

/// One reviewed line of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    /// The syscall's name, as in `libc::SYS_<name>`.
    pub name: &'static str,
    /// The syscall number on this build's architecture.
    pub nr: i64,
    pub action: Action,
    /// Why the box may (or may not) make this call.
    pub reason: &'static str,
}

/// Widens a `libc::SYS_*` constant (`c_long`, or `c_int` on a few targets) to `i64`.
// Opt-out: `c_long` is `i64` on our targets, so the cast is lossless and `From` is not const.
#[allow(clippy::unnecessary_cast, clippy::cast_lossless)]
pub(crate) const fn sys_nr(nr: libc::c_long) -> i64 {
    nr as i64
}

/// Narrows a libc errno constant to the 16-bit `SECCOMP_RET_DATA` field, at compile time.
// Opt-out: the assert bounds the value to 1..=4095 (the kernel's MAX_ERRNO) before the cast,
// and `u16::try_from` is not const.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) const fn errno(e: libc::c_int) -> u16 {
    assert!(e > 0 && e <= 4095, "errno out of range");
    e as u16
}

include!(concat!(env!("OUT_DIR"), "/default_policy.rs"));

/// The reviewed default policy for this architecture, in file order.
pub fn default_policy() -> &'static [Rule] {
    GENERATED_POLICY
}

/// The name of syscall `nr` on this architecture, for every syscall the default policy names.
pub fn syscall_name(nr: i64) -> Option<&'static str> {
    GENERATED_POLICY.iter().find(|r| r.nr == nr).map(|r| r.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_to_libc_numbers() {
        assert_eq!(syscall_name(sys_nr(libc::SYS_ptrace)), Some("ptrace"));
        assert_eq!(syscall_name(sys_nr(libc::SYS_read)), Some("read"));
        assert_eq!(syscall_name(-1), None);
        assert_eq!(syscall_name(100_000), None);
    }

    #[test]
    fn every_rule_has_a_reason_and_unique_number() {
        let mut seen = std::collections::HashSet::new();
        for rule in default_policy() {
            assert!(
                !rule.reason.trim().is_empty(),
                "{} has no reason",
                rule.name
            );
            assert!(
                seen.insert(rule.nr),
                "{} ({}) listed twice",
                rule.name,
                rule.nr
            );
        }
    }

    #[test]
    fn required_escape_primitives_are_kill() {
        let mut required = vec![
            "ptrace",
            "mount",
            "umount2",
            "pivot_root",
            "unshare",
            "setns",
            "bpf",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "reboot",
            "swapon",
            "swapoff",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "open_tree",
            "move_mount",
            "mount_setattr",
            "keyctl",
            "add_key",
            "request_key",
            "userfaultfd",
            "perf_event_open",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "open_by_handle_at",
        ];
        if cfg!(target_arch = "x86_64") {
            required.extend(["iopl", "ioperm", "uselib"]);
        }
        for name in required {
            let rule = default_policy().iter().find(|r| r.name == name);
            assert_eq!(
                rule.map(|r| r.action),
                Some(Action::Kill),
                "{name} must be kill"
            );
        }
    }

    #[test]
    fn host_state_syscalls_are_denied() {
        for name in [
            "chroot",
            "acct",
            "quotactl",
            "settimeofday",
            "clock_settime",
            "clock_adjtime",
            "adjtimex",
            "syslog",
            "vhangup",
            "lookup_dcookie",
            "name_to_handle_at",
            "process_vm_readv",
            "process_vm_writev",
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "fanotify_init",
        ] {
            let rule = default_policy().iter().find(|r| r.name == name);
            let action = rule.map(|r| r.action);
            assert!(
                matches!(action, Some(Action::Errno(_) | Action::Kill)),
                "{name} must be denied, is {action:?}"
            );
        }
    }
}
