//! What ends boxes from outside: the signals a supervisor forwards, and ending every box of a
//! Runtime at once, for a front end whose client went away (`hull serve` when its stdin closes):
//! one pipe every box's watch polls. Writing to it makes its read end readable for good (nobody
//! reads it), so a box whose watch starts later ends at once too, with no list of boxes to keep
//! and no race between starting a box and ending them all.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::BoxError;
use crate::sys;

/// The signals the supervisor turns into "kill the box, clean up, report" (the thread watching a
/// box reads them from a signalfd; background threads block them).
pub(crate) const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Starts a front end's helper thread (an output writer, say) with the forwarded signals
/// blocked, so that SIGINT, SIGTERM or SIGHUP reach the thread watching a box, which kills the
/// box, cleans up and reports, instead of ending the whole process from a thread that cannot.
/// None if the thread cannot be made.
pub fn spawn_helper(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Option<std::thread::JoinHandle<()>> {
    sys::spawn_helper(name, &FORWARDED, f)
}

/// The pipe that ends every box of one Runtime.
pub(crate) struct Ending {
    read: OwnedFd,
    write: OwnedFd,
    done: AtomicBool,
}

impl Ending {
    pub(crate) fn new() -> Result<Ending, BoxError> {
        let (read, write) = sys::pipe().map_err(|errno| BoxError::Sys {
            what: "create the pipe that ends every box",
            errno,
        })?;
        Ok(Ending {
            read,
            write,
            done: AtomicBool::new(false),
        })
    }

    /// Ends every box now and from now on (once; later calls do nothing).
    pub(crate) fn end_all(&self) {
        if !self.done.swap(true, Ordering::SeqCst) {
            let _ = sys::write_all(self.write.as_fd(), b"x");
        }
    }

    /// What a box's watch polls: readable once every box is to end.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }
}
