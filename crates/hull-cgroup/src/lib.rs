//! Memory, pids and CPU caps for one box, through cgroup v2, cgroup v1, or a hybrid of both.
//!
//! [`Host::detect`] works out, once per process, where each controller lives and under which
//! cgroup box cgroups go. [`Host::create`] makes a box's cgroup(s) and writes its [`Limits`]; a
//! limit the host cannot enforce is recorded in [`BoxCgroup::unenforced`] rather than failing, so
//! boxes still run (with a warning) where cgroups are not delegated. The box's first process joins
//! with [`join_from_child`], which is async-signal-safe for use right after clone.

mod boxcg;
mod create;
mod error;
mod fsops;
mod host;
mod parse;
mod report;
mod sys;
mod v2;

use std::fmt;

pub use boxcg::BoxCgroup;
pub use error::CgroupError;
pub use fsops::{DirOps, RealDirs};
pub use host::{Host, Probe};
pub use report::ControllerReport;
pub use sys::{join_from_child, JoinError};

/// Caps for one box. `None` leaves a resource unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// RAM cap in bytes; swap is capped too so it cannot be used to escape.
    pub memory_bytes: Option<u64>,
    /// Maximum number of tasks (processes and threads) in the box.
    pub pids: Option<u64>,
    /// CPU bandwidth in thousandths of a CPU: 1000 is one full CPU, 250 a quarter. Values below
    /// 10 are raised to 10, the kernel's smallest quota (1 ms per 100 ms period).
    pub cpu_millis: Option<u64>,
}

impl Limits {
    pub fn get(&self, c: Controller) -> Option<u64> {
        match c {
            Controller::Memory => self.memory_bytes,
            Controller::Pids => self.pids,
            Controller::Cpu => self.cpu_millis,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// The kernel's name for the controller, in v1 and v2 alike.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Controller::Memory => 0,
            Controller::Pids => 1,
            Controller::Cpu => 2,
        }
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
