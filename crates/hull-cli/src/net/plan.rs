//! From a request's gateway network to its running gateway: the [`Start`] a gateway process is
//! given, and the TAP handler a front end passes with the box (`hull_box::Handoff::tap`), which
//! starts the gateway on the box's TAP before the box's program runs and keeps it for the
//! caller (who ends it by dropping it once the box is done).

use std::net::SocketAddr;

use super::spawn::GatewayProcess;
use super::wire::{PolicySpec, Start};

/// Name servers the gateway resolves through instead of the host's `/etc/resolv.conf`
/// (comma-separated `ADDRESS:PORT`): for hosts whose resolver configuration the confined
/// gateway cannot use, and for tests, which point it at a loopback server of their own.
pub const DNS_ENV: &str = "HULL_NET_DNS";

/// `HULL_NET_DNS`'s name servers (none when unset).
pub fn dns_override() -> Result<Vec<SocketAddr>, String> {
    let Some(v) = std::env::var_os(DNS_ENV) else {
        return Ok(Vec::new());
    };
    let v = v.to_string_lossy();
    v.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim().parse::<SocketAddr>().map_err(|e| {
                format!("{DNS_ENV}: `{s}` is not ADDRESS:PORT ({e}), e.g. 127.0.0.1:53")
            })
        })
        .collect()
}

/// The gateway start of a request's gateway network.
pub fn start_of(g: &hull_api::network::Gateway) -> Result<Start, String> {
    Ok(Start {
        policy: policy_of(g),
        ports: g.ports().to_vec(),
        max_tcp_connections: usize::try_from(g.max_tcp_connections()).unwrap_or(usize::MAX),
        mtu: hull_box::tap::MTU as usize,
        dns: dns_override()?,
    })
}

/// The policy of a request's gateway network, as the gateway process takes it.
pub fn policy_of(g: &hull_api::network::Gateway) -> PolicySpec {
    PolicySpec {
        mode: g.mode().to_string(),
        allow_hosts: g.allow_hosts().to_vec(),
        allow_cidrs: g.allow_cidrs().to_vec(),
        deny_cidrs: g.deny_cidrs().to_vec(),
    }
}

/// A TAP handler that starts the gateway of `start` on the box's TAP, tells `ready` (which may
/// announce the published ports) and puts it in `slot` (with its log at `log`, appended to,
/// when given).
pub fn handler<'a>(
    start: &'a Start,
    log: Option<&'a std::path::Path>,
    slot: &'a mut Option<GatewayProcess>,
    mut ready: impl FnMut(&GatewayProcess) + 'a,
) -> impl FnMut(hull_box::Tap) -> std::io::Result<()> + 'a {
    move |tap: hull_box::Tap| {
        let log = match log {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
            None => None,
        };
        let g = GatewayProcess::start(tap.fd, start, log)
            .map_err(|e| std::io::Error::other(hull_api::Chain(&e).to_string()))?;
        ready(&g);
        *slot = Some(g);
        Ok(())
    }
}
