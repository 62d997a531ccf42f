//! Compiles a list of [`Rule`]s into a classic-BPF seccomp [`Program`].
//!
//! Layout (every jump is a short forward jump, well inside the 8-bit `jt`/`jf` range):
//!
//! 1. `seccomp_data.arch` must be the native `AUDIT_ARCH`, else the kill action (a foreign
//!    ABI such as `int 0x80` would index a different syscall table). With
//!    [`KillMode::UserNotif`] the supervisor hears of it too, so a SIGSYS death the filter did
//!    not cause (`kill -SYS $$`) is not mistaken for a blocked escape.
//! 2. On x86_64, any nr with the x32 bit gets the kill action, except nr `-1` (what a tracer or
//!    `syscall(-1)` produces), which falls through to the default errno like the kernel's own
//!    ENOSYS.
//! 3. The syscall table split into runs of consecutive numbers with the same answer (a gap
//!    between rules answers the default, `ERRNO | default_errno`), found by a binary search
//!    over the runs' first numbers; the leaves of argument-checking rules (`clone`, `ioctl`,
//!    `socket`, the `chmod` family, `open`...) then look at their arguments.
//!    The kernel caches the always-allow answers per nr, so the tree is only walked for the
//!    rest.

use crate::arch::{
    arg_low_offset, AUDIT_ARCH_NATIVE, CLONE_NAMESPACE_FLAGS, OFFSET_ARCH, OFFSET_NR, TIOCLINUX,
    TIOCSTI,
};
use crate::args::{
    self, AF_NETLINK, NETLINK_ALLOWED, OPEN_CREATE_FLAGS, SETID_MODE_BITS, SOCKET_FAMILIES,
    SOCKET_FAMILY_ARG, SOCKET_PROTOCOL_ARG,
};
use crate::{Action, Rule, SeccompError};

/// Classic BPF opcodes (`<linux/bpf_common.h>`), as `u16` the way `sock_filter.code` holds them.
pub(crate) mod op {
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;
    pub const ALU: u16 = 0x04;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const MISC: u16 = 0x07;

    pub const W: u16 = 0x00;
    pub const IMM: u16 = 0x00;
    pub const ABS: u16 = 0x20;
    pub const MEM: u16 = 0x60;
    pub const LEN: u16 = 0x80;

    pub const ADD: u16 = 0x00;
    pub const SUB: u16 = 0x10;
    pub const MUL: u16 = 0x20;
    pub const DIV: u16 = 0x30;
    pub const OR: u16 = 0x40;
    pub const AND: u16 = 0x50;
    pub const LSH: u16 = 0x60;
    pub const RSH: u16 = 0x70;
    pub const NEG: u16 = 0x80;
    pub const MOD: u16 = 0x90;
    pub const XOR: u16 = 0xa0;

    pub const JA: u16 = 0x00;
    pub const JEQ: u16 = 0x10;
    pub const JGT: u16 = 0x20;
    pub const JGE: u16 = 0x30;
    pub const JSET: u16 = 0x40;

    pub const K: u16 = 0x00;
    pub const X: u16 = 0x08;
    pub const A: u16 = 0x10;

    pub const TAX: u16 = 0x00;
    pub const TXA: u16 = 0x80;
}

/// `BPF_MAXINSNS`: the kernel refuses longer programs.
pub const MAX_INSTRUCTIONS: usize = 4096;
/// The kernel's `MAX_ERRNO`; larger `SECCOMP_RET_DATA` values are clamped by it.
const MAX_ERRNO: u16 = 4095;

/// How rules with [`Action::Kill`] are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillMode {
    /// `SECCOMP_RET_USER_NOTIF`: the calling thread blocks, the supervisor holding the
    /// listener fd learns which syscall it was and kills the box. Install with
    /// `listener = true`; without a listener the kernel fails these calls with ENOSYS.
    UserNotif,
    /// `SECCOMP_RET_KILL_PROCESS`: the kernel kills the process with SIGSYS.
    KillProcess,
}

/// Knobs for [`compile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileOptions {
    pub kill_mode: KillMode,
    /// Errno for syscalls no rule names (1..=4095); ENOSYS makes programs fall back.
    pub default_errno: u16,
}

impl Default for CompileOptions {
    /// `KillProcess` (needs no supervisor) and ENOSYS.
    fn default() -> Self {
        Self {
            kill_mode: KillMode::KillProcess,
            default_errno: ENOSYS,
        }
    }
}

const ENOSYS: u16 = crate::policy::errno(libc::ENOSYS);
const EPERM: u16 = crate::policy::errno(libc::EPERM);
const EAFNOSUPPORT: u16 = crate::policy::errno(libc::EAFNOSUPPORT);
const EPROTONOSUPPORT: u16 = crate::policy::errno(libc::EPROTONOSUPPORT);

/// A compiled seccomp filter, at most [`MAX_INSTRUCTIONS`] long.
#[derive(Clone)]
pub struct Program {
    instructions: Vec<libc::sock_filter>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("len", &self.instructions.len())
            .finish_non_exhaustive()
    }
}

impl Program {
    /// The BPF instructions, in order.
    pub fn instructions(&self) -> &[libc::sock_filter] {
        &self.instructions
    }

    /// Installs this program as the calling thread's seccomp filter, with a user-notification
    /// listener when `listener` is true: [`crate::install_raw`] of [`Program::as_fprog`], made
    /// here from the program it points into, so no pointer outlives its program. Returns the
    /// listener descriptor (0 without one) or the errno. Async-signal-safe: no allocation, one
    /// system call. The caller has set no_new_privs.
    pub fn install(&self, listener: bool) -> Result<libc::c_int, libc::c_int> {
        let fprog = self.as_fprog();
        // SAFETY: `fprog` points at this program's instructions, `fprog.len` of them, which
        // `self` keeps alive and unchanged for the call.
        unsafe { crate::install_raw(&fprog, listener) }
    }

    /// The `sock_fprog` the kernel takes. It points into this `Program`'s buffer, so the
    /// `Program` must outlive every use of the fprog (moving the `Program` is fine).
    pub fn as_fprog(&self) -> libc::sock_fprog {
        libc::sock_fprog {
            // `compile` bounds the length by MAX_INSTRUCTIONS, so this never falls back.
            len: u16::try_from(self.instructions.len()).unwrap_or(0),
            // The kernel only reads through this pointer.
            filter: self.instructions.as_ptr().cast_mut(),
        }
    }
}

const fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(cond: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: op::JMP | cond | op::K,
        jt,
        jf,
        k,
    }
}

const fn load(offset: u32) -> libc::sock_filter {
    stmt(op::LD | op::W | op::ABS, offset)
}

const fn ret(value: u32) -> libc::sock_filter {
    stmt(op::RET | op::K, value)
}

fn ret_errno(errno: u16) -> libc::sock_filter {
    ret(libc::SECCOMP_RET_ERRNO | u32::from(errno))
}

fn check_errno(name: &'static str, errno: u16) -> Result<(), SeccompError> {
    if errno == 0 || errno > MAX_ERRNO {
        return Err(SeccompError::ErrnoOutOfRange { name, errno });
    }
    Ok(())
}

/// What the filter answers for one run of syscall numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Allow,
    Errno(u16),
    Kill,
    /// An argument-checking rule; neighbours merge only when they read the same arguments.
    Check(Check),
    /// No rule names these numbers: the default errno.
    Default,
}

/// An argument-checking action with the argument positions of its syscall resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    CloneNoNamespaces,
    IoctlNoTiocsti,
    SocketFamilies,
    /// [`Action::ModeNoSetId`]: the index of the mode argument.
    ModeNoSetId {
        mode: u32,
    },
    /// [`Action::OpenNoSetId`]: the indexes of the flags and mode arguments.
    OpenNoSetId {
        flags: u32,
        mode: u32,
    },
}

/// A maximal run of consecutive syscall numbers, from `first` up to the next run's `first`,
/// that all get the same answer.
#[derive(Debug, Clone, Copy)]
struct Run {
    first: u32,
    answer: Answer,
}

/// Turns rules sorted by nr into runs covering every number from 0 up: gaps between rules get
/// [`Answer::Default`], and neighbours with the same answer merge (the policy allows long
/// stretches of the syscall table, so ~350 rules become far fewer runs).
fn runs(rules: &[(u32, Answer)]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    let mut push = |first: u32, answer: Answer| match out.last() {
        // Equal answers emit the same code (a check carries its argument positions).
        Some(last) if last.answer == answer => {}
        _ => out.push(Run { first, answer }),
    };
    let mut next = 0u32;
    for &(nr, answer) in rules {
        if nr > next {
            push(next, Answer::Default);
        }
        push(nr, answer);
        next = nr.saturating_add(1);
    }
    push(next, Answer::Default);
    out
}

/// Emits the answer of one run (A = nr, known to lie in the run).
fn emit_answer(out: &mut Vec<libc::sock_filter>, answer: Answer, kill: u32, default_errno: u16) {
    match answer {
        Answer::Default => out.push(ret_errno(default_errno)),
        Answer::Allow => out.push(ret(libc::SECCOMP_RET_ALLOW)),
        Answer::Errno(e) => out.push(ret_errno(e)),
        Answer::Kill => out.push(ret(kill)),
        Answer::Check(check) => emit_check(out, check, kill),
    }
}

/// Emits an argument check (A = nr of its syscall). Every compare reads the low 32 bits of an
/// argument: each checked argument is an `int` or `umode_t` to the kernel, so the high bits
/// neither hide a value from the check nor change what the kernel does.
fn emit_check(out: &mut Vec<libc::sock_filter>, check: Check, kill: u32) {
    let allow = ret(libc::SECCOMP_RET_ALLOW);
    match check {
        Check::CloneNoNamespaces => out.extend([
            load(arg_low_offset(0)),
            jump(op::JSET, CLONE_NAMESPACE_FLAGS, 0, 1),
            ret(kill),
            allow,
        ]),
        Check::IoctlNoTiocsti => out.extend([
            load(arg_low_offset(1)),
            jump(op::JEQ, TIOCSTI, 2, 0),
            jump(op::JEQ, TIOCLINUX, 1, 0),
            allow,
            ret_errno(EPERM),
        ]),
        Check::SocketFamilies => {
            let [unix, inet, inet6] = SOCKET_FAMILIES;
            out.extend([
                load(arg_low_offset(SOCKET_FAMILY_ARG)),
                jump(op::JEQ, unix, 5, 0),
                jump(op::JEQ, inet, 4, 0),
                jump(op::JEQ, inet6, 3, 0),
                jump(op::JEQ, AF_NETLINK, 0, 3),
                load(arg_low_offset(SOCKET_PROTOCOL_ARG)),
                jump(op::JEQ, NETLINK_ALLOWED, 0, 2),
                allow,
                ret_errno(EAFNOSUPPORT),
                ret_errno(EPROTONOSUPPORT),
            ]);
        }
        Check::ModeNoSetId { mode } => out.extend([
            load(arg_low_offset(mode)),
            jump(op::JSET, SETID_MODE_BITS, 0, 1),
            ret_errno(EPERM),
            allow,
        ]),
        Check::OpenNoSetId { flags, mode } => out.extend([
            load(arg_low_offset(flags)),
            jump(op::JSET, OPEN_CREATE_FLAGS, 0, 3),
            load(arg_low_offset(mode)),
            jump(op::JSET, SETID_MODE_BITS, 0, 1),
            ret_errno(EPERM),
            allow,
        ]),
    }
}

/// Emits a binary search over the runs' first numbers (A = nr), with each run's answer at a
/// leaf. The kernel emulates the filter once per syscall number at install time to build its
/// always-allow cache, so install cost follows the depth of this tree times the table size:
/// with runs instead of one compare per rule (the older layout: ~800 instructions, ~190 us to
/// install here) the program is a few hundred instructions and each walk about log2(runs)
/// compares. It also converts and JIT-compiles the whole program, so length counts too: an
/// inner node is one `jge K` whose `jt` skips the left half when that half is under 256
/// instructions (jt/jf offsets are 8 bits), else `jge K` plus a 32-bit `ja`.
fn emit_tree(out: &mut Vec<libc::sock_filter>, runs: &[Run], kill: u32, default_errno: u16) {
    if let [only] = runs {
        emit_answer(out, only.answer, kill, default_errno);
        return;
    }
    let mid = runs.len() / 2;
    let mut left = Vec::new();
    emit_tree(&mut left, &runs[..mid], kill, default_errno);
    let first_right = runs[mid].first;
    match u8::try_from(left.len()) {
        // nr >= K: jump over the left half to the right; else fall into the left.
        Ok(skip) => out.push(jump(op::JGE, first_right, skip, 0)),
        // nr >= K: fall through to the `ja` that reaches the right half; else skip it.
        Err(_) => out.extend([
            jump(op::JGE, first_right, 0, 1),
            stmt(
                op::JMP | op::JA,
                u32::try_from(left.len()).unwrap_or(u32::MAX),
            ),
        ]),
    }
    out.append(&mut left);
    emit_tree(out, &runs[mid..], kill, default_errno);
}

/// Checks one rule and returns its nr as the 32-bit value the filter compares, with its answer.
fn rule_nr(rule: &Rule) -> Result<(u32, Answer), SeccompError> {
    let bad = || SeccompError::InvalidSyscallNumber {
        name: rule.name,
        nr: rule.nr,
    };
    let nr = u32::try_from(rule.nr).map_err(|_| bad())?;
    if cfg!(target_arch = "x86_64") && nr & crate::arch::X32_SYSCALL_BIT != 0 {
        return Err(bad());
    }
    let own_nr = |sys: libc::c_long| i128::from(rule.nr) == i128::from(sys);
    let not_for = |action: &'static str| SeccompError::ActionNotForSyscall {
        name: rule.name,
        action,
    };
    let answer = match rule.action {
        Action::Errno(e) => {
            check_errno(rule.name, e)?;
            Answer::Errno(e)
        }
        Action::Allow => Answer::Allow,
        Action::Kill => Answer::Kill,
        Action::CloneNoNamespaces if own_nr(libc::SYS_clone) => {
            Answer::Check(Check::CloneNoNamespaces)
        }
        Action::CloneNoNamespaces => return Err(not_for("clone-no-ns")),
        Action::IoctlNoTiocsti if own_nr(libc::SYS_ioctl) => Answer::Check(Check::IoctlNoTiocsti),
        Action::IoctlNoTiocsti => return Err(not_for("ioctl-no-tiocsti")),
        Action::SocketFamilies if args::creates_sockets(rule.nr) => {
            Answer::Check(Check::SocketFamilies)
        }
        Action::SocketFamilies => return Err(not_for("socket-families")),
        Action::ModeNoSetId => Answer::Check(Check::ModeNoSetId {
            mode: args::mode_arg(rule.nr).ok_or_else(|| not_for("mode-no-setid"))?,
        }),
        Action::OpenNoSetId => {
            let (flags, mode) = args::open_args(rule.nr).ok_or_else(|| not_for("open-no-setid"))?;
            Answer::Check(Check::OpenNoSetId { flags, mode })
        }
    };
    Ok((nr, answer))
}

/// Compiles `rules` into a filter for this build's architecture.
///
/// Fails on a duplicate nr, an nr the filter cannot express, an errno outside 1..=4095, a
/// special action on the wrong syscall, or a program longer than [`MAX_INSTRUCTIONS`].
pub fn compile(rules: &[Rule], opts: &CompileOptions) -> Result<Program, SeccompError> {
    check_errno("<default>", opts.default_errno)?;
    let kill = match opts.kill_mode {
        KillMode::UserNotif => libc::SECCOMP_RET_USER_NOTIF,
        KillMode::KillProcess => libc::SECCOMP_RET_KILL_PROCESS,
    };
    let mut sorted = rules
        .iter()
        .map(|r| Ok((rule_nr(r)?, r)))
        .collect::<Result<Vec<_>, _>>()?;
    sorted.sort_by_key(|&((nr, _), _)| nr);
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 .0 == w[1].0 .0) {
        return Err(SeccompError::DuplicateSyscall {
            first: w[0].1.name,
            second: w[1].1.name,
            nr: w[0].1.nr,
        });
    }
    let answers: Vec<(u32, Answer)> = sorted.into_iter().map(|(answer, _)| answer).collect();

    let mut out = vec![
        load(OFFSET_ARCH),
        jump(op::JEQ, AUDIT_ARCH_NATIVE, 1, 0),
        ret(kill),
        load(OFFSET_NR),
    ];
    if cfg!(target_arch = "x86_64") {
        out.extend([
            jump(op::JSET, crate::arch::X32_SYSCALL_BIT, 0, 2),
            jump(op::JEQ, u32::MAX, 1, 0),
            ret(kill),
        ]);
    }
    emit_tree(&mut out, &runs(&answers), kill, opts.default_errno);

    if out.len() > MAX_INSTRUCTIONS {
        return Err(SeccompError::TooLong { len: out.len() });
    }
    Ok(Program { instructions: out })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &'static str, nr: i64, action: Action) -> Rule {
        Rule {
            name,
            nr,
            action,
            reason: "test",
        }
    }

    #[test]
    fn rejects_duplicate_numbers() {
        let rules = [rule("a", 5, Action::Allow), rule("b", 5, Action::Kill)];
        let err = compile(&rules, &CompileOptions::default()).unwrap_err();
        assert!(
            matches!(err, SeccompError::DuplicateSyscall { nr: 5, .. }),
            "{err}"
        );
    }

    #[test]
    fn rejects_bad_numbers_and_errnos() {
        let opts = CompileOptions::default();
        for r in [
            rule("neg", -1, Action::Allow),
            rule("big", 1 << 40, Action::Allow),
        ] {
            assert!(matches!(
                compile(&[r], &opts),
                Err(SeccompError::InvalidSyscallNumber { .. })
            ));
        }
        for e in [0, 4096] {
            let r = rule("e", 1, Action::Errno(e));
            assert!(matches!(
                compile(&[r], &opts),
                Err(SeccompError::ErrnoOutOfRange { .. })
            ));
            let o = CompileOptions {
                default_errno: e,
                ..opts
            };
            assert!(matches!(
                compile(&[], &o),
                Err(SeccompError::ErrnoOutOfRange { .. })
            ));
        }
    }

    #[test]
    fn special_actions_only_on_their_syscall() {
        let opts = CompileOptions::default();
        let r = rule(
            "read",
            crate::policy::sys_nr(libc::SYS_read),
            Action::CloneNoNamespaces,
        );
        assert!(matches!(
            compile(&[r], &opts),
            Err(SeccompError::ActionNotForSyscall { .. })
        ));
        for action in [
            Action::IoctlNoTiocsti,
            Action::SocketFamilies,
            Action::ModeNoSetId,
            Action::OpenNoSetId,
        ] {
            let r = rule("read", crate::policy::sys_nr(libc::SYS_read), action);
            assert!(
                matches!(
                    compile(&[r], &opts),
                    Err(SeccompError::ActionNotForSyscall { .. })
                ),
                "{action:?}"
            );
        }
        // Each argument check is tied to its own syscalls: the mode check is not for openat.
        let r = rule(
            "openat",
            crate::policy::sys_nr(libc::SYS_openat),
            Action::ModeNoSetId,
        );
        assert!(matches!(
            compile(&[r], &opts),
            Err(SeccompError::ActionNotForSyscall { .. })
        ));
    }

    #[test]
    fn checks_share_a_run_only_when_they_read_the_same_arguments() {
        let mode = |at| Answer::Check(Check::ModeNoSetId { mode: at });
        let answers = [
            (5, mode(1)),
            (6, mode(1)),
            (7, mode(2)),
            (8, Answer::Check(Check::OpenNoSetId { flags: 1, mode: 2 })),
        ];
        let got: Vec<(u32, Answer)> = runs(&answers).iter().map(|r| (r.first, r.answer)).collect();
        assert_eq!(
            got,
            [
                (0, Answer::Default),
                (5, mode(1)),
                (7, mode(2)),
                (8, answers[3].1),
                (9, Answer::Default),
            ]
        );
    }

    #[test]
    fn rejects_programs_over_the_kernel_limit() {
        // Alternating actions, so no two neighbours merge into one run.
        let rules: Vec<Rule> = (0..3000)
            .map(|nr| {
                rule(
                    "r",
                    nr,
                    if nr % 2 == 0 {
                        Action::Allow
                    } else {
                        Action::Errno(1)
                    },
                )
            })
            .collect();
        let err = compile(&rules, &CompileOptions::default()).unwrap_err();
        assert!(matches!(err, SeccompError::TooLong { .. }), "{err}");
    }

    #[test]
    fn neighbours_with_one_answer_share_a_run() {
        let rules = [
            rule("a", 0, Action::Allow),
            rule("b", 1, Action::Allow),
            rule("c", 2, Action::Errno(1)),
            rule("d", 5, Action::Allow),
        ];
        let answers: Vec<(u32, Answer)> = rules.iter().map(|r| rule_nr(r).unwrap()).collect();
        let got: Vec<(u32, Answer)> = runs(&answers).iter().map(|r| (r.first, r.answer)).collect();
        assert_eq!(
            got,
            [
                (0, Answer::Allow),
                (2, Answer::Errno(1)),
                (3, Answer::Default),
                (5, Answer::Allow),
                (6, Answer::Default),
            ]
        );
        // The default policy's allow stretches shrink the program well below one compare per rule.
        let p = compile(crate::default_policy(), &CompileOptions::default()).unwrap();
        assert!(
            p.instructions().len() < crate::default_policy().len(),
            "{}",
            p.instructions().len()
        );
    }

    #[test]
    fn fprog_points_at_instructions() {
        let p = compile(crate::default_policy(), &CompileOptions::default()).unwrap();
        let f = p.as_fprog();
        assert_eq!(usize::from(f.len), p.instructions().len());
        assert_eq!(f.filter.cast_const(), p.instructions().as_ptr());
        let last = p.instructions().last().unwrap();
        assert_eq!(
            (last.code, last.k),
            (op::RET | op::K, libc::SECCOMP_RET_ERRNO | u32::from(ENOSYS))
        );
    }
}
