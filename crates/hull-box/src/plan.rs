//! A box as an ordered list of typed setup steps, built and checked before anything is forked.
//!
//! The builder is a type-state machine, so the mount order is enforced by the compiler:
//! [`Skeleton`] steps (the read-only tree) come first, then [`PlanBuilder::seal`] makes that tree
//! read-only, then [`Writable`] steps (tmpfs, workspace, proc) mount on top of it, then
//! [`PlanBuilder::pivot`] switches root, then [`Process`] steps drop privileges and exec. Every path
//! is converted to a C string here, so the child that executes the plan never allocates.
//!
//! This is the box's vocabulary ([`Step`]) and a fresh box's plan ([`BoxPlan`]); `split.rs`
//! splits one for a template, into the plans of the processes only templates have.

use std::ffi::CString;
use std::fmt;
use std::marker::PhantomData;

use crate::caps;
use crate::field::SpecField;
use crate::size::Human;

/// Where the new root is assembled before `pivot_root`: a tmpfs mounted over the host's /tmp in
/// the box's private copy of the mount table. Every bind source that may live under /tmp is passed
/// as a descriptor, so covering it does not matter.
pub const STAGE: &str = "/tmp";

/// Where pid 1 holds `/dev/fuse` while it mounts a writable root's FUSE file system (below the
/// template host descriptor, 899, and the bind sources, 900 on).
pub const FUSE_FD: i32 = 898;

/// Where pid 1 holds `/dev/net/tun` from [`Step::OpenTun`] until [`Step::Tap`] sends it away.
pub const TUN_FD: i32 = 897;

/// A path inside the box, with the staged path the child uses before the pivot.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct BoxPath {
    pub shown: String,
    pub c: CString,
}

impl BoxPath {
    /// `path` is an absolute box path; before the pivot it is reached under `stage` (usually
    /// [`STAGE`]).
    pub(crate) fn staged_at(stage: &str, path: &str) -> BoxPath {
        let full = if path == "/" {
            stage.to_string()
        } else {
            format!("{stage}{path}")
        };
        BoxPath {
            shown: path.to_string(),
            c: cstring(&full),
        }
    }

    /// A path used as is (after the pivot, or a host path).
    fn plain(path: &str) -> BoxPath {
        BoxPath {
            shown: path.to_string(),
            c: cstring(path),
        }
    }

    /// A staged path (under `stage`) becomes its box path, for a box whose root is in place.
    pub(crate) fn unstage(&mut self, stage: &std::ffi::CStr) {
        let (c, stage) = (self.c.as_bytes(), stage.to_bytes());
        if c.starts_with(stage) && (c.len() == stage.len() || c[stage.len()] == b'/') {
            self.c = cstring(&self.shown);
        }
    }
}

/// Who writes a box's id maps when the box cannot write them itself.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum IdMaps {
    /// `--subids` of an unprivileged caller: the setuid helpers newuidmap/newgidmap map the
    /// caller's own id and its ranges in /etc/subuid and /etc/subgid.
    Helpers {
        uids: crate::subids::IdRange,
        gids: crate::subids::IdRange,
    },
    /// Host root: the supervisor maps ids 0..`count` to `uid`.. and `gid`.. (hull's own range,
    /// see [`crate::remap`]).
    Direct { uid: u32, gid: u32, count: u32 },
}

/// The descriptor number of a bind source given as `/proc/self/fd/N`.
pub(crate) fn source_fd(source: &BoxPath) -> Option<i32> {
    source
        .c
        .to_str()
        .ok()?
        .strip_prefix("/proc/self/fd/")?
        .parse()
        .ok()
}

/// tmpfs mount options for a size cap and a mode.
fn tmpfs_opts(size: u64, mode: u32) -> CString {
    cstring(&format!("size={size},mode={mode:o}"))
}

/// Converts a validated string (no NUL bytes) into a C string.
pub(crate) fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// One setup step of a box: what a fresh box's pid 1 runs (and a templated box's pid 1, on the
/// template's root). The child executes them in order; a failure reports the step's index. A
/// template process's and an entry process's own steps are not box steps: they are
/// [`crate::split::TemplateStep`] and [`crate::split::EntryStep`], so no fresh box's plan can
/// hold one.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Step {
    /// Ask the kernel to SIGKILL the box's pid 1 if the supervisor's thread dies; exit at once if
    /// it already has (its pid is no longer our parent).
    DieWithSupervisor {
        supervisor: i32,
    },
    /// Write uid_map, setgroups and gid_map of the box's own user namespace.
    MapIds {
        uid: u32,
        gid: u32,
        uid_map: Vec<u8>,
        gid_map: Vec<u8>,
    },
    /// Ask the supervisor to write our id maps (we cannot map ids other than our own), and
    /// wait.
    AwaitIdMaps {
        maps: IdMaps,
    },
    /// Become uid and gid 0 of the box's user namespace, without the host's supplementary
    /// groups (host root only: until then our credentials are host root's, which the box's
    /// namespace does not map). After every bind source is open, which may need them.
    BecomeRoot,
    /// Take the idmapped copy of a bind source that the supervisor made (see
    /// [`crate::remap`]) at descriptor `fd`; attached later with `AttachSource`.
    AdoptTree {
        path: BoxPath,
        fd: i32,
        /// The host ids the box's ids 0..`count` map to (the source's owner is shown as the
        /// box's root; with `count` > 1, ids on disk are the box's own).
        uid: u32,
        gid: u32,
        count: u32,
        /// Where the source came from (the workspace or a mount), for the error that names it.
        field: SpecField,
    },
    /// Write "0" into a cgroup.procs file: the box joins its cgroup before any user code runs.
    JoinCgroup {
        procs: BoxPath,
    },
    /// A cgroup namespace rooted at the box's own cgroup.
    UnshareCgroupNs,
    /// Open a bind source with O_PATH at a fixed descriptor number, before the staging tmpfs
    /// covers the host's /tmp; later binds use `/proc/self/fd/N`, so a path swapped afterwards
    /// cannot redirect them.
    OpenSource {
        path: BoxPath,
        fd: i32,
    },
    /// Mount a FUSE file system at `at` (a host path: the writable root's merged directory), in
    /// the box's own user and mount namespaces, through `/dev/fuse` opened at descriptor `fd`,
    /// and send that descriptor to the supervisor (`Message::FuseDevice`), which serves it;
    /// then close ours. Before the sources are opened, so `at`'s `OpenSource` finds the mount.
    /// (The box's copies of the host's mounts are slaves: nothing mounted here reaches the host.)
    MountFuse {
        at: BoxPath,
        fd: i32,
        opts: CString,
    },
    /// Open `/dev/net/tun` at descriptor `fd` (the gateway network): in the box's own network
    /// namespace, where the TAP it makes will live, and before `BecomeRoot` and the pivot, so
    /// with the caller's credentials on the host's device node.
    OpenTun {
        fd: i32,
    },
    /// Make every mount private, so nothing the box mounts propagates to the host.
    PrivatizeMounts,
    /// The tmpfs that becomes the box's root.
    MountRoot {
        at: BoxPath,
        size: u64,
        opts: CString,
    },
    /// An overlayfs that becomes the box's root instead of the tmpfs (a writable root):
    /// `opts` names its layers by the descriptors `OpenSource` opened.
    MountOverlayRoot {
        at: BoxPath,
        opts: CString,
        /// The layers' host paths, for `--plan` and errors.
        shown: String,
        /// Instead of an overlayfs: this descriptor path (`OpenSource`), a writable root
        /// already merged by the caller (fuse-overlayfs), is bound there.
        merged: Option<CString>,
    },
    Mkdir {
        path: BoxPath,
    },
    Touch {
        path: BoxPath,
    },
    Symlink {
        target: CString,
        shown_target: String,
        path: BoxPath,
    },
    WriteFile {
        path: BoxPath,
        data: Vec<u8>,
    },
    /// A recursive bind mount. `optional` skips a source that does not exist.
    Bind {
        source: BoxPath,
        target: BoxPath,
        optional: bool,
    },
    /// A bind whose target lies inside a host directory already mounted at `under` (the
    /// workspace, another bind): each missing component of `parts` is made there and opened
    /// without following a symlink or leaving that mount (`sys::mount_point_at`: another box
    /// may be writing the same directory), then a detached copy of `source` with its
    /// attributes set is attached on the descriptor (no path is looked up twice).
    BindBelow {
        source: BoxPath,
        /// The mount the target is below, for the plan and errors; it is reached from `root`
        /// through `under_parts`, never by its path (see [`Step::BindBelow`]).
        under: BoxPath,
        /// The staged root (hull's own directory) and the components from it to `under`: each
        /// opened without following a symlink (the components below `/workspace` are the
        /// workspace's, which other boxes may change between two steps).
        root: BoxPath,
        under_parts: Vec<CString>,
        parts: Vec<CString>,
        /// A directory bind (else a file's: the last part is made as an empty file).
        is_dir: bool,
        read_only: bool,
        /// The source is already a detached tree at this descriptor (host root's idmapped copy,
        /// see [`BoxPlan::remap_root`]): it is attached itself, not a copy of it.
        tree_fd: Option<i32>,
        /// The target, for the plan and errors.
        target: String,
    },
    /// A tmpfs whose target lies inside a host directory mounted at `under`: its mount point
    /// made and opened as [`Step::BindBelow`]'s, the tmpfs mounted on that descriptor.
    TmpfsBelow {
        under: BoxPath,
        root: BoxPath,
        under_parts: Vec<CString>,
        parts: Vec<CString>,
        opts: CString,
        target: String,
    },
    /// A tmpfs with a size cap and mode.
    Tmpfs {
        target: BoxPath,
        size: u64,
        mode: u32,
        opts: CString,
    },
    /// Makes the whole assembled tree read-only, nosuid and nodev (device nodes stay usable
    /// under /dev).
    Seal {
        root: BoxPath,
        dev: BoxPath,
    },
    /// Sets or clears mount attributes on one mount and everything below it.
    SetAttr {
        target: BoxPath,
        set: u64,
        clear: u64,
    },
    /// Makes one mount (not its submounts) writable.
    ClearReadOnly {
        target: BoxPath,
    },
    /// A fresh devpts instance for the box's own pseudo-terminals.
    Devpts {
        target: BoxPath,
    },
    /// A fresh procfs for the box's pid namespace.
    Proc {
        target: BoxPath,
    },
    /// Sets the box's user namespace's own inotify limits (see [`crate::budgets`]), through its
    /// fresh procfs before `/proc/sys` turns read-only; skipped when the kernel has no such
    /// file.
    UserNsLimits {
        instances: BoxPath,
        watches: BoxPath,
        values: (Vec<u8>, Vec<u8>),
    },
    /// Lowers soft and hard rlimits to the box's share of per-user budgets (see
    /// [`crate::budgets`]).
    LowerRlimits {
        limits: Vec<(u32, u64)>,
    },
    /// Hides a /proc file behind /dev/null; skipped when the kernel has no such file.
    MaskFile {
        target: BoxPath,
        null: BoxPath,
    },
    /// Hides a /proc directory behind an empty read-only tmpfs; skipped when absent.
    MaskDir {
        target: BoxPath,
    },
    /// Makes a /proc subtree read-only (bind onto itself, then read-only); skipped when absent.
    ProtectProc {
        target: BoxPath,
    },
    /// pivot_root into the staged tree and detach the old root.
    Pivot {
        root: BoxPath,
    },
    Hostname {
        name: String,
    },
    LoopbackUp,
    /// Make the TAP on `/dev/net/tun` opened at `fd` (see [`crate::tap`] for its name, MAC,
    /// address, MTU and gateway), configure it and the default route, send its descriptor to the
    /// supervisor (`Message::TapDevice`), close ours, and wait for the supervisor's
    /// `GatewayReady` (the caller has taken the TAP) before going on. Before `DropCaps`: it
    /// needs CAP_NET_ADMIN in the box's user namespace, which owns its network namespace.
    Tap {
        fd: i32,
    },
    /// A templated box entering a pooled network namespace whose TAP a pool helper made (see
    /// `template.rs`; the supervisor holds the TAP): wait for the supervisor's `GatewayReady`
    /// (the caller has taken the TAP) before going on, as `Tap` does after making its own.
    AwaitGateway,
    Chdir {
        path: BoxPath,
    },
    /// Give the directory at `path` (the mount point of a workspace hull made for this box) to
    /// the program's user (`lchown`, by pid 1 as the box's root), so a `--user` box can write it.
    Give {
        path: BoxPath,
        uid: u32,
        gid: u32,
    },
    /// Drop every capability not in `keep` from all five sets, but keep `own` in this
    /// process's effective and permitted sets (a resident box's pid 1 that switches its
    /// programs' ids, see `resident.rs`; 0 for every other box). `own` is never in the
    /// bounding set, so no exec can pass it on.
    DropCaps {
        keep: u64,
        own: u64,
    },
    NoNewPrivs,
    /// Install the seccomp filter; `listener` asks for a user-notification descriptor.
    Seccomp {
        listener: bool,
        rules: usize,
    },
    /// Fork the program (the plan's pid 1 stays as the box's reaper) and exec it.
    Exec {
        argv: Vec<CString>,
        candidates: Vec<CString>,
        env: Vec<CString>,
        /// The ids the program's process switches to before its exec (`--user`; pid 1 kept
        /// `SETUID` and `SETGID` for it, see [`BoxPlan::pid1_keeps`]); None: pid 1's, root.
        user: Option<crate::proto::resident::Ids>,
    },
    /// Attach a detached mount tree (descriptor `fd`: a source an entry process cloned, see
    /// [`crate::split::EntryStep::CloneSource`], or an idmapped copy taken by `AdoptTree`) at
    /// `target` (`move_mount`).
    AttachSource {
        fd: i32,
        source: String,
        target: BoxPath,
    },
}

impl Step {
    /// A short name of the step, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Step::DieWithSupervisor { .. } => "tie the box to its supervisor",
            Step::MapIds { .. } => "map user and group ids",
            Step::AwaitIdMaps {
                maps: IdMaps::Helpers { .. },
            } => "map user and group ids through newuidmap/newgidmap",
            Step::AwaitIdMaps {
                maps: IdMaps::Direct { .. },
            } => "map user and group ids (by the supervisor)",
            Step::BecomeRoot => "become root of the box's user namespace",
            Step::AdoptTree { .. } => "take an idmapped bind source",
            Step::JoinCgroup { .. } => "join cgroup",
            Step::UnshareCgroupNs => "new cgroup namespace",
            Step::OpenSource { .. } => "open bind source",
            Step::MountFuse { .. } => "mount the writable root's FUSE file system",
            Step::OpenTun { .. } => "open /dev/net/tun",
            Step::PrivatizeMounts => "make mounts private",
            Step::MountRoot { .. } => "mount root tmpfs",
            Step::MountOverlayRoot { merged: None, .. } => "mount the writable root (overlayfs)",
            Step::MountOverlayRoot { .. } => "bind the writable root (fuse-overlayfs)",
            Step::Mkdir { .. } => "create directory",
            Step::Touch { .. } => "create mount point file",
            Step::Symlink { .. } => "create symlink",
            Step::WriteFile { .. } => "write file",
            Step::Bind { .. } => "bind mount",
            Step::Tmpfs { .. } => "mount tmpfs",
            Step::Seal { .. } => "make root read-only",
            Step::SetAttr { .. } => "set mount attributes",
            Step::ClearReadOnly { .. } => "make mount writable",
            Step::Devpts { .. } => "mount devpts",
            Step::Proc { .. } => "mount proc",
            Step::MaskFile { .. } | Step::MaskDir { .. } => "mask /proc path",
            Step::ProtectProc { .. } => "make /proc path read-only",
            Step::UserNsLimits { .. } => "set the user namespace's inotify limits",
            Step::LowerRlimits { .. } => "lower resource limits",
            Step::Pivot { .. } => "pivot root",
            Step::Hostname { .. } => "set hostname",
            Step::LoopbackUp => "bring up loopback",
            Step::Tap { .. } => "make the gateway network's TAP and hand it over",
            Step::AwaitGateway => "wait for the gateway to take the TAP",
            Step::Chdir { .. } => "enter working directory",
            Step::Give { .. } => "give the workspace to the user",
            Step::BindBelow { .. } => "bind mount made without following links",
            Step::TmpfsBelow { .. } => "mount a tmpfs inside a host directory",
            Step::DropCaps { .. } => "drop capabilities",
            Step::NoNewPrivs => "set no_new_privs",
            Step::Seccomp { .. } => "install seccomp filter",
            Step::Exec { .. } => "exec",
            Step::AttachSource { .. } => "attach bind source",
        }
    }

    /// Every box path the step mounts on or creates (not its sources).
    pub(crate) fn paths_mut(&mut self) -> Vec<&mut BoxPath> {
        match self {
            Step::Mkdir { path }
            | Step::Touch { path }
            | Step::WriteFile { path, .. }
            | Step::Symlink { path, .. }
            | Step::Give { path, .. }
            | Step::Chdir { path } => vec![path],
            Step::Tmpfs { target, .. }
            | Step::SetAttr { target, .. }
            | Step::ClearReadOnly { target }
            | Step::Devpts { target }
            | Step::Proc { target }
            | Step::MaskDir { target }
            | Step::ProtectProc { target }
            | Step::AttachSource { target, .. }
            | Step::Bind { target, .. } => vec![target],
            Step::BindBelow { under, root, .. } | Step::TmpfsBelow { under, root, .. } => {
                vec![under, root]
            }
            Step::MaskFile { target, null } => vec![target, null],
            Step::UserNsLimits {
                instances, watches, ..
            } => vec![instances, watches],
            Step::MountRoot { at, .. } | Step::MountOverlayRoot { at, .. } => vec![at],
            Step::Seal { root, dev } => vec![root, dev],
            _ => Vec::new(),
        }
    }

    /// The path the step works on, for errors.
    pub fn path(&self) -> Option<String> {
        match self {
            Step::JoinCgroup { procs } => Some(procs.shown.clone()),
            Step::OpenSource { path, .. } | Step::AdoptTree { path, .. } => {
                Some(path.shown.clone())
            }
            Step::AttachSource { source, target, .. } => {
                Some(format!("{source} -> {}", target.shown))
            }
            Step::MountRoot { at, .. } | Step::MountFuse { at, .. } => Some(at.shown.clone()),
            Step::MountOverlayRoot { shown, .. } => Some(shown.clone()),
            Step::Mkdir { path }
            | Step::Touch { path }
            | Step::WriteFile { path, .. }
            | Step::Symlink { path, .. }
            | Step::Give { path, .. }
            | Step::Chdir { path } => Some(path.shown.clone()),
            Step::Bind { source, target, .. } => {
                Some(format!("{} -> {}", source.shown, target.shown))
            }
            Step::Tmpfs { target, .. }
            | Step::SetAttr { target, .. }
            | Step::ClearReadOnly { target }
            | Step::Devpts { target }
            | Step::Proc { target }
            | Step::MaskFile { target, .. }
            | Step::MaskDir { target }
            | Step::ProtectProc { target } => Some(target.shown.clone()),
            Step::Seal { root, .. } | Step::Pivot { root } => Some(root.shown.clone()),
            Step::Exec { argv, .. } => argv.first().map(|a| a.to_string_lossy().into_owned()),
            Step::BindBelow { source, target, .. } => Some(format!("{} -> {target}", source.shown)),
            Step::TmpfsBelow { target, .. } => Some(target.clone()),
            _ => None,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::DieWithSupervisor { supervisor } => write!(f, "prctl(PR_SET_PDEATHSIG, SIGKILL): the box dies with its supervisor (pid {supervisor})"),
            Step::MapIds { uid, gid, .. } => write!(f, "map uid 0 -> {uid}, gid 0 -> {gid} (setgroups deny)"),
            Step::AwaitIdMaps { maps: IdMaps::Direct { uid, gid, count: 1 } } => write!(f, "wait for the supervisor to map uid 0 -> {uid}, gid 0 -> {gid} (host root's boxes never map to host root)"),
            Step::AwaitIdMaps { maps: IdMaps::Direct { uid, gid, count } } => write!(
                f,
                "wait for the supervisor to map uid 0-{last} -> {uid}-{}, gid 0-{last} -> {gid}-{} (host root's boxes never map to host root)",
                u64::from(*uid) + u64::from(*count) - 1,
                u64::from(*gid) + u64::from(*count) - 1,
                last = count - 1,
            ),
            Step::BecomeRoot => write!(f, "setgroups([]), setresgid(0), setresuid(0) in the box's user namespace"),
            Step::AdoptTree { path, fd, uid, gid, count: 1, .. } => write!(f, "take the supervisor's idmapped copy of {} as fd {fd} (its owner is the box's root, host {uid}:{gid})", path.shown),
            Step::AdoptTree { path, fd, uid, gid, count, .. } => write!(f, "take the supervisor's idmapped copy of {} as fd {fd} (ids 0-{} on disk are the box's, host {uid}:{gid}..)", path.shown, count - 1),
            Step::AwaitIdMaps { maps: IdMaps::Helpers { uids: u, gids: g } } => write!(
                f,
                "wait for the supervisor's newuidmap/newgidmap: uid 0 -> {}, 1-{} -> {}-{}; gid 0 -> {}, 1-{} -> {}-{}",
                u.own,
                u.count,
                u.start,
                u64::from(u.start) + u64::from(u.count) - 1,
                g.own,
                g.count,
                g.start,
                u64::from(g.start) + u64::from(g.count) - 1
            ),
            Step::JoinCgroup { procs } => write!(f, "join cgroup: write 0 > {}", procs.shown),
            Step::UnshareCgroupNs => write!(f, "unshare cgroup namespace"),
            Step::OpenSource { path, fd } => write!(f, "open {} (O_PATH) as fd {fd}", path.shown),
            Step::MountFuse { at, fd, .. } => write!(f, "open /dev/fuse as fd {fd}, mount FUSE at {} (user_id=0, allow_other) and send the descriptor to the supervisor", at.shown),
            Step::PrivatizeMounts => write!(f, "mount --make-rprivate /"),
            Step::MountRoot { at, size, .. } => write!(f, "mount tmpfs (size {}) at {} as the new root", Human(*size), at.shown),
            Step::MountOverlayRoot { at, shown, merged: None, .. } => write!(f, "mount overlayfs ({shown}) at {} as the new root", at.shown),
            Step::MountOverlayRoot { at, shown, .. } => write!(f, "bind the fuse-overlayfs root ({shown}) at {} as the new root", at.shown),
            Step::Mkdir { path } => write!(f, "mkdir {}", path.shown),
            Step::Touch { path } => write!(f, "touch {}", path.shown),
            Step::Symlink { shown_target, path, .. } => write!(f, "symlink {} -> {}", path.shown, shown_target),
            Step::WriteFile { path, data } => write!(f, "write {} ({} bytes)", path.shown, data.len()),
            Step::Bind { source, target, optional } => write!(f, "bind {} -> {}{}", source.shown, target.shown, if *optional { " (if present)" } else { "" }),
            Step::Tmpfs { target, size, mode, .. } => write!(f, "mount tmpfs (size {}, mode {mode:o}, nosuid, nodev) at {}", Human(*size), target.shown),
            Step::Seal { root, dev } => write!(f, "seal {}: read-only, nosuid, nodev (recursive; device binds under {} keep dev)", root.shown, dev.shown),
            Step::SetAttr { target, set, clear } => write!(f, "set mount attributes on {}: +{} -{}", target.shown, attr_names(*set), attr_names(*clear)),
            Step::ClearReadOnly { target } => write!(f, "make {} writable (that mount only)", target.shown),
            Step::Devpts { target } => write!(f, "mount devpts (newinstance, ptmxmode=0666) at {}", target.shown),
            Step::Proc { target } => write!(f, "mount proc (nosuid, nodev, noexec) at {}", target.shown),
            Step::MaskFile { target, .. } => write!(f, "mask {} with /dev/null (if present)", target.shown),
            Step::MaskDir { target } => write!(f, "mask {} with an empty read-only tmpfs (if present)", target.shown),
            Step::ProtectProc { target } => write!(f, "make {} read-only (if present)", target.shown),
            Step::UserNsLimits { instances, watches, values } => write!(f, "write {} > {}, {} > {} (the box's share of its caller's inotify budget)", String::from_utf8_lossy(&values.0), instances.shown, String::from_utf8_lossy(&values.1), watches.shown),
            Step::LowerRlimits { limits } => write!(f, "lower rlimits (soft and hard) to the box's share of per-user budgets: {}", limits.iter().map(|(r, v)| format!("{}={v}", crate::budgets::rlimit_name(*r))).collect::<Vec<_>>().join(", ")),
            Step::Pivot { root } => write!(f, "pivot_root to {}, detach the old root", root.shown),
            Step::Hostname { name } => write!(f, "sethostname {name}"),
            Step::LoopbackUp => write!(f, "bring up lo"),
            Step::OpenTun { fd } => write!(f, "open {} (read-write) as fd {fd}, in the box's network namespace", crate::tap::TUN_DEVICE),
            Step::AwaitGateway => write!(f, "wait until the caller has taken the TAP of this pooled network namespace ({} up, made by the pool)", crate::tap::TAP_NAME),
            Step::Tap { fd } => write!(
                f,
                "TUNSETIFF fd {fd}: tap {} (IFF_TAP|IFF_NO_PI), mac {}, mtu {}, {}/{}, up, default route via {}; send the fd to the supervisor, close it, wait until the caller has taken it",
                crate::tap::TAP_NAME,
                crate::tap::BOX_MAC.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"),
                crate::tap::MTU,
                crate::tap::BOX_ADDR,
                crate::tap::PREFIX_LEN,
                crate::tap::GATEWAY_ADDR,
            ),
            Step::Chdir { path } => write!(f, "chdir {}", path.shown),
            Step::Give { path, uid, gid } => write!(f, "lchown {} to {uid}:{gid}", path.shown),
            Step::BindBelow { source, under, target, read_only, .. } => write!(f, "make the mount point {target} inside {} (no symlinks, same mount), attach a copy of {} on it ({}nosuid,nodev)", under.shown, source.shown, if *read_only { "ro," } else { "" }),
            Step::TmpfsBelow { under, target, opts, .. } => write!(f, "make the mount point {target} inside {} (no symlinks, same mount), tmpfs on it ({})", under.shown, opts.to_string_lossy()),
            Step::DropCaps { keep, own } => {
                if *keep == 0 {
                    write!(f, "drop all capabilities (bounding, ambient, effective, permitted, inheritable)")?;
                } else {
                    write!(f, "drop all capabilities except {} (inside the user namespace)", caps::names(*keep).join(","))?;
                }
                if *own != 0 {
                    write!(f, "; pid 1 alone keeps {} to switch its programs' ids", caps::names(*own).join(","))?;
                }
                Ok(())
            }
            Step::NoNewPrivs => write!(f, "prctl(PR_SET_NO_NEW_PRIVS)"),
            Step::Seccomp { listener, rules } => write!(f, "install seccomp allowlist ({rules} rules, default ENOSYS; escape calls {})", if *listener { "reported to the supervisor, box killed" } else { "kill the box" }),
            Step::AttachSource { fd, source, target } => write!(f, "attach {source} (fd {fd}) at {}", target.shown),
            Step::Exec { argv, user, .. } => {
                let shown: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
                match user {
                    Some(u) => write!(f, "fork, switch to uid {} gid {} groups {:?} (every capability gone), then exec {:?} (pid 1 stays as the box's reaper)", u.uid, u.gid, u.groups, shown),
                    None => write!(f, "fork, then exec {:?} (pid 1 stays as the box's reaper)", shown),
                }
            }
        }
    }
}

fn attr_names(mask: u64) -> String {
    use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
    let mut v = Vec::new();
    for (bit, name) in [
        (MOUNT_ATTR_RDONLY, "ro"),
        (MOUNT_ATTR_NOSUID, "nosuid"),
        (MOUNT_ATTR_NODEV, "nodev"),
        (MOUNT_ATTR_NOEXEC, "noexec"),
    ] {
        if mask & bit != 0 {
            v.push(name);
        }
    }
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// The checked, ordered steps of one box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoxPlan {
    pub steps: Vec<Step>,
    /// Namespaces created by the clone (CLONE_NEW* flags).
    pub clone_flags: libc::c_int,
}

impl BoxPlan {
    /// `--user`: the program's process switches to `ids` before its exec (losing every
    /// capability with a non-zero uid); pid 1 keeps [`crate::caps::SWITCH_IDS`] for it, outside
    /// the bounding set.
    pub fn run_as(&mut self, ids: crate::proto::resident::Ids) {
        self.pid1_keeps(crate::caps::SWITCH_IDS);
        if let Some(Step::Exec { user, .. }) = self.steps.last_mut() {
            *user = Some(ids);
        }
    }

    /// A resident box whose programs may run as other users: its pid 1 keeps `own` in its own
    /// effective and permitted sets (see [`Step::DropCaps`]).
    pub fn pid1_keeps(&mut self, own: u64) {
        for s in &mut self.steps {
            if let Step::DropCaps { own: o, .. } = s {
                *o = own;
            }
        }
    }

    /// `--subids`: the box's ids are mapped by the supervisor's helpers instead of by itself.
    pub fn use_subids(&mut self, uids: crate::subids::IdRange, gids: crate::subids::IdRange) {
        for s in &mut self.steps {
            if matches!(s, Step::MapIds { .. }) {
                *s = Step::AwaitIdMaps {
                    maps: IdMaps::Helpers {
                        uids: uids.clone(),
                        gids: gids.clone(),
                    },
                };
            }
        }
    }

    /// Host root (see [`crate::remap`]): the box's ids 0..`count` map to `uid`.. and `gid`..,
    /// written by the supervisor, and the box becomes its own root once its bind sources are
    /// open. The sources whose descriptors are in `adopt` (host directories the box may write)
    /// become idmapped copies the supervisor makes, attached instead of bound, so what the
    /// box writes there belongs to the directory's owner, not to the box's host ids.
    /// `adopt` holds each such source's descriptor and the spec field it came from.
    pub fn remap_root(&mut self, uid: u32, gid: u32, count: u32, adopt: &[(i32, SpecField)]) {
        let mut steps = Vec::with_capacity(self.steps.len() + 2);
        for s in std::mem::take(&mut self.steps) {
            match s {
                Step::MapIds { .. } => steps.push(Step::AwaitIdMaps {
                    maps: IdMaps::Direct { uid, gid, count },
                }),
                Step::PrivatizeMounts => {
                    steps.push(Step::BecomeRoot);
                    steps.push(s);
                }
                Step::OpenSource { path, fd } => match adopt.iter().find(|(a, _)| *a == fd) {
                    Some((_, field)) => steps.push(Step::AdoptTree {
                        path,
                        fd,
                        uid,
                        gid,
                        count,
                        field: *field,
                    }),
                    None => steps.push(Step::OpenSource { path, fd }),
                },
                Step::Bind {
                    source,
                    target,
                    optional,
                } => match source_fd(&source).filter(|fd| adopt.iter().any(|(a, _)| a == fd)) {
                    Some(fd) => steps.push(Step::AttachSource {
                        fd,
                        source: source.shown,
                        target,
                    }),
                    None => steps.push(Step::Bind {
                        source,
                        target,
                        optional,
                    }),
                },
                mut below @ Step::BindBelow { .. } => {
                    if let Step::BindBelow {
                        source, tree_fd, ..
                    } = &mut below
                    {
                        *tree_fd =
                            source_fd(source).filter(|fd| adopt.iter().any(|(a, _)| a == fd));
                    }
                    steps.push(below);
                }
                other => steps.push(other),
            }
        }
        self.steps = steps;
    }

    /// Whether the box makes the gateway network's TAP (`Network::Gateway`).
    pub(crate) fn makes_tap(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Tap { .. }))
    }

    /// Who maps the box's ids, when the box cannot map them itself.
    pub(crate) fn id_maps(&self) -> Option<&IdMaps> {
        self.steps.iter().find_map(|s| match s {
            Step::AwaitIdMaps { maps } => Some(maps),
            _ => None,
        })
    }
}

/// The namespace names in a set of CLONE_NEW* flags.
pub(crate) fn ns_names(flags: libc::c_int) -> Vec<&'static str> {
    let all = [
        (libc::CLONE_NEWUSER, "user"),
        (libc::CLONE_NEWNS, "mount"),
        (libc::CLONE_NEWPID, "pid"),
        (libc::CLONE_NEWNET, "net"),
        (libc::CLONE_NEWIPC, "ipc"),
        (libc::CLONE_NEWUTS, "uts"),
    ];
    all.iter()
        .filter(|(flag, _)| flags & flag != 0)
        .map(|(_, name)| *name)
        .collect()
}

impl fmt::Display for BoxPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.clone_flags != 0 {
            writeln!(
                f,
                " 0. clone with new namespaces: {}",
                ns_names(self.clone_flags).join(", ")
            )?;
        } else {
            writeln!(f, " 0. fork (no new namespaces yet)")?;
        }
        for (i, s) in self.steps.iter().enumerate() {
            writeln!(f, "{:>2}. {s}", i + 1)?;
        }
        Ok(())
    }
}

/// Type-state markers for [`PlanBuilder`].
#[derive(Debug)]
pub struct Skeleton;
#[derive(Debug)]
pub struct Writable;
#[derive(Debug)]
pub struct Process;

/// Builds a [`BoxPlan`] in the only order that is safe.
#[derive(Debug)]
pub struct PlanBuilder<S> {
    steps: Vec<Step>,
    clone_flags: libc::c_int,
    stage: String,
    _stage: PhantomData<S>,
}

impl<S> PlanBuilder<S> {
    fn staged(&self, path: &str) -> BoxPath {
        BoxPath::staged_at(&self.stage, path)
    }
}

/// The sensitive /proc paths this kernel has, looked up once per process.
struct ProcPresent {
    files: Vec<&'static str>,
    dirs: Vec<&'static str>,
    protected: Vec<&'static str>,
}

/// The box's procfs comes from the same kernel as the host's, so a path the host's /proc lacks
/// needs no step (each costs a mount syscall per box), and the answer never changes.
fn proc_present() -> &'static ProcPresent {
    static PRESENT: std::sync::OnceLock<ProcPresent> = std::sync::OnceLock::new();
    PRESENT.get_or_init(|| {
        let present = |p: &&str| std::path::Path::new(&format!("/proc/{p}")).exists();
        ProcPresent {
            files: [
                "kcore",
                "keys",
                "key-users",
                "timer_list",
                "sched_debug",
                "latency_stats",
                "kallsyms",
                "kmsg",
                "config.gz",
                "vmcore",
                "pagetypeinfo",
                "slabinfo",
                // Host memory layout: physical page flags, use counts and owners, and kernel
                // virtual addresses (KASLR).
                "kpageflags",
                "kpagecount",
                "kpagecgroup",
                "vmallocinfo",
            ]
            .into_iter()
            .filter(present)
            .collect(),
            dirs: ["acpi", "scsi", "firmware", "asound"]
                .into_iter()
                .filter(present)
                .collect(),
            protected: ["sys", "sysrq-trigger", "irq", "bus", "fs"]
                .into_iter()
                .filter(present)
                .collect(),
        }
    })
}

impl PlanBuilder<Skeleton> {
    /// The steps every box starts with: ids, cgroups, private mounts and the root tmpfs.
    /// `sources` are host paths opened at the given descriptor numbers before anything is mounted.
    /// `stage` is where the root is assembled before the pivot: [`STAGE`], or a Runtime's own
    /// directory when the skeleton goes into a template (which must not cover the host's /tmp).
    pub fn start(
        clone_flags: libc::c_int,
        uid: u32,
        gid: u32,
        cgroup_procs: &[CString],
        sources: &[(String, i32)],
        stage: &str,
    ) -> PlanBuilder<Skeleton> {
        let mut steps = vec![
            Step::DieWithSupervisor {
                supervisor: crate::sys::getpid(),
            },
            Step::MapIds {
                uid,
                gid,
                uid_map: format!("0 {uid} 1\n").into_bytes(),
                gid_map: format!("0 {gid} 1\n").into_bytes(),
            },
        ];
        for p in cgroup_procs {
            let shown = p.to_string_lossy().into_owned();
            steps.push(Step::JoinCgroup {
                procs: BoxPath {
                    shown,
                    c: p.clone(),
                },
            });
        }
        steps.push(Step::UnshareCgroupNs);
        for (path, fd) in sources {
            steps.push(Step::OpenSource {
                path: BoxPath::plain(path),
                fd: *fd,
            });
        }
        steps.push(Step::PrivatizeMounts);
        steps.push(Step::MountRoot {
            at: BoxPath::staged_at(stage, "/"),
            size: 1 << 20,
            opts: tmpfs_opts(1 << 20, 0o755),
        });
        PlanBuilder {
            steps,
            clone_flags,
            stage: stage.to_string(),
            _stage: PhantomData,
        }
    }

    pub fn mkdir(&mut self, path: &str) {
        self.steps.push(Step::Mkdir {
            path: self.staged(path),
        });
    }

    /// The root is an overlayfs whose layers are the descriptors `lower`, `upper` and `work`
    /// opened (see [`Step::OpenSource`]), instead of the tmpfs; `shown` names them. `extra`:
    /// read-only layers between `upper` and `lower`, top first (a template's frozen uppers).
    ///
    /// `attach`: the lower layer is an idmapped copy (host root, see [`crate::remap`]) that
    /// overlayfs takes only from a mounted path: the copy (descriptor, host path) is attached
    /// over its own source first, in the box's private mount table, and named by that path.
    ///
    /// `merged`: the root is this directory (a descriptor path), already merged by the caller
    /// with fuse-overlayfs, bound instead of an overlayfs mounted.
    #[allow(clippy::too_many_arguments)]
    pub fn overlay_root(
        &mut self,
        lower: &str,
        extra: &[String],
        upper: &str,
        work: &str,
        shown: String,
        attach: Option<(i32, &str)>,
        merged: Option<&str>,
    ) {
        let at = self.staged("/");
        // Attached where the root goes (the stage, which any id may traverse; the source's own
        // path may lie under a directory only host root enters), then covered by the overlay.
        let stage = at.c.to_string_lossy().into_owned();
        let lower = match attach {
            Some(_) => stage.as_str(),
            None => lower,
        };
        let lowers: String = extra.iter().map(|l| format!("{l}:")).collect();
        let opts = cstring(&format!(
            "lowerdir={lowers}{lower},upperdir={upper},workdir={work},userxattr"
        ));
        if let Some(i) = self
            .steps
            .iter()
            .position(|s| matches!(s, Step::MountRoot { .. }))
        {
            let merged = merged.map(cstring);
            self.steps[i] = Step::MountOverlayRoot {
                at,
                opts,
                shown,
                merged,
            };
            if let Some((fd, path)) = attach {
                self.steps.insert(
                    i,
                    Step::AttachSource {
                        fd,
                        source: path.to_string(),
                        target: self.staged("/"),
                    },
                );
            }
        }
    }

    /// Pid 1 mounts the writable root's FUSE file system at `at` (a canonical host path)
    /// before it opens its sources (see [`Step::MountFuse`]).
    pub fn mount_fuse(&mut self, at: &str) {
        let opts = cstring(&format!(
            "fd={FUSE_FD},rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions"
        ));
        let i = self
            .steps
            .iter()
            .position(|s| matches!(s, Step::OpenSource { .. } | Step::PrivatizeMounts))
            .unwrap_or(self.steps.len());
        self.steps.insert(
            i,
            Step::MountFuse {
                at: BoxPath::plain(at),
                fd: FUSE_FD,
                opts,
            },
        );
    }

    /// Pid 1 opens `/dev/net/tun` (see [`Step::OpenTun`]) after its bind sources, before it
    /// becomes root of its user namespace (host root's box: [`BoxPlan::remap_root`] puts
    /// `BecomeRoot` just before `PrivatizeMounts`).
    pub fn open_tun(&mut self) {
        let i = self
            .steps
            .iter()
            .position(|s| matches!(s, Step::PrivatizeMounts))
            .unwrap_or(self.steps.len());
        self.steps.insert(i, Step::OpenTun { fd: TUN_FD });
    }

    pub fn touch(&mut self, path: &str) {
        self.steps.push(Step::Touch {
            path: self.staged(path),
        });
    }

    pub fn symlink(&mut self, target: &str, path: &str) {
        self.steps.push(Step::Symlink {
            target: cstring(target),
            shown_target: target.to_string(),
            path: self.staged(path),
        });
    }

    pub fn write_file(&mut self, path: &str, data: Vec<u8>) {
        self.steps.push(Step::WriteFile {
            path: self.staged(path),
            data,
        });
    }

    /// A read-only bind of a host path (sealed read-only with the rest of the tree).
    pub fn bind_host(&mut self, host: &str, shown: &str, target: &str, optional: bool) {
        self.steps.push(Step::Bind {
            source: BoxPath {
                shown: shown.to_string(),
                c: cstring(host),
            },
            target: self.staged(target),
            optional,
        });
    }

    /// A tmpfs inside the skeleton (the /dev tmpfs); it is sealed read-only too.
    pub fn tmpfs(&mut self, target: &str, size: u64, mode: u32) {
        self.steps.push(Step::Tmpfs {
            target: self.staged(target),
            size,
            mode,
            opts: tmpfs_opts(size, mode),
        });
    }

    /// Makes everything assembled so far read-only; only writable mounts may follow.
    pub fn seal(mut self) -> PlanBuilder<Writable> {
        self.steps.push(Step::Seal {
            root: self.staged("/"),
            dev: self.staged("/dev"),
        });
        PlanBuilder {
            steps: self.steps,
            clone_flags: self.clone_flags,
            stage: self.stage,
            _stage: PhantomData,
        }
    }
}

impl PlanBuilder<Writable> {
    /// A writable root: the root mount itself (not what is bound on it) becomes writable again
    /// after the seal.
    pub fn root_writable(&mut self) {
        self.steps.push(Step::ClearReadOnly {
            target: self.staged("/"),
        });
    }

    pub fn tmpfs(&mut self, target: &str, size: u64, mode: u32) {
        self.steps.push(Step::Tmpfs {
            target: self.staged(target),
            size,
            mode,
            opts: tmpfs_opts(size, mode),
        });
    }

    /// Creates a mount point inside a writable mount made earlier in this stage.
    pub fn mkdir(&mut self, path: &str) {
        self.steps.push(Step::Mkdir {
            path: self.staged(path),
        });
    }

    pub fn touch(&mut self, path: &str) {
        self.steps.push(Step::Touch {
            path: self.staged(path),
        });
    }

    /// A bind at `target` inside the host directory mounted at `under` (see
    /// [`Step::BindBelow`]).
    pub fn bind_below(
        &mut self,
        host: &str,
        shown: &str,
        under: &str,
        target: &str,
        is_dir: bool,
        read_only: bool,
    ) {
        self.steps.push(Step::BindBelow {
            source: BoxPath {
                shown: shown.to_string(),
                c: cstring(host),
            },
            under: self.staged(under),
            root: self.staged("/"),
            under_parts: parts_below("/", under),
            parts: parts_below(under, target),
            is_dir,
            read_only,
            tree_fd: None,
            target: target.to_string(),
        });
    }

    /// A tmpfs at `target` inside the host directory mounted at `under` (see
    /// [`Step::TmpfsBelow`]).
    pub fn tmpfs_below(&mut self, under: &str, target: &str, size: u64, mode: u32) {
        self.steps.push(Step::TmpfsBelow {
            under: self.staged(under),
            root: self.staged("/"),
            under_parts: parts_below("/", under),
            parts: parts_below(under, target),
            opts: tmpfs_opts(size, mode),
            target: target.to_string(),
        });
    }

    /// A bind of a host source (usually `/proc/self/fd/N`), then its own attributes.
    pub fn bind(&mut self, host: &str, shown: &str, target: &str, read_only: bool) {
        use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
        self.steps.push(Step::Bind {
            source: BoxPath {
                shown: shown.to_string(),
                c: cstring(host),
            },
            target: self.staged(target),
            optional: false,
        });
        let mut set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        if read_only {
            set |= MOUNT_ATTR_RDONLY;
        }
        // Restrictions apply to the whole bound tree; read-write is granted to the top mount
        // only, never recursively (a submount of the source keeps its own read-only flag).
        self.steps.push(Step::SetAttr {
            target: self.staged(target),
            set,
            clear: 0,
        });
        if !read_only {
            self.steps.push(Step::ClearReadOnly {
                target: self.staged(target),
            });
        }
    }

    pub fn devpts(&mut self, target: &str) {
        self.steps.push(Step::Devpts {
            target: self.staged(target),
        });
    }

    /// procfs with the usual sensitive paths masked and the kernel knobs read-only.
    pub fn proc(&mut self) {
        self.steps.push(Step::Proc {
            target: self.staged("/proc"),
        });
        if let Some(values) = &crate::budgets::budgets().inotify {
            self.steps.push(Step::UserNsLimits {
                instances: self.staged("/proc/sys/user/max_inotify_instances"),
                watches: self.staged("/proc/sys/user/max_inotify_watches"),
                values: values.clone(),
            });
        }
        let present = proc_present();
        for f in &present.files {
            self.steps.push(Step::MaskFile {
                target: self.staged(&format!("/proc/{f}")),
                null: self.staged("/dev/null"),
            });
        }
        for d in &present.dirs {
            self.steps.push(Step::MaskDir {
                target: self.staged(&format!("/proc/{d}")),
            });
        }
        for p in &present.protected {
            self.steps.push(Step::ProtectProc {
                target: self.staged(&format!("/proc/{p}")),
            });
        }
    }

    pub fn pivot(mut self) -> PlanBuilder<Process> {
        let root = BoxPath::plain(&self.stage);
        self.steps.push(Step::Pivot { root });
        PlanBuilder {
            steps: self.steps,
            clone_flags: self.clone_flags,
            stage: self.stage,
            _stage: PhantomData,
        }
    }
}

impl PlanBuilder<Process> {
    pub fn hostname(&mut self, name: &str) {
        self.steps.push(Step::Hostname {
            name: name.to_string(),
        });
    }

    pub fn loopback_up(&mut self) {
        self.steps.push(Step::LoopbackUp);
    }

    /// The gateway network's TAP (see [`Step::Tap`]), made on the `/dev/net/tun` that
    /// [`PlanBuilder::<Skeleton>::open_tun`] opened.
    pub fn tap(&mut self) {
        self.steps.push(Step::Tap { fd: TUN_FD });
    }

    pub fn chdir(&mut self, path: &str) {
        self.steps.push(Step::Chdir {
            path: BoxPath::plain(path),
        });
    }

    /// See [`Step::Give`].
    pub fn give(&mut self, path: &str, uid: u32, gid: u32) {
        self.steps.push(Step::Give {
            path: BoxPath::plain(path),
            uid,
            gid,
        });
    }

    /// Privileges, filter and exec: the last steps, in the only order that works (capabilities
    /// before no_new_privs before seccomp, and seccomp last so setup itself is not filtered).
    pub fn finish(
        mut self,
        keep_caps: u64,
        seccomp_rules: usize,
        listener: bool,
        argv: &[String],
        env: &[(String, String)],
        path_var: &str,
    ) -> BoxPlan {
        let limits = crate::budgets::budgets().rlimits.clone();
        if !limits.is_empty() {
            self.steps.push(Step::LowerRlimits { limits });
        }
        self.steps.push(Step::DropCaps {
            keep: keep_caps,
            own: 0,
        });
        self.steps.push(Step::NoNewPrivs);
        self.steps.push(Step::Seccomp {
            listener,
            rules: seccomp_rules,
        });
        let candidates = exec_candidates(&argv[0], path_var);
        self.steps.push(Step::Exec {
            argv: argv.iter().map(|a| cstring(a)).collect(),
            candidates,
            env: env
                .iter()
                .map(|(k, v)| cstring(&format!("{k}={v}")))
                .collect(),
            user: None,
        });
        BoxPlan {
            steps: self.steps,
            clone_flags: self.clone_flags,
        }
    }
}

/// The components of `target` below `under` (`/workspace`, `/workspace/a/b` -> `a`, `b`).
fn parts_below(under: &str, target: &str) -> Vec<CString> {
    target
        .strip_prefix(under)
        .unwrap_or(target)
        .split('/')
        .filter(|p| !p.is_empty())
        .map(cstring)
        .collect()
}

/// The paths `execve` tries for `prog`: itself when it names a path, else each absolute
/// directory of `path_var` in order.
pub fn exec_candidates(prog: &str, path_var: &str) -> Vec<CString> {
    if prog.contains('/') {
        vec![cstring(prog)]
    } else {
        path_var
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| cstring(&format!("{}/{prog}", d.trim_end_matches('/'))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_paths_live_under_the_stage() {
        assert_eq!(BoxPath::staged_at(STAGE, "/").c.to_str().unwrap(), "/tmp");
        assert_eq!(
            BoxPath::staged_at(STAGE, "/usr").c.to_str().unwrap(),
            "/tmp/usr"
        );
        assert_eq!(BoxPath::staged_at(STAGE, "/usr").shown, "/usr");
    }

    #[test]
    fn plan_order_is_skeleton_seal_writable_pivot_process() {
        let mut b = PlanBuilder::start(libc::CLONE_NEWUSER, 1000, 1000, &[], &[], STAGE);
        b.mkdir("/usr");
        b.bind_host("/usr", "/usr", "/usr", false);
        let mut w = b.seal();
        w.tmpfs("/tmp", 1 << 20, 0o1777);
        w.proc();
        let p = w.pivot();
        let plan = p.finish(
            0,
            10,
            true,
            &["python3".into()],
            &[("PATH".into(), "/usr/bin".into())],
            "/usr/local/bin:/usr/bin",
        );
        let names: Vec<&str> = plan.steps.iter().map(Step::name).collect();
        let seal = names
            .iter()
            .position(|n| *n == "make root read-only")
            .unwrap();
        let pivot = names.iter().position(|n| *n == "pivot root").unwrap();
        let bind = names.iter().position(|n| *n == "bind mount").unwrap();
        let proc = names.iter().position(|n| *n == "mount proc").unwrap();
        assert!(bind < seal && seal < proc && proc < pivot);
        assert_eq!(names.last(), Some(&"exec"));
        if let Some(Step::Exec { candidates, .. }) = plan.steps.last() {
            assert_eq!(candidates[0].to_str().unwrap(), "/usr/local/bin/python3");
            assert_eq!(candidates.len(), 2);
        }
        let text = plan.to_string();
        assert!(
            text.contains("pivot_root") && text.contains("seccomp"),
            "{text}"
        );
    }
}
