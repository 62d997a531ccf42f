//! How `hull serve` reads its requests and runs them: each request runs on the thread that
//! read it (no hop to another thread on a call's path), and another thread is ready to read
//! the next line meanwhile, so requests still run concurrently.
//!
//! Threads take turns at stdin: the one holding stdin's lock reads one line, lets go, and runs
//! the request. A thread is spawned only when no other one waits to read, so a client making one
//! call at a time is served by two threads that alternate, with no spawn per call. With
//! `HULL_TRACE_CALLS=1` each request's steps here are traced (`hull::calltrace`).

use std::io::BufRead;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use hull::calltrace::{step, CallTrace};
use serde_json::Value;

use crate::serve_out::Out;
use crate::serve_request::{parse_request, Request};

/// How reading ended.
#[derive(Debug)]
pub(crate) enum End {
    /// A `shutdown` request, with its id (to answer once every request in flight is done).
    Shutdown(Value),
    /// End of input (the client closed the pipe or died), or stdin failed.
    Eof,
}

/// Threads kept waiting to read beyond the one that is needed; more exit after their request.
const MAX_IDLE: usize = 2;

#[derive(Default)]
struct State {
    /// Threads between requests (waiting for stdin, or about to).
    idle: usize,
    /// Requests running.
    busy: usize,
    end: Option<End>,
}

/// Runs one request (its id, method and params); writes its answer through the `Out`.
pub(crate) type Handle = dyn Fn(Value, &str, Value) + Send + Sync;

pub(crate) struct Loop {
    handle: Box<Handle>,
    out: Out,
    state: Mutex<State>,
    changed: Condvar,
}

impl Loop {
    pub(crate) fn new(out: Out, handle: Box<Handle>) -> Arc<Loop> {
        Arc::new(Loop {
            handle,
            out,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads and runs requests until `shutdown` or the end of input. `on_end` runs as soon as
    /// reading ends, while requests may still be running (end of input: ending their boxes so
    /// nobody waits for deadlines); then this waits for every running request to finish.
    pub(crate) fn run(self: &Arc<Self>, on_end: impl FnOnce(&End)) -> End {
        self.state().idle += 1;
        self.spawn();
        let mut st = self.state();
        while st.end.is_none() {
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let Some(end) = st.end.take() else {
            return End::Eof;
        };
        // Later readers see this and stop; none is left reading after it.
        st.end = Some(End::Eof);
        drop(st);
        on_end(&end);
        let mut st = self.state();
        while st.busy > 0 {
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        end
    }

    fn spawn(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("hull-serve".into())
            .spawn(move || me.serve());
        if spawned.is_err() {
            let mut st = self.state();
            st.idle -= 1;
            if st.idle == 0 && st.busy == 0 {
                eprintln!("hull serve: cannot start a thread; ending every box");
                st.end.get_or_insert(End::Eof);
                self.changed.notify_all();
            }
        }
    }

    /// One thread: reads a request, runs it, and goes back to reading.
    fn serve(self: &Arc<Self>) {
        let mut raw = Vec::new();
        loop {
            let Some((req, mut trace)) = self.next_request(&mut raw) else {
                return;
            };
            let spawn = {
                let mut st = self.state();
                st.idle -= 1;
                st.busy += 1;
                let spawn = st.idle == 0;
                if spawn {
                    st.idle += 1;
                }
                spawn
            };
            if spawn {
                self.spawn();
            }
            let Request { id, method, params } = req;
            step(&mut trace, "dispatched");
            (self.handle)(id, &method, params);
            step(&mut trace, "handled");
            drop(trace);
            let mut st = self.state();
            st.busy -= 1;
            if st.busy == 0 {
                self.changed.notify_all();
            }
            if st.idle >= MAX_IDLE || st.end.is_some() {
                return;
            }
            st.idle += 1;
        }
    }

    /// The next request to run, reading under stdin's lock; `None` when this thread is to stop
    /// (reading ended: the main thread is told why).
    fn next_request(&self, raw: &mut Vec<u8>) -> Option<(Request, Option<CallTrace>)> {
        let mut input = std::io::stdin().lock();
        loop {
            if self.state().end.is_some() {
                self.state().idle -= 1;
                return None;
            }
            raw.clear();
            let read = input.read_until(b'\n', raw);
            // From the moment the line is in: the server's part of a call.
            let mut trace = CallTrace::start("serve.request");
            step(&mut trace, "read");
            let end = match read {
                Ok(0) => Some(End::Eof),
                Ok(_) => match parse_request(raw) {
                    Ok(Some(r)) if r.method == "shutdown" => Some(End::Shutdown(r.id)),
                    Ok(Some(r)) => {
                        step(&mut trace, "parsed");
                        return Some((r, trace));
                    }
                    Ok(None) => None,
                    Err(answer) => {
                        self.out.send(&answer);
                        None
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => None,
                Err(e) => {
                    eprintln!("hull serve: cannot read stdin ({e}); ending every box");
                    Some(End::Eof)
                }
            };
            if let Some(end) = end {
                let mut st = self.state();
                st.idle -= 1;
                st.end.get_or_insert(end);
                self.changed.notify_all();
                return None;
            }
        }
    }
}
