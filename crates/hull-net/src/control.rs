//! What a caller sets and controls of one box's gateway: its [`Config`] (the box's identity,
//! the host's own addresses, the connection cap, the synthetic pool's size) and its [`Handle`]
//! (replace the policy, publish or withdraw a port, stop), whose requests the gateway's event
//! loop reads between turns.

use std::net::IpAddr;

use tokio::sync::{mpsc, oneshot};

use crate::ingress::{Identity, BOX};
use crate::policy::Policy;
use crate::ports::PortError;
use crate::stack::BOX_MAC;

/// The default cap on a box's live connections (held SYNs, open and published-port ones).
pub const MAX_TCP_CONNECTIONS: usize = 1024;

/// A gateway's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The box's MAC and address on the link (frames from anything else are dropped).
    pub identity: Identity,
    /// The host's own interface addresses (always denied unless an allowed CIDR names them).
    pub host_addrs: Vec<IpAddr>,
    /// Live connections at most; past it a SYN is reset and logged.
    pub max_tcp_connections: usize,
    /// Names holding a synthetic address at most.
    pub pool_capacity: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            identity: Identity {
                mac: BOX_MAC,
                ip: BOX,
            },
            host_addrs: Vec::new(),
            max_tcp_connections: MAX_TCP_CONNECTIONS,
            pool_capacity: 64 * 1024,
        }
    }
}

/// What a [`Handle`] asks of the running gateway.
#[derive(Debug)]
pub(crate) enum Control {
    /// The new policy, and whether open connections it no longer allows are reset.
    SetPolicy(Policy, bool),
    Publish(u16, oneshot::Sender<Result<u16, PortError>>),
    Withdraw(u16, oneshot::Sender<bool>),
    Stop,
}

/// Controls a running gateway; cheap to clone. Dropping every handle stops nothing.
#[derive(Debug, Clone)]
pub struct Handle {
    tx: mpsc::UnboundedSender<Control>,
}

impl Handle {
    /// A handle and the receiver its gateway reads.
    pub(crate) fn new() -> (Handle, mpsc::UnboundedReceiver<Control>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Handle { tx }, rx)
    }

    /// Replaces the policy: every connection and DNS query from now on is judged by it (open
    /// connections stay open).
    pub fn set_policy(&self, policy: Policy) {
        let _ = self.tx.send(Control::SetPolicy(policy, false));
    }

    /// Replaces the policy as [`Handle::set_policy`] does, and resets every open connection
    /// the new policy would refuse now (its name or literal judged again; a name's dialled
    /// address through the CIDR rules and classes), logging each with the rule.
    pub fn set_policy_resetting(&self, policy: Policy) {
        let _ = self.tx.send(Control::SetPolicy(policy, true));
    }

    /// Publishes the box's TCP `port` on `127.0.0.1:<free port>` of the host, returning it.
    pub async fn publish(&self, port: u16) -> Result<u16, PortError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Control::Publish(port, tx))
            .map_err(|_| PortError::Stopped)?;
        rx.await.map_err(|_| PortError::Stopped)?
    }

    /// Withdraws a published port (its listener closes; open connections stay); false when
    /// it was not published.
    pub async fn withdraw(&self, port: u16) -> bool {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Control::Withdraw(port, tx)).is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }

    /// Stops the gateway: `Gateway::run` returns, every connection of the box ends.
    pub fn stop(&self) {
        let _ = self.tx.send(Control::Stop);
    }
}
