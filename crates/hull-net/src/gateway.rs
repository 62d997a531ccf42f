//! One box's gateway: the event loop that owns the box's [`Link`], its [`Stack`], its
//! synthetic [`Pool`] and its connections, on the task that runs [`Gateway::run`] (a tokio
//! current-thread runtime; dials and handlers are tasks on the same thread, so no frame or
//! byte crosses a thread). Each turn: control messages, then the link's frames (each through
//! [`ingress::classify`] before smoltcp sees it), then finished dials, then smoltcp, then the
//! connections' bytes, then the frames out; then it sleeps until the link, a pipe, a dial, a
//! published port, a control message or smoltcp's next timer wakes it.
//!
//! A caller builds one with [`Gateway::new`] (link, policy, resolver, dialer, log sink),
//! optionally [`Gateway::with_handler`] and [`Gateway::with_config`] ([`Config`]), keeps its
//! [`Handle`] (replace the policy, publish or withdraw a port, stop: `control.rs`) and awaits
//! [`Gateway::run`].

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use smoltcp::iface::SocketHandle;
use tokio::sync::mpsc;

use crate::control::{Config, Control, Handle};
use crate::dnsd::{self, TcpDns};
use crate::flow::{self, Dial, FlowHandler, FlowMeta, Outcome, Pipe, Splice, Target};
use crate::ingress::{self, Ingress};
use crate::link::Link;
use crate::log::{now_ms, Decision, LogSink, Record};
use crate::name::Name;
use crate::policy::Policy;
use crate::ports::Ports;
use crate::stack::{self, Stack, Syn};
use crate::synth::Pool;
use crate::upstream::{Dialer, Resolver};

/// Frames read from the link in one go before the rest of a turn runs.
const FRAMES_PER_TURN: usize = 256;
/// Turns run back to back before the loop yields to the runtime's other tasks.
const TURNS_BEFORE_YIELD: usize = 64;

/// Why a gateway stopped other than by [`Handle::stop`].
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("reading the box's link failed")]
    Link(#[source] io::Error),
}

enum State {
    /// The SYN, held until the dial ends.
    Held(Vec<u8>),
    Open {
        socket: SocketHandle,
        pipe: Pipe,
    },
    /// A DNS connection the gateway answers itself.
    Dns {
        socket: SocketHandle,
        dns: TcpDns,
    },
}

struct Flow {
    /// The box's SYN's endpoints (outbound), or the box's port and the gateway's (inbound).
    syn: Syn,
    name: Option<Name>,
    inbound: bool,
    started: std::time::Instant,
    decision: Decision,
    upstream: Option<SocketAddr>,
    state: State,
    /// Why the gateway ended it, when it did (the log's `end`; else `closed`).
    ended: Option<String>,
}

/// Both ends of a channel from a connection's task back to the loop, keyed by connection.
type Channel<T> = (
    mpsc::UnboundedSender<(u64, T)>,
    mpsc::UnboundedReceiver<(u64, T)>,
);

/// One box's gateway (see the module comment).
pub struct Gateway {
    cfg: Config,
    link: Box<dyn Link>,
    stack: Stack,
    pool: Pool,
    policy: Arc<Policy>,
    host: Arc<[IpAddr]>,
    resolver: Arc<dyn Resolver>,
    dialer: Arc<dyn Dialer>,
    handler: Arc<dyn FlowHandler>,
    log: Box<dyn LogSink>,
    /// The box's DNS rate ([`crate::limit`]).
    dns_budget: crate::limit::Bucket,
    flows: HashMap<u64, Flow>,
    by_syn: HashMap<Syn, u64>,
    next_id: u64,
    ports: Ports,
    control: mpsc::UnboundedReceiver<Control>,
    handle: Handle,
    dialed: Channel<Outcome>,
    handled: Channel<io::Result<()>>,
    /// The reply frames of forwarded DNS queries (keyed 0), from their tasks.
    forwarded: Channel<Vec<u8>>,
    /// smoltcp's next deadline (made on the first one: no runtime is needed to build a gateway).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    outbox: std::collections::VecDeque<Vec<u8>>,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("cfg", &self.cfg)
            .field("flows", &self.flows.len())
            .finish_non_exhaustive()
    }
}

/// How long the host's resolver has for a forwarded query (the box's resolver retries sooner).
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Frames waiting for a link that cannot take them, at most (past it they are dropped, as
/// a full device queue drops them; TCP resends).
const OUTBOX: usize = 4096;

impl Gateway {
    /// A gateway for the box behind `link` (built anywhere; run inside a tokio runtime),
    /// judging by `policy`, resolving and dialling through `resolver` and `dialer`, logging to
    /// `log`; connections are spliced ([`Splice`]) unless [`Gateway::with_handler`] says
    /// otherwise.
    pub fn new(
        link: Box<dyn Link>,
        policy: Policy,
        resolver: Arc<dyn Resolver>,
        dialer: Arc<dyn Dialer>,
        log: Box<dyn LogSink>,
    ) -> Gateway {
        let cfg = Config::default();
        let (handle, control) = Handle::new();
        let max_frame = link.max_frame();
        Gateway {
            stack: Stack::new(max_frame),
            pool: Pool::new(cfg.pool_capacity),
            host: cfg.host_addrs.clone().into(),
            cfg,
            link,
            policy: Arc::new(policy),
            resolver,
            dialer,
            handler: Arc::new(Splice),
            // Every record, the DNS answers' and the connections', within the log's rate.
            log: Box::new(crate::log::Limited::new(
                log,
                crate::limit::LOG_PER_S,
                crate::limit::LOG_BURST,
            )),
            dns_budget: crate::limit::Bucket::new(
                crate::limit::DNS_PER_S,
                crate::limit::DNS_BURST,
                std::time::Instant::now(),
            ),
            flows: HashMap::new(),
            by_syn: HashMap::new(),
            next_id: 1,
            ports: Ports::default(),
            control,
            handle,
            dialed: mpsc::unbounded_channel(),
            handled: mpsc::unbounded_channel(),
            forwarded: mpsc::unbounded_channel(),
            timer: None,
            outbox: std::collections::VecDeque::new(),
            buf: vec![0; max_frame.max(1514)],
        }
    }

    pub fn with_handler(mut self, handler: Arc<dyn FlowHandler>) -> Gateway {
        self.handler = handler;
        self
    }

    pub fn with_config(mut self, cfg: Config) -> Gateway {
        self.pool = Pool::new(cfg.pool_capacity);
        self.host = cfg.host_addrs.clone().into();
        self.cfg = cfg;
        self
    }

    /// The handle that controls this gateway once it runs.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Runs until [`Handle::stop`] or the link is gone (`Ok`), or the link fails.
    pub async fn run(mut self) -> Result<(), GatewayError> {
        std::future::poll_fn(|cx| self.turns(cx)).await
    }

    fn turns(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        for _ in 0..TURNS_BEFORE_YIELD {
            match self.turn(cx) {
                Poll::Ready(Some(r)) => return Poll::Ready(r),
                Poll::Ready(None) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// One turn: `Ready(Some)` to stop, `Ready(None)` when something moved (go again),
    /// `Pending` when everything waits with `cx` registered.
    fn turn(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(), GatewayError>>> {
        let mut busy = false;
        while let Poll::Ready(msg) = self.control.poll_recv(cx) {
            match msg {
                // The gateway holds a sender itself, so None never comes; Stop does.
                None | Some(Control::Stop) => return Poll::Ready(Some(Ok(()))),
                Some(c) => self.control(c),
            }
            busy = true;
        }
        for _ in 0..FRAMES_PER_TURN {
            match self.link.poll_recv(cx, &mut self.buf) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Some(Ok(()))),
                Poll::Ready(Ok(n)) => {
                    let frame = self.buf[..n].to_vec();
                    self.frame(frame);
                    busy = true;
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(GatewayError::Link(e)))),
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some((id, outcome))) = self.dialed.1.poll_recv(cx) {
            self.settle(id, outcome);
            busy = true;
        }
        while let Poll::Ready(Some((_, reply))) = self.forwarded.1.poll_recv(cx) {
            self.stack.push_output(reply);
            busy = true;
        }
        while let Poll::Ready(Some((id, result))) = self.handled.1.poll_recv(cx) {
            if let (Err(e), Some(f)) = (result, self.flows.get_mut(&id)) {
                if let State::Open { socket, .. } = &f.state {
                    self.stack.tcp(*socket).abort();
                    f.ended = Some(format!("reset (the handler failed: {e})"));
                }
            }
            busy = true;
        }
        while let Poll::Ready((port, stream, peer)) = self.ports.poll_accept(cx) {
            self.inbound(port, stream, peer);
            busy = true;
        }
        self.stack.poll();
        if self.pump(cx) {
            busy = true;
            self.stack.poll();
        }
        self.reap();
        self.flush(cx);
        if busy {
            return Poll::Ready(None);
        }
        if let Some(d) = self.stack.poll_delay() {
            let at =
                tokio::time::Instant::now() + std::time::Duration::from_micros(d.total_micros());
            let timer = self
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            timer.as_mut().reset(at);
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
        }
        Poll::Pending
    }

    fn control(&mut self, c: Control) {
        match c {
            Control::SetPolicy(p, reset) => {
                self.policy = Arc::new(p);
                if reset {
                    self.revoke();
                }
            }
            Control::Publish(port, reply) => {
                let _ = reply.send(self.ports.publish(port));
            }
            Control::Withdraw(port, reply) => {
                let _ = reply.send(self.ports.withdraw(port));
            }
            Control::Stop => {}
        }
    }

    /// Resets the open outbound connections the current policy refuses.
    fn revoke(&mut self) {
        for f in self.flows.values_mut() {
            let (State::Open { socket, .. }, false) = (&f.state, f.inbound) else {
                continue;
            };
            let verdict = match (&f.name, f.upstream) {
                (Some(name), Some(up)) => {
                    match self.policy.judge_connect(name, &[up.ip()], &self.host) {
                        Ok(_) => continue,
                        Err(v) => v,
                    }
                }
                _ => self
                    .policy
                    .judge_literal(IpAddr::V4(*f.syn.dst.ip()), &self.host),
            };
            if verdict.allowed() {
                continue;
            }
            self.stack.tcp(*socket).abort();
            f.ended = Some(format!(
                "reset (the policy was replaced: {})",
                verdict.rule()
            ));
        }
    }

    fn frame(&mut self, frame: Vec<u8>) {
        let verdict = ingress::classify(
            &frame,
            &self.cfg.identity,
            &self.policy,
            &self.pool,
            &self.host,
        );
        match verdict {
            Ingress::Stack => self.stack.input(frame),
            Ingress::Dns => self.dns_udp(&frame),
            Ingress::DnsTcp => self.open_dns(frame),
            Ingress::ConnectName { name, .. } => self.open(frame, Target::Name(name)),
            Ingress::ConnectLiteral { rule, .. } => self.open(frame, Target::Literal(rule)),
            Ingress::Reset(r) => self.refuse(&frame, None, Decision::from(&r), "refused"),
            Ingress::Drop(_) => {}
        }
    }

    /// Resets a SYN and logs the refusal.
    fn refuse(&mut self, syn_frame: &[u8], name: Option<Name>, decision: Decision, end: &str) {
        if let Some(rst) = stack::reset_for(syn_frame) {
            self.stack.push_output(rst);
        }
        if let Some(syn) = Syn::parse(syn_frame) {
            self.log.write(&Record::Flow {
                at_ms: now_ms(),
                proto: "tcp",
                name: name.map(|n| n.to_string()),
                dst: syn.dst.into(),
                upstream: None,
                decision,
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 0,
                end: end.into(),
            });
        }
    }

    fn dns_udp(&mut self, frame: &[u8]) {
        let Some((_, _, query)) = stack::udp_payload(frame) else {
            return;
        };
        let reply = dnsd::respond_udp(
            query,
            &self.policy,
            &mut self.pool,
            &mut self.dns_budget,
            &mut *self.log,
        );
        match reply {
            None => {}
            Some(dnsd::Reply::Now(reply)) => {
                if let Some(f) = stack::udp_reply(frame, &reply) {
                    self.stack.push_output(f);
                }
            }
            Some(dnsd::Reply::Forward { name, record_type }) => {
                // Off the event loop: the host's answer comes back as a frame to send.
                let resolver = self.resolver.clone();
                let tx = self.forwarded.0.clone();
                let (frame, query) = (frame.to_vec(), query.to_vec());
                tokio::spawn(async move {
                    let found = match tokio::time::timeout(
                        FORWARD_TIMEOUT,
                        resolver.records(&name, record_type),
                    )
                    .await
                    {
                        Ok(r) => r,
                        Err(_) => Err(io::ErrorKind::TimedOut.into()),
                    };
                    let reply = crate::dns::forwarded(&query, &found)
                        .and_then(|r| stack::udp_reply(&frame, &r));
                    if let Some(f) = reply {
                        let _ = tx.send((0, f));
                    }
                });
            }
        }
    }

    /// True (and the SYN reset and logged) when the box has as many connections as it may.
    fn at_cap(&mut self, frame: &[u8], name: Option<Name>) -> bool {
        if self.flows.len() < self.cfg.max_tcp_connections {
            return false;
        }
        let decision = Decision {
            verdict: "deny",
            rule: format!(
                "connection cap ({} live connections)",
                self.cfg.max_tcp_connections
            ),
        };
        self.refuse(frame, name, decision, "cap");
        true
    }

    /// A DNS connection over TCP: the gateway answers it itself, at once.
    fn open_dns(&mut self, frame: Vec<u8>) {
        let Some(syn) = Syn::parse(&frame) else {
            return;
        };
        if self.by_syn.contains_key(&syn) {
            self.stack.input(frame);
            return;
        }
        if self.at_cap(&frame, None) {
            return;
        }
        let Ok(socket) = self.stack.accept_held(frame.clone(), syn) else {
            if let Some(rst) = stack::reset_for(&frame) {
                self.stack.push_output(rst);
            }
            return;
        };
        let id = self.next_id;
        self.next_id += 1;
        self.by_syn.insert(syn, id);
        self.flows.insert(
            id,
            Flow {
                syn,
                name: None,
                inbound: false,
                started: std::time::Instant::now(),
                decision: Decision {
                    verdict: "allow",
                    rule: "DNS to the gateway".into(),
                },
                upstream: None,
                state: State::Dns {
                    socket,
                    dns: TcpDns::default(),
                },
                ended: None,
            },
        );
    }

    /// A SYN opening a connection: held while its destination is judged and dialled.
    fn open(&mut self, frame: Vec<u8>, target: Target) {
        let Some(syn) = Syn::parse(&frame) else {
            return;
        };
        if let Some(id) = self.by_syn.get(&syn) {
            // A retransmitted SYN: still dialling (wait), or answered (the socket has it).
            if let Some(Flow {
                state: State::Open { .. } | State::Dns { .. },
                ..
            }) = self.flows.get(id)
            {
                self.stack.input(frame);
            }
            return;
        }
        let name = match &target {
            Target::Name(n) => Some(n.clone()),
            Target::Literal(_) => None,
        };
        if self.at_cap(&frame, name.clone()) {
            return;
        }
        if name.is_some() {
            self.pool.hold(*syn.dst.ip());
        }
        let id = self.next_id;
        self.next_id += 1;
        self.by_syn.insert(syn, id);
        self.flows.insert(
            id,
            Flow {
                syn,
                name,
                inbound: false,
                started: std::time::Instant::now(),
                decision: Decision {
                    verdict: "deny",
                    rule: "undecided".into(),
                },
                upstream: None,
                state: State::Held(frame),
                ended: None,
            },
        );
        let dial = Dial {
            policy: self.policy.clone(),
            host: self.host.clone(),
            resolver: self.resolver.clone(),
            dialer: self.dialer.clone(),
        };
        let tx = self.dialed.0.clone();
        tokio::spawn(async move {
            let outcome = flow::connect(target, syn.dst, dial).await;
            let _ = tx.send((id, outcome));
        });
    }

    /// A dial ended: answer the held SYN.
    fn settle(&mut self, id: u64, outcome: Outcome) {
        let Some(mut f) = self.flows.remove(&id) else {
            return;
        };
        let State::Held(frame) = std::mem::replace(&mut f.state, State::Held(Vec::new())) else {
            self.flows.insert(id, f);
            return;
        };
        match outcome {
            Outcome::Connected {
                upstream,
                addr,
                rule,
            } => {
                f.decision = Decision::from(&crate::Verdict::Allow(rule.clone()));
                f.upstream = Some(addr);
                match self.stack.accept_held(frame.clone(), f.syn) {
                    Ok(socket) => {
                        let (pipe, box_side) = Pipe::new();
                        let meta = FlowMeta {
                            id,
                            src: f.syn.src,
                            dst: f.syn.dst,
                            name: f.name.clone(),
                            upstream: addr,
                            rule,
                        };
                        let task = self.handler.handle(box_side, upstream, meta);
                        let tx = self.handled.0.clone();
                        tokio::spawn(async move {
                            let r = task.await;
                            let _ = tx.send((id, r));
                        });
                        f.state = State::Open { socket, pipe };
                        self.flows.insert(id, f);
                    }
                    Err(e) => {
                        let decision = Decision {
                            verdict: "deny",
                            rule: e.to_string(),
                        };
                        self.end(f);
                        self.refuse(&frame, None, decision, "refused");
                    }
                }
            }
            Outcome::Refused {
                decision,
                upstream,
                end,
            } => {
                f.decision = decision;
                f.upstream = upstream;
                if let Some(rst) = stack::reset_for(&frame) {
                    self.stack.push_output(rst);
                }
                self.log_end(&f, 0, 0, &end);
                self.end(f);
            }
            Outcome::TimedOut { decision, upstream } => {
                f.decision = decision;
                f.upstream = upstream;
                self.log_end(&f, 0, 0, "upstream timed out");
                self.end(f);
            }
        }
    }

    /// Forgets a flow that was already taken out of `flows`.
    fn end(&mut self, f: Flow) {
        if f.inbound {
            return;
        }
        self.by_syn.remove(&f.syn);
        if f.name.is_some() {
            self.pool.release(*f.syn.dst.ip());
        }
    }

    fn log_end(&mut self, f: &Flow, bytes_out: u64, bytes_in: u64, end: &str) {
        self.log.write(&Record::Flow {
            at_ms: now_ms(),
            proto: "tcp",
            name: f.name.as_ref().map(|n| n.to_string()),
            dst: if f.inbound { f.syn.src } else { f.syn.dst }.into(),
            upstream: f.upstream,
            decision: f.decision.clone(),
            bytes_out,
            bytes_in,
            duration_ms: u64::try_from(f.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            end: end.into(),
        });
    }

    fn pump(&mut self, cx: &mut Context<'_>) -> bool {
        let mut moved = false;
        for f in self.flows.values_mut() {
            match &mut f.state {
                State::Open { socket, pipe } => moved |= pipe.pump(self.stack.tcp(*socket), cx),
                State::Dns { socket, dns } => {
                    let sock = self.stack.tcp(*socket);
                    moved |= dns.pump(
                        sock,
                        &self.policy,
                        &mut self.pool,
                        &mut self.dns_budget,
                        &mut *self.log,
                    );
                }
                State::Held(_) => {}
            }
        }
        moved
    }

    /// Drops the connections whose box side is over, logging each.
    fn reap(&mut self) {
        self.stack.sweep();
        let done: Vec<u64> = self
            .flows
            .iter_mut()
            .filter_map(|(id, f)| match &f.state {
                State::Open { socket, .. } | State::Dns { socket, .. }
                    if flow::over(self.stack.tcp(*socket)) =>
                {
                    Some(*id)
                }
                _ => None,
            })
            .collect();
        for id in done {
            let Some(f) = self.flows.remove(&id) else {
                continue;
            };
            let (socket, o, i, reset) = match &f.state {
                State::Open { socket, pipe } => {
                    (*socket, pipe.bytes_out, pipe.bytes_in, pipe.reset)
                }
                State::Dns { socket, dns } => (*socket, dns.bytes_out, dns.bytes_in, false),
                State::Held(_) => continue,
            };
            self.stack.retire(socket);
            let end = match (&f.ended, reset) {
                (Some(e), _) => e.clone(),
                (None, true) => "reset (the handler's side closed)".into(),
                (None, false) => "closed".into(),
            };
            self.log_end(&f, o, i, &end);
            self.end(f);
        }
    }

    fn flush(&mut self, cx: &mut Context<'_>) {
        while let Some(f) = self.stack.output() {
            if self.outbox.len() < OUTBOX {
                self.outbox.push_back(f);
            }
        }
        while let Some(f) = self.outbox.front() {
            match self.link.poll_send(cx, f) {
                // A frame the link refused is lost, as on a wire; TCP resends.
                Poll::Ready(_) => {
                    self.outbox.pop_front();
                }
                Poll::Pending => break,
            }
        }
    }

    /// A host connection to a published port: a connection from the gateway into the box.
    fn inbound(&mut self, port: u16, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let to = SocketAddrV4::new(self.cfg.identity.ip, port);
        if self.flows.len() >= self.cfg.max_tcp_connections {
            self.log.write(&Record::Flow {
                at_ms: now_ms(),
                proto: "tcp",
                name: None,
                dst: to.into(),
                upstream: Some(peer),
                decision: Decision {
                    verdict: "deny",
                    rule: format!(
                        "connection cap ({} live connections)",
                        self.cfg.max_tcp_connections
                    ),
                },
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 0,
                end: "cap".into(),
            });
            return;
        }
        let local = self.ports.local_port();
        let Some(socket) = self.stack.connect(to, local) else {
            return;
        };
        let (pipe, box_side) = Pipe::new();
        let id = self.next_id;
        self.next_id += 1;
        tokio::spawn(async move {
            let (mut a, mut b) = (box_side, stream);
            let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
        });
        self.flows.insert(
            id,
            Flow {
                syn: Syn {
                    src: to,
                    dst: SocketAddrV4::new(ingress::GATEWAY, local),
                },
                name: None,
                inbound: true,
                started: std::time::Instant::now(),
                decision: Decision {
                    verdict: "allow",
                    rule: format!("published port {port}"),
                },
                upstream: Some(peer),
                state: State::Open { socket, pipe },
                ended: None,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::MemLink;
    use crate::upstream::{SystemResolver, TcpDialer};

    #[test]
    fn a_gateway_is_built_outside_a_runtime_and_stops_when_told() {
        let (link, _box_end) = MemLink::pair(1514);
        let gw = Gateway::new(
            Box::new(link),
            Policy::deny_all(),
            Arc::new(SystemResolver),
            Arc::new(TcpDialer::default()),
            Box::new(crate::log::Lines(std::io::sink())),
        );
        let handle = gw.handle();
        handle.stop();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(gw.run()).unwrap();
    }
}
