//! The fields of a [`crate::BoxSpec`] an error can be about. Errors carry one of these instead of
//! a front end's spelling: each front end names it its own way (`--mount` in `hull run`, `mounts`
//! in `hull serve` and the SDKs, a `HULL_MCP_*` variable in `hull mcp`). A leaf module: it
//! imports nothing, so every module may use it.

use std::fmt;

/// A field of the box's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecField {
    /// The program and its arguments.
    Command,
    Env,
    /// The read-only root: an image, or a root filesystem directory.
    Root,
    Workspace,
    TmpSize,
    Tmpfs,
    Mounts,
    CapAdd,
    CapDrop,
    Memory,
    Pids,
    Cpus,
    Timeout,
    MaxOutput,
    Cwd,
    Hostname,
    Subids,
    RequireLimits,
    /// The box's network (none, host, the gateway).
    Network,
    /// The user the program runs as.
    User,
    /// What the program's standard input is.
    Stdin,
}

impl SpecField {
    /// The field's name in [`crate::BoxSpec`], for messages no front end spells.
    pub fn name(self) -> &'static str {
        match self {
            SpecField::Command => "argv",
            SpecField::Env => "env",
            SpecField::Root => "root",
            SpecField::Workspace => "workspace",
            SpecField::TmpSize => "tmp_size",
            SpecField::Tmpfs => "tmpfs",
            SpecField::Mounts => "mounts",
            SpecField::CapAdd => "cap_add",
            SpecField::CapDrop => "cap_drop",
            SpecField::Memory => "memory",
            SpecField::Pids => "pids",
            SpecField::Cpus => "cpus",
            SpecField::Timeout => "timeout",
            SpecField::MaxOutput => "max_output",
            SpecField::Cwd => "cwd",
            SpecField::Hostname => "hostname",
            SpecField::Subids => "subids",
            SpecField::RequireLimits => "require_limits",
            SpecField::Network => "network",
            SpecField::User => "user",
            SpecField::Stdin => "stdin",
        }
    }
}

impl fmt::Display for SpecField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
