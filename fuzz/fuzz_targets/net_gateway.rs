//! A box's frames through a whole gateway (`hull_net::Gateway` over an in-memory link, with a
//! recording dialer and an in-memory upstream): classification, the gateway's own resets and
//! DNS replies (UDP and TCP), held SYNs, smoltcp and the connections' pumps take any frames
//! without a panic; only allowed destinations are ever dialled; every frame the gateway sends
//! comes from its own MAC.
//!
//! Input: frames, each a 2-byte big-endian length then that many bytes. A frame whose first
//! byte is even is "fixed up" first (the box's MAC and address, valid checksums), so the
//! fuzzer reaches past the spoofing and checksum checks; an odd one goes as it is.
#![no_main]

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use hull_net::ingress::BOX;
use hull_net::name::Name;
use hull_net::stack::{BOX_MAC, GATEWAY_MAC};
use hull_net::upstream::{Boxed, Upstream};
use hull_net::{Dialer, Gateway, Link, MemLink, Mode, Policy, Record, Resolver};
use libfuzzer_sys::fuzz_target;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket,
};

const PUBLIC: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

struct Names;
impl Resolver for Names {
    fn resolve(&self, name: &Name) -> Boxed<io::Result<Vec<IpAddr>>> {
        let r = if name.as_str() == "api.example.test" {
            Ok(vec![IpAddr::V4(PUBLIC)])
        } else {
            Err(io::ErrorKind::NotFound.into())
        };
        Box::pin(async move { r })
    }
}

/// Records each dial; port 80 gets an in-memory upstream that reads EOF and swallows writes,
/// anything else is refused.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<SocketAddr>>>);
impl Dialer for Recorder {
    fn dial(&self, to: SocketAddr) -> Boxed<io::Result<Box<dyn Upstream>>> {
        self.0.lock().expect("not poisoned").push(to);
        Box::pin(async move {
            if to.port() == 80 {
                let up = tokio::io::join(tokio::io::empty(), tokio::io::sink());
                Ok(Box::new(up) as Box<dyn Upstream>)
            } else {
                Err(io::ErrorKind::ConnectionRefused.into())
            }
        })
    }
}

struct Nowhere;
impl hull_net::LogSink for Nowhere {
    fn write(&mut self, r: &Record) {
        let _ = r.line();
    }
}

/// The box's MAC and address, and valid checksums.
fn fix_up(f: &mut [u8]) {
    let Ok(mut eth) = EthernetFrame::new_checked(&mut *f) else {
        return;
    };
    eth.set_src_addr(BOX_MAC);
    eth.set_dst_addr(GATEWAY_MAC);
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return;
    }
    let Ok(mut ip) = Ipv4Packet::new_checked(eth.payload_mut()) else {
        return;
    };
    ip.set_src_addr(BOX);
    ip.fill_checksum();
    let (src, dst) = (
        IpAddress::Ipv4(ip.src_addr()),
        IpAddress::Ipv4(ip.dst_addr()),
    );
    match ip.next_header() {
        IpProtocol::Tcp => {
            if let Ok(mut t) = TcpPacket::new_checked(ip.payload_mut()) {
                t.fill_checksum(&src, &dst);
            }
        }
        IpProtocol::Udp => {
            if let Ok(mut u) = UdpPacket::new_checked(ip.payload_mut()) {
                u.fill_checksum(&src, &dst);
            }
        }
        _ => {}
    }
}

fn frames(mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let n = usize::from(u16::from_be_bytes([data[0], data[1]])).min(data.len() - 2);
        let mut f = data[2..2 + n].to_vec();
        data = &data[2 + n..];
        if f.first().is_some_and(|b| b % 2 == 0) {
            fix_up(&mut f);
        }
        out.push(f);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dialled = Recorder::default();
    let record = dialled.clone();
    let out = rt.block_on(async move {
        let (gw_end, mut box_end) = MemLink::pair(1514);
        let policy = Policy::new(
            Mode::Custom,
            &["api.example.test"],
            &["192.0.2.0/28"],
            &["192.0.2.8/29"],
        )
        .expect("a valid policy");
        let gw = Gateway::new(
            Box::new(gw_end),
            policy,
            Arc::new(Names),
            Arc::new(record),
            Box::new(Nowhere),
        );
        let handle = gw.handle();
        let run = tokio::spawn(gw.run());
        for f in frames(data) {
            std::future::poll_fn(|cx| box_end.poll_send(cx, &f))
                .await
                .expect("the gateway is running");
            tokio::task::yield_now().await;
        }
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        handle.stop();
        run.await
            .expect("no panic")
            .expect("the in-memory link never fails");
        let mut sent = Vec::new();
        let mut buf = vec![0; 2048];
        while let std::task::Poll::Ready(Ok(n)) =
            std::future::poll_fn(|cx| std::task::Poll::Ready(box_end.poll_recv(cx, &mut buf))).await
        {
            if n == 0 {
                break;
            }
            sent.push(buf[..n].to_vec());
        }
        sent
    });
    for f in out {
        let eth = EthernetFrame::new_checked(&f[..]).expect("a whole Ethernet frame");
        assert_eq!(eth.src_addr(), GATEWAY_MAC, "the gateway's own MAC");
    }
    for to in dialled.0.lock().expect("not poisoned").iter() {
        let ok = match to.ip() {
            IpAddr::V4(a) => a == PUBLIC || (0xc000_0200..0xc000_0208).contains(&u32::from(a)),
            IpAddr::V6(_) => false,
        };
        assert!(ok, "{to} dialled");
    }
});
