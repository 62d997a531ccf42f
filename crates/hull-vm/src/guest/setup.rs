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
/// nothing), in the program's root.
fn bind_file(fd: &OwnedFd, target: &str) -> Result<(), Failed> {
    let step = format!("mounting the file at {target}");
    if fs::symlink_metadata(target).is_err() {
        if let Some(parent) = Path::new(target).parent() {
            fs::create_dir_all(parent).map_err(|e| at(&step)(e))?;
        }
        fs::File::create(target).map_err(|e| at(&step)(e))?;
    }
    bind_fd(fd, target)?;
    rustix::mount::mount_remount(
        target,
        MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
        "",
    )
    .map_err(|e| at(&step)(e))
}

/// The program's `/etc/resolv.conf` (in its root's upper layer): the gateway answers DNS. An
/// image's own, or a link it has there, is replaced, never followed.
pub fn resolv_conf(text: &str) -> Result<(), Failed> {
    let step = "writing /etc/resolv.conf";
    fs::create_dir_all("/etc").map_err(at(step))?;
    match fs::remove_file("/etc/resolv.conf") {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(at(step)(e)),
    }
    fs::write("/etc/resolv.conf", text).map_err(at(step))
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
