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
    /// `--subids`: the box waits in its new user namespace for the supervisor to map its ids.
    WantIdMaps,
    /// The supervisor's answer: the maps are written.
    IdsMapped,
    /// A resident box's pid 1 started the program it was sent (see [`resident`]) as `pid`
    /// (in the box's pid namespace).
    Spawned { pid: i32 },
    /// A process of a resident box ended with this wait status (every child pid 1 reaps,
    /// adopted orphans too; the supervisor keeps the pids it asked for).
    Exited { pid: i32, status: i32 },
    /// A resident box's program could not enter its working directory (`errno`); the
    /// `Spawned` for it follows, then its exit.
    ChdirFailed { errno: i32 },
    /// A resident box's root directory, an `O_PATH` descriptor attached as SCM_RIGHTS (the
    /// answer to [`resident::ROOT`]; `errno` when it could not be opened).
    Root { errno: i32 },
}

pub const LEN: usize = 16;

impl Message {
    /// The message's name, for errors about one that came out of turn.
    pub fn name(self) -> &'static str {
        match self {
            Message::Ready => "Ready",
            Message::SetupFailed { .. } => "SetupFailed",
            Message::ExecFailed { .. } => "ExecFailed",
            Message::MainExited { .. } => "MainExited",
            Message::Pid1 { .. } => "Pid1",
            Message::WantIdMaps => "WantIdMaps",
            Message::IdsMapped => "IdsMapped",
            Message::Spawned { .. } => "Spawned",
            Message::Exited { .. } => "Exited",
            Message::ChdirFailed { .. } => "ChdirFailed",
            Message::Root { .. } => "Root",
        }
    }

    pub fn encode(self) -> [u8; LEN] {
        let (tag, a, b): (u32, i32, i32) = match self {
            Message::Ready => (1, 0, 0),
            Message::SetupFailed { step, errno } => {
                (2, i32::try_from(step).unwrap_or(i32::MAX), errno)
            }
            Message::ExecFailed { errno } => (3, errno, 0),
            Message::MainExited { status, cpu_ms } => (4, status, cpu_ms),
            Message::Pid1 { pid } => (5, pid, 0),
            Message::WantIdMaps => (6, 0, 0),
            Message::IdsMapped => (7, 0, 0),
            Message::Spawned { pid } => (8, pid, 0),
            Message::Exited { pid, status } => (9, pid, status),
            Message::ChdirFailed { errno } => (10, errno, 0),
            Message::Root { errno } => (11, errno, 0),
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
            2 => Message::SetupFailed {
                step: u32::try_from(a).map_err(|_| ProtoError::Field)?,
                errno: b,
            },
            3 => Message::ExecFailed { errno: a },
            4 => Message::MainExited {
                status: a,
                cpu_ms: b,
            },
            5 if a > 0 => Message::Pid1 { pid: a },
            5 => return Err(ProtoError::Field),
            6 => Message::WantIdMaps,
            7 => Message::IdsMapped,
            8 if a > 0 => Message::Spawned { pid: a },
            9 if a > 0 => Message::Exited { pid: a, status: b },
            8 | 9 => return Err(ProtoError::Field),
            10 => Message::ChdirFailed { errno: a },
            11 => Message::Root { errno: a },
            t => return Err(ProtoError::Tag(t)),
        })
    }
}

/// The program a ready box runs (see `ready.rs`): one datagram from the supervisor to its
/// waiting pid 1. Layout: `HGO1`, then the argv, env and exec-candidate counts as little-endian
/// u32, then that many NUL-terminated strings in that order.
pub mod go {
    use std::ffi::CString;

    const MAGIC: &[u8; 4] = b"HGO1";
    const HEADER: usize = 16;
    /// The largest datagram; a bigger program takes the ordinary path.
    pub const MAX: usize = 128 * 1024;
    /// Room for the pointer arrays: strings, plus a null after argv and one after envp; `encode`
    /// refuses more (empty strings could otherwise fit MAX).
    pub const POINTERS: usize = MAX / 2 + 2;

    /// None if the program does not fit in one datagram.
    pub fn encode(argv: &[CString], env: &[CString], candidates: &[CString]) -> Option<Vec<u8>> {
        let strings = argv.iter().chain(env).chain(candidates);
        let len = HEADER
            + strings
                .clone()
                .map(|c| c.as_bytes_with_nul().len())
                .sum::<usize>();
        let count = argv.len() + env.len() + candidates.len() + 2;
        if len > MAX || count > POINTERS || argv.is_empty() || candidates.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(MAGIC);
        for n in [argv.len(), env.len(), candidates.len()] {
            out.extend_from_slice(&u32::try_from(n).ok()?.to_le_bytes());
        }
        strings.for_each(|c| out.extend_from_slice(c.as_bytes_with_nul()));
        Some(out)
    }

    /// Marks the null after argv and after env in [`parse`]'s `starts`.
    pub const NULL: usize = usize::MAX;

    /// Where each string of a datagram starts, written into `starts` in order (argv, a [`NULL`]
    /// slot, env, a [`NULL`] slot, candidates), without allocating: returns the three counts, or
    /// None for anything malformed (wrong marker, a count that does not match the strings, a
    /// missing terminator, no argv or no candidate, bytes after the last string).
    pub fn parse(data: &[u8], starts: &mut [usize]) -> Option<(usize, usize, usize)> {
        if data.len() < HEADER || &data[..4] != MAGIC {
            return None;
        }
        let count = |i: usize| {
            usize::try_from(u32::from_le_bytes([
                data[i],
                data[i + 1],
                data[i + 2],
                data[i + 3],
            ]))
            .ok()
        };
        let (argc, envc, candc) = (count(4)?, count(8)?, count(12)?);
        if argc == 0
            || candc == 0
            || argc.checked_add(envc)?.checked_add(candc)?.checked_add(2)? > starts.len()
        {
            return None;
        }
        let mut pos = HEADER;
        let mut slot = 0;
        for (i, n) in [argc, envc, candc].into_iter().enumerate() {
            for _ in 0..n {
                let nul = data.get(pos..)?.iter().position(|&b| b == 0)?;
                starts[slot] = pos;
                slot += 1;
                pos += nul + 1;
            }
            if i < 2 {
                starts[slot] = NULL;
                slot += 1;
            }
        }
        (pos == data.len()).then_some((argc, envc, candc))
    }
}

/// What a resident box's pid 1 is sent per program (see `resident.rs`): `HRX1`, the working
/// directory (NUL-terminated), then a [`go`] datagram. The program's stdin, stdout and stderr
/// travel with it as SCM_RIGHTS, in that order.
pub mod resident {
    use std::ffi::CString;

    const MAGIC: &[u8; 4] = b"HRX1";

    /// None if it does not fit one datagram (see [`super::go::encode`]).
    pub fn encode(
        cwd: &CString,
        argv: &[CString],
        env: &[CString],
        candidates: &[CString],
    ) -> Option<Vec<u8>> {
        let go = crate::proto::go::encode(argv, env, candidates)?;
        let cwd = cwd.as_bytes_with_nul();
        if MAGIC.len() + cwd.len() + go.len() > crate::proto::go::MAX {
            return None;
        }
        Some([MAGIC.as_slice(), cwd, &go].concat())
    }

    /// A request for pid 1's root directory: pid 1 answers [`super::Message::Root`] with an
    /// `O_PATH` descriptor of its `/` (the box's root, in the box's mount namespace), so its
    /// supervisor can resolve paths inside it (`openat2` with `RESOLVE_IN_ROOT`).
    pub const ROOT: &[u8; 4] = b"HRR1";

    const KILL: &[u8; 4] = b"HRK1";

    /// A request to send signal `sig` to the process group of `pid` (a program pid 1 started,
    /// the leader of its own session) and to `pid` itself.
    pub fn kill(pid: i32, sig: i32) -> [u8; 12] {
        let mut out = [0u8; 12];
        out[..4].copy_from_slice(KILL);
        out[4..8].copy_from_slice(&pid.to_le_bytes());
        out[8..].copy_from_slice(&sig.to_le_bytes());
        out
    }

    /// The pid and signal of a [`kill`] request, None for anything else (no allocation).
    pub fn parse_kill(data: &[u8]) -> Option<(i32, i32)> {
        if data.len() != 12 || &data[..4] != KILL {
            return None;
        }
        let word = |i: usize| i32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        Some((word(4), word(8)))
    }

    /// Splits a request into the offset of its working directory's first byte (always 4) and
    /// of its go datagram, without allocating; None for anything malformed.
    pub fn split(data: &[u8]) -> Option<usize> {
        if data.len() < MAGIC.len() || &data[..4] != MAGIC {
            return None;
        }
        let nul = data[4..].iter().position(|&b| b == 0)?;
        (nul > 0).then_some(4 + nul + 1)
    }
}

/// A well-formed message that the box's side of the protocol may not send at that point (a
/// `Pid1` during the watch, a `Ready` where the entry process reports its pid 1...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the box sent {got} where {expected} was due")]
pub struct UnexpectedMessage {
    /// What the supervisor was waiting for (message names, see [`Message::name`]).
    pub expected: &'static str,
    pub got: &'static str,
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
        for m in [
            Message::Ready,
            Message::SetupFailed { step: 7, errno: 13 },
            Message::ExecFailed { errno: 2 },
            Message::MainExited {
                status: 256,
                cpu_ms: 12,
            },
            Message::Pid1 { pid: 42 },
            Message::WantIdMaps,
            Message::IdsMapped,
            Message::Spawned { pid: 3 },
            Message::Exited { pid: 3, status: 9 },
            Message::ChdirFailed { errno: 2 },
            Message::Root { errno: 0 },
        ] {
            assert_eq!(Message::decode(&m.encode()), Ok(m));
        }
        assert_eq!(Message::decode(&[0; 3]), Err(ProtoError::Length(3)));
        assert_eq!(Message::decode(&[0; 16]), Err(ProtoError::Magic));
        let mut bad = Message::Ready.encode();
        bad[0] = 12;
        assert_eq!(Message::decode(&bad), Err(ProtoError::Tag(12)));
        // A resident box's pids are positive.
        bad[0] = 8;
        assert_eq!(Message::decode(&bad), Err(ProtoError::Field));
    }

    #[test]
    fn go_datagrams_round_trip_and_malformed_ones_are_refused() {
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let data = go::encode(
            &[c("python3"), c("-c"), c("")],
            &[c("A=1")],
            &[c("/usr/bin/python3")],
        )
        .unwrap();
        let mut starts = vec![0; 16];
        assert_eq!(go::parse(&data, &mut starts), Some((3, 1, 1)));
        let at = |slot: usize| {
            (starts[slot] != go::NULL).then(|| {
                std::ffi::CStr::from_bytes_until_nul(&data[starts[slot]..])
                    .unwrap()
                    .to_str()
                    .unwrap()
            })
        };
        assert_eq!(
            (0..7).map(at).collect::<Vec<_>>(),
            [
                Some("python3"),
                Some("-c"),
                Some(""),
                None,
                Some("A=1"),
                None,
                Some("/usr/bin/python3")
            ]
        );
        // Too few slots, a lost terminator, trailing bytes, a wrong count, a wrong marker.
        assert_eq!(go::parse(&data, &mut [0; 6]), None);
        assert_eq!(go::parse(&data[..data.len() - 1], &mut starts), None);
        assert_eq!(
            go::parse(&[data.as_slice(), b"x"].concat(), &mut starts),
            None
        );
        let mut more = data.clone();
        more[4] = 4;
        assert_eq!(go::parse(&more, &mut starts), None);
        let mut marker = data.clone();
        marker[0] = b'X';
        assert_eq!(go::parse(&marker, &mut starts), None);
        // No argv, no candidate, or too big for one datagram: not sent at all.
        assert!(go::encode(&[], &[], &[c("/bin/true")]).is_none());
        assert!(go::encode(&[c("true")], &[], &[]).is_none());
        assert!(go::encode(&[c(&"x".repeat(go::MAX))], &[], &[c("/bin/true")]).is_none());
        let empties = vec![c(""); go::POINTERS];
        assert!(
            go::encode(&[c("true")], &empties, &[c("/bin/true")]).is_none(),
            "too many strings for the pointer room"
        );
    }

    #[test]
    fn resident_requests_carry_a_working_directory_before_their_go_datagram() {
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let data = resident::encode(&c("/w"), &[c("true")], &[], &[c("/bin/true")]).unwrap();
        let at = resident::split(&data).unwrap();
        assert_eq!(&data[4..at], b"/w\0");
        let mut starts = vec![0; 8];
        assert_eq!(go::parse(&data[at..], &mut starts), Some((1, 0, 1)));
        assert_eq!(resident::split(b"HRX1\0rest"), None, "an empty directory");
        assert_eq!(resident::split(b"HGO1/w\0"), None, "another marker");
        assert_eq!(resident::split(b"HRX1/w"), None, "no terminator");
        assert_eq!(resident::parse_kill(&resident::kill(7, 9)), Some((7, 9)));
        assert_eq!(resident::parse_kill(&data), None);
    }
}
