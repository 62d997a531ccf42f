//! A small classic-BPF interpreter over `struct seccomp_data`, so tests and `hull doctor`
//! can ask what a [`Program`] answers for a syscall without installing it.
//!
//! It follows the kernel's seccomp dialect: loads are 32-bit words from the 64-byte
//! `seccomp_data` (`BPF_LEN` is its size), 16 scratch words, unsigned compares. A program the
//! kernel's checker would refuse (bad opcode, unaligned or out-of-range load, jump past the
//! end) evaluates to `SECCOMP_RET_KILL_PROCESS`, the strictest answer.

use crate::arch::SECCOMP_DATA_LEN;
use crate::bpf::op;
use crate::Program;

const SCRATCH_WORDS: usize = 16;
const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

/// `seccomp_data` as bytes in native order; `instruction_pointer` is 0.
fn seccomp_data(arch: u32, nr: i32, args: [u64; 6]) -> [u8; SECCOMP_DATA_LEN] {
    let mut data = [0u8; SECCOMP_DATA_LEN];
    data[0..4].copy_from_slice(&nr.to_ne_bytes());
    data[4..8].copy_from_slice(&arch.to_ne_bytes());
    for (i, arg) in args.iter().enumerate() {
        let at = 16 + 8 * i;
        data[at..at + 8].copy_from_slice(&arg.to_ne_bytes());
    }
    data
}

fn load_word(data: &[u8; SECCOMP_DATA_LEN], k: u32) -> Option<u32> {
    let at = usize::try_from(k).ok()?;
    if at % 4 != 0 {
        return None;
    }
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

fn alu(code: u16, a: u32, operand: u32) -> Option<u32> {
    Some(match code & 0xf0 {
        op::ADD => a.wrapping_add(operand),
        op::SUB => a.wrapping_sub(operand),
        op::MUL => a.wrapping_mul(operand),
        op::DIV => a.checked_div(operand)?,
        op::MOD => a.checked_rem(operand)?,
        op::OR => a | operand,
        op::AND => a & operand,
        op::XOR => a ^ operand,
        op::LSH => a.checked_shl(operand).unwrap_or(0),
        op::RSH => a.checked_shr(operand).unwrap_or(0),
        op::NEG => a.wrapping_neg(),
        _ => return None,
    })
}

/// What `program` returns (a `SECCOMP_RET_*` value with its data) for syscall `nr` with
/// `args` made under audit arch `arch`.
pub fn evaluate(program: &Program, arch: u32, nr: i32, args: [u64; 6]) -> u32 {
    run(program.instructions(), &seccomp_data(arch, nr, args)).unwrap_or(KILL)
}

fn run(insns: &[libc::sock_filter], data: &[u8; SECCOMP_DATA_LEN]) -> Option<u32> {
    let data_len = u32::try_from(SECCOMP_DATA_LEN).ok()?;
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; SCRATCH_WORDS];
    let mut pc = 0usize;
    loop {
        let insn = insns.get(pc)?;
        pc += 1;
        let k = insn.k;
        let slot = |k: u32| usize::try_from(k).ok().filter(|&i| i < SCRATCH_WORDS);
        match insn.code & 0x07 {
            op::LD => {
                a = match insn.code & 0xe0 {
                    op::ABS => load_word(data, k)?,
                    op::IMM => k,
                    op::MEM => mem[slot(k)?],
                    op::LEN => data_len,
                    _ => return None,
                }
            }
            op::LDX => {
                x = match insn.code & 0xe0 {
                    op::IMM => k,
                    op::MEM => mem[slot(k)?],
                    op::LEN => data_len,
                    _ => return None,
                }
            }
            op::ST => mem[slot(k)?] = a,
            op::STX => mem[slot(k)?] = x,
            op::ALU => {
                let operand = if insn.code & op::X != 0 { x } else { k };
                a = alu(insn.code, a, operand)?;
            }
            op::JMP => {
                let operand = if insn.code & op::X != 0 { x } else { k };
                let taken = match insn.code & 0xf0 {
                    op::JA => {
                        pc = pc.checked_add(usize::try_from(k).ok()?)?;
                        continue;
                    }
                    op::JEQ => a == operand,
                    op::JGT => a > operand,
                    op::JGE => a >= operand,
                    op::JSET => a & operand != 0,
                    _ => return None,
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            op::RET => {
                return match insn.code & 0x18 {
                    op::K => Some(k),
                    op::A => Some(a),
                    _ => None,
                }
            }
            op::MISC => match insn.code & 0xf8 {
                op::TAX => x = a,
                op::TXA => a = x,
                _ => return None,
            },
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(code: u16, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    fn eval(insns: &[libc::sock_filter], nr: i32, args: [u64; 6]) -> Option<u32> {
        run(insns, &seccomp_data(7, nr, args))
    }

    #[test]
    fn loads_args_in_native_order() {
        let prog = [s(op::LD | op::W | op::ABS, 24), s(op::RET | op::A, 0)];
        let args = [0, 0x1122_3344_5566_7788, 0, 0, 0, 0];
        let low = if cfg!(target_endian = "little") {
            0x5566_7788
        } else {
            0x1122_3344
        };
        assert_eq!(eval(&prog, 1, args), Some(low));
        let prog = [s(op::LD | op::W | op::ABS, 4), s(op::RET | op::A, 0)];
        assert_eq!(eval(&prog, 1, [0; 6]), Some(7), "arch word");
    }

    #[test]
    fn alu_scratch_and_jumps() {
        let prog = [
            s(op::LD | op::IMM, 6),
            s(op::ST, 3),
            s(op::LDX | op::MEM, 3),
            s(op::ALU | op::MUL | op::X, 0), // 36
            s(op::ALU | op::SUB | op::K, 1), // 35
            s(op::JMP | op::JA, 1),
            s(op::RET | op::K, 0),
            libc::sock_filter {
                code: op::JMP | op::JGT | op::K,
                jt: 1,
                jf: 0,
                k: 34,
            },
            s(op::RET | op::K, 1),
            s(op::MISC | op::TAX, 0),
            s(op::LD | op::LEN, 0),
            s(op::ALU | op::ADD | op::X, 0),
            s(op::RET | op::A, 0),
        ];
        assert_eq!(eval(&prog, 0, [0; 6]), Some(35 + 64));
    }

    #[test]
    fn malformed_programs_answer_none() {
        let unaligned = [s(op::LD | op::W | op::ABS, 2), s(op::RET | op::A, 0)];
        assert_eq!(eval(&unaligned, 0, [0; 6]), None);
        let past_end = [s(op::LD | op::W | op::ABS, 64), s(op::RET | op::A, 0)];
        assert_eq!(eval(&past_end, 0, [0; 6]), None);
        let falls_off = [s(op::LD | op::IMM, 1)];
        assert_eq!(eval(&falls_off, 0, [0; 6]), None);
        let div_zero = [s(op::ALU | op::DIV | op::K, 0), s(op::RET | op::A, 0)];
        assert_eq!(eval(&div_zero, 0, [0; 6]), None);
        let bad_slot = [s(op::ST, 16), s(op::RET | op::A, 0)];
        assert_eq!(eval(&bad_slot, 0, [0; 6]), None);
        assert_eq!(eval(&[], 0, [0; 6]), None);
    }
}
