//! Ending every box of a Runtime at once, for a front end whose client went away (`hull serve`
//! when its stdin closes): one pipe every box's watch polls. Writing to it makes its read end
//! readable for good (nobody reads it), so a box whose watch starts later ends at once too, with
//! no list of boxes to keep and no race between starting a box and ending them all.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::BoxError;
use crate::sys;

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
