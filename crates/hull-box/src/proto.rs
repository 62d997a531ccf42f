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
    /// A resident box's program could not take the user and group ids it was sent (`errno`);
    /// the `Spawned` for it follows, then its exit (126).
    IdsFailed { errno: i32 },
    /// A resident box's pid 1 made and handed over the directory it was sent (see
    /// [`resident::hand_over`]): `errno` 0, or why not.
    HandedOver { errno: i32 },
    /// A box's pid 1 mounted its writable root's FUSE file system (`WritableRoot::fuse_in_box`):
    /// the `/dev/fuse` descriptor that serves it travels with it as SCM_RIGHTS.
    FuseDevice,
    /// A box's pid 1 made its gateway network's TAP (`Step::Tap`): the TAP's descriptor
    /// travels with it as SCM_RIGHTS, and pid 1 waits for [`Message::GatewayReady`].
    TapDevice,
    /// The supervisor's answer to `TapDevice`: the caller has taken the TAP; the box goes on.
    GatewayReady,
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
            Message::IdsFailed { .. } => "IdsFailed",
            Message::HandedOver { .. } => "HandedOver",
            Message::FuseDevice => "FuseDevice",
            Message::TapDevice => "TapDevice",
            Message::GatewayReady => "GatewayReady",
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
            Message::Root { errno } => (13, errno, 0),
            Message::IdsFailed { errno } => (11, errno, 0),
            Message::HandedOver { errno } => (12, errno, 0),
            Message::FuseDevice => (14, 0, 0),
            Message::TapDevice => (15, 0, 0),
            Message::GatewayReady => (16, 0, 0),
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
            13 => Message::Root { errno: a },
            11 => Message::IdsFailed { errno: a },
            12 => Message::HandedOver { errno: a },
            14 => Message::FuseDevice,
            15 => Message::TapDevice,
            16 => Message::GatewayReady,
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

/// What a resident box's pid 1 is sent per program (see `resident.rs`): `HRX2`, the user id,
/// group id and number of supplementary groups (little-endian u32; a user id of [`resident::AS_PID1`]
/// means the program keeps pid 1's ids, root), the groups (u32 each), the working directory
/// (NUL-terminated), then a [`go`] datagram. The program's stdin, stdout and stderr travel with
/// it as SCM_RIGHTS, in that order.
pub mod resident {
    use std::ffi::CString;

    const MAGIC: &[u8; 4] = b"HRX2";
    /// The user id that means "as pid 1 is": no id switch (the program runs as the box's root).
    pub const AS_PID1: u32 = u32::MAX;
    /// The most supplementary groups a program may be given.
    pub const MAX_GROUPS: usize = 64;
    const HEADER: usize = 16;

    /// The ids a program runs as: `uid`, `gid` and the supplementary `groups`.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct Ids {
        pub uid: u32,
        pub gid: u32,
        pub groups: Vec<u32>,
    }

    /// None if it does not fit one datagram (see [`super::go::encode`]), or has more than
    /// [`MAX_GROUPS`] groups or the reserved user id.
    pub fn encode(
        cwd: &CString,
        ids: Option<&Ids>,
        argv: &[CString],
        env: &[CString],
        candidates: &[CString],
    ) -> Option<Vec<u8>> {
        let go = crate::proto::go::encode(argv, env, candidates)?;
        let cwd = cwd.as_bytes_with_nul();
        let (uid, gid, groups) = match ids {
            Some(i) if i.uid == AS_PID1 || i.groups.len() > MAX_GROUPS => return None,
            Some(i) => (i.uid, i.gid, i.groups.as_slice()),
            None => (AS_PID1, AS_PID1, &[][..]),
        };
        if HEADER + 4 * groups.len() + cwd.len() + go.len() > crate::proto::go::MAX {
            return None;
        }
        let mut out = Vec::with_capacity(HEADER + 4 * groups.len() + cwd.len() + go.len());
        out.extend_from_slice(MAGIC);
        for w in [uid, gid, u32::try_from(groups.len()).ok()?]
            .into_iter()
            .chain(groups.iter().copied())
        {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(cwd);
        out.extend_from_slice(&go);
        Some(out)
    }

    /// A request split without allocating (see [`split`]).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Split {
        /// The user and group id, None for "as pid 1 is".
        pub ids: Option<(u32, u32)>,
        /// How many supplementary groups follow the header (read them with [`group`]).
        pub groups: usize,
        /// Where the working directory starts.
        pub cwd_at: usize,
        /// Where the go datagram starts.
        pub go_at: usize,
    }

    fn word(data: &[u8], i: usize) -> Option<u32> {
        Some(u32::from_le_bytes(data.get(i..i + 4)?.try_into().ok()?))
    }

    /// Supplementary group `n` of a request [`split`] accepted.
    pub fn group(data: &[u8], n: usize) -> Option<u32> {
        word(data, HEADER + 4 * n)
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

    const HAND_OVER: &[u8; 4] = b"HRC1";

    /// A request to make the absolute directory `path` (and its missing parents) and give it
    /// to `uid`:`gid` (a sandbox's `/workspace` and its user's home); with `only_made`, a
    /// directory that existed already is left as it is. Pid 1 answers
    /// [`super::Message::HandedOver`]. None for a path with a NUL byte or too long.
    pub fn hand_over(path: &str, uid: u32, gid: u32, only_made: bool) -> Option<Vec<u8>> {
        if path.contains('\0') || path.len() >= 4096 || !path.starts_with('/') {
            return None;
        }
        let mut out = HAND_OVER.to_vec();
        for w in [uid, gid, u32::from(only_made)] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(path.as_bytes());
        out.push(0);
        Some(out)
    }

    /// A [`hand_over`] request: the path (without its NUL), uid, gid and `only_made`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct HandOver<'a> {
        pub path: &'a [u8],
        pub uid: u32,
        pub gid: u32,
        pub only_made: bool,
    }

    /// A [`hand_over`] request read without allocating; None for anything else.
    pub fn parse_hand_over(data: &[u8]) -> Option<HandOver<'_>> {
        if data.len() < 18 || &data[..4] != HAND_OVER {
            return None;
        }
        let path = data[16..].strip_suffix(&[0])?;
        (!path.contains(&0)).then_some(HandOver {
            path,
            uid: word(data, 4)?,
            gid: word(data, 8)?,
            only_made: word(data, 12)? != 0,
        })
    }

    /// Splits a program request without allocating; None for anything malformed (another
    /// marker, too many groups, an empty or unterminated working directory).
    pub fn split(data: &[u8]) -> Option<Split> {
        if data.len() < HEADER || &data[..4] != MAGIC {
            return None;
        }
        let (uid, gid) = (word(data, 4)?, word(data, 8)?);
        let groups = usize::try_from(word(data, 12)?).ok()?;
        if groups > MAX_GROUPS {
            return None;
        }
        let cwd_at = HEADER + 4 * groups;
        let nul = data.get(cwd_at..)?.iter().position(|&b| b == 0)?;
        let ids = (uid != AS_PID1).then_some((uid, gid));
        (nul > 0).then_some(Split {
            ids,
            groups,
            cwd_at,
            go_at: cwd_at + nul + 1,
        })
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
            Message::IdsFailed { errno: 22 },
            Message::HandedOver { errno: 0 },
            Message::FuseDevice,
            Message::TapDevice,
            Message::GatewayReady,
        ] {
            assert_eq!(Message::decode(&m.encode()), Ok(m));
        }
        assert_eq!(Message::decode(&[0; 3]), Err(ProtoError::Length(3)));
        assert_eq!(Message::decode(&[0; 16]), Err(ProtoError::Magic));
        let mut bad = Message::Ready.encode();
        bad[0] = 17;
        assert_eq!(Message::decode(&bad), Err(ProtoError::Tag(17)));
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
    fn resident_requests_carry_ids_and_a_working_directory_before_their_go_datagram() {
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let data = resident::encode(&c("/w"), None, &[c("true")], &[], &[c("/bin/true")]).unwrap();
        let sp = resident::split(&data).unwrap();
        assert_eq!(sp.ids, None);
        assert_eq!(&data[sp.cwd_at..sp.go_at], b"/w\0");
        let mut starts = vec![0; 8];
        assert_eq!(go::parse(&data[sp.go_at..], &mut starts), Some((1, 0, 1)));
        let ids = resident::Ids {
            uid: 1000,
            gid: 1001,
            groups: vec![1001, 27],
        };
        let data =
            resident::encode(&c("/w"), Some(&ids), &[c("true")], &[], &[c("/bin/true")]).unwrap();
        let sp = resident::split(&data).unwrap();
        assert_eq!(sp.ids, Some((1000, 1001)));
        assert_eq!(sp.groups, 2);
        assert_eq!(resident::group(&data, 1), Some(27));
        assert_eq!(&data[sp.cwd_at..sp.go_at], b"/w\0");
        let too_many = resident::Ids {
            groups: vec![1; resident::MAX_GROUPS + 1],
            ..ids.clone()
        };
        assert!(resident::encode(&c("/w"), Some(&too_many), &[c("x")], &[], &[c("/x")]).is_none());
        let reserved = resident::Ids {
            uid: resident::AS_PID1,
            ..ids
        };
        assert!(resident::encode(&c("/w"), Some(&reserved), &[c("x")], &[], &[c("/x")]).is_none());
        let head = |n: u32| {
            let mut h = b"HRX2".to_vec();
            for w in [0u32, 0, n] {
                h.extend_from_slice(&w.to_le_bytes());
            }
            h
        };
        assert_eq!(
            resident::split(&[head(0), b"\0rest".to_vec()].concat()),
            None,
            "an empty directory"
        );
        assert_eq!(
            resident::split(&[head(0), b"/w".to_vec()].concat()),
            None,
            "no terminator"
        );
        assert_eq!(
            resident::split(&[head(65), b"/w\0".to_vec()].concat()),
            None,
            "too many groups"
        );
        assert_eq!(
            resident::split(&[head(3), b"/w\0".to_vec()].concat()),
            None,
            "groups past the end"
        );
        assert_eq!(
            resident::split(b"HGO1/w\0xxxxxxxxxxxxx"),
            None,
            "another marker"
        );
        assert_eq!(resident::parse_kill(&resident::kill(7, 9)), Some((7, 9)));
        assert_eq!(resident::parse_kill(&data), None);
        let h = resident::hand_over("/home/dev", 1000, 1001, true).unwrap();
        assert_eq!(
            resident::parse_hand_over(&h),
            Some(resident::HandOver {
                path: b"/home/dev",
                uid: 1000,
                gid: 1001,
                only_made: true
            })
        );
        assert!(resident::hand_over("home", 1, 1, false).is_none());
        assert!(resident::hand_over("/a\0b", 1, 1, false).is_none());
        assert_eq!(resident::parse_hand_over(&data), None);
    }
}
