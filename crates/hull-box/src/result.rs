//! The result of one run, shared by every front end (`hull run --json`, `hull serve`, the SDKs).

use serde::Serialize;

/// Why a run did not end on its own terms. A program that exits non-zero or raises is not a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultType {
    Timeout,
    Oom,
    EscapeBlocked,
    Killed,
    ExecFailed,
    OutputLimit,
    WorkspaceFull,
}

impl FaultType {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultType::Timeout => "timeout",
            FaultType::Oom => "oom",
            FaultType::EscapeBlocked => "escape_blocked",
            FaultType::Killed => "killed",
            FaultType::ExecFailed => "exec_failed",
            FaultType::OutputLimit => "output_limit",
            FaultType::WorkspaceFull => "workspace_full",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fault {
    #[serde(rename = "type")]
    pub kind: FaultType,
    pub reason: String,
    /// For `escape_blocked`: the refused system call, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Peak memory of the box's cgroup in bytes, when a memory cgroup was used.
    pub peak_memory: Option<u64>,
    /// User plus system CPU time of every process in the box.
    pub cpu_ms: u64,
    /// Time from clone to the program's exec, in microseconds.
    pub setup_us: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunResult {
    pub stdout: String,
    pub stderr: String,
    /// The exit code; 128+N when the program died of signal N.
    pub exit_code: i32,
    pub success: bool,
    pub fault: Option<Fault>,
    pub truncated: bool,
    pub duration_ms: u64,
    pub stats: Stats,
    /// Caps that were asked for but are not enforced here, and similar notes. Never silent.
    pub warnings: Vec<String>,
    /// Bytes discarded past --max-output, per stream.
    pub dropped_bytes: u64,
    /// The exact bytes of stdout as base64, only when they are not valid UTF-8 (`stdout` then
    /// shows each invalid sequence as U+FFFD): binary output comes back intact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_b64: Option<String>,
    /// The same for stderr.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_b64: Option<String>,
}

/// A stream's bytes as a result carries them: the text (invalid UTF-8 shown as U+FFFD), and the
/// exact bytes as base64 when the text is not them.
pub fn stream_text(bytes: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), None),
        Err(_) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                bytes,
            )),
        ),
    }
}
