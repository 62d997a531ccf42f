//! The box's end of the gateway network ([`crate::Network::Gateway`]): the one place its link's
//! constants are written (the TAP's name, the box's MAC, address and MTU, the gateway's address),
//! and what the caller is handed: the TAP descriptor ([`Tap`]), through a [`TapHandler`] given
//! with the box's other hand-offs ([`Handoff`]).
//!
//! The box's pid 1 makes the TAP in its own network namespace while it still holds its
//! capabilities there, configures it, sends the descriptor to the supervisor and closes its own
//! copy; its program starts only once the caller's handler has returned (so the box never sees a
//! network without its gateway). The userspace stack that serves the other end (`hull-net`) uses
//! the same addresses (`hull_net::ingress::{GATEWAY, BOX}`).

use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;

/// The device a TAP is made through.
pub const TUN_DEVICE: &str = "/dev/net/tun";
/// The TAP's name inside the box.
pub const TAP_NAME: &str = "eth0";
/// The box's MAC: locally administered, unicast (`02:48:55:4c:4c:01`, "HULL").
pub const BOX_MAC: [u8; 6] = [0x02, 0x48, 0x55, 0x4c, 0x4c, 0x01];
/// The box's address on its link.
pub const BOX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 100);
/// The length of the link's prefix (`10.0.2.0/24`).
pub const PREFIX_LEN: u8 = 24;
/// The gateway's address: the box's default route and its DNS server.
pub const GATEWAY_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The link's MTU: the largest an Ethernet TAP takes, so bulk transfers cross the userspace
/// stack in few frames (PMTU to the internet is the host kernel's business: the gateway is an
/// L4 proxy).
pub const MTU: u32 = 65520;

/// The link's netmask, from [`PREFIX_LEN`].
pub const fn netmask() -> Ipv4Addr {
    Ipv4Addr::from_bits(u32::MAX << (32 - PREFIX_LEN as u32))
}

/// What a box's `/etc/resolv.conf` says with the gateway network: the gateway answers DNS.
pub const RESOLV_CONF: &[u8] = b"nameserver 10.0.2.2\n";

/// A box's TAP, as its setup handed it over.
#[derive(Debug)]
pub struct Tap {
    /// The TAP's descriptor (`IFF_TAP | IFF_NO_PI`: one Ethernet frame per read or write). The
    /// caller's to keep and close: the box holds no copy. Closing the last copy unregisters the
    /// device, which takes the kernel ~23 ms here: close it off any latency-sensitive path (a
    /// gateway process ending, a background thread).
    pub fd: OwnedFd,
    /// The box's pid 1 (host pid namespace); for a VM's link (a datagram socket whose other
    /// end is QEMU's network device), the hull process that runs the VM.
    pub pid: libc::pid_t,
}

/// Takes a box's TAP before its program starts (see [`Handoff::tap`]): typically hands the
/// descriptor to the gateway process. An error ends the box (its program never starts) and is
/// the run's error ([`crate::BoxError::Gateway`]).
pub type TapHandler<'a> = dyn FnMut(Tap) -> std::io::Result<()> + 'a;

/// Who takes the descriptors a box's setup hands out, each before the box's program starts.
/// A box that hands one out with nobody to take it fails before its program starts.
#[derive(Default)]
pub struct Handoff<'a> {
    /// Serves a writable root's FUSE file system mounted by the box (`WritableRoot::fuse_in_box`;
    /// resident boxes only).
    /// (The type of [`crate::spec::FuseServer`], written out so this leaf module needs no other.)
    pub fuse: Option<&'a mut (dyn FnMut(libc::pid_t, OwnedFd) -> std::io::Result<()> + 'a)>,
    /// Takes the TAP of a box with [`crate::Network::Gateway`].
    pub tap: Option<&'a mut TapHandler<'a>>,
}

impl std::fmt::Debug for Handoff<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("fuse", &self.fuse.is_some())
            .field("tap", &self.tap.is_some())
            .finish()
    }
}

/// Whether this user can open [`TUN_DEVICE`] for reading and writing, as a box's setup will
/// (opening it makes no device; only `TUNSETIFF` would). The error is the open's.
pub fn probe() -> std::io::Result<()> {
    probe_at(std::path::Path::new(TUN_DEVICE))
}

fn probe_at(device: &std::path::Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(device)
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_netmask_follows_the_prefix_and_the_gateway_is_on_the_link() {
        assert_eq!(netmask(), Ipv4Addr::new(255, 255, 255, 0));
        let m = netmask().to_bits();
        assert_eq!(BOX_ADDR.to_bits() & m, GATEWAY_ADDR.to_bits() & m);
        assert_eq!(BOX_MAC[0] & 0b11, 0b10, "locally administered unicast");
        assert!(RESOLV_CONF.ends_with(format!("{GATEWAY_ADDR}\n").as_bytes()));
    }

    /// A device this user cannot open is refused naming the device and the fix, with the
    /// open's error as the cause (not repeated in the message).
    #[test]
    fn an_unopenable_device_is_a_typed_error_naming_the_fix() {
        let error = probe_at(std::path::Path::new("/nonexistent/net/tun")).unwrap_err();
        let e = crate::BoxError::TunUnavailable { error };
        let shown = e.to_string();
        assert!(shown.contains("/dev/net/tun"), "{shown}");
        assert!(shown.contains("chmod 0666 /dev/net/tun"), "{shown}");
        assert!(!shown.contains("No such file"), "{shown}");
        assert_eq!(e.kind(), "network_unavailable");
        assert!(std::error::Error::source(&e).is_some());
    }
}
