//! The agent channel's frames: JSON lines between the host (hull driving the VM) and hull as
//! the guest's init, over a virtio-serial port. The host asks ([`Ask`]); the guest answers
//! ([`Tell`]). Both ends are this crate, so the shapes are written once here. The guest refuses
//! a request field it does not know: an agent older than the host (`HULL_VM_AGENT`) fails the
//! boot instead of leaving out a file or a cap it was asked for.

use serde::{Deserialize, Serialize};

/// The virtio-serial port's name, which the guest looks up in `/sys/class/virtio-ports`.
pub const PORT_NAME: &str = "hull.agent";

/// The virtio-fs tag of the image's root (shared read-only).
pub const ROOT_TAG: &str = "hull.root";

/// The virtio-fs tag of the workspace (shared read-write, seen at `/workspace`).
pub const WORKSPACE_TAG: &str = "hull.workspace";

/// The longest line either end accepts: an answer carries at most [`CHUNK`] bytes of output
/// (as base64), a request an argv and environment.
pub const MAX_LINE: usize = 4 << 20;

/// Bytes of output per [`Tell::Out`] frame.
pub const CHUNK: usize = 64 << 10;

/// One program to run in the guest's root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exec {
    pub argv: Vec<String>,
    /// The whole environment (nothing of the agent's own is passed on).
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// The program's standard input is a pipe fed by the [`Ask::Stdin`] frames that follow,
    /// closed at [`Ask::StdinEnd`] (`false`: `/dev/null`).
    #[serde(default)]
    pub stdin: bool,
    /// The guest's hostname while the program runs.
    pub hostname: String,
    /// The program's cgroup caps in the guest (`None`: none).
    #[serde(default)]
    pub memory: Option<u64>,
    #[serde(default)]
    pub pids: Option<u64>,
}

/// A host directory shared with the guest (its own virtio-fs device, tag `hull.mN`), mounted
/// at `target` in the program's root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestMount {
    pub tag: String,
    pub target: String,
    pub read_only: bool,
}

/// A host file's bytes, bound read-only at `target` in the program's root (virtio-fs shares
/// directories only, so a file is copied; the copy lives in the guest's memory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestFile {
    pub target: String,
    /// Permission bits (no set-id bit is kept).
    pub mode: u32,
    pub b64: String,
}

/// How the guest's program root is made: the host's first request, before `ready`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Boot {
    pub mounts: Vec<GuestMount>,
    /// Files bound read-only after the shares are mounted, in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<GuestFile>,
    /// Sizes of the program's `/tmp` and `/dev/shm` (tmpfs, charged to its memory cap).
    pub tmp_size: u64,
    pub shm_size: u64,
    /// The gateway network (none: the guest has loopback only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<GuestNet>,
}

/// A guest's gateway network: its virtio-net device is configured as a box's TAP is (by the
/// init's link hook), and the program's root gets this `/etc/resolv.conf`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestNet {
    pub resolv_conf: String,
}

/// What the host asks of the guest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ask {
    Boot(Boot),
    Exec(Exec),
    /// Bytes for the running program's standard input (base64; at most [`CHUNK`] bytes).
    Stdin {
        b64: String,
    },
    /// The end of the running program's standard input.
    StdinEnd,
    /// Power the guest off (after its answer, the VMM exits).
    PowerOff,
}

/// Which stream a chunk of output came on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What the guest says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tell {
    /// The guest's root and workspace are mounted and the agent takes requests. `kernel` is
    /// the guest kernel's release (`uname -r` in the guest).
    Ready { kernel: String },
    /// A chunk of the program's output, as base64.
    Out { stream: Stream, b64: String },
    /// The program ended: its exit code, or the signal that killed it.
    Exit {
        code: Option<i32>,
        signal: Option<i32>,
        /// Whether the guest's OOM killer ended a process of the program's while it ran.
        oom: bool,
    },
    /// The program could not be started (not found: `code` 127; not executable: 126), as a
    /// shell says it; the run's result, not the guest's failure.
    NotStarted { code: i32, reason: String },
    /// The guest could not do what was asked: the step and why.
    Failed { step: String, error: String },
}

/// One frame as a line (no newline inside: JSON escapes it).
pub fn line<T: Serialize>(frame: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec(frame).unwrap_or_default();
    v.push(b'\n');
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_as_one_line_each() {
        let ask = Ask::Exec(Exec {
            argv: vec!["sh".into(), "-c".into(), "echo 'a\nb'".into()],
            env: vec![("PATH".into(), "/bin".into())],
            cwd: "/workspace".into(),
            stdin: true,
            hostname: "hull".into(),
            memory: Some(64 << 20),
            pids: None,
        });
        let l = line(&ask);
        assert_eq!(l.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(serde_json::from_slice::<Ask>(&l).unwrap(), ask);
        let tell = Tell::Exit {
            code: None,
            signal: Some(9),
            oom: true,
        };
        assert_eq!(serde_json::from_slice::<Tell>(&line(&tell)).unwrap(), tell);
        assert!(serde_json::from_str::<Ask>(r#"{"reboot":null}"#).is_err());
    }
}
