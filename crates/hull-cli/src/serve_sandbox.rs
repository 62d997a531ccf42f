//! `hull serve` methods for Sandbox sessions (`sandbox.*`, `kernel.*`), over the `hull` crate.
//! Each request names its sandbox by the id `sandbox.create` returned. Binary file contents
//! travel base64-encoded (`data_b64`); paths are workspace paths (`x/y` or `/workspace/x/y`),
//! given as text (`path`, `subdir`) or, for names that are not UTF-8, as base64 of their bytes
//! (`path_b64`, `subdir_b64`, as listings show them).

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use base64::Engine;
use hull::cell::CellEnd;
use hull::{CallOptions, Language, Sandbox, SandboxError, SandboxRequest};
use hull_box::{OutputSink, Runtime};
use serde_json::{json, Map, Value};

use crate::serve_out::{EventSink, Out};

/// The methods this module answers, for `hello`.
pub const METHODS: &[&str] = &[
    "sandbox.create",
    "sandbox.run_code",
    "sandbox.run",
    "sandbox.write_file",
    "sandbox.read_file",
    "sandbox.list_files",
    "sandbox.snapshot",
    "sandbox.restore",
    "sandbox.destroy",
    "sandbox.set_network",
    "kernel.start",
    "kernel.run_code",
    "kernel.attach",
    "kernel.end",
    "kernel.close",
];

/// The most `sandbox.read_file` returns without `max_bytes`; larger files need `max_bytes`.
const READ_WHOLE_MAX: u64 = 256 << 20;

/// The live sandboxes of this server process.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Sandbox>>>,
    /// The gateway backends of the sessions made with the gateway network, whose policy
    /// `sandbox.set_network` replaces.
    gateways: Mutex<HashMap<String, Arc<crate::net::backend::Served>>>,
    next: std::sync::atomic::AtomicU64,
    /// Where `kernel.attach` hands a kernel's channel over (`hull serve --fd-socket`).
    handoff: Option<crate::serve_handoff::Handoff>,
}

impl Sessions {
    pub(crate) fn with_handoff(handoff: Option<crate::serve_handoff::Handoff>) -> Sessions {
        Sessions {
            handoff,
            ..Sessions::default()
        }
    }

    /// Destroys every sandbox (at shutdown or end of input), waiting for their boxes to go.
    pub fn destroy_all(&self) {
        let all: Vec<Arc<Sandbox>> = self
            .map
            .lock()
            .map(|mut m| m.drain().map(|(_, s)| s).collect())
            .unwrap_or_default();
        if let Ok(mut g) = self.gateways.lock() {
            g.clear();
        }
        for s in all {
            s.destroy();
        }
    }
}

fn error_json(e: &SandboxError) -> Value {
    let mut v = crate::serve_out::error_json(e.kind(), e, e.arg());
    match e {
        SandboxError::Box(hull_box::BoxError::Setup {
            step, errno, path, ..
        }) => {
            v["step"] = json!(step);
            v["reason"] = json!(errno.to_string());
            v["path"] = json!(path);
        }
        SandboxError::Refused(hull::error::Named {
            error: hull_box::BoxError::LimitsUnenforced(caps),
            ..
        }) => v["unenforced"] = json!(caps.0),
        SandboxError::Path { path, .. } | SandboxError::PathFailed { path, .. } => {
            v["path"] = json!(path);
        }
        SandboxError::Member { member, .. } => v["member"] = json!(member),
        SandboxError::Network(n) => v["mode"] = json!(n.error.mode.to_string()),
        _ => {}
    }
    v
}

/// `sandbox.set_network`'s `network`: a gateway mode's name or `{mode, allow_hosts,
/// allow_cidrs, deny_cidrs}`; ports and the connection cap stay as the session was created.
fn session_policy(v: Option<&Value>) -> Result<crate::net::wire::PolicySpec, SandboxError> {
    let g = crate::net::plan::replacement(v).map_err(|e| bad("network", &e))?;
    Ok(crate::net::plan::policy_of(&g))
}

fn bad(arg: &str, why: &str) -> SandboxError {
    SandboxError::Invalid {
        arg: arg.to_string(),
        why: why.to_string(),
    }
}

fn str_param<'a>(p: &'a Map<String, Value>, k: &str) -> Result<&'a str, SandboxError> {
    p.get(k)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(k, "a string is required"))
}

fn opt_str<'a>(p: &'a Map<String, Value>, k: &str) -> Result<Option<&'a str>, SandboxError> {
    match p.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(k, "must be a string")),
    }
}

/// A call's own options: `timeout_s` (seconds), `env` (an object of strings, over the
/// session's), `cwd` (an absolute path in the box); each absent by default.
fn call_options(p: &Map<String, Value>) -> Result<CallOptions, SandboxError> {
    let timeout = match p.get("timeout_s") {
        None | Some(Value::Null) => None,
        // The range is CallOptions::check's; this only refuses what is no duration at all.
        Some(v) => Some(
            v.as_f64()
                .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| {
                    bad(
                        "timeout_s",
                        "must be a number of seconds more than 0 and at most 86400",
                    )
                })?,
        ),
    };
    let env = match p.get("env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|v| (k.clone(), v.to_string()))
                    .ok_or_else(|| bad("env", &format!("`{k}`'s value must be a string")))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("env", "must be an object of strings")),
    };
    // The program's input: `stdin` (text) or `stdin_b64` (bytes), not both (`run` takes it,
    // the Sandbox refuses it for the others, naming it).
    let stdin = match (opt_str(p, "stdin")?, opt_str(p, "stdin_b64")?) {
        (None, None) => None,
        (Some(t), None) => Some(t.as_bytes().to_vec()),
        (None, Some(d)) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(d)
                .map_err(|_| bad("stdin_b64", "is not base64"))?,
        ),
        (Some(_), Some(_)) => return Err(bad("stdin", "give `stdin` or `stdin_b64`, not both")),
    };
    let opts = CallOptions {
        timeout,
        env,
        cwd: opt_str(p, "cwd")?.map(str::to_string),
        stdin,
    };
    opts.check()?;
    Ok(opts)
}

/// A workspace path given as `name` (text) or `name_b64` (base64 of its bytes, for names that
/// are not UTF-8), not both; `default` when neither is given, or refused when it is `None`.
fn path_param(
    p: &Map<String, Value>,
    name: &str,
    default: Option<&str>,
) -> Result<Vec<u8>, SandboxError> {
    let b64_name = format!("{name}_b64");
    match (opt_str(p, name)?, opt_str(p, &b64_name)?) {
        (Some(t), None) => Ok(t.as_bytes().to_vec()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|e| bad(&b64_name, &format!("not base64: {e}"))),
        (None, None) => match default {
            Some(d) => Ok(d.as_bytes().to_vec()),
            None => Err(bad(
                name,
                &format!("a string is required (or `{b64_name}`, base64 of the name's bytes)"),
            )),
        },
        (Some(_), Some(_)) => Err(bad(
            name,
            &format!("give `{name}` or `{b64_name}`, not both"),
        )),
    }
}

fn sink_for(p: &Map<String, Value>, out: &Out, id: &Value) -> Box<dyn OutputSink + Send> {
    if p.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        Box::new(EventSink::new(out.clone(), id.clone()))
    } else {
        Box::new(hull_box::NoSink)
    }
}

fn exec_json(r: &hull::ExecResult) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

impl Sessions {
    fn get(&self, p: &Map<String, Value>) -> Result<Arc<Sandbox>, SandboxError> {
        let id = str_param(p, "sandbox")?;
        self.map
            .lock()
            .ok()
            .and_then(|m| m.get(id).cloned())
            .ok_or_else(|| {
                bad(
                    "sandbox",
                    &format!("no sandbox `{id}` in this server (destroyed, or never created)"),
                )
            })
    }

    /// The sandbox and kernel a `kernel.*` request names.
    fn kernel(
        &self,
        p: &Map<String, Value>,
    ) -> Result<(Arc<Sandbox>, Arc<hull::Kernel>), SandboxError> {
        let sb = self.get(p)?;
        let kid = str_param(p, "kernel")?;
        let k = sb.get_kernel(kid).ok_or_else(|| {
            bad(
                "kernel",
                &format!("no kernel `{kid}` in sandbox `{}`", sb.id),
            )
        })?;
        Ok((sb, k))
    }

    /// Hands the kernel's channel over the descriptor socket and says what its holder must
    /// hold the runner to (`kernel.attach`'s answer).
    fn attach(&self, sb: &Sandbox, k: &hull::Kernel) -> Result<Value, SandboxError> {
        let Some(handoff) = &self.handoff else {
            return Err(bad(
                "kernel",
                "this server has no descriptor socket to hand the kernel's channel over; start it with `hull serve --fd-socket FD`",
            ));
        };
        let ch = sb.kernel_attach(k)?;
        if let Err(e) = handoff.send(k.id.as_bytes(), ch.channel.as_fd()) {
            // Nobody holds the channel: the kernel could never run a cell again.
            sb.close_kernel(&k.id);
            return Err(SandboxError::RunnerIo {
                what: "hand its channel over (--fd-socket)",
                error: e,
            });
        }
        Ok(json!({
            "kernel": k.id,
            "max_output": ch.max_output,
            "timeout_s": ch.timeout.as_secs_f64(),
            "workspace": ch.workspace,
            "max_frame": hull::cell::MAX_FRAME,
            "max_frame_values": hull::cell::MAX_FRAME_VALUES,
        }))
    }

    /// Answers one `sandbox.*` or `kernel.*` request: `Ok(None)` when the answer was sent already.
    pub(crate) fn handle(
        &self,
        rt: &Arc<Runtime>,
        out: &Out,
        id: &Value,
        method: &str,
        params: Value,
    ) -> Result<Option<Value>, Value> {
        self.dispatch(rt, out, id, method, params)
            .map_err(|e| error_json(&e))
    }

    fn dispatch(
        &self,
        rt: &Arc<Runtime>,
        out: &Out,
        id: &Value,
        method: &str,
        params: Value,
    ) -> Result<Option<Value>, SandboxError> {
        let empty = Map::new();
        let p = match &params {
            Value::Object(m) => m,
            Value::Null => &empty,
            _ => return Err(bad("params", "must be an object")),
        };
        let b64 = base64::engine::general_purpose::STANDARD;
        match method {
            "sandbox.create" => {
                // `stream` is the call's (the setup's output as events), not the sandbox's.
                let mut params = params.clone();
                if let Value::Object(m) = &mut params {
                    m.remove("stream");
                }
                let cfg = SandboxRequest::from_json(&params)?;
                let n = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                let sid = format!("sb{n}");
                // A gateway network: each of the session's boxes is served by a gateway; with
                // secrets, every box holds their placeholders and trusts the gateway CA.
                let mut cfg = cfg;
                // Listed for `sandbox.set_network` once the sandbox is made (a failed setup
                // keeps nothing: its secrets and trust go with it).
                let mut served_gateway = None;
                // The engine's boxes or the microVM tier's VMs; either behind gateways.
                let engine: Arc<dyn hull::backend::Backend> =
                    if cfg.isolation == hull_api::Isolation::Vm {
                        Arc::new(hull::VmBackend::new(cfg.require_kvm).with_prewarm(cfg.prewarm))
                    } else {
                        Arc::<Runtime>::clone(rt)
                    };
                let backend: Arc<dyn hull::backend::Backend> = match &cfg.network {
                    hull_api::network::Network::Gateway(g) => {
                        let mut start =
                            crate::net::plan::start_of(g).map_err(|e| bad("network", &e))?;
                        let trust = crate::net::plan::brokered(&mut start, &cfg.secrets, false)
                            .map_err(|e| bad("secrets", &e))?;
                        if let Some(t) = &trust {
                            t.apply_to_request(&mut cfg);
                        }
                        let served =
                            Arc::new(crate::net::backend::Served::new(engine, start, trust));
                        served_gateway = Some(Arc::clone(&served));
                        served
                    }
                    _ => engine,
                };
                // With `stream`, the setup's output comes as events while it runs.
                let mut sink = sink_for(p, out, id);
                let sb = Sandbox::create_streaming(backend, sid.clone(), cfg, &mut *sink)?;
                let setup = sb.setup.as_ref().map(|r| json!({ "stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code, "duration_ms": r.duration_ms }));
                let ws = sb.workspace_path().display().to_string();
                if let Some(served) = served_gateway {
                    if let Ok(mut m) = self.gateways.lock() {
                        m.insert(sid.clone(), served);
                    }
                }
                if let Ok(mut m) = self.map.lock() {
                    m.insert(sid.clone(), sb);
                }
                Ok(Some(
                    json!({ "sandbox": sid, "workspace": ws, "setup": setup }),
                ))
            }
            "sandbox.run_code" => {
                let sb = self.get(p)?;
                let language = match opt_str(p, "language")? {
                    None => Language::Python,
                    Some(l) => l
                        .parse::<Language>()
                        .map_err(|e| bad("language", &e.to_string()))?,
                };
                // Answered here, before the prewarmed box the call took is replaced.
                let code = str_param(p, "code")?;
                let opts = call_options(p)?;
                sb.run_code_with(code, language, &opts, sink_for(p, out, id), |r| match r {
                    Ok(r) => out.send(&json!({ "id": id, "result": exec_json(&r) })),
                    Err(e) => out.send(&json!({ "id": id, "error": error_json(&e) })),
                });
                Ok(None)
            }
            "sandbox.run" => {
                let sb = self.get(p)?;
                let argv: Vec<String> = match p.get("argv") {
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|x| {
                            x.as_str()
                                .map(str::to_string)
                                .ok_or_else(|| bad("argv", "must be a list of strings"))
                        })
                        .collect::<Result<_, _>>()?,
                    _ => return Err(bad("argv", "a list of strings is required")),
                };
                let opts = call_options(p)?;
                let r = sb.run_with(argv, &opts, sink_for(p, out, id))?;
                Ok(Some(exec_json(&r)))
            }
            "sandbox.write_file" => {
                let sb = self.get(p)?;
                let data = match (opt_str(p, "data_b64")?, opt_str(p, "text")?) {
                    (Some(d), None) => b64
                        .decode(d)
                        .map_err(|e| bad("data_b64", &format!("not base64: {e}")))?,
                    (None, Some(t)) => t.as_bytes().to_vec(),
                    _ => return Err(bad("data_b64", "give exactly one of `data_b64` or `text`")),
                };
                sb.files().write_file(path_param(p, "path", None)?, &data)?;
                Ok(Some(json!({ "bytes": data.len() })))
            }
            "sandbox.read_file" => {
                let sb = self.get(p)?;
                let (max, whole) = match p.get("max_bytes") {
                    None | Some(Value::Null) => (READ_WHOLE_MAX, true),
                    Some(v) => (
                        v.as_u64()
                            .ok_or_else(|| bad("max_bytes", "must be a non-negative integer"))?,
                        false,
                    ),
                };
                let path = path_param(p, "path", None)?;
                let (data, size) = sb.files().read_file(&path, max)?;
                if whole && size > max {
                    let path = String::from_utf8_lossy(&path);
                    return Err(bad("max_bytes", &format!("{path} is {size} bytes, more than {READ_WHOLE_MAX} read whole; pass max_bytes to read its start, or snapshot the workspace")));
                }
                Ok(Some(
                    json!({ "data_b64": b64.encode(&data), "size": size, "truncated": (data.len() as u64) < size }),
                ))
            }
            "sandbox.list_files" => {
                let sb = self.get(p)?;
                let (entries, complete) = sb.files().list(path_param(p, "subdir", Some(""))?)?;
                Ok(Some(json!({ "entries": entries, "complete": complete })))
            }
            "sandbox.snapshot" => {
                let sb = self.get(p)?;
                let r = hull::archive::snapshot(sb.files(), &PathBuf::from(str_param(p, "dest")?))?;
                Ok(Some(serde_json::to_value(r).unwrap_or(Value::Null)))
            }
            "sandbox.restore" => {
                let sb = self.get(p)?;
                let r = hull::archive::restore(sb.files(), &PathBuf::from(str_param(p, "src")?))?;
                Ok(Some(serde_json::to_value(r).unwrap_or(Value::Null)))
            }
            "sandbox.set_network" => {
                let sb = self.get(p)?;
                let served = self
                    .gateways
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&sb.id).cloned());
                let policy = session_policy(p.get("network"))?;
                let Some(served) = served else {
                    return Err(bad(
                        "network",
                        "this sandbox was created without the gateway network; its network kind is set when it is created",
                    ));
                };
                let told = served.set_policy(&policy).map_err(|e| {
                    SandboxError::Runner(format!("replace the network policy: {e}"))
                })?;
                Ok(Some(json!({ "gateways": told })))
            }
            "sandbox.destroy" => {
                let sid = str_param(p, "sandbox")?;
                if let Ok(mut g) = self.gateways.lock() {
                    g.remove(sid);
                }
                let sb = self.map.lock().ok().and_then(|mut m| m.remove(sid));
                if let Some(sb) = &sb {
                    sb.destroy();
                }
                let existed = sb.is_some();
                // Dropping the last reference reaps every box and removes the session's directories.
                drop(sb);
                Ok(Some(json!({ "destroyed": existed })))
            }
            "kernel.start" => {
                let sb = self.get(p)?;
                // `attach`: kernel.attach's hand-off and answer too, in the same round trip.
                let attach = match p.get("attach") {
                    None | Some(Value::Bool(false)) => false,
                    Some(Value::Bool(true)) => true,
                    Some(_) => return Err(bad("attach", "must be true or false")),
                };
                // Answered here, before the kernel box started ahead that it took is replaced.
                sb.kernel_answering(|k| {
                    let answer = k.and_then(|k| {
                        let mut r = json!({ "kernel": k.id });
                        if attach {
                            // A kernel nobody can reach is not left running.
                            r["attached"] = self.attach(&sb, &k).inspect_err(|_| {
                                sb.close_kernel(&k.id);
                            })?;
                        }
                        Ok(r)
                    });
                    match answer {
                        Ok(r) => out.send(&json!({ "id": id, "result": r })),
                        Err(e) => out.send(&json!({ "id": id, "error": error_json(&e) })),
                    }
                });
                Ok(None)
            }
            "kernel.run_code" => {
                let (sb, k) = self.kernel(p)?;
                let mut sink = sink_for(p, out, id);
                let opts = call_options(p)?;
                if opts.stdin.is_some() {
                    return Err(bad(
                        "stdin",
                        "a kernel cell takes no standard input (the code is its input)",
                    ));
                }
                if !opts.env.is_empty() || opts.cwd.is_some() {
                    let arg = if opts.env.is_empty() { "cwd" } else { "env" };
                    return Err(bad(arg, "a kernel keeps its interpreter's environment and directory; change them in a cell (os.environ, os.chdir)"));
                }
                let timeout = opts.timeout;
                let r = sb.kernel_run_with(&k, str_param(p, "code")?, timeout, &mut *sink)?;
                Ok(Some(exec_json(&r)))
            }
            "kernel.attach" => {
                let (sb, k) = self.kernel(p)?;
                self.attach(&sb, &k).map(Some)
            }
            "kernel.end" => {
                let (sb, k) = self.kernel(p)?;
                let end = match str_param(p, "end")? {
                    "timeout" => {
                        let t = call_options(p)?.timeout.ok_or_else(|| {
                            bad("timeout_s", "a cell that timed out names its deadline")
                        })?;
                        CellEnd::Timeout(t)
                    }
                    "gone" => CellEnd::Gone,
                    "broken" => CellEnd::Broken(str_param(p, "warning")?.to_string()),
                    other => {
                        return Err(bad(
                            "end",
                            &format!(
                                "`{other}` is not how a cell ends; use timeout, gone or broken"
                            ),
                        ))
                    }
                };
                let run = sb.kernel_end(&k, end)?;
                Ok(Some(serde_json::to_value(run).unwrap_or(Value::Null)))
            }
            "kernel.close" => {
                let sb = self.get(p)?;
                Ok(Some(
                    json!({ "closed": sb.close_kernel(str_param(p, "kernel")?) }),
                ))
            }
            other => Err(bad("method", &format!("unknown method `{other}`"))),
        }
    }
}
