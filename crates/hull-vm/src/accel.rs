//! Which accelerator a VM runs under. KVM when this host's `/dev/kvm` can run a standard guest
//! kernel; QEMU's TCG (software emulation: seconds to boot, but real) otherwise. A `/dev/kvm`
//! is not enough: nested hosts such as `kvm_pvm` (software nested virtualization, no `vmx` or
//! `svm` CPU flag) offer a `/dev/kvm` on which an ordinary guest kernel's ring-0 code is
//! emulated instruction by instruction and dies (docs/vm.md).

use std::path::Path;

/// The accelerator chosen for this host, with why when it is not KVM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accel {
    /// KVM, with QEMU's `-cpu` model (`host`, or without a feature a nested host lacks:
    /// [`crate::kvm_probe`]).
    Kvm { cpu: &'static str },
    /// Software emulation; `why` says why KVM was not used.
    Tcg { why: String },
}

impl Accel {
    pub fn name(&self) -> &'static str {
        match self {
            Accel::Kvm { .. } => "kvm",
            Accel::Tcg { .. } => "tcg",
        }
    }
}

/// Decides from what the host shows: its CPU flags (`/proc/cpuinfo`), whether `/dev/kvm`
/// opens for reading and writing, and whether the KVM module is `kvm_pvm`. Reads three small
/// files, so it is asked per VM; KVM here means KVM may work, which [`crate::kvm_probe`]
/// then tries once.
pub fn probe() -> Accel {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    decide(
        &cpuinfo,
        kvm.as_ref().map(|_| ()).map_err(|e| e.to_string()),
        Path::new("/sys/module/kvm_pvm").exists(),
    )
}

/// The decision, apart from the files it reads.
pub fn decide(cpuinfo: &str, kvm: Result<(), String>, pvm: bool) -> Accel {
    if let Err(e) = kvm {
        return Accel::Tcg {
            why: format!("/dev/kvm cannot be opened ({e})"),
        };
    }
    if pvm {
        return Accel::Tcg {
            why: "/dev/kvm is kvm_pvm (software nested virtualization), which cannot run a standard guest kernel".into(),
        };
    }
    let virt = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
    if virt {
        Accel::Kvm { cpu: "host" }
    } else {
        Accel::Tcg {
            why: "the CPU shows no hardware virtualization (vmx or svm)".into(),
        }
    }
}

/// The host's TSC frequency in kHz, which an emulated guest's TSC runs at (QEMU's TCG reads
/// the host's counter). The guest is told it (`tsc_early_khz`) instead of measuring it against
/// its emulated PIT: with several VMs sharing the host's CPUs that measurement fails and the
/// guest kernel then hangs before init (seen here with four VMs on two cores; docs/vm.md).
/// `None` when the host does not say, or its TSC is not constant.
pub fn host_tsc_khz() -> Option<u64> {
    if let Some(khz) = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/tsc_freq_khz")
        .ok()
        .and_then(|t| t.trim().parse().ok())
    {
        return Some(khz);
    }
    tsc_khz_of(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default())
}

/// The TSC frequency `/proc/cpuinfo` shows: its first `cpu MHz`, when the CPU has a constant TSC.
pub fn tsc_khz_of(cpuinfo: &str) -> Option<u64> {
    let constant = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "constant_tsc"));
    if !constant {
        return None;
    }
    let mhz: f64 = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("cpu MHz"))
        .and_then(|v| v.trim_start_matches([' ', '\t', ':']).trim().parse().ok())?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a positive frequency
    let khz = (mhz * 1000.0).round() as u64;
    (khz > 0).then_some(khz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kvm_only_with_a_usable_device_a_virtualizing_cpu_and_no_pvm() {
        let vmx = "processor\t: 0\nflags\t\t: fpu vme vmx sse\n";
        let plain = "processor\t: 0\nflags\t\t: fpu vme sse\n";
        assert_eq!(decide(vmx, Ok(()), false), Accel::Kvm { cpu: "host" });
        assert!(matches!(decide(vmx, Ok(()), true), Accel::Tcg { why } if why.contains("kvm_pvm")));
        assert!(matches!(decide(plain, Ok(()), false), Accel::Tcg { why } if why.contains("vmx")));
        assert!(matches!(
            decide(vmx, Err("No such file or directory".into()), false),
            Accel::Tcg { why } if why.contains("/dev/kvm cannot be opened")
        ));
    }

    #[test]
    fn the_tsc_frequency_only_from_a_constant_tsc() {
        let info = "processor\t: 0\ncpu MHz\t\t: 2100.000\nflags\t\t: fpu constant_tsc\n";
        assert_eq!(tsc_khz_of(info), Some(2_100_000));
        assert_eq!(tsc_khz_of(&info.replace("constant_tsc", "tsc")), None);
        assert_eq!(tsc_khz_of("flags\t: constant_tsc\n"), None);
    }
}
