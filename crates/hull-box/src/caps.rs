//! Capability names and the set a box keeps. By default a box keeps none: every capability is
//! dropped from the bounding, ambient, effective, permitted and inheritable sets. `--cap-add`
//! keeps a capability inside the box's user namespace only (it never means anything on the host).

use crate::field::SpecField;

/// Capability names in number order (linux/capability.h), without the `CAP_` prefix.
pub const NAMES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The highest capability number this build knows.
pub fn last_cap() -> u32 {
    u32::try_from(NAMES.len() - 1).unwrap_or(0)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    #[error(
        "`{name}` is refused when hull runs as root: in a host directory given to the box, files belong to the directory's owner (host root for a root-owned one), so a file capability written there (SETFCAP) would be a capability on the host, and a set-id file rewritten there would keep its bit (FSETID); run hull as an unprivileged user to keep it"
    )]
    HostRoot { field: SpecField, name: String },
    #[error("`{name}` is not a capability; use a name like NET_BIND_SERVICE or CAP_CHOWN, or ALL")]
    Unknown { field: SpecField, name: String },
}

impl CapError {
    /// Which list named the capability (`cap_add` or `cap_drop`).
    pub fn field(&self) -> SpecField {
        match self {
            CapError::HostRoot { field, .. } | CapError::Unknown { field, .. } => *field,
        }
    }
}

fn parse(field: SpecField, name: &str) -> Result<u64, CapError> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if bare == "ALL" {
        return Ok((1u64 << NAMES.len()) - 1);
    }
    NAMES
        .iter()
        .position(|n| *n == bare)
        .map(|i| 1u64 << i)
        .ok_or_else(|| CapError::Unknown {
            field,
            name: name.to_string(),
        })
}

/// The set a container runtime keeps by default (docker's and kern's): what a box keeps when a
/// caller asks for the default set less some (an SDK's `cap_drop=[...]`), inside its user
/// namespace only. What a box may never keep is left out of it ([`container_default`]).
pub const CONTAINER_DEFAULT: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "NET_RAW",
    "SYS_CHROOT",
    "MKNOD",
    "AUDIT_WRITE",
    "SETFCAP",
];

/// [`CONTAINER_DEFAULT`] as `cap_add` names, without what a box of host root (`host_root`) or
/// on the gateway network (`gateway`) may never keep ([`HOST_ROOT_REFUSED`],
/// [`GATEWAY_REFUSED`]).
pub fn container_default(host_root: bool, gateway: bool) -> Vec<String> {
    let refused =
        if host_root { HOST_ROOT_REFUSED } else { 0 } | if gateway { GATEWAY_REFUSED } else { 0 };
    CONTAINER_DEFAULT
        .iter()
        .filter(|n| parse(SpecField::CapAdd, n).is_ok_and(|m| m & refused == 0))
        .map(|n| (*n).to_string())
        .collect()
}

/// The capability mask a box keeps: what `--cap-add` names, less what `--cap-drop` names.
pub fn resolve(add: &[String], drop: &[String]) -> Result<u64, CapError> {
    let mut keep = 0u64;
    for a in add {
        keep |= parse(SpecField::CapAdd, a)?;
    }
    for d in drop {
        keep &= !parse(SpecField::CapDrop, d)?;
    }
    Ok(keep)
}

/// `SETFCAP`: writing `security.capability`. As host root a box's host directories are
/// idmapped to their owner (see `remap`), so a file capability written there would be stored
/// for that owner, host root included.
const SETFCAP: u64 = 1 << 31;

/// `FSETID`: writing to a set-id file without the kernel clearing the bit, which would let a
/// box rewrite a set-id program already in a host directory it was given.
const FSETID: u64 = 1 << 4;

/// What a resident box's pid 1 keeps in its own effective and permitted sets when its box maps
/// more than one id (`subids`), so it can run each program as a user of the image: `SETUID`,
/// `SETGID` (the program's process switches its ids before its exec), `CHOWN` (the hand-over of
/// `/workspace` and the user's home) and `KILL` (ending a program of another uid). Never in the
/// bounding set, so no program receives them (see `resident.rs`).
pub const RESIDENT_PID1: u64 = 1 << 0 | 1 << 5 | SWITCH_IDS;

/// What a one-shot box's pid 1 keeps in its own effective and permitted sets when its program
/// runs as a user (`--user`): `SETGID` and `SETUID`, for the program's process to switch its
/// ids before its exec. Never in the bounding set.
pub const SWITCH_IDS: u64 = 1 << 6 | 1 << 7;

/// What a box of host root never keeps.
const HOST_ROOT_REFUSED: u64 = SETFCAP | FSETID;

/// What a box on the gateway network never keeps: `NET_ADMIN` (it would reconfigure its link)
/// and `NET_RAW` (raw sockets on it).
pub(crate) const GATEWAY_REFUSED: u64 = (1 << 12) | (1 << 13);

/// [`resolve`], for a box of host root when `host_root`: [`SETFCAP`] and [`FSETID`] named
/// explicitly are refused, and never kept through `ALL`.
pub fn resolve_for(add: &[String], drop: &[String], host_root: bool) -> Result<u64, CapError> {
    let keep = resolve(add, drop)?;
    if !host_root {
        return Ok(keep);
    }
    if let Some(name) = add
        .iter()
        .find(|a| parse(SpecField::CapAdd, a).is_ok_and(|m| m & HOST_ROOT_REFUSED == m && m != 0))
    {
        return Err(CapError::HostRoot {
            field: SpecField::CapAdd,
            name: name.clone(),
        });
    }
    Ok(keep & !HOST_ROOT_REFUSED)
}

/// The names in a mask, for `--plan`.
pub fn names(mask: u64) -> Vec<&'static str> {
    NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve() {
        assert_eq!(resolve(&["NET_BIND_SERVICE".into()], &[]), Ok(1 << 10));
        assert_eq!(resolve(&["cap_chown".into()], &[]), Ok(1));
        let all_but_admin = resolve(&["ALL".into()], &["SYS_ADMIN".into()]).unwrap();
        assert_eq!(all_but_admin & (1 << 21), 0);
        assert_ne!(all_but_admin & 1, 0);
        assert_eq!(names(1 << 10), vec!["NET_BIND_SERVICE"]);
        assert_eq!(names(SETFCAP), vec!["SETFCAP"]);
        assert_eq!(
            names(RESIDENT_PID1),
            vec!["CHOWN", "KILL", "SETGID", "SETUID"]
        );
        let err = resolve_for(&["cap_setfcap".into()], &[], true).unwrap_err();
        assert!(err.to_string().contains("as root"), "{err}");
        assert_eq!(
            resolve_for(&["ALL".into()], &[], true).unwrap() & HOST_ROOT_REFUSED,
            0
        );
        assert!(resolve_for(&["FSETID".into()], &[], true).is_err());
        assert_eq!(resolve_for(&["FSETID".into()], &[], false), Ok(FSETID));
        assert_eq!(resolve_for(&["SETFCAP".into()], &[], false), Ok(SETFCAP));
        let err = resolve(&["FLY".into()], &[]).unwrap_err();
        assert!(err.to_string().contains("FLY"), "{err}");
        assert_eq!(err.field(), SpecField::CapAdd);
    }
}
