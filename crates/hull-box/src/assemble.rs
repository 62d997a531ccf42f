//! Turns a validated [`BoxSpec`] into a [`BoxPlan`]: which host paths make up the root, where
//! the writable mounts go, which descriptors carry the bind sources.
//!
//! Bind sources the caller names (workspace, `--mount`, `--rootfs`) are opened here with `O_PATH`
//! and handed to the child as `/proc/self/fd/N`, so a path swapped after the checks cannot
//! redirect a bind, and sources under the host's /tmp survive the staging tmpfs covering it.

use std::ffi::CString;
use std::path::Path;

use crate::error::BoxError;
use crate::plan::{BoxPlan, PlanBuilder, Skeleton};
use crate::spec::{is_within, BoxSpec, Network, RootSpec, SpecError, SpecField, BOX_PATH};
use crate::sys;

/// Host directories the `host` image shows, read-only (symlinks are copied as symlinks).
pub const HOST_DIRS: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Entries of the host's /etc the `host` image shows: the loader cache, certificates,
/// alternatives and other read-mostly data programs expect. Never shadow, sudoers, ssh keys.
pub const HOST_ETC: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "localtime",
    "timezone",
    "os-release",
    "debian_version",
    "protocols",
    "services",
    "mime.types",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
    "gai.conf",
    "host.conf",
    "inputrc",
    "bash.bashrc",
    "magic",
    "papersize",
    "fonts",
    "matplotlibrc",
];

/// Names in a root that hull provides itself.
const OWN_TOP: &[&str] = &["proc", "sys", "dev", "tmp", "workspace"];

/// What the plan needs from the caller's side.
#[derive(Debug)]
pub struct Context<'a> {
    pub uid: u32,
    pub gid: u32,
    pub cgroup_procs: &'a [CString],
    pub workspace: &'a Path,
    pub seccomp_rules: usize,
    pub listener: bool,
    pub keep_caps: u64,
    /// Where the root is assembled before the pivot (`plan::STAGE` unless templates are on).
    pub stage: &'a str,
    /// Host root (see [`crate::remap`]): the host ids box ids 0.. map to, and how many.
    pub remap: Option<Remap>,
    /// The workspace is a temporary one hull made for this box (already given to the box's
    /// root), not a host directory of the caller's.
    pub temporary_workspace: bool,
}

/// The host ids a box of host root maps to (see [`crate::remap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remap {
    pub uid: u32,
    pub gid: u32,
    pub count: u32,
}

/// The namespace flags for `spec`.
pub fn clone_flags(spec: &BoxSpec) -> libc::c_int {
    let mut f = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    if spec.network != Network::Host {
        f |= libc::CLONE_NEWNET;
    }
    f
}

/// The first descriptor number bind sources are opened at inside the box's setup.
const SOURCE_FD_BASE: i32 = 900;

/// Bind sources, each opened by the box at a fixed descriptor before the mounts start.
struct Sources {
    list: Vec<(String, i32)>,
    /// The host's home directories, looked up at the first source.
    homes: std::cell::OnceCell<crate::sensitive::Homes>,
}

impl Sources {
    /// Checks `path` (resolved) against the refused sources and reserves a descriptor for it.
    /// The box opens the resolved path with `RESOLVE_NO_SYMLINKS`, so what it binds is what was
    /// checked here even if a component is swapped for a symlink in between.
    fn add(&mut self, field: SpecField, path: &Path, read_only: bool) -> Result<String, BoxError> {
        self.add_checked(field, path, Some(read_only))
    }

    /// A layer of a writable root (its upper, work, empty lower and template layers): hull's
    /// own directories in a named sandbox's state, which the sensitive-mount list refuses as
    /// bind sources (the state directory holds the keeper's control socket). A layer is never
    /// bound: the overlay shows its contents, which hold no socket, so it is not checked.
    fn add_layer(&mut self, path: &Path) -> Result<String, BoxError> {
        self.add_checked(SpecField::Root, path, None)
    }

    /// Opens `path` as a source; `check`: whether to check it against the sensitive list
    /// (and as read-only), `None` for a writable root's own layer or hull's own source (the
    /// host's resolver file, see `host_resolver`).
    fn add_checked(
        &mut self,
        field: SpecField,
        path: &Path,
        check: Option<bool>,
    ) -> Result<String, BoxError> {
        let canon = std::fs::canonicalize(path).map_err(|e| BoxError::Source {
            field,
            path: path.to_path_buf(),
            errno: sys::Errno(e.raw_os_error().unwrap_or(libc::EIO)),
        })?;
        if let Some(read_only) = check {
            let homes = self.homes.get_or_init(crate::sensitive::Homes::of_host);
            crate::spec::check_source(field, &canon, read_only, homes)?;
        }
        let c = canon.to_string_lossy().into_owned();
        if c.contains('\0') {
            return Err(SpecError::Nul(field).into());
        }
        let fd = SOURCE_FD_BASE + i32::try_from(self.list.len()).unwrap_or(0);
        self.list.push((c, fd));
        Ok(format!("/proc/self/fd/{fd}"))
    }
}

/// The root entries of an image: (name, kind).
#[derive(Clone)]
enum Entry {
    Dir,
    File,
    Link(String),
}

fn classify(path: &Path) -> Option<Entry> {
    let md = std::fs::symlink_metadata(path).ok()?;
    let ft = md.file_type();
    if ft.is_symlink() {
        std::fs::read_link(path)
            .ok()
            .map(|t| Entry::Link(t.to_string_lossy().into_owned()))
    } else if ft.is_dir() {
        Some(Entry::Dir)
    } else if ft.is_file() {
        Some(Entry::File)
    } else {
        None
    }
}

/// With the host's network, a box on an image resolves names as the host does: the host's
/// `/etc/resolv.conf` covers the image's (the host image binds it the same way). The store gives
/// every image the file (`hull_image::resolver`), so there is a mount point; an image whose
/// file is a link, or a caller's own mount there, leaves the image's file as it is; so does a
/// writable root (a named sandbox's: the box owns its `/etc` there).
fn host_resolver(spec: &BoxSpec) -> Option<crate::spec::BindMount> {
    const AT: &str = "/etc/resolv.conf";
    let RootSpec::Dir(dir) = &spec.root else {
        return None;
    };
    // Not in a writable root: its upper layer (the sandbox's own, which the box changes) may
    // hold a link where the image has the file, and a mount point made there would follow it.
    if spec.writable_root.is_some()
        || spec.network != Network::Host
        || spec.mounts.iter().any(|m| is_within(AT, &m.target))
        || !image_has(dir, AT)
    {
        return None;
    }
    // The host image binds the same file; the sensitive list (which refuses /etc as a
    // caller's source) is for what callers ask, not for this one read-only file.
    if !std::fs::metadata(AT).is_ok_and(|m| m.is_file()) {
        return None;
    }
    Some(crate::spec::BindMount {
        source: AT.into(),
        target: AT.into(),
        read_only: true,
    })
}

/// Builds the plan for `spec`. Bind sources are opened by the box itself (`Step::OpenSource`).
pub fn build(spec: &BoxSpec, ctx: &Context<'_>) -> Result<BoxPlan, BoxError> {
    // The host's resolver file joins the mounts, last, as hull's own (not checked as a caller's).
    let with_resolver;
    let (spec, own_mounts) = match host_resolver(spec) {
        Some(m) => {
            let mut s = spec.clone();
            s.mounts.push(m);
            with_resolver = s;
            (&with_resolver, 1)
        }
        None => (spec, 0),
    };
    let mut src = Sources {
        list: Vec::new(),
        homes: std::cell::OnceCell::new(),
    };
    // A writable root's layers are opened first; an image under it is its lower layer, so its
    // entries are not bound one by one.
    let overlay = match &spec.writable_root {
        Some(w) => {
            let lower = match &spec.root {
                RootSpec::Dir(d) => d.as_path(),
                RootSpec::Host => w.empty.as_path(),
            };
            // An image is checked as any root is; the rest are the sandbox's own layers.
            let lower_fd = match &spec.root {
                RootSpec::Dir(_) => src.add(SpecField::Root, lower, true)?,
                RootSpec::Host => src.add_layer(lower)?,
            };
            let layers = [lower_fd, src.add_layer(&w.upper)?, src.add_layer(&w.work)?];
            let mut extra = Vec::new();
            for l in &w.lowers {
                extra.push(src.add_layer(l)?);
            }
            let shown = format!(
                "lower {}{}, upper {}",
                w.lowers
                    .iter()
                    .map(|l| format!("{}:", l.display()))
                    .collect::<String>(),
                lower.display(),
                w.upper.display()
            );
            let merged = w.merged.as_deref().map(|m| src.add_layer(m)).transpose()?;
            // Pid 1 mounts the FUSE file system there itself: at its canonical host path.
            let fuse_at = match (&merged, w.fuse_in_box) {
                (Some(_), true) => src.list.last().map(|(p, _)| p.clone()),
                _ => None,
            };
            let shown = match &w.merged {
                Some(m) => format!("{shown}, merged at {} by fuse-overlayfs", m.display()),
                None => shown,
            };
            Some((layers, extra, shown, merged, fuse_at))
        }
        None => None,
    };
    let root_entries = match (&spec.root, &overlay) {
        (RootSpec::Dir(dir), None) => rootfs_entries(spec, dir, &mut src)?,
        _ => Vec::new(),
    };
    let in_root = spec
        .writable_root
        .as_ref()
        .is_some_and(|w| w.workspace_in_root);
    let ws = if in_root {
        None
    } else {
        Some(src.add(SpecField::Workspace, ctx.workspace, false)?)
    };
    // Host directories the box may write: with a remapped root they become idmapped copies.
    let mut adopt = Vec::new();
    // An image under a writable root is seen through an idmapped copy too, so that its files
    // (host root's, in host root's store) are the box root's to change through the overlay.
    // (Not through fuse-overlayfs: its daemon reads the image, and the box sees its files.)
    if let (Some((_, _, _, None, _)), RootSpec::Dir(_)) = (&overlay, &spec.root) {
        adopt.extend(src.list.first().map(|(_, fd)| (*fd, SpecField::Root)));
    }
    if !ctx.temporary_workspace && !in_root {
        adopt.extend(src.list.last().map(|(_, fd)| (*fd, SpecField::Workspace)));
    }
    let mut mount_src = Vec::new();
    let callers = spec.mounts.len() - own_mounts;
    for (i, m) in spec.mounts.iter().enumerate() {
        mount_src.push(if i < callers {
            src.add(SpecField::Mounts, &m.source, m.read_only)?
        } else {
            src.add_checked(SpecField::Mounts, &m.source, None)?
        });
        adopt.extend(src.list.last().map(|(_, fd)| (*fd, SpecField::Mounts)));
    }
    let mut b = PlanBuilder::start(
        clone_flags(spec),
        ctx.uid,
        ctx.gid,
        ctx.cgroup_procs,
        &src.list,
        ctx.stage,
    );
    if let Some(([lower, upper, work], extra, shown, merged, fuse_at)) = &overlay {
        // As host root the image's lower layer is an idmapped copy (adopted below).
        let attach = match (&spec.root, ctx.remap, merged) {
            (RootSpec::Dir(_), Some(_), None) => src.list.first().map(|(p, fd)| (*fd, p.as_str())),
            _ => None,
        };
        b.overlay_root(
            lower,
            extra,
            upper,
            work,
            shown.clone(),
            attach,
            merged.as_deref(),
        );
        if let Some(at) = fuse_at {
            b.mount_fuse(at);
        }
    }
    if spec.network == Network::Gateway {
        b.open_tun();
    }
    // Top-level names that come from the image (read-only, shared with the host or other boxes).
    let mut image_top: Vec<String> = Vec::new();
    // The image's read-only binds (`/usr`, an image's `/etc`, the host's `/etc/ssl`...): a
    // target inside one covers what the image has there (see `BindBelow`), never makes a path.
    let mut image_binds: Vec<String> = Vec::new();
    match (&spec.root, &overlay) {
        (RootSpec::Host, _) => host_root(&mut b, spec, &mut image_top, &mut image_binds),
        (RootSpec::Dir(dir), None) => {
            dir_root(&mut b, dir, &root_entries, &mut image_top, &mut image_binds);
        }
        // The image is the overlay's lower layer: nothing to bind, and nothing of it refused
        // as a mount target's top either (its directories are writable here).
        (RootSpec::Dir(_), Some(_)) => {}
    }
    for d in OWN_TOP {
        b.mkdir(&format!("/{d}"));
    }

    // Mount points for user tmpfs and binds: inside a writable mount they are made after that
    // mount exists; elsewhere they are made now, in the root tmpfs, before it is sealed.
    // /tmp and /dev/shm are the box's scratch tmpfs unless a bind takes their place (then no
    // mount point is made inside them: that would be in the host directory).
    let bound = |t: &str| spec.mounts.iter().any(|m| m.target == t);
    let mut writable_roots: Vec<String> = ["/tmp", "/dev/shm"]
        .into_iter()
        .filter(|t| !bound(t))
        .map(String::from)
        .collect();
    writable_roots.extend(spec.tmpfs.iter().map(|t| t.target.clone()));
    let mut user_targets: Vec<(&str, bool)> = spec
        .tmpfs
        .iter()
        .map(|t| (t.target.as_str(), true))
        .collect();
    for m in &spec.mounts {
        user_targets.push((m.target.as_str(), m.source.is_dir()));
    }
    let mut late_dirs: Vec<(String, bool)> = Vec::new();
    // Targets inside a host directory (the workspace, another bind): (target, the mount they
    // are below). Their mount points are made by the box once that mount is there, never
    // through a link (`Step::BindBelow`, `Step::TmpfsBelow`): other boxes may write the same
    // directory at the same time.
    let mut below: Vec<(String, String)> = Vec::new();
    for (target, is_dir) in &user_targets {
        let host_dirs = || {
            spec.mounts
                .iter()
                .map(|m| m.target.as_str())
                .chain(std::iter::once("/workspace"))
        };
        let in_host_dir = |t: &str| host_dirs().any(|m| m != t && is_within(t, m));
        // The mount a target lies in: the deepest host directory, or a tmpfs that is itself in
        // one (a tmpfs elsewhere is hull's own, fresh: its mount points are made by path).
        let under = host_dirs()
            .chain(
                spec.tmpfs
                    .iter()
                    .map(|t| t.target.as_str())
                    .filter(|t| in_host_dir(t)),
            )
            .filter(|m| *m != *target && is_within(target, m))
            .max_by_key(|m| m.len());
        if let Some(under) = under {
            if under == "/workspace" && in_root {
                return Err(SpecError::TargetRefused { field: SpecField::Mounts, target: (*target).to_string(), why: "this sandbox's /workspace is part of its writable root; mount at a new top-level path such as /data".into() }.into());
            }
            below.push(((*target).to_string(), under.to_string()));
            continue;
        }
        if let Some(m) = image_binds
            .iter()
            .filter(|m| *m != target && is_within(target, m))
            .max_by_key(|m| m.len())
        {
            let image = match &spec.root {
                RootSpec::Dir(dir) => dir.as_path(),
                RootSpec::Host => Path::new("/"),
            };
            if !image_has(image, target) {
                return Err(SpecError::TargetRefused { field: SpecField::Mounts, target: (*target).to_string(), why: format!("the image has no {target} (or a symbolic link on the way), and {m} is the image's, read-only and shared: a mount may cover a file or directory the image has; mount at a new top-level path such as /data otherwise") }.into());
            }
            below.push(((*target).to_string(), m.clone()));
            continue;
        }
        let top = target.split('/').nth(1).unwrap_or("");
        // The host image's /etc is hull's own directory: a file or directory may be added to it
        // (server images read their configuration there), but not over hull's own files.
        let hull_etc = matches!(spec.root, RootSpec::Host) && top == "etc";
        if hull_etc {
            if let Some(own) = HULL_ETC_FILES
                .iter()
                .find(|f| is_within(target, &format!("/etc/{f}")))
            {
                return Err(SpecError::TargetRefused { field: SpecField::Mounts, target: (*target).to_string(), why: format!("hull writes /etc/{own} itself; mount the file elsewhere and point the program at it") }.into());
            }
        } else if image_top.iter().any(|t| t == top) {
            return Err(SpecError::TargetRefused {
                field: SpecField::Mounts,
                target: (*target).to_string(),
                why: format!("/{top} comes from the image, which is read-only and shared; mount at a new top-level path such as /data or /mnt/x"),
            }
            .into());
        }
        let inside_writable = writable_roots
            .iter()
            .any(|w| w != target && is_within(target, w));
        let chain = ancestors(target);
        if inside_writable {
            late_dirs.push(((*target).to_string(), *is_dir));
        } else if overlay.is_some() {
            // A writable root (a named sandbox's disk) is the box's to change between starts:
            // a link it planted on the way must not steer the mount point out of it, so the
            // point is made and opened below the root as inside a host directory.
            below.push(((*target).to_string(), "/".to_string()));
        } else {
            for a in &chain {
                b.mkdir(a);
            }
            if *is_dir {
                b.mkdir(target);
            } else {
                b.touch(target);
            }
        }
    }
    dev_skeleton(&mut b);

    let mut w = b.seal();
    if overlay.is_some() {
        w.root_writable();
    }
    if !bound("/tmp") {
        w.tmpfs("/tmp", spec.tmp_size, 0o1777);
    }
    if !bound("/dev/shm") {
        w.tmpfs("/dev/shm", spec.shm_size, 0o1777);
    }
    w.devpts("/dev/pts");
    if let Some(ws) = &ws {
        w.bind(
            ws,
            &ctx.workspace.display().to_string(),
            "/workspace",
            false,
        );
    }
    // Shallow targets first, so a tmpfs at /data exists before a bind at /data/x... (validation
    // already refused a tmpfs covering a bind, and binds nested in binds).
    let mut order: Vec<usize> = (0..user_targets.len()).collect();
    order.sort_by_key(|&i| user_targets[i].0.matches('/').count());
    for i in order {
        let (target, is_dir) = user_targets[i];
        if let Some((_, under)) = below.iter().find(|(t, _)| t == target) {
            if let Some(t) = spec.tmpfs.iter().find(|t| t.target == target) {
                w.tmpfs_below(under, &t.target, t.size, 0o1777);
            } else if let Some(idx) = spec.mounts.iter().position(|m| m.target == target) {
                let m = &spec.mounts[idx];
                w.bind_below(
                    &mount_src[idx],
                    &m.source.display().to_string(),
                    under,
                    &m.target,
                    is_dir,
                    m.read_only,
                );
            }
            continue;
        }
        if let Some((_, _)) = late_dirs.iter().find(|(t, _)| t == target) {
            for a in ancestors(target) {
                if writable_roots.iter().any(|w| is_within(&a, w) && a != *w) {
                    w.mkdir(&a);
                }
            }
            if is_dir {
                w.mkdir(target);
            } else {
                w.touch(target);
            }
        }
        if let Some(t) = spec.tmpfs.iter().find(|t| t.target == target) {
            w.tmpfs(&t.target, t.size, 0o1777);
        } else if let Some(m) = spec.mounts.iter().find(|m| m.target == target) {
            let idx = spec
                .mounts
                .iter()
                .position(|x| x.target == target)
                .unwrap_or(0);
            w.bind(
                &mount_src[idx],
                &m.source.display().to_string(),
                &m.target,
                m.read_only,
            );
        }
    }
    w.proc();

    let mut p = w.pivot();
    p.hostname(&spec.hostname);
    if spec.network != Network::Host {
        p.loopback_up();
    }
    if spec.network == Network::Gateway {
        p.tap();
    }
    if let Some(u) = spec.user.as_ref().filter(|_| ctx.temporary_workspace) {
        p.give("/workspace", u.uid, u.gid);
    }
    p.chdir(&spec.cwd);
    let env = box_env(spec);
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(BOX_PATH.to_string(), |(_, v)| v.clone());
    let mut plan = p.finish(
        ctx.keep_caps,
        ctx.seccomp_rules,
        ctx.listener,
        &spec.argv,
        &env,
        &path_var,
    );
    if let Some(r) = ctx.remap {
        plan.remap_root(r.uid, r.gid, r.count, &adopt);
    }
    Ok(plan)
}

/// The `host` image's `/etc/passwd` and `/etc/group` (the host's own are not shown to a box):
/// root and nobody. A front end resolves `--user` against these for that image.
pub const HOST_PASSWD: &str =
    "root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
pub const HOST_GROUP: &str = "root:x:0:\nnogroup:x:65534:\n";

/// The proper ancestors of an absolute path, shallowest first (`/a/b/c` -> `/a`, `/a/b`).
fn ancestors(path: &str) -> Vec<String> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    (1..parts.len())
        .map(|n| format!("/{}", parts[..n].join("/")))
        .collect()
}

/// What the host offers for the `host` image: each of [`HOST_DIRS`] and [`HOST_ETC`] that exists,
/// by absolute path. Looked up once per process: the ~35 lookups cost more than the rest of the
/// plan, and the host's system directories do not change shape under a running hull.
fn host_layout() -> &'static [(String, Entry)] {
    static LAYOUT: std::sync::OnceLock<Vec<(String, Entry)>> = std::sync::OnceLock::new();
    LAYOUT.get_or_init(|| {
        let dirs = HOST_DIRS.iter().map(|n| format!("/{n}"));
        let etc = HOST_ETC.iter().map(|n| format!("/etc/{n}"));
        dirs.chain(etc)
            .filter_map(|p| classify(Path::new(&p)).map(|e| (p, e)))
            .collect()
    })
}

/// The files hull writes into the `host` image's /etc (a mount may not cover them).
const HULL_ETC_FILES: &[&str] = &[
    "passwd",
    "group",
    "hostname",
    "hosts",
    "nsswitch.conf",
    "resolv.conf",
];

/// Whether `target` (absolute in the box) is in `image` (its root on the host) with no symbolic
/// link on the way.
fn image_has(image: &Path, target: &str) -> bool {
    let mut at = image.to_path_buf();
    for part in target.split('/').filter(|p| !p.is_empty()) {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(md) if !md.file_type().is_symlink() => {}
            _ => return false,
        }
    }
    true
}

fn host_root(
    b: &mut PlanBuilder<Skeleton>,
    spec: &BoxSpec,
    image_top: &mut Vec<String>,
    image_binds: &mut Vec<String>,
) {
    let layout = host_layout();
    let mut etc_made = false;
    for (host, entry) in layout {
        let in_etc = host.starts_with("/etc/");
        if in_etc && !etc_made {
            image_top.push("etc".into());
            b.mkdir("/etc");
            etc_made = true;
        }
        match entry {
            Entry::Link(t) => b.symlink(t, host),
            Entry::Dir => {
                b.mkdir(host);
                // Top-level system directories must be there; an /etc entry may vanish.
                b.bind_host(host, host, host, in_etc);
                image_binds.push(host.clone());
            }
            Entry::File if in_etc => {
                b.touch(host);
                b.bind_host(host, host, host, true);
                image_binds.push(host.clone());
            }
            Entry::File => continue,
        }
        if !in_etc {
            image_top.push(host.trim_start_matches('/').to_string());
        }
    }
    if !etc_made {
        image_top.push("etc".into());
        b.mkdir("/etc");
    }
    let host_name = &spec.hostname;
    b.write_file("/etc/passwd", HOST_PASSWD.as_bytes().to_vec());
    b.write_file("/etc/group", HOST_GROUP.as_bytes().to_vec());
    b.write_file("/etc/hostname", format!("{host_name}\n").into_bytes());
    b.write_file(
        "/etc/hosts",
        format!("127.0.0.1\tlocalhost {host_name}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
            .into_bytes(),
    );
    b.write_file("/etc/nsswitch.conf", b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n".to_vec());
    if spec.network == Network::Host && Path::new("/etc/resolv.conf").exists() {
        b.touch("/etc/resolv.conf");
        b.bind_host(
            "/etc/resolv.conf",
            "/etc/resolv.conf",
            "/etc/resolv.conf",
            true,
        );
    } else if spec.network == Network::Gateway {
        b.write_file("/etc/resolv.conf", crate::tap::RESOLV_CONF.to_vec());
    } else {
        b.write_file("/etc/resolv.conf", b"# no network in this box\n".to_vec());
    }
}

/// How one top-level entry of an image root enters the box.
enum RootEntry {
    Link(String),
    /// An empty directory recreated in the box's own root (a user mount goes below it).
    EmptyDir,
    /// A directory or file bound read-only from its own descriptor source.
    Dir(String),
    File(String),
}

/// Classifies the image root's top-level entries, reserving a descriptor for each bound one: the
/// box opens each entry itself without following symlinks, so an entry swapped for a symlink
/// after this look cannot redirect its bind.
fn rootfs_entries(
    spec: &BoxSpec,
    dir: &Path,
    src: &mut Sources,
) -> Result<Vec<(String, RootEntry)>, BoxError> {
    let entries = std::fs::read_dir(dir).map_err(|e| BoxError::Io {
        what: format!("read the image root {}", dir.display()),
        error: e,
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        if OWN_TOP.contains(&name.as_str()) || name.contains('\0') {
            continue;
        }
        let host = dir.join(&name);
        let boxed = format!("/{name}");
        let wanted_empty = spec
            .tmpfs
            .iter()
            .map(|t| &t.target)
            .chain(spec.mounts.iter().map(|m| &m.target))
            .any(|t| is_within(t, &boxed));
        let entry = match classify(&host) {
            Some(Entry::Link(t)) => RootEntry::Link(t),
            Some(Entry::Dir) => {
                let empty = std::fs::read_dir(&host)
                    .map(|mut d| d.next().is_none())
                    .unwrap_or(false);
                if wanted_empty && empty {
                    RootEntry::EmptyDir
                } else {
                    RootEntry::Dir(src.add(SpecField::Root, &host, true)?)
                }
            }
            Some(Entry::File) => RootEntry::File(src.add(SpecField::Root, &host, true)?),
            None => continue,
        };
        out.push((name, entry));
    }
    Ok(out)
}

fn dir_root(
    b: &mut PlanBuilder<Skeleton>,
    dir: &Path,
    entries: &[(String, RootEntry)],
    image_top: &mut Vec<String>,
    image_binds: &mut Vec<String>,
) {
    for (name, entry) in entries {
        let boxed = format!("/{name}");
        let shown = dir.join(name).display().to_string();
        match entry {
            RootEntry::Link(t) => b.symlink(t, &boxed),
            RootEntry::EmptyDir => {
                // Ours, not the image's: user mount points may be made below it.
                b.mkdir(&boxed);
                continue;
            }
            RootEntry::Dir(fd) => {
                b.mkdir(&boxed);
                b.bind_host(fd, &shown, &boxed, false);
                image_binds.push(boxed.clone());
            }
            RootEntry::File(fd) => {
                b.touch(&boxed);
                b.bind_host(fd, &shown, &boxed, false);
            }
        }
        image_top.push(name.clone());
    }
}

/// A minimal /dev: a small tmpfs with the harmless character devices bound from the host.
fn dev_skeleton(b: &mut PlanBuilder<Skeleton>) {
    b.tmpfs("/dev", 64 << 10, 0o755);
    for d in ["null", "zero", "full", "random", "urandom", "tty"] {
        let p = format!("/dev/{d}");
        b.touch(&p);
        b.bind_host(&p, &p, &p, false);
    }
    b.mkdir("/dev/pts");
    b.mkdir("/dev/shm");
    b.symlink("pts/ptmx", "/dev/ptmx");
    b.symlink("/proc/self/fd", "/dev/fd");
    b.symlink("/proc/self/fd/0", "/dev/stdin");
    b.symlink("/proc/self/fd/1", "/dev/stdout");
    b.symlink("/proc/self/fd/2", "/dev/stderr");
}

/// The box's environment: a clean default, never the caller's, plus what `--env` gives.
pub fn box_env(spec: &BoxSpec) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), BOX_PATH.into()),
        ("HOME".into(), "/tmp".into()),
        ("USER".into(), "root".into()),
        ("LOGNAME".into(), "root".into()),
        ("HOSTNAME".into(), spec.hostname.clone()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TERM".into(), "dumb".into()),
        // libuv (node) would try io_uring, which the filter treats as an escape primitive.
        ("UV_USE_IO_URING".into(), "0".into()),
    ];
    for (k, v) in &spec.env {
        if let Some(slot) = env.iter_mut().find(|(ek, _)| ek == k) {
            slot.1 = v.clone();
        } else {
            env.push((k.clone(), v.clone()));
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_are_shallow_first() {
        assert_eq!(ancestors("/a/b/c"), vec!["/a", "/a/b"]);
        assert!(ancestors("/a").is_empty());
    }

    #[test]
    fn user_env_overrides_defaults() {
        let mut s = BoxSpec::new(vec!["true".into()]);
        s.env.push(("HOME".into(), "/workspace".into()));
        s.env.push(("X".into(), "1".into()));
        let env = box_env(&s);
        assert!(env.contains(&("HOME".into(), "/workspace".into())));
        assert!(env.contains(&("X".into(), "1".into())));
        assert!(!env.iter().any(|(k, _)| k == "SSH_AUTH_SOCK"));
    }

    /// The gateway network's TAP: the device opened before host root's box becomes its own
    /// root (with host root's rights on a 0600 node) and before any mount, the TAP made after
    /// `lo` and before the capabilities drop; entering a template, it waits for the gateway
    /// instead (the pool made its TAP).
    #[test]
    fn a_gateway_plan_opens_the_device_early_and_makes_the_tap_before_dropping_caps() {
        use crate::plan::Step;
        let d = tempfile::tempdir().unwrap();
        let ctx = Context {
            uid: 0,
            gid: 0,
            cgroup_procs: &[],
            workspace: d.path(),
            seccomp_rules: 1,
            listener: true,
            keep_caps: 0,
            stage: "/tmp/hull-tmpl-x",
            remap: Some(Remap {
                uid: 2_000_000,
                gid: 2_000_000,
                count: 1,
            }),
            temporary_workspace: true,
        };
        let mut spec = BoxSpec::new(vec!["true".into()]);
        spec.network = Network::Gateway;
        let plan = build(&spec, &ctx).unwrap();
        assert_ne!(plan.clone_flags & libc::CLONE_NEWNET, 0);
        let names: Vec<&str> = plan.steps.iter().map(Step::name).collect();
        let at = |name: &str| {
            names
                .iter()
                .position(|n| *n == name)
                .unwrap_or_else(|| panic!("{name} missing: {names:?}"))
        };
        assert!(at("open bind source") < at("open /dev/net/tun"));
        assert!(at("open /dev/net/tun") < at("become root of the box's user namespace"));
        assert!(at("open /dev/net/tun") < at("make mounts private"));
        assert!(at("bring up loopback") < at("make the gateway network's TAP and hand it over"));
        assert!(at("make the gateway network's TAP and hand it over") < at("drop capabilities"));
        assert!(
            plan.to_string().contains("default route via 10.0.2.2"),
            "{plan}"
        );
        assert!(plan.steps.iter().any(|s| matches!(
            s,
            Step::WriteFile { path, data } if path.shown == "/etc/resolv.conf" && data == b"nameserver 10.0.2.2\n"
        )));
        // Entering a template (with a network namespace and TAP its pool made), the box opens
        // no device and waits for the gateway instead of making the TAP.
        let (_, entry) = plan.split_template().map_err(|_| "not split").unwrap();
        let entered = entry.enter(&crate::split::TemplateFds {
            user: 905,
            host: 906,
            root: 907,
            net: Some(908),
            own: None,
        });
        let shown = crate::split::LaunchPlan::Templated(entered.clone()).to_string();
        assert!(!shown.contains("/dev/net/tun"), "{shown}");
        assert!(entered.pid1.contains(&Step::AwaitGateway), "{shown}");
        assert!(
            !entered
                .pid1
                .iter()
                .any(|s| matches!(s, Step::Tap { .. } | Step::LoopbackUp)),
            "{shown}"
        );
        // No other network has either step.
        for network in [Network::None, Network::Host] {
            spec.network = network;
            let plan = build(&spec, &ctx).unwrap();
            assert!(!plan
                .steps
                .iter()
                .any(|s| matches!(s, Step::OpenTun { .. } | Step::Tap { .. })));
        }
    }

    #[test]
    fn a_host_skeleton_splits_into_a_template_and_a_rootfs_one_does_not() {
        use crate::plan::Step;
        use crate::split::{EntryStep, Steps, TemplateFds};
        let d = tempfile::tempdir().unwrap();
        let ctx = Context {
            uid: 0,
            gid: 0,
            cgroup_procs: &[],
            workspace: d.path(),
            seccomp_rules: 1,
            listener: true,
            keep_caps: 0,
            stage: "/tmp/hull-tmpl-x",
            remap: None,
            temporary_workspace: true,
        };
        // Sub-ids replace the box's own id maps with a wait for the supervisor's helpers, and
        // such a box is built whole (a template's user namespace maps one id).
        let mut sub = build(&BoxSpec::new(vec!["true".into()]), &ctx).unwrap();
        let range = crate::subids::IdRange {
            own: 0,
            start: 100_000,
            count: 65536,
        };
        sub.use_subids(range.clone(), range);
        assert!(
            sub.steps
                .iter()
                .any(|s| matches!(s, Step::AwaitIdMaps { .. }))
                && !sub.steps.iter().any(|s| matches!(s, Step::MapIds { .. }))
        );
        assert!(
            sub.to_string().contains("1-65536 -> 100000-165535"),
            "{sub}"
        );
        assert!(sub.split_template().is_err());
        let plan = build(&BoxSpec::new(vec!["true".into()]), &ctx).unwrap();
        let (template, entry) = plan.split_template().map_err(|_| "not split").unwrap();
        let fds = TemplateFds {
            user: 905,
            host: 906,
            root: 907,
            net: None,
            own: None,
        };
        let boxed = entry.clone().enter(&fds);
        let kinds = |p: &dyn Steps| {
            (0..)
                .map_while(|i| p.step(i).map(|s| s.name()))
                .collect::<Vec<_>>()
        };
        let t = kinds(&template);
        assert_eq!(t.first(), Some(&"tie the box to its supervisor"));
        assert_eq!(t.last(), Some(&"hold the template"));
        assert!(
            t.contains(&"make root read-only") && t.contains(&"bind mount"),
            "{t:?}"
        );
        assert!(
            !t.contains(&"open bind source") && !t.contains(&"clone bind source"),
            "{t:?}"
        );
        // The template mounts a procfs of its own (so boxes may mount theirs), then pivots.
        let tat = |name: &str| {
            t.iter()
                .position(|n| *n == name)
                .unwrap_or_else(|| panic!("{name} missing: {t:?}"))
        };
        assert!(
            tat("make root read-only") < tat("mount proc")
                && tat("mount proc") < tat("pivot the template into its root")
        );
        let b = kinds(&boxed);
        let at = |name: &str| {
            b.iter()
                .position(|n| *n == name)
                .unwrap_or_else(|| panic!("{name} missing: {b:?}"))
        };
        // Sources are cloned where the host's paths are, before the box enters the sealed root.
        assert!(at("join the template's namespaces") < at("clone bind source"));
        assert!(at("clone bind source") < at("enter the template's root"));
        assert!(at("enter the template's root") < at("fork pid 1"));
        assert!(
            at("fork pid 1") < at("attach bind source")
                && at("attach bind source") < at("mount proc")
        );
        assert!(
            !b.contains(&"pivot root")
                && !b.contains(&"bind mount")
                && !b.contains(&"open bind source"),
            "{b:?}"
        );
        // The root is in place: the box's paths carry no staging prefix.
        let shown = boxed.to_string();
        assert!(!shown.contains("/tmp/hull-tmpl-x"), "{shown}");
        assert!(boxed.pid1.iter().all(|s| match s {
            Step::Tmpfs { target, .. }
            | Step::Proc { target }
            | Step::AttachSource { target, .. } =>
                !target.c.to_bytes().starts_with(b"/tmp/hull-tmpl-x"),
            _ => true,
        }));
        assert!(!b.contains(&"make root read-only"), "{b:?}");
        // The template's descriptors are in the steps that use them, and nothing else is left
        // to fill in; a pooled network namespace (loopback up) replaces the box's loopback step.
        assert!(boxed.entry.iter().any(|s| matches!(
            s,
            EntryStep::JoinTemplate {
                user_fd: 905,
                mnt_fd: 906,
                ..
            }
        )));
        assert!(boxed.entry.iter().any(|s| matches!(
            s,
            EntryStep::EnterTemplate {
                mnt_fd: 907,
                net_fd: None,
                own_fds: None,
                ..
            }
        )));
        assert!(b.contains(&"bring up loopback"), "{b:?}");
        assert!(entry.can_share_pooled_net());
        let pooled = entry.enter(&TemplateFds {
            net: Some(908),
            own: Some([909, 910, 911]),
            ..fds
        });
        assert!(pooled.entry.iter().any(|s| matches!(
            s,
            EntryStep::EnterTemplate {
                net_fd: Some(908),
                own_fds: Some([909, 910, 911]),
                ..
            }
        )));
        assert!(!pooled.pid1.iter().any(|s| matches!(s, Step::LoopbackUp)));
        // The same spec gives the same template key; another hostname another.
        let again = build(&BoxSpec::new(vec!["true".into()]), &ctx)
            .unwrap()
            .split_template()
            .map_err(|_| "not split")
            .unwrap()
            .0;
        assert_eq!(template.template_key(), again.template_key());
        let mut other = BoxSpec::new(vec!["true".into()]);
        other.hostname = "other".into();
        let other = build(&other, &ctx)
            .unwrap()
            .split_template()
            .map_err(|_| "not split")
            .unwrap()
            .0;
        assert_ne!(template.template_key(), other.template_key());
        // A --rootfs skeleton binds descriptors the box opens itself: not shareable.
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("bin")).unwrap();
        let mut s = BoxSpec::new(vec!["true".into()]);
        s.root = RootSpec::Dir(root.path().to_path_buf());
        assert!(build(&s, &ctx).unwrap().split_template().is_err());
    }

    #[test]
    fn targets_inside_the_image_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut s = BoxSpec::new(vec!["true".into()]);
        s.mounts.push(crate::spec::BindMount {
            source: d.path().into(),
            target: "/usr/data".into(),
            read_only: true,
        });
        let ctx = Context {
            uid: 0,
            gid: 0,
            cgroup_procs: &[],
            workspace: d.path(),
            seccomp_rules: 1,
            listener: true,
            keep_caps: 0,
            stage: crate::plan::STAGE,
            remap: None,
            temporary_workspace: true,
        };
        let err = build(&s, &ctx).expect_err("refused").to_string();
        assert!(err.contains("/usr/data") && err.contains("image"), "{err}");
    }
}
