//! A box as an ordered list of typed setup steps, built and checked before anything is forked.
//!
//! The builder is a type-state machine, so the mount order is enforced by the compiler:
//! [`Skeleton`] steps (the read-only tree) come first, then [`PlanBuilder::seal`] makes that tree
//! read-only, then [`Writable`] steps (tmpfs, workspace, proc) mount on top of it, then
//! [`PlanBuilder::pivot`] switches root, then [`Process`] steps drop privileges and exec. Every path
//! is converted to a C string here, so the child that executes the plan never allocates.

use std::ffi::CString;
use std::fmt;
use std::marker::PhantomData;

use crate::caps;
use crate::size::Human;

/// Where the new root is assembled before `pivot_root`: a tmpfs mounted over the host's /tmp in
/// the box's private copy of the mount table. Every bind source that may live under /tmp is passed
/// as a descriptor, so covering it does not matter.
pub const STAGE: &str = "/tmp";

/// A path inside the box, with the staged path the child uses before the pivot.
#[derive(Clone, Debug)]
pub struct BoxPath {
    pub shown: String,
    pub c: CString,
}

impl BoxPath {
    /// `path` is an absolute box path; before the pivot it is reached under [`STAGE`].
    fn staged(path: &str) -> BoxPath {
        let full = if path == "/" { STAGE.to_string() } else { format!("{STAGE}{path}") };
        BoxPath { shown: path.to_string(), c: cstring(&full) }
    }

    /// A path used as is (after the pivot, or a host path).
    fn plain(path: &str) -> BoxPath {
        BoxPath { shown: path.to_string(), c: cstring(path) }
    }
}

/// tmpfs mount options for a size cap and a mode.
fn tmpfs_opts(size: u64, mode: u32) -> CString {
    cstring(&format!("size={size},mode={mode:o}"))
}

/// Converts a validated string (no NUL bytes) into a C string.
pub(crate) fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// One setup step. The child executes them in order; a failure reports the step's index.
#[derive(Debug)]
pub enum Step {
    /// Ask the kernel to SIGKILL the box's pid 1 if the supervisor's thread dies; exit at once if
    /// it already has (its pid is no longer our parent).
    DieWithSupervisor { supervisor: i32 },
    /// Write uid_map, setgroups and gid_map of the box's own user namespace.
    MapIds { uid: u32, gid: u32, uid_map: Vec<u8>, gid_map: Vec<u8> },
    /// Write "0" into a cgroup.procs file: the box joins its cgroup before any user code runs.
    JoinCgroup { procs: BoxPath },
    /// A cgroup namespace rooted at the box's own cgroup.
    UnshareCgroupNs,
    /// Open a bind source with O_PATH at a fixed descriptor number, before the staging tmpfs
    /// covers the host's /tmp; later binds use `/proc/self/fd/N`, so a path swapped afterwards
    /// cannot redirect them.
    OpenSource { path: BoxPath, fd: i32 },
    /// Make every mount private, so nothing the box mounts propagates to the host.
    PrivatizeMounts,
    /// The tmpfs that becomes the box's root.
    MountRoot { at: BoxPath, size: u64, opts: CString },
    Mkdir { path: BoxPath },
    Touch { path: BoxPath },
    Symlink { target: CString, shown_target: String, path: BoxPath },
    WriteFile { path: BoxPath, data: Vec<u8> },
    /// A recursive bind mount. `optional` skips a source that does not exist.
    Bind { source: BoxPath, target: BoxPath, optional: bool },
    /// A tmpfs with a size cap and mode.
    Tmpfs { target: BoxPath, size: u64, mode: u32, opts: CString },
    /// Makes the whole assembled tree read-only, nosuid and nodev (device nodes stay usable
    /// under /dev).
    Seal { root: BoxPath, dev: BoxPath },
    /// Sets or clears mount attributes on one mount and everything below it.
    SetAttr { target: BoxPath, set: u64, clear: u64 },
    /// Makes one mount (not its submounts) writable.
    ClearReadOnly { target: BoxPath },
    /// A fresh devpts instance for the box's own pseudo-terminals.
    Devpts { target: BoxPath },
    /// A fresh procfs for the box's pid namespace.
    Proc { target: BoxPath },
    /// Hides a /proc file behind /dev/null; skipped when the kernel has no such file.
    MaskFile { target: BoxPath, null: BoxPath },
    /// Hides a /proc directory behind an empty read-only tmpfs; skipped when absent.
    MaskDir { target: BoxPath },
    /// Makes a /proc subtree read-only (bind onto itself, then read-only); skipped when absent.
    ProtectProc { target: BoxPath },
    /// pivot_root into the staged tree and detach the old root.
    Pivot { root: BoxPath },
    Hostname { name: String },
    LoopbackUp,
    Chdir { path: BoxPath },
    /// Drop every capability not in `keep` from all five sets.
    DropCaps { keep: u64 },
    NoNewPrivs,
    /// Install the seccomp filter; `listener` asks for a user-notification descriptor.
    Seccomp { listener: bool, rules: usize },
    /// Fork the program (the plan's pid 1 stays as the box's reaper) and exec it.
    Exec { argv: Vec<CString>, candidates: Vec<CString>, env: Vec<CString> },
}

impl Step {
    /// A short name of the step, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Step::DieWithSupervisor { .. } => "tie the box to its supervisor",
            Step::MapIds { .. } => "map user and group ids",
            Step::JoinCgroup { .. } => "join cgroup",
            Step::UnshareCgroupNs => "new cgroup namespace",
            Step::OpenSource { .. } => "open bind source",
            Step::PrivatizeMounts => "make mounts private",
            Step::MountRoot { .. } => "mount root tmpfs",
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
            Step::Pivot { .. } => "pivot root",
            Step::Hostname { .. } => "set hostname",
            Step::LoopbackUp => "bring up loopback",
            Step::Chdir { .. } => "enter working directory",
            Step::DropCaps { .. } => "drop capabilities",
            Step::NoNewPrivs => "set no_new_privs",
            Step::Seccomp { .. } => "install seccomp filter",
            Step::Exec { .. } => "exec",
        }
    }

    /// The path the step works on, for errors.
    pub fn path(&self) -> Option<String> {
        match self {
            Step::JoinCgroup { procs } => Some(procs.shown.clone()),
            Step::OpenSource { path, .. } => Some(path.shown.clone()),
            Step::MountRoot { at, .. } => Some(at.shown.clone()),
            Step::Mkdir { path } | Step::Touch { path } | Step::WriteFile { path, .. } | Step::Symlink { path, .. } | Step::Chdir { path } => Some(path.shown.clone()),
            Step::Bind { source, target, .. } => Some(format!("{} -> {}", source.shown, target.shown)),
            Step::Tmpfs { target, .. } | Step::SetAttr { target, .. } | Step::ClearReadOnly { target } | Step::Devpts { target } | Step::Proc { target } | Step::MaskFile { target, .. } | Step::MaskDir { target } | Step::ProtectProc { target } => Some(target.shown.clone()),
            Step::Seal { root, .. } | Step::Pivot { root } => Some(root.shown.clone()),
            Step::Exec { argv, .. } => argv.first().map(|a| a.to_string_lossy().into_owned()),
            _ => None,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::DieWithSupervisor { supervisor } => write!(f, "prctl(PR_SET_PDEATHSIG, SIGKILL): the box dies with its supervisor (pid {supervisor})"),
            Step::MapIds { uid, gid, .. } => write!(f, "map uid 0 -> {uid}, gid 0 -> {gid} (setgroups deny)"),
            Step::JoinCgroup { procs } => write!(f, "join cgroup: write 0 > {}", procs.shown),
            Step::UnshareCgroupNs => write!(f, "unshare cgroup namespace"),
            Step::OpenSource { path, fd } => write!(f, "open {} (O_PATH) as fd {fd}", path.shown),
            Step::PrivatizeMounts => write!(f, "mount --make-rprivate /"),
            Step::MountRoot { at, size, .. } => write!(f, "mount tmpfs (size {}) at {} as the new root", Human(*size), at.shown),
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
            Step::Pivot { root } => write!(f, "pivot_root to {}, detach the old root", root.shown),
            Step::Hostname { name } => write!(f, "sethostname {name}"),
            Step::LoopbackUp => write!(f, "bring up lo (the only interface)"),
            Step::Chdir { path } => write!(f, "chdir {}", path.shown),
            Step::DropCaps { keep } => {
                if *keep == 0 {
                    write!(f, "drop all capabilities (bounding, ambient, effective, permitted, inheritable)")
                } else {
                    write!(f, "drop all capabilities except {} (inside the user namespace)", caps::names(*keep).join(","))
                }
            }
            Step::NoNewPrivs => write!(f, "prctl(PR_SET_NO_NEW_PRIVS)"),
            Step::Seccomp { listener, rules } => write!(f, "install seccomp allowlist ({rules} rules, default ENOSYS; escape calls {})", if *listener { "reported to the supervisor, box killed" } else { "kill the box" }),
            Step::Exec { argv, .. } => {
                let shown: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
                write!(f, "fork, then exec {:?} (pid 1 stays as the box's reaper)", shown)
            }
        }
    }
}

fn attr_names(mask: u64) -> String {
    use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
    let mut v = Vec::new();
    for (bit, name) in [(MOUNT_ATTR_RDONLY, "ro"), (MOUNT_ATTR_NOSUID, "nosuid"), (MOUNT_ATTR_NODEV, "nodev"), (MOUNT_ATTR_NOEXEC, "noexec")] {
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
#[derive(Debug)]
pub struct BoxPlan {
    pub steps: Vec<Step>,
    /// Namespaces created by the clone (CLONE_NEW* flags).
    pub clone_flags: libc::c_int,
}

impl fmt::Display for BoxPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ns = Vec::new();
        for (flag, name) in [
            (libc::CLONE_NEWUSER, "user"),
            (libc::CLONE_NEWNS, "mount"),
            (libc::CLONE_NEWPID, "pid"),
            (libc::CLONE_NEWNET, "net"),
            (libc::CLONE_NEWIPC, "ipc"),
            (libc::CLONE_NEWUTS, "uts"),
        ] {
            if self.clone_flags & flag != 0 {
                ns.push(name);
            }
        }
        writeln!(f, " 0. clone with new namespaces: {}", ns.join(", "))?;
        for (i, s) in self.steps.iter().enumerate() {
            writeln!(f, "{:>2}. {s}", i + 1)?;
        }
        Ok(())
    }
}

/// Type-state markers for [`PlanBuilder`].
pub struct Skeleton;
pub struct Writable;
pub struct Process;

/// Builds a [`BoxPlan`] in the only order that is safe.
pub struct PlanBuilder<S> {
    steps: Vec<Step>,
    clone_flags: libc::c_int,
    _stage: PhantomData<S>,
}

impl PlanBuilder<Skeleton> {
    /// The steps every box starts with: ids, cgroups, private mounts and the root tmpfs.
    /// `sources` are host paths opened at the given descriptor numbers before anything is mounted.
    pub fn start(clone_flags: libc::c_int, uid: u32, gid: u32, cgroup_procs: &[CString], sources: &[(String, i32)]) -> PlanBuilder<Skeleton> {
        let mut steps = vec![Step::DieWithSupervisor { supervisor: crate::sys::getpid() }, Step::MapIds {
            uid,
            gid,
            uid_map: format!("0 {uid} 1\n").into_bytes(),
            gid_map: format!("0 {gid} 1\n").into_bytes(),
        }];
        for p in cgroup_procs {
            let shown = p.to_string_lossy().into_owned();
            steps.push(Step::JoinCgroup { procs: BoxPath { shown, c: p.clone() } });
        }
        steps.push(Step::UnshareCgroupNs);
        for (path, fd) in sources {
            steps.push(Step::OpenSource { path: BoxPath::plain(path), fd: *fd });
        }
        steps.push(Step::PrivatizeMounts);
        steps.push(Step::MountRoot { at: BoxPath::staged("/"), size: 1 << 20, opts: tmpfs_opts(1 << 20, 0o755) });
        PlanBuilder { steps, clone_flags, _stage: PhantomData }
    }

    pub fn mkdir(&mut self, path: &str) {
        self.steps.push(Step::Mkdir { path: BoxPath::staged(path) });
    }

    pub fn touch(&mut self, path: &str) {
        self.steps.push(Step::Touch { path: BoxPath::staged(path) });
    }

    pub fn symlink(&mut self, target: &str, path: &str) {
        self.steps.push(Step::Symlink { target: cstring(target), shown_target: target.to_string(), path: BoxPath::staged(path) });
    }

    pub fn write_file(&mut self, path: &str, data: Vec<u8>) {
        self.steps.push(Step::WriteFile { path: BoxPath::staged(path), data });
    }

    /// A read-only bind of a host path (sealed read-only with the rest of the tree).
    pub fn bind_host(&mut self, host: &str, shown: &str, target: &str, optional: bool) {
        self.steps.push(Step::Bind { source: BoxPath { shown: shown.to_string(), c: cstring(host) }, target: BoxPath::staged(target), optional });
    }

    /// A tmpfs inside the skeleton (the /dev tmpfs); it is sealed read-only too.
    pub fn tmpfs(&mut self, target: &str, size: u64, mode: u32) {
        self.steps.push(Step::Tmpfs { target: BoxPath::staged(target), size, mode, opts: tmpfs_opts(size, mode) });
    }

    /// Makes everything assembled so far read-only; only writable mounts may follow.
    pub fn seal(mut self) -> PlanBuilder<Writable> {
        self.steps.push(Step::Seal { root: BoxPath::staged("/"), dev: BoxPath::staged("/dev") });
        PlanBuilder { steps: self.steps, clone_flags: self.clone_flags, _stage: PhantomData }
    }
}

impl PlanBuilder<Writable> {
    pub fn tmpfs(&mut self, target: &str, size: u64, mode: u32) {
        self.steps.push(Step::Tmpfs { target: BoxPath::staged(target), size, mode, opts: tmpfs_opts(size, mode) });
    }

    /// Creates a mount point inside a writable mount made earlier in this stage.
    pub fn mkdir(&mut self, path: &str) {
        self.steps.push(Step::Mkdir { path: BoxPath::staged(path) });
    }

    pub fn touch(&mut self, path: &str) {
        self.steps.push(Step::Touch { path: BoxPath::staged(path) });
    }

    /// A bind of a host source (usually `/proc/self/fd/N`), then its own attributes.
    pub fn bind(&mut self, host: &str, shown: &str, target: &str, read_only: bool) {
        use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
        self.steps.push(Step::Bind { source: BoxPath { shown: shown.to_string(), c: cstring(host) }, target: BoxPath::staged(target), optional: false });
        let mut set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        if read_only {
            set |= MOUNT_ATTR_RDONLY;
        }
        // Restrictions apply to the whole bound tree; read-write is granted to the top mount
        // only, never recursively (a submount of the source keeps its own read-only flag).
        self.steps.push(Step::SetAttr { target: BoxPath::staged(target), set, clear: 0 });
        if !read_only {
            self.steps.push(Step::ClearReadOnly { target: BoxPath::staged(target) });
        }
    }

    pub fn devpts(&mut self, target: &str) {
        self.steps.push(Step::Devpts { target: BoxPath::staged(target) });
    }

    /// procfs with the usual sensitive paths masked and the kernel knobs read-only.
    pub fn proc(&mut self) {
        self.steps.push(Step::Proc { target: BoxPath::staged("/proc") });
        // The box's procfs comes from the same kernel as the host's, so a path the host's /proc
        // lacks needs no step (each costs a mount syscall per box).
        let present = |p: &str| std::path::Path::new(&format!("/proc/{p}")).exists();
        for f in ["kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "kallsyms", "kmsg", "config.gz", "vmcore", "pagetypeinfo", "slabinfo"].into_iter().filter(|f| present(f)) {
            self.steps.push(Step::MaskFile { target: BoxPath::staged(&format!("/proc/{f}")), null: BoxPath::staged("/dev/null") });
        }
        for d in ["acpi", "scsi", "firmware", "asound"].into_iter().filter(|d| present(d)) {
            self.steps.push(Step::MaskDir { target: BoxPath::staged(&format!("/proc/{d}")) });
        }
        for p in ["sys", "sysrq-trigger", "irq", "bus", "fs"].into_iter().filter(|p| present(p)) {
            self.steps.push(Step::ProtectProc { target: BoxPath::staged(&format!("/proc/{p}")) });
        }
    }

    pub fn pivot(mut self) -> PlanBuilder<Process> {
        self.steps.push(Step::Pivot { root: BoxPath::plain(STAGE) });
        PlanBuilder { steps: self.steps, clone_flags: self.clone_flags, _stage: PhantomData }
    }
}

impl PlanBuilder<Process> {
    pub fn hostname(&mut self, name: &str) {
        self.steps.push(Step::Hostname { name: name.to_string() });
    }

    pub fn loopback_up(&mut self) {
        self.steps.push(Step::LoopbackUp);
    }

    pub fn chdir(&mut self, path: &str) {
        self.steps.push(Step::Chdir { path: BoxPath::plain(path) });
    }

    /// Privileges, filter and exec: the last steps, in the only order that works (capabilities
    /// before no_new_privs before seccomp, and seccomp last so setup itself is not filtered).
    pub fn finish(mut self, keep_caps: u64, seccomp_rules: usize, listener: bool, argv: &[String], env: &[(String, String)], path_var: &str) -> BoxPlan {
        self.steps.push(Step::DropCaps { keep: keep_caps });
        self.steps.push(Step::NoNewPrivs);
        self.steps.push(Step::Seccomp { listener, rules: seccomp_rules });
        let prog = &argv[0];
        let candidates = if prog.contains('/') {
            vec![cstring(prog)]
        } else {
            path_var.split(':').filter(|d| d.starts_with('/')).map(|d| cstring(&format!("{}/{prog}", d.trim_end_matches('/')))).collect()
        };
        self.steps.push(Step::Exec {
            argv: argv.iter().map(|a| cstring(a)).collect(),
            candidates,
            env: env.iter().map(|(k, v)| cstring(&format!("{k}={v}"))).collect(),
        });
        BoxPlan { steps: self.steps, clone_flags: self.clone_flags }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_paths_live_under_the_stage() {
        assert_eq!(BoxPath::staged("/").c.to_str().unwrap(), "/tmp");
        assert_eq!(BoxPath::staged("/usr").c.to_str().unwrap(), "/tmp/usr");
        assert_eq!(BoxPath::staged("/usr").shown, "/usr");
    }

    #[test]
    fn plan_order_is_skeleton_seal_writable_pivot_process() {
        let mut b = PlanBuilder::start(libc::CLONE_NEWUSER, 1000, 1000, &[], &[]);
        b.mkdir("/usr");
        b.bind_host("/usr", "/usr", "/usr", false);
        let mut w = b.seal();
        w.tmpfs("/tmp", 1 << 20, 0o1777);
        w.proc();
        let p = w.pivot();
        let plan = p.finish(0, 10, true, &["python3".into()], &[("PATH".into(), "/usr/bin".into())], "/usr/local/bin:/usr/bin");
        let names: Vec<&str> = plan.steps.iter().map(Step::name).collect();
        let seal = names.iter().position(|n| *n == "make root read-only").unwrap();
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
        assert!(text.contains("pivot_root") && text.contains("seccomp"), "{text}");
    }
}
