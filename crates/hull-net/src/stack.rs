//! The gateway's userspace TCP/IP stack for one box: a smoltcp [`Interface`] that is
//! `10.0.2.2` on the box's link (ARP, pings of the gateway), with AnyIP and a default route
//! through itself so it terminates TCP connections the box opens to *any* address, and the
//! frames the gateway answers without it (a reset for a refused SYN, a DNS reply over UDP).
//!
//! The stack only sees frames [`crate::ingress::classify`] passed to it: its queues are filled
//! and drained by the event loop, never by a socket of its own. One invariant keeps a held
//! SYN from reaching the wrong connection: no socket listens outside [`Stack::accept_held`],
//! which makes a listener for one endpoint, feeds it that SYN alone and checks the socket took
//! that very peer (smoltcp gives a SYN to the first listener that matches its destination).

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddrV4;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, HardwareAddress, IpAddress, IpCidr,
    IpEndpoint, IpProtocol, Ipv4Packet, TcpPacket, TcpSeqNumber, UdpPacket,
};

use crate::ingress::GATEWAY;

/// The gateway's MAC on every box's link (locally administered).
pub const GATEWAY_MAC: EthernetAddress = EthernetAddress([0x02, 0x68, 0x75, 0x6c, 0x6c, 0x02]);
/// The MAC a box's interface is given unless its link says otherwise.
/// (hull-box's TAP is made with it: `02:48:55:4c:4c:01`, "HULL".)
pub const BOX_MAC: EthernetAddress = EthernetAddress([0x02, 0x48, 0x55, 0x4c, 0x4c, 0x01]);

/// Buffer sizes of one TCP connection's socket, each way: with the 65520-byte MTU a 64 KiB buffer
/// keeps one segment in flight (`hull bench --network`: 718 MB/s upload at 64 KiB, 1339 MB/s at
/// 1 MiB, slirp4netns 663 MB/s). Pages are committed only as data flows through them.
const SOCKET_BUFFER: usize = 1024 * 1024;
/// A connection whose box stops acknowledging (with data waiting for it, or during the
/// handshake) is aborted after this long, so a vanished peer does not hold a slot forever.
const SILENT_PEER: Duration = Duration::from_secs(120);

/// The endpoints of a TCP SYN the box sent (the box's side and where it was going).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Syn {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
}

impl Syn {
    /// The SYN's endpoints, from a frame [`crate::ingress::classify`] already checked.
    pub fn parse(frame: &[u8]) -> Option<Syn> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
        let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
        Some(Syn {
            src: SocketAddrV4::new(ip.src_addr(), tcp.src_port()),
            dst: SocketAddrV4::new(ip.dst_addr(), tcp.dst_port()),
        })
    }
}

/// Why a held SYN could not be handed to a connection socket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    #[error("the connection socket could not listen on {0}")]
    Listen(SocketAddrV4),
    #[error("the held SYN was not taken by its own listener")]
    NotTaken,
}

/// How long a socket that ended in TIME-WAIT is kept after its connection is over: smoltcp
/// delays the ACK of the peer's FIN (10 ms) and the peer may resend the FIN once, so dropping
/// the socket at once would leave the box's close to a retransmission and a reset.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
/// Sockets kept lingering at most (past it the oldest goes at once).
const LINGER_MAX: usize = 1024;

/// The frame queues smoltcp reads and writes: the event loop fills `rx` with classified
/// frames and sends what lands in `tx` to the link.
#[derive(Debug)]
struct Queues {
    rx: VecDeque<Vec<u8>>,
    tx: VecDeque<Vec<u8>>,
    max_frame: usize,
}

#[derive(Debug)]
struct RxToken(Vec<u8>);
#[derive(Debug)]
struct TxToken<'a>(&'a mut VecDeque<Vec<u8>>);

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0; len];
        let r = f(&mut buf);
        self.0.push_back(buf);
        r
    }
}

impl Device for Queues {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let frame = self.rx.pop_front()?;
        Some((RxToken(frame), TxToken(&mut self.tx)))
    }

    fn transmit(&mut self, _: Instant) -> Option<TxToken<'_>> {
        Some(TxToken(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.max_frame;
        caps
    }
}

/// One box's stack (see the module comment).
pub struct Stack {
    iface: Interface,
    dev: Queues,
    sockets: SocketSet<'static>,
    start: std::time::Instant,
    /// Sockets of finished connections kept for [`LINGER`], oldest first.
    lingering: VecDeque<(SocketHandle, std::time::Instant)>,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("rx", &self.dev.rx.len())
            .field("tx", &self.dev.tx.len())
            .finish_non_exhaustive()
    }
}

/// A seed for smoltcp's initial sequence numbers and ports: different for every stack.
fn seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

impl Stack {
    /// A stack for a link carrying frames of at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Stack {
        let mut dev = Queues {
            rx: VecDeque::new(),
            tx: VecDeque::new(),
            max_frame,
        };
        let mut config = Config::new(HardwareAddress::Ethernet(GATEWAY_MAC));
        config.random_seed = seed();
        let start = std::time::Instant::now();
        let mut iface = Interface::new(config, &mut dev, Instant::ZERO);
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::Ipv4(GATEWAY), 24))
                .expect("one address fits");
        });
        // AnyIP accepts a packet for any address routed through one of the interface's own
        // addresses: the default route through the gateway makes that every address.
        iface
            .routes_mut()
            .add_default_ipv4_route(GATEWAY)
            .expect("one route fits");
        iface.set_any_ip(true);
        Stack {
            iface,
            dev,
            sockets: SocketSet::new(Vec::new()),
            start,
            lingering: VecDeque::new(),
        }
    }

    pub fn now(&self) -> Instant {
        Instant::from_micros(i64::try_from(self.start.elapsed().as_micros()).unwrap_or(i64::MAX))
    }

    /// Queues a frame the classifier gave the stack.
    pub fn input(&mut self, frame: Vec<u8>) {
        self.dev.rx.push_back(frame);
    }

    /// Runs smoltcp over the queued frames and the sockets' pending output; true when a
    /// socket's state may have changed.
    pub fn poll(&mut self) -> bool {
        let now = self.now();
        self.iface.poll(now, &mut self.dev, &mut self.sockets)
            == smoltcp::iface::PollResult::SocketStateChanged
    }

    /// How long until smoltcp needs polling again (a retransmission, a delayed ACK).
    pub fn poll_delay(&mut self) -> Option<Duration> {
        let now = self.now();
        self.iface.poll_delay(now, &self.sockets)
    }

    /// The next frame for the link.
    pub fn output(&mut self) -> Option<Vec<u8>> {
        self.dev.tx.pop_front()
    }

    /// Puts a frame the gateway built itself (a reset, a DNS reply) on the way to the link.
    pub fn push_output(&mut self, frame: Vec<u8>) {
        self.dev.tx.push_back(frame);
    }

    /// The socket behind a handle.
    pub fn tcp(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }

    pub fn remove(&mut self, h: SocketHandle) {
        self.sockets.remove(h);
    }

    /// Lets go of a finished connection's socket: at once, or after `LINGER` (2 s) when it is in
    /// TIME-WAIT (it still owes the box an ACK). Also drops the lingering sockets whose time
    /// is up.
    pub fn retire(&mut self, h: SocketHandle) {
        if self.tcp(h).state() == tcp::State::TimeWait {
            if self.lingering.len() >= LINGER_MAX {
                if let Some((old, _)) = self.lingering.pop_front() {
                    self.sockets.remove(old);
                }
            }
            self.lingering
                .push_back((h, std::time::Instant::now() + LINGER));
        } else {
            self.sockets.remove(h);
        }
        self.sweep();
    }

    /// Drops the lingering sockets whose time is up.
    pub fn sweep(&mut self) {
        let now = std::time::Instant::now();
        while let Some(&(h, until)) = self.lingering.front() {
            if until > now {
                break;
            }
            self.lingering.pop_front();
            self.sockets.remove(h);
        }
    }

    /// Drops a lingering socket of the connection a new SYN reopens (the same endpoints),
    /// which would otherwise take the SYN.
    fn unlinger(&mut self, syn: Syn) {
        let local = IpEndpoint::new(IpAddress::Ipv4(*syn.dst.ip()), syn.dst.port());
        let remote = IpEndpoint::new(IpAddress::Ipv4(*syn.src.ip()), syn.src.port());
        let sockets = &mut self.sockets;
        self.lingering.retain(|&(h, _)| {
            let s = sockets.get::<tcp::Socket>(h);
            let same = s.local_endpoint() == Some(local) && s.remote_endpoint() == Some(remote);
            if same {
                sockets.remove(h);
            }
            !same
        });
    }

    /// A connection socket with the gateway's buffers and settings.
    fn socket() -> tcp::Socket<'static> {
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
        );
        s.set_nagle_enabled(false);
        s.set_timeout(Some(SILENT_PEER));
        s
    }

    /// Answers a held SYN: a socket listening on its destination takes it (smoltcp sends the
    /// SYN-ACK at the next poll). Any other queued frame is processed first so the SYN is fed
    /// alone, and the socket must then be bound to the SYN's sender (see the module comment).
    pub fn accept_held(
        &mut self,
        syn_frame: Vec<u8>,
        syn: Syn,
    ) -> Result<SocketHandle, AcceptError> {
        self.poll();
        self.unlinger(syn);
        let mut s = Self::socket();
        s.listen(IpEndpoint::new(
            IpAddress::Ipv4(*syn.dst.ip()),
            syn.dst.port(),
        ))
        .map_err(|_| AcceptError::Listen(syn.dst))?;
        let h = self.sockets.add(s);
        self.dev.rx.push_back(syn_frame);
        self.poll();
        let sock = self.sockets.get::<tcp::Socket>(h);
        let want = IpEndpoint::new(IpAddress::Ipv4(*syn.src.ip()), syn.src.port());
        if sock.is_listening() || sock.remote_endpoint() != Some(want) {
            self.sockets.get_mut::<tcp::Socket>(h).abort();
            self.poll();
            self.sockets.remove(h);
            return Err(AcceptError::NotTaken);
        }
        Ok(h)
    }

    /// Opens a connection from the gateway to `to` in the box (a published port); the
    /// socket's local port is `local_port`.
    pub fn connect(&mut self, to: SocketAddrV4, local_port: u16) -> Option<SocketHandle> {
        let mut s = Self::socket();
        let remote = IpEndpoint::new(IpAddress::Ipv4(*to.ip()), to.port());
        let local = IpEndpoint::new(IpAddress::Ipv4(GATEWAY), local_port);
        s.connect(self.iface.context(), remote, local).ok()?;
        Some(self.sockets.add(s))
    }
}

/// Builds the Ethernet header of a frame from the gateway to whoever sent `to` (swapped MACs).
fn ethernet(to: &EthernetFrame<&[u8]>, buf: &mut [u8]) {
    let mut eth = EthernetFrame::new_unchecked(buf);
    eth.set_src_addr(GATEWAY_MAC);
    eth.set_dst_addr(to.src_addr());
    eth.set_ethertype(EthernetProtocol::Ipv4);
}

/// An IPv4 header answering `to` (swapped addresses) with `proto` and `l4_len` bytes after it.
fn ipv4(to: &Ipv4Packet<&[u8]>, proto: IpProtocol, l4_len: usize, buf: &mut [u8]) -> Option<()> {
    let mut ip = Ipv4Packet::new_unchecked(buf);
    ip.set_version(4);
    ip.set_header_len(20);
    ip.set_dscp(0);
    ip.set_ecn(0);
    ip.set_total_len(u16::try_from(20 + l4_len).ok()?);
    ip.set_ident(0);
    ip.clear_flags();
    ip.set_dont_frag(true);
    ip.set_frag_offset(0);
    ip.set_hop_limit(64);
    ip.set_next_header(proto);
    ip.set_src_addr(to.dst_addr());
    ip.set_dst_addr(to.src_addr());
    ip.fill_checksum();
    Some(())
}

/// The reset answering a TCP SYN (RST+ACK of its sequence number): the box's connect fails
/// at once with "connection refused".
pub fn reset_for(syn_frame: &[u8]) -> Option<Vec<u8>> {
    let eth = EthernetFrame::new_checked(syn_frame).ok()?;
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let mut buf = vec![0u8; 14 + 20 + 20];
    ethernet(&eth, &mut buf);
    ipv4(&ip, IpProtocol::Tcp, 20, &mut buf[14..])?;
    let mut t = TcpPacket::new_unchecked(&mut buf[34..]);
    t.set_src_port(tcp.dst_port());
    t.set_dst_port(tcp.src_port());
    t.set_seq_number(TcpSeqNumber(0));
    t.set_ack_number(tcp.seq_number() + tcp.segment_len());
    t.set_header_len(20);
    t.clear_flags();
    t.set_rst(true);
    t.set_ack(true);
    t.set_window_len(0);
    t.set_urgent_at(0);
    t.fill_checksum(
        &IpAddress::Ipv4(ip.dst_addr()),
        &IpAddress::Ipv4(ip.src_addr()),
    );
    Some(buf)
}

/// A UDP datagram's payload and endpoints (source, destination), from a checked frame.
pub fn udp_payload(frame: &[u8]) -> Option<(SocketAddrV4, SocketAddrV4, &[u8])> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let udp = UdpPacket::new_checked(ip.payload()).ok()?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let from = SocketAddrV4::new(src, udp.src_port());
    let to = SocketAddrV4::new(dst, udp.dst_port());
    // The payload borrows the frame, not the parsed views.
    let start = 14 + usize::from(ip.header_len()) + 8;
    let end = start + usize::from(udp.len()).saturating_sub(8);
    Some((from, to, frame.get(start..end)?))
}

/// The UDP reply to a datagram, from the address and port it was sent to (so a DNS query to
/// any resolver address is answered as that resolver).
pub fn udp_reply(query_frame: &[u8], payload: &[u8]) -> Option<Vec<u8>> {
    let eth = EthernetFrame::new_checked(query_frame).ok()?;
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let udp = UdpPacket::new_checked(ip.payload()).ok()?;
    let l4 = 8 + payload.len();
    let mut buf = vec![0u8; 14 + 20 + l4];
    ethernet(&eth, &mut buf);
    ipv4(&ip, IpProtocol::Udp, l4, &mut buf[14..])?;
    let mut u = UdpPacket::new_unchecked(&mut buf[34..]);
    u.set_src_port(udp.dst_port());
    u.set_dst_port(udp.src_port());
    u.set_len(u16::try_from(l4).ok()?);
    u.payload_mut().copy_from_slice(payload);
    u.fill_checksum(
        &IpAddress::Ipv4(ip.dst_addr()),
        &IpAddress::Ipv4(ip.src_addr()),
    );
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::BOX;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{ArpOperation, ArpPacket, ArpRepr, Icmpv4Packet, Icmpv4Repr, Ipv4Address};
    use std::net::Ipv4Addr;

    /// An Ethernet frame from the box carrying `payload` of `ethertype`.
    fn eth(ethertype: EthernetProtocol, dst: EthernetAddress, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 14 + payload.len()];
        let mut f = EthernetFrame::new_unchecked(&mut b[..]);
        f.set_src_addr(BOX_MAC);
        f.set_dst_addr(dst);
        f.set_ethertype(ethertype);
        f.payload_mut().copy_from_slice(payload);
        b
    }

    /// An IPv4 packet from the box to `dst`.
    fn ip(dst: Ipv4Address, proto: IpProtocol, l4: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 20 + l4.len()];
        let len = u16::try_from(b.len()).unwrap();
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_version(4);
        p.set_header_len(20);
        p.set_total_len(len);
        p.set_hop_limit(64);
        p.set_next_header(proto);
        p.set_src_addr(BOX);
        p.set_dst_addr(dst);
        p.fill_checksum();
        p.payload_mut().copy_from_slice(l4);
        b
    }

    fn syn_frame(dst: SocketAddrV4, src_port: u16) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        let mut p = TcpPacket::new_unchecked(&mut t[..]);
        p.set_src_port(src_port);
        p.set_dst_port(dst.port());
        p.set_seq_number(TcpSeqNumber(1000));
        p.set_header_len(20);
        p.set_syn(true);
        p.set_window_len(65535);
        p.fill_checksum(&IpAddress::Ipv4(BOX), &IpAddress::Ipv4(*dst.ip()));
        eth(
            EthernetProtocol::Ipv4,
            GATEWAY_MAC,
            &ip(*dst.ip(), IpProtocol::Tcp, &t),
        )
    }

    /// Tells the stack the box's MAC (an ARP request for the gateway, as the box sends first).
    fn arp(stack: &mut Stack) -> Vec<Vec<u8>> {
        let mut a = vec![0u8; 28];
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: BOX_MAC,
            source_protocol_addr: BOX,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: GATEWAY,
        }
        .emit(&mut ArpPacket::new_unchecked(&mut a[..]));
        stack.input(eth(EthernetProtocol::Arp, EthernetAddress::BROADCAST, &a));
        stack.poll();
        std::iter::from_fn(|| stack.output()).collect()
    }

    #[test]
    fn the_gateway_answers_arp_and_pings() {
        let mut s = Stack::new(1514);
        let out = arp(&mut s);
        let f = EthernetFrame::new_checked(&out[0][..]).unwrap();
        let reply = ArpRepr::parse(&ArpPacket::new_checked(f.payload()).unwrap()).unwrap();
        assert!(matches!(
            reply,
            ArpRepr::EthernetIpv4 { operation: ArpOperation::Reply, source_hardware_addr, source_protocol_addr, .. }
                if source_hardware_addr == GATEWAY_MAC && source_protocol_addr == GATEWAY
        ));
        let mut icmp = vec![0u8; 12];
        Icmpv4Repr::EchoRequest {
            ident: 7,
            seq_no: 1,
            data: b"ping",
        }
        .emit(
            &mut Icmpv4Packet::new_unchecked(&mut icmp[..]),
            &ChecksumCapabilities::default(),
        );
        s.input(eth(
            EthernetProtocol::Ipv4,
            GATEWAY_MAC,
            &ip(GATEWAY, IpProtocol::Icmp, &icmp),
        ));
        s.poll();
        let out = s.output().expect("an echo reply");
        let f = EthernetFrame::new_checked(&out[..]).unwrap();
        let p = Ipv4Packet::new_checked(f.payload()).unwrap();
        assert_eq!((p.src_addr(), p.dst_addr()), (GATEWAY, BOX));
        let r = Icmpv4Repr::parse(
            &Icmpv4Packet::new_checked(p.payload()).unwrap(),
            &ChecksumCapabilities::default(),
        )
        .unwrap();
        assert_eq!(
            r,
            Icmpv4Repr::EchoReply {
                ident: 7,
                seq_no: 1,
                data: b"ping"
            }
        );
    }

    #[test]
    fn a_reset_answers_the_syn_it_refuses() {
        let dst = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 443);
        let rst = reset_for(&syn_frame(dst, 40001)).unwrap();
        let f = EthernetFrame::new_checked(&rst[..]).unwrap();
        assert_eq!((f.src_addr(), f.dst_addr()), (GATEWAY_MAC, BOX_MAC));
        let p = Ipv4Packet::new_checked(f.payload()).unwrap();
        assert!(p.verify_checksum());
        assert_eq!((p.src_addr(), p.dst_addr()), (*dst.ip(), BOX));
        let t = TcpPacket::new_checked(p.payload()).unwrap();
        assert!(t.verify_checksum(&IpAddress::Ipv4(*dst.ip()), &IpAddress::Ipv4(BOX)));
        assert!(t.rst() && t.ack() && !t.syn());
        assert_eq!((t.src_port(), t.dst_port()), (443, 40001));
        assert_eq!(t.ack_number(), TcpSeqNumber(1001), "acknowledges the SYN");
    }

    #[test]
    fn a_held_syn_is_taken_only_by_its_own_listener_and_none_is_left_listening() {
        let mut s = Stack::new(1514);
        arp(&mut s);
        let dst = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 443);
        // The frame says port 40002, the flow expected 40001: refused, no socket left.
        let wrong = Syn {
            src: SocketAddrV4::new(BOX, 40001),
            dst,
        };
        assert_eq!(
            s.accept_held(syn_frame(dst, 40002), wrong),
            Err(AcceptError::NotTaken)
        );
        assert_eq!(s.sockets.iter().count(), 0);
        while s.output().is_some() {}
        let right = Syn {
            src: SocketAddrV4::new(BOX, 40003),
            dst,
        };
        let h = s.accept_held(syn_frame(dst, 40003), right).unwrap();
        assert_eq!(s.tcp(h).state(), tcp::State::SynReceived);
        let out = s.output().expect("a SYN-ACK");
        let f = EthernetFrame::new_checked(&out[..]).unwrap();
        let p = Ipv4Packet::new_checked(f.payload()).unwrap();
        let t = TcpPacket::new_checked(p.payload()).unwrap();
        assert!(t.syn() && t.ack());
        assert_eq!(
            (p.src_addr(), t.src_port(), t.dst_port()),
            (*dst.ip(), 443, 40003)
        );
    }
}
