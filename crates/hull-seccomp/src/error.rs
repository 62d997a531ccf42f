//! [`SeccompError`]: why a rule list could not be compiled.

/// A rule list the filter cannot express.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeccompError {
    #[error("syscall {nr} is listed twice ({first} and {second})")]
    DuplicateSyscall {
        first: &'static str,
        second: &'static str,
        nr: i64,
    },
    #[error("rule {name}: syscall number {nr} cannot be filtered on this architecture")]
    InvalidSyscallNumber { name: &'static str, nr: i64 },
    #[error("rule {name}: errno {errno} is outside 1..=4095")]
    ErrnoOutOfRange { name: &'static str, errno: u16 },
    #[error("rule {name}: action {action} does not apply to this syscall")]
    ActionNotForSyscall {
        name: &'static str,
        action: &'static str,
    },
    #[error("filter would be {len} instructions, over the kernel's limit of 4096")]
    TooLong { len: usize },
}
