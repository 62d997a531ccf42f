//! Whether this host's KVM can run the guest kernel, found by trying once and remembered. The
//! CPU flags and `/dev/kvm` ([`crate::accel::probe`]) only say KVM might work: under nested
//! virtualization the guest kernel's first privileged instructions can still fail (QEMU
//! `-cpu host` asserts on the `IA32_ARCH_CAPABILITIES` MSR on some nested hosts, and works
//! without that feature). So before the first VM, the guest kernel is booted with no root
//! under `-cpu host` and then `-cpu host,-arch-capabilities`: a kernel that reaches its
//! "no root file system" panic ran its whole early boot under KVM. The first that does is the
//! answer; if none does, TCG with QEMU's words. The answer is kept in the cache directory,
//! keyed by the host's boot, QEMU and the kernel, so it is tried once per host boot.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::accel::Accel;

/// The CPU models tried under KVM, in order.
pub const CPUS: [&str; 2] = ["host", "host,-arch-capabilities"];

/// How long one trial boot may take (a kernel under working KVM panics in well under a second).
const TRIAL: Duration = Duration::from_secs(15);

/// What the console shows once the kernel ran its early boot and found no root to mount (any
/// other panic is a guest that crashed, not one that ran).
const REACHED: &str = "VFS: Unable to mount root fs";

/// What QEMU says when KVM could not run an instruction of the guest's (it then pauses).
const STUCK: &str = "KVM internal error";

/// The accelerator for VMs of `kernel` under `qemu`: [`crate::accel::probe`]'s when it is TCG,
/// else the cached answer, else a trial boot's (then cached in `cache`).
pub fn choose(qemu: &Path, kernel: &Path, cache: &Path) -> Accel {
    match crate::accel::probe() {
        Accel::Kvm { .. } => verified(qemu, kernel, cache),
        tcg => tcg,
    }
}

/// The answer for a host whose flags and device say KVM: cached, or tried now.
pub fn verified(qemu: &Path, kernel: &Path, cache: &Path) -> Accel {
    let key = key(qemu, kernel);
    let file = cache.join("accel.json");
    if let Some(a) = read_cached(&file, &key) {
        return a;
    }
    let (a, definite) = trial(qemu, kernel, cache);
    // A trial cut short (a signal, the deadline on a loaded host, a process or directory that
    // could not be made) says nothing for the next VM: only a definite answer is kept.
    if definite {
        write_cached(&file, &key, &a);
    }
    a
}

/// What the answer depends on: the host's boot, the KVM modules' parameters (which change
/// without a reboot: `kvm.ignore_msrs` is the usual cure for the MSR QEMU asserts on, and a
/// module reloaded with other ones), QEMU's and the kernel's paths, sizes and change times.
fn key(qemu: &Path, kernel: &Path) -> String {
    let mut boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    boot = boot.trim().to_string();
    for module in ["kvm", "kvm_intel", "kvm_amd"] {
        let dir = Path::new("/sys/module").join(module).join("parameters");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut params: Vec<String> = entries
            .flatten()
            .map(|e| {
                let v = std::fs::read_to_string(e.path()).unwrap_or_default();
                format!("{module}.{}={}", e.file_name().to_string_lossy(), v.trim())
            })
            .collect();
        params.sort();
        boot.push(' ');
        boot.push_str(&params.join(","));
    }
    let file = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map_or_else(
            |_| format!("{} ?", p.display()),
            |m| format!("{} {} {}", p.display(), m.len(), m.mtime()),
        )
    };
    format!("{} | {} | {}", boot.trim(), file(qemu), file(kernel))
}

fn read_cached(file: &Path, key: &str) -> Option<Accel> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    if v.get("key")?.as_str()? != key {
        return None;
    }
    match v.get("accel")?.as_str()? {
        "kvm" => {
            let cpu = v.get("cpu")?.as_str()?;
            CPUS.iter()
                .find(|c| **c == cpu)
                .map(|c| Accel::Kvm { cpu: c })
        }
        "tcg" => Some(Accel::Tcg {
            why: v.get("why")?.as_str()?.to_string(),
        }),
        _ => None,
    }
}

/// Keeps the answer (written whole, then renamed: a reader never sees half of it). A cache that
/// cannot be written only means the next VM tries again.
fn write_cached(file: &Path, key: &str, a: &Accel) {
    let v = match a {
        Accel::Kvm { cpu } => serde_json::json!({"key": key, "accel": "kvm", "cpu": cpu}),
        Accel::Tcg { why } => serde_json::json!({"key": key, "accel": "tcg", "why": why}),
    };
    let Some(dir) = file.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    // A file of its own per writer (threads of one hull too), renamed into place whole.
    if let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) {
        if std::io::Write::write_all(&mut tmp, v.to_string().as_bytes()).is_ok() {
            let _ = tmp.persist(file);
        }
    }
}

/// Boots `kernel` with no root under each of [`CPUS`] until one reaches [`REACHED`]: the
/// answer, and whether it is definite (every trial ended on its own).
fn trial(qemu: &Path, kernel: &Path, cache: &Path) -> (Accel, bool) {
    let mut said = Vec::new();
    let mut definite = true;
    for cpu in CPUS {
        match boot_once(qemu, kernel, cpu, cache) {
            Ok(()) => return (Accel::Kvm { cpu }, true),
            Err(Failed::Definite(why)) => said.push(format!("-cpu {cpu}: {why}")),
            Err(Failed::Passing(why)) => {
                definite = false;
                said.push(format!("-cpu {cpu}: {why}"));
                // A signal for hull is hull's to answer: no further trial.
                if crate::sys::forwarded_is_pending() {
                    break;
                }
            }
        }
    }
    let why = format!(
        "KVM could not run the guest kernel ({}){}",
        said.join("; "),
        if definite {
            ""
        } else {
            "; not kept, so the next VM tries again"
        }
    );
    (Accel::Tcg { why }, definite)
}

/// Why a trial boot did not show a kernel that ran.
enum Failed {
    /// QEMU or KVM said no: the answer for this host.
    Definite(String),
    /// The trial was cut short (a signal, its deadline, a process or directory not made).
    Passing(String),
}

/// Bytes of a file as text (lossy: one stray byte must not hide the rest).
fn text_of(path: &Path, max: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(max).read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// One trial boot: `Ok` when the kernel's console reached its panic for want of a root.
fn boot_once(qemu: &Path, kernel: &Path, cpu: &str, cache: &Path) -> Result<(), Failed> {
    let _ = std::fs::create_dir_all(cache);
    // A trial's directory is named as a VM's is, so one a killed hull left goes with the
    // next trial's sweep.
    crate::leftovers::sweep(cache);
    let dir = tempfile::Builder::new()
        .prefix(&format!(
            "{}{}-kvm-",
            crate::leftovers::DIR_PREFIX,
            std::process::id()
        ))
        .tempdir_in(cache)
        .map_err(|e| {
            Failed::Passing(format!(
                "making a directory for the trial in {}: {e}",
                cache.display()
            ))
        })?;
    let console: PathBuf = dir.path().join("console.log");
    let err_log = dir.path().join("qemu.err");
    let mut serial = std::ffi::OsString::from("file:");
    serial.push(&console);
    let mut cmd = Command::new(qemu);
    cmd.args([
        "-M",
        "microvm",
        "-accel",
        "kvm",
        "-cpu",
        cpu,
        "-m",
        "128M",
        "-smp",
        "1",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        // As a VM's QEMU: no new process, no privilege change (crate::qemu).
        "-sandbox",
        "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-serial",
    ])
    .arg(serial)
    .arg("-kernel")
    .arg(kernel)
    .args(["-append", "console=ttyS0 panic=-1 reboot=t"])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(
        std::fs::File::create(&err_log)
            .map_err(|e| Failed::Passing(format!("making QEMU's log: {e}")))?,
    )
    // Its own process group: a terminal's Ctrl-C is hull's to answer, not a verdict on KVM.
    .process_group(0);
    crate::sys::as_helper(&mut cmd, 3);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failed::Passing(format!("starting {}: {e}", qemu.display())))?;
    let deadline = Instant::now() + TRIAL;
    let said = || text_of(&err_log, 4096);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            // A failed emulation leaves QEMU paused with the guest's registers printed: it
            // would wait for the deadline. A signal for hull ends the trial at once.
            Ok(None)
                if Instant::now() < deadline
                    && !said().contains(STUCK)
                    && !crate::sys::forwarded_is_pending() =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    if text_of(&console, 1 << 20).contains(REACHED) {
        return Ok(());
    }
    // QEMU's first line says why (the rest is a register dump).
    let said = said();
    let first = said
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    Err(match status {
        None if said.contains(STUCK) => {
            Failed::Definite(format!("QEMU stopped the guest: {first}"))
        }
        None if crate::sys::forwarded_is_pending() => {
            Failed::Passing("hull was told to end during the trial".into())
        }
        None => Failed::Passing(format!(
            "no panic for want of a root within {} s",
            TRIAL.as_secs()
        )),
        // Ended by a signal (not its own abort): cut short, not an answer.
        Some(s) if s.signal().is_some_and(|sig| sig != libc::SIGABRT) => {
            Failed::Passing(format!("QEMU {s}"))
        }
        Some(s) if !first.is_empty() => Failed::Definite(format!("QEMU {s}: {first}")),
        Some(s) => Failed::Definite(format!(
            "QEMU {s}, and the kernel never reached its panic for want of a root"
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for QEMU: with `-cpu host` it fails as QEMU does on some nested hosts; with
    /// the fallback it writes the kernel's panic to the serial file named after `file:`.
    fn fake_qemu(dir: &Path, works: &str) -> PathBuf {
        stand_in(
            dir,
            works,
            "echo 'Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)' > \"$serial\"; exit 0",
            "echo 'qemu: kvm_set_msr: Assertion failed' >&2; exit 1",
        )
    }

    /// A stand-in QEMU that runs `then` for `-cpu works` and `otherwise` for any other model.
    fn stand_in(dir: &Path, works: &str, then: &str, otherwise: &str) -> PathBuf {
        let p = dir.join("qemu");
        let script = format!(
            "#!/bin/sh\ncpu=''; serial=''\nwhile [ $# -gt 0 ]; do case $1 in -cpu) cpu=$2;; -serial) serial=${{2#file:}};; esac; shift; done\n\
             echo \"$cpu\" >> {log}\n\
             if [ \"$cpu\" = '{works}' ]; then {then}; fi\n\
             {otherwise}\n",
            log = dir.join("tried").display()
        );
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn the_fallback_cpu_is_tried_and_the_answer_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let qemu = fake_qemu(dir.path(), "host,-arch-capabilities");
        let kernel = dir.path().join("vmlinuz");
        std::fs::write(&kernel, "k").unwrap();
        let cache = dir.path().join("cache");
        // A trial's directory that a killed hull left (its pid runs no more) goes.
        let stale = cache.join("hull-vm-999999999-kvm-left");
        std::fs::create_dir_all(&stale).unwrap();
        let a = verified(&qemu, &kernel, &cache);
        assert!(!stale.exists());
        assert_eq!(
            a,
            Accel::Kvm {
                cpu: "host,-arch-capabilities"
            }
        );
        let tried = || std::fs::read_to_string(dir.path().join("tried")).unwrap();
        assert_eq!(tried(), "host\nhost,-arch-capabilities\n");
        // Kept: the next VM does not try again.
        assert_eq!(verified(&qemu, &kernel, &cache), a);
        assert_eq!(tried().lines().count(), 2);
        // A changed kernel is another key: tried again.
        std::fs::write(&kernel, "kernel 2").unwrap();
        assert_eq!(verified(&qemu, &kernel, &cache), a);
        assert_eq!(tried().lines().count(), 4);
        // No trial directory is left.
        let left: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["accel.json"]);
    }

    #[test]
    fn when_no_cpu_boots_it_is_tcg_with_qemus_words() {
        let dir = tempfile::tempdir().unwrap();
        let qemu = fake_qemu(dir.path(), "none");
        let kernel = dir.path().join("vmlinuz");
        std::fs::write(&kernel, "k").unwrap();
        let cache = dir.path().join("cache");
        let Accel::Tcg { why } = verified(&qemu, &kernel, &cache) else {
            panic!("KVM chosen");
        };
        assert!(
            why.starts_with("KVM could not run the guest kernel (-cpu host: QEMU exit status: 1: qemu: kvm_set_msr: Assertion failed; -cpu host,-arch-capabilities: "),
            "{why}"
        );
        // The refusal is kept too.
        assert_eq!(
            read_cached(&cache.join("accel.json"), &key(&qemu, &kernel)),
            Some(Accel::Tcg { why })
        );
    }

    #[test]
    fn a_crash_is_no_answer_and_a_trial_cut_short_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = dir.path().join("vmlinuz");
        std::fs::write(&kernel, "k").unwrap();
        // A guest that panicked for another reason did not run under KVM.
        let qemu = stand_in(
            dir.path(),
            "host",
            "echo 'Kernel panic - not syncing: Attempted to kill init!' > \"$serial\"; exit 0",
            "exit 1",
        );
        let cache = dir.path().join("cache");
        assert!(matches!(
            verified(&qemu, &kernel, &cache),
            Accel::Tcg { .. }
        ));
        // A QEMU killed from outside (a terminal's Ctrl-C, the OOM killer) is no verdict: not
        // kept. (SIGKILL: a SIGINT may be ignored where the test runs, as in a background job.)
        let killed = tempfile::tempdir().unwrap();
        let qemu = stand_in(killed.path(), "none", "exit 0", "kill -KILL $$; sleep 5");
        let cache = killed.path().join("cache");
        let Accel::Tcg { why } = verified(&qemu, &kernel, &cache) else {
            panic!("KVM chosen");
        };
        assert!(
            why.ends_with("not kept, so the next VM tries again"),
            "{why}"
        );
        assert!(!cache.join("accel.json").exists());
    }
}
