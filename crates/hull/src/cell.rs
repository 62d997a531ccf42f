//! The host side of a runner box: a box running `src/runner.py` that connects back over a Unix
//! socket in a private directory (bound at `/run/hull`), takes cells, and sends back frames
//! (`stream` output in kernel mode, then `done` with the cell's mime bundles).
//!
//! The socket is also how the deadline is enforced for a box that was started before its call:
//! `SO_PEERCRED` names the runner's pid in our pid namespace, we hold a pidfd on it, and at the
//! deadline we SIGKILL it through the pidfd (no pid-reuse race). The runner is the program the
//! box's pid 1 started, so its death ends the box, and the kernel kills everything left in it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::Engine;
use hull_box::{BindMount, BoxError, BoxSpec, Fault, FaultType, OutputSink, RunResult, Stream};
use serde_json::Value;

use crate::backend::{Backend, Destroy};
use crate::calltrace::CallTrace;
use crate::error::SandboxError;
use crate::session_dirs::{leftover_prefix, private_dir_mode};

pub use crate::runner_code::RUNNER;
/// Where the private directory with the socket appears in the box.
pub const IO_DIR: &str = "/run/hull";

type Ended = Result<(RunResult, Destroy), BoxError>;

/// Where a runner box's output goes; set when a call takes the box.
pub type Route = Arc<Mutex<Option<Box<dyn OutputSink + Send>>>>;

struct RouteSink(Route);

impl OutputSink for RouteSink {
    fn chunk(&mut self, stream: Stream, data: &[u8]) {
        if let Ok(mut g) = self.0.lock() {
            if let Some(s) = g.as_mut() {
                s.chunk(stream, data);
            }
        }
    }
}

/// Destroys boxes off the caller's path (reaping pid 1, removing its cgroup).
#[derive(Clone, Debug)]
pub struct Reaper(mpsc::Sender<Destroy>);

impl Reaper {
    pub fn start() -> (Reaper, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel::<Destroy>();
        let h = std::thread::spawn(move || {
            for destroy in rx {
                destroy();
            }
        });
        (Reaper(tx), h)
    }

    /// A reaper over an existing channel (used to let the original channel close).
    pub fn from_sender(tx: mpsc::Sender<Destroy>) -> Reaper {
        Reaper(tx)
    }

    pub fn give(&self, destroy: Destroy) {
        if let Err(mpsc::SendError(destroy)) = self.0.send(destroy) {
            destroy();
        }
    }
}

/// A box whose runner has connected and waits for a cell.
pub struct RunnerBox {
    _io: tempfile::TempDir,
    conn: BufReader<UnixStream>,
    pidfd: OwnedFd,
    ended: Receiver<Ended>,
    thread: Option<JoinHandle<()>>,
    route: Route,
    finished: bool,
    reaper: Reaper,
}

/// Which box it is (its runner's pidfd, its io directory) and whether its runner finished; the
/// connection, output route and waiting thread carry nothing worth printing.
impl std::fmt::Debug for RunnerBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerBox")
            .field("pidfd", &self.pidfd)
            .field("io", &self._io.path())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

/// How a start ended: a ready runner, or a box that ended before its runner connected (e.g.
/// `exec_failed` because the image has no python3), whose result is the call's answer.
#[derive(Debug)]
pub enum Started {
    Ready(RunnerBox),
    Ended(RunResult),
}

/// How a cell's frames ended.
enum FrameEnd {
    Done {
        exit_code: i32,
        results: Vec<Value>,
    },
    Eof,
    Timeout,
    /// The channel broke its protocol (code in the cell can write to it): the box is killed and
    /// the call reports this as a warning, with no rich results.
    Broken(String),
}

/// The largest frame accepted from a runner (rich results of one cell travel in one frame, so
/// this also bounds a call's rich results). Code in the cell can write to the channel, so a
/// frame is untrusted: it is parsed once (a tree of JSON values costs several times its text),
/// moved, never copied.
pub const MAX_FRAME: u64 = 16 << 20;
/// The most JSON values (numbers, strings, arrays, objects...) one frame may hold: a frame of
/// tiny values (`[0,0,0,...]`) would cost ~30 bytes of host memory per byte sent as a tree.
pub const MAX_FRAME_VALUES: usize = 1 << 18;

/// Counts the values in a JSON text from its structural characters outside strings (an upper
/// bound for well-formed text), so a frame of millions of tiny values is refused before it is
/// parsed into a tree.
fn json_values(text: &[u8]) -> usize {
    let (mut n, mut in_str, mut esc) = (1usize, false, false);
    for &b in text {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_str = true,
                b',' | b'[' | b'{' | b':' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// One frame of the runner's channel, decoded.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// Output the cell wrote (kernel mode), base64-decoded.
    Output(Stream, Vec<u8>),
    /// The cell ended: its exit code (1 when the frame has none that fits) and mime bundles.
    Done { exit_code: i32, results: Vec<Value> },
    /// A frame that is neither: ignored.
    Other,
}

/// Decodes one frame (a line of the channel, `\n` included or not). Code in the cell can write
/// to the channel, so the bytes are untrusted: `Err` says why the channel is broken (the caller
/// kills the box and reports it as a warning).
pub fn decode_frame(line: &[u8]) -> Result<Frame, String> {
    if json_values(line) > MAX_FRAME_VALUES {
        return Err(format!("the runner sent a frame of more than {MAX_FRAME_VALUES} JSON values; rich results were dropped and the box killed"));
    }
    let frame: Value = serde_json::from_slice(line).map_err(|e| format!("the runner's channel carried a malformed frame ({e}); rich results were dropped and the box killed"))?;
    let Value::Object(mut frame) = frame else {
        return Err("the runner's channel carried a frame that is not an object; rich results were dropped and the box killed".into());
    };
    if let Some(s) = frame.get("stream").and_then(Value::as_str) {
        let data = base64::engine::general_purpose::STANDARD
            .decode(frame.get("data").and_then(Value::as_str).unwrap_or(""))
            .map_err(|_| {
                "the runner's channel carried output that is not base64; the box was killed"
                    .to_string()
            })?;
        let stream = if s == "stderr" {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        Ok(Frame::Output(stream, data))
    } else if frame.get("done").is_some() {
        let exit_code = frame
            .get("exit_code")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok())
            .unwrap_or(1);
        let results = match frame.remove("results") {
            Some(Value::Array(a)) => a,
            _ => Vec::new(),
        };
        Ok(Frame::Done { exit_code, results })
    } else {
        Ok(Frame::Other)
    }
}

/// What one cell produced.
#[derive(Debug)]
pub struct CellOutcome {
    pub run: RunResult,
    pub results: Vec<Value>,
}

fn runner_err(what: &'static str, e: impl Into<std::io::Error>) -> SandboxError {
    SandboxError::RunnerIo {
        what,
        error: e.into(),
    }
}

impl RunnerBox {
    /// Starts a box running the runner in `mode` (`once` or `kernel`) and waits for it to connect.
    pub fn start(
        backend: &Arc<dyn Backend>,
        base: &BoxSpec,
        mode: &str,
        box_timeout: Duration,
        reaper: &Reaper,
    ) -> Result<Started, SandboxError> {
        let io = tempfile::Builder::new()
            .prefix(&leftover_prefix("io"))
            .permissions(private_dir_mode())
            .tempdir()
            .map_err(|e| runner_err("create its private directory", e))?;
        let sock = io.path().join("s");
        let listener =
            UnixListener::bind(&sock).map_err(|e| runner_err("listen on its socket", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| runner_err("listen on its socket", e))?;
        let mut spec = base.clone();
        spec.mounts.push(BindMount {
            source: io.path().to_path_buf(),
            target: IO_DIR.into(),
            read_only: false,
        });
        // `-S`: site (and any sitecustomize on PYTHONPATH, e.g. in a writable /deps) is imported by
        // the runner after it has connected, so nothing but the interpreter runs before that.
        // The runner compiled once per process (see `runner_code`) when it is ready: the box's
        // interpreter then loads it instead of compiling the source (the source is beside it
        // for an interpreter of another bytecode version).
        let compiled = crate::runner_code::compiled().filter(|code| {
            std::fs::write(io.path().join("r"), code).is_ok()
                && std::fs::write(io.path().join("runner.py"), RUNNER).is_ok()
        });
        let program = match compiled {
            Some(_) => crate::runner_code::BOOTSTRAP,
            None => RUNNER,
        };
        spec.argv = vec![
            "python3".into(),
            "-S".into(),
            "-c".into(),
            program.into(),
            mode.into(),
            format!("{IO_DIR}/s"),
        ];
        spec.timeout = box_timeout;
        let route: Route = Arc::new(Mutex::new(None));
        let (tx, ended) = mpsc::channel::<Ended>();
        let (backend, route2) = (Arc::clone(backend), Arc::clone(&route));
        let thread = std::thread::spawn(move || {
            let mut sink = RouteSink(route2);
            let _ = tx.send(backend.run(&spec, &mut sink));
        });
        let conn = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(runner_err("accept its connection", e)),
            }
            match ended.try_recv() {
                Ok(r) => {
                    let _ = thread.join();
                    let (run, teardown) = r?;
                    reaper.give(teardown);
                    return Ok(Started::Ended(run));
                }
                Err(TryRecvError::Disconnected) => {
                    return Err(SandboxError::Runner(
                        "box thread ended without a result".into(),
                    ))
                }
                Err(TryRecvError::Empty) => {}
            }
            let mut fds = [rustix::event::PollFd::new(
                &listener,
                rustix::event::PollFlags::IN,
            )];
            let ts = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 2_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&ts));
        };
        drop(listener);
        let _ = std::fs::remove_file(&sock);
        conn.set_nonblocking(false)
            .map_err(|e| runner_err("use its connection", e))?;
        let cred = rustix::net::sockopt::socket_peercred(&conn)
            .map_err(|e| runner_err("identify its process", e))?;
        let pid = cred.pid;
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
            .map_err(|e| runner_err("open a pidfd on its process", e))?;
        Ok(Started::Ready(RunnerBox {
            _io: io,
            conn: BufReader::new(conn),
            pidfd,
            ended,
            thread: Some(thread),
            route,
            finished: false,
            reaper: reaper.clone(),
        }))
    }

    /// True when the box already ended (an idle pooled box that hit its own deadline).
    pub fn is_gone(&mut self) -> bool {
        if self.finished {
            return true;
        }
        match self.ended.try_recv() {
            Ok(r) => {
                self.finished = true;
                if let Ok((_, t)) = r {
                    self.reaper.give(t);
                }
                true
            }
            Err(TryRecvError::Empty) => false,
            Err(TryRecvError::Disconnected) => true,
        }
    }

    fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
    }

    /// A second descriptor of the runner's pidfd, so a holder that cannot take the box's lock
    /// (closing a kernel while one of its cells runs) can still kill it.
    pub fn killer(&self) -> Result<OwnedFd, SandboxError> {
        self.pidfd
            .try_clone()
            .map_err(|e| runner_err("duplicate its pidfd", e))
    }

    /// Sends a cell, giving up at `deadline`: the runner reads it, so a runner that stopped
    /// reading (code in an earlier kernel cell can SIGSTOP it) would block a plain write forever
    /// once the socket's buffer is full. `Some(end)` when the cell did not go out: the deadline
    /// passed, or the runner is gone.
    fn send_cell(&mut self, code: &str, deadline: Instant) -> Option<FrameEnd> {
        let mut msg = format!("{}\n", code.len()).into_bytes();
        msg.extend_from_slice(code.as_bytes());
        let mut sent = 0;
        while sent < msg.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Some(FrameEnd::Timeout);
            }
            let _ = self.conn.get_ref().set_write_timeout(Some(left));
            match self.conn.get_mut().write(&msg[sent..]) {
                Ok(0) => return Some(FrameEnd::Eof),
                Ok(n) => sent += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return Some(FrameEnd::Eof),
            }
        }
        None
    }

    fn read_frames(
        &mut self,
        deadline: Instant,
        on_stream: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<FrameEnd, SandboxError> {
        let mut line = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(FrameEnd::Timeout);
            }
            let _ = self.conn.get_ref().set_read_timeout(Some(left));
            let room = MAX_FRAME.saturating_sub(line.len() as u64);
            match (&mut self.conn).take(room).read_until(b'\n', &mut line) {
                Ok(0) if room == 0 => return Ok(FrameEnd::Broken(format!("the runner sent a frame over {MAX_FRAME} bytes; rich results were dropped and the box killed"))),
                Ok(0) => return Ok(FrameEnd::Eof),
                Ok(_) if !line.ends_with(b"\n") => continue,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => continue,
                Err(_) => return Ok(FrameEnd::Eof),
            }
            let frame = decode_frame(&line);
            line.clear();
            line.shrink_to(64 << 10);
            match frame {
                Ok(Frame::Output(stream, data)) => on_stream(stream, &data),
                Ok(Frame::Done { exit_code, results }) => {
                    return Ok(FrameEnd::Done { exit_code, results })
                }
                Ok(Frame::Other) => {}
                Err(why) => return Ok(FrameEnd::Broken(why)),
            }
        }
    }

    /// Waits for the box to end, killing it at `deadline`. Returns the result and whether we
    /// killed it.
    fn wait_end(&mut self, deadline: Instant) -> Result<(RunResult, bool), SandboxError> {
        let mut killed = false;
        let r = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.ended.recv_timeout(if killed {
                Duration::from_secs(3600)
            } else {
                left
            }) {
                Ok(r) => break r,
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    killed = true;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(SandboxError::Runner(
                        "box thread ended without a result".into(),
                    ))
                }
            }
        };
        self.finished = true;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let (run, teardown) = r?;
        self.reaper.give(teardown);
        Ok((run, killed))
    }

    /// Runs one cell in a `once` box and waits for the box to end: its stdout, stderr, exit code
    /// and faults come from the supervisor, the bundles from the socket.
    pub fn run_once(
        mut self,
        code: &str,
        timeout: Duration,
        sink: Box<dyn OutputSink + Send>,
        trace: &mut Option<CallTrace>,
    ) -> Result<CellOutcome, SandboxError> {
        if let Ok(mut g) = self.route.lock() {
            *g = Some(sink);
        }
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let end = match self.send_cell(code, deadline) {
            Some(end) => end,
            None => {
                crate::calltrace::step(trace, "sent");
                self.read_frames(deadline, &mut |_, _| {})?
            }
        };
        crate::calltrace::step(trace, "done_frame");
        let t_done = t0.elapsed();
        let mut timed_out = matches!(end, FrameEnd::Timeout);
        if timed_out || matches!(end, FrameEnd::Broken(_)) {
            self.kill();
        }
        let (mut run, killed) = self.wait_end(deadline)?;
        crate::calltrace::step(trace, "box_ended");
        timed_out |= killed;
        if timed_out {
            run.fault = Some(timeout_fault(timeout));
            run.success = false;
        }
        if let FrameEnd::Broken(why) = &end {
            run.warnings.push(why.clone());
        }
        run.duration_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        if std::env::var_os("HULL_TRACE_CELLS").is_some() {
            eprintln!(
                "cell: done frame {:?}, box ended {:?}",
                t_done,
                t0.elapsed()
            );
        }
        let results = match end {
            FrameEnd::Done { results, .. } => results,
            _ => Vec::new(),
        };
        Ok(CellOutcome { run, results })
    }

    /// Runs one cell in a kernel box, which stays alive. `Err(outcome)` means the kernel died
    /// during the cell (timeout, OOM, a crash): the outcome says how.
    pub fn run_kernel_cell(
        &mut self,
        code: &str,
        timeout: Duration,
        max_output: u64,
        sink: &mut dyn OutputSink,
        trace: &mut Option<CallTrace>,
    ) -> Result<Result<CellOutcome, CellOutcome>, SandboxError> {
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let mut out: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
        let mut dropped = 0u64;
        let sent = self.send_cell(code, deadline);
        crate::calltrace::step(trace, "sent");
        let end = match sent {
            Some(end) => end,
            None => self.read_frames(deadline, &mut |s, data| {
                sink.chunk(s, data);
                let buf = &mut out[usize::from(s == Stream::Stderr)];
                let room = usize::try_from(max_output.saturating_sub(buf.len() as u64))
                    .unwrap_or(usize::MAX);
                let take = data.len().min(room);
                buf.extend_from_slice(&data[..take]);
                dropped += (data.len() - take) as u64;
            })?,
        };
        let ms = || u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        let [stdout, stderr] = out;
        match end {
            FrameEnd::Done { exit_code, results } => {
                let (stdout, stdout_b64) = hull_box::result::stream_text(&stdout);
                let (stderr, stderr_b64) = hull_box::result::stream_text(&stderr);
                let run = RunResult {
                    stdout,
                    stderr,
                    stdout_b64,
                    stderr_b64,
                    exit_code,
                    success: exit_code == 0,
                    fault: None,
                    truncated: dropped > 0,
                    duration_ms: ms(),
                    stats: hull_box::Stats::default(),
                    warnings: Vec::new(),
                    dropped_bytes: dropped,
                };
                Ok(Ok(CellOutcome { run, results }))
            }
            FrameEnd::Eof => self.cell_ended(CellEnd::Gone, &stdout, &stderr, dropped, t0),
            FrameEnd::Timeout => {
                self.cell_ended(CellEnd::Timeout(timeout), &stdout, &stderr, dropped, t0)
            }
            FrameEnd::Broken(why) => {
                self.cell_ended(CellEnd::Broken(why), &stdout, &stderr, dropped, t0)
            }
        }
    }

    /// A kernel cell that ended without its `done` frame: kills the box, waits for it and
    /// returns its result (with the output the cell sent before) as the cell's.
    fn cell_ended(
        &mut self,
        end: CellEnd,
        stdout: &[u8],
        stderr: &[u8],
        dropped: u64,
        t0: Instant,
    ) -> Result<Result<CellOutcome, CellOutcome>, SandboxError> {
        let mut run = self.end_cell(end)?;
        (run.stdout, run.stdout_b64) = hull_box::result::stream_text(stdout);
        (run.stderr, run.stderr_b64) = hull_box::result::stream_text(stderr);
        run.truncated |= dropped > 0;
        run.duration_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(Err(CellOutcome {
            run,
            results: Vec::new(),
        }))
    }

    /// A second descriptor of the runner's channel, for a caller that sends cells and reads
    /// frames itself (see [`CellEnd`] for how such a caller reports a cell that did not end).
    pub fn channel(&self) -> Result<OwnedFd, SandboxError> {
        self.conn
            .get_ref()
            .try_clone()
            .map(OwnedFd::from)
            .map_err(|e| runner_err("duplicate its channel", e))
    }

    /// Ends the kernel after a cell that did not end with `done`: kills the box (an idempotent
    /// signal when it is gone already), waits for it and returns the box's result with why the
    /// cell ended (the output is the caller's: it read the frames).
    pub fn end_cell(&mut self, end: CellEnd) -> Result<RunResult, SandboxError> {
        self.kill();
        let (mut run, _) = self.wait_end(Instant::now() + Duration::from_secs(5))?;
        match end {
            CellEnd::Timeout(timeout) => run.fault = Some(timeout_fault(timeout)),
            CellEnd::Broken(why) => run.warnings.push(why),
            CellEnd::Gone => {}
        }
        run.success = false;
        Ok(run)
    }
}

/// Why a kernel cell ended without its `done` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellEnd {
    /// It ran past this deadline.
    Timeout(Duration),
    /// The channel closed (the interpreter died: a crash, the OOM killer, `os._exit`).
    Gone,
    /// The channel broke its protocol; the text says how (it becomes a warning).
    Broken(String),
}

fn timeout_fault(timeout: Duration) -> Fault {
    Fault {
        kind: FaultType::Timeout,
        reason: format!(
            "the call ran past its {:.3}s deadline; the box was killed",
            timeout.as_secs_f64()
        ),
        syscall: None,
    }
}

impl Drop for RunnerBox {
    fn drop(&mut self) {
        if !self.finished {
            self.kill();
            if let Ok(Ok((_, t))) = self.ended.recv() {
                self.reaper.give(t);
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = self.pidfd.as_fd();
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_frame, Frame, MAX_FRAME_VALUES};
    use hull_box::Stream;
    use serde_json::json;

    #[test]
    fn frames_decode_to_output_done_or_other() {
        assert_eq!(
            decode_frame(b"{\"stream\": \"stderr\", \"data\": \"aGk=\"}\n"),
            Ok(Frame::Output(Stream::Stderr, b"hi".to_vec()))
        );
        assert_eq!(
            decode_frame(
                b"{\"done\": true, \"exit_code\": 3, \"results\": [{\"text/plain\": \"1\"}]}"
            ),
            Ok(Frame::Done {
                exit_code: 3,
                results: vec![json!({"text/plain": "1"})]
            })
        );
        // An exit code that does not fit is 1, results that are not a list are none.
        assert_eq!(
            decode_frame(b"{\"done\": 1, \"exit_code\": 99999999999, \"results\": 5}"),
            Ok(Frame::Done {
                exit_code: 1,
                results: vec![]
            })
        );
        assert_eq!(decode_frame(b"{\"hello\": 1}"), Ok(Frame::Other));
    }

    #[test]
    fn broken_frames_say_why() {
        let broken = |b: &[u8]| decode_frame(b).unwrap_err();
        assert!(broken(b"garbage\n").contains("malformed frame"));
        assert!(broken(b"[1, 2]").contains("not an object"));
        assert!(broken(b"{\"stream\": \"stdout\", \"data\": \"!!\"}").contains("not base64"));
        let dense = format!("[{}0]", "0,".repeat(MAX_FRAME_VALUES));
        assert!(broken(dense.as_bytes()).contains("JSON values"));
    }
}
