//! `hull run -t`: a pseudo-terminal hull makes and owns for the box, relayed to the caller.
//!
//! The box never gets the caller's terminal (code in it could change the caller's modes or
//! size, as `-i`'s module says): hull opens a new pty, puts its slave end in place of fd 0
//! (the engine's `Stdin::Terminal` makes it the program's stdin, stdout, stderr and
//! controlling terminal, in a session of its own) and relays: the master's output to hull's
//! stdout, and with `-i` the caller's input to the master. With `-i` on a terminal, the
//! caller's terminal is put in raw mode so every key (Ctrl-C too) goes to the box's terminal,
//! whose line discipline turns Ctrl-C into SIGINT for the program's foreground process group
//! (not a kill of the box); the caller's modes are restored when the box ends, or when the
//! relay is dropped on any other way out. The caller's window size is copied to the pty at
//! start and whenever it changes (checked four times a second, so no signal handler is
//! needed in this multi-threaded process); the pty then signals SIGWINCH in the box.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::termios::{self, Termios, Winsize};

/// How often the caller's window size is compared with the box's terminal's.
const WINSIZE_EVERY: Duration = Duration::from_millis(250);

/// The relay of one box's terminal (see the module comment).
pub struct PtyRelay {
    /// The caller's terminal and the modes to give back to it (only when they were changed).
    saved: Option<(OwnedFd, Termios)>,
    output: Option<JoinHandle<()>>,
    done: Arc<AtomicBool>,
}

/// The caller's terminal, if one of fd 0, 1 and 2 is one: the size comes from it.
fn caller_terminal() -> Option<OwnedFd> {
    [
        std::io::stdin().as_fd(),
        std::io::stdout().as_fd(),
        std::io::stderr().as_fd(),
    ]
    .into_iter()
    .find(|fd| termios::isatty(fd))
    .and_then(|fd| rustix::io::dup(fd).ok())
}

/// Opens a pty pair: (master, slave).
fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    Ok((master, slave))
}

impl PtyRelay {
    /// Makes the box's terminal, puts it at fd 0 and starts relaying; `interactive` (`-i`)
    /// also relays the caller's input (raw, when fd 0 is a terminal). An error names what
    /// failed; the caller reports it before any box.
    pub fn start(interactive: bool) -> std::io::Result<PtyRelay> {
        let (master, slave) = open_pty()?;
        let master = Arc::new(master);
        let caller = caller_terminal();
        let mut size = caller.as_ref().and_then(|t| termios::tcgetwinsize(t).ok());
        if let Some(ws) = size {
            termios::tcsetwinsize(&*master, ws)?;
        }
        let input: OwnedFd = rustix::io::dup(std::io::stdin().as_fd())?;
        let mut saved = None;
        if interactive && termios::isatty(&input) {
            let before = termios::tcgetattr(&input)?;
            let mut raw = before.clone();
            raw.make_raw();
            termios::tcsetattr(&input, termios::OptionalActions::Now, &raw)?;
            // A panic (the release build aborts after the hook) gives the modes back too.
            let (fd, modes) = (rustix::io::dup(&input)?, before.clone());
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let _ = termios::tcsetattr(&fd, termios::OptionalActions::Now, &modes);
                previous(info);
            }));
            saved = Some((rustix::io::dup(&input)?, before));
        }
        // The slave in fd 0's place (the box's Stdin::Terminal); ours closes in `finish`.
        rustix::stdio::dup2_stdin(&slave)?;
        drop(slave);
        let done = Arc::new(AtomicBool::new(false));
        // Helper threads block the signals the engine forwards to the box (SIGINT, SIGTERM...),
        // so none of them is ended by one's default action with the terminal left raw.
        let spawn_failed = || std::io::Error::other("cannot start a relay thread");
        if interactive {
            let (m, raw) = (Arc::clone(&master), saved.is_some());
            hull_box::spawn_helper("hull-pty-input", move || {
                relay_input(std::fs::File::from(input), &m, raw);
            })
            .ok_or_else(spawn_failed)?;
        }
        let m = Arc::clone(&master);
        let output = hull_box::spawn_helper("hull-pty-output", move || relay_output(&m))
            .ok_or_else(spawn_failed)?;
        if let Some(caller) = caller {
            let (m, d) = (master, Arc::clone(&done));
            hull_box::spawn_helper("hull-pty-size", move || {
                while !d.load(Ordering::Relaxed) {
                    std::thread::sleep(WINSIZE_EVERY);
                    let now = termios::tcgetwinsize(&caller).ok();
                    if now.is_some() && !same_size(now, size) {
                        size = now;
                        if let Some(ws) = now {
                            let _ = termios::tcsetwinsize(&*m, ws);
                        }
                    }
                }
            })
            .ok_or_else(spawn_failed)?;
        }
        Ok(PtyRelay {
            saved,
            output: Some(output),
            done,
        })
    }

    /// After the box ended: closes our slave (so the master reads end once the box's copies
    /// are gone), waits for the output the box left to be written, and gives the caller's
    /// terminal its modes back.
    pub fn finish(mut self) {
        if let Ok(null) = std::fs::File::open("/dev/null") {
            let _ = rustix::stdio::dup2_stdin(&null);
        }
        if let Some(t) = self.output.take() {
            let _ = t.join();
        }
        self.restore();
    }

    fn restore(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some((fd, modes)) = self.saved.take() {
            let _ = termios::tcsetattr(&fd, termios::OptionalActions::Now, &modes);
        }
    }
}

impl Drop for PtyRelay {
    fn drop(&mut self) {
        self.restore();
    }
}

fn same_size(a: Option<Winsize>, b: Option<Winsize>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.ws_row == b.ws_row && a.ws_col == b.ws_col,
        (None, None) => true,
        _ => false,
    }
}

/// The caller's input into the box's terminal until either ends. Input that is not a
/// terminal (a pipe) ends with the terminal's end-of-file character, as a user's Ctrl-D.
fn relay_input(mut from: std::fs::File, master: &OwnedFd, raw: bool) {
    let mut buf = [0u8; 4096];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                if !raw {
                    let _ = rustix::io::write(master, b"\x04");
                }
                return;
            }
            Ok(n) => {
                if write_all(master, &buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

fn write_all(fd: &OwnedFd, mut data: &[u8]) -> rustix::io::Result<()> {
    while !data.is_empty() {
        match rustix::io::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The box's terminal output to our stdout until the terminal has no slave open (EIO).
fn relay_output(master: &OwnedFd) {
    let mut buf = [0u8; 16384];
    let mut out = std::io::stdout().lock();
    loop {
        match rustix::io::read(master, &mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                    return;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}
