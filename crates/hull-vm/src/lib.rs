//! hull's microVM tier (issue 20, docs/vm.md): a program run under a guest kernel of its own.
//! The host side finds the guest (kernel, modules, hull's static binary as its init), builds
//! the initramfs, starts the VMM (QEMU `microvm` first) with virtio-fs shares served by
//! virtiofsd and an agent channel over virtio-serial, and drives the guest's init over that
//! channel (`proto`). The guest side (`guest`) is hull as PID 1 of the VM. Depends on no hull
//! crate: the `hull` crate puts it behind the engine's Backend seam.

pub mod accel;
pub mod assets;
pub mod error;
pub mod guest;
pub mod initramfs;
pub mod kvm_probe;
mod leftovers;
pub mod proto;
pub mod qemu;
pub mod share;
mod sys;
pub mod vm;

pub use accel::Accel;
pub use error::VmError;
pub use vm::{run, run_linked, VmFile, VmMount, VmNet, VmOutcome, VmRun};
