//! The link a box's frames cross: one Ethernet frame in, one frame out, and readiness for an
//! event loop (the `poll_*` methods register the loop's waker when nothing is ready). The
//! gateway knows nothing else about where frames come from: [`TapLink`] is a TAP device's fd
//! (namespace tier) or one end of a datagram socket pair whose other end is QEMU's virtio-net
//! backend (microVM tier: one frame per datagram), [`MemLink`] an in-memory pair (tests, and a
//! box stack in the same process). On a datagram socket a read of 0 bytes is an empty
//! datagram, which only a compromised guest kernel sends: taken as the link's end, it costs
//! that VM its own network (fail closed).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

/// One box's link (see the module comment). Frames are whole Ethernet frames without any
/// link header of the transport (a TAP opened with `IFF_NO_PI`; virtio's header stripped).
pub trait Link: Send {
    /// Receives one frame into `buf`, returning its length; `Pending` when none is waiting
    /// (the waker is woken when one is). `Ok(0)` never means a frame: the link is gone.
    fn poll_recv(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;

    /// Hands one frame to the link; `Pending` when the link cannot take it yet.
    fn poll_send(&mut self, cx: &mut Context<'_>, frame: &[u8]) -> Poll<io::Result<()>>;

    /// The largest frame the link carries (Ethernet header included).
    fn max_frame(&self) -> usize;
}

/// A TAP device's fd, made non-blocking and registered with the runtime's reactor.
#[derive(Debug)]
pub struct TapLink {
    fd: AsyncFd<File>,
    max_frame: usize,
}

impl TapLink {
    /// Takes the fd of a TAP opened with `IFF_TAP | IFF_NO_PI` whose MTU is `mtu` (the IP MTU;
    /// frames are 14 bytes longer). Must be called inside a tokio runtime.
    pub fn new(fd: OwnedFd, mtu: usize) -> io::Result<TapLink> {
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK)?;
        Ok(TapLink {
            fd: crate::sys::register(File::from(fd))?,
            max_frame: mtu + 14,
        })
    }
}

impl Link for TapLink {
    fn poll_recv(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = match self.fd.poll_read_ready(cx) {
                Poll::Ready(g) => g?,
                Poll::Pending => return Poll::Pending,
            };
            match guard.try_io(|f| f.get_ref().read(buf)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_send(&mut self, cx: &mut Context<'_>, frame: &[u8]) -> Poll<io::Result<()>> {
        loop {
            let mut guard = match self.fd.poll_write_ready(cx) {
                Poll::Ready(g) => g?,
                Poll::Pending => return Poll::Pending,
            };
            match guard.try_io(|f| f.get_ref().write(frame)) {
                Ok(r) => return Poll::Ready(r.map(|_| ())),
                Err(_would_block) => continue,
            }
        }
    }

    fn max_frame(&self) -> usize {
        self.max_frame
    }
}

/// One end of an in-memory link (see [`MemLink::pair`]). Unbounded: a test's box and the
/// gateway never wait for each other to send.
#[derive(Debug)]
pub struct MemLink {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    max_frame: usize,
}

impl MemLink {
    /// Two ends: what one sends the other receives.
    pub fn pair(max_frame: usize) -> (MemLink, MemLink) {
        let (atx, brx) = mpsc::unbounded_channel();
        let (btx, arx) = mpsc::unbounded_channel();
        (
            MemLink {
                tx: atx,
                rx: arx,
                max_frame,
            },
            MemLink {
                tx: btx,
                rx: brx,
                max_frame,
            },
        )
    }

    /// Sends a frame; false when the other end is gone.
    pub fn send(&self, frame: Vec<u8>) -> bool {
        self.tx.send(frame).is_ok()
    }
}

impl Link for MemLink {
    fn poll_recv(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        loop {
            return match self.rx.poll_recv(cx) {
                // An empty frame is no frame (`Ok(0)` would say the link is gone).
                Poll::Ready(Some(f)) if f.is_empty() => continue,
                Poll::Ready(Some(f)) => {
                    // A frame longer than the buffer is cut, as a device would refuse it.
                    let n = f.len().min(buf.len());
                    buf[..n].copy_from_slice(&f[..n]);
                    Poll::Ready(Ok(n))
                }
                Poll::Ready(None) => Poll::Ready(Ok(0)),
                Poll::Pending => Poll::Pending,
            };
        }
    }

    fn poll_send(&mut self, _cx: &mut Context<'_>, frame: &[u8]) -> Poll<io::Result<()>> {
        Poll::Ready(if self.send(frame.to_vec()) {
            Ok(())
        } else {
            Err(io::ErrorKind::BrokenPipe.into())
        })
    }

    fn max_frame(&self) -> usize {
        self.max_frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_empty_frame_on_a_memory_link_is_skipped_not_taken_for_its_end() {
        let (mut a, b) = MemLink::pair(64);
        assert!(b.send(Vec::new()));
        assert!(b.send(vec![1, 2, 3]));
        let mut buf = [0u8; 64];
        let n = std::future::poll_fn(|cx| a.poll_recv(cx, &mut buf))
            .await
            .unwrap();
        assert_eq!(&buf[..n], &[1, 2, 3]);
        drop(b);
        let n = std::future::poll_fn(|cx| a.poll_recv(cx, &mut buf))
            .await
            .unwrap();
        assert_eq!(n, 0, "the other end is gone");
    }
}
