//! hull-api: what a caller asks of hull, as data.
//!
//! Every front end (`hull run`'s flags, `hull serve`'s JSON lines and so the Python and Node
//! SDKs, `hull mcp`'s settings) turns what its caller wrote into one of these requests once;
//! the Sandbox layer (`crates/hull`) turns a request into the engine's `BoxSpec` in one place.
//! Fields hold real units (bytes as `u64`, `Duration`), and each field's serde reads exactly
//! what the protocol takes for it. The crate depends on serde (with serde_json for the protocol's
//! values, and thiserror for its errors), not on the engine, so anything that speaks the
//! protocol (a client, a future VM guest agent) can use it.

pub mod duration;
pub mod error;
pub mod isolation;
pub mod language;
pub mod mount;
pub mod network;
pub mod request;
pub mod size;

pub use error::{Chain, RequestError};
pub use isolation::Isolation;
pub use language::Language;
pub use mount::{Mount, Tmpfs};
pub use network::{Network, NetworkMode, Secret};
pub use request::{RunRequest, SandboxRequest};
