//! The gateway driven end to end through an in-memory link, with a second smoltcp interface
//! playing the box (10.0.2.100, the box MAC, default route via 10.0.2.2). Names resolve
//! through a test resolver to public-looking addresses, and the test dialer maps the few it
//! knows to loopback servers this test runs and refuses the rest after recording them: no
//! packet leaves loopback.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{mpsc, Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use hull_net::ingress::{BOX, GATEWAY};
use hull_net::name::Name;
use hull_net::stack::BOX_MAC;
use hull_net::upstream::{Boxed, Upstream};
use hull_net::{
    Config, Dialer, Gateway, Handle, Link, MemLink, Mode, Policy, Record, Resolver, TapLink,
};
use serde_json::Value;
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::{tcp, udp};
use smoltcp::time::Instant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpEndpoint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MAX_FRAME: usize = 1514;
/// A public address the test resolver gives for names (never dialled for real: the test
/// dialer maps it to a loopback server or refuses it).
const PUBLIC: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

// ---- the box: a smoltcp interface on the other end of the link ----

#[derive(Default)]
struct Queues {
    rx: VecDeque<Vec<u8>>,
    tx: VecDeque<Vec<u8>>,
}
struct Rx(Vec<u8>);
struct Tx<'a>(&'a mut VecDeque<Vec<u8>>);
impl phy::RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}
impl phy::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut b = vec![0; len];
        let r = f(&mut b);
        self.0.push_back(b);
        r
    }
}
impl Device for Queues {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;
    fn receive(&mut self, _: Instant) -> Option<(Rx, Tx<'_>)> {
        let f = self.rx.pop_front()?;
        Some((Rx(f), Tx(&mut self.tx)))
    }
    fn transmit(&mut self, _: Instant) -> Option<Tx<'_>> {
        Some(Tx(&mut self.tx))
    }
    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = MAX_FRAME;
        c
    }
}

struct BoxNet {
    iface: Interface,
    dev: Queues,
    sockets: SocketSet<'static>,
    link: Box<dyn Link>,
    start: std::time::Instant,
    next_port: u16,
}

impl BoxNet {
    fn new(link: impl Link + 'static) -> BoxNet {
        let mut dev = Queues::default();
        let mut iface = Interface::new(
            IfaceConfig::new(HardwareAddress::Ethernet(BOX_MAC)),
            &mut dev,
            Instant::ZERO,
        );
        iface.update_ip_addrs(|a| a.push(IpCidr::new(IpAddress::Ipv4(BOX), 24)).unwrap());
        iface.routes_mut().add_default_ipv4_route(GATEWAY).unwrap();
        BoxNet {
            iface,
            dev,
            sockets: SocketSet::new(Vec::new()),
            link: Box::new(link),
            start: std::time::Instant::now(),
            next_port: 40000,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_micros(i64::try_from(self.start.elapsed().as_micros()).unwrap())
    }

    /// Takes every frame waiting on the link, runs the box's stack, sends what it made.
    async fn step(&mut self) {
        let (link, dev) = (&mut self.link, &mut self.dev);
        std::future::poll_fn(|cx| {
            let mut buf = vec![0; MAX_FRAME];
            while let Poll::Ready(r) = link.poll_recv(cx, &mut buf) {
                let n = r.unwrap();
                dev.rx.push_back(buf[..n].to_vec());
            }
            Poll::Ready(())
        })
        .await;
        let now = self.now();
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
        while let Some(f) = self.dev.tx.pop_front() {
            std::future::poll_fn(|cx| self.link.poll_send(cx, &f))
                .await
                .unwrap();
        }
    }

    /// Waits up to `d` for the link to have a frame.
    async fn wait(&mut self, d: Duration) {
        let link = &mut self.link;
        let dev = &mut self.dev;
        let _ = tokio::time::timeout(
            d,
            std::future::poll_fn(|cx| {
                let mut buf = vec![0; MAX_FRAME];
                link.poll_recv(cx, &mut buf).map(|r| {
                    let n = r.unwrap();
                    dev.rx.push_back(buf[..n].to_vec());
                })
            }),
        )
        .await;
    }

    /// Runs the box (and, by waiting, the gateway) until `f` returns Some, or panics after
    /// `limit` naming `what`.
    async fn until<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut f: impl FnMut(&mut SocketSet<'static>) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.step().await;
            if let Some(t) = f(&mut self.sockets) {
                return t;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for {what}");
            }
            self.wait(Duration::from_millis(5)).await;
        }
    }

    /// Runs the box for `d` (nothing awaited).
    async fn run_for(&mut self, d: Duration) {
        let _: Option<()> = tokio::time::timeout(d, self.until("nothing", d * 2, |_| None))
            .await
            .ok();
    }

    fn port(&mut self) -> u16 {
        self.next_port += 1;
        self.next_port
    }

    /// A DNS query of `name`/`t` to `server`: the reply.
    async fn query(&mut self, server: Ipv4Addr, name: &str, t: RecordType) -> Message {
        let mut s = udp::Socket::new(
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 4], vec![0; 4096]),
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 4], vec![0; 4096]),
        );
        let port = self.port();
        s.bind(port).unwrap();
        let mut m = Message::new();
        m.set_id(7)
            .set_message_type(MessageType::Query)
            .set_recursion_desired(true);
        m.add_query(Query::query(
            hickory_proto::rr::Name::from_str(name).unwrap(),
            t,
        ));
        s.send_slice(
            &m.to_vec().unwrap(),
            IpEndpoint::new(IpAddress::Ipv4(server), 53),
        )
        .unwrap();
        let h = self.sockets.add(s);
        let reply = self
            .until("a DNS reply", Duration::from_secs(5), |set| {
                let s = set.get_mut::<udp::Socket>(h);
                s.recv().ok().map(|(b, meta)| {
                    assert_eq!(
                        meta.endpoint,
                        IpEndpoint::new(IpAddress::Ipv4(server), 53),
                        "answered as the server asked"
                    );
                    b.to_vec()
                })
            })
            .await;
        self.sockets.remove(h);
        Message::from_vec(&reply).unwrap()
    }

    /// `n` queries of `name` sent at once from one socket: the reply codes, in the order they
    /// came back.
    async fn query_burst(&mut self, n: usize, name: &str) -> Vec<ResponseCode> {
        let mut s = udp::Socket::new(
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; n], vec![0; n * 128]),
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; n], vec![0; n * 128]),
        );
        let port = self.port();
        s.bind(port).unwrap();
        for i in 0..n {
            let mut m = Message::new();
            m.set_id(u16::try_from(i).unwrap())
                .set_message_type(MessageType::Query)
                .set_recursion_desired(true);
            m.add_query(Query::query(
                hickory_proto::rr::Name::from_str(name).unwrap(),
                RecordType::A,
            ));
            s.send_slice(
                &m.to_vec().unwrap(),
                IpEndpoint::new(IpAddress::Ipv4(GATEWAY), 53),
            )
            .unwrap();
        }
        let h = self.sockets.add(s);
        let mut codes = Vec::new();
        self.until("every DNS reply", Duration::from_secs(20), |set| {
            let s = set.get_mut::<udp::Socket>(h);
            while let Ok((b, _)) = s.recv() {
                codes.push(Message::from_vec(b).unwrap().response_code());
            }
            (codes.len() == n).then_some(())
        })
        .await;
        self.sockets.remove(h);
        codes
    }

    /// The synthetic address the gateway's DNS gives `name`.
    async fn resolve(&mut self, name: &str) -> Ipv4Addr {
        let m = self.query(GATEWAY, name, RecordType::A).await;
        assert_eq!(m.response_code(), ResponseCode::NoError, "{name}: {m:?}");
        match m.answers()[0].data() {
            RData::A(a) => a.0,
            other => panic!("{other:?}"),
        }
    }

    /// Starts a connection to `to`.
    fn connect(&mut self, to: Ipv4Addr, port: u16) -> SocketHandle {
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 65536]),
            tcp::SocketBuffer::new(vec![0; 65536]),
        );
        let local = self.port();
        s.connect(
            self.iface.context(),
            IpEndpoint::new(IpAddress::Ipv4(to), port),
            local,
        )
        .unwrap();
        self.sockets.add(s)
    }

    /// How a connection's opening ended: Established, or Closed (reset).
    async fn opened(&mut self, h: SocketHandle) -> tcp::State {
        self.until(
            "the connection to open or fail",
            Duration::from_secs(5),
            |set| match set.get::<tcp::Socket>(h).state() {
                tcp::State::SynSent => None,
                s => Some(s),
            },
        )
        .await
    }
}

// ---- the host side: resolver, dialer, log ----

#[derive(Default)]
struct TestResolver(HashMap<String, Vec<IpAddr>>);

impl Resolver for TestResolver {
    fn resolve(&self, name: &Name) -> Boxed<io::Result<Vec<IpAddr>>> {
        let r = self
            .0
            .get(name.as_str())
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such name"));
        Box::pin(async move { r })
    }

    /// A known name has a TXT record, and an SRV record that comes with an address of its
    /// target (which the gateway must not relay); other types are an error.
    fn records(
        &self,
        name: &Name,
        record_type: u16,
    ) -> Boxed<io::Result<Vec<hickory_proto::rr::Record>>> {
        use hickory_proto::rr::{rdata, Record};
        let known = self.0.contains_key(name.as_str());
        let owner = hickory_proto::rr::Name::from_str(&format!("{}.", name.as_str())).unwrap();
        let target = hickory_proto::rr::Name::from_str("target.example.test.").unwrap();
        let r = match RecordType::from(record_type) {
            _ if !known => Ok(Vec::new()),
            RecordType::TXT => Ok(vec![Record::from_rdata(
                owner,
                60,
                RData::TXT(rdata::TXT::new(vec!["from the host".into()])),
            )]),
            RecordType::SRV => Ok(vec![
                Record::from_rdata(
                    owner,
                    60,
                    RData::SRV(rdata::SRV::new(0, 0, 443, target.clone())),
                ),
                Record::from_rdata(target, 60, RData::A(rdata::A(PUBLIC))),
            ]),
            _ => Err(io::Error::other("no such type here")),
        };
        Box::pin(async move { r })
    }
}

/// Records every dial; dials only loopback, through its map; refuses the rest (or times out
/// for the addresses in `silent`).
#[derive(Default, Clone)]
struct TestDialer {
    map: HashMap<SocketAddr, SocketAddr>,
    silent: Vec<SocketAddr>,
    dialled: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Dialer for TestDialer {
    fn dial(&self, to: SocketAddr) -> Boxed<io::Result<Box<dyn Upstream>>> {
        self.dialled.lock().unwrap().push(to);
        let real = self.map.get(&to).copied();
        let silent = self.silent.contains(&to);
        Box::pin(async move {
            match real {
                Some(addr) => {
                    assert!(addr.ip().is_loopback(), "tests dial loopback only");
                    let s = tokio::net::TcpStream::connect(addr).await?;
                    Ok(Box::new(s) as Box<dyn Upstream>)
                }
                None if silent => Err(io::ErrorKind::TimedOut.into()),
                None => Err(io::ErrorKind::ConnectionRefused.into()),
            }
        })
    }
}

/// A loopback echo server: echoes what it reads, and shuts its side when the client does.
async fn echo_server() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0; 65536];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

struct World {
    net: BoxNet,
    handle: Handle,
    log: mpsc::Receiver<Record>,
    dialled: Arc<Mutex<Vec<SocketAddr>>>,
}

impl World {
    fn records(&self) -> Vec<Value> {
        self.log
            .try_iter()
            .map(|r| serde_json::from_str(&r.line()).unwrap())
            .collect()
    }

    fn dialled(&self) -> Vec<SocketAddr> {
        self.dialled.lock().unwrap().clone()
    }
}

fn custom(hosts: &[&str], allow: &[&str], deny: &[&str]) -> Policy {
    Policy::new(Mode::Custom, hosts, allow, deny).unwrap()
}

fn allow_all() -> Policy {
    Policy::new(
        Mode::AllowAll,
        &[] as &[&str],
        &[] as &[&str],
        &[] as &[&str],
    )
    .unwrap()
}

fn start(policy: Policy, resolver: TestResolver, dialer: TestDialer, cfg: Option<Config>) -> World {
    let (gw_end, box_end) = MemLink::pair(MAX_FRAME);
    start_on(gw_end, box_end, policy, resolver, dialer, cfg)
}

fn start_on(
    gw_end: impl Link + 'static,
    box_end: impl Link + 'static,
    policy: Policy,
    resolver: TestResolver,
    dialer: TestDialer,
    cfg: Option<Config>,
) -> World {
    let (tx, log) = mpsc::channel();
    let dialled = dialer.dialled.clone();
    let mut gw = Gateway::new(
        Box::new(gw_end),
        policy,
        Arc::new(resolver),
        Arc::new(dialer),
        Box::new(tx),
    );
    if let Some(c) = cfg {
        gw = gw.with_config(c);
    }
    let handle = gw.handle();
    tokio::spawn(async move { gw.run().await.unwrap() });
    World {
        net: BoxNet::new(box_end),
        handle,
        log,
        dialled,
    }
}

fn resolver(names: &[(&str, &[IpAddr])]) -> TestResolver {
    TestResolver(
        names
            .iter()
            .map(|(n, a)| (n.to_string(), a.to_vec()))
            .collect(),
    )
}

fn public(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(PUBLIC), port)
}

/// Sends `data` on an open connection and reads `want` bytes back.
async fn exchange(net: &mut BoxNet, h: SocketHandle, data: &[u8], want: usize) -> Vec<u8> {
    let mut sent = 0;
    let mut got = Vec::new();
    net.until("the echo", Duration::from_secs(10), |set| {
        let s = set.get_mut::<tcp::Socket>(h);
        if sent < data.len() && s.can_send() {
            sent += s.send_slice(&data[sent..]).unwrap();
        }
        while s.can_recv() {
            s.recv(|b| {
                got.extend_from_slice(b);
                (b.len(), ())
            })
            .unwrap();
        }
        (got.len() >= want).then_some(())
    })
    .await;
    got
}

// ---- the tests ----

#[tokio::test]
async fn an_allowed_name_resolves_to_a_synthetic_address_and_talks_to_its_upstream() {
    let echo = echo_server().await;
    let dialer = TestDialer {
        map: HashMap::from([(public(443), echo)]),
        ..Default::default()
    };
    let mut w = start(
        custom(&["api.example.test"], &[], &[]),
        resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])]),
        dialer,
        None,
    );
    let addr = w.net.resolve("api.example.test.").await;
    assert_eq!(addr.octets()[..2], [198, 18], "a synthetic address");
    // The same name, asked of any resolver address, gets the same answer.
    let again = w
        .net
        .query(
            Ipv4Addr::new(8, 8, 8, 8),
            "API.example.test.",
            RecordType::A,
        )
        .await;
    assert!(matches!(again.answers()[0].data(), RData::A(a) if a.0 == addr));

    let h = w.net.connect(addr, 443);
    assert_eq!(w.net.opened(h).await, tcp::State::Established);
    // A large write both ways (more than one window), then half-close: the box's FIN reaches
    // the echo server, which finishes echoing and closes; the box reads all, then EOF.
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let got = exchange(&mut w.net, h, &data, data.len()).await;
    assert_eq!(got, data);
    w.net.sockets.get_mut::<tcp::Socket>(h).close();
    let mut tail = Vec::new();
    w.net
        .until("the upstream's FIN", Duration::from_secs(5), |set| {
            let s = set.get_mut::<tcp::Socket>(h);
            while s.can_recv() {
                s.recv(|b| {
                    tail.extend_from_slice(b);
                    (b.len(), ())
                })
                .unwrap();
            }
            (!s.may_recv() && matches!(s.state(), tcp::State::TimeWait | tcp::State::Closed))
                .then_some(())
        })
        .await;
    assert!(tail.is_empty());
    assert_eq!(w.dialled(), vec![public(443)]);

    // The log: one DNS decision per query, one flow record with the bytes.
    let mut flow = None;
    w.net
        .until("the flow's log record", Duration::from_secs(5), |_| {
            for r in w.log.try_iter() {
                let v: Value = serde_json::from_str(&r.line()).unwrap();
                if v["kind"] == "flow" {
                    flow = Some(v);
                }
            }
            flow.clone()
        })
        .await;
    let flow = flow.unwrap();
    assert_eq!(flow["name"], "api.example.test");
    assert_eq!(flow["verdict"], "allow");
    assert_eq!(flow["rule"], "allowed host api.example.test");
    assert_eq!(flow["dst"], format!("{addr}:443"));
    assert_eq!(flow["upstream"], "93.184.216.34:443");
    assert_eq!(flow["bytes_out"], 200_000);
    assert_eq!(flow["bytes_in"], 200_000);
}

#[tokio::test]
async fn refused_names_are_nxdomain_and_a_refused_upstream_resets_the_box() {
    let mut w = start(
        custom(&["api.example.test"], &[], &[]),
        resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])]),
        TestDialer::default(),
        None,
    );
    let m = w
        .net
        .query(GATEWAY, "other.example.test.", RecordType::A)
        .await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    let dns: Vec<Value> = w.records();
    assert_eq!(dns[0]["kind"], "dns");
    assert_eq!(dns[0]["verdict"], "deny");
    assert_eq!(dns[0]["rule"], "not an allowed host or CIDR");

    // Allowed, but nothing listens upstream: the box sees a reset, at once.
    let addr = w.net.resolve("api.example.test.").await;
    let t0 = std::time::Instant::now();
    let h = w.net.connect(addr, 443);
    assert_eq!(w.net.opened(h).await, tcp::State::Closed);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "a reset, not a timeout"
    );
    assert_eq!(w.dialled(), vec![public(443)]);
}

/// A box asking faster than the DNS rate: a burst is answered from the policy, the rest
/// REFUSED, each refusal logged as such, and the log itself keeps its rate (the rest counted in
/// one `suppressed` record, never lost without a trace).
#[tokio::test]
async fn past_the_dns_rate_queries_are_refused_and_the_log_keeps_its_rate() {
    let mut w = start(
        custom(&["api.example.test"], &[], &[]),
        resolver(&[]),
        TestDialer::default(),
        None,
    );
    let n = 2000;
    let codes = w.net.query_burst(n, "api.example.test.").await;
    let answered = codes
        .iter()
        .filter(|c| **c == ResponseCode::NoError)
        .count();
    let refused = codes
        .iter()
        .filter(|c| **c == ResponseCode::Refused)
        .count();
    assert_eq!(answered + refused, n, "{codes:?}");
    let burst = hull_net::limit::DNS_BURST as usize;
    // The burst, and what the rate refilled while they were answered (well under a second).
    assert!(
        answered >= burst && answered < burst + 200,
        "answered {answered}"
    );
    let records = w.records();
    let limited = records
        .iter()
        .filter(|r| r["rule"] == "DNS rate limit (200 queries a second)")
        .count();
    assert!(limited > 0, "{records:?}");
    // The allowed answers all logged; of the refusals, the log's burst, then its rate: far
    // fewer lines than queries.
    assert!(
        records.len() <= answered + hull_net::limit::LOG_BURST as usize + 100,
        "{} records",
        records.len()
    );
    // Nothing vanishes silently: once the log has room again, the count comes first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = w
        .net
        .query(GATEWAY, "other.example.test.", RecordType::A)
        .await;
    let later = w.records();
    assert_eq!(later[0]["kind"], "suppressed", "{later:?}");
    assert_eq!(later[0]["verdict"], "deny", "{later:?}");
    assert!(later[0]["records"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn an_upstream_that_times_out_leaves_the_syn_unanswered() {
    let dialer = TestDialer {
        silent: vec![public(443)],
        ..Default::default()
    };
    let mut w = start(
        custom(&["slow.example.test"], &[], &[]),
        resolver(&[("slow.example.test", &[IpAddr::V4(PUBLIC)])]),
        dialer,
        None,
    );
    let addr = w.net.resolve("slow.example.test.").await;
    let h = w.net.connect(addr, 443);
    w.net.run_for(Duration::from_millis(500)).await;
    assert_eq!(
        w.net.sockets.get::<tcp::Socket>(h).state(),
        tcp::State::SynSent,
        "no SYN-ACK and no reset"
    );
    let rec = w
        .records()
        .into_iter()
        .find(|r| r["kind"] == "flow")
        .unwrap();
    assert_eq!(rec["end"], "upstream timed out");
}

#[tokio::test]
async fn an_allowed_name_resolving_to_denied_addresses_is_refused_and_logged() {
    // The host's own (public) address, as the gateway's config names it.
    let host: IpAddr = "93.184.216.99".parse().unwrap();
    for (answer, rule) in [
        ("127.0.0.1", "always denied: loopback"),
        ("10.0.0.1", "always denied: private"),
        ("169.254.169.254", "always denied: cloud metadata"),
        ("::ffff:127.0.0.1", "always denied: loopback"),
        ("93.184.216.99", "always denied: the host's own address"),
    ] {
        let cfg = Config {
            host_addrs: vec![host],
            ..Config::default()
        };
        let mut w = start(
            custom(&["api.example.test"], &[], &[]),
            resolver(&[("api.example.test", &[answer.parse().unwrap()])]),
            TestDialer::default(),
            Some(cfg),
        );
        let addr = w.net.resolve("api.example.test.").await;
        let h = w.net.connect(addr, 443);
        assert_eq!(w.net.opened(h).await, tcp::State::Closed, "{answer}");
        assert!(w.dialled().is_empty(), "{answer}: nothing dialled");
        let rec = w
            .records()
            .into_iter()
            .find(|r| r["kind"] == "flow")
            .unwrap();
        assert_eq!(rec["verdict"], "deny");
        assert_eq!(
            rec["rule"],
            format!("resolved only to denied addresses ({rule})"),
            "{answer}"
        );
        assert_eq!(rec["name"], "api.example.test");
    }
}

#[tokio::test]
async fn a_synthetic_address_never_issued_is_refused() {
    let mut w = start(
        allow_all(),
        TestResolver::default(),
        TestDialer::default(),
        None,
    );
    let h = w.net.connect(Ipv4Addr::new(198, 18, 200, 200), 80);
    assert_eq!(w.net.opened(h).await, tcp::State::Closed);
    assert!(w.dialled().is_empty());
    let rec = w
        .records()
        .into_iter()
        .find(|r| r["kind"] == "flow")
        .unwrap();
    assert_eq!(
        rec["rule"],
        "198.18.200.200 was never handed out by the gateway's DNS"
    );
}

#[tokio::test]
async fn a_literal_in_a_denied_cidr_is_refused_even_inside_an_allowed_one() {
    let mut w = start(
        custom(&[], &["93.184.216.0/24"], &["93.184.216.34/32"]),
        TestResolver::default(),
        TestDialer::default(),
        None,
    );
    let h = w.net.connect(PUBLIC, 80);
    assert_eq!(w.net.opened(h).await, tcp::State::Closed);
    assert!(
        w.dialled().is_empty(),
        "the denied literal is never dialled"
    );
    let rec = w
        .records()
        .into_iter()
        .find(|r| r["kind"] == "flow")
        .unwrap();
    assert_eq!(rec["rule"], "denied CIDR 93.184.216.34/32");
    // Its neighbour in the allowed CIDR is dialled (and refused by the test dialer).
    let h = w.net.connect(Ipv4Addr::new(93, 184, 216, 35), 80);
    assert_eq!(w.net.opened(h).await, tcp::State::Closed);
    assert_eq!(w.dialled(), vec!["93.184.216.35:80".parse().unwrap()]);
}

#[tokio::test]
async fn allow_all_would_dial_a_public_literal_and_nothing_is_sent() {
    let mut w = start(
        allow_all(),
        TestResolver::default(),
        TestDialer::default(),
        None,
    );
    let h = w.net.connect(PUBLIC, 443);
    assert_eq!(w.net.opened(h).await, tcp::State::Closed);
    assert_eq!(w.dialled(), vec![public(443)]);
    // A private literal is not even dialled.
    let h = w.net.connect(Ipv4Addr::new(10, 0, 0, 1), 443);
    assert_eq!(w.net.opened(h).await, tcp::State::Closed);
    assert_eq!(w.dialled(), vec![public(443)]);
}

#[tokio::test]
async fn connections_past_the_cap_are_reset_and_logged_and_slots_come_back() {
    let echo = echo_server().await;
    let dialer = TestDialer {
        map: HashMap::from([(public(80), echo)]),
        ..Default::default()
    };
    let cfg = Config {
        max_tcp_connections: 2,
        ..Config::default()
    };
    let mut w = start(
        custom(&["api.example.test"], &[], &[]),
        resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])]),
        dialer,
        Some(cfg),
    );
    let addr = w.net.resolve("api.example.test.").await;
    let a = w.net.connect(addr, 80);
    assert_eq!(w.net.opened(a).await, tcp::State::Established);
    let b = w.net.connect(addr, 80);
    assert_eq!(w.net.opened(b).await, tcp::State::Established);
    let c = w.net.connect(addr, 80);
    assert_eq!(
        w.net.opened(c).await,
        tcp::State::Closed,
        "the third is reset"
    );
    let caps: Vec<Value> = w
        .records()
        .into_iter()
        .filter(|r| r["end"] == "cap")
        .collect();
    assert_eq!(caps.len(), 1);
    assert_eq!(caps[0]["rule"], "connection cap (2 live connections)");
    // Close one: its slot comes back.
    w.net.sockets.get_mut::<tcp::Socket>(a).close();
    w.net
        .until("the first to close", Duration::from_secs(5), |set| {
            matches!(
                set.get::<tcp::Socket>(a).state(),
                tcp::State::TimeWait | tcp::State::Closed
            )
            .then_some(())
        })
        .await;
    w.net.run_for(Duration::from_millis(50)).await;
    let d = w.net.connect(addr, 80);
    assert_eq!(w.net.opened(d).await, tcp::State::Established);
    assert_eq!(exchange(&mut w.net, d, b"ping", 4).await, b"ping");
}

#[tokio::test]
async fn a_replaced_policy_judges_new_connections_and_queries() {
    let echo = echo_server().await;
    let dialer = TestDialer {
        map: HashMap::from([(public(80), echo)]),
        ..Default::default()
    };
    let mut w = start(
        custom(&["api.example.test"], &[], &[]),
        resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])]),
        dialer,
        None,
    );
    let addr = w.net.resolve("api.example.test.").await;
    let open = w.net.connect(addr, 80);
    assert_eq!(w.net.opened(open).await, tcp::State::Established);
    w.handle
        .set_policy(custom(&["other.example.test"], &[], &[]));
    let m = w
        .net
        .query(GATEWAY, "api.example.test.", RecordType::A)
        .await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain, "DNS judged anew");
    let h = w.net.connect(addr, 80);
    assert_eq!(
        w.net.opened(h).await,
        tcp::State::Closed,
        "connect judged anew"
    );
    let rec = w
        .records()
        .into_iter()
        .find(|r| r["kind"] == "flow" && r["end"] == "refused")
        .unwrap();
    assert_eq!(rec["rule"], "not an allowed host or CIDR");
    // The connection opened before the change stays open.
    assert_eq!(exchange(&mut w.net, open, b"still", 5).await, b"still");
    assert_eq!(w.dialled(), vec![public(80)]);
}

#[tokio::test]
async fn a_published_port_reaches_the_box_from_host_loopback_and_can_be_withdrawn() {
    let mut w = start(
        Policy::deny_all(),
        TestResolver::default(),
        TestDialer::default(),
        None,
    );
    let mut listener = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; 65536]),
        tcp::SocketBuffer::new(vec![0; 65536]),
    );
    listener.listen(8080).unwrap();
    let l = w.net.sockets.add(listener);
    let host_port = w.handle.publish(8080).await.unwrap();
    let client = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", host_port))
            .await
            .unwrap();
        s.write_all(b"ping").await.unwrap();
        s.shutdown().await.unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).await.unwrap();
        back
    });
    let mut got = Vec::new();
    w.net
        .until(
            "the host's bytes in the box",
            Duration::from_secs(5),
            |set| {
                let s = set.get_mut::<tcp::Socket>(l);
                while s.can_recv() {
                    s.recv(|b| {
                        got.extend_from_slice(b);
                        (b.len(), ())
                    })
                    .unwrap();
                }
                (got == b"ping" && !s.may_recv()).then_some(())
            },
        )
        .await;
    let s = w.net.sockets.get_mut::<tcp::Socket>(l);
    assert_eq!(
        s.remote_endpoint().unwrap().addr,
        IpAddress::Ipv4(GATEWAY),
        "from the gateway"
    );
    s.send_slice(b"pong").unwrap();
    s.close();
    let back = loop {
        w.net.run_for(Duration::from_millis(20)).await;
        if client.is_finished() {
            break client.await.unwrap();
        }
    };
    assert_eq!(back, b"pong");
    assert!(w.handle.withdraw(8080).await);
    assert!(!w.handle.withdraw(8080).await);
    w.net.run_for(Duration::from_millis(20)).await;
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", host_port))
            .await
            .is_err(),
        "the listener is gone"
    );
}

#[tokio::test]
async fn concurrent_connections_to_one_endpoint_each_reach_their_own_upstream_connection() {
    // Several SYNs to the same synthetic address and port, sent in one go, are answered in
    // one turn of the gateway: each must end up on its own socket and upstream connection.
    let echo = echo_server().await;
    let dialer = TestDialer {
        map: HashMap::from([(public(80), echo)]),
        ..Default::default()
    };
    let mut w = start(
        custom(&["api.example.test"], &[], &[]),
        resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])]),
        dialer,
        None,
    );
    let addr = w.net.resolve("api.example.test.").await;
    let hs: Vec<SocketHandle> = (0..8).map(|_| w.net.connect(addr, 80)).collect();
    for h in &hs {
        assert_eq!(w.net.opened(*h).await, tcp::State::Established);
    }
    for (i, h) in hs.iter().enumerate() {
        let msg = format!("connection {i}");
        assert_eq!(
            exchange(&mut w.net, *h, msg.as_bytes(), msg.len()).await,
            msg.as_bytes()
        );
    }
    assert_eq!(w.dialled().len(), 8);
}

#[tokio::test]
async fn a_handler_sees_the_connection_it_was_given() {
    // The FlowHandler seam: a handler of the test's own answers for the upstream.
    struct Greeter(Arc<Mutex<Vec<hull_net::FlowMeta>>>);
    impl hull_net::FlowHandler for Greeter {
        fn handle(
            &self,
            mut box_side: tokio::io::DuplexStream,
            _upstream: Box<dyn Upstream>,
            meta: hull_net::FlowMeta,
        ) -> Boxed<io::Result<()>> {
            self.0.lock().unwrap().push(meta.clone());
            Box::pin(async move {
                let mut asked = Vec::new();
                box_side.read_to_end(&mut asked).await?;
                let name = meta.name.map(|n| n.to_string()).unwrap_or_default();
                box_side
                    .write_all(format!("{name} heard {}", asked.len()).as_bytes())
                    .await?;
                box_side.shutdown().await
            })
        }
    }
    let echo = echo_server().await;
    let dialer = TestDialer {
        map: HashMap::from([(public(443), echo)]),
        ..Default::default()
    };
    let (gw_end, box_end) = MemLink::pair(MAX_FRAME);
    let (tx, _log) = mpsc::channel();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let gw = Gateway::new(
        Box::new(gw_end),
        custom(&["api.example.test"], &[], &[]),
        Arc::new(resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])])),
        Arc::new(dialer),
        Box::new(tx),
    )
    .with_handler(Arc::new(Greeter(seen.clone())));
    let handle = gw.handle();
    let run = tokio::spawn(gw.run());
    let mut net = BoxNet::new(box_end);
    let addr = net.resolve("api.example.test.").await;
    let h = net.connect(addr, 443);
    assert_eq!(net.opened(h).await, tcp::State::Established);
    let s = net.sockets.get_mut::<tcp::Socket>(h);
    s.send_slice(b"hello").unwrap();
    s.close();
    let mut got = Vec::new();
    net.until("the handler's answer", Duration::from_secs(5), |set| {
        let s = set.get_mut::<tcp::Socket>(h);
        while s.can_recv() {
            s.recv(|b| {
                got.extend_from_slice(b);
                (b.len(), ())
            })
            .unwrap();
        }
        (!s.may_recv() && !got.is_empty()).then_some(())
    })
    .await;
    assert_eq!(got, b"api.example.test heard 5");
    let meta = seen.lock().unwrap()[0].clone();
    assert_eq!(meta.dst, std::net::SocketAddrV4::new(addr, 443));
    assert_eq!(meta.upstream, public(443));
    assert_eq!(meta.src.ip(), &BOX);
    handle.stop();
    run.await.unwrap().unwrap();
}

/// The non-address types of an allowed name are looked up by the host's resolver and relayed:
/// only records of the asked type (an SRV's target address is not: the box asks for the target
/// by name, and the policy judges it); a lookup that fails is SERVFAIL; a name not allowed is
/// never looked up (NXDOMAIN).
#[tokio::test]
async fn other_types_of_an_allowed_name_are_forwarded_without_addresses() {
    let mut w = start(
        custom(&["api.example.test"], &[], &[]),
        resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])]),
        TestDialer::default(),
        None,
    );
    let m = w
        .net
        .query(GATEWAY, "api.example.test.", RecordType::TXT)
        .await;
    assert_eq!(m.response_code(), ResponseCode::NoError);
    match m.answers()[0].data() {
        RData::TXT(t) => assert_eq!(t.to_string(), "from the host"),
        other => panic!("{other:?}"),
    }
    let m = w
        .net
        .query(GATEWAY, "api.example.test.", RecordType::SRV)
        .await;
    assert_eq!(m.answers().len(), 1, "{m:?}");
    assert!(matches!(m.answers()[0].data(), RData::SRV(s) if s.port() == 443));
    assert!(
        m.additionals().is_empty() && m.name_servers().is_empty(),
        "{m:?}"
    );
    let m = w
        .net
        .query(GATEWAY, "api.example.test.", RecordType::MX)
        .await;
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    let m = w
        .net
        .query(GATEWAY, "other.example.test.", RecordType::TXT)
        .await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    let dns: Vec<Value> = w
        .records()
        .into_iter()
        .filter(|r| r["kind"] == "dns")
        .collect();
    assert_eq!(dns[0]["verdict"], "allow", "{dns:?}");
    assert_eq!(dns[0]["record_type"], 16, "{dns:?}");
}

#[tokio::test]
async fn dns_over_tcp_is_answered_by_the_gateway_and_other_types_are_refused() {
    let mut w = start(
        custom(&["api.example.test"], &[], &[]),
        TestResolver::default(),
        TestDialer::default(),
        None,
    );
    // Two queries on one connection to an arbitrary resolver address, then the box closes.
    let h = w.net.connect(Ipv4Addr::new(8, 8, 4, 4), 53);
    assert_eq!(w.net.opened(h).await, tcp::State::Established);
    let mut wire = Vec::new();
    for (id, name) in [(1u16, "api.example.test."), (2, "other.example.test.")] {
        let mut m = Message::new();
        m.set_id(id).set_message_type(MessageType::Query);
        m.add_query(Query::query(
            hickory_proto::rr::Name::from_str(name).unwrap(),
            RecordType::A,
        ));
        let b = m.to_vec().unwrap();
        wire.extend_from_slice(&u16::try_from(b.len()).unwrap().to_be_bytes());
        wire.extend_from_slice(&b);
    }
    let s = w.net.sockets.get_mut::<tcp::Socket>(h);
    s.send_slice(&wire).unwrap();
    s.close();
    let mut got = Vec::new();
    w.net
        .until(
            "both replies and the close",
            Duration::from_secs(5),
            |set| {
                let s = set.get_mut::<tcp::Socket>(h);
                while s.can_recv() {
                    s.recv(|b| {
                        got.extend_from_slice(b);
                        (b.len(), ())
                    })
                    .unwrap();
                }
                (!s.may_recv()).then_some(())
            },
        )
        .await;
    let mut replies = Vec::new();
    let mut rest = &got[..];
    while rest.len() >= 2 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        replies.push(Message::from_vec(&rest[2..2 + n]).unwrap());
        rest = &rest[2 + n..];
    }
    assert_eq!(replies.len(), 2);
    assert_eq!(
        (replies[0].id(), replies[0].response_code()),
        (1, ResponseCode::NoError)
    );
    assert!(matches!(replies[0].answers()[0].data(), RData::A(a) if a.0.octets()[0] == 198));
    assert_eq!(
        (replies[1].id(), replies[1].response_code()),
        (2, ResponseCode::NXDomain)
    );
    // Over UDP, a TXT query of an allowed name is forwarded (this resolver knows no such
    // name: an empty answer).
    let m = w
        .net
        .query(GATEWAY, "api.example.test.", RecordType::TXT)
        .await;
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(m.answers().is_empty());
    let dns: Vec<Value> = w
        .records()
        .into_iter()
        .filter(|r| r["kind"] == "dns")
        .collect();
    assert_eq!(dns.len(), 3, "{dns:?}");
    assert_eq!(dns[0]["answer"].as_str().unwrap()[..7], *"198.18.");
}

#[tokio::test]
async fn the_gateway_runs_over_a_tap_links_fd() {
    // A datagram socket pair stands in for the TAP device: one frame per read and write, a
    // real fd made non-blocking and registered with the reactor.
    let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
    let gw_end = TapLink::new(std::os::fd::OwnedFd::from(a), MAX_FRAME - 14).unwrap();
    let box_end = TapLink::new(std::os::fd::OwnedFd::from(b), MAX_FRAME - 14).unwrap();
    let echo = echo_server().await;
    let dialer = TestDialer {
        map: HashMap::from([(public(443), echo)]),
        ..Default::default()
    };
    let mut w = start_on(
        gw_end,
        box_end,
        custom(&["api.example.test"], &[], &[]),
        resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])]),
        dialer,
        None,
    );
    let addr = w.net.resolve("api.example.test.").await;
    let h = w.net.connect(addr, 443);
    assert_eq!(w.net.opened(h).await, tcp::State::Established);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    assert_eq!(exchange(&mut w.net, h, &data, data.len()).await, data);
}

#[tokio::test]
async fn a_failing_handler_resets_the_box_and_the_log_says_why() {
    struct Refuser;
    impl hull_net::FlowHandler for Refuser {
        fn handle(
            &self,
            _box_side: tokio::io::DuplexStream,
            _upstream: Box<dyn Upstream>,
            _meta: hull_net::FlowMeta,
        ) -> Boxed<io::Result<()>> {
            Box::pin(async { Err(io::Error::other("SNI mismatch")) })
        }
    }
    let echo = echo_server().await;
    let dialer = TestDialer {
        map: HashMap::from([(public(443), echo)]),
        ..Default::default()
    };
    let (gw_end, box_end) = MemLink::pair(MAX_FRAME);
    let (tx, log) = mpsc::channel();
    let gw = Gateway::new(
        Box::new(gw_end),
        custom(&["api.example.test"], &[], &[]),
        Arc::new(resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])])),
        Arc::new(dialer),
        Box::new(tx),
    )
    .with_handler(Arc::new(Refuser));
    tokio::spawn(gw.run());
    let mut net = BoxNet::new(box_end);
    let addr = net.resolve("api.example.test.").await;
    let h = net.connect(addr, 443);
    net.until("the reset", Duration::from_secs(5), |set| {
        (set.get::<tcp::Socket>(h).state() == tcp::State::Closed).then_some(())
    })
    .await;
    let mut end = None;
    net.until("the flow's record", Duration::from_secs(5), |_| {
        for r in log.try_iter() {
            let v: Value = serde_json::from_str(&r.line()).unwrap();
            if v["kind"] == "flow" {
                end = Some(v["end"].as_str().unwrap().to_string());
            }
        }
        end.clone()
    })
    .await;
    assert_eq!(end.unwrap(), "reset (the handler failed: SNI mismatch)");
}

#[tokio::test]
async fn an_upstream_that_closes_first_still_hears_the_box() {
    // Half-close the other way: the server sends a banner and shuts its side; the box reads
    // the banner and EOF, then still sends, and the server reads it before the box closes.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = l.local_addr().unwrap();
    let heard = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(b"banner").await.unwrap();
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        got
    });
    let dialer = TestDialer {
        map: HashMap::from([(public(25), server)]),
        ..Default::default()
    };
    let mut w = start(
        custom(&["mail.example.test"], &[], &[]),
        resolver(&[("mail.example.test", &[IpAddr::V4(PUBLIC)])]),
        dialer,
        None,
    );
    let addr = w.net.resolve("mail.example.test.").await;
    let h = w.net.connect(addr, 25);
    assert_eq!(w.net.opened(h).await, tcp::State::Established);
    let mut banner = Vec::new();
    w.net
        .until(
            "the banner and the server's FIN",
            Duration::from_secs(5),
            |set| {
                let s = set.get_mut::<tcp::Socket>(h);
                while s.can_recv() {
                    s.recv(|b| {
                        banner.extend_from_slice(b);
                        (b.len(), ())
                    })
                    .unwrap();
                }
                (s.state() == tcp::State::CloseWait).then_some(())
            },
        )
        .await;
    assert_eq!(banner, b"banner");
    let s = w.net.sockets.get_mut::<tcp::Socket>(h);
    s.send_slice(b"late words").unwrap();
    s.close();
    let t = std::time::Instant::now();
    w.net
        .until("the box's close", Duration::from_secs(5), |set| {
            (set.get::<tcp::Socket>(h).state() == tcp::State::Closed).then_some(())
        })
        .await;
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "the box's FIN is acknowledged at once, not left to a retransmission ({:?})",
        t.elapsed()
    );
    let got = tokio::time::timeout(Duration::from_secs(5), heard)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, b"late words");
}

#[tokio::test]
async fn a_policy_replaced_resetting_closes_the_open_connections_it_no_longer_allows() {
    let echo = echo_server().await;
    let literal = Ipv4Addr::new(192, 0, 2, 3);
    let dialer = TestDialer {
        map: HashMap::from([
            (public(80), echo),
            (SocketAddr::new(IpAddr::V4(literal), 80), echo),
        ]),
        ..Default::default()
    };
    let mut w = start(
        custom(&["api.example.test"], &["192.0.2.0/28"], &[]),
        resolver(&[("api.example.test", &[IpAddr::V4(PUBLIC)])]),
        dialer,
        None,
    );
    let addr = w.net.resolve("api.example.test.").await;
    let named = w.net.connect(addr, 80);
    assert_eq!(w.net.opened(named).await, tcp::State::Established);
    let lit = w.net.connect(literal, 80);
    assert_eq!(w.net.opened(lit).await, tcp::State::Established);

    // The CIDR goes: the literal's connection is reset, the name's stays.
    w.handle
        .set_policy_resetting(custom(&["api.example.test"], &[], &[]));
    w.net
        .until("the literal's reset", Duration::from_secs(5), |set| {
            (set.get::<tcp::Socket>(lit).state() == tcp::State::Closed).then_some(())
        })
        .await;
    assert_eq!(exchange(&mut w.net, named, b"one", 3).await, b"one");
    // Replaced without resetting: the open one stays even under deny-all.
    w.handle.set_policy(Policy::deny_all());
    assert_eq!(exchange(&mut w.net, named, b"two", 3).await, b"two");
    w.handle.set_policy_resetting(Policy::deny_all());
    w.net
        .until("the name's reset", Duration::from_secs(5), |set| {
            (set.get::<tcp::Socket>(named).state() == tcp::State::Closed).then_some(())
        })
        .await;
    let mut ends = Vec::new();
    w.net
        .until("both records", Duration::from_secs(5), |_| {
            for r in w.log.try_iter() {
                let v: Value = serde_json::from_str(&r.line()).unwrap();
                if v["kind"] == "flow" {
                    ends.push(v["end"].as_str().unwrap().to_string());
                }
            }
            (ends.len() == 2).then_some(())
        })
        .await;
    assert_eq!(
        ends,
        [
            "reset (the policy was replaced: always denied: documentation)",
            "reset (the policy was replaced: mode deny-all)"
        ]
    );
}
