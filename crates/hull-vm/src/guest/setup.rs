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
        "",
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

/// The program's root: the image (read-only share) under a tmpfs upper at `/newroot`, with
/// `/workspace`, `/proc`, `/dev`, `/tmp` and `/dev/shm` of its own; init then changes root to it.
pub fn program_root(boot: &proto::Boot) -> Result<(), Failed> {
    let ro = MountFlags::RDONLY;
    mount_fs(proto::ROOT_TAG, "/lower", "virtiofs", ro, "")?;
    mount_fs("rw", "/rw", "tmpfs", MountFlags::empty(), "mode=0755")?;
    mkdir("/rw/upper")?;
    mkdir("/rw/work")?;
    mount_fs(
        "overlay",
        "/newroot",
        "overlay",
        MountFlags::empty(),
        "lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work",
    )?;
    mount_fs(
        proto::WORKSPACE_TAG,
        "/newroot/workspace",
        "virtiofs",
        MountFlags::NODEV,
        "",
    )?;
    for m in &boot.mounts {
        if !m.target.starts_with('/') || m.target.split('/').any(|c| c == "..") {
            return Err(at("mounting a share")(format!(
                "{:?} is not an absolute path",
                m.target
            )));
        }
        let flags = if m.read_only {
            MountFlags::RDONLY | MountFlags::NODEV
        } else {
            MountFlags::NODEV
        };
        mount_fs(
            &m.tag,
            &format!("/newroot{}", m.target),
            "virtiofs",
            flags,
            "",
        )?;
    }
    let quiet = MountFlags::NOSUID | MountFlags::NOEXEC | MountFlags::NODEV;
    mount_fs("proc", "/newroot/proc", "proc", quiet, "")?;
    mount_fs("sysfs", "/newroot/sys", "sysfs", quiet | ro, "")?;
    mount_fs(
        "devtmpfs",
        "/newroot/dev",
        "devtmpfs",
        MountFlags::NOSUID,
        "mode=0755",
    )?;
    mount_fs(
        "devpts",
        "/newroot/dev/pts",
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "newinstance,ptmxmode=0666",
    )?;
    mount_fs("shm", "/newroot/dev/shm", "tmpfs", quiet, "mode=1777")?;
    mount_fs(
        "tmp",
        "/newroot/tmp",
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        "mode=1777",
    )?;
    rustix::process::chroot("/newroot").map_err(at("changing root to the program's root"))?;
    std::env::set_current_dir("/").map_err(at("changing root to the program's root"))
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
