//! hull's seccomp layer: a deny-by-default allowlist kept as reviewed data in
//! `policy/default.policy`, compiled to classic BPF, plus the supervisor's helpers for
//! `SECCOMP_RET_USER_NOTIF`.
//!
//! Flow: [`compile`] the [`default_policy`] into a [`Program`]; in the box's child, after
//! [`set_no_new_privs`], [`install_raw`] it (async-signal-safe) just before `execve`; with
//! [`KillMode::UserNotif`] the supervisor reads [`recv_notification`] from the listener fd,
//! names the syscall with [`syscall_name`], and kills the box. [`evaluate`] answers what a
//! program does for one syscall without installing it; [`probe`] says what the kernel offers.

mod arch;
mod args;
mod bpf;
mod error;
mod eval;
mod install;
mod notify;
mod policy;
#[cfg(test)]
mod policy_file;

pub use arch::{
    AUDIT_ARCH_AARCH64, AUDIT_ARCH_I386, AUDIT_ARCH_NATIVE, AUDIT_ARCH_X86_64,
    CLONE_NAMESPACE_FLAGS, TIOCLINUX, TIOCSTI, X32_SYSCALL_BIT,
};
pub use bpf::{compile, CompileOptions, KillMode, Program, MAX_INSTRUCTIONS};
pub use error::SeccompError;
pub use eval::evaluate;
pub use install::{install_raw, probe, set_no_new_privs, Support};
pub use notify::{recv_notification, respond_errno, Notification};
pub use policy::{default_policy, syscall_name, Action, Rule};
