//! Why a VM could not run a program: each error names the step or the missing piece and the
//! fix, and keeps its cause.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// A piece of the VM is not on this host.
    #[error("{what} was not found (looked at {looked}): {fix}")]
    Missing {
        what: &'static str,
        looked: String,
        fix: &'static str,
    },
    /// A piece of the VM is there but unusable.
    #[error("{}: {why}", path.display())]
    BadAsset { path: PathBuf, why: String },
    /// The guest's init must be a static hull.
    #[error("{} is linked dynamically and cannot be the guest's init (the initramfs holds no loader): set HULL_VM_AGENT to a static hull (scripts/build-static.sh makes one)", path.display())]
    AgentNotStatic { path: PathBuf },
    /// Run as host root without the host ids the guest's root takes on each share (hull's
    /// range or a share's owner): the guest would write them as host root.
    #[error("a VM run as host root needs the host ids its root takes on every share (hull's range, or a directory's owner), so it never writes as host root; none were given")]
    HostRoot,
    /// As host root, a share could not be given to its helper.
    #[error("{}: cannot be shared with the VM", path.display())]
    Share {
        path: PathBuf,
        #[source]
        error: crate::share::ShareError,
    },
    /// `--require-kvm` and KVM cannot run a standard guest here.
    #[error("KVM is required (--require-kvm) but cannot run this VM here: {why}")]
    KvmRequired { why: String },
    #[error("{step}")]
    Io {
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A process of the VM (QEMU, virtiofsd) failed or the guest did not come up: the step,
    /// and what the process or the guest's console said last.
    #[error("the VM failed while {step}{}", said(detail))]
    Start { step: &'static str, detail: String },
    /// The guest's init reported a failure.
    #[error("the guest failed while {step}: {error}")]
    Guest { step: String, error: String },
    /// The guest said something that is not a frame of the agent protocol.
    #[error("the guest's agent broke the protocol: {why}")]
    Protocol { why: String },
}

fn said(detail: &str) -> String {
    if detail.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", detail.trim())
    }
}
