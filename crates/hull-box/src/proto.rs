//! The typed messages the box sends its supervisor over a `SOCK_SEQPACKET` pair. Each is a fixed
//! 16-byte record, so the child can send one without allocating, and an unknown tag or a short
//! record is a protocol error rather than a guess.

/// One message from the box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// Setup finished; the seccomp listener (if any) travels with it as SCM_RIGHTS.
    Ready,
    /// Setup step `step` (an index into the plan) failed with `errno`.
    SetupFailed { step: u32, errno: i32 },
    /// No exec candidate could be run; `errno` is the most telling failure.
    ExecFailed { errno: i32 },
    /// The main program ended with this wait status, having used `cpu_ms` of CPU (with the
    /// children it waited for).
    MainExited { status: i32, cpu_ms: i32 },
    /// A box entering a template forked its pid 1 (as the supervisor's child) with this pid.
    Pid1 { pid: i32 },
}

pub const LEN: usize = 16;

impl Message {
    pub fn encode(self) -> [u8; LEN] {
        let (tag, a, b): (u32, i32, i32) = match self {
            Message::Ready => (1, 0, 0),
            Message::SetupFailed { step, errno } => (2, i32::try_from(step).unwrap_or(i32::MAX), errno),
            Message::ExecFailed { errno } => (3, errno, 0),
            Message::MainExited { status, cpu_ms } => (4, status, cpu_ms),
            Message::Pid1 { pid } => (5, pid, 0),
        };
        let mut out = [0u8; LEN];
        out[0..4].copy_from_slice(&tag.to_le_bytes());
        out[4..8].copy_from_slice(&a.to_le_bytes());
        out[8..12].copy_from_slice(&b.to_le_bytes());
        out[12..16].copy_from_slice(&0x4855_4c4cu32.to_le_bytes()); // "HULL": catches stray bytes
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Message, ProtoError> {
        if bytes.len() != LEN {
            return Err(ProtoError::Length(bytes.len()));
        }
        let word = |i: usize| [bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]];
        if u32::from_le_bytes(word(12)) != 0x4855_4c4c {
            return Err(ProtoError::Magic);
        }
        let tag = u32::from_le_bytes(word(0));
        let a = i32::from_le_bytes(word(4));
        let b = i32::from_le_bytes(word(8));
        Ok(match tag {
            1 => Message::Ready,
            2 => Message::SetupFailed { step: u32::try_from(a).map_err(|_| ProtoError::Field)?, errno: b },
            3 => Message::ExecFailed { errno: a },
            4 => Message::MainExited { status: a, cpu_ms: b },
            5 if a > 0 => Message::Pid1 { pid: a },
            5 => return Err(ProtoError::Field),
            t => return Err(ProtoError::Tag(t)),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("box message of {0} bytes (expected 16)")]
    Length(usize),
    #[error("box message without the protocol marker")]
    Magic,
    #[error("box message with unknown tag {0}")]
    Tag(u32),
    #[error("box message with an out-of-range field")]
    Field,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        for m in [Message::Ready, Message::SetupFailed { step: 7, errno: 13 }, Message::ExecFailed { errno: 2 }, Message::MainExited { status: 256, cpu_ms: 12 }, Message::Pid1 { pid: 42 }] {
            assert_eq!(Message::decode(&m.encode()), Ok(m));
        }
        assert_eq!(Message::decode(&[0; 3]), Err(ProtoError::Length(3)));
        assert_eq!(Message::decode(&[0; 16]), Err(ProtoError::Magic));
        let mut bad = Message::Ready.encode();
        bad[0] = 9;
        assert_eq!(Message::decode(&bad), Err(ProtoError::Tag(9)));
    }
}
