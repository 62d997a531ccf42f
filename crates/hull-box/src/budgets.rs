//! How much of its caller's per-user kernel budgets one box may spend.
//!
//! Some kernel resources are counted per user, not per cgroup: queued signals
//! (`RLIMIT_SIGPENDING`), POSIX message queue bytes (`RLIMIT_MSGQUEUE`), locked shared memory
//! (`RLIMIT_MEMLOCK`), inotify instances and watches. A box's user namespace charges them to
//! its own ids and, level by level, to the owner of each namespace above it: in the end to the
//! user who ran hull. Unbounded, one box could take all of that user's (host root's: every root
//! process's) inotify instances or pending signals. Each box gets a share: its rlimits are
//! lowered (soft and hard; raising a hard limit needs `CAP_SYS_RESOURCE` on the host) and its
//! user namespace's own inotify limits (`/proc/sys/user/max_inotify_*`, which the kernel checks
//! at that level) are set before the box's `/proc/sys` turns read-only.

use std::sync::OnceLock;

/// The share of the caller's budget one box may take: a quarter, so a box that exhausts its
/// own leaves the caller most of theirs.
const SHARE: u64 = 4;

/// At most this many queued signals per box (a program needs a handful; the caller's limit is
/// often ~100,000, shared by every process of the user).
const SIGPENDING_CAP: u64 = 1024;

/// What one box gets, read from the caller's own limits once per process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Budgets {
    /// (`RLIMIT_*` resource, the limit), set as soft and hard limit.
    pub rlimits: Vec<(u32, u64)>,
    /// `max_inotify_instances` and `max_inotify_watches` of the box's user namespace, as the
    /// decimal text written there.
    pub inotify: Option<(Vec<u8>, Vec<u8>)>,
}

/// The budgets of every box of this process.
pub fn budgets() -> &'static Budgets {
    static B: OnceLock<Budgets> = OnceLock::new();
    B.get_or_init(|| {
        let mut rlimits = Vec::new();
        for (res, cap) in [
            (libc::RLIMIT_SIGPENDING, Some(SIGPENDING_CAP)),
            (libc::RLIMIT_MSGQUEUE, None),
            (libc::RLIMIT_MEMLOCK, None),
        ] {
            if let Some(soft) = crate::sys::soft_limit(res) {
                let share = (soft / SHARE).max(1);
                rlimits.push((res, cap.map_or(share, |c| share.min(c))));
            }
        }
        let read =
            |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
        let inotify = match (
            read("/proc/sys/fs/inotify/max_user_instances"),
            read("/proc/sys/fs/inotify/max_user_watches"),
        ) {
            (Some(i), Some(w)) => Some((
                (i / SHARE).max(1).to_string().into_bytes(),
                (w / SHARE).max(1).to_string().into_bytes(),
            )),
            _ => None,
        };
        Budgets { rlimits, inotify }
    })
}

/// The name of an rlimit resource, for `--plan`.
pub fn rlimit_name(res: u32) -> &'static str {
    match res {
        libc::RLIMIT_SIGPENDING => "SIGPENDING",
        libc::RLIMIT_MSGQUEUE => "MSGQUEUE",
        libc::RLIMIT_MEMLOCK => "MEMLOCK",
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_gets_a_bounded_share_of_each_budget() {
        let b = budgets();
        let sig = b
            .rlimits
            .iter()
            .find(|(r, _)| *r == libc::RLIMIT_SIGPENDING)
            .expect("RLIMIT_SIGPENDING is readable");
        let host = crate::sys::soft_limit(libc::RLIMIT_SIGPENDING).unwrap();
        assert!(
            sig.1 <= SIGPENDING_CAP && sig.1 <= host.max(SHARE) / SHARE,
            "{b:?}"
        );
        if let Some((inst, _)) = &b.inotify {
            let n: u64 = String::from_utf8_lossy(inst).parse().unwrap();
            assert!(n >= 1, "{b:?}");
        }
    }
}
