//! `hull run -i` on a terminal: the box reads a pipe, never the caller's terminal.
//!
//! Handing the terminal itself to the box would let code in it change the caller's terminal
//! (`stty -echo -icanon` left the user's shell without echo after hull exited) or resize it.
//! So when standard input is a terminal, hull keeps the terminal, puts a pipe's read end in
//! its place as fd 0 (which the box inherits) and copies what the terminal gives into the pipe
//! on a thread, closing the pipe at the terminal's end of input (Ctrl-D). The terminal stays in
//! the mode the caller's shell left it (canonical, echoing), which is what `-i` without a
//! pseudo-terminal means.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};

/// Puts the relay in place when fd 0 is a terminal; nothing otherwise (a pipe or a file is
/// handed over as it is). An error names what failed; the caller reports it before any box.
pub fn start_if_terminal() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    if !rustix::termios::isatty(stdin.as_fd()) {
        return Ok(());
    }
    let terminal: OwnedFd = rustix::io::dup(stdin.as_fd())?;
    let (read, write) = rustix::pipe::pipe()?;
    rustix::stdio::dup2_stdin(&read)?;
    drop(read);
    // A helper thread blocks the signals the engine forwards to the box, as every hull thread.
    hull_box::spawn_helper("hull-stdin-relay", move || {
        relay(std::fs::File::from(terminal), std::fs::File::from(write));
    })
    .ok_or_else(|| std::io::Error::other("cannot start the stdin relay thread"))?;
    Ok(())
}

/// Copies the terminal's input into the pipe until either ends.
fn relay(mut terminal: std::fs::File, mut pipe: std::fs::File) {
    let mut buf = [0u8; 4096];
    loop {
        match terminal.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if pipe.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}
