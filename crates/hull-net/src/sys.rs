//! The crate's one unsafe operation: registering a TAP device's fd with tokio's reactor.

use std::fs::File;
use std::io;

use tokio::io::unix::AsyncFd;

/// Registers `file` with the current runtime's reactor (readable and writable interest).
pub fn register(file: File) -> io::Result<AsyncFd<File>> {
    // SAFETY: `register` needs the fd `as_raw_fd` returns to stay open and the same for the
    // AsyncFd's whole life. The `File` owns its fd, always reports that one, and is owned by
    // the AsyncFd from here on, so the fd closes only when the AsyncFd drops it.
    let fd = unsafe { AsyncFd::register(file) };
    fd.map_err(io::Error::from)
}
