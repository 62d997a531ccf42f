//! `hull serve`: the JSON-lines protocol every binding speaks, over stdin/stdout.
//!
//! Requests are one JSON object per line, `{"id", "method", "params"}`. Each answer is one line:
//! `{"id", "result"}` or `{"id", "error": {"kind", "message", "chain"}}`; a `run` with
//! `"stream": true` also sends `{"id", "event": "stdout"|"stderr", "data"}` lines as output
//! arrives. Requests run concurrently, each on the thread that read it (`serve_loop`); lines never
//! interleave. A session starts
//! with `hello`, which tells the protocol version and what the server offers.

use std::sync::Arc;

use hull::error::Named;
use hull::Backend;
use hull_api::RunRequest;
use hull_box::{BoxError, Runtime, SpecField, WarmOptions};
use serde_json::{json, Value};

use crate::serve_out::{error_json, EventSink, Out};
pub use crate::serve_request::{parse_request, Request};

/// The protocol version; bumped on an incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// An inherited Unix socket (SOCK_SEQPACKET; its descriptor number) over which the server
    /// hands its caller descriptors: `kernel.attach` sends a kernel's channel there, so the
    /// caller's cells reach the interpreter without this server in between. The SDKs pass it.
    #[arg(long, value_name = "FD")]
    pub fd_socket: Option<i32>,
}

fn invalid(e: &hull_api::RequestError) -> Value {
    json!({ "kind": "invalid_argument", "message": e.to_string(), "chain": [e.to_string()], "arg": e.arg })
}

/// How `run`'s parameters spell a field of the box's spec.
fn run_key(field: SpecField, r: &RunRequest) -> &'static str {
    match field {
        SpecField::Command => "argv",
        SpecField::Root if r.rootfs.is_some() => "rootfs",
        SpecField::Root => "image",
        f => f.name(),
    }
}

/// `run`: one box from the parameters (`hull run`'s options by their snake_case names).
fn run(rt: &Runtime, out: &Out, id: &Value, params: Value) -> Result<Value, Value> {
    let (req, built, stream) = run_spec(params)?;
    for w in &built.warnings {
        crate::verbosity::warn("hull serve", w);
    }
    // Through the Sandbox layer's backend seam, like every box of a sandbox: the namespace
    // runtime, or the microVM tier for `isolation: "vm"`.
    let vm;
    let backend: &dyn Backend = match req.isolation {
        hull_api::Isolation::Namespace => rt,
        hull_api::Isolation::Vm => {
            vm = hull::VmBackend::new(req.require_kvm);
            &vm
        }
    };
    let mut sink = EventSink::new(out.clone(), id.clone());
    let sink: &mut dyn hull_box::OutputSink = if stream {
        &mut sink
    } else {
        &mut hull_box::NoSink
    };
    // A gateway network: the box's gateway serves its TAP from before its program starts,
    // until the result is sent; its published ports are in the result.
    let mut spec = built.spec;
    let (start, _trust) = match &req.network {
        hull_api::network::Network::Gateway(g) => {
            let mut s = crate::net::plan::start_of(g)
                .map_err(|e| crate::serve_named::invalid("network", e))?;
            let t = crate::net::plan::brokered(&mut s, &req.secrets, false)
                .map_err(|e| crate::serve_named::invalid("secrets", e))?;
            if let Some(t) = &t {
                t.apply(&mut spec);
            }
            (Some(s), t)
        }
        _ => (None, None),
    };
    let mut gateway = None;
    let res = match &start {
        Some(s) => {
            let mut take = crate::net::plan::handler(s, None, false, &mut gateway, |_| {});
            backend.run_served(&spec, sink, &mut take)
        }
        None => backend.run(&spec, sink),
    };
    match res {
        Ok((r, destroy)) => {
            let mut v = serde_json::to_value(&r).unwrap_or(Value::Null);
            if let Some(g) = &gateway {
                v["ports"] = g
                    .ports
                    .iter()
                    .map(|(inner, host)| json!({"port": inner, "host_port": host}))
                    .collect();
            }
            out.send(&json!({ "id": id, "result": v }));
            drop(gateway);
            destroy();
            Ok(Value::Null)
        }
        Err(e) => Err(box_error_json(e, &req)),
    }
}

fn box_error_json(e: BoxError, r: &RunRequest) -> Value {
    let kind = e.kind();
    let unenforced = match &e {
        BoxError::LimitsUnenforced(caps) => Some(json!(caps.0)),
        _ => None,
    };
    let mut v = match e.field() {
        Some(f) => {
            let arg = run_key(f, r);
            error_json(kind, &Named { arg, error: e }, Some(arg))
        }
        None => error_json(kind, &e, None),
    };
    if let Some(u) = unenforced {
        v["unenforced"] = u;
    }
    v
}

fn handle(
    rt: &Arc<Runtime>,
    sessions: &crate::serve_sandbox::Sessions,
    out: &Out,
    id: Value,
    method: &str,
    params: Value,
) {
    let reply = |r: Result<Value, Value>| match r {
        Ok(v) => out.send(&json!({ "id": id, "result": v })),
        Err(e) => out.send(&json!({ "id": id, "error": e })),
    };
    match method {
        "hello" => reply(Ok(with_store_images(json!({
            "protocol": PROTOCOL_VERSION,
            "hull": env!("CARGO_PKG_VERSION"),
            "methods": (["hello", "run", "shutdown"].iter().chain(crate::serve_sandbox::METHODS).chain(crate::serve_named::METHODS).chain(crate::serve_named_files::METHODS).chain(crate::serve_named_templates::METHODS).collect::<Vec<&&str>>()),
            "images": ["host"],
        })))),
        "run" => {
            // A result is sent before the box's teardown; only an error is left to send.
            if let Err(e) = run(rt, out, &id, params) {
                reply(Err(e));
            }
        }
        m if m.starts_with("sandbox.") || m.starts_with("kernel.") => {
            if let Some(r) = sessions.handle(rt, out, &id, m, params).transpose() {
                reply(r);
            }
        }
        m if crate::serve_named_files::METHODS.contains(&m) => reply(
            crate::serve_named::object(params)
                .and_then(|p| crate::serve_named_files::handle(m, &p)),
        ),
        m if crate::serve_named_templates::METHODS.contains(&m) => reply(
            crate::serve_named::object(params)
                .and_then(|p| crate::serve_named_templates::handle(m, &p)),
        ),
        m if m.starts_with("named.") => reply(crate::serve_named::handle(out, &id, m, params)),
        other => reply(Err(
            json!({ "kind": "unknown_method", "message": format!("unknown method `{other}`; see `hello` for the list"), "chain": [] }),
        )),
    }
}

pub fn main(args: &ServeArgs) -> i32 {
    let handoff = match args.fd_socket.map(crate::serve_handoff::Handoff::inherited) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            crate::print_error(&e);
            return 2;
        }
    };
    // A long-lived front end: every warm pool (templates, spares, ready boxes), and what
    // SIGKILLed hulls left behind is swept once, off the hot path.
    let rt = match Runtime::with_warm(WarmOptions::ALL) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            crate::print_error(&e);
            return 125;
        }
    };
    rt.sweep_leftovers();
    let out = Out::start();
    let sessions = Arc::new(crate::serve_sandbox::Sessions::with_handoff(handoff));
    let server = {
        // Weakly: threads left waiting for stdin at the end must not keep the runtime alive, whose
        // drop (when `main` returns) removes the cgroups it made ahead.
        let (rt, sessions, out) = (Arc::downgrade(&rt), Arc::clone(&sessions), out.clone());
        crate::serve_loop::Loop::new(
            out.clone(),
            Box::new(move |id, method: &str, params| {
                if let Some(rt) = rt.upgrade() {
                    handle(&rt, &sessions, &out, id, method, params);
                }
            }),
        )
    };
    // End of input: the client is gone (it closed the pipe, or its process died), so nobody
    // waits for the calls still running. Their boxes end now instead of at their deadlines;
    // then every sandbox is destroyed (boxes reaped, directories removed).
    let end = server.run(|end| {
        if matches!(end, crate::serve_loop::End::Eof) {
            rt.end_every_box();
        }
        // Waits on spawned processes (which outlive this server) end either way.
        crate::serve_named::end_all(matches!(end, crate::serve_loop::End::Eof));
    });
    sessions.destroy_all();
    if let crate::serve_loop::End::Shutdown(id) = end {
        out.send(&json!({ "id": id, "result": {} }));
    }
    out.flush();
    0
}

/// A `run` request's params as the request, the box spec they ask for (with the image's
/// warnings), and whether output is streamed; `Err` is the error object to answer with.
pub fn run_spec(params: Value) -> Result<(RunRequest, hull::boxspec::Built, bool), Value> {
    let mut params = if params.is_null() { json!({}) } else { params };
    let stream = match params.as_object_mut().and_then(|m| m.remove("stream")) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(v) => {
            return Err(invalid(&hull_api::RequestError::new(
                "stream",
                format!("expected true or false, got {v}"),
            )))
        }
    };
    let req = RunRequest::from_json(&params).map_err(|e| invalid(&e))?;
    let built = hull::boxspec::run_spec(&req).map_err(|e| match e {
        hull::boxspec::BuildError::Image(error) => {
            let arg = run_key(SpecField::Root, &req);
            error_json("invalid_argument", &Named { arg, error }, Some(arg))
        }
        hull::boxspec::BuildError::Network(error) => {
            let v = error_json(
                "network_unavailable",
                &Named {
                    arg: "network",
                    error: error.clone(),
                },
                Some("network"),
            );
            crate::serve_out::with_mode(v, &error)
        }
    })?;
    Ok((req, built, stream))
}

/// Adds every image in the local store (pulled or imported) after the embedded ones in a
/// `hello` answer's `images`.
fn with_store_images(mut hello: Value) -> Value {
    let stored = hull_image::Store::open(&hull_image::default_home())
        .and_then(|s| s.list())
        .into_iter()
        .flatten()
        .map(|i| Value::String(i.name));
    if let Some(list) = hello.get_mut("images").and_then(Value::as_array_mut) {
        list.extend(stored);
    }
    hello
}
