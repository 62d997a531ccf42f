//! The keeper's control protocol on its Unix socket: one JSON request line from the client,
//! then frames both ways (`kind: u8`, `len: u32` little-endian, `len` bytes): stdin data and its
//! end from the client; stdout, stderr, the exit code or an error from the keeper. A client keeps
//! its side open until the exit code: the keeper takes a hangup (a shutdown of the client's
//! sending side included) as the client going away, and kills the command.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// What a client asks the keeper.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Run a command; `env` is merged over the sandbox's for this command only.
    Exec {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
        /// The client streams its stdin (else the command's stdin is /dev/null).
        stdin: bool,
        /// `argv` joined is one shell string, run by bash (sh where the image has no bash).
        #[serde(default)]
        shell: bool,
        /// `-u`: the user it runs as (`NAME|UID[:GID]`, resolved in the sandbox's
        /// `/etc/passwd`), instead of the sandbox's `--user`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
    },
    /// Start a background process the keeper owns (`named/spawns.rs`). The keeper answers a
    /// [`HANDLE`] frame with its id; the client answers [`ACK`] once it holds the handle. A
    /// connection that ends before the `ACK` is an aborted call: the keeper kills what it
    /// started (its whole tree). After the `ACK` the process is the keeper's: it survives this
    /// connection, later execs and the client's exit, and ends at stop (or `Kill`).
    Spawn {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
        #[serde(default)]
        shell: bool,
        /// The user it runs as, as for [`Request::Exec`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// Its stdin is a pipe the keeper holds, written by [`Request::Stdin`] (else /dev/null).
        #[serde(default)]
        stdin: bool,
    },
    /// Write to the stdin of a spawn made with `stdin`: the data follows the request as
    /// [`STDIN`] frames and their [`STDIN_END`]; with `eof` the keeper then closes that stdin.
    /// Answered by [`EXIT`] with 0 once written, [`ERROR`] when the spawn has no stdin (any
    /// more) or its process closed it, [`MISSING`] for an unknown id.
    Stdin {
        id: String,
        #[serde(default)]
        eof: bool,
    },
    /// Wait for a spawned process: with `output`, what it printed from its start (the last
    /// [`super::spawns::HELD`] bytes of it; a [`DROPPED`] frame says how much came before) and
    /// then live, as [`STDOUT`]/[`STDERR`] frames; then its exit code ([`EXIT`]). A client
    /// that goes away only ends its wait. [`MISSING`] for an unknown id.
    Wait {
        id: String,
        #[serde(default)]
        output: bool,
    },
    /// Kill a spawned process and its whole tree (`named/spawns.rs`): [`EXIT`] with 1 when
    /// something was still running, 0 when it had all ended (idempotent); [`MISSING`] for an
    /// unknown id.
    Kill { id: String },
    /// A file operation in the sandbox's root (`named/files.rs`), answered by a [`RESULT`]
    /// frame (a read's bytes come before it as [`STDOUT`] frames; a write's data follows the
    /// request as [`STDIN`] frames and their [`STDIN_END`]).
    File { file: super::files::FileOp },
    /// Replace the gateway's policy (a sandbox with the gateway network): its next DNS queries
    /// and connections are judged by it. Answered by [`EXIT`] 0 or [`ERROR`].
    SetNetwork {
        policy: crate::net::wire::PolicySpec,
    },
    /// Replace the gateway broker's request transformations (a sandbox made with brokering;
    /// they live in the running gateway only, never on disk: their literal values can be
    /// credentials). Answered by [`EXIT`] 0 or [`ERROR`].
    SetTransformations {
        transformations: crate::net::wire::Hidden,
        /// Merged into the ones set (`addRequestTransformations`), not in their place.
        #[serde(default)]
        add: bool,
    },
    /// End every process and the keeper; the disk stays.
    Stop,
}

/// Frame kinds.
pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const STDIN_END: u8 = 3;
/// The command's exit code (i32 LE): 128+N for signal N.
pub const EXIT: u8 = 4;
/// Why the request failed (UTF-8 text); the client exits 125.
pub const ERROR: u8 = 5;

/// A spawn's id (UTF-8), the keeper's answer to [`Request::Spawn`].
pub const HANDLE: u8 = 6;
/// The client holds the handle (its answer to [`HANDLE`]; no data).
pub const ACK: u8 = 7;
/// No spawned process has that id (in this run of the sandbox).
pub const MISSING: u8 = 8;
/// A wait's replay starts late: this many bytes (u64 LE) of the output came before it and are
/// only in the exec log.
pub const DROPPED: u8 = 9;

/// A file operation's outcome, JSON: `{"ok": value}` or `{"error": {"kind", "message"}}`.
pub const RESULT: u8 = 10;

/// The keeper's first frame on every connection (no data), written before it reads the
/// request: a client that never gets it knows its request was not read (it connected to a
/// keeper that was dying, e.g. SIGKILLed, whose listening socket still took connections for an
/// instant) and may send it again, to the next keeper, without running anything twice.
pub const READY: u8 = 11;

/// The largest frame accepted.
pub const MAX_FRAME: u32 = 1 << 20;

pub fn write_frame(w: &mut impl Write, kind: u8, data: &[u8]) -> io::Result<()> {
    let len = u32::try_from(data.len()).map_err(|_| io::Error::other("frame too large"))?;
    let mut head = [0u8; 5];
    head[0] = kind;
    head[1..].copy_from_slice(&len.to_le_bytes());
    w.write_all(&head)?;
    w.write_all(data)
}

/// The next frame, or None at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (at most {MAX_FRAME})"),
        ));
    }
    let mut data = vec![0u8; len as usize];
    r.read_exact(&mut data)?;
    Ok(Some((head[0], data)))
}

/// The shell-style exit code of a wait status: the code, or 128+N for signal N.
pub fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        125
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_oversized_ones_are_refused() {
        let mut buf = Vec::new();
        write_frame(&mut buf, STDOUT, b"hi").unwrap();
        write_frame(&mut buf, EXIT, &3i32.to_le_bytes()).unwrap();
        let mut r = buf.as_slice();
        assert_eq!(read_frame(&mut r).unwrap(), Some((STDOUT, b"hi".to_vec())));
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some((EXIT, 3i32.to_le_bytes().to_vec()))
        );
        assert_eq!(read_frame(&mut r).unwrap(), None);
        let mut big = vec![STDOUT];
        big.extend_from_slice(&(MAX_FRAME + 1).to_le_bytes());
        assert!(read_frame(&mut big.as_slice()).is_err());
        assert_eq!(exit_code(3 << 8), 3);
        assert_eq!(exit_code(9), 137);
    }
}
