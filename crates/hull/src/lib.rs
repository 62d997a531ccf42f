//! hull: the Sandbox model over hull-box.
//!
//! A [`Sandbox`] is a session of boxes sharing one workspace directory: each call is still a
//! fresh box (from hull-box), but `/workspace` persists, a setup box can install dependencies
//! once into `/deps` (the only network window), files can be read and written from the host
//! side without following anything the box planted ([`files`]), the workspace can be snapshot
//! and restored ([`archive`]), Python cells return notebook-style rich results through an
//! in-box runner that talks over a private socket ([`cell`]), kernels keep one interpreter warm
//! across cells, and prewarmed boxes take calls with the interpreter already started.

pub mod archive;
pub mod backend;
pub mod boxspec;
pub mod calltrace;
pub mod cell;
pub mod error;
pub mod files;
mod hostpath;
mod runner_code;
pub mod sandbox;
mod session_dirs;
mod staging;
pub mod vm_backend;
mod vm_files;
mod vm_ids;
mod vm_warm;

pub use backend::Backend;
pub use error::SandboxError;
pub use hull_api::{Language, SandboxRequest};
pub use sandbox::{CallOptions, ExecResult, Kernel, KernelChannel, PrewarmStats, Sandbox};
pub use vm_backend::VmBackend;
