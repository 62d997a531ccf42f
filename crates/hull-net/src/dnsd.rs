//! The gateway's DNS service for one box: every query (UDP to any address on port 53, or a
//! TCP connection to port 53) is answered from the policy by [`crate::dns::answer`], and each
//! decision is logged. The non-address types of an allowed name ([`Answer::Forward`]: TXT, MX,
//! SRV...) asked over UDP are looked up by the host's resolver and relayed ([`Reply::Forward`],
//! which the gateway runs off its event loop; [`dns::forwarded`] keeps only records of the
//! asked type); over TCP they are answered REFUSED. An answer too large for UDP is sent whole
//! (no truncation): a client that cannot take it gets no retry over TCP yet. Past the box's
//! DNS rate ([`crate::limit::DNS_PER_S`]) a query is answered REFUSED without a look at the
//! policy, and logged so.

use std::net::IpAddr;

use smoltcp::socket::tcp::{self, State};

use crate::dns::{self, Answer};
use crate::limit::Bucket;
use crate::log::{now_ms, Decision, LogSink, Record};
use crate::policy::Policy;
use crate::synth::Pool;

/// What to send back for one DNS message.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// These bytes, now.
    Now(Vec<u8>),
    /// What the host's resolver finds for this allowed name and type (over UDP; see the module
    /// comment).
    Forward {
        name: crate::name::Name,
        record_type: u16,
    },
}

/// The reply to one DNS message from the box over TCP (None: send nothing), with its log
/// record: a forwardable query is refused there.
pub fn respond(
    query: &[u8],
    policy: &Policy,
    pool: &mut Pool,
    budget: &mut Bucket,
    log: &mut dyn LogSink,
) -> Option<Vec<u8>> {
    match respond_udp(query, policy, pool, budget, log)? {
        Reply::Now(b) => Some(b),
        Reply::Forward { .. } => dns::refused(query),
    }
}

/// The reply to one DNS message from the box over UDP (None: send nothing), with its log
/// record.
pub fn respond_udp(
    query: &[u8],
    policy: &Policy,
    pool: &mut Pool,
    budget: &mut Bucket,
    log: &mut dyn LogSink,
) -> Option<Reply> {
    if !budget.take(std::time::Instant::now()) {
        let reply = dns::refused(query)?;
        let (name, record_type) = dns::question(query).unwrap_or_default();
        log.write(&Record::Dns {
            at_ms: now_ms(),
            name,
            record_type,
            decision: Decision {
                verdict: "deny",
                rule: format!("DNS rate limit ({} queries a second)", budget.per_s()),
            },
            answer: None,
        });
        return Some(Reply::Now(reply));
    }
    let (answer, decided) = dns::answer(query, policy, pool);
    let reply = match answer {
        Answer::Reply(b) => b,
        Answer::Forward { name, record_type } => {
            if let Some(d) = decided {
                log.write(&Record::Dns {
                    at_ms: now_ms(),
                    name: d.name,
                    record_type: d.record_type,
                    decision: d.verdict.as_ref().map_or_else(
                        || Decision {
                            verdict: "allow",
                            rule: "forwarded".into(),
                        },
                        Decision::from,
                    ),
                    answer: None,
                });
            }
            return Some(Reply::Forward { name, record_type });
        }
        Answer::Drop => return None,
    };
    if let Some(d) = decided {
        let (answered, addr) = dns::summary(&reply);
        let decision = match &d.verdict {
            Some(v) => Decision::from(v),
            None if answered => Decision {
                verdict: "allow",
                rule: "reverse lookup of a synthetic address".into(),
            },
            None => Decision {
                verdict: "deny",
                rule: "not a synthetic address or not a host name".into(),
            },
        };
        log.write(&Record::Dns {
            at_ms: now_ms(),
            name: d.name,
            record_type: d.record_type,
            decision,
            answer: addr.map(IpAddr::V4),
        });
    }
    Some(Reply::Now(reply))
}

/// Bytes of queries (and of replies) a TCP connection buffers at most: one message of the
/// largest size and its length prefix.
const MAX_BUFFERED: usize = 2 + 65535;

/// A DNS connection over TCP: length-prefixed queries in, length-prefixed replies out.
#[derive(Debug, Default)]
pub struct TcpDns {
    queries: Vec<u8>,
    replies: Vec<u8>,
    closed: bool,
    pub bytes_out: u64,
    pub bytes_in: u64,
}

impl TcpDns {
    /// True when a whole length-prefixed query is buffered.
    fn whole_query(&self) -> bool {
        self.queries.len() >= 2
            && self.queries.len()
                >= 2 + usize::from(u16::from_be_bytes([self.queries[0], self.queries[1]]))
    }

    /// Takes the next whole query off the buffer.
    fn next_query(&mut self) -> Option<Vec<u8>> {
        if !self.whole_query() {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([self.queries[0], self.queries[1]]));
        Some(self.queries.drain(..2 + len).skip(2).collect())
    }

    /// Reads queries, answers whole ones, writes replies; closes once the box has closed
    /// and every reply is out. True when anything moved.
    pub fn pump(
        &mut self,
        sock: &mut tcp::Socket<'static>,
        policy: &Policy,
        pool: &mut Pool,
        budget: &mut Bucket,
        log: &mut dyn LogSink,
    ) -> bool {
        let mut moved = false;
        while sock.can_recv() && self.queries.len() < MAX_BUFFERED {
            let room = MAX_BUFFERED - self.queries.len();
            let q = &mut self.queries;
            let n = sock
                .recv(|b| {
                    let n = b.len().min(room);
                    q.extend_from_slice(&b[..n]);
                    (n, n)
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            self.bytes_out += n as u64;
            moved = true;
        }
        // A reply is made only when the last one is out, so neither buffer outgrows its cap.
        loop {
            let mut step = false;
            if self.replies.is_empty() {
                if let Some(query) = self.next_query() {
                    if let Some(reply) = respond(&query, policy, pool, budget, log) {
                        if let Ok(n) = u16::try_from(reply.len()) {
                            self.replies.extend_from_slice(&n.to_be_bytes());
                            self.replies.extend_from_slice(&reply);
                        }
                    }
                    step = true;
                }
            }
            if !self.replies.is_empty() && sock.can_send() {
                let n = sock.send_slice(&self.replies).unwrap_or(0);
                self.replies.drain(..n);
                self.bytes_in += n as u64;
                step |= n > 0;
            }
            if !step {
                break;
            }
            moved = true;
        }
        if !self.closed
            && sock.state() == State::CloseWait
            && self.replies.is_empty()
            && !self.whole_query()
        {
            sock.close();
            self.closed = true;
            moved = true;
        }
        moved
    }
}
