//! Address classes a box never reaches unless an allowed CIDR names them: the special-purpose
//! blocks of the IANA IPv4 and IPv6 registries (loopback, private, shared/CGNAT, link-local,
//! documentation, benchmarking, multicast, reserved, ...), the cloud metadata addresses, and
//! every address of the host's own interfaces (a box allowed "the public internet" must not
//! reach a service the host binds on its public address). An IPv6 address that carries an IPv4
//! one (mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`) is
//! judged by the IPv4 address inside, so `::ffff:127.0.0.1` is loopback.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use ipnet::IpNet;

/// Why an address is always denied (the connection log names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// `0.0.0.0/8`, `::/128`: "this host/network", never a destination.
    Unspecified,
    Loopback,
    /// RFC 1918 ranges and IPv6 unique-local (`fc00::/7`) and site-local (`fec0::/10`).
    Private,
    /// `100.64.0.0/10`, carrier-grade NAT space.
    SharedCgnat,
    LinkLocal,
    /// `192.0.0.0/24`, `2001::/23`: IETF protocol assignments (Teredo among them).
    ProtocolAssignments,
    /// TEST-NET-1/2/3, `2001:db8::/32`.
    Documentation,
    /// `198.18.0.0/15` (also where a box's synthetic addresses come from).
    Benchmarking,
    Multicast,
    /// `240.0.0.0/4` with the broadcast address, `100::/64` (discard-only).
    Reserved,
    /// Instance metadata services (AWS, GCP, Azure, ECS, Alibaba), checked before the broader
    /// class they sit in so the log names them.
    Metadata,
    /// An address of one of the host's own interfaces.
    HostInterface,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Unspecified => "unspecified",
            Class::Loopback => "loopback",
            Class::Private => "private",
            Class::SharedCgnat => "shared (CGNAT)",
            Class::LinkLocal => "link-local",
            Class::ProtocolAssignments => "IETF protocol assignments",
            Class::Documentation => "documentation",
            Class::Benchmarking => "benchmarking",
            Class::Multicast => "multicast",
            Class::Reserved => "reserved",
            Class::Metadata => "cloud metadata",
            Class::HostInterface => "the host's own address",
        })
    }
}

/// The special-purpose blocks, most specific first (metadata before link-local and CGNAT).
fn table() -> &'static [(IpNet, Class)] {
    static TABLE: OnceLock<Vec<(IpNet, Class)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        [
            ("169.254.169.254/32", Class::Metadata),
            ("169.254.170.2/32", Class::Metadata),
            ("100.100.100.200/32", Class::Metadata),
            ("fd00:ec2::254/128", Class::Metadata),
            ("0.0.0.0/8", Class::Unspecified),
            ("10.0.0.0/8", Class::Private),
            ("100.64.0.0/10", Class::SharedCgnat),
            ("127.0.0.0/8", Class::Loopback),
            ("169.254.0.0/16", Class::LinkLocal),
            ("172.16.0.0/12", Class::Private),
            ("192.0.0.0/24", Class::ProtocolAssignments),
            ("192.0.2.0/24", Class::Documentation),
            ("192.168.0.0/16", Class::Private),
            ("198.18.0.0/15", Class::Benchmarking),
            ("198.51.100.0/24", Class::Documentation),
            ("203.0.113.0/24", Class::Documentation),
            ("224.0.0.0/4", Class::Multicast),
            ("240.0.0.0/4", Class::Reserved),
            ("::/128", Class::Unspecified),
            ("::1/128", Class::Loopback),
            ("100::/64", Class::Reserved),
            ("2001::/23", Class::ProtocolAssignments),
            ("2001:db8::/32", Class::Documentation),
            ("fc00::/7", Class::Private),
            ("fec0::/10", Class::Private),
            ("fe80::/10", Class::LinkLocal),
            ("ff00::/8", Class::Multicast),
        ]
        .iter()
        .map(|(net, class)| (net.parse().expect("a valid CIDR in the table"), *class))
        .collect()
    })
}

/// The IPv4 address an IPv6 one carries, where it carries one (see the module comment).
pub fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let low = Ipv4Addr::new(
        (s[6] >> 8) as u8,
        (s[6] & 0xff) as u8,
        (s[7] >> 8) as u8,
        (s[7] & 0xff) as u8,
    );
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x64, 0xff9b, 1, ..] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            (hi & 0xff) as u8,
            (lo >> 8) as u8,
            (lo & 0xff) as u8,
        )),
        _ => None,
    }
}

/// The address the rules judge: the IPv4 one inside an IPv6 address that carries one.
pub fn judged(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// The class that always denies `addr`, if any; `host` is the host's own interface addresses.
pub fn classify(addr: IpAddr, host: &[IpAddr]) -> Option<Class> {
    let addr = judged(addr);
    if host.iter().any(|h| judged(*h) == addr) {
        return Some(Class::HostInterface);
    }
    table()
        .iter()
        .find(|(net, _)| net.contains(&addr))
        .map(|(_, class)| *class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<Class> {
        classify(s.parse().unwrap(), &[])
    }

    #[test]
    fn every_special_block_is_classed_and_public_addresses_are_not() {
        for (addr, want) in [
            ("0.1.2.3", Class::Unspecified),
            ("10.0.0.5", Class::Private),
            ("100.64.0.1", Class::SharedCgnat),
            ("127.0.0.1", Class::Loopback),
            ("127.255.255.254", Class::Loopback),
            ("169.254.1.1", Class::LinkLocal),
            ("172.31.255.255", Class::Private),
            ("192.0.0.8", Class::ProtocolAssignments),
            ("192.0.2.1", Class::Documentation),
            ("192.168.1.1", Class::Private),
            ("198.19.0.1", Class::Benchmarking),
            ("198.51.100.7", Class::Documentation),
            ("203.0.113.7", Class::Documentation),
            ("239.1.1.1", Class::Multicast),
            ("255.255.255.255", Class::Reserved),
            ("::", Class::Unspecified),
            ("::1", Class::Loopback),
            ("fd12::1", Class::Private),
            ("fe80::1", Class::LinkLocal),
            ("ff02::1", Class::Multicast),
            ("2001:db8::1", Class::Documentation),
            ("2001:0:4136:e378::1", Class::ProtocolAssignments),
            ("100::1", Class::Reserved),
        ] {
            assert_eq!(class(addr), Some(want), "{addr}");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
        ] {
            assert_eq!(class(public), None, "{public}");
        }
    }

    #[test]
    fn metadata_addresses_are_named_as_such() {
        for a in [
            "169.254.169.254",
            "169.254.170.2",
            "100.100.100.200",
            "fd00:ec2::254",
        ] {
            assert_eq!(class(a), Some(Class::Metadata), "{a}");
        }
    }

    #[test]
    fn ipv6_forms_of_an_ipv4_address_are_judged_as_it() {
        assert_eq!(class("::ffff:127.0.0.1"), Some(Class::Loopback));
        assert_eq!(class("::ffff:169.254.169.254"), Some(Class::Metadata));
        assert_eq!(class("64:ff9b::7f00:1"), Some(Class::Loopback));
        assert_eq!(class("64:ff9b:1::a00:5"), Some(Class::Private));
        assert_eq!(class("2002:c0a8:0101::1"), Some(Class::Private));
        assert_eq!(class("::ffff:8.8.8.8"), None);
        assert_eq!(class("2002:0808:0808::1"), None);
    }

    #[test]
    fn the_hosts_own_addresses_are_denied_in_any_form() {
        let host: Vec<IpAddr> = vec!["93.184.215.14".parse().unwrap(), "2a01::5".parse().unwrap()];
        let c = |s: &str| classify(s.parse().unwrap(), &host);
        assert_eq!(c("93.184.215.14"), Some(Class::HostInterface));
        assert_eq!(c("::ffff:93.184.215.14"), Some(Class::HostInterface));
        assert_eq!(c("2a01::5"), Some(Class::HostInterface));
        assert_eq!(c("93.184.215.15"), None);
    }
}
