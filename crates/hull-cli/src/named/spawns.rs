//! Spawned processes: background processes the keeper owns (`Request::Spawn`), each with an id
//! any later client can wait on or kill, its output in the exec log and the last [`HELD`] bytes
//! of it kept for waits.
//!
//! Tree kill: where the box has a cgroup directory (v2, or on a v1 machine one of its
//! hierarchies: the freezer's if the box has one there, else its pids one), each spawn is born
//! in a child cgroup of its own (`spawn-<id>` under the box's). The keeper moves pid 1 into it
//! for the instant pid 1 starts the program (starts are one at a time) and back after, so the
//! program is in it from its first instruction, and so is everything it ever starts: a process
//! cannot leave a cgroup by `setsid`, a double fork or being reparented to pid 1 (the box has
//! no writable cgroup file system, and no capability to mount one), which a process group, a
//! session or a walk of the process tree from the spawn's pid all miss. Kill writes
//! `cgroup.kill` on v2 (every process in the cgroup, atomically); on v1 it freezes the cgroup
//! where it can, then kills every listed process, round after round until none is left (a
//! process forked between two rounds is listed in the next: it is born in the cgroup). The box
//! cgroup enables no controller for its children, so its caps go on holding for them (a child
//! counts against its parent) and pid 1 may stay in it beside them. Without a cgroup at all,
//! kill falls back to pid 1 killing the process's group and the process: what moved to a
//! session of its own escapes that (said in `docs/named.md`).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Output bytes kept per spawn for waits (the exec log has all of it).
pub const HELD: usize = 1 << 20;

/// Finished spawns kept for a late wait before the oldest are forgotten.
const KEEP_FINISHED: usize = 256;

/// How long a wait goes on reading output after the process's exit when something it left
/// holds its output open (as an exec's 200 ms).
const GRACE: Duration = Duration::from_millis(200);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a spawn printed and how it ended.
#[derive(Debug, Default)]
pub struct Output {
    /// `(kind, bytes)` as they came, the oldest dropped past [`HELD`].
    chunks: VecDeque<(u8, Vec<u8>)>,
    /// The sequence number of `chunks[0]`.
    first: u64,
    held: usize,
    /// Bytes dropped from the front.
    pub dropped: u64,
    /// Its wait status.
    pub status: Option<i32>,
    exited_at: Option<Instant>,
    /// Output pipes still open.
    open: u8,
}

/// One spawned process.
#[derive(Debug)]
pub struct Spawned {
    pub id: String,
    /// Its pid in the box (0 until started).
    pub pid: Mutex<i32>,
    /// Its cgroup, where the box has a cgroup v2 directory.
    pub group: Option<PathBuf>,
    /// The write end of its stdin, for a spawn made with `stdin` until it is closed (by the
    /// client's `eof`, or the process's exit).
    pub stdin: Mutex<Option<std::io::PipeWriter>>,
    out: Mutex<Output>,
    changed: Condvar,
}

/// A slice of a spawn's output for a wait: the chunks from `seq` on.
#[derive(Debug)]
pub struct Slice {
    pub dropped_before: Option<u64>,
    pub chunks: Vec<(u8, Vec<u8>)>,
    pub next: u64,
    /// The exit status, once the wait should end (after `chunks`).
    pub done: Option<i32>,
}

impl Spawned {
    pub fn new(id: String, group: Option<PathBuf>) -> Spawned {
        Spawned {
            id,
            pid: Mutex::new(0),
            group,
            stdin: Mutex::new(None),
            out: Mutex::new(Output {
                open: 2,
                ..Output::default()
            }),
            changed: Condvar::new(),
        }
    }

    /// Appends output, dropping the oldest past [`HELD`].
    pub fn push(&self, kind: u8, data: &[u8]) {
        let mut o = lock(&self.out);
        o.chunks.push_back((kind, data.to_vec()));
        o.held += data.len();
        while o.held > HELD && o.chunks.len() > 1 {
            if let Some((_, c)) = o.chunks.pop_front() {
                o.held -= c.len();
                o.dropped += c.len() as u64;
                o.first += 1;
            }
        }
        drop(o);
        self.changed.notify_all();
    }

    /// One output pipe closed.
    pub fn closed(&self) {
        let mut o = lock(&self.out);
        o.open = o.open.saturating_sub(1);
        drop(o);
        self.changed.notify_all();
    }

    pub fn exited(&self, status: i32) {
        let mut o = lock(&self.out);
        o.status.get_or_insert(status);
        o.exited_at.get_or_insert_with(Instant::now);
        drop(o);
        self.changed.notify_all();
    }

    pub fn status(&self) -> Option<i32> {
        lock(&self.out).status
    }

    /// What came from `seq` on, waiting up to `tick` for something new.
    pub fn slice(&self, seq: u64, tick: Duration) -> Slice {
        let mut o = lock(&self.out);
        let ready = |o: &Output| {
            o.first + o.chunks.len() as u64 > seq
                || o.status.is_some()
                    && (o.open == 0 || o.exited_at.is_some_and(|t| t.elapsed() > GRACE))
        };
        if !ready(&o) {
            o = self
                .changed
                .wait_timeout(o, tick)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        let from = seq.max(o.first);
        let dropped_before = (seq < o.first).then_some(o.dropped);
        let skip = usize::try_from(from - o.first).unwrap_or(usize::MAX);
        let chunks: Vec<(u8, Vec<u8>)> = o.chunks.iter().skip(skip).cloned().collect();
        let next = o.first + o.chunks.len() as u64;
        let finished =
            o.status.is_some() && (o.open == 0 || o.exited_at.is_some_and(|t| t.elapsed() > GRACE));
        Slice {
            dropped_before,
            chunks,
            next,
            done: finished.then_some(o.status).flatten(),
        }
    }

    /// Whether anything of it still runs: the process itself, or (with a cgroup) anything in
    /// its cgroup.
    pub fn running(&self) -> bool {
        if self.status().is_none() {
            return true;
        }
        self.group.as_deref().is_some_and(populated)
    }
}

/// Whether a cgroup directory (v2 or v1) still holds a process.
fn populated(group: &Path) -> bool {
    match std::fs::read_to_string(group.join("cgroup.events")) {
        Ok(e) => e.lines().any(|l| l == "populated 1"),
        Err(_) => {
            std::fs::read_to_string(group.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
        }
    }
}

/// Spawns by id, and their ids oldest first.
type Registry = (HashMap<String, Arc<Spawned>>, VecDeque<String>);

/// The keeper's spawns by id.
#[derive(Debug)]
pub struct Spawns {
    /// Ids are `s<keeper pid>n<n>`: a handle from an earlier run of the sandbox is not found
    /// rather than taken for another process.
    prefix: String,
    next: Mutex<u64>,
    all: Mutex<Registry>,
    /// The box's cgroup v2 directory, when it has one.
    pub box_group: Option<PathBuf>,
}

impl Spawns {
    pub fn new(box_groups: &[PathBuf]) -> Spawns {
        let v2 = |d: &PathBuf| d.join("cgroup.controllers").exists();
        let box_group = match box_groups {
            [one] if v2(one) => Some(one.clone()),
            many => many
                .iter()
                .find(|d| d.join("freezer.state").exists())
                .or_else(|| many.iter().find(|d| d.join("pids.max").exists()))
                .or_else(|| many.first())
                .cloned(),
        };
        Spawns {
            prefix: format!("s{}n", std::process::id()),
            next: Mutex::new(0),
            all: Mutex::new((HashMap::new(), VecDeque::new())),
            box_group,
        }
    }

    /// Checks once, at start, that pid 1 (host pid `pid1`) can be moved into a child cgroup of
    /// the box's and back (a cgroup not delegated to us refuses it); if not, spawns go without
    /// cgroups (kill falls back to the process group) and the reason is returned.
    pub fn probe(&mut self, pid1: i32) -> Option<String> {
        let b = self.box_group.clone()?;
        let probe = b.join("spawn-probe");
        let tried = std::fs::create_dir(&probe)
            .map_err(|e| format!("make {}: {e}", probe.display()))
            .and_then(|()| move_into(&probe, pid1))
            .and_then(|()| move_into(&b, pid1));
        let _ = std::fs::remove_dir(&probe);
        match tried {
            Ok(()) => None,
            Err(e) => {
                self.box_group = None;
                Some(e)
            }
        }
    }

    /// A new spawn (not started yet) with its cgroup made, when the box has one.
    pub fn add(&self) -> Result<Arc<Spawned>, String> {
        let id = {
            let mut n = lock(&self.next);
            *n += 1;
            format!("{}{}", self.prefix, *n)
        };
        let group = match &self.box_group {
            Some(b) => {
                let g = b.join(format!("spawn-{id}"));
                std::fs::create_dir(&g)
                    .map_err(|e| format!("make the spawn's cgroup {}: {e}", g.display()))?;
                Some(g)
            }
            None => None,
        };
        let s = Arc::new(Spawned::new(id.clone(), group));
        let mut all = lock(&self.all);
        all.0.insert(id.clone(), Arc::clone(&s));
        all.1.push_back(id);
        // Forget the oldest finished ones past the limit (their cgroups go if empty).
        let finished: Vec<String> = all
            .1
            .iter()
            .filter(|i| all.0.get(*i).is_some_and(|s| !s.running()))
            .cloned()
            .collect();
        for old in finished
            .iter()
            .take(finished.len().saturating_sub(KEEP_FINISHED))
        {
            if let Some(s) = all.0.remove(old) {
                if let Some(g) = &s.group {
                    let _ = std::fs::remove_dir(g);
                }
            }
            all.1.retain(|i| i != old);
        }
        Ok(s)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Spawned>> {
        lock(&self.all).0.get(id).cloned()
    }

    /// Forgets a spawn that never started.
    pub fn forget(&self, s: &Spawned) {
        let mut all = lock(&self.all);
        all.0.remove(&s.id);
        all.1.retain(|i| *i != s.id);
        if let Some(g) = &s.group {
            let _ = std::fs::remove_dir(g);
        }
    }
}

/// Kills every process in a spawn's cgroup: v2's `cgroup.kill`, else (v1, or a kernel
/// without it) the cgroup frozen where it can be and its listed processes killed, round after
/// round until none is left. Waits (bounded) until it is empty.
pub fn kill_group(group: &Path) {
    if std::fs::write(group.join("cgroup.kill"), "1").is_err() {
        let (freeze, frozen, thawed) = if group.join("cgroup.freeze").exists() {
            ("cgroup.freeze", "1", "0")
        } else {
            ("freezer.state", "FROZEN", "THAWED")
        };
        let froze = std::fs::write(group.join(freeze), frozen).is_ok();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
            let pids: Vec<i32> = procs.lines().filter_map(|l| l.parse().ok()).collect();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for p in pids {
                if let Some(pid) = rustix::process::Pid::from_raw(p) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            if froze {
                // Killed while frozen: they die once thawed, none of them having forked.
                let _ = std::fs::write(group.join(freeze), thawed);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while populated(group) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Moves process `pid` (a host pid) into the cgroup `group`.
pub fn move_into(group: &Path, pid: i32) -> Result<(), String> {
    std::fs::write(group.join("cgroup.procs"), pid.to_string())
        .map_err(|e| format!("move pid 1 into {}: {e}", group.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_replays_from_the_start_and_says_what_was_dropped() {
        let s = Spawned::new("x".into(), None);
        s.push(1, b"a");
        s.push(2, b"b");
        let sl = s.slice(0, Duration::ZERO);
        assert_eq!(sl.chunks, vec![(1, b"a".to_vec()), (2, b"b".to_vec())]);
        assert_eq!(sl.dropped_before, None);
        assert_eq!(sl.done, None);
        s.push(1, &vec![b'x'; HELD]);
        let sl = s.slice(0, Duration::ZERO);
        assert_eq!(sl.dropped_before, Some(2));
        assert_eq!(sl.chunks.len(), 1);
        s.exited(0);
        s.closed();
        s.closed();
        let sl = s.slice(sl.next, Duration::ZERO);
        assert!(sl.chunks.is_empty());
        assert_eq!(sl.done, Some(0));
    }
}
