//! Architecture facts the filter depends on: the native `AUDIT_ARCH_*` value, the x32 syscall
//! bit, and where an argument's low 32 bits sit inside `struct seccomp_data`.

/// `AUDIT_ARCH_X86_64` from `<linux/audit.h>`: `EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// `AUDIT_ARCH_AARCH64` from `<linux/audit.h>`: `EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
pub const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
/// `AUDIT_ARCH_I386`: what `seccomp_data.arch` says for `int 0x80` from an x86_64 process.
pub const AUDIT_ARCH_I386: u32 = 0x4000_0003;

/// The `seccomp_data.arch` value of this build's native syscall ABI.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH_NATIVE: u32 = AUDIT_ARCH_X86_64;
/// The `seccomp_data.arch` value of this build's native syscall ABI.
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH_NATIVE: u32 = AUDIT_ARCH_AARCH64;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("hull-seccomp supports x86_64 and aarch64 only");

/// `__X32_SYSCALL_BIT`: x86_64 syscalls with this bit use the x32 ABI, which shares
/// `AUDIT_ARCH_X86_64`; the filter kills them so the x32 table cannot bypass the rules.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offset of `seccomp_data.nr` (`int`).
pub(crate) const OFFSET_NR: u32 = 0;
/// Offset of `seccomp_data.arch` (`__u32`).
pub(crate) const OFFSET_ARCH: u32 = 4;
/// Offset of `seccomp_data.args[0]` (`__u64 args[6]` after the `__u64 instruction_pointer`).
const OFFSET_ARGS: u32 = 16;
/// Size of `struct seccomp_data`.
pub(crate) const SECCOMP_DATA_LEN: usize = 64;

/// Offset of the low 32 bits of `args[index]`; BPF loads are 32-bit words in native order.
pub(crate) const fn arg_low_offset(index: u32) -> u32 {
    let base = OFFSET_ARGS + 8 * index;
    if cfg!(target_endian = "little") {
        base
    } else {
        base + 4
    }
}

/// Every `CLONE_NEW*` flag from `<linux/sched.h>`; all live in the low 32 bits of clone's
/// flags argument. Spelled out because libc lacks `CLONE_NEWTIME`; a unit test checks the rest
/// against libc.
pub const CLONE_NAMESPACE_FLAGS: u32 = 0x0000_0080 // CLONE_NEWTIME
    | 0x0002_0000 // CLONE_NEWNS
    | 0x0200_0000 // CLONE_NEWCGROUP
    | 0x0400_0000 // CLONE_NEWUTS
    | 0x0800_0000 // CLONE_NEWIPC
    | 0x1000_0000 // CLONE_NEWUSER
    | 0x2000_0000 // CLONE_NEWPID
    | 0x4000_0000; // CLONE_NEWNET

/// `TIOCSTI` from `<asm-generic/ioctls.h>` (same on x86_64 and aarch64): push a byte into a
/// terminal's input queue, i.e. type commands into whatever shell owns the terminal.
pub const TIOCSTI: u32 = 0x5412;
/// `TIOCLINUX` (same header): virtual-console control, including selection paste (same attack).
pub const TIOCLINUX: u32 = 0x541C;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_flags_match_libc() {
        let from_libc = libc::CLONE_NEWNS
            | libc::CLONE_NEWCGROUP
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUSER
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWNET;
        let from_libc = u32::try_from(from_libc).expect("namespace flags are positive");
        assert_eq!(CLONE_NAMESPACE_FLAGS & !0x80, from_libc);
        // i128 holds both libc's `Ioctl` (c_ulong on glibc, c_int on musl) and our u32.
        assert_eq!(i128::from(TIOCSTI), i128::from(libc::TIOCSTI));
        assert_eq!(i128::from(TIOCLINUX), i128::from(libc::TIOCLINUX));
    }

    #[test]
    fn arg_offsets_match_struct_layout() {
        assert_eq!(std::mem::size_of::<libc::seccomp_data>(), SECCOMP_DATA_LEN);
        assert_eq!(std::mem::offset_of!(libc::seccomp_data, nr), 0);
        assert_eq!(std::mem::offset_of!(libc::seccomp_data, arch), 4);
        assert_eq!(std::mem::offset_of!(libc::seccomp_data, args), 16);
    }
}
