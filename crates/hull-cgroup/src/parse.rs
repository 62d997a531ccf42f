//! Parsers for the two `/proc` files detection reads: `/proc/self/mountinfo` (where each cgroup
//! hierarchy is mounted and which part of it the mount shows) and `/proc/self/cgroup` (which
//! cgroup this process is in, per hierarchy). Pure functions over text so they are unit-tested and
//! fuzzable; nothing here touches the filesystem.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use crate::error::CgroupError;

/// One mounted cgroup hierarchy (or one bind mount of part of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupMount {
    /// The mountinfo root field: which directory of the hierarchy appears at `mount_point`.
    pub root: String,
    pub mount_point: PathBuf,
    pub read_only: bool,
    pub version: MountVersion,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MountVersion {
    /// A v1 hierarchy and the super options naming its controllers (`memory`, `cpu`, `name=systemd`…).
    V1 {
        options: Vec<String>,
    },
    V2,
}

impl CgroupMount {
    /// Whether this is a v1 hierarchy with `controller` bound to it.
    pub fn has_v1_controller(&self, controller: &str) -> bool {
        match &self.version {
            MountVersion::V1 { options } => options.iter().any(|o| o == controller),
            MountVersion::V2 => false,
        }
    }

    /// Whether this v1 hierarchy carries any real controller (not just a named `name=systemd` one).
    pub fn is_v1_with_controllers(&self) -> bool {
        const KNOWN: &[&str] = &[
            "cpu",
            "cpuacct",
            "cpuset",
            "memory",
            "devices",
            "freezer",
            "net_cls",
            "blkio",
            "perf_event",
            "net_prio",
            "hugetlb",
            "pids",
            "rdma",
            "misc",
        ];
        KNOWN.iter().any(|c| self.has_v1_controller(c))
    }

    /// The directory under this mount that holds hierarchy path `path` (absolute within the
    /// hierarchy, as /proc/self/cgroup prints it), or `None` if the mount does not show it — a
    /// bind mount of a subtree, or a mount made outside our cgroup namespace (root `/..`).
    pub fn dir_for(&self, path: &str) -> Option<PathBuf> {
        let rel = if self.root == "/" {
            path
        } else if path == self.root {
            ""
        } else {
            path.strip_prefix(self.root.as_str())?.strip_prefix('/')?
        };
        let rel = rel.trim_start_matches('/');
        if rel.split('/').any(|c| c == "..") {
            return None;
        }
        Some(if rel.is_empty() {
            self.mount_point.clone()
        } else {
            self.mount_point.join(rel)
        })
    }
}

/// Extracts the cgroup and cgroup2 mounts from mountinfo text. Lines of other filesystems are
/// skipped without being validated; a cgroup line that is cut short is an error.
pub(crate) fn parse_mountinfo(text: &str) -> Result<Vec<CgroupMount>, CgroupError> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut right = right.split(' ');
        let fstype = right.next().unwrap_or("");
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let bad = |why| CgroupError::Parse {
            file: "mountinfo",
            line: line.to_owned(),
            why,
        };
        let _source = right.next().ok_or_else(|| bad("no mount source"))?;
        let super_options = right.next().ok_or_else(|| bad("no super options"))?;
        let fields: Vec<&str> = left.split(' ').collect();
        if fields.len() < 6 {
            return Err(bad("fewer than six fields before the separator"));
        }
        let root = unescape(fields[3]).ok_or_else(|| bad("bad escape in root"))?;
        let mount_point = unescape(fields[4]).ok_or_else(|| bad("bad escape in mount point"))?;
        let root = String::from_utf8(root).map_err(|_| bad("root is not UTF-8"))?;
        if mount_point.contains(&0) {
            return Err(bad("NUL in mount point"));
        }
        let read_only = fields[5].split(',').any(|o| o == "ro");
        let version = if fstype == "cgroup2" {
            MountVersion::V2
        } else {
            MountVersion::V1 {
                options: super_options.split(',').map(str::to_owned).collect(),
            }
        };
        mounts.push(CgroupMount {
            root,
            mount_point: PathBuf::from(OsString::from_vec(mount_point)),
            read_only,
            version,
        });
    }
    Ok(mounts)
}

/// Undoes mountinfo's octal escapes (`\040` for a space and so on).
fn unescape(field: &str) -> Option<Vec<u8>> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            let digits = bytes.get(i + 1..i + 4)?;
            let mut value: u32 = 0;
            for d in digits {
                if !(b'0'..=b'7').contains(d) {
                    return None;
                }
                value = value * 8 + u32::from(d - b'0');
            }
            out.push(u8::try_from(value).ok()?);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// This process's cgroup membership as /proc/self/cgroup lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProcCgroups {
    /// `N:ctrl,ctrl:/path` lines: the controllers of hierarchy N and our path in it.
    pub v1: Vec<(Vec<String>, String)>,
    /// The `0::/path` line, if a cgroup2 hierarchy exists.
    pub v2: Option<String>,
}

impl ProcCgroups {
    /// Our path in the v1 hierarchy that carries `controller`.
    pub fn v1_path(&self, controller: &str) -> Option<&str> {
        self.v1
            .iter()
            .find(|(ctrls, _)| ctrls.iter().any(|c| c == controller))
            .map(|(_, path)| path.as_str())
    }
}

pub(crate) fn parse_proc_cgroup(text: &str) -> Result<ProcCgroups, CgroupError> {
    let mut out = ProcCgroups::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = |why| CgroupError::Parse {
            file: "/proc/self/cgroup",
            line: line.to_owned(),
            why,
        };
        let mut parts = line.splitn(3, ':');
        let id = parts.next().unwrap_or("");
        let ctrls = parts.next().ok_or_else(|| bad("no controller field"))?;
        let path = parts.next().ok_or_else(|| bad("no path field"))?;
        if !path.starts_with('/') {
            return Err(bad("path is not absolute"));
        }
        if id.parse::<u32>().is_err() {
            return Err(bad("hierarchy id is not a number"));
        }
        if id == "0" && ctrls.is_empty() {
            out.v2 = Some(path.to_owned());
        } else {
            out.v1.push((
                ctrls.split(',').map(str::to_owned).collect(),
                path.to_owned(),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd ro,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:40 /foo\\040bar /mnt/with\\040space rw - cgroup cgroup rw,pids
";

    #[test]
    fn mountinfo_finds_v1_and_v2_mounts() {
        let m = parse_mountinfo(HYBRID).unwrap();
        assert_eq!(m.len(), 5);
        assert!(m[0].has_v1_controller("cpu") && m[0].has_v1_controller("cpuacct"));
        assert_eq!(
            m[0].mount_point,
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")
        );
        assert!(m[1].has_v1_controller("memory") && !m[1].has_v1_controller("pids"));
        assert!(m[2].read_only && !m[2].is_v1_with_controllers());
        assert_eq!(m[3].version, MountVersion::V2);
        assert_eq!(m[4].root, "/foo bar");
        assert_eq!(m[4].mount_point, PathBuf::from("/mnt/with space"));
    }

    #[test]
    fn truncated_cgroup_line_is_an_error_other_lines_are_skipped() {
        assert!(parse_mountinfo("garbage\n1 2 3 - ext4 /dev/x\n")
            .unwrap()
            .is_empty());
        assert!(parse_mountinfo("1 2 0:1 / - cgroup2 cgroup2 rw\n").is_err());
        assert!(parse_mountinfo("1 2 0:1 / /x rw - cgroup\n").is_err());
        assert!(parse_mountinfo("1 2 0:1 /\\09 /x rw - cgroup2 c rw\n").is_err());
    }

    #[test]
    fn dir_for_honours_the_mount_root() {
        let mount = |root: &str| CgroupMount {
            root: root.into(),
            mount_point: "/m".into(),
            read_only: false,
            version: MountVersion::V2,
        };
        assert_eq!(mount("/").dir_for("/a/b"), Some("/m/a/b".into()));
        assert_eq!(mount("/").dir_for("/"), Some("/m".into()));
        assert_eq!(mount("/a").dir_for("/a/b"), Some("/m/b".into()));
        assert_eq!(mount("/a").dir_for("/a"), Some("/m".into()));
        assert_eq!(mount("/a").dir_for("/ab/c"), None);
        assert_eq!(mount("/..").dir_for("/x"), None);
        assert_eq!(mount("/").dir_for("/a/../b"), None);
    }

    #[test]
    fn proc_cgroup_lines() {
        let p = parse_proc_cgroup(
            "9:name=systemd:/\n4:memory:/process_api/x\n2:cpu,cpuacct:/\n0::/user.slice/a:b\n",
        )
        .unwrap();
        assert_eq!(p.v1_path("memory"), Some("/process_api/x"));
        assert_eq!(p.v1_path("cpuacct"), Some("/"));
        assert_eq!(p.v1_path("pids"), None);
        assert_eq!(p.v2.as_deref(), Some("/user.slice/a:b"));
        assert!(parse_proc_cgroup("4:memory\n").is_err());
        assert!(parse_proc_cgroup("x:memory:/\n").is_err());
        assert!(parse_proc_cgroup("0::relative\n").is_err());
    }
}
