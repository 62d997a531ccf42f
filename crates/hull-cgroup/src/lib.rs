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
mod layout;
mod limits;
mod parse;
mod report;
mod sys;
mod v2;

pub use boxcg::BoxCgroup;
pub use error::CgroupError;
pub use fsops::{DirOps, RealDirs};
pub use host::{Host, Probe};
pub use layout::{BackendKind, CgroupVersion};
pub use limits::{Controller, Limits};
pub use report::ControllerReport;
pub use sys::{join_from_child, JoinError};
