//! One TCP connection from the box, connect-first: the box's SYN is held (not answered), the
//! destination judged and the upstream dialled ([`connect`], a task of its own), and only then
//! is the SYN answered: a SYN-ACK when the upstream took the connection, a reset when the
//! policy or the upstream refused it (the box sees ECONNREFUSED at once), nothing when the
//! upstream timed out (the box times out itself). An open connection is then spliced.
//!
//! # The seam for what happens to an open connection
//! Every established connection is handed to a [`FlowHandler`] as
//! `(box_side, upstream, meta)`: `box_side` is one end of a `tokio::io::DuplexStream` whose
//! other end the gateway's event loop pumps to and from the box's smoltcp socket (reading it
//! gives the box's bytes, writing it sends to the box, shutting it down sends the box a FIN;
//! the box's FIN reads as EOF); `upstream` is what the [`crate::upstream::Dialer`] returned;
//! `meta` ([`FlowMeta`]) names the connection (the name the box asked for, its synthetic or
//! literal destination, the address dialled, the rule that allowed it). The default,
//! [`Splice`], copies both ways with half-close (`tokio::io::copy_bidirectional`); TLS
//! interception and credential brokering plug in here with a handler of their own (peek the
//! ClientHello on `box_side`, terminate TLS for names that carry a secret, splice the rest).
//! A handler's error resets the box's connection; its `Ok` lets the close run its course.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use smoltcp::socket::tcp::{self, State};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use crate::log::Decision;
use crate::name::Name;
use crate::policy::{Policy, Rule, Verdict};
use crate::upstream::{Boxed, Dialer, Resolver, Upstream};

/// Bytes a [`DuplexStream`] between the box's socket and a handler buffers each way.
pub const PIPE_BUFFER: usize = 256 * 1024;

/// What a handler knows about its connection.
#[derive(Debug, Clone)]
pub struct FlowMeta {
    /// The gateway's number for the connection (unique per gateway).
    pub id: u64,
    /// The box's end of the connection.
    pub src: SocketAddrV4,
    /// Where the box sent it: a synthetic address (then `name` is set) or a literal one.
    pub dst: SocketAddrV4,
    /// The name the box asked for, for a connection to a synthetic address.
    pub name: Option<Name>,
    /// The address the upstream was dialled at.
    pub upstream: SocketAddr,
    /// The rule that allowed the connection.
    pub rule: Rule,
}

/// What handles an established connection (see the module comment).
pub trait FlowHandler: Send + Sync + 'static {
    fn handle(
        &self,
        box_side: DuplexStream,
        upstream: Box<dyn Upstream>,
        meta: FlowMeta,
    ) -> Boxed<io::Result<()>>;
}

/// The default handler: bytes both ways, each direction closed when its source ends.
#[derive(Debug, Default, Clone, Copy)]
pub struct Splice;

impl FlowHandler for Splice {
    fn handle(
        &self,
        mut box_side: DuplexStream,
        mut upstream: Box<dyn Upstream>,
        _meta: FlowMeta,
    ) -> Boxed<io::Result<()>> {
        Box::pin(async move {
            tokio::io::copy_bidirectional(&mut box_side, &mut upstream)
                .await
                .map(|_| ())
        })
    }
}

/// What the box connected to.
#[derive(Debug, Clone)]
pub enum Target {
    /// A synthetic address: the name is judged again with its host-side answers.
    Name(Name),
    /// A literal address the policy allowed at the SYN, by this rule.
    Literal(Rule),
}

/// How a held connection's dial ended.
pub enum Outcome {
    /// Answer the SYN and hand the connection to the handler.
    Connected {
        upstream: Box<dyn Upstream>,
        addr: SocketAddr,
        rule: Rule,
    },
    /// Reset the box's connection.
    Refused {
        decision: Decision,
        upstream: Option<SocketAddr>,
        end: String,
    },
    /// Leave the SYN unanswered.
    TimedOut {
        decision: Decision,
        upstream: Option<SocketAddr>,
    },
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Connected { addr, rule, .. } => f
                .debug_struct("Connected")
                .field("addr", addr)
                .field("rule", rule)
                .finish_non_exhaustive(),
            Outcome::Refused {
                decision,
                upstream,
                end,
            } => f
                .debug_struct("Refused")
                .field("decision", decision)
                .field("upstream", upstream)
                .field("end", end)
                .finish(),
            Outcome::TimedOut { decision, upstream } => f
                .debug_struct("TimedOut")
                .field("decision", decision)
                .field("upstream", upstream)
                .finish(),
        }
    }
}

/// Everything [`connect`] needs, cloned out of the event loop for one connection.
#[derive(Clone)]
pub struct Dial {
    pub policy: Arc<Policy>,
    pub host: Arc<[IpAddr]>,
    pub resolver: Arc<dyn Resolver>,
    pub dialer: Arc<dyn Dialer>,
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dial")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// The longest a held SYN waits for its resolution and dials together; past it the SYN is
/// left unanswered (a resolver or dialer that never answers does not hold a slot forever).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Judges and dials one held connection (a task of its own; the event loop gets the outcome).
/// For a name: the host-side answers are filtered by the policy of this moment
/// ([`Policy::judge_connect`]), and the addresses left are dialled in order until one takes it.
pub async fn connect(target: Target, dst: SocketAddrV4, dial: Dial) -> Outcome {
    let decision = Decision {
        verdict: "deny",
        rule: format!("no answer from the resolver and dialler within {CONNECT_TIMEOUT:?}"),
    };
    tokio::time::timeout(CONNECT_TIMEOUT, decide_and_dial(target, dst, dial))
        .await
        .unwrap_or(Outcome::TimedOut {
            decision,
            upstream: None,
        })
}

async fn decide_and_dial(target: Target, dst: SocketAddrV4, dial: Dial) -> Outcome {
    let (rule, addrs) = match target {
        Target::Literal(rule) => (rule, vec![IpAddr::V4(*dst.ip())]),
        Target::Name(name) => {
            let answers = match dial.resolver.resolve(&name).await {
                Ok(a) => a,
                Err(e) => {
                    return Outcome::Refused {
                        decision: Decision {
                            verdict: "deny",
                            rule: format!("{name} did not resolve on the host ({e})"),
                        },
                        upstream: None,
                        end: "refused".into(),
                    }
                }
            };
            match dial.policy.judge_connect(&name, &answers, &dial.host) {
                Ok(ok) => ok,
                Err(verdict) => {
                    return Outcome::Refused {
                        decision: Decision::from(&verdict),
                        upstream: None,
                        end: "refused".into(),
                    }
                }
            }
        }
    };
    let decision = Decision::from(&Verdict::Allow(rule.clone()));
    let mut last = None;
    for ip in addrs {
        let addr = SocketAddr::new(ip, dst.port());
        match dial.dialer.dial(addr).await {
            Ok(upstream) => {
                return Outcome::Connected {
                    upstream,
                    addr,
                    rule,
                }
            }
            Err(e) => last = Some((addr, e)),
        }
    }
    match last {
        Some((addr, e)) if e.kind() == io::ErrorKind::TimedOut => Outcome::TimedOut {
            decision,
            upstream: Some(addr),
        },
        Some((addr, e)) => Outcome::Refused {
            decision,
            upstream: Some(addr),
            end: format!("upstream refused ({e})"),
        },
        None => Outcome::Refused {
            decision,
            upstream: None,
            end: "nothing to dial".into(),
        },
    }
}

/// The event loop's side of an open connection: the pipe to the handler and its counters.
#[derive(Debug)]
pub struct Pipe {
    end: Option<DuplexStream>,
    /// The box's FIN was passed on (the pipe's write side is shut).
    shut: bool,
    /// The handler's EOF was passed on (a FIN was sent to the box).
    fin: bool,
    /// Bytes from the box to the handler, and back.
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// The box's connection was reset because the handler's side broke.
    pub reset: bool,
}

/// True once the box has sent its FIN (or the connection is gone).
fn box_finished(s: State) -> bool {
    matches!(
        s,
        State::CloseWait | State::LastAck | State::Closing | State::TimeWait | State::Closed
    )
}

impl Pipe {
    /// The pipe's two ends: the gateway keeps this one, the handler gets the other.
    pub fn new() -> (Pipe, DuplexStream) {
        let (a, b) = tokio::io::duplex(PIPE_BUFFER);
        (
            Pipe {
                end: Some(a),
                shut: false,
                fin: false,
                bytes_out: 0,
                bytes_in: 0,
                reset: false,
            },
            b,
        )
    }

    /// Lets go of the handler (it reads EOF and its writes fail).
    pub fn drop_end(&mut self) {
        self.end = None;
    }

    /// Moves what can move between the box's socket and the handler; true when anything
    /// did. Registers `cx` with the pipe when it is what blocks.
    pub fn pump(&mut self, sock: &mut tcp::Socket<'static>, cx: &mut Context<'_>) -> bool {
        let Some(end) = self.end.as_mut() else {
            return false;
        };
        let mut moved = false;
        // Box -> handler.
        while sock.can_recv() {
            let r = sock.recv(|data| match Pin::new(&mut *end).poll_write(cx, data) {
                Poll::Ready(Ok(n)) => (n, Ok(n)),
                Poll::Ready(Err(e)) => (0, Err(e)),
                Poll::Pending => (0, Ok(0)),
            });
            match r {
                Ok(Ok(0)) | Err(_) => break,
                Ok(Ok(n)) => {
                    self.bytes_out += n as u64;
                    moved = true;
                }
                Ok(Err(_)) => {
                    // The handler is gone while the box still sends: a reset, as a
                    // closed socket would answer.
                    sock.abort();
                    self.end = None;
                    self.reset = true;
                    return true;
                }
            }
        }
        if !self.shut
            && box_finished(sock.state())
            && sock.recv_queue() == 0
            && Pin::new(&mut *end).poll_shutdown(cx).is_ready()
        {
            self.shut = true;
            moved = true;
        }
        // Handler -> box.
        while !self.fin && sock.can_send() {
            let r = sock.send(|buf| {
                if buf.is_empty() {
                    return (0, Poll::Pending);
                }
                let mut rb = ReadBuf::new(buf);
                match Pin::new(&mut *end).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        (n, Poll::Ready(Ok(n)))
                    }
                    Poll::Ready(Err(e)) => (0, Poll::Ready(Err(e))),
                    Poll::Pending => (0, Poll::Pending),
                }
            });
            match r {
                Ok(Poll::Ready(Ok(0))) => {
                    sock.close();
                    self.fin = true;
                    moved = true;
                }
                Ok(Poll::Ready(Ok(n))) => {
                    self.bytes_in += n as u64;
                    moved = true;
                }
                Ok(Poll::Ready(Err(_))) => {
                    sock.abort();
                    self.end = None;
                    self.reset = true;
                    return true;
                }
                Ok(Poll::Pending) | Err(_) => break,
            }
        }
        moved
    }
}

/// True when the box's side of a connection is over (its socket can be dropped).
pub fn over(sock: &tcp::Socket<'static>) -> bool {
    matches!(sock.state(), State::Closed | State::TimeWait)
}
