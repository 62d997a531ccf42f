//! A sandbox's exec log: what every exec printed, in `logs/exec.log`, capped: past the cap the
//! file becomes `exec.log.1` (replacing the older one) and a fresh one starts, so a sandbox
//! keeps at most twice the cap. `hull logs` reads it ([`print`]), following it across rotations.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
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

/// Copies what `f` holds past its position to `out`; false when `out` is gone.
fn drain(f: &mut File, out: &mut impl Write) -> bool {
    let mut buf = Vec::new();
    if f.read_to_end(&mut buf).is_err() || buf.is_empty() {
        return true;
    }
    out.write_all(&buf).and_then(|()| out.flush()).is_ok()
}

fn inode(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// `hull logs`: prints the log in `dir` (the older file, then the current one) and, with
/// `follow`, what is written later until `alive` turns false. The current file is followed
/// through an open descriptor, so a rotation between two looks loses nothing: the renamed
/// file is read to its end before the new one is taken from its start (and a file rotated
/// twice between two looks, `exec.log.1` by then, is printed whole in between).
pub fn print(dir: &Path, out: &mut impl Write, follow: bool, alive: impl Fn() -> bool) {
    let current = dir.join("exec.log");
    let older = dir.join("exec.log.1");
    let mut held = File::open(&current).ok();
    let held_ino = |h: &Option<File>| h.as_ref().and_then(|f| f.metadata().ok()).map(|m| m.ino());
    // Rotated between the open and here: the older file is the one held.
    if inode(&older).is_some_and(|i| Some(i) != held_ino(&held)) {
        if let Ok(mut f) = File::open(&older) {
            if !drain(&mut f, out) {
                return;
            }
        }
    }
    if let Some(f) = held.as_mut() {
        if !drain(f, out) {
            return;
        }
    }
    if !follow {
        return;
    }
    loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if let Some(f) = held.as_mut() {
            if !drain(f, out) {
                return;
            }
        }
        let now = inode(&current);
        if now.is_some() && now != held_ino(&held) {
            // Rotated: the held file's last writes, a whole file rotated out since, then the
            // new one from its start.
            if let Some(f) = held.as_mut() {
                if !drain(f, out) {
                    return;
                }
            }
            let between = inode(&older);
            if held.is_some() && between.is_some() && between != held_ino(&held) {
                if let Ok(mut f) = File::open(&older) {
                    if !drain(&mut f, out) {
                        return;
                    }
                }
            }
            held = File::open(&current).ok();
            continue;
        }
        if !alive() {
            return;
        }
    }
}
