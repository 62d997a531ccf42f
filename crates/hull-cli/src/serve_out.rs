//! The output side of `hull serve`: stdout's lines ([`Out`]: written by the thread that has them,
//! queued only behind a full pipe; answers are never dropped, streamed events are dropped past a
//! backlog), a run's output as streamed events
//! ([`EventSink`]), and the shape of an error answer ([`error_json`]). A leaf of the server:
//! `serve` (requests, `run`) and `serve_sandbox` (`sandbox.*`, `kernel.*`) both write through it.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hull_api::Chain;
use hull_box::{OutputSink, Stream};
use serde_json::{json, Value};

/// An error answer: its kind, its message (the whole chain on one line), each level of the
/// chain once, and the argument it is about (as the request named it) when there is one.
pub(crate) fn error_json(
    kind: &str,
    err: &(dyn std::error::Error + 'static),
    arg: Option<&str>,
) -> Value {
    let mut v = json!({ "kind": kind, "message": Chain(err).to_string(), "chain": hull_api::error::chain(err) });
    if let Some(a) = arg {
        v["arg"] = json!(a);
    }
    v
}

/// Streamed events that may wait for a slow client before new ones are dropped. Answers are
/// never dropped (each is bounded by the run's own output caps).
const MAX_PENDING_EVENT_BYTES: usize = 64 << 20;

/// The pipe buffer asked for on stdout, so a typical answer goes out in one write.
const PIPE_BUFFER: usize = 1 << 20;

/// What waits to be written, and whether the writer thread is draining it.
#[derive(Default)]
struct Queue {
    lines: std::collections::VecDeque<Vec<u8>>,
    /// Bytes of `lines` (the first one counted whole even when partly written).
    bytes: usize,
    /// How much of the first line is written already.
    head_written: usize,
}

struct Shared {
    queue: std::sync::Mutex<Queue>,
    /// Wakes the writer thread when lines are queued.
    wake: std::sync::Condvar,
    /// Answers once the queue is empty.
    drained: std::sync::Condvar,
    sink: Sink,
    dropped: AtomicU64,
}

/// How a line reaches stdout without ever blocking the thread that has it, and without
/// changing the open file description stdout shares with the caller (`O_NONBLOCK` lives there:
/// set on a shared pipe, a shell or a sibling writing to it would start failing with EAGAIN).
enum Sink {
    /// A pipe, reopened through `/proc/self/fd/1` as a file description of our own that is
    /// non-blocking.
    Pipe(std::os::fd::OwnedFd),
    /// A socket (Node's `child_process` hands its children a socket pair): each send says
    /// `MSG_DONTWAIT`.
    Socket,
    /// A file, a terminal, or a pipe that could not be reopened (no /proc of our own): only the
    /// writer thread writes, so a terminal that is not read (a scroll lock) stalls that thread
    /// and never a box's deadline.
    Blocking,
}

impl Sink {
    fn of_stdout() -> Sink {
        let stdout = std::io::stdout();
        let Ok(st) = rustix::fs::fstat(&stdout) else {
            return Sink::Blocking;
        };
        match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::Fifo => {
                // Best effort: the kernel may refuse (fs.pipe-max-size, the user's pipe quota).
                let _ = rustix::pipe::fcntl_setpipe_size(&stdout, PIPE_BUFFER);
                // Opening the pipe by its /proc link makes a new open file description of the
                // same pipe (fails with ENXIO once the reader is gone, or without /proc).
                rustix::fs::open(
                    "/proc/self/fd/1",
                    rustix::fs::OFlags::WRONLY
                        | rustix::fs::OFlags::NONBLOCK
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_or(Sink::Blocking, Sink::Pipe)
            }
            rustix::fs::FileType::Socket => Sink::Socket,
            _ => Sink::Blocking,
        }
    }

    /// One write of `buf`: `Some(n)` bytes taken, `None` when the client has no room for more.
    /// An error other than a full buffer (the client is gone) counts as taken: nobody reads it.
    fn write_some(&self, buf: &[u8]) -> Option<usize> {
        let written = match self {
            Sink::Pipe(fd) => rustix::io::write(fd, buf),
            Sink::Socket => rustix::net::send(
                std::io::stdout(),
                buf,
                rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL,
            ),
            Sink::Blocking => rustix::io::write(std::io::stdout(), buf),
        };
        match written {
            Ok(n) => Some(n),
            Err(rustix::io::Errno::AGAIN) => None,
            Err(rustix::io::Errno::INTR) => Some(0),
            Err(_) => Some(buf.len()),
        }
    }

    /// Waits until the client has made room.
    fn wait_for_room(&self) {
        let stdout = std::io::stdout();
        let fd = match self {
            Sink::Pipe(fd) => fd.as_fd(),
            Sink::Socket => stdout.as_fd(),
            Sink::Blocking => return,
        };
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::OUT,
        )];
        let _ = rustix::event::poll(&mut fds, None);
    }
}

/// Writes whole lines to stdout. The thread that has a line writes it directly when nothing is
/// queued (no hop to another thread on the answer's path); what a full pipe does not take is
/// queued for the writer thread, which waits for the client to read. So a client that stops
/// reading stalls nothing but that thread: boxes keep their deadlines, and requests keep being
/// answered into the queue. Lines never interleave.
#[derive(Clone)]
pub(crate) struct Out {
    shared: Arc<Shared>,
}

fn lock(q: &std::sync::Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    q.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Out {
    pub(crate) fn start() -> Out {
        let shared = Arc::new(Shared {
            queue: std::sync::Mutex::new(Queue::default()),
            wake: std::sync::Condvar::new(),
            drained: std::sync::Condvar::new(),
            sink: Sink::of_stdout(),
            dropped: AtomicU64::new(0),
        });
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("hull-serve-out".into())
            .spawn(move || drain(&writer))
            .ok();
        Out { shared }
    }

    /// Writes an answer, or queues it behind earlier lines (never dropped).
    pub(crate) fn send(&self, v: &Value) {
        let mut line = v.to_string().into_bytes();
        line.push(b'\n');
        let mut q = lock(&self.shared.queue);
        let mut at = 0;
        if q.lines.is_empty() && !matches!(self.shared.sink, Sink::Blocking) {
            while at < line.len() {
                match self.shared.sink.write_some(&line[at..]) {
                    Some(n) => at += n,
                    None => break,
                }
            }
            if at == line.len() {
                return;
            }
        }
        q.bytes += line.len();
        if q.lines.is_empty() {
            q.head_written = at;
        }
        q.lines.push_back(line);
        self.shared.wake.notify_one();
    }

    /// Writes or queues a streamed event, or drops it (and counts it) while the client is too
    /// far behind.
    fn event(&self, v: &Value) {
        if lock(&self.shared.queue).bytes > MAX_PENDING_EVENT_BYTES {
            if self.shared.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                eprintln!("hull serve: the client is not reading; dropping streamed output events (answers still carry the captured output)");
            }
            return;
        }
        self.send(v);
    }

    /// Waits until everything queued so far is written.
    pub(crate) fn flush(&self) {
        let mut q = lock(&self.shared.queue);
        while !q.lines.is_empty() {
            q = self
                .shared
                .drained
                .wait(q)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// The writer thread: writes queued lines as the client makes room, waiting for it outside the
/// queue's lock.
fn drain(s: &Shared) {
    loop {
        let mut q = lock(&s.queue);
        while q.lines.is_empty() {
            s.drained.notify_all();
            q = s
                .wake
                .wait(q)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        let Some(head) = q.lines.front() else {
            continue;
        };
        let at = q.head_written;
        match s.sink.write_some(&head[at..]) {
            Some(n) if at + n >= head.len() => {
                let len = head.len();
                q.lines.pop_front();
                q.bytes -= len;
                q.head_written = 0;
            }
            Some(n) => q.head_written = at + n,
            None => {
                drop(q);
                s.sink.wait_for_room();
            }
        }
    }
}

/// Streams a run's output as events. A UTF-8 character split across two reads is held back
/// until its end arrives, so `data` never carries a replacement character the program did not
/// write.
pub(crate) struct EventSink {
    pub(crate) out: Out,
    pub(crate) id: Value,
    pub(crate) carry: [Vec<u8>; 2],
}

impl EventSink {
    pub(crate) fn new(out: Out, id: Value) -> EventSink {
        EventSink {
            out,
            id,
            carry: [Vec::new(), Vec::new()],
        }
    }
}

/// How many bytes at the end of `b` are an incomplete (so far valid) UTF-8 sequence.
fn incomplete_tail(b: &[u8]) -> usize {
    match std::str::from_utf8(b) {
        Ok(_) => 0,
        Err(e) if e.error_len().is_none() => b.len() - e.valid_up_to(),
        Err(_) => 0,
    }
}

impl OutputSink for EventSink {
    fn chunk(&mut self, stream: Stream, data: &[u8]) {
        let i = usize::from(stream == Stream::Stderr);
        let mut buf = std::mem::take(&mut self.carry[i]);
        buf.extend_from_slice(data);
        let keep = incomplete_tail(&buf);
        let tail = buf.split_off(buf.len() - keep);
        self.carry[i] = tail;
        if buf.is_empty() {
            return;
        }
        let name = if stream == Stream::Stdout {
            "stdout"
        } else {
            "stderr"
        };
        self.out
            .event(&json!({ "id": self.id, "event": name, "data": String::from_utf8_lossy(&buf) }));
    }
}

/// A refused network's answer also says which mode was refused (`mode`), for callers that
/// branch on it.
pub(crate) fn with_mode(mut v: Value, e: &hull::boxspec::NetworkUnavailable) -> Value {
    v["mode"] = json!(e.mode.to_string());
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_characters_are_held_back() {
        let e = "é".as_bytes();
        assert_eq!(super::incomplete_tail(&[b'a', e[0]]), 1);
        assert_eq!(super::incomplete_tail("aé".as_bytes()), 0);
        assert_eq!(super::incomplete_tail(&[0xff]), 0);
    }
}
