//! [`Host::create`]: the per-box hot path. A mkdir per hierarchy used and a handful of writes; no
//! directory scans. Limits that cannot be written are recorded, not fatal.

use std::io;
use std::path::{Path, PathBuf};

use crate::boxcg::{BoxCgroup, BoxDir};
use crate::error::CgroupError;
use crate::fsops::{write_reason, write_value};
use crate::host::{Host, Placement};
use crate::layout::CgroupVersion;
use crate::limits::{Controller, Limits};
use crate::report::FIX_DELEGATE;
use crate::sys;

/// v1 and v2 CFS period hull uses, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;
/// The kernel rejects quotas below 1 ms.
const CPU_MIN_QUOTA_US: u64 = 1_000;

impl Host {
    /// Creates the box cgroup(s) named `name` and writes `limits`.
    ///
    /// One directory per v1 hierarchy used and at most one v2 directory. The pids controller is
    /// always used (it tracks the box's processes for `kill_all` and `is_empty`); memory and cpu
    /// only when their limit is set. Fails only for a bad name, an existing box of that name, or
    /// an unrepresentable path; anything else lands in [`BoxCgroup::unenforced`].
    pub fn create(&self, name: &str, limits: &Limits) -> Result<BoxCgroup, CgroupError> {
        validate_name(name)?;
        let mut unenforced: Vec<(Controller, String)> = Vec::new();
        let mut groups: Vec<(PathBuf, CgroupVersion, Vec<Controller>)> = Vec::new();
        for c in Controller::ALL {
            let limit = limits.get(c);
            if limit.is_none() && c != Controller::Pids {
                continue;
            }
            let (parent, version) = match &self.placements[c.index()] {
                Placement::Unavailable(problem) => {
                    if limit.is_some() {
                        unenforced.push((c, problem.to_string()));
                    }
                    continue;
                }
                Placement::V1 { parent } => (parent.clone(), CgroupVersion::V1),
                Placement::V2 => {
                    let failed = self.prepare_v2().iter().find(|(f, _)| *f == c);
                    match (failed, &self.v2) {
                        (None, Some(v2)) => (v2.boxes_in.clone(), CgroupVersion::V2),
                        (Some((_, why)), _) => {
                            if limit.is_some() {
                                unenforced.push((c, why.clone()));
                            }
                            continue;
                        }
                        (None, None) => continue,
                    }
                }
            };
            match groups.iter_mut().find(|(p, _, _)| *p == parent) {
                Some((_, _, controllers)) => controllers.push(c),
                None => groups.push((parent, version, vec![c])),
            }
        }

        let mut cgroup = BoxCgroup::new(self.dirs.clone());
        for (parent, version, controllers) in groups {
            let path = parent.join(name);
            match self.dirs.mkdir(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    drop(cgroup);
                    return Err(CgroupError::Exists { path });
                }
                Err(e) => {
                    for c in controllers.into_iter().filter(|&c| limits.get(c).is_some()) {
                        unenforced.push((
                            c,
                            format!("creating {}: {e}; fix: {FIX_DELEGATE}", path.display()),
                        ));
                    }
                    continue;
                }
            }
            // v1: the box's first process joins through `tasks`, which moves just the calling
            // thread. The kernel then skips the global threadgroup rwsem that a `cgroup.procs`
            // write takes, whose RCU grace period cost ~5-10 ms per box here. The joining process
            // is single-threaded, and its children inherit the cgroup, so the effect is the same.
            // v2 domain cgroups only accept `cgroup.procs`.
            let procs = match version {
                CgroupVersion::V1 => path.join("tasks"),
                CgroupVersion::V2 => path.join("cgroup.procs"),
            };
            let Some(procs_c) = sys::c_path(&procs) else {
                cgroup.push_dir(
                    BoxDir {
                        path,
                        version,
                        controllers: Vec::new(),
                    },
                    None,
                );
                return Err(CgroupError::NulInPath { path: procs });
            };
            let controllers = self.dir_controllers(version, controllers);
            for &c in &controllers {
                if let Some(value) = limits.get(c) {
                    match write_limit(&path, version, c, value) {
                        Ok(()) => cgroup.mark_enforced(c),
                        Err(why) => unenforced.push((c, why)),
                    }
                }
            }
            cgroup.push_dir(
                BoxDir {
                    path,
                    version,
                    controllers,
                },
                Some(procs_c),
            );
        }
        cgroup.set_unenforced(unenforced);
        Ok(cgroup)
    }

    /// The controllers a new directory serves: in v2 every controller the parent enables (so the
    /// stats of unlimited ones are still there), in v1 those of its hierarchy that we asked for.
    fn dir_controllers(&self, version: CgroupVersion, asked: Vec<Controller>) -> Vec<Controller> {
        if version == CgroupVersion::V1 {
            return asked;
        }
        let failed = self.prepare_v2();
        Controller::ALL
            .into_iter()
            .filter(|&c| matches!(self.placements[c.index()], Placement::V2))
            .filter(|c| !failed.iter().any(|(f, _)| f == c))
            .collect()
    }
}

/// A box name is one plain directory name: it cannot climb out of its parent, hide as a dotfile,
/// or collide with control files that contain dots in awkward places.
pub(crate) fn validate_name(name: &str) -> Result<(), CgroupError> {
    let bad = |why| {
        Err(CgroupError::InvalidName {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() || name.len() > 200 {
        return bad("must be 1 to 200 bytes long");
    }
    if name.contains('/') {
        return bad("must not contain `/`");
    }
    if name.contains("..") {
        return bad("must not contain `..`");
    }
    if name.starts_with('.') {
        return bad("must not start with `.`");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.@:".contains(&b))
    {
        return bad("may contain only ASCII letters, digits and `-_.@:`");
    }
    Ok(())
}

/// Writes one controller's limit into a fresh box directory.
fn write_limit(
    dir: &Path,
    version: CgroupVersion,
    c: Controller,
    value: u64,
) -> Result<(), String> {
    match (c, version) {
        (Controller::Memory, CgroupVersion::V1) => {
            write_reason(&dir.join("memory.limit_in_bytes"), &value.to_string())?;
            // Absent without swap accounting; there the RAM limit is all there is to set.
            optional(&dir.join("memory.memsw.limit_in_bytes"), &value.to_string())
        }
        (Controller::Memory, CgroupVersion::V2) => {
            write_reason(&dir.join("memory.max"), &value.to_string())?;
            optional(&dir.join("memory.swap.max"), "0")
        }
        (Controller::Pids, _) => write_reason(&dir.join("pids.max"), &value.to_string()),
        (Controller::Cpu, CgroupVersion::V1) => {
            write_reason(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
            write_reason(
                &dir.join("cpu.cfs_quota_us"),
                &cpu_quota_us(value).to_string(),
            )
        }
        (Controller::Cpu, CgroupVersion::V2) => write_reason(
            &dir.join("cpu.max"),
            &format!("{} {CPU_PERIOD_US}", cpu_quota_us(value)),
        ),
    }
}

/// Writes a control file that may legitimately not exist; any other failure is real.
fn optional(path: &Path, value: &str) -> Result<(), String> {
    match write_value(path, value) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(format!(
            "writing {value:?} to {}: {e} (swap is not capped)",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// Quota per 100 ms period for `millis` thousandths of a CPU.
pub(crate) fn cpu_quota_us(millis: u64) -> u64 {
    millis
        .saturating_mul(CPU_PERIOD_US / 1000)
        .max(CPU_MIN_QUOTA_US)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["hull-123-4", "a", "box_1.x", "u@1:2"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "..",
            "a..b",
            ".hidden",
            "sp ace",
            "nul\0",
            "new\nline",
            &"x".repeat(201),
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cpu_quota() {
        assert_eq!(cpu_quota_us(1000), 100_000);
        assert_eq!(cpu_quota_us(250), 25_000);
        assert_eq!(cpu_quota_us(2500), 250_000);
        assert_eq!(cpu_quota_us(0), 1_000);
        assert_eq!(cpu_quota_us(u64::MAX), u64::MAX);
    }
}
