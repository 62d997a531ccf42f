//! The host's cgroup layout in words: which file systems it mounts ([`BackendKind`]), the
//! version each controller is used through ([`CgroupVersion`]), and where box cgroups are placed
//! from ([`Origin`]). A leaf module.

/// Which cgroup filesystems the host mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// Only v1 hierarchies.
    V1,
    /// Only a cgroup2 filesystem (a named v1 hierarchy like `name=systemd` aside).
    V2,
    /// v1 controller hierarchies and a cgroup2 filesystem side by side.
    Hybrid,
}

/// The cgroup version a controller is used through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    pub(crate) fn label(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        }
    }
}

/// Where box cgroups are placed from: this process's own cgroups or `HULL_CGROUP_PARENT`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin<'a> {
    Own,
    /// The override, validated and stripped of surrounding slashes.
    Override(&'a str),
}
