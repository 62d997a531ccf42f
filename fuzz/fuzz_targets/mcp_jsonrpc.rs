//! `hull mcp`'s JSON-RPC line parser (`hull_cli::mcp::jsonrpc::parse`): a client's bytes.
#![no_main]

use hull_cli::mcp::jsonrpc::{self, Incoming};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match jsonrpc::parse(data) {
        // An error answer always serializes, with the id the line carried (or null).
        Incoming::Invalid { id, code, message } => {
            let answer = jsonrpc::error(&id, code, &message);
            serde_json::to_string(&answer).expect("serializes");
        }
        Incoming::Request { id, .. } => {
            serde_json::to_string(&jsonrpc::result(&id, serde_json::Value::Null))
                .expect("serializes");
        }
        Incoming::Notification { .. } | Incoming::Response => {}
    }
});
