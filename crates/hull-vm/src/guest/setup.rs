//! The guest's file systems and devices, made by its init before the agent answers: the
//! kernel's own (`/proc`, `/sys`, `/dev`), the modules, and the program's root at `/newroot`
//! (overlay of the read-only image share and a tmpfs; `/workspace` the workspace share), into
//! which init then changes root.

use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::mount::{mount, MountFlags};

use super::failed::{at, Failed};
use crate::proto;

/// `finit_module`'s flag for a compressed module file (the kernel decompresses it).
const MODULE_INIT_COMPRESSED_FILE: i32 = 4;

fn mkdir(p: &str) -> Result<(), Failed> {
    match fs::create_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) => Err(at(&format!("making {p}"))(e)),
    }
}

fn mount_fs(
    source: &str,
    target: &str,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<(), Failed> {
    mkdir(target)?;
    let data = std::ffi::CString::new(data).map_err(at("mount options"))?;
    mount(source, target, fstype, flags, data.as_c_str())
        .map_err(|e| at(&format!("mounting {fstype} at {target}"))(e))
}

/// `/proc`, `/sys` and `/dev` of the initramfs.
pub fn early_mounts() -> Result<(), Failed> {
    let quiet = MountFlags::NOSUID | MountFlags::NOEXEC | MountFlags::NODEV;
    mount_fs("proc", "/proc", "proc", quiet, "")?;
    mount_fs("sysfs", "/sys", "sysfs", quiet, "")?;
    mount_fs(
        "devtmpfs",
        "/dev",
        "devtmpfs",
        MountFlags::NOSUID,
        "mode=0755",
    )
}

/// Loads `/modules/NAME` for each name in `/modules.order`, in order.
pub fn load_modules() -> Result<(), Failed> {
    let order = fs::read_to_string("/modules.order").unwrap_or_default();
    for name in order.lines().filter(|l| !l.is_empty()) {
        let step = format!("loading the module {name}");
        let f = fs::File::open(Path::new("/modules").join(name)).map_err(|e| at(&step)(e))?;
        let flags = if name.ends_with(".ko") {
            0
        } else {
            MODULE_INIT_COMPRESSED_FILE
        };
        match rustix::system::finit_module(f.as_fd(), c"", flags) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(at(&step)(e)),
        }
    }
    Ok(())
}

/// The device of the virtio-serial port named [`proto::PORT_NAME`].
pub fn agent_port() -> Result<PathBuf, Failed> {
    let step = "finding the agent port";
    // The port appears once virtio-mmio has probed the device: wait a little for it.
    for _ in 0..500 {
        if let Ok(dir) = fs::read_dir("/sys/class/virtio-ports") {
            for e in dir.flatten() {
                let name = fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if name.trim() == proto::PORT_NAME {
                    return Ok(Path::new("/dev").join(e.file_name()));
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(at(step)(format!(
        "no virtio-serial port is named {}",
        proto::PORT_NAME
    )))
}

/// The program's cgroup in the guest (`/cg/box`, cgroup v2 with the pids and memory
/// controllers), opened before init changes root: the program never sees the hierarchy, and
/// without capabilities could not change it anyway.
pub fn program_cgroup() -> Result<OwnedFd, Failed> {
    mount_fs(
        "cgroup2",
        "/cg",
        "cgroup2",
        MountFlags::NOSUID | MountFlags::NOEXEC | MountFlags::NODEV,
        // A cgroup namespace's root cannot change its own limits.
        "nsdelegate",
    )?;
    fs::write("/cg/cgroup.subtree_control", "+pids +memory")
        .map_err(at("enabling the pids and memory controllers"))?;
    mkdir("/cg/box")?;
    rustix::fs::open(
        "/cg/box",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(at("opening the program's cgroup"))
}

/// Device nodes the program gets in its `/dev` (a tmpfs): bound from the guest's devtmpfs, whose
/// other nodes (the console, the serial ports, `kmsg`, `mem`) it never sees.
const DEV_NODES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// `/proc` files that act on the guest's kernel or show its memory, covered with `/dev/null`
/// (`/proc/sys` is read-only besides: `kernel.core_pattern` or `kernel.modprobe` written by the
/// guest's root would run a program with every capability).
const PROC_MASKED: [&str; 14] = [
    "/proc/sysrq-trigger",
    "/proc/kcore",
    "/proc/kmsg",
    "/proc/kallsyms",
    "/proc/timer_list",
    "/proc/keys",
    "/proc/sched_debug",
    "/proc/kpageflags",
    "/proc/kpagecount",
    "/proc/kpagecgroup",
    "/proc/slabinfo",
    "/proc/vmallocinfo",
    "/proc/pagetypeinfo",
    "/proc/latency_stats",
];

/// A bind mount of the file or directory at descriptor `src` (opened before the root changed)
/// on `target`.
fn bind_fd(src: &OwnedFd, target: &str) -> Result<(), Failed> {
    let from = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(src));
    rustix::mount::mount_bind(from.as_str(), target)
        .map_err(|e| at(&format!("binding {target}"))(e))
}

/// `target` bound on itself and made read-only.
fn read_only(target: &str) -> Result<(), Failed> {
    let step = format!("making {target} read-only");
    rustix::mount::mount_bind(target, target).map_err(|e| at(&step)(e))?;
    rustix::mount::mount_remount(
        target,
        MountFlags::BIND
            | MountFlags::RDONLY
            | MountFlags::NOSUID
            | MountFlags::NODEV
            | MountFlags::NOEXEC,
        "",
    )
    .map_err(|e| at(&step)(e))
}

/// The program's root: the image (read-only share) under a tmpfs upper at `/newroot`; init
/// changes root to it, then mounts `/workspace`, the shares, `/proc` (its `sys` read-only, its
/// kernel-facing files masked), `/sys` read-only, a `/dev` of its own, `/dev/pts`, `/dev/shm`
/// and `/tmp`. Mounting after the root changed resolves each target in the program's root, so
/// an absolute link in the image stays inside it.
pub fn program_root(boot: &proto::Boot) -> Result<(), Failed> {
    let ro = MountFlags::RDONLY;
    // No device file or set-id bit of the image or the upper takes effect.
    let plain = MountFlags::NOSUID | MountFlags::NODEV;
    mount_fs(proto::ROOT_TAG, "/lower", "virtiofs", ro | plain, "")?;
    mount_fs("rw", "/rw", "tmpfs", plain, "mode=0755")?;
    mkdir("/rw/upper")?;
    mkdir("/rw/work")?;
    mount_fs(
        "overlay",
        "/newroot",
        "overlay",
        plain,
        "lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work",
    )?;
    let mut nodes = Vec::new();
    for n in DEV_NODES {
        let fd = rustix::fs::open(
            format!("/dev/{n}").as_str(),
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| at(&format!("opening /dev/{n}"))(e))?;
        nodes.push((n, fd));
    }
    let files = file_copies(&boot.files)?;
    for d in ["proc", "sys", "dev", "tmp"] {
        plain_dir(&format!("/newroot/{d}"))?;
    }
    crate::sys::own_fs_context().map_err(at("unsharing init's file-system context"))?;
    rustix::process::chroot("/newroot").map_err(at("changing root to the program's root"))?;
    std::env::set_current_dir("/").map_err(at("changing root to the program's root"))?;
    mount_fs(
        proto::WORKSPACE_TAG,
        "/workspace",
        "virtiofs",
        MountFlags::NODEV,
        "",
    )?;
    for m in &boot.mounts {
        plain_target(&m.target, "mounting a share")?;
        let flags = if m.read_only {
            MountFlags::RDONLY | MountFlags::NODEV
        } else {
            MountFlags::NODEV
        };
        mount_fs(&m.tag, &m.target, "virtiofs", flags, "")?;
    }
    let quiet = MountFlags::NOSUID | MountFlags::NOEXEC | MountFlags::NODEV;
    mount_fs("proc", "/proc", "proc", quiet, "")?;
    read_only("/proc/sys")?;
    mount_fs("sysfs", "/sys", "sysfs", quiet | ro, "")?;
    mount_fs(
        "dev",
        "/dev",
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "mode=0755,size=64k",
    )?;
    for (n, fd) in &nodes {
        let target = format!("/dev/{n}");
        fs::File::create(&target).map_err(|e| at(&format!("making {target}"))(e))?;
        bind_fd(fd, &target)?;
    }
    let Some((_, null)) = nodes.iter().find(|(n, _)| *n == "null") else {
        return Err(at("masking /proc")("no /dev/null"));
    };
    for f in PROC_MASKED {
        // A file this kernel does not have needs no mask.
        if Path::new(f).exists() {
            bind_fd(null, f)?;
        }
    }
    mount_fs(
        "devpts",
        "/dev/pts",
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "newinstance,ptmxmode=0666",
    )?;
    for (link, to) in [
        ("/dev/ptmx", "pts/ptmx"),
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(to, link).map_err(|e| at(&format!("making {link}"))(e))?;
    }
    mount_fs(
        "shm",
        "/dev/shm",
        "tmpfs",
        quiet,
        &format!("mode=1777,size={}", boot.shm_size),
    )?;
    mount_fs(
        "tmp",
        "/tmp",
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        &format!("mode=1777,size={}", boot.tmp_size),
    )?;
    // Last, so no mount made above covers one.
    for (target, fd) in &files {
        bind_file(fd, target)?;
    }
    Ok(())
}

/// Makes `path` (a top-level directory of the program's root, where init mounts the kernel's
/// file systems and tmpfs) a plain directory: an image's link there is removed (a whiteout in
/// the upper layer), so a mount made by its path once `/proc` is there cannot be steered
/// through `/proc/<pid>/root` into init's own root.
fn plain_dir(path: &str) -> Result<(), Failed> {
    let step = format!("making {path} a directory");
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => fs::remove_file(path).map_err(|e| at(&step)(e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(at(&step)(e)),
    }
    fs::create_dir(path).map_err(|e| at(&step)(e))
}

/// The directory `dir` of the program's root (absolute, in the root init changed to), opened
/// without leaving that root: every link on the way resolves inside it and no `/proc` magic
/// link is followed (init has every capability, so `/proc/<pid>/root` would take it to its
/// own root). With `make`, a missing directory on the way is made (0755).
fn dir_in_root(dir: &str, make: bool) -> Result<OwnedFd, Failed> {
    use rustix::fs::{openat2, ResolveFlags};
    let step = format!("opening {dir} in the program's root");
    let how = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let within = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    let root = rustix::fs::open("/", how, Mode::empty()).map_err(|e| at(&step)(e))?;
    let parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
    let mut here = rustix::fs::openat(&root, ".", how, Mode::empty()).map_err(|e| at(&step)(e))?;
    for i in 0..parts.len() {
        let prefix = parts[..=i].join("/");
        here = match openat2(&root, prefix.as_str(), how, Mode::empty(), within) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) if make => {
                match rustix::fs::mkdirat(&here, parts[i], Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(at(&step)(e)),
                }
                openat2(&root, prefix.as_str(), how, Mode::empty(), within)
                    .map_err(|e| at(&step)(e))?
            }
            Err(e) => return Err(at(&step)(e)),
        };
    }
    Ok(here)
}

/// The parent directory (opened by [`dir_in_root`], made when missing) and the last name of
/// the absolute path `target`.
fn parent_in_root(target: &str, step: &str) -> Result<(OwnedFd, String), Failed> {
    let (parent, name) = target.rsplit_once('/').unwrap_or(("", target));
    if name.is_empty() || name == "." || name == ".." {
        return Err(at(step)(format!("{target:?} does not name a file")));
    }
    Ok((dir_in_root(parent, true)?, name.to_string()))
}

/// Refuses a mount target that is not absolute or climbs with `..`.
fn plain_target(target: &str, step: &str) -> Result<(), Failed> {
    if !target.starts_with('/') || target.split('/').any(|c| c == "..") {
        return Err(at(step)(format!("{target:?} is not an absolute path")));
    }
    Ok(())
}

/// Writes each file the host sent into init's own tmpfs (`/rw/files`, outside the program's
/// root) with its permission bits, and opens it for [`bind_file`]; its target is checked here.
fn file_copies(files: &[proto::GuestFile]) -> Result<Vec<(String, OwnedFd)>, Failed> {
    use base64::Engine as _;
    use std::os::unix::fs::OpenOptionsExt;
    if files.is_empty() {
        return Ok(Vec::new());
    }
    mkdir("/rw/files")?;
    let mut out = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let step = format!("copying the file for {}", f.target);
        plain_target(&f.target, &step)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&f.b64)
            .map_err(|e| at(&step)(e))?;
        let path = format!("/rw/files/{i}");
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(f.mode & 0o777)
            .open(&path)
            .map_err(|e| at(&step)(e))?;
        std::io::Write::write_all(&mut file, &bytes).map_err(|e| at(&step)(e))?;
        drop(file);
        // The umask may have taken bits the host's file had.
        fs::set_permissions(
            &path,
            std::os::unix::fs::PermissionsExt::from_mode(f.mode & 0o777),
        )
        .map_err(|e| at(&step)(e))?;
        let fd = rustix::fs::open(path.as_str(), OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| at(&step)(e))?;
        out.push((f.target.clone(), fd));
    }
    Ok(out)
}

/// The copy at `fd` bound read-only at `target` (made, as an empty file, where the root has
/// nothing), in the program's root: the target is reached by [`parent_in_root`] and must be a
/// regular file (a link there is refused, never followed), and the mount is made on its
/// descriptor.
fn bind_file(fd: &OwnedFd, target: &str) -> Result<(), Failed> {
    use rustix::io::Errno;
    let step = format!("mounting the file at {target}");
    let (parent, name) = parent_in_root(target, &step)?;
    let look = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let open_target = || rustix::fs::openat(&parent, name.as_str(), look, Mode::empty());
    let spot = match open_target() {
        Ok(t) => t,
        Err(Errno::NOENT) => {
            let made = rustix::fs::openat(
                &parent,
                name.as_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map_err(|e| at(&step)(e))?;
            drop(made);
            open_target().map_err(|e| at(&step)(e))?
        }
        Err(e) => return Err(at(&step)(e)),
    };
    let st = rustix::fs::fstat(&spot).map_err(|e| at(&step)(e))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(at(&step)("the program's root has something other than a regular file there (a link is not followed)"));
    }
    let fd_path = |f: &OwnedFd| format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(f));
    rustix::mount::mount_bind(fd_path(fd).as_str(), fd_path(&spot).as_str())
        .map_err(|e| at(&step)(e))?;
    // Opened again, the name is the new mount, which is made read-only (not the mount the
    // file was on).
    let mounted = open_target().map_err(|e| at(&step)(e))?;
    rustix::mount::mount_remount(
        fd_path(&mounted).as_str(),
        MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
        "",
    )
    .map_err(|e| at(&step)(e))
}

/// The program's `/etc/resolv.conf` (in its root's upper layer): the gateway answers DNS. An
/// image's own, or a link it has there, is replaced, never followed, and `/etc` is reached as
/// [`dir_in_root`] reaches it.
pub fn resolv_conf(text: &str) -> Result<(), Failed> {
    let step = "writing /etc/resolv.conf";
    let etc = dir_in_root("/etc", true)?;
    match rustix::fs::unlinkat(&etc, "resolv.conf", rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(at(step)(e)),
    }
    let f = rustix::fs::openat(
        &etc,
        "resolv.conf",
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(at(step))?;
    std::io::Write::write_all(&mut fs::File::from(f), text.as_bytes()).map_err(at(step))
}

/// Writes what is cached to the shares, then powers the guest off (QEMU exits); `code` is
/// only for the console.
pub fn power_off(code: i32) -> ! {
    rustix::fs::sync();
    if code != 0 {
        eprintln!("hull-init: powering off after a failure");
    }
    let _ = rustix::system::reboot(rustix::system::RebootCommand::PowerOff);
    // Only PID 1 with CAP_SYS_BOOT gets here without the reboot: nothing else to do.
    loop {
        std::thread::park();
    }
}
