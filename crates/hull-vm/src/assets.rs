//! What a VM is made of and where hull finds it: the guest (kernel, modules, and hull's static
//! binary as the guest's init) and the host's tools (QEMU, virtiofsd). Each is looked up once
//! per VM, from an environment variable first, then from the places `scripts/vm-guest.sh` and
//! the packages install to; a missing piece is an error naming the variable and the fix.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::VmError;

/// The guest: a kernel, the modules its init loads (in order) and the agent binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guest {
    pub kernel: PathBuf,
    pub modules: Vec<PathBuf>,
    /// hull itself, linked statically (the initramfs has no loader or libraries).
    pub agent: PathBuf,
}

/// The host's programs that run a VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tools {
    pub qemu: PathBuf,
    pub virtiofsd: PathBuf,
}

/// Directories searched for `vmlinuz` and `modules.order` (after `$HULL_VM_KERNEL`'s): beside
/// hull (`<prefix>/bin/hull` -> `<prefix>/lib/hull/vm`), then the system's.
fn guest_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(prefix) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(Path::to_path_buf))
    {
        dirs.push(prefix.join("lib/hull/vm"));
    }
    dirs.push("/usr/local/lib/hull/vm".into());
    dirs.push("/usr/lib/hull/vm".into());
    dirs
}

impl Guest {
    /// The guest as this host has it: `$HULL_VM_KERNEL` (a kernel image, with its
    /// `modules.order` and `modules/` beside it) or the first of the usual directories that
    /// holds one; `$HULL_VM_AGENT` or this executable when it is static.
    pub fn find() -> Result<Guest, VmError> {
        let kernel = match std::env::var_os("HULL_VM_KERNEL") {
            Some(k) => {
                let k = PathBuf::from(k);
                if !k.is_file() {
                    return Err(VmError::Missing {
                        what: "the guest kernel",
                        looked: format!("HULL_VM_KERNEL={}", k.display()),
                        fix: "point HULL_VM_KERNEL at a kernel image, or unset it",
                    });
                }
                k
            }
            None => guest_dirs()
                .into_iter()
                .map(|d| d.join("vmlinuz"))
                .find(|k| k.is_file())
                .ok_or_else(|| VmError::Missing {
                    what: "the guest kernel",
                    looked: guest_dirs()
                        .iter()
                        .map(|d| d.join("vmlinuz").display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    fix: "run scripts/vm-guest.sh (Debian's cloud kernel, extracted), or set HULL_VM_KERNEL",
                })?,
        };
        let dir = kernel.parent().unwrap_or(Path::new("/"));
        let modules = read_order(dir)?;
        let agent = match std::env::var_os("HULL_VM_AGENT") {
            Some(a) => PathBuf::from(a),
            None => std::env::current_exe().map_err(|e| VmError::Io {
                step: "finding hull's own executable",
                source: e,
            })?,
        };
        if !is_static(&agent)? {
            return Err(VmError::AgentNotStatic { path: agent });
        }
        Ok(Guest {
            kernel,
            modules,
            agent,
        })
    }
}

/// The modules named in `dir/modules.order`, one file name per line, from `dir/modules/`.
fn read_order(dir: &Path) -> Result<Vec<PathBuf>, VmError> {
    let order = dir.join("modules.order");
    let text = match fs::read_to_string(&order) {
        Ok(t) => t,
        // A kernel with everything built in needs none.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(VmError::Io {
                step: "reading the guest's modules.order",
                source: e,
            })
        }
    };
    let mut out = Vec::new();
    for name in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if name.contains('/') || name.starts_with('.') {
            return Err(VmError::BadAsset {
                path: order.clone(),
                why: format!("{name:?} is not a file name in modules/"),
            });
        }
        let m = dir.join("modules").join(name);
        if !m.is_file() {
            return Err(VmError::BadAsset {
                path: order.clone(),
                why: format!("it names {}, which is missing", m.display()),
            });
        }
        out.push(m);
    }
    Ok(out)
}

/// Whether the ELF executable at `path` needs no program interpreter (the dynamic loader):
/// only such a binary runs as the first program of an initramfs that holds nothing else.
pub fn is_static(path: &Path) -> Result<bool, VmError> {
    let io = |source| VmError::Io {
        step: "reading the agent binary",
        source,
    };
    let mut head = Vec::new();
    fs::File::open(path)
        .map_err(io)?
        .take(1 << 20)
        .read_to_end(&mut head)
        .map_err(io)?;
    let bad = |why: &str| VmError::BadAsset {
        path: path.to_path_buf(),
        why: why.to_owned(),
    };
    // ELF64, little-endian: e_phoff at 0x20, e_phentsize at 0x36, e_phnum at 0x38.
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(head[0x20..0x28].try_into().unwrap_or_default());
    let phoff = usize::try_from(phoff).map_err(|_| bad("program headers out of range"))?;
    let (entsize, count) = (u16_at(0x36), u16_at(0x38));
    for i in 0..count {
        let at = phoff + i * entsize;
        let Some(kind) = head.get(at..at + 4) else {
            return Err(bad("program headers past the first MiB"));
        };
        // PT_INTERP
        if kind == 3u32.to_le_bytes() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The first of `names` that is an executable file, each name either a path or looked up in
/// `$PATH`.
fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    for n in names {
        if n.contains('/') {
            if Path::new(n).is_file() {
                return Some(PathBuf::from(n));
            }
            continue;
        }
        for dir in std::env::split_paths(&path) {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

impl Tools {
    /// QEMU (`$HULL_QEMU`, else `qemu-system-x86_64` on `$PATH`) and virtiofsd
    /// (`$HULL_VIRTIOFSD`, else `virtiofsd` on `$PATH` or where distributions put it).
    pub fn find() -> Result<Tools, VmError> {
        let pick = |var: &'static str, names: &[&'static str], fix: &'static str| {
            if let Some(v) = std::env::var_os(var) {
                return Ok(PathBuf::from(v));
            }
            which(names).ok_or_else(|| VmError::Missing {
                what: names[0],
                looked: format!("${var}, then {}", names.join(", ")),
                fix,
            })
        };
        Ok(Tools {
            qemu: pick(
                "HULL_QEMU",
                &["qemu-system-x86_64"],
                "install QEMU (Debian: apt-get install qemu-system-x86) or set HULL_QEMU",
            )?,
            virtiofsd: pick(
                "HULL_VIRTIOFSD",
                &[
                    "virtiofsd",
                    "/usr/libexec/virtiofsd",
                    "/usr/lib/qemu/virtiofsd",
                ],
                "install virtiofsd (cargo install virtiofsd, or your distribution's package) or set HULL_VIRTIOFSD",
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_executable_is_not_static_and_garbage_is_refused() {
        // This test binary is linked dynamically (it has an interpreter).
        let me = std::env::current_exe().unwrap();
        assert!(!is_static(&me).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk");
        fs::write(&junk, b"#!/bin/sh\n").unwrap();
        assert!(matches!(is_static(&junk), Err(VmError::BadAsset { .. })));
    }

    #[test]
    fn the_module_order_names_files_beside_it_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_order(dir.path()).unwrap(), Vec::<PathBuf>::new());
        fs::create_dir(dir.path().join("modules")).unwrap();
        fs::write(dir.path().join("modules/a.ko.xz"), b"").unwrap();
        fs::write(dir.path().join("modules.order"), "a.ko.xz\n\n").unwrap();
        assert_eq!(
            read_order(dir.path()).unwrap(),
            vec![dir.path().join("modules/a.ko.xz")]
        );
        for bad in ["../a.ko.xz\n", "b.ko.xz\n"] {
            fs::write(dir.path().join("modules.order"), bad).unwrap();
            assert!(matches!(
                read_order(dir.path()),
                Err(VmError::BadAsset { .. })
            ));
        }
    }
}
