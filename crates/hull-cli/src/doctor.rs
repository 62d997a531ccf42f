//! `hull doctor`: checks what this host gives a box, and says how to fix what is missing.

use clap::Args;
use hull_box::{BoxSpec, NoSink, RunOptions, Runtime};
use serde::Serialize;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Check {
    name: String,
    status: &'static str,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(name: &str, ok: bool, detail: String, fix: Option<&str>) -> Check {
    Check {
        name: name.into(),
        status: if ok { "ok" } else { "missing" },
        detail,
        fix: if ok { None } else { fix.map(String::from) },
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn landlock_abi() -> Option<i64> {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with a null attr and size 0 this only queries the ABI version.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (ret > 0).then_some(ret)
}

/// The gateway network's device: each gateway box opens `/dev/net/tun` itself, as this user,
/// in its own network namespace (`probe` is that open, `meta` the node's metadata).
fn tun_check(probe: std::io::Result<()>, meta: Option<std::fs::Metadata>) -> Check {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dev = hull_box::tap::TUN_DEVICE;
    match (probe, meta) {
        (Ok(()), _) => check(
            "gateway network",
            true,
            format!("{dev} opens for this user: a gateway box makes its TAP in its own network namespace"),
            None,
        ),
        (Err(_), None) => check(
            "gateway network",
            false,
            format!("no {dev} (the tun module is not loaded): boxes with the gateway network are refused"),
            Some("modprobe tun as root (then chmod 0666 /dev/net/tun; scripts/setup.sh does both)"),
        ),
        (Err(e), Some(m)) => {
            let what = if m.file_type().is_char_device() {
                format!("mode {:o}", m.permissions().mode() & 0o7777)
            } else {
                "not a character device".to_string()
            };
            check(
                "gateway network",
                false,
                format!("this user cannot open {dev} ({what}: {e}): boxes with the gateway network are refused"),
                Some("chmod 0666 /dev/net/tun as root (the distributions' default; scripts/setup.sh does it)"),
            )
        }
    }
}

/// The caps every box gets unless told otherwise (`--pids` 256 in `hull run`, `memory_mb` 512 in
/// the SDKs): a host that cannot enforce them fails the doctor.
const DEFAULT_CAPS: [&str; 2] = ["pids", "memory"];

pub fn main(args: &DoctorArgs) -> i32 {
    let mut checks = Vec::new();
    let mut missing_caps: Vec<&'static str> = Vec::new();
    let max_ns = read("/proc/sys/user/max_user_namespaces")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let unpriv = read("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let mut ns_detail = format!("user.max_user_namespaces={max_ns}");
    if let Some(u) = &unpriv {
        ns_detail.push_str(&format!(", kernel.unprivileged_userns_clone={u}"));
    }
    if let Some(a) = &apparmor {
        ns_detail.push_str(&format!(
            ", kernel.apparmor_restrict_unprivileged_userns={a}"
        ));
    }
    let ns_ok = max_ns > 0 && unpriv.as_deref() != Some("0") && apparmor.as_deref() != Some("1");
    checks.push(check("user namespaces", ns_ok, ns_detail, Some("sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1 (and kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04+)")));

    let runtime = Runtime::new();
    match &runtime {
        Ok(rt) => {
            let n = rt.seccomp_program().instructions().len();
            let support = hull_seccomp::probe();
            checks.push(check(
                "seccomp",
                support.filter,
                format!(
                    "filter compiled to {n} BPF instructions; user notification {}",
                    if support.user_notif {
                        "available (escape calls are named)"
                    } else {
                        "missing (escape calls kill without a name)"
                    }
                ),
                None,
            ));
            match rt.cgroups() {
                Ok(host) => {
                    checks.push(check("cgroup backend", true, format!("{:?}", host.kind()), None));
                    for r in host.report() {
                        let ok = r.usable;
                        if !ok && DEFAULT_CAPS.contains(&r.controller.name()) {
                            missing_caps.push(r.controller.name());
                        }
                        checks.push(Check {
                            name: format!("cgroup {:?} cap", r.controller),
                            status: if ok { "enforced" } else { "not enforced" },
                            detail: r.detail.clone(),
                            fix: if ok { None } else { r.fix.clone() },
                        });
                    }
                }
                Err(e) => checks.push(check("cgroups", false, hull_api::Chain(e).to_string(), Some("mount cgroup2 at /sys/fs/cgroup, or delegate a subtree and set HULL_CGROUP_PARENT"))),
            }
        }
        Err(e) => checks.push(check(
            "seccomp",
            false,
            e.to_string(),
            Some("a kernel with CONFIG_SECCOMP_FILTER is required"),
        )),
    }
    if let Ok(rt) = &runtime {
        let swept = rt.sweep_leftovers();
        checks.push(check("leftovers", true, format!("removed {} cgroup(s) and {} temporary workspace(s) left by hull processes that were killed", swept.cgroups, swept.workspaces), None));
    }
    // Said for what it is: hull does not use landlock, so its absence is no gap.
    let ll = landlock_abi();
    checks.push(Check {
        name: "landlock".into(),
        status: "not used",
        detail: format!(
            "{}; hull does not use it: a box's boundary is its namespaces, seccomp allowlist, dropped capabilities and cgroup caps",
            ll.map_or("not available".into(), |v| format!("ABI version {v} available"))
        ),
        fix: None,
    });
    let fs = read("/proc/filesystems").unwrap_or_default();
    // Named sandboxes mount their writable root as overlayfs in the box's user namespace, which
    // kernels allow from 5.11 on; elsewhere (or with HULL_OVERLAY=fuse) the keeper runs
    // fuse-overlayfs instead (rootless: mounted by the box, which needs /dev/fuse).
    let release = read("/proc/sys/kernel/osrelease").unwrap_or_default();
    let userns_overlay = crate::named::fuse::kernel_allows_userns_overlay();
    let kernel_fs = fs.contains("overlay");
    let root = rustix::process::geteuid().is_root();
    let fuse_installed = std::process::Command::new("fuse-overlayfs")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    let (ok, detail, fix) = match crate::named::fuse::mode() {
        Err(e) => (false, e, Some("unset HULL_OVERLAY, or set it to fuse or kernel")),
        Ok(crate::named::fuse::Overlay::Kernel) => (
            kernel_fs && userns_overlay,
            match (kernel_fs, userns_overlay) {
                (true, true) => format!("named sandboxes' writable root: overlayfs, mounted in the box's user namespace (kernel {release}; HULL_OVERLAY=fuse would use fuse-overlayfs)"),
                (true, false) => format!("HULL_OVERLAY=kernel, but kernel {release} refuses overlayfs in a user namespace (5.11+ needed): named sandboxes cannot start"),
                _ => "overlay is not in /proc/filesystems: named sandboxes cannot start".into(),
            },
            Some("modprobe overlay, on a kernel 5.11 or newer; or unset HULL_OVERLAY for the fuse-overlayfs fallback"),
        ),
        Ok(crate::named::fuse::Overlay::Fuse) => {
            let why = if std::env::var_os("HULL_OVERLAY").is_some() {
                "HULL_OVERLAY=fuse".to_string()
            } else {
                format!("kernel {release} refuses overlayfs in a user namespace")
            };
            // Rootless, each box opens /dev/fuse itself (as the caller) to mount its root.
            let dev = if root { Ok(()) } else { crate::named::fuse::dev_fuse_openable() };
            match (fuse_installed, root, dev) {
                (false, _, _) => (false, format!("named sandboxes' writable root would be fuse-overlayfs ({why}), which is not installed"), Some("apt-get install fuse-overlayfs")),
                (true, true, _) => (true, format!("named sandboxes' writable root: fuse-overlayfs, run by each keeper ({why})"), None),
                (true, false, Ok(())) => (true, format!("named sandboxes' writable root: fuse-overlayfs, mounted by each box in its user namespace and served by its keeper ({why})"), None),
                (true, false, Err(e)) => (false, format!("named sandboxes' writable root would be fuse-overlayfs ({why}), but this user cannot open /dev/fuse ({e}): named sandboxes cannot start rootless"), Some("chmod 0666 /dev/fuse as root (the distributions' default; scripts/setup.sh does it)")),
            }
        }
    };
    checks.push(check("writable root", ok, detail, fix));
    checks.push(tun_check(
        hull_box::tap::probe(),
        std::fs::metadata(hull_box::tap::TUN_DEVICE).ok(),
    ));
    let newuidmap = ["/usr/bin/newuidmap", "/bin/newuidmap"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    // SAFETY: getegid has no preconditions and cannot fail.
    let gid = unsafe { libc::getegid() };
    let (subids_ok, subids_detail, subids_fix) = match (newuidmap, hull_box::subids::lookup(uid, gid)) {
        (true, Ok((u, g))) => (true, format!("--subids maps ids 1-{} to {}.. (uids) and 1-{} to {}.. (gids) through newuidmap/newgidmap", u.count, u.start, g.count, g.start), None),
        (true, Err(e)) => (false, format!("newuidmap present, but {}", hull_api::Chain(&e)), Some("add ranges for this user to /etc/subuid and /etc/subgid (optional: needed only for --subids, and, rootless, for a named sandbox's --user)")),
        (false, _) => (false, "newuidmap absent: --subids (and, rootless, a named sandbox's --user) is unavailable (boxes use a single-uid map)".into(), Some("apt-get install uidmap (optional: needed only for --subids, and, rootless, for --user)")),
    };
    checks.push(check("sub-ids", subids_ok, subids_detail, subids_fix));
    checks.push(microvm_check());

    // The real test: one box.
    let mut ok_box = false;
    if let Ok(rt) = &runtime {
        let spec = BoxSpec::new(vec!["/bin/true".into()]);
        match rt.run(&spec, RunOptions { capture: true }, &mut NoSink) {
            Ok(r) if r.success => {
                ok_box = true;
                checks.push(check(
                    "box",
                    true,
                    format!(
                        "/bin/true ran in a fresh box in {} ms (setup {} us)",
                        r.duration_ms, r.stats.setup_us
                    ),
                    None,
                ));
            }
            Ok(r) => checks.push(check(
                "box",
                false,
                format!("/bin/true failed: exit {} {:?}", r.exit_code, r.fault),
                None,
            )),
            Err(e) => checks.push(check(
                "box",
                false,
                hull_api::Chain(&e).to_string(),
                Some("see the checks above"),
            )),
        }
    }

    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&checks).unwrap_or_default()
        );
    } else {
        for c in &checks {
            println!("{:<22} {:<13} {}", c.name, c.status, c.detail);
            if let Some(f) = &c.fix {
                println!("{:<22} {:<13} fix: {f}", "", "");
            }
        }
    }
    if !missing_caps.is_empty() && !args.json {
        println!(
            "\nhull doctor: the default caps are not enforced here ({}): boxes run without them, each result saying so; the fix lines above say how",
            missing_caps.join(", ")
        );
    }
    if ok_box && missing_caps.is_empty() {
        0
    } else {
        1
    }
}

/// The microVM tier (`--isolation vm`, optional): the accelerator this host gives a VM and the
/// pieces a VM is made of, or the first one missing with its fix.
fn microvm_check() -> Check {
    let found =
        hull_vm::assets::Tools::find().and_then(|t| hull_vm::assets::Guest::find().map(|g| (t, g)));
    // With the pieces found, KVM is tried (once per host boot, then remembered), as a VM does.
    let accel = match &found {
        Ok((tools, guest)) => hull_vm::kvm_probe::choose(
            &tools.qemu,
            &guest.kernel,
            &hull::VmBackend::new(false).cache,
        ),
        Err(_) => hull_vm::accel::probe(),
    };
    let accel = match accel {
        hull_vm::Accel::Kvm { cpu: "host" } => "KVM".to_string(),
        hull_vm::Accel::Kvm { cpu } => format!("KVM (-cpu {cpu})"),
        hull_vm::Accel::Tcg { why } => format!("emulated by QEMU's TCG, slow ({why})"),
    };
    match found {
        Ok((tools, guest)) => check(
            "microvm",
            true,
            format!(
                "--isolation vm: {accel}; QEMU {}, virtiofsd {}, guest kernel {}",
                tools.qemu.display(),
                tools.virtiofsd.display(),
                guest.kernel.display()
            ),
            None,
        ),
        Err(e) => Check {
            name: "microvm".into(),
            status: "unavailable",
            detail: format!(
                "--isolation vm (optional) cannot run: {e}; a VM here would be {accel}"
            ),
            fix: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unopenable_tun_device_names_the_fix() {
        let refused = std::io::Error::from_raw_os_error(libc::EACCES);
        let meta = std::fs::metadata("/dev/null").ok();
        let c = tun_check(Err(refused), meta);
        assert_eq!(c.status, "missing");
        assert!(
            c.detail.contains("/dev/net/tun") && c.detail.contains("mode 666"),
            "{}",
            c.detail
        );
        assert_eq!(
            c.fix.as_deref(),
            Some("chmod 0666 /dev/net/tun as root (the distributions' default; scripts/setup.sh does it)")
        );
        let c = tun_check(Err(std::io::Error::from_raw_os_error(libc::ENOENT)), None);
        assert!(c.fix.unwrap_or_default().starts_with("modprobe tun"));
        let c = tun_check(Ok(()), None);
        assert_eq!((c.status, c.fix), ("ok", None));
    }
}
