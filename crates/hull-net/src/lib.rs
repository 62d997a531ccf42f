//! hull-net: the sandbox network. Two layers. The decisions, pure functions testable without
//! a packet: which names a box may resolve ([`name`], [`policy`]), which addresses are never
//! reachable unless named ([`class`]), the verdict with the rule that decided it, the DNS
//! answers ([`dns`], with the synthetic addresses of [`synth`]), the first look at a box's
//! frames ([`ingress`]) and the connection log's records ([`log`]). And the gateway's data
//! path that applies them to one box: its [`link`], its TCP/IP [`stack`], connect-first
//! connections ([`flow`], dialled through [`upstream`], or the host's HTTP proxy: [`proxy`]),
//! its DNS service ([`dnsd`]), published
//! [`ports`], and the event loop that owns them ([`gateway`], set and steered through
//! [`control`]), within the rates of [`limit`]. It forks nothing and needs no namespace: the gateway
//! runs on any link, in-memory ones in tests (see `ARCHITECTURE.md` and `docs/network.md`).
//!
//! The credential broker is async and does I/O on the connections it is handed: [`broker`]
//! (intercepting a connection), with [`ca`] and [`tls`] for its TLS ends, [`secret`],
//! [`rules`] and [`rewrite`] for requests, [`scrub`] for responses and [`reqlog`] for its log.

pub mod broker;
pub mod ca;
pub mod class;
pub mod control;
pub mod dns;
pub mod dnsd;
pub mod flow;
pub mod gateway;
pub mod ingress;
pub mod limit;
pub mod link;
pub mod log;
pub mod name;
pub mod policy;
pub mod ports;
pub mod proxy;
pub mod reqlog;
pub mod resolve;
pub mod rewrite;
pub mod rules;
pub mod scrub;
pub mod secret;
pub mod stack;
pub mod synth;
mod sys;
pub mod tls;
pub mod upstream;

pub use class::Class;
pub use control::{Config, Handle};
pub use flow::{FlowHandler, FlowMeta, Splice};
pub use gateway::{Gateway, GatewayError};
pub use link::{Link, MemLink, TapLink};
pub use log::{LogSink, Record};
pub use name::{HostPattern, Name, NameError};
pub use policy::{Mode, Policy, PolicyError, Rule, Verdict};
pub use ports::PortError;
pub use upstream::{Dialer, Resolver, SystemResolver, TcpDialer, Upstream};
