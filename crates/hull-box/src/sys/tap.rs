//! The system calls that make and configure a box's TAP (the gateway network, see
//! [`crate::tap`]): `TUNSETIFF` on `/dev/net/tun`, then the classic interface and route ioctls
//! on a datagram socket (as slirp4netns configures its TAP), each on a request built on the
//! stack. Runs in a box's pid 1 between `clone` and `execve`: no allocation.

use std::os::fd::RawFd;
use std::ptr;

use super::{check, close_raw, SysResult};

/// The link as the box's pid 1 sets it up: all plain data, from [`crate::tap`]'s constants.
pub(crate) struct Link {
    /// The interface's name, without a NUL (at most `IFNAMSIZ - 1` bytes).
    pub name: &'static [u8],
    pub mac: [u8; 6],
    pub addr: [u8; 4],
    pub netmask: [u8; 4],
    pub gateway: [u8; 4],
    pub mtu: i32,
}

/// The link of every gateway box.
pub(crate) fn link() -> Link {
    use crate::tap;
    Link {
        name: tap::TAP_NAME.as_bytes(),
        mac: tap::BOX_MAC,
        addr: tap::BOX_ADDR.octets(),
        netmask: tap::netmask().octets(),
        gateway: tap::GATEWAY_ADDR.octets(),
        mtu: i32::try_from(tap::MTU).unwrap_or(1500),
    }
}

/// The kernel's `struct rtentry` (`<linux/route.h>`), which glibc's `libc` bindings lack.
#[repr(C)]
struct RtEntry {
    rt_pad1: libc::c_ulong,
    rt_dst: libc::sockaddr,
    rt_gateway: libc::sockaddr,
    rt_genmask: libc::sockaddr,
    rt_flags: libc::c_ushort,
    rt_pad2: libc::c_short,
    rt_pad3: libc::c_ulong,
    rt_pad4: *mut libc::c_void,
    rt_metric: libc::c_short,
    rt_dev: *mut libc::c_char,
    rt_mtu: libc::c_ulong,
    rt_window: libc::c_ulong,
    rt_irtt: libc::c_ushort,
}

/// An IPv4 `sockaddr` (the layout of `sockaddr_in`: port 0, then the address).
fn inet(addr: [u8; 4]) -> libc::sockaddr {
    let mut data = [0 as libc::c_char; 14];
    for (d, b) in data[2..6].iter_mut().zip(addr) {
        *d = libc::c_char::from_ne_bytes([b]);
    }
    libc::sockaddr {
        sa_family: libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(2),
        sa_data: data,
    }
}

/// An `ifreq` naming `name`, the rest zero.
fn ifreq(name: &[u8]) -> libc::ifreq {
    // SAFETY: ifreq is plain old data (a name and a union of plain fields); zeroed is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name) {
        *dst = libc::c_char::from_ne_bytes([*src]);
    }
    req
}

/// A VM guest's links, set up by its init (hull-vm's guest side, PID 1 of the VM) in the
/// guest's only network namespace: loopback up, and with the gateway network its virtio-net
/// device (named [`crate::tap::TAP_NAME`] there too) configured as a box's TAP is (the same
/// MAC, MTU, address and default route), so the gateway serves a VM's frames as a box's.
/// (Exported at the crate's root: `hull_box::configure_guest_links`.)
pub fn configure_guest_links(gateway: bool) -> std::io::Result<()> {
    let io = |e: super::Errno| std::io::Error::from_raw_os_error(e.0);
    super::loopback_up().map_err(io)?;
    if gateway {
        configure(&link()).map_err(io)?;
    }
    Ok(())
}

/// Makes `tun` (an open `/dev/net/tun`, in the box's network namespace) a TAP named
/// `link.name` without packet information (one Ethernet frame per read or write).
pub(crate) fn set_tap(tun: RawFd, link: &Link) -> SysResult<()> {
    let mut req = ifreq(link.name);
    req.ifr_ifru.ifru_flags = libc::c_short::try_from(libc::IFF_TAP | libc::IFF_NO_PI).unwrap_or(0);
    // SAFETY: TUNSETIFF reads (and writes back the name into) an ifreq that lives for the call.
    check(unsafe { libc::ioctl(tun, libc::TUNSETIFF, ptr::from_mut(&mut req)) }).map(drop)
}

/// Configures the TAP `link.name`: its MAC and MTU, its address and netmask, up, then the
/// default route through the gateway (the route needs the link up to reach the gateway).
pub(crate) fn configure(link: &Link) -> SysResult<()> {
    // SAFETY: plain socket creation.
    let sock =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    let result = configure_on(sock, link);
    close_raw(sock);
    result
}

fn configure_on(sock: RawFd, link: &Link) -> SysResult<()> {
    let set = |request: libc::Ioctl, req: &mut libc::ifreq| {
        // SAFETY: each SIOCSIF* request reads an ifreq that lives for the call.
        check(unsafe { libc::ioctl(sock, request, ptr::from_mut(req)) }).map(drop)
    };
    let mut req = ifreq(link.name);
    let mut hw = [0 as libc::c_char; 14];
    for (d, b) in hw.iter_mut().zip(link.mac) {
        *d = libc::c_char::from_ne_bytes([b]);
    }
    req.ifr_ifru.ifru_hwaddr = libc::sockaddr {
        sa_family: libc::ARPHRD_ETHER,
        sa_data: hw,
    };
    set(libc::SIOCSIFHWADDR, &mut req)?;
    let mut req = ifreq(link.name);
    req.ifr_ifru.ifru_mtu = link.mtu;
    set(libc::SIOCSIFMTU, &mut req)?;
    let mut req = ifreq(link.name);
    req.ifr_ifru.ifru_addr = inet(link.addr);
    set(libc::SIOCSIFADDR, &mut req)?;
    let mut req = ifreq(link.name);
    req.ifr_ifru.ifru_netmask = inet(link.netmask);
    set(libc::SIOCSIFNETMASK, &mut req)?;
    let mut req = ifreq(link.name);
    req.ifr_ifru.ifru_flags = libc::c_short::try_from(libc::IFF_UP).unwrap_or(1);
    set(libc::SIOCSIFFLAGS, &mut req)?;
    let mut route = RtEntry {
        rt_pad1: 0,
        rt_dst: inet([0; 4]),
        rt_gateway: inet(link.gateway),
        rt_genmask: inet([0; 4]),
        rt_flags: libc::RTF_UP | libc::RTF_GATEWAY,
        rt_pad2: 0,
        rt_pad3: 0,
        rt_pad4: ptr::null_mut(),
        rt_metric: 0,
        rt_dev: ptr::null_mut(),
        rt_mtu: 0,
        rt_window: 0,
        rt_irtt: 0,
    };
    // SAFETY: SIOCADDRT reads an rtentry that lives for the call (rt_dev null: the kernel finds
    // the interface by the gateway's address).
    check(unsafe { libc::ioctl(sock, libc::SIOCADDRT, ptr::from_mut(&mut route)) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_request_has_the_kernels_layout() {
        // `struct rtentry` on 64-bit Linux: 120 bytes, rt_flags at 56, rt_dev at 88.
        #[cfg(target_pointer_width = "64")]
        {
            assert_eq!(std::mem::size_of::<RtEntry>(), 120);
            assert_eq!(std::mem::offset_of!(RtEntry, rt_flags), 56);
            assert_eq!(std::mem::offset_of!(RtEntry, rt_dev), 88);
        }
        let a = inet([10, 0, 2, 100]);
        assert_eq!(i32::from(a.sa_family), libc::AF_INET);
        assert_eq!(
            a.sa_data[2..6]
                .iter()
                .map(|c| c.to_ne_bytes()[0])
                .collect::<Vec<u8>>(),
            [10, 0, 2, 100]
        );
        let l = link();
        assert_eq!(l.name, b"eth0");
        assert_eq!(l.mtu, 65520);
    }
}
