//! Watching a started box from outside until its result is known: one poll loop over its
//! channel, both output pipes (capped per stream; past the cap bytes are read and discarded,
//! the program keeps running), a pidfd of pid 1, the signalfd of the forwarded signals, the
//! seccomp listener and the Runtime's ending pipe. It owns the wall-clock deadline (SIGKILL to
//! pid 1 = the whole pid namespace) and produces an [`Outcome`], judged by `verdict.rs`.
//!
//! The loop ([`Watch::run`]) only polls and dispatches; what each source means is a step of a
//! watch in progress (`Watching`): the deadline, the channel, the output pipes, the listener,
//! the ending pipe, the signals and pid 1's exit, answered in that order after each poll, then
//! `finish`.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::channel::{self, Channel, Recv};
use crate::error::BoxError;
use crate::launch::{Setup, Started};
use crate::outcome::{Captured, Outcome};
use crate::proto::Message;
use crate::spec::BoxSpec;
use crate::split::Steps;
use crate::sys::{self, Errno};

/// Which stream a chunk of output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives output as it arrives (for streaming front ends). Must not block for long: the box's
/// pipes fill while it runs.
pub trait OutputSink {
    fn chunk(&mut self, stream: Stream, data: &[u8]);
}

/// A sink that drops everything (when only the captured result matters).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSink;

impl OutputSink for NoSink {
    fn chunk(&mut self, _: Stream, _: &[u8]) {}
}

/// How a run is watched.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Keep output in the result (up to --max-output per stream).
    pub capture: bool,
}

/// One box's watch.
#[derive(Clone, Copy)]
pub(crate) struct Watch<'a> {
    /// Readable once every box is to end ([`crate::Runtime::end_every_box`]).
    pub(crate) ending: BorrowedFd<'a>,
    pub(crate) spec: &'a BoxSpec,
    pub(crate) opts: RunOptions,
    /// The plan the box's first process runs: a setup failure names its step.
    pub(crate) plan: &'a dyn Steps,
    /// `HULL_TRACE_STEPS` was set: report when the program's exit arrives.
    pub(crate) tracing: bool,
}

impl Watch<'_> {
    /// Watches `started` until the program's status and all its output are in (or pid 1 is
    /// gone); `sigfd` reports the forwarded signals. Each poll is answered in this order: the
    /// deadline, the channel, the output pipes, the seccomp listener, the ending pipe, the
    /// signals, pid 1's exit.
    pub(crate) fn run(
        &self,
        started: Started,
        sigfd: &OwnedFd,
        sink: &mut dyn OutputSink,
    ) -> Result<Outcome, BoxError> {
        let mut w = Watching::new(*self, started, sigfd.as_fd())?;
        while !w.complete() {
            let Some(fds) = w.poll()? else {
                break;
            };
            w.enforce_deadline();
            let ready =
                |i: usize| fds[i].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            if ready(CHANNEL) {
                w.on_channel()?;
            }
            for (i, which) in [(STDOUT, Stream::Stdout), (STDERR, Stream::Stderr)] {
                if ready(i) {
                    w.on_output(which, sink);
                }
            }
            if ready(LISTENER) {
                w.on_listener();
            }
            if ready(ENDING) {
                w.on_ending();
            }
            if ready(SIGNALS) {
                w.on_signal();
            }
            if ready(PID1) {
                w.on_pid1();
            }
        }
        w.finish()
    }
}

/// User plus system CPU time in a wait's resource usage (pid 1's own and every process it
/// reaped), in milliseconds.
fn rusage_ms(ru: &libc::rusage) -> u64 {
    let ms = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap_or(0) * 1000 + u64::try_from(t.tv_usec).unwrap_or(0) / 1000
    };
    ms(ru.ru_utime) + ms(ru.ru_stime)
}

/// Where each descriptor of one poll is (one not watched now is -1, which poll skips).
const CHANNEL: usize = 0;
const STDOUT: usize = 1;
const STDERR: usize = 2;
const PID1: usize = 3;
const SIGNALS: usize = 4;
const LISTENER: usize = 5;
const ENDING: usize = 6;

/// A watch in progress: what it holds of the box and what it has seen so far.
struct Watching<'a> {
    watch: Watch<'a>,
    pid: libc::pid_t,
    channel: Channel,
    out: OwnedFd,
    err: OwnedFd,
    pidfd: OwnedFd,
    sigfd: BorrowedFd<'a>,
    /// When the box's clock started, and its deadline (CLOCK_MONOTONIC ns).
    start: u64,
    deadline: u64,
    o: Outcome,
    /// The box's setup is done (`Ready`), and the seccomp listener that came with it (until
    /// it hangs up).
    ready: bool,
    listener: Option<OwnedFd>,
    setup_error: Option<BoxError>,
    sock_open: bool,
    /// We sent pid 1 SIGKILL (deadline, escape, ending, signal): once is enough.
    killed: bool,
    /// Pid 1 is reaped.
    exited: bool,
    buf: Vec<u8>,
}

impl<'a> Watching<'a> {
    fn new(watch: Watch<'a>, started: Started, sigfd: BorrowedFd<'a>) -> Result<Self, BoxError> {
        let Started {
            pid,
            channel,
            out,
            err,
            clock: start,
            setup,
        } = started;
        let pidfd = sys::pidfd_open(pid).map_err(|errno| BoxError::Sys {
            what: "open a pidfd for the box",
            errno,
        })?;
        let _ = sys::set_nonblocking(out.as_fd());
        let _ = sys::set_nonblocking(err.as_fd());
        let deadline = start + u64::try_from(watch.spec.timeout.as_nanos()).unwrap_or(u64::MAX);
        let mut o = Outcome::default();
        let (ready, listener) = match setup {
            Setup::Done { listener, us } => {
                o.setup_us = us;
                (true, listener)
            }
            Setup::Running => (false, None),
        };
        Ok(Watching {
            watch,
            pid,
            channel,
            out,
            err,
            pidfd,
            sigfd,
            start,
            deadline,
            o,
            ready,
            listener,
            setup_error: None,
            sock_open: true,
            killed: false,
            exited: false,
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// After pid 1 is gone every writer of the pipes is gone too; drain to EOF. Once the
    /// program has exited and its output is complete, the result is known: pid 1 is ending
    /// the box on its own, and the teardown reaps it (off the result's path).
    fn complete(&self) -> bool {
        self.o.stdout.eof
            && self.o.stderr.eof
            && ((self.exited && !self.sock_open) || self.o.status.is_some())
    }

    /// Waits until something is ready or the deadline passes; `None` when pid 1 is gone and
    /// its pipes stayed silent for a second (a pipe still open after the box died would be a
    /// kernel surprise: the drain is bounded).
    fn poll(&self) -> Result<Option<[libc::pollfd; 7]>, BoxError> {
        let watched = |fd: BorrowedFd<'_>, on: bool| libc::pollfd {
            fd: if on { fd.as_raw_fd() } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [watched(self.channel.fd(), false); 7];
        fds[CHANNEL] = watched(self.channel.fd(), self.sock_open);
        fds[STDOUT] = watched(self.out.as_fd(), !self.o.stdout.eof);
        fds[STDERR] = watched(self.err.as_fd(), !self.o.stderr.eof);
        fds[PID1] = watched(self.pidfd.as_fd(), !self.exited);
        fds[SIGNALS] = watched(self.sigfd, !self.exited);
        if let Some(l) = &self.listener {
            fds[LISTENER] = watched(l.as_fd(), !self.exited);
        }
        fds[ENDING] = watched(self.watch.ending, !self.killed);
        let now = sys::monotonic_ns();
        let timeout_ms = if self.exited {
            1000
        } else if now >= self.deadline {
            0
        } else {
            i32::try_from((self.deadline - now) / 1_000_000 + 1).unwrap_or(i32::MAX)
        };
        let n = sys::poll(&mut fds, timeout_ms).map_err(|errno| BoxError::Sys {
            what: "poll the box",
            errno,
        })?;
        Ok(if n == 0 && self.exited {
            None
        } else {
            Some(fds)
        })
    }

    /// Kills the box (SIGKILL to pid 1 ends its pid namespace), once.
    fn kill(&mut self) {
        if !self.killed {
            self.killed = true;
            // What the killed processes used would be lost with them.
            self.o.killed_cpu_ms = crate::cputime::tree_ms(self.pid);
            let _ = sys::kill(self.pid, libc::SIGKILL);
        }
    }

    /// The wall-clock deadline: past it a running box is killed and timed out.
    fn enforce_deadline(&mut self) {
        if !self.exited && sys::monotonic_ns() >= self.deadline && !self.killed {
            self.o.timed_out = true;
            self.kill();
        }
    }

    /// One message from pid 1: setup done (with the seccomp listener), a setup or exec
    /// failure, or the program's status. A message out of turn ends the watch.
    fn on_channel(&mut self) -> Result<(), BoxError> {
        let (m, fd) = match self.channel.recv()? {
            Recv::Closed | Recv::Failed(_) => {
                self.sock_open = false;
                return Ok(());
            }
            Recv::Message(m, fd) => (m, fd),
        };
        match m {
            Message::Ready => {
                self.ready = true;
                if self.watch.tracing {
                    crate::steplog::step("supervisor: box ready (setup done)");
                }
                self.o.setup_us = (sys::monotonic_ns() - self.start) / 1000;
                self.listener = fd;
            }
            Message::SetupFailed { step, errno } => {
                self.setup_error = Some(channel::setup_error(self.watch.plan, step, errno));
            }
            Message::ExecFailed { errno } => self.o.exec_failed = Some(Errno(errno)),
            Message::MainExited { status, cpu_ms } => {
                self.o.main_cpu_ms = u64::try_from(cpu_ms).unwrap_or(0);
                self.o.duration_ms = (sys::monotonic_ns() - self.start) / 1_000_000;
                if self.watch.tracing {
                    crate::steplog::step("supervisor: program's exit received");
                }
                self.o.status = Some(status);
            }
            // A template's entry process sends Pid1, and id maps are settled, before the watch
            // starts, and so is a gateway box's TAP (taken by the caller before the program may
            // start); only a resident box's pid 1 (never watched) speaks of spawns or a FUSE root.
            m @ (Message::Pid1 { .. }
            | Message::WantIdMaps
            | Message::IdsMapped
            | Message::Spawned { .. }
            | Message::Exited { .. }
            | Message::ChdirFailed { .. }
            | Message::Root { .. }
            | Message::IdsFailed { .. }
            | Message::HandedOver { .. }
            | Message::FuseDevice
            | Message::TapDevice
            | Message::GatewayReady) => {
                return Err(channel::unexpected(
                    self.watch.plan,
                    "Ready, SetupFailed, ExecFailed or MainExited",
                    m,
                ));
            }
        }
        Ok(())
    }

    /// What one output pipe has, kept up to the cap and handed to `sink`.
    fn on_output(&mut self, which: Stream, sink: &mut dyn OutputSink) {
        let (fd, cap) = match which {
            Stream::Stdout => (&self.out, &mut self.o.stdout),
            Stream::Stderr => (&self.err, &mut self.o.stderr),
        };
        drain(
            fd.as_fd(),
            cap,
            which,
            &mut self.buf,
            self.watch.spec.max_output,
            self.watch.opts.capture,
            sink,
        );
    }

    /// A seccomp notification: the box made an escape call; it is named and the box killed.
    /// A hangup means no filtered process is left.
    fn on_listener(&mut self) {
        let Some(l) = &self.listener else {
            return;
        };
        let Ok(n) = hull_seccomp::recv_notification(l.as_fd()) else {
            // The listener reports POLLHUP once no filtered process remains.
            self.listener = None;
            return;
        };
        if self.o.escape.is_none() {
            let what = n.describe();
            let reason = match n.syscall_name() {
                Some(name) if what == name => format!(
                    "the box called {name} (syscall {}), an escape primitive; the box was killed",
                    n.nr
                ),
                _ => format!("the box made {what}, which the filter refuses; the box was killed"),
            };
            self.o.escape = Some((what, reason));
        }
        self.kill();
    }

    /// Every box is to end (`Runtime::end_every_box`).
    fn on_ending(&mut self) {
        if !self.killed {
            self.o.ended = true;
            self.kill();
        }
    }

    /// A forwarded signal (SIGINT, SIGTERM, SIGHUP) kills the box and is reported.
    fn on_signal(&mut self) {
        let mut si = [0u8; 128];
        if sys::read(self.sigfd, &mut si).is_ok() {
            let signo = i32::from_ne_bytes([si[0], si[1], si[2], si[3]]);
            self.o.interrupted = Some(signo);
            self.kill();
        }
    }

    /// Pid 1 exited: reap it, with its rusage.
    fn on_pid1(&mut self) {
        if self.exited {
            return;
        }
        if let Ok(Some(w)) = sys::wait4(self.pid, true) {
            self.exited = true;
            self.o.pid1_status = w.status;
            self.o.rusage_cpu_ms = rusage_ms(&w.rusage);
            if self.o.duration_ms == 0 {
                self.o.duration_ms = (sys::monotonic_ns() - self.start) / 1_000_000;
            }
        }
    }

    /// The watch's end: pid 1 killed if still there (and reaped when the program's status never
    /// came), the CPU time settled, and a box that never finished its setup an error.
    fn finish(self) -> Result<Outcome, BoxError> {
        let mut o = self.o;
        o.exited = self.exited;
        if !self.exited {
            // Pid 1 is on its way out (it sent the program's status) or must go now; either way
            // SIGKILL makes sure, and kills the whole pid namespace with it.
            let _ = sys::kill(self.pid, libc::SIGKILL);
            if o.status.is_none() {
                if let Ok(Some(w)) = sys::wait4(self.pid, false) {
                    o.pid1_status = w.status;
                    o.exited = true;
                    // Pid 1 reaped every process of its namespace as it died, so its usage
                    // holds the CPU of a program killed at the deadline (its own report never
                    // came).
                    o.rusage_cpu_ms = rusage_ms(&w.rusage);
                }
            }
        }
        if !o.exited || o.rusage_cpu_ms == 0 {
            o.rusage_cpu_ms = o.rusage_cpu_ms.max(o.main_cpu_ms);
        }
        o.rusage_cpu_ms = o.rusage_cpu_ms.max(o.killed_cpu_ms);
        if let Some(e) = self.setup_error {
            return Err(e);
        }
        if !self.ready
            && o.status.is_none()
            && o.exec_failed.is_none()
            && !o.timed_out
            && o.interrupted.is_none()
            && !o.ended
        {
            return Err(BoxError::SetupVanished(o.pid1_status));
        }
        Ok(o)
    }
}

/// Reads what `fd` has (at most 16 reads), keeping up to `max` bytes of the stream in `cap` and
/// handing the kept bytes to `sink`.
fn drain(
    fd: BorrowedFd<'_>,
    cap: &mut Captured,
    which: Stream,
    buf: &mut [u8],
    max: u64,
    capture: bool,
    sink: &mut dyn OutputSink,
) {
    // Bounded so one flooding stream cannot starve the deadline check.
    for _ in 0..16 {
        match sys::read(fd, buf) {
            Ok(0) => {
                cap.eof = true;
                return;
            }
            Ok(n) => {
                let room = usize::try_from(max.saturating_sub(cap.total)).unwrap_or(usize::MAX);
                let keep = n.min(room);
                if keep > 0 {
                    if capture {
                        cap.data.extend_from_slice(&buf[..keep]);
                    }
                    sink.chunk(which, &buf[..keep]);
                }
                cap.total += n as u64;
                cap.dropped += (n - keep) as u64;
            }
            Err(Errno(libc::EAGAIN)) => return,
            Err(_) => {
                cap.eof = true;
                return;
            }
        }
    }
}
