//! The sandbox network's process side: a box with a gateway network (`--network deny-all`,
//! `allow-all` or `custom`) gets a TAP in its own network namespace (hull-box), whose other end
//! is served by a gateway process of its own, `hull __net` ([`gateway`]), which confines itself
//! ([`confine`]) before it reads a frame. The supervisor starts and controls it ([`spawn`]) over
//! JSON lines ([`wire`]). The policy, the userspace TCP/IP stack and the flows are hull-net's.

pub mod backend;
pub mod brokering;
pub mod bundles;
pub mod confine;
pub mod gateway;
pub mod plan;
pub mod proxy_env;
pub mod spawn;
pub mod wire;
