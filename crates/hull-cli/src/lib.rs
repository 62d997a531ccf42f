//! The `hull` command's modules, as a library: the binary (`main.rs`) is only its argument
//! parser and dispatch. A library so that the parsers of untrusted input these modules own
//! (`hull serve`'s request lines, `hull mcp`'s JSON-RPC, durations) can be reached by the fuzz
//! targets in `fuzz/`, which link them as they are.

pub mod bench;
mod bench_driver;
mod bench_named;
mod bench_net;
pub mod bench_peers;
mod bench_report;
pub mod bench_sdk;
pub mod bench_sdk_output;
mod bench_stats;
mod beneath;
pub mod ca;
pub mod doctor;
pub mod image_bench;
pub mod images;
pub mod mcp;
pub mod named;
pub mod net;
pub mod net_args;
mod pty_relay;
pub mod pull;
pub mod run;
pub mod serve;
mod serve_handoff;
mod serve_loop;
mod serve_named;
mod serve_named_files;
mod serve_named_templates;
mod serve_out;
mod serve_request;
pub mod serve_sandbox;
mod sys;
mod tty_relay;
pub mod verbosity;

/// Prints an error with its cause chain, once, at the edge.
pub fn print_error(err: &(dyn std::error::Error + 'static)) {
    eprintln!("hull: error: {err}");
    let mut src = err.source();
    while let Some(s) = src {
        eprintln!("  caused by: {s}");
        src = s.source();
    }
}

/// A report command's stdout may be closed early (`hull doctor | head`): the write ends the
/// process quietly instead of panicking (see `sys::default_sigpipe`).
pub fn end_quietly_on_closed_stdout() {
    sys::default_sigpipe();
}
