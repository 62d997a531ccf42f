//! Loopback servers for the network tests: a DNS server the gateway is pointed at and an echo
//! server. Nothing here listens beyond 127.0.0.0/8.

/// A loopback DNS server the gateway is pointed at (`--dns`): answers `A` for the names it was
/// given, NXDOMAIN for the rest, and counts the queries per name (a denied name's count stays 0:
/// the host never resolved it).
pub struct Dns {
    pub addr: std::net::SocketAddr,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Dns {
    pub fn start(map: &[(&str, std::net::Ipv4Addr)]) -> Dns {
        use hickory_proto::op::{Message, MessageType, ResponseCode};
        use hickory_proto::rr::{rdata::A, RData, Record, RecordType};
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a DNS port");
        let addr = sock.local_addr().unwrap();
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = asked.clone();
        let map: Vec<(String, std::net::Ipv4Addr)> =
            map.iter().map(|(n, a)| (format!("{n}."), *a)).collect();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1500];
            loop {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    return;
                };
                let Ok(q) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let Some(question) = q.queries().first() else {
                    continue;
                };
                let name = question.name().to_ascii().to_ascii_lowercase();
                seen.lock().unwrap().push(name.clone());
                let mut r = Message::new();
                r.set_id(q.id())
                    .set_message_type(MessageType::Response)
                    .set_recursion_desired(q.recursion_desired())
                    .set_recursion_available(true)
                    .add_queries(q.queries().to_vec());
                match map.iter().find(|(n, _)| *n == name) {
                    Some((_, ip)) if question.query_type() == RecordType::A => {
                        r.add_answer(Record::from_rdata(
                            question.name().clone(),
                            5,
                            RData::A(A(*ip)),
                        ));
                    }
                    Some(_) => {}
                    None => {
                        r.set_response_code(ResponseCode::NXDomain);
                    }
                }
                let _ = sock.send_to(&r.to_vec().unwrap(), from);
            }
        });
        Dns { addr, asked }
    }

    pub fn asked(&self, name: &str) -> usize {
        let full = format!("{name}.");
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|n| **n == full)
            .count()
    }
}

/// A TCP server on `ip` (a loopback address) that answers each connection's first line with
/// `echo: LINE`; counts the connections it accepted.
pub struct Echo {
    pub addr: std::net::SocketAddr,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Echo {
    pub fn start(ip: std::net::Ipv4Addr) -> Echo {
        use std::io::{BufRead, Write};
        let l = std::net::TcpListener::bind((ip, 0)).expect("bind a loopback port");
        let addr = l.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut line = String::new();
                    let mut r = std::io::BufReader::new(c.try_clone().unwrap());
                    if r.read_line(&mut line).is_ok() {
                        let _ = write!(c, "echo: {line}");
                    }
                });
            }
        });
        Echo { addr, accepted }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}
