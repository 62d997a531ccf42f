//! The output side of `hull serve`: the one writer of stdout's lines ([`Out`]: answers are never
//! dropped, streamed events are dropped past a backlog), a run's output as streamed events
//! ([`EventSink`]), and the shape of an error answer ([`error_json`]). A leaf of the server:
//! `serve` (requests, `run`) and `serve_sandbox` (`sandbox.*`, `kernel.*`) both write through it.

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

enum Line {
    Text(String),
    /// Answered once every line queued before it is written.
    Flush(std::sync::mpsc::Sender<()>),
}

/// Writes whole lines to stdout from one writer thread, so a client that stops reading stalls
/// nothing but that thread: boxes keep their deadlines, and requests keep being answered into
/// the queue.
#[derive(Clone)]
pub(crate) struct Out {
    tx: std::sync::mpsc::Sender<Line>,
    pending: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
}

impl Out {
    pub(crate) fn start() -> Out {
        let (tx, rx) = std::sync::mpsc::channel::<Line>();
        let pending = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&pending);
        std::thread::spawn(move || {
            let mut stdout = std::io::stdout().lock();
            for line in rx {
                match line {
                    Line::Text(t) => {
                        let _ = writeln!(stdout, "{t}");
                        let _ = stdout.flush();
                        counter.fetch_sub(t.len(), Ordering::Relaxed);
                    }
                    Line::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        Out {
            tx,
            pending,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Queues an answer (never dropped).
    pub(crate) fn send(&self, v: &Value) {
        let line = v.to_string();
        self.pending.fetch_add(line.len(), Ordering::Relaxed);
        let _ = self.tx.send(Line::Text(line));
    }

    /// Queues a streamed event, or drops it (and counts it) while the client is too far behind.
    fn event(&self, v: &Value) {
        if self.pending.load(Ordering::Relaxed) > MAX_PENDING_EVENT_BYTES {
            if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                eprintln!("hull serve: the client is not reading; dropping streamed output events (answers still carry the captured output)");
            }
            return;
        }
        self.send(v);
    }

    /// Waits until everything queued so far is written.
    pub(crate) fn flush(&self) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.tx.send(Line::Flush(done)).is_ok() {
            let _ = wait.recv();
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
