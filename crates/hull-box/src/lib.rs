//! hull-box: one fresh, kernel-enforced box per call.
//!
//! A caller describes a box as a [`BoxSpec`]; [`Runtime::run`] validates it, builds a
//! [`plan::BoxPlan`] (the ordered setup steps), clones a child into new user, mount, pid, net, ipc,
//! uts and cgroup namespaces that executes the plan, and supervises it from outside until it ends.
//! This is the only crate of hull that forks into namespaces; every block of it the compiler
//! cannot check for memory safety is in the crate-private `sys` module (the raw system calls,
//! and `sys::child`, the processes hull clones), each with a `SAFETY:` comment.

pub mod assemble;
pub mod budgets;
pub mod caps;
mod channel;
mod cputime;
mod ending;
mod engine;
pub mod error;
pub mod field;
pub mod helper_cgroup;
mod launch;
pub mod leftovers;
mod outcome;
pub mod owner;
pub mod plan;
mod poison;
pub mod proto;
mod ready;
pub mod remap;
mod resident;
mod resources;
pub mod result;
mod runtime;
pub mod sensitive;
pub mod size;
mod spares;
pub mod spec;
pub mod split;
mod steplog;
pub mod subids;
mod sys;
pub mod tap;
mod template;
pub mod trace;
pub mod unenforced;
mod verdict;
pub mod warm;
mod watch;

pub use ending::spawn_helper;
pub use error::BoxError;
pub use field::SpecField;
pub use proto::resident::Ids as ResidentIds;
pub use resident::{Event as ResidentEvent, Program as ResidentProgram, Resident};
pub use resources::{Teardown, WorkspaceAhead};
pub use result::{Fault, FaultType, RunResult, Stats};
pub use runtime::{Runtime, Sweep};
pub use spec::{
    BindMount, BoxSpec, FuseServer, Network, RootSpec, Stdin, TmpfsMount, WritableRoot,
};
pub use sys::tap::configure_guest_links;
pub use sys::Errno;
pub use tap::{Handoff, Tap, TapHandler};
pub use unenforced::{Unenforced, UnenforcedCaps};
pub use verdict::signal_name;
pub use warm::{WarmOptions, WarmStats};
pub use watch::{NoSink, OutputSink, RunOptions, Stream};
