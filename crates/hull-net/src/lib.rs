//! hull-net: the sandbox network. This crate holds the decisions the gateway makes, as pure
//! functions testable without a packet: which names a box may resolve ([`name`], [`policy`]),
//! which addresses are never reachable unless named ([`class`]), the verdict with the rule
//! that decided it, for the connection log, and the DNS answers built from them ([`dns`],
//! with the synthetic addresses of [`synth`]), and the first look at a box's frames
//! ([`ingress`]), and the connection log's records ([`log`]). It forks nothing, opens nothing and needs no
//! namespace (see `ARCHITECTURE.md` and `docs/network.md` for the gateway built on it).
//!
//! The credential broker is async and does I/O on the connections it is handed: [`broker`]
//! (intercepting a connection), with [`ca`] and [`tls`] for its TLS ends, [`secret`],
//! [`rules`] and [`rewrite`] for requests, [`scrub`] for responses and [`reqlog`] for its log.

pub mod broker;
pub mod ca;
pub mod class;
pub mod dns;
pub mod ingress;
pub mod log;
pub mod name;
pub mod policy;
pub mod reqlog;
pub mod rewrite;
pub mod rules;
pub mod scrub;
pub mod secret;
pub mod synth;
pub mod tls;

pub use class::Class;
pub use name::{HostPattern, Name, NameError};
pub use policy::{Mode, Policy, PolicyError, Rule, Verdict};
