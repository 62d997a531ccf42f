//! Where the argument-checking actions find what they check: which argument of each syscall
//! is a file mode or open flags, and the values they compare against (set-id bits, the flags
//! that make `open` create, the socket families a box may use).
//!
//! Argument positions come from the kernel's prototypes (`SYSCALL_DEFINE*` in `fs/open.c`,
//! `fs/namei.c`, `net/socket.c`); `tests/policy_matches_file.rs` checks them again with its own
//! table.

use crate::policy::sys_nr;

/// `S_ISUID | S_ISGID`: a file with either bit runs with its owner's or group's ids. The sticky
/// bit (`S_ISVTX`) is left alone: it only restricts deletion in directories.
pub(crate) const SETID_MODE_BITS: u32 = 0o6000;

/// The `open` flags under which the kernel reads the mode argument at all: `O_CREAT` and
/// `__O_TMPFILE` (`O_TMPFILE` without `O_DIRECTORY`, as the kernel's `WILL_CREATE` tests it).
/// Spelled from libc so the per-arch values of `O_DIRECTORY` cancel out; a unit test pins them.
// Opt-out: open flags are non-negative `c_int`s, so the cast keeps every bit.
#[allow(clippy::cast_sign_loss)]
pub(crate) const OPEN_CREATE_FLAGS: u32 =
    (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

/// Socket families a box may create: local sockets, IPv4, IPv6. `AF_NETLINK` is checked
/// further by protocol ([`NETLINK_ALLOWED`]); every other family fails with `EAFNOSUPPORT`.
pub(crate) const SOCKET_FAMILIES: [u32; 3] = [AF_UNIX, AF_INET, AF_INET6];
/// `AF_UNIX`, `AF_INET`, `AF_INET6`, `AF_NETLINK` from `<linux/socket.h>` (same on every arch).
pub(crate) const AF_UNIX: u32 = 1;
pub(crate) const AF_INET: u32 = 2;
pub(crate) const AF_INET6: u32 = 10;
pub(crate) const AF_NETLINK: u32 = 16;
/// The one netlink protocol a box may open: `NETLINK_ROUTE` (0), which glibc's `getifaddrs`
/// and `if_nameindex` use. Other protocols fail with `EPROTONOSUPPORT`, what the kernel says
/// for a netlink protocol it was built without.
pub(crate) const NETLINK_ALLOWED: u32 = 0;

/// Argument positions of `socket(domain, type, protocol)` and
/// `socketpair(domain, type, protocol, sv)`: both create sockets of `domain`.
pub(crate) const SOCKET_FAMILY_ARG: u32 = 0;
pub(crate) const SOCKET_PROTOCOL_ARG: u32 = 2;

/// Whether `nr` takes a socket family in the arguments above (`socket`, `socketpair`).
pub(crate) fn creates_sockets(nr: i64) -> bool {
    nr == sys_nr(libc::SYS_socket) || nr == sys_nr(libc::SYS_socketpair)
}

/// Syscalls whose argument `.1` is the mode a file gets (`chmod` family, `creat`, `mknod`).
const MODE_ARGS: &[(libc::c_long, u32)] = &[
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_chmod, 1), // chmod(path, mode)
    (libc::SYS_fchmod, 1),   // fchmod(fd, mode)
    (libc::SYS_fchmodat, 2), // fchmodat(dirfd, path, mode)
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_fchmodat2, 2), // fchmodat2(dirfd, path, mode, flags)
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_creat, 1), // creat(path, mode): always creates
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_mknod, 1), // mknod(path, mode, dev)
    (libc::SYS_mknodat, 2),  // mknodat(dirfd, path, mode, dev)
];

/// Syscalls whose arguments `.1` (flags) and `.2` (mode) open and maybe create a file.
const OPEN_ARGS: &[(libc::c_long, u32, u32)] = &[
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 1, 2), // open(path, flags, mode)
    (libc::SYS_openat, 2, 3), // openat(dirfd, path, flags, mode)
];

/// The mode argument of `nr`, if it is a syscall `mode-no-setid` applies to.
pub(crate) fn mode_arg(nr: i64) -> Option<u32> {
    MODE_ARGS
        .iter()
        .find(|&&(sys, _)| sys_nr(sys) == nr)
        .map(|&(_, arg)| arg)
}

/// The (flags, mode) arguments of `nr`, if it is a syscall `open-no-setid` applies to.
pub(crate) fn open_args(nr: i64) -> Option<(u32, u32)> {
    OPEN_ARGS
        .iter()
        .find(|&&(sys, _, _)| sys_nr(sys) == nr)
        .map(|&(_, flags, mode)| (flags, mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_libc_and_the_kernel() {
        assert_eq!(SETID_MODE_BITS, libc::S_ISUID | libc::S_ISGID);
        // O_CREAT is 0o100 and __O_TMPFILE 0o20000000 on x86_64 and aarch64 alike.
        assert_eq!(OPEN_CREATE_FLAGS, 0o100 | 0o2000_0000);
        let af = |v: libc::c_int| u32::try_from(v).unwrap();
        assert_eq!(
            [AF_UNIX, AF_INET, AF_INET6, AF_NETLINK],
            [
                af(libc::AF_UNIX),
                af(libc::AF_INET),
                af(libc::AF_INET6),
                af(libc::AF_NETLINK)
            ]
        );
        assert_eq!(NETLINK_ALLOWED, af(libc::NETLINK_ROUTE));
    }

    #[test]
    fn positions_are_known_only_for_their_syscalls() {
        assert_eq!(mode_arg(sys_nr(libc::SYS_fchmod)), Some(1));
        assert_eq!(mode_arg(sys_nr(libc::SYS_fchmodat)), Some(2));
        assert_eq!(mode_arg(sys_nr(libc::SYS_read)), None);
        assert_eq!(open_args(sys_nr(libc::SYS_openat)), Some((2, 3)));
        assert_eq!(open_args(sys_nr(libc::SYS_fchmod)), None);
        assert!(creates_sockets(sys_nr(libc::SYS_socketpair)));
        assert!(!creates_sockets(sys_nr(libc::SYS_connect)));
    }
}
