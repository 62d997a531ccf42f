//! A sandbox's exec log: what every exec printed, in `logs/exec.log`, capped: past the cap the
//! file becomes `exec.log.1` (replacing the older one) and a fresh one starts, so a sandbox
//! keeps at most twice the cap.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;

/// The default cap of one log file (`HULL_LOG_CAP` in bytes overrides it).
pub const DEFAULT_CAP: u64 = 8 << 20;

#[derive(Debug)]
pub struct ExecLog {
    dir: PathBuf,
    cap: u64,
    file: Mutex<Option<(File, u64)>>,
}

impl ExecLog {
    pub fn open(dir: PathBuf) -> ExecLog {
        let cap = std::env::var("HULL_LOG_CAP")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&c| c > 0)
            .unwrap_or(DEFAULT_CAP);
        let _ = std::fs::create_dir_all(&dir);
        ExecLog {
            dir,
            cap,
            file: Mutex::new(None),
        }
    }

    pub fn current(&self) -> PathBuf {
        self.dir.join("exec.log")
    }

    /// Appends `data`, rotating first when it would pass the cap. Failures are dropped: the
    /// log never stops a command.
    pub fn write(&self, data: &[u8]) {
        // A chunk larger than the cap keeps only its end: the file never passes the cap.
        let cap = usize::try_from(self.cap).unwrap_or(usize::MAX);
        let data = &data[data.len().saturating_sub(cap)..];
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if slot
            .as_ref()
            .is_some_and(|(_, n)| *n + data.len() as u64 > self.cap)
        {
            *slot = None;
            let _ = std::fs::rename(self.current(), self.dir.join("exec.log.1"));
        }
        if slot.is_none() {
            let Ok(f) = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(self.current())
            else {
                return;
            };
            let len = f.metadata().map_or(0, |m| m.len());
            *slot = Some((f, len));
        }
        if let Some((f, n)) = slot.as_mut() {
            if f.write_all(data).is_ok() {
                *n += data.len() as u64;
            }
        }
    }
}
