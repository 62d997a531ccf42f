//! `hull mcp`: a Model Context Protocol server on stdin/stdout that gives a model a local code
//! interpreter. One [`hull::Sandbox`] lives as long as the server (one workspace; every tool
//! call that runs code is a fresh network-off box). stdout carries only protocol messages;
//! logs go to stderr.
//!
//! Modules: `jsonrpc` (framing, error codes, version negotiation), `settings` (the
//! `HULL_MCP_*` variables), `tools` (schemas, calls, results for a model), `sanitize` (escape
//! stripping, label neutralising, output caps).

pub mod jsonrpc;
mod sanitize;
mod settings;
mod tools;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use hull::{Sandbox, SandboxError};
use hull_box::{Runtime, SpecField, WarmOptions};
use serde_json::{json, Map, Value};

use jsonrpc::Incoming;
use tools::Workspace;

/// Serve the Model Context Protocol on stdin/stdout: a code interpreter for a model.
///
/// Tools: run_code (python, bash, sh, and node when the image has it; each call is a fresh box
/// without network), write_file, read_file, list_files (one /workspace for the server's life).
/// Configure it with environment variables (an empty value counts as unset):
///
///   HULL_MCP_IMAGE       image for every box: `host` (default) or a pulled/imported image name
///   HULL_MCP_SETUP       shell command run once at start in a setup box with network and a
///                        writable /deps, e.g. `pip install pandas matplotlib`
///   HULL_MCP_MEMORY      memory cap per box, e.g. 512m (default) or 2g
///   HULL_MCP_TIMEOUT     wall-clock limit per call, e.g. 30s (default), 500ms, 2m
///   HULL_MCP_WORKSPACE   absolute host directory to use (and keep) as /workspace; created if
///                        missing (default: a private directory removed at exit)
///   HULL_MCP_MAX_OUTPUT  bytes of each output section a result shows, e.g. 20000 (default) or
///                        64k; longer output is cut in the middle with an `[output cut: ...]` marker
///   HULL_MCP_ISOLATION   `namespace` (default) or `vm`: each call in a microVM with a guest
///                        kernel of its own (docs/vm.md; an image, no setup)
///
/// A bad value stops the server at start with a message naming the variable.
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct McpArgs {}

/// Shared by the reader and the request threads.
struct Server {
    out: Mutex<std::io::Stdout>,
    initialized: AtomicBool,
    ready: Mutex<Option<Arc<Workspace>>>,
    ready_cv: Condvar,
}

impl Server {
    fn send(&self, v: &Value) {
        let line = v.to_string();
        let mut o = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    }

    /// Waits for the Sandbox (its setup may still be running).
    fn workspace(&self) -> Arc<Workspace> {
        self.workspace_telling(None)
    }

    /// [`Server::workspace`] for a request that gave a `progressToken`: while the sandbox is
    /// still starting (a `HULL_MCP_SETUP` can take minutes), a `notifications/progress` every
    /// [`PROGRESS_EVERY`] says so, so the client knows the call is not stuck.
    fn workspace_telling(&self, token: Option<&Value>) -> Arc<Workspace> {
        let started = std::time::Instant::now();
        let mut told = 0u64;
        let mut g = self
            .ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(w) = g.as_ref() {
                return Arc::clone(w);
            }
            let (next, _) = self
                .ready_cv
                .wait_timeout(g, PROGRESS_EVERY)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            g = next;
            if let (Some(token), None) = (token, g.as_ref()) {
                told += 1;
                self.send(&json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {
                        "progressToken": token,
                        "progress": told,
                        "message": format!("setting up the sandbox (HULL_MCP_SETUP): {} s so far", started.elapsed().as_secs()),
                    },
                }));
            }
        }
    }
}

/// How often a tool call waiting on the sandbox's start says so (with a `progressToken`).
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

fn log(msg: &str) {
    eprintln!("hull mcp: {msg}");
}

/// The variable that sets a field of the box's spec, if one does.
fn variable(field: SpecField) -> Option<&'static str> {
    match field {
        SpecField::Root => Some("HULL_MCP_IMAGE"),
        SpecField::Workspace => Some("HULL_MCP_WORKSPACE"),
        SpecField::Memory => Some("HULL_MCP_MEMORY"),
        SpecField::Timeout => Some("HULL_MCP_TIMEOUT"),
        _ => None,
    }
}

/// A failed start, named by the variable it came from: the engine's refusals by their field
/// (the Sandbox's own spelling of it is left out), the Sandbox's by its argument.
fn start_error(e: &SandboxError) -> String {
    let chain = match e {
        SandboxError::Refused(n) => hull_api::error::chain(&n.error),
        SandboxError::Image(n) => hull_api::error::chain(&n.error),
        e => hull_api::error::chain(e),
    };
    let var = match e {
        SandboxError::SetupFailed { .. } => "HULL_MCP_SETUP",
        SandboxError::Invalid { arg, .. } => match arg.as_str() {
            "image" => "HULL_MCP_IMAGE",
            "workspace" => "HULL_MCP_WORKSPACE",
            "memory_mb" => "HULL_MCP_MEMORY",
            "timeout_s" => "HULL_MCP_TIMEOUT",
            _ => "settings",
        },
        e => match e.field() {
            Some(f) => variable(f).unwrap_or("settings"),
            None => "start",
        },
    };
    format!("{var}: {}", chain.join("\n  caused by: "))
}

fn start(rt: Arc<Runtime>, s: settings::Settings) -> Result<Workspace, String> {
    if let Some(w) = &s.workspace {
        std::fs::create_dir_all(w)
            .map_err(|e| format!("HULL_MCP_WORKSPACE={}: cannot create it: {e}", w.display()))?;
    }
    if let Some(cmd) = &s.setup {
        log(&format!("running HULL_MCP_SETUP: {cmd}"));
    }
    let backend: Arc<dyn hull::Backend> = match s.isolation {
        hull_api::Isolation::Namespace => rt,
        hull_api::Isolation::Vm => Arc::new(hull::VmBackend::new(false)),
    };
    let sb =
        Sandbox::create(backend, "mcp".into(), s.sandbox_config()).map_err(|e| start_error(&e))?;
    let languages = tools::probe_languages(&sb).map_err(|e| start_error(&e))?;
    let image = s.image.clone().unwrap_or_else(|| "host".into());
    let ws = Workspace {
        sb,
        image,
        languages,
        settings: s,
    };
    log(&format!(
        "ready: image `{}` with {}; workspace {}",
        ws.image,
        if ws.languages.is_empty() {
            "no interpreter".to_string()
        } else {
            ws.language_names()
        },
        ws.sb.workspace_path().display()
    ));
    Ok(ws)
}

pub fn main(_args: &McpArgs) -> i32 {
    let s = match settings::from_env(|k| std::env::var(k).ok()) {
        Ok(s) => s,
        Err(e) => {
            log(&e);
            return 2;
        }
    };
    let rt = match Runtime::with_warm(WarmOptions::ALL) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            crate::print_error(&e);
            return 125;
        }
    };
    rt.sweep_leftovers();
    let server = Arc::new(Server {
        out: Mutex::new(std::io::stdout()),
        initialized: AtomicBool::new(false),
        ready: Mutex::new(None),
        ready_cv: Condvar::new(),
    });
    // The Sandbox starts while the client initializes (a setup may take minutes); tool calls
    // wait for it. A start that fails ends the server: its settings are wrong.
    {
        let server = Arc::clone(&server);
        // A panic in the start must end the server too, or tool calls would wait forever.
        std::thread::spawn(move || {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| start(rt, s)))
                .unwrap_or_else(|_panic| {
                    Err("start: the sandbox's start panicked (see the message above)".into())
                }) {
                Ok(w) => {
                    *server
                        .ready
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(w));
                    server.ready_cv.notify_all();
                }
                Err(e) => {
                    log(&e);
                    std::process::exit(2);
                }
            }
        });
    }
    let mut workers = Vec::new();
    // Tool calls run one after another on one thread, in the order they came: they share the
    // workspace, so a pipelined write_file then read_file reads what was written. Pings and
    // listings are answered beside them.
    let (calls, queued) = std::sync::mpsc::channel::<(Value, String, Value)>();
    let tools = {
        let server = Arc::clone(&server);
        std::thread::spawn(move || {
            for (id, method, params) in queued {
                let reply = handle(&server, &id, &method, &params);
                server.send(&reply);
            }
        })
    };
    let mut input = std::io::stdin().lock();
    let mut line = Vec::new();
    loop {
        match jsonrpc::read_frame(&mut input, &mut line, jsonrpc::MAX_FRAME) {
            Ok(jsonrpc::Frame::Eof) => break,
            Ok(jsonrpc::Frame::Line) => {}
            Ok(jsonrpc::Frame::TooLong) => {
                let msg = format!(
                    "the message is over {} MiB, the most this server reads in one line; it was dropped (send large files in parts)",
                    jsonrpc::MAX_FRAME >> 20
                );
                server.send(&jsonrpc::error(
                    &jsonrpc::readable_id(&line),
                    jsonrpc::INVALID_REQUEST,
                    &msg,
                ));
                continue;
            }
            Err(e) => {
                log(&format!("cannot read stdin ({e}); stopping"));
                break;
            }
        }
        if line.trim_ascii().is_empty() {
            continue;
        }
        match jsonrpc::parse(&line) {
            Incoming::Invalid { id, code, message } => {
                server.send(&jsonrpc::error(&id, code, &message))
            }
            Incoming::Response => {}
            Incoming::Notification { method, .. } => {
                if method != "notifications/initialized" && method != "notifications/cancelled" {
                    log(&format!("ignored notification `{method}`"));
                }
            }
            Incoming::Request { id, method, params } if method == "tools/call" => {
                let _ = calls.send((id, method, params));
            }
            Incoming::Request { id, method, params } => {
                let server = Arc::clone(&server);
                workers.push(std::thread::spawn(move || {
                    let reply = handle(&server, &id, &method, &params);
                    server.send(&reply);
                }));
                workers.retain(|w| !w.is_finished());
            }
        }
    }
    drop(calls);
    let _ = tools.join();
    for w in workers {
        let _ = w.join();
    }
    // End of input: the client is done. Wait for the start to end (a failed start exits 2 from
    // its thread, so bad settings are reported even when the client left at once), then destroy
    // the Sandbox (every box reaped, the session directory removed).
    drop(server.workspace());
    let ws = server
        .ready
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(ws) = ws {
        ws.sb.destroy();
        drop(ws);
    }
    0
}

fn handle(server: &Server, id: &Value, method: &str, params: &Value) -> Value {
    let empty = Map::new();
    let p = params.as_object().unwrap_or(&empty);
    match method {
        "initialize" => {
            let Some(requested) = p.get("protocolVersion").and_then(Value::as_str) else {
                return jsonrpc::error(id, jsonrpc::INVALID_PARAMS, "initialize: `protocolVersion` (a string) is required");
            };
            if server.initialized.swap(true, Ordering::SeqCst) {
                return jsonrpc::error(id, jsonrpc::INVALID_REQUEST, "initialize: this server is already initialized; start a new one for a new session");
            }
            let version = jsonrpc::negotiate(requested);
            jsonrpc::result(id, json!({
                "protocolVersion": version,
                "capabilities": { "tools": { "listChanged": false } },
                "serverInfo": { "name": "hull", "title": "hull sandbox", "version": env!("CARGO_PKG_VERSION") },
                "instructions": "A local code interpreter. run_code runs each call in a fresh sandbox without network; \
                                 files under /workspace persist between calls, variables do not. Use write_file, read_file \
                                 and list_files for workspace files. A `[sandbox: ...]` label means the sandbox stopped the code.",
            }))
        }
        "ping" => jsonrpc::result(id, json!({})),
        _ if !server.initialized.load(Ordering::SeqCst) => jsonrpc::error(id, jsonrpc::NOT_INITIALIZED, &format!("`{method}` before `initialize`: send initialize first")),
        "tools/list" => jsonrpc::result(id, server.workspace().list()),
        // Clients that list everything get empty lists, not an error: hull has tools only.
        "resources/list" => jsonrpc::result(id, json!({ "resources": [] })),
        "resources/templates/list" => jsonrpc::result(id, json!({ "resourceTemplates": [] })),
        "prompts/list" => jsonrpc::result(id, json!({ "prompts": [] })),
        "tools/call" => {
            let Some(name) = p.get("name").and_then(Value::as_str) else {
                return jsonrpc::error(id, jsonrpc::INVALID_PARAMS, "tools/call: `name` (a string) is required");
            };
            let args = match p.get("arguments") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(_) => return jsonrpc::error(id, jsonrpc::INVALID_PARAMS, "tools/call: `arguments` must be an object"),
            };
            let token = p.get("_meta").and_then(|m| m.get("progressToken"));
            match server.workspace_telling(token).call(name, &args) {
                Ok(r) => jsonrpc::result(id, r),
                Err(msg) => jsonrpc::error(id, jsonrpc::INVALID_PARAMS, &msg),
            }
        }
        other => jsonrpc::error(id, jsonrpc::METHOD_NOT_FOUND, &format!("method `{}` not found; this server answers initialize, ping, tools/list, tools/call, resources/list, resources/templates/list, prompts/list", sanitize::clean(other))),
    }
}
