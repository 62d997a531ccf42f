//! The fuse-overlayfs fallback of a sandbox's writable root: where the kernel refuses overlayfs
//! in a user namespace (before 5.11), or when `HULL_OVERLAY=fuse` asks for it.
//!
//! Host root: the keeper takes a mount namespace of its own, mounts a FUSE file system at
//! `<state>/merged` through a `/dev/fuse` descriptor it opened (a FUSE descriptor serves only
//! mounts of the user namespace that opened it, so the box cannot use one of ours itself),
//! and starts `fuse-overlayfs` on that descriptor (`/dev/fd/N`) as the box root's host ids (hull's
//! range, never host root), with the layers as descriptors it inherits (`/proc/self/fd/N`: the
//! state directory is host root's 0700, which those ids cannot enter). The box binds the merged
//! directory as its root (hull-box's `WritableRoot::merged`). The mount lives in the keeper's
//! namespace and the box's copy of it, so it is gone with them; the daemon is the keeper's child,
//! killed at stop and by its death signal when the keeper dies (a SIGKILLed one included), and
//! the next keeper sweeps a dead one's stage.
//!
//! Rootless ([`prepare_in_box`], [`serve_in_box`]): a FUSE mount is usable only from the user
//! namespace that owns it and its children, and the keeper can own none above the box's; so the
//! box's pid 1 mounts it in its own namespaces and sends the `/dev/fuse` descriptor, and the
//! keeper starts the daemon on it joined to the box's user namespace (see `docs/named.md`).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

/// How a sandbox's writable root is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlay {
    /// overlayfs, mounted by the box in its user namespace (kernels 5.11+).
    Kernel,
    /// fuse-overlayfs, run by the keeper.
    Fuse,
}

impl Overlay {
    pub fn name(self) -> &'static str {
        match self {
            Overlay::Kernel => "overlayfs (kernel, in the box's user namespace)",
            Overlay::Fuse => "fuse-overlayfs",
        }
    }
}

/// Whether this kernel mounts overlayfs in a user namespace (5.11 and later).
pub fn kernel_allows_userns_overlay() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    (nums.next().unwrap_or(0), nums.next().unwrap_or(0)) >= (5, 11)
}

/// The mode in use: `HULL_OVERLAY` (`fuse` or `kernel`) when set, else the kernel's overlayfs
/// where it works in a user namespace and fuse-overlayfs where not; `Err` names a bad value.
pub fn mode() -> Result<Overlay, String> {
    match std::env::var("HULL_OVERLAY").ok().as_deref() {
        Some("fuse") => Ok(Overlay::Fuse),
        Some("kernel") => Ok(Overlay::Kernel),
        None | Some("") => Ok(if kernel_allows_userns_overlay() {
            Overlay::Kernel
        } else {
            Overlay::Fuse
        }),
        Some(other) => Err(format!(
            "HULL_OVERLAY `{other}`: expected `fuse` or `kernel` (or unset: the kernel's overlayfs where it works in a user namespace)"
        )),
    }
}

/// The running daemon, killed at stop.
static DAEMON: Mutex<Option<Child>> = Mutex::new(None);
/// The stage of the layers' binds, removed at stop.
static STAGE: Mutex<Option<PathBuf>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Ends the daemon and removes the stage (the keeper's stop).
pub fn stop() {
    if let Some(mut c) = lock(&DAEMON).take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    if let Some(stage) = lock(&STAGE).take() {
        if let Ok(rd) = std::fs::read_dir(&stage) {
            for e in rd.flatten() {
                if let Ok(p) = CString::new(e.path().display().to_string()) {
                    let _ = crate::sys::detach(&p);
                }
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(&stage);
    }
}

/// Removes the stages of keepers that are gone (a SIGKILLed keeper's: empty directories on the
/// host, where the binds lived only in its mount namespace).
fn sweep_stages() {
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hull-fuse-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // A live process (not a zombie, which a SIGKILLed keeper may be until it is reaped).
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        if !stat.is_empty() && !state.starts_with('Z') {
            continue;
        }
        // Only a real directory of host root's (never what another user put in the shared
        // temporary directory: a symlink there would have root empty directories anywhere).
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.file_type().is_dir() && m.uid() == 0
        });
        if !ours {
            continue;
        }
        // Directories only, and only empty ones: nothing of a sandbox is ever removed here
        // (rmdir of an entry that is a symlink fails: it is not followed).
        if let Ok(inner) = std::fs::read_dir(e.path()) {
            for d in inner.flatten() {
                let _ = std::fs::remove_dir(d.path());
            }
        }
        let _ = std::fs::remove_dir(e.path());
    }
}

/// Whether this user may open `/dev/fuse` (a rootless keeper's box opens it as the caller).
pub fn dev_fuse_openable() -> std::io::Result<()> {
    File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
}

/// Rootless: the box's pid 1 mounts the FUSE file system at `state/merged` itself, in its own
/// user and mount namespaces (hull-box's `WritableRoot::fuse_in_box`), and [`serve_in_box`]
/// starts the daemon on the descriptor it sends. A rootless keeper cannot mount it for the
/// box: mounting needs a user namespace of its own, whose FUSE connection the box (in a user
/// namespace that is not a child of it) could not use.
pub fn prepare_in_box(state: &Path, w: &mut hull_box::WritableRoot) -> Result<(), String> {
    dev_fuse_openable().map_err(|e| {
        format!(
            "fuse-overlayfs rootless: open /dev/fuse: {e} (distributions ship it 0666, and the kernel allows FUSE mounts in a user namespace: `chmod 0666 /dev/fuse` as root, as scripts/setup.sh does; or a kernel 5.11 or newer, whose overlayfs works in a user namespace)"
        )
    })?;
    let merged = state.join("merged");
    match std::fs::create_dir(&merged) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("create {}: {e}", merged.display())),
    }
    w.merged = Some(merged);
    w.fuse_in_box = true;
    Ok(())
}

/// Host root with a `--user`: as rootless, the box's pid 1 mounts FUSE in its own namespaces
/// and the daemon runs joined to the box's user namespace, as its root, so it can give what it
/// makes to any id the box maps (the keeper-mounted daemon of [`mount`] runs as the box root's
/// one host id and could not); the layers and the mount point are staged (in a mount namespace of
/// the keeper's own) where the box root's host ids can reach them. Must run before the process
/// starts a thread.
pub fn prepare_in_box_staged(
    state: &Path,
    w: &mut hull_box::WritableRoot,
    image: Option<&Path>,
) -> Result<Staged, String> {
    prepare_in_box(state, w)?;
    crate::sys::private_mount_namespace()
        .map_err(|e| format!("a mount namespace for fuse-overlayfs: {e}"))?;
    let staged = stage(state, w, image)?;
    w.merged = Some(staged.state_at.join("merged"));
    Ok(staged)
}

/// Starts `fuse-overlayfs -f` on `dev`, the `/dev/fuse` descriptor of the mount the box's
/// pid 1 made, in the box's user namespace (`ns`) (root there: it creates files as the requests' ids, which
/// that namespace maps, as the kernel's overlay would), with the keeper's mount namespace (the
/// state directory and the layers are the caller's, reachable by path).
pub fn serve_in_box(
    ns: std::os::fd::OwnedFd,
    dev: std::os::fd::OwnedFd,
    w: &hull_box::WritableRoot,
    image: Option<&Path>,
    staged: Option<&Staged>,
) -> std::io::Result<()> {
    let (lowers, upper, work) = match staged {
        Some(st) => (st.lowers.clone(), st.upper.clone(), st.work.clone()),
        None => {
            let mut lowers: Vec<String> =
                w.lowers.iter().map(|l| l.display().to_string()).collect();
            lowers.push(image.unwrap_or(&w.empty).display().to_string());
            (
                lowers,
                w.upper.display().to_string(),
                w.work.display().to_string(),
            )
        }
    };
    // Inherited across the exec (a dup is not close-on-exec).
    let fuse_fd = rustix::io::dup(&dev)?;
    let mut cmd = Command::new("fuse-overlayfs");
    crate::sys::join_user_namespace(&mut cmd, ns);
    // It must not outlive the keeper (a SIGKILLed one included): the box goes with it.
    crate::sys::die_with_parent(&mut cmd);
    cmd.arg("-f")
        .arg("-o")
        .arg(format!(
            "lowerdir={},upperdir={upper},workdir={work}",
            lowers.join(":"),
        ))
        .arg(format!("/dev/fd/{}", fuse_fd.as_raw_fd()))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            std::io::Error::new(
                e.kind(),
                "fuse-overlayfs is not installed (apt-get install fuse-overlayfs)",
            )
        } else {
            e
        }
    })?;
    // Only the daemon holds the device now: if it dies, the box's root answers ENOTCONN.
    drop((fuse_fd, dev));
    *lock(&DAEMON) = Some(child);
    Ok(())
}

/// The layers' paths as a process of the box root's host ids can resolve them (host root: the
/// state directory is host root's, under the sandboxes' directory, 0700).
#[derive(Debug)]
pub struct Staged {
    /// The lower layers, top first, the image last.
    lowers: Vec<String>,
    upper: String,
    work: String,
    /// The state directory, bound under the stage.
    state_at: PathBuf,
}

/// Binds `w`'s layers and the state directory under a stage of this keeper's (in its own mount
/// namespace, which the caller has taken), so the box root's ids may resolve them.
fn stage(state: &Path, w: &hull_box::WritableRoot, image: Option<&Path>) -> Result<Staged, String> {
    let c = |s: &str| CString::new(s).map_err(|_| format!("a NUL in {s:?}"));
    // The daemon runs as the box root's ids, which cannot enter the state directory (host
    // root's, 0700), and it resolves its layers' paths: each is bound, in this mount namespace
    // only, under a stage of its own it may traverse (empty directories on the host).
    sweep_stages();
    let stage = std::env::temp_dir().join(format!("hull-fuse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&stage);
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o755)
        .create(&stage)
        .map_err(|e| format!("create {}: {e}", stage.display()))?;
    *lock(&STAGE) = Some(stage.clone());
    let bound = |from: &Path, name: &str| -> Result<String, String> {
        let to = stage.join(name);
        std::fs::create_dir(&to).map_err(|e| format!("create {}: {e}", to.display()))?;
        crate::sys::bind(
            &c(&from.display().to_string())?,
            &c(&to.display().to_string())?,
        )
        .map_err(|e| format!("bind {} at {}: {e}", from.display(), to.display()))?;
        Ok(to.display().to_string())
    };
    let mut lowers = Vec::new();
    for (i, l) in w.lowers.iter().enumerate() {
        lowers.push(bound(l, &format!("l{i}"))?);
    }
    lowers.push(bound(image.unwrap_or(&w.empty), "image")?);
    // The upper and work directories on one mount (fuse-overlayfs renames from one into the
    // other): the state directory, which the daemon's ids may traverse (0711; the sandboxes'
    // directory above it stays closed to them on the host).
    let own = |p: &Path| {
        p.file_name()
            .map(PathBuf::from)
            .ok_or_else(|| format!("{} has no name", p.display()))
    };
    let (upper_name, work_name) = (own(&w.upper)?, own(&w.work)?);
    if w.upper.parent() != Some(state) || w.work.parent() != Some(state) {
        return Err(
            "fuse-overlayfs: the upper and work directories must be in the state directory".into(),
        );
    }
    std::fs::set_permissions(state, std::os::unix::fs::PermissionsExt::from_mode(0o711))
        .map_err(|e| format!("chmod {}: {e}", state.display()))?;
    let state_at = PathBuf::from(bound(state, "state")?);
    Ok(Staged {
        lowers,
        upper: state_at.join(upper_name).display().to_string(),
        work: state_at.join(work_name).display().to_string(),
        state_at,
    })
}

/// Merges `w`'s layers over `image` (the lowest layer; None: the `host` image's empty one) with
/// fuse-overlayfs at `state/merged`, in a mount namespace of this process's own; the merged
/// directory. Host root only; must run before the process starts a thread.
pub fn mount(
    state: &Path,
    w: &hull_box::WritableRoot,
    image: Option<&Path>,
) -> Result<PathBuf, String> {
    let Some((uid, gid)) = hull_box::remap::box_root() else {
        return Err("fuse-overlayfs mounted by the keeper is host root's (rootless: the box mounts it, see prepare_in_box)".into());
    };
    let c = |s: &str| CString::new(s).map_err(|_| format!("a NUL in {s:?}"));
    crate::sys::private_mount_namespace()
        .map_err(|e| format!("a mount namespace for fuse-overlayfs: {e}"))?;
    let merged = state.join("merged");
    match std::fs::create_dir(&merged) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("create {}: {e}", merged.display())),
    }
    let dev = File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("open /dev/fuse: {e}"))?;
    let opts = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid},allow_other,default_permissions",
        dev.as_raw_fd()
    );
    let target = c(&merged.display().to_string())?;
    crate::sys::mount_fuse(
        &target,
        c"fuse-overlayfs",
        c"fuse.fuse-overlayfs",
        &c(&opts)?,
    )
    .map_err(|e| format!("mount FUSE at {}: {e}", merged.display()))?;
    let staged = stage(state, w, image)?;
    let (upper, work) = (&staged.upper, &staged.work);
    let lowers = &staged.lowers;
    let fuse_fd = rustix::io::dup(&dev).map_err(|e| format!("dup /dev/fuse: {e}"))?;
    let fuse_name = format!("/dev/fd/{}", fuse_fd.as_raw_fd());
    let mut cmd = Command::new("fuse-overlayfs");
    // It holds the keeper's mount namespace, and with it its own mount: it must not outlive
    // the keeper (a SIGKILLed one included).
    crate::sys::die_with_parent(&mut cmd);
    std::os::unix::process::CommandExt::uid(&mut cmd, uid);
    std::os::unix::process::CommandExt::gid(&mut cmd, gid);
    cmd.arg("-f")
        .arg("-o")
        .arg(format!(
            "lowerdir={},upperdir={upper},workdir={work}",
            lowers.join(":")
        ))
        .arg(&fuse_name)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "fuse-overlayfs is not installed (apt-get install fuse-overlayfs)".to_string()
        } else {
            format!("start fuse-overlayfs: {e}")
        }
    })?;
    drop(fuse_fd);
    // Only the daemon holds the device now: if it dies, the mount answers ENOTCONN.
    drop(dev);
    *lock(&DAEMON) = Some(child);
    // Served once the daemon has read its first request: a stat through the mount waits for it.
    std::fs::metadata(merged.join(".")).map_err(|e| {
        stop();
        format!("fuse-overlayfs did not serve {}: {e}", merged.display())
    })?;
    Ok(merged)
}
