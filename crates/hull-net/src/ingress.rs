//! The first look at every frame a box sends through its link, before any of it reaches the
//! userspace TCP/IP stack: frames not from the box's own MAC and address are dropped (no
//! spoofing), IP fragments and IPv6 are dropped (v1 has no IPv6 in a box), DNS to any address
//! goes to the gateway's resolver ([`crate::dns`]), encrypted DNS and QUIC are refused so clients
//! fall back to what the policy sees, and a TCP SYN opening a connection is judged here: to a
//! synthetic address it carries the name the box asked for ([`crate::synth`]), to any other
//! address the literal rules decide ([`Policy::judge_literal`]). Segments of open connections,
//! ARP and pings of the gateway are the stack's. Pure: no socket, no clock.

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket,
};

use crate::name::Name;
use crate::policy::{Policy, Rule};
use crate::synth::Pool;

/// The gateway's address in every box's network (`10.0.2.2`, as slirp and passt use).
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The box's own address.
pub const BOX: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 100);

/// Who the box is on its link.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    pub mac: EthernetAddress,
    pub ip: Ipv4Addr,
}

/// Why a frame goes no further (the log names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Malformed,
    /// Not from the box's own MAC or address.
    Spoofed,
    Fragment,
    Ipv6,
    /// An IP protocol other than TCP, UDP and ICMP.
    Protocol(u8),
    /// ICMP to anything but the gateway (no ping through the gateway in v1).
    Icmp,
    /// DNS over TLS (853): clients fall back to plain DNS, which the gateway answers.
    DnsOverTls,
    /// QUIC (UDP 443) and DNS over QUIC (UDP 853, 8853): clients fall back to TCP.
    Quic,
    /// mDNS and LLMNR: nothing to find on the box's link.
    LocalDiscovery,
    /// UDP other than DNS (v1 forwards TCP only).
    Udp,
    /// A synthetic address the box's pool never handed out (or gave up).
    UnknownSynthetic(Ipv4Addr),
    /// The policy refused the literal address.
    Policy(Rule),
}

/// What to do with one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ingress {
    /// ARP, pings of the gateway, segments of open connections: feed the stack.
    Stack,
    /// A DNS query over UDP (any destination, port 53): answer it.
    Dns,
    /// A DNS connection over TCP (port 53): the stack accepts it and the gateway answers what
    /// arrives on it.
    DnsTcp,
    /// A new connection to a synthetic address: hold the SYN, judge the name again with its
    /// host-side answers ([`Policy::judge_connect`]), dial, then answer the SYN.
    ConnectName {
        name: Name,
        dst: SocketAddrV4,
    },
    /// A new connection to an address the policy allows: hold the SYN, dial, answer it.
    ConnectLiteral {
        dst: SocketAddrV4,
        rule: Rule,
    },
    /// Answer with a reset (a refused TCP SYN: the box sees a refusal at once).
    Reset(Refusal),
    Drop(Refusal),
}

/// Classifies one Ethernet frame from the box (see the module comment).
pub fn classify(
    frame: &[u8],
    me: &Identity,
    policy: &Policy,
    pool: &Pool,
    host: &[IpAddr],
) -> Ingress {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Ingress::Drop(Refusal::Malformed);
    };
    if eth.src_addr() != me.mac {
        return Ingress::Drop(Refusal::Spoofed);
    }
    match eth.ethertype() {
        EthernetProtocol::Arp => return Ingress::Stack,
        EthernetProtocol::Ipv6 => return Ingress::Drop(Refusal::Ipv6),
        EthernetProtocol::Ipv4 => {}
        _ => return Ingress::Drop(Refusal::Malformed),
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return Ingress::Drop(Refusal::Malformed);
    };
    if ip.src_addr() != me.ip {
        return Ingress::Drop(Refusal::Spoofed);
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Ingress::Drop(Refusal::Fragment);
    }
    let dst = ip.dst_addr();
    match ip.next_header() {
        IpProtocol::Icmp if dst == GATEWAY => Ingress::Stack,
        IpProtocol::Icmp => Ingress::Drop(Refusal::Icmp),
        IpProtocol::Udp => udp(ip.payload(), dst),
        IpProtocol::Tcp => tcp(ip.payload(), dst, policy, pool, host),
        other => Ingress::Drop(Refusal::Protocol(u8::from(other))),
    }
}

fn udp(segment: &[u8], _dst: Ipv4Addr) -> Ingress {
    let Ok(udp) = UdpPacket::new_checked(segment) else {
        return Ingress::Drop(Refusal::Malformed);
    };
    match udp.dst_port() {
        53 => Ingress::Dns,
        443 | 853 | 8853 => Ingress::Drop(Refusal::Quic),
        5353 | 5355 => Ingress::Drop(Refusal::LocalDiscovery),
        _ => Ingress::Drop(Refusal::Udp),
    }
}

fn tcp(segment: &[u8], dst: Ipv4Addr, policy: &Policy, pool: &Pool, host: &[IpAddr]) -> Ingress {
    let Ok(tcp) = TcpPacket::new_checked(segment) else {
        return Ingress::Drop(Refusal::Malformed);
    };
    // Only an opening SYN is judged; everything else belongs to a connection the stack knows
    // (or is answered with a reset by it, as a stray segment is).
    if !tcp.syn() || tcp.ack() {
        return Ingress::Stack;
    }
    let port = tcp.dst_port();
    let to = SocketAddrV4::new(dst, port);
    match port {
        53 => return Ingress::DnsTcp,
        853 => return Ingress::Reset(Refusal::DnsOverTls),
        _ => {}
    }
    if crate::synth::is_synthetic(dst) {
        return match pool.name_of(dst) {
            Some(name) => Ingress::ConnectName {
                name: name.clone(),
                dst: to,
            },
            None => Ingress::Reset(Refusal::UnknownSynthetic(dst)),
        };
    }
    match policy.judge_literal(IpAddr::V4(dst), host) {
        crate::Verdict::Allow(rule) => Ingress::ConnectLiteral { dst: to, rule },
        crate::Verdict::Deny(rule) => Ingress::Reset(Refusal::Policy(rule)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::Class;
    use crate::policy::Mode;
    use smoltcp::wire::TcpSeqNumber;

    const MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x64]);

    fn me() -> Identity {
        Identity { mac: MAC, ip: BOX }
    }

    /// An Ethernet frame carrying one IPv4 packet from `src` to `dst` with `proto` and `l4`.
    fn frame(
        mac: EthernetAddress,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: IpProtocol,
        l4: &[u8],
        frag: bool,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; 14 + 20 + l4.len()];
        {
            let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
            eth.set_src_addr(mac);
            eth.set_dst_addr(EthernetAddress([0x02, 0, 0, 0, 0, 0x02]));
            eth.set_ethertype(EthernetProtocol::Ipv4);
        }
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut buf[14..]);
            ip.set_version(4);
            ip.set_header_len(20);
            ip.set_total_len(u16::try_from(20 + l4.len()).unwrap());
            ip.set_hop_limit(64);
            ip.set_next_header(proto);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
            ip.set_more_frags(frag);
            ip.payload_mut().copy_from_slice(l4);
            ip.fill_checksum();
        }
        buf
    }

    fn tcp_seg(port: u16, syn: bool, ack: bool) -> Vec<u8> {
        let mut b = vec![0u8; 20];
        let mut t = TcpPacket::new_unchecked(&mut b[..]);
        t.set_src_port(40000);
        t.set_dst_port(port);
        t.set_seq_number(TcpSeqNumber(1));
        t.set_header_len(20);
        t.set_syn(syn);
        t.set_ack(ack);
        b
    }

    fn udp_dgram(port: u16) -> Vec<u8> {
        let mut b = vec![0u8; 8];
        let mut u = UdpPacket::new_unchecked(&mut b[..]);
        u.set_src_port(40000);
        u.set_dst_port(port);
        u.set_len(8);
        b
    }

    fn syn(dst: Ipv4Addr, port: u16) -> Vec<u8> {
        frame(
            MAC,
            BOX,
            dst,
            IpProtocol::Tcp,
            &tcp_seg(port, true, false),
            false,
        )
    }

    fn custom() -> Policy {
        Policy::new(
            Mode::Custom,
            &["api.example.test"],
            &["192.0.2.0/28"],
            &["192.0.2.8/29"],
        )
        .unwrap()
    }

    #[test]
    fn a_syn_to_a_synthetic_address_carries_its_name_and_an_unknown_one_is_reset() {
        let mut pool = Pool::new(8);
        let name = Name::parse("api.example.test").unwrap();
        let a = pool.address_of(&name).unwrap();
        assert_eq!(
            classify(&syn(a, 443), &me(), &custom(), &pool, &[]),
            Ingress::ConnectName {
                name,
                dst: SocketAddrV4::new(a, 443)
            }
        );
        let never = Ipv4Addr::new(198, 19, 7, 7);
        assert_eq!(
            classify(&syn(never, 443), &me(), &custom(), &pool, &[]),
            Ingress::Reset(Refusal::UnknownSynthetic(never))
        );
    }

    #[test]
    fn a_syn_to_a_literal_is_judged_by_the_cidr_rules_and_classes() {
        let pool = Pool::new(8);
        let p = custom();
        assert!(matches!(
            classify(&syn(Ipv4Addr::new(192, 0, 2, 3), 80), &me(), &p, &pool, &[]),
            Ingress::ConnectLiteral {
                rule: Rule::AllowedCidr(_),
                ..
            }
        ));
        assert!(matches!(
            classify(&syn(Ipv4Addr::new(192, 0, 2, 9), 80), &me(), &p, &pool, &[]),
            Ingress::Reset(Refusal::Policy(Rule::DeniedCidr(_)))
        ));
        assert_eq!(
            classify(&syn(Ipv4Addr::new(127, 0, 0, 1), 80), &me(), &p, &pool, &[]),
            Ingress::Reset(Refusal::Policy(Rule::AlwaysDenied(Class::Loopback)))
        );
        assert_eq!(
            classify(&syn(Ipv4Addr::new(1, 1, 1, 1), 443), &me(), &p, &pool, &[]),
            Ingress::Reset(Refusal::Policy(Rule::NotListed))
        );
        let all = Policy::new(
            Mode::AllowAll,
            &[] as &[&str],
            &[] as &[&str],
            &[] as &[&str],
        )
        .unwrap();
        assert!(matches!(
            classify(
                &syn(Ipv4Addr::new(1, 1, 1, 1), 443),
                &me(),
                &all,
                &pool,
                &[]
            ),
            Ingress::ConnectLiteral {
                rule: Rule::AllowAll,
                ..
            }
        ));
        let host = [IpAddr::V4(Ipv4Addr::new(93, 184, 215, 14))];
        assert_eq!(
            classify(
                &syn(Ipv4Addr::new(93, 184, 215, 14), 22),
                &me(),
                &all,
                &pool,
                &host
            ),
            Ingress::Reset(Refusal::Policy(Rule::AlwaysDenied(Class::HostInterface)))
        );
    }

    #[test]
    fn dns_goes_to_the_gateway_from_any_address_and_encrypted_dns_and_quic_are_refused() {
        let pool = Pool::new(8);
        let p = custom();
        let any = Ipv4Addr::new(8, 8, 8, 8);
        let udp = |port| frame(MAC, BOX, any, IpProtocol::Udp, &udp_dgram(port), false);
        assert_eq!(classify(&udp(53), &me(), &p, &pool, &[]), Ingress::Dns);
        assert_eq!(
            classify(&syn(any, 53), &me(), &p, &pool, &[]),
            Ingress::DnsTcp
        );
        assert_eq!(
            classify(&syn(any, 853), &me(), &p, &pool, &[]),
            Ingress::Reset(Refusal::DnsOverTls)
        );
        assert_eq!(
            classify(&udp(853), &me(), &p, &pool, &[]),
            Ingress::Drop(Refusal::Quic)
        );
        assert_eq!(
            classify(&udp(443), &me(), &p, &pool, &[]),
            Ingress::Drop(Refusal::Quic)
        );
        assert_eq!(
            classify(&udp(5353), &me(), &p, &pool, &[]),
            Ingress::Drop(Refusal::LocalDiscovery)
        );
        assert_eq!(
            classify(&udp(123), &me(), &p, &pool, &[]),
            Ingress::Drop(Refusal::Udp)
        );
    }

    #[test]
    fn spoofed_fragmented_and_odd_frames_go_no_further() {
        let pool = Pool::new(8);
        let p = Policy::new(
            Mode::AllowAll,
            &[] as &[&str],
            &[] as &[&str],
            &[] as &[&str],
        )
        .unwrap();
        let dst = Ipv4Addr::new(1, 1, 1, 1);
        let seg = tcp_seg(443, true, false);
        let other_mac = EthernetAddress([0x02, 0, 0, 0, 0, 0x99]);
        assert_eq!(
            classify(
                &frame(other_mac, BOX, dst, IpProtocol::Tcp, &seg, false),
                &me(),
                &p,
                &pool,
                &[]
            ),
            Ingress::Drop(Refusal::Spoofed)
        );
        assert_eq!(
            classify(
                &frame(
                    MAC,
                    Ipv4Addr::new(10, 0, 2, 101),
                    dst,
                    IpProtocol::Tcp,
                    &seg,
                    false
                ),
                &me(),
                &p,
                &pool,
                &[]
            ),
            Ingress::Drop(Refusal::Spoofed)
        );
        assert_eq!(
            classify(
                &frame(MAC, BOX, dst, IpProtocol::Tcp, &seg, true),
                &me(),
                &p,
                &pool,
                &[]
            ),
            Ingress::Drop(Refusal::Fragment)
        );
        assert_eq!(
            classify(
                &frame(MAC, BOX, dst, IpProtocol::Unknown(47), &seg, false),
                &me(),
                &p,
                &pool,
                &[]
            ),
            Ingress::Drop(Refusal::Protocol(47))
        );
        assert_eq!(
            classify(
                &frame(
                    MAC,
                    BOX,
                    dst,
                    IpProtocol::Icmp,
                    &[8, 0, 0, 0, 0, 0, 0, 0],
                    false
                ),
                &me(),
                &p,
                &pool,
                &[]
            ),
            Ingress::Drop(Refusal::Icmp)
        );
        assert_eq!(
            classify(
                &frame(
                    MAC,
                    BOX,
                    GATEWAY,
                    IpProtocol::Icmp,
                    &[8, 0, 0, 0, 0, 0, 0, 0],
                    false
                ),
                &me(),
                &p,
                &pool,
                &[]
            ),
            Ingress::Stack
        );
        assert_eq!(
            classify(&[0u8; 10], &me(), &p, &pool, &[]),
            Ingress::Drop(Refusal::Malformed)
        );
        // A segment of an open connection is the stack's, whatever its address.
        let data = frame(
            MAC,
            BOX,
            Ipv4Addr::new(127, 0, 0, 1),
            IpProtocol::Tcp,
            &tcp_seg(80, false, true),
            false,
        );
        assert_eq!(classify(&data, &me(), &p, &pool, &[]), Ingress::Stack);
        let mut v6 = frame(MAC, BOX, dst, IpProtocol::Tcp, &seg, false);
        EthernetFrame::new_unchecked(&mut v6[..]).set_ethertype(EthernetProtocol::Ipv6);
        assert_eq!(
            classify(&v6, &me(), &p, &pool, &[]),
            Ingress::Drop(Refusal::Ipv6)
        );
    }
}
