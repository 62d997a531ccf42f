//! `hull __net`: one box's gateway process, started ahead of its box. It reads its [`Start`]
//! (stdin's first line) and takes the box's TAP and its connection log (optional), which come
//! as descriptors on the socket at fd 3 once the box has made them; reads what it needs of
//! the host (the resolver's configuration, the host's own addresses); confines itself
//! ([`super::confine`]); then serves the box with `hull_net::Gateway` on a current-thread tokio
//! runtime, answers `ready` with the published ports, and takes [`Control`] lines until its
//! stdin ends (the supervisor is done with the box, or died): then it stops, and the box has
//! no network (the TAP goes with its last descriptor, ours).

use std::io::{BufRead, Write};
use std::sync::Arc;

use tokio::io::AsyncBufReadExt;

use super::wire::{Answer, Control, Start};

/// The socket the box's descriptors come on: one message, `T` and a flags byte, carrying the
/// TAP, then the log (with [`HANDOFF_LOG`]), then the CA's certificate and key files (with
/// [`HANDOFF_CA`]), all opened by the supervisor (the gateway is confined by then).
pub const HANDOFF_FD: i32 = 3;
/// The hand-off carries a connection log.
pub const HANDOFF_LOG: u8 = 1;
/// The hand-off carries the CA's certificate and key files.
pub const HANDOFF_CA: u8 = 2;

/// What the hand-off gave: the TAP, the log, the CA's (certificate, key).
type Handed = (
    std::os::fd::OwnedFd,
    Option<std::fs::File>,
    Option<(std::fs::File, std::fs::File)>,
);

/// Why the gateway could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("read the start line")]
    Read(#[source] std::io::Error),
    #[error("a malformed start line")]
    Parse(#[source] serde_json::Error),
    #[error("no TAP descriptor on the hand-off socket (fd {HANDOFF_FD})")]
    NoTap,
    #[error("receive the TAP")]
    Handoff(#[source] std::io::Error),
    #[error("the network policy")]
    Policy(#[source] hull_net::PolicyError),
    #[error("list the host's addresses")]
    HostAddrs(#[source] std::io::Error),
    #[error(transparent)]
    Resolver(#[from] hull_net::resolve::ResolverSetupError),
    #[error(transparent)]
    Confine(#[from] super::confine::ConfineError),
    #[error("start the event loop")]
    Runtime(#[source] std::io::Error),
    #[error("take the TAP")]
    Tap(#[source] std::io::Error),
    #[error("publish the box's port")]
    Publish(#[source] hull_net::PortError),
    #[error("credential brokering")]
    Brokering(#[from] super::brokering::BrokeringError),
    #[error("share the connection log")]
    Log(#[source] std::io::Error),
}

/// Writes one answer line to stdout.
fn answer(a: &Answer) {
    let mut out = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(a) {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The process's entry: its exit code.
pub fn main() -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            answer(&Answer::Error {
                message: hull_api::Chain(&e).to_string(),
            });
            1
        }
    }
}

/// The box's descriptors from the hand-off socket (see [`HANDOFF_FD`]); the socket is closed
/// after.
fn receive_fds() -> Result<Handed, StartError> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let sock = crate::sys::take_inherited_fd(HANDOFF_FD).ok_or(StartError::NoTap)?;
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut head = [0u8; 2];
    rustix::net::recvmsg(
        &sock,
        &mut [std::io::IoSliceMut::new(&mut head)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| StartError::Handoff(e.into()))?;
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(got) = msg {
            fds.extend(got);
        }
    }
    let flags = head[1];
    let mut fds = fds.into_iter();
    let tap = fds.next().ok_or(StartError::NoTap)?;
    let log = if flags & HANDOFF_LOG != 0 {
        fds.next().map(std::fs::File::from)
    } else {
        None
    };
    let ca = if flags & HANDOFF_CA != 0 {
        match (fds.next(), fds.next()) {
            (Some(c), Some(k)) => Some((std::fs::File::from(c), std::fs::File::from(k))),
            _ => None,
        }
    } else {
        None
    };
    Ok((tap, log, ca))
}

fn serve() -> Result<(), StartError> {
    // Started ahead of its box, the gateway reads what it needs of the host and confines
    // itself while the box is built; its start line and the box's descriptors come after, and
    // it opens no path from then on (the CA's files are handed over open).
    let host_addrs = crate::sys::host_addrs().map_err(StartError::HostAddrs)?;
    let system_resolver = hull_net::resolve::HostResolver::from_system();
    let host_bundles = super::brokering::host_bundles();
    super::confine::confine()?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(StartError::Read)?;
    let start: Start = serde_json::from_str(&line).map_err(StartError::Parse)?;
    let policy = start.policy.policy().map_err(StartError::Policy)?;
    let (tap, log, ca) = receive_fds()?;
    let resolver = if start.dns.is_empty() {
        system_resolver?
    } else {
        hull_net::resolve::HostResolver::with_servers(&start.dns)
    };
    let broker_log = match &log {
        Some(f) => Some(f.try_clone().map_err(StartError::Log)?),
        None => None,
    };
    let broker = super::brokering::broker_of(&start, broker_log, ca, host_bundles)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    rt.block_on(run(start, policy, tap, log, host_addrs, resolver, broker))
}

async fn run(
    start: Start,
    policy: hull_net::Policy,
    tap: std::os::fd::OwnedFd,
    log: Option<std::fs::File>,
    host_addrs: Vec<std::net::IpAddr>,
    resolver: hull_net::resolve::HostResolver,
    broker: Option<hull_net::broker::Broker>,
) -> Result<(), StartError> {
    let link = hull_net::TapLink::new(tap, start.mtu).map_err(StartError::Tap)?;
    let sink: Box<dyn hull_net::LogSink> = match log {
        Some(f) => Box::new(hull_net::log::Lines(f)),
        None => Box::new(hull_net::log::Lines(std::io::sink())),
    };
    let cfg = hull_net::Config {
        identity: identity(),
        host_addrs,
        max_tcp_connections: start.max_tcp_connections,
        ..hull_net::Config::default()
    };
    let dialer: Arc<dyn hull_net::Dialer> = match &start.proxy {
        Some(p) => Arc::new(hull_net::proxy::ProxyDialer::new(hull_net::proxy::Proxy {
            addr: p.addr,
            credentials: p.credentials.clone(),
            direct: p
                .direct
                .iter()
                .filter_map(|d| hull_net::proxy::direct_entry(d))
                .collect(),
        })),
        None => Arc::new(hull_net::TcpDialer::default()),
    };
    let gateway = hull_net::Gateway::new(Box::new(link), policy, Arc::new(resolver), dialer, sink)
        .with_config(cfg);
    let brokering = broker.map(|b| Arc::new(super::brokering::Brokering::new(b)));
    let gateway = match &brokering {
        Some(b) => gateway.with_handler(Arc::clone(b) as Arc<dyn hull_net::flow::FlowHandler>),
        None => gateway,
    };
    let handle = gateway.handle();
    let running = tokio::spawn(gateway.run());
    let mut ports = Vec::new();
    for p in &start.ports {
        let host = handle.publish(*p).await.map_err(StartError::Publish)?;
        ports.push((*p, host));
    }
    answer(&Answer::Ready { ports });
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        answer(&control(&handle, brokering.as_deref(), &line).await);
    }
    handle.stop();
    let _ = running.await;
    Ok(())
}

/// Who the box is on its link: hull-box's TAP is made with this MAC and address.
fn identity() -> hull_net::ingress::Identity {
    hull_net::ingress::Identity {
        mac: hull_net::stack::BOX_MAC,
        ip: hull_box::tap::BOX_ADDR,
    }
}

/// Does one control request.
async fn control(
    handle: &hull_net::Handle,
    brokering: Option<&super::brokering::Brokering>,
    line: &str,
) -> Answer {
    let req: Control = match serde_json::from_str(line) {
        Ok(r) => r,
        Err(e) => {
            return Answer::Error {
                message: format!("a malformed control line: {e}"),
            }
        }
    };
    match req {
        Control::SetPolicy { policy } => match policy.policy() {
            Ok(p) => {
                handle.set_policy(p);
                Answer::Ok { value: None }
            }
            Err(e) => Answer::Error {
                message: hull_api::Chain(&e).to_string(),
            },
        },
        Control::Publish { port } => match handle.publish(port).await {
            Ok(host) => Answer::Ok {
                value: Some(host.into()),
            },
            Err(e) => Answer::Error {
                message: hull_api::Chain(&e).to_string(),
            },
        },
        Control::Withdraw { port } => Answer::Ok {
            value: Some(handle.withdraw(port).await.into()),
        },
        Control::SetTransformations { transformations } => match brokering {
            None => Answer::Error {
                message: "this box's gateway was started without credential brokering; create the sandbox with brokering to change its request transformations".into(),
            },
            Some(b) => match b.set_transformations(transformations.0) {
                Ok(()) => Answer::Ok { value: None },
                Err(e) => Answer::Error {
                    message: hull_api::Chain(&e).to_string(),
                },
            },
        },
    }
}

#[cfg(test)]
mod tests {
    /// The box's side (hull-box makes the TAP) and the gateway's (hull-net serves it) agree on
    /// the link's addresses.
    #[test]
    fn the_box_and_its_gateway_agree_on_the_link() {
        assert_eq!(hull_box::tap::BOX_ADDR, hull_net::ingress::BOX);
        assert_eq!(hull_box::tap::GATEWAY_ADDR, hull_net::ingress::GATEWAY);
        assert_eq!(hull_box::tap::BOX_MAC, hull_net::stack::BOX_MAC.0);
        assert_eq!(super::identity().ip, hull_net::ingress::BOX);
    }
}
