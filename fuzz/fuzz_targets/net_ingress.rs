//! A frame from a box as the gateway first looks at it (`hull_net::ingress::classify`): any
//! bytes are classified without a panic, and a connection is only ever let through to an
//! address the policy allows or to a synthetic address the pool handed out.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use hull_net::ingress::{classify, Identity, Ingress, BOX};
use hull_net::policy::{Mode, Policy};
use hull_net::synth::Pool;
use hull_net::Name;
use libfuzzer_sys::fuzz_target;
use smoltcp::wire::EthernetAddress;

fuzz_target!(|data: &[u8]| {
    let policy = Policy::new(
        Mode::Custom,
        &["api.example.test"],
        &["192.0.2.0/28"],
        &["192.0.2.8/29"],
    )
    .expect("a valid policy");
    let mut pool = Pool::new(4);
    let issued = pool
        .address_of(&Name::parse("api.example.test").expect("a name"))
        .expect("an address");
    let me = Identity {
        mac: EthernetAddress([0x02, 0, 0, 0, 0, 0x64]),
        ip: BOX,
    };
    // The host's own address, outside the allowed CIDR (inside one, the CIDR would let it through).
    let host = [IpAddr::V4(Ipv4Addr::new(192, 0, 2, 20))];
    match classify(data, &me, &policy, &pool, &host) {
        Ingress::ConnectName { dst, .. } => assert_eq!(*dst.ip(), issued),
        Ingress::ConnectLiteral { dst, .. } => {
            let a = u32::from(*dst.ip());
            assert!((0xc000_0200..0xc000_0208).contains(&a), "{dst} let through");
            assert_ne!(
                *dst.ip(),
                Ipv4Addr::new(192, 0, 2, 20),
                "the host's own address"
            );
        }
        _ => {}
    }
});
