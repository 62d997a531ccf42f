//! A Sandbox: a session of boxes that share one workspace directory (bound at `/workspace`),
//! optional dependencies installed once by a setup box (`/deps`), prewarmed runner boxes and
//! kernels. Every call still gets a fresh box; only the workspace and `/deps` carry over.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use hull_api::{Language, SandboxRequest};
use hull_box::warm::{lock, Worker};
use hull_box::{BoxSpec, Network, NoSink, OutputSink, RunResult};
use serde::Serialize;
use serde_json::Value;

use crate::backend::Backend;
use crate::boxspec::DEPS_DIR;
use crate::calltrace::{self, CallTrace};
use crate::cell::{CellEnd, Reaper, RunnerBox, Started};
use crate::error::{Named, SandboxError};
use crate::files::Confined;
use crate::session_dirs::{leftover_prefix, private_dir, private_dir_mode};

/// What one call produced: the box's result plus the rich results and changed files.
#[derive(Debug, Serialize)]
pub struct ExecResult {
    #[serde(flatten)]
    pub run: RunResult,
    /// Mime bundles (`{"text/plain": ..., "image/png": base64, ...}`), in display order.
    pub results: Vec<Value>,
    /// Workspace paths the call created, modified or deleted, when tracked.
    pub files: Vec<crate::files::FileChange>,
}

/// At most this many boxes of one Sandbox run at once; further calls wait their turn (their
/// deadline starts when their box does).
fn max_parallel() -> usize {
    std::thread::available_parallelism()
        .map_or(2, usize::from)
        .saturating_mul(4)
        .max(4)
}

/// A counting semaphore.
struct Slots {
    used: Mutex<usize>,
    freed: Condvar,
    max: usize,
}

struct SlotGuard<'a>(&'a Slots);

impl Slots {
    fn take(&self) -> SlotGuard<'_> {
        let mut u = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while *u >= self.max {
            u = self
                .freed
                .wait(u)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *u += 1;
        SlotGuard(self)
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let mut u = self
            .0
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *u -= 1;
        self.0.freed.notify_one();
    }
}

/// Makes `/deps` a virtual environment over the image's Python (`--system-site-packages`),
/// once: pip run there counts the image's packages as installed, so `pip install matplotlib`
/// on an image that has numpy and pandas keeps them (with `PIP_TARGET` pip resolved as if
/// nothing were installed and shadowed the image's numpy with one its pandas was not built
/// for). `pip`/`pip3` in `/deps/bin` are that environment's pip (the image's pip module run by
/// its interpreter, so no pip is copied in). An image whose Python cannot make one (or has
/// none) installs with `PIP_TARGET=/deps`, as before.
const DEPS_ENV: &str = r#"if [ ! -e /deps/pyvenv.cfg ]; then
  if command -v python3 >/dev/null 2>&1 && python3 -m venv --system-site-packages --without-pip /deps >/dev/null 2>&1; then
    for p in pip pip3; do printf '#!/bin/sh\nexec /deps/bin/python3 -m pip "$@"\n' > /deps/bin/$p; chmod 755 /deps/bin/$p; done
  else export PIP_TARGET=/deps; fi
fi
export PATH="/deps/bin:$PATH""#;

/// How long an unused prewarmed box may wait before its own deadline ends it (it is replaced).
const POOL_IDLE: Duration = Duration::from_secs(3600);
/// How long a kernel box may live.
const KERNEL_LIFE: Duration = Duration::from_secs(86400);
/// Time a runner box gets to start, on top of the call's own timeout.
const START_MARGIN: Duration = Duration::from_secs(20);

/// The prewarmed runner boxes (`prewarm=N`) and the thread that starts them (`hull-prewarm`),
/// on hull-box's warm-pool mechanism ([`hull_box::warm`]). Shared with the thread, which holds
/// the Sandbox only weakly, and only while it starts a box.
#[derive(Default)]
struct Prewarm {
    stock: Mutex<PrewarmStock>,
    worker: Worker,
    /// Calls that took a prewarmed box.
    used: AtomicU64,
}

#[derive(Default)]
struct PrewarmStock {
    boxes: VecDeque<RunnerBox>,
    /// Boxes the thread is to start: `prewarm` at first, then one for each box a call took or
    /// found gone. A start that fails is not retried, so a Sandbox whose boxes cannot start
    /// does not keep trying.
    owed: usize,
    /// A kernel box whose interpreter has started and connected (with `prewarm` > 0), for the
    /// next `kernel()`.
    kernel: Option<RunnerBox>,
    /// Whether the thread is to start a kernel box (after the boxes owed for calls).
    kernel_owed: bool,
}

/// What a Sandbox's prewarmed boxes have done and hold (`hull bench --sdk`, tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrewarmStats {
    /// Boxes whose runner has connected and waits for a call.
    pub ready: usize,
    /// Calls that ran in a prewarmed box.
    pub used: u64,
    /// Kernel boxes started ahead that wait for `kernel()` (0 or 1).
    pub kernels_ready: usize,
}

/// A kernel: one warm interpreter in a long-lived box. Cells run one at a time.
#[derive(Debug)]
pub struct Kernel {
    pub id: String,
    rb: Mutex<Result<RunnerBox, String>>,
    /// The runner's pidfd, outside the lock a running cell holds, so closing the kernel (or
    /// destroying its sandbox) kills it at once instead of waiting for the cell.
    killer: OwnedFd,
    /// Set once the caller took the runner's channel ([`Sandbox::kernel_attach`]): its cells
    /// then go over that channel, not through [`Sandbox::kernel_run`].
    attached: AtomicBool,
}

/// A kernel's channel handed to its caller, and what the caller needs to hold the runner to
/// the sandbox's rules itself: the frames are untrusted, the output capped, the cell timed.
#[derive(Debug)]
pub struct KernelChannel {
    /// The runner's end of the conversation: cells go out as `<byte length>\n<code>`, frames
    /// (`stream` output, then `done`) come back, one JSON object per line.
    pub channel: OwnedFd,
    /// The most output bytes a cell keeps per stream (the rest is dropped and counted).
    pub max_output: u64,
    /// The sandbox's deadline for a cell that gives none.
    pub timeout: Duration,
    /// The workspace on the host, when calls report the files they changed.
    pub workspace: Option<PathBuf>,
}

/// Why a kernel is no longer running, from its box's result: the fault, else the exit code.
fn dead_reason(run: &RunResult) -> String {
    run.fault.as_ref().map_or_else(
        || format!("the interpreter exited with code {}", run.exit_code),
        |f| f.kind.as_str().to_string(),
    )
}

impl Kernel {
    /// Kills the kernel's box (its runner, so every process in it); idempotent.
    fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.killer, rustix::process::Signal::KILL);
    }
}

pub struct Sandbox {
    pub id: String,
    backend: Arc<dyn Backend>,
    cfg: SandboxRequest,
    base: BoxSpec,
    workspace: Confined,
    session: PathBuf,
    slots: Slots,
    reaper: Reaper,
    reaper_thread: Mutex<Option<JoinHandle<()>>>,
    pool: Arc<Prewarm>,
    kernels: Mutex<HashMap<String, Arc<Kernel>>>,
    next_kernel: AtomicU64,
    destroyed: AtomicBool,
    /// The setup box's result, when there was one.
    pub setup: Option<RunResult>,
}

/// The sandbox's identity, request, directories, setup result and whether it is destroyed; the
/// backend, pools and kernels behind their locks are left out (printing must not wait for a
/// running cell).
impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.id)
            .field("cfg", &self.cfg)
            .field("workspace", &self.workspace)
            .field("session", &self.session)
            .field("destroyed", &self.destroyed)
            .field("setup", &self.setup)
            .finish_non_exhaustive()
    }
}

fn remove_tree(p: &Path) {
    hull_box::leftovers::remove_tree(p);
}

/// Options of one call over the session's own (`run_code`, `run`, a kernel cell): a deadline,
/// environment variables added over the session's, a working directory.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub timeout: Option<Duration>,
    pub env: Vec<(String, String)>,
    /// An absolute path in the box.
    pub cwd: Option<String>,
    /// The program's standard input (`run` only; none: /dev/null).
    pub stdin: Option<Vec<u8>>,
}

/// The most standard input one `run` takes (it is written to a file before the box starts).
pub const MAX_STDIN: usize = 64 << 20;

impl CallOptions {
    /// Checks the options, naming the argument a caller gave.
    pub fn check(&self) -> Result<(), SandboxError> {
        if let Some(t) = self.timeout {
            if t.is_zero() || t > Duration::from_secs(24 * 3600) {
                return Err(SandboxError::invalid(
                    "timeout_s",
                    "must be more than 0 and at most 86400 seconds",
                ));
            }
        }
        for (k, _) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(SandboxError::invalid(
                    "env",
                    format!("`{k}` is not an environment variable name"),
                ));
            }
        }
        if self.stdin.as_ref().is_some_and(|s| s.len() > MAX_STDIN) {
            return Err(SandboxError::invalid(
                "stdin",
                format!("is more than {MAX_STDIN} bytes; write it to a workspace file and redirect from it"),
            ));
        }
        if let Some(c) = &self.cwd {
            if !c.starts_with('/') || c.contains('\0') {
                return Err(SandboxError::invalid(
                    "cwd",
                    format!("`{c}` is not an absolute path in the box (e.g. /workspace/src)"),
                ));
            }
        }
        Ok(())
    }

    /// Whether a box set up with the session's spec serves this call as it is.
    fn spec_unchanged(&self) -> bool {
        self.env.is_empty() && self.cwd.is_none() && self.stdin.is_none()
    }

    /// `base` with these options over it.
    fn apply(&self, base: &BoxSpec) -> BoxSpec {
        let mut spec = base.clone();
        for (k, v) in &self.env {
            spec.env.retain(|(n, _)| n != k);
            spec.env.push((k.clone(), v.clone()));
        }
        if let Some(c) = &self.cwd {
            spec.cwd.clone_from(c);
        }
        if let Some(t) = self.timeout {
            spec.timeout = t;
        }
        spec
    }
}

/// The longest bash, sh or node code passed on the interpreter's command line; longer code
/// runs from a file (the kernel refuses one argument over 128 KiB with E2BIG).
const ARGV_CODE_MAX: usize = 64 << 10;
/// Where a long cell's code is bound (read-only), a top-level directory of hull's own.
const CODE_DIR: &str = "/.hull-code";

/// A `workspace` that does not exist yet is made (0700, with any missing parents, as the
/// caller's) and kept after the session, as kern does; an existing path is left to the usual
/// checks (a file or a symlink there is refused by them, naming `workspace`).
fn make_missing_workspace(w: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::symlink_metadata(w) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(w)
            .map_err(|error| SandboxError::Io {
                what: "create the workspace",
                path: w.to_path_buf(),
                error,
            }),
        _ => Ok(()),
    }
}

impl Sandbox {
    /// Creates the session: checks every argument, makes the workspace, runs `setup` if given
    /// (the only box with a network), probes that a box can start, and fills the prewarm pool.
    pub fn create(
        backend: Arc<dyn Backend>,
        id: String,
        cfg: SandboxRequest,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        Self::create_streaming(backend, id, cfg, &mut NoSink)
    }

    /// [`create`](Self::create), the setup's output going to `setup_output` as it comes (a
    /// setup can run for minutes: `pip install` progress reaches the caller live).
    pub fn create_streaming(
        backend: Arc<dyn Backend>,
        id: String,
        cfg: SandboxRequest,
        setup_output: &mut dyn OutputSink,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let session = tempfile::Builder::new()
            .prefix(&leftover_prefix("sb"))
            .permissions(private_dir_mode())
            .tempdir()
            .map_err(|e| SandboxError::Io {
                what: "create the session directory in",
                path: std::env::temp_dir(),
                error: e,
            })?
            .keep();
        let made = Self::create_in(backend, id, cfg, &session, setup_output);
        if made.is_err() {
            remove_tree(&session);
        }
        made
    }

    fn create_in(
        backend: Arc<dyn Backend>,
        id: String,
        cfg: SandboxRequest,
        session: &Path,
        setup_output: &mut dyn OutputSink,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let ws_path = match &cfg.workspace {
            Some(w) => {
                make_missing_workspace(w)?;
                w.clone()
            }
            None => {
                let w = session.join("workspace");
                private_dir(&w).map_err(|e| SandboxError::Io {
                    what: "create",
                    path: w.clone(),
                    error: e,
                })?;
                // As host root, a VM's root writes as hull's range, never as host root
                // (`vm_ids`): the workspace hull made for it is the range's.
                if let (hull_api::Isolation::Vm, Some(r)) =
                    (backend.isolation(), crate::vm_ids::range())
                {
                    std::os::unix::fs::chown(&w, Some(r.uid), Some(r.gid)).map_err(|e| {
                        SandboxError::Io {
                            what: "give hull's range",
                            path: w.clone(),
                            error: e,
                        }
                    })?;
                }
                w
            }
        };
        let deps = session.join("deps");
        private_dir(&deps).map_err(|e| SandboxError::Io {
            what: "create",
            path: deps.clone(),
            error: e,
        })?;
        let base = crate::boxspec::sandbox_base(&cfg, &ws_path, &deps).map_err(|e| match e {
            crate::boxspec::BuildError::Image(error) => SandboxError::Image(Named {
                arg: "image",
                error,
            }),
            crate::boxspec::BuildError::Network(error) => SandboxError::Network(Named {
                arg: "network",
                error,
            }),
        })?;
        backend.check(&base).map_err(SandboxError::from_box)?;
        let workspace = backend.files(&ws_path)?;
        let (reaper, reaper_thread) = Reaper::start();
        let mut sb = Sandbox {
            id,
            backend,
            cfg,
            base,
            workspace,
            session: session.to_path_buf(),
            slots: Slots {
                used: Mutex::new(0),
                freed: Condvar::new(),
                max: max_parallel(),
            },
            reaper,
            reaper_thread: Mutex::new(Some(reaper_thread)),
            pool: Arc::default(),
            kernels: Mutex::new(HashMap::new()),
            next_kernel: AtomicU64::new(1),
            destroyed: AtomicBool::new(false),
            setup: None,
        };
        if let Some(cmd) = sb.cfg.setup.clone() {
            sb.setup = Some(sb.run_setup(Some(&cmd), &deps, setup_output)?);
        } else if crate::boxspec::has_deps(&sb.cfg) {
            // A writable /deps without a setup: the environment is made all the same, so a
            // call's `pip install` lands there (its result is no setup's: not kept).
            sb.run_setup(None, &deps, setup_output)?;
        } else if backend_is_vm(&sb.backend) {
            // A VM's boot takes seconds where it is emulated: its spec was checked above, and
            // what the guest cannot do is the first call's error.
        } else {
            // A box that cannot start should fail here, at construction, not at the first call.
            let mut probe = sb.base.clone();
            probe.argv = vec!["/bin/true".into()];
            probe.timeout = Duration::from_secs(10);
            let (_, destroy) = sb
                .backend
                .run(&probe, &mut NoSink)
                .map_err(SandboxError::from_box)?;
            destroy();
        }
        let sb = Arc::new(sb);
        if backend_is_vm(&sb.backend) {
            // A VM's guests are booted ahead by its backend (no runner box lives in a VM).
            sb.backend.prewarm(&sb.base);
        } else {
            sb.start_pool();
        }
        Ok(sb)
    }

    /// The setup box: the session's only network window. It runs `sh -c SETUP` with the host
    /// network and `/deps` writable, after making `/deps` a Python environment over the image's
    /// (see [`DEPS_ENV`]): pip there resolves against the packages the image has, so what it
    /// adds is one consistent set with them; byte-code is compiled, and the box dies when the
    /// command ends. `None`: only the environment is made (for a writable `/deps` without a
    /// setup), on the session's own network.
    fn run_setup(
        &self,
        cmd: Option<&str>,
        deps: &Path,
        output: &mut dyn OutputSink,
    ) -> Result<RunResult, SandboxError> {
        let mut spec = self.base.clone();
        if cmd.is_some() {
            spec.network = Network::Host;
        }
        spec.timeout = self.cfg.setup_timeout;
        for m in &mut spec.mounts {
            if m.target == DEPS_DIR {
                m.read_only = false;
            }
        }
        spec.env.extend([
            ("PIP_BREAK_SYSTEM_PACKAGES".to_string(), "1".to_string()),
            ("PIP_DISABLE_PIP_VERSION_CHECK".into(), "1".into()),
            ("PIP_NO_CACHE_DIR".into(), "1".into()),
            ("PIP_ROOT_USER_ACTION".into(), "ignore".into()),
            ("TMPDIR".into(), format!("{DEPS_DIR}/.tmp")),
        ]);
        let _ = std::fs::create_dir(deps.join(".tmp"));
        spec.argv = vec![
            "sh".into(),
            "-c".into(),
            format!(
                "set -e\n{DEPS_ENV}\n{}\npython3 -m compileall -q {DEPS_DIR} >/dev/null 2>&1 || true\n",
                cmd.unwrap_or(":")
            ),
        ];
        let (r, destroy) = self
            .backend
            .run(&spec, output)
            .map_err(SandboxError::from_box)?;
        destroy();
        remove_tree(&deps.join(".tmp"));
        if !r.success {
            let why = match &r.fault {
                Some(f) => format!("{}: {}", f.kind.as_str(), f.reason),
                None => format!("exit code {}", r.exit_code),
            };
            let tail: String = r
                .stderr
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(SandboxError::SetupFailed {
                command: cmd.unwrap_or("").to_string(),
                why,
                stderr_tail: tail,
            });
        }
        Ok(r)
    }

    /// Starts the prewarm thread, owing it `prewarm` boxes (none: no thread).
    fn start_pool(self: &Arc<Self>) {
        let n = self.cfg.prewarm;
        if n == 0 {
            return;
        }
        {
            let mut st = lock(&self.pool.stock);
            st.owed = n;
            st.kernel_owed = true;
        }
        self.pool.worker.start_once("hull-prewarm", || {
            let (pool, sandbox) = (Arc::clone(&self.pool), Arc::downgrade(self));
            move || keep_prewarmed(&pool, &sandbox)
        });
    }

    /// A prewarmed box, if one is ready. The caller asks for its replacement with [`refill`]
    /// once its call is done, so the new box's start does not compete with the call for CPU.
    fn take_warm(&self) -> Option<RunnerBox> {
        loop {
            let mut rb = lock(&self.pool.stock).boxes.pop_front()?;
            if !rb.is_gone() {
                self.pool.used.fetch_add(1, Ordering::Relaxed);
                return Some(rb);
            }
            self.refill();
        }
    }

    /// Owes the prewarm thread one more box.
    fn refill(&self) {
        lock(&self.pool.stock).owed += 1;
        self.pool.worker.wake();
    }

    fn check_alive(&self) -> Result<(), SandboxError> {
        if self.destroyed.load(Ordering::SeqCst) {
            return Err(SandboxError::Destroyed);
        }
        Ok(())
    }

    fn track<T>(
        &self,
        trace: &mut Option<CallTrace>,
        f: impl FnOnce(&mut Option<CallTrace>) -> Result<(T, RunResult, Vec<Value>), SandboxError>,
    ) -> Result<(T, ExecResult), SandboxError> {
        let before = if self.cfg.track_files {
            self.workspace.scan().ok()
        } else {
            None
        };
        calltrace::step(trace, "scan_before");
        let (t, mut run, results) = f(trace)?;
        let files = match (&before, self.cfg.track_files) {
            (Some(b), true) => match self.workspace.scan() {
                Ok(now) => {
                    if !(b.complete && now.complete) {
                        run.warnings.push(format!(
                            "files: the workspace holds more than {} entries, {} bytes of paths or {} levels of directories; changes were tracked only in the part scanned",
                            crate::files::MAX_ENTRIES,
                            crate::files::MAX_PATH_BYTES,
                            crate::files::MAX_DEPTH
                        ));
                    }
                    b.changed_since(&now)
                }
                Err(_) => Vec::new(),
            },
            _ => Vec::new(),
        };
        calltrace::step(trace, "scan_after");
        Ok((
            t,
            ExecResult {
                run,
                results,
                files,
            },
        ))
    }

    /// Runs code in a fresh box. Python goes through the cell runner (rich results, a prewarmed
    /// box when one is ready); bash, sh and node run their interpreter directly.
    pub fn run_code(
        &self,
        code: &str,
        language: Language,
        sink: Box<dyn OutputSink + Send>,
    ) -> Result<ExecResult, SandboxError> {
        self.run_code_answering(code, language, sink, |r| r)
    }

    /// [`run_code`](Self::run_code), handing the result to `answer` before the prewarmed box the
    /// call took is replaced: a server writes its answer there, so the caller does not wait for
    /// the replacement's start (nor share the CPU with it while its answer is written).
    pub fn run_code_answering<R>(
        &self,
        code: &str,
        language: Language,
        sink: Box<dyn OutputSink + Send>,
        answer: impl FnOnce(Result<ExecResult, SandboxError>) -> R,
    ) -> R {
        self.run_code_with(code, language, &CallOptions::default(), sink, answer)
    }

    /// [`run_code_answering`](Self::run_code_answering) with options of this call. A prewarmed
    /// box serves it when it can (no env or cwd of its own, a deadline within the session's);
    /// otherwise the call starts a box of its own with the options applied.
    pub fn run_code_with<R>(
        &self,
        code: &str,
        language: Language,
        opts: &CallOptions,
        sink: Box<dyn OutputSink + Send>,
        answer: impl FnOnce(Result<ExecResult, SandboxError>) -> R,
    ) -> R {
        if opts.stdin.is_some() {
            return answer(Err(SandboxError::invalid(
                "stdin",
                "run_code takes no standard input (the code is the program's input); run(argv, stdin=...) does",
            )));
        }
        if language != Language::Python {
            if code.len() <= ARGV_CODE_MAX {
                return answer(self.run_with(language.argv(code), opts, sink));
            }
            return answer(self.run_code_file(code, language, opts, sink));
        }
        if let Err(e) = self.check_alive().and_then(|()| opts.check()) {
            return answer(Err(e));
        }
        let timeout = opts.timeout.unwrap_or(self.cfg.timeout);
        let own_box = !opts.spec_unchanged() || timeout > self.cfg.timeout;
        let mut trace = CallTrace::start("sandbox.run_code");
        let _slot = self.slots.take();
        let t0 = std::time::Instant::now();
        let mut took_warm = false;
        let r = self.track(&mut trace, |trace| {
            let warm = if own_box { None } else { self.take_warm() };
            let rb = match warm {
                Some(rb) => {
                    took_warm = true;
                    calltrace::step(trace, "took_warm");
                    rb
                }
                None => match RunnerBox::start(
                    &self.backend,
                    &opts.apply(&self.base),
                    "once",
                    timeout + START_MARGIN,
                    &self.reaper,
                )? {
                    Started::Ready(rb) => rb,
                    Started::Ended(run) => return Ok(((), run, Vec::new())),
                },
            };
            let out = rb.run_once(code, timeout, sink, trace)?;
            Ok(((), out.run, out.results))
        });
        // The call's duration includes starting its box when none was ready.
        let r = r.map(|(_, mut r)| {
            r.run.duration_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
            r
        });
        drop(_slot);
        let answered = answer(r);
        calltrace::step(&mut trace, "answered");
        if took_warm {
            self.refill();
        }
        answered
    }

    /// Runs an argv in a fresh box.
    pub fn run(
        &self,
        argv: Vec<String>,
        sink: Box<dyn OutputSink + Send>,
    ) -> Result<ExecResult, SandboxError> {
        self.run_with(argv, &CallOptions::default(), sink)
    }

    /// [`run`](Self::run) with options of this call.
    pub fn run_with(
        &self,
        argv: Vec<String>,
        opts: &CallOptions,
        sink: Box<dyn OutputSink + Send>,
    ) -> Result<ExecResult, SandboxError> {
        self.check_alive()?;
        opts.check()?;
        if argv.is_empty() {
            return Err(SandboxError::invalid(
                "argv",
                "give the command and its arguments, e.g. [\"ls\", \"-l\"]",
            ));
        }
        let mut spec = opts.apply(&self.base);
        spec.argv = argv;
        // The input in a private file the supervisor opens as the program's fd 0; removed when
        // the call is done.
        let input = match &opts.stdin {
            None => None,
            Some(data) => {
                let mut f = tempfile::Builder::new()
                    .prefix(&leftover_prefix("stdin"))
                    .tempfile()
                    .map_err(|e| SandboxError::Io {
                        what: "create a file for the call's standard input in",
                        path: std::env::temp_dir(),
                        error: e,
                    })?;
                std::io::Write::write_all(&mut f, data).map_err(|e| SandboxError::Io {
                    what: "write the call's standard input to",
                    path: f.path().to_path_buf(),
                    error: e,
                })?;
                spec.stdin = hull_box::spec::Stdin::File(f.path().to_path_buf());
                Some(f)
            }
        };
        let r = self.run_spec(&spec, sink);
        drop(input);
        r
    }

    /// Runs bash, sh or node code too long for a command line (the kernel takes at most
    /// 128 KiB per argument): the code goes in a file of a private directory, bound read-only
    /// at [`CODE_DIR`], and the interpreter runs that file.
    fn run_code_file(
        &self,
        code: &str,
        language: Language,
        opts: &CallOptions,
        sink: Box<dyn OutputSink + Send>,
    ) -> Result<ExecResult, SandboxError> {
        self.check_alive()?;
        opts.check()?;
        let dir = tempfile::Builder::new()
            .prefix(&leftover_prefix("code"))
            .permissions(private_dir_mode())
            .tempdir()
            .map_err(|e| SandboxError::Io {
                what: "create a directory for the cell's code in",
                path: std::env::temp_dir(),
                error: e,
            })?;
        let file = dir.path().join("cell");
        std::fs::write(&file, code).map_err(|error| SandboxError::Io {
            what: "write the cell's code to",
            path: file,
            error,
        })?;
        let mut spec = opts.apply(&self.base);
        spec.mounts.push(hull_box::BindMount {
            source: dir.path().to_path_buf(),
            target: CODE_DIR.into(),
            read_only: true,
        });
        spec.argv = vec![language.interpreter().into(), format!("{CODE_DIR}/cell")];
        self.run_spec(&spec, sink)
    }

    /// Runs `spec` in a fresh box of this session.
    fn run_spec(
        &self,
        spec: &BoxSpec,
        sink: Box<dyn OutputSink + Send>,
    ) -> Result<ExecResult, SandboxError> {
        let _slot = self.slots.take();
        let mut sink = sink;
        let mut trace = CallTrace::start("sandbox.run");
        let ((), r) = self.track(&mut trace, |_| {
            let (run, destroy) = self
                .backend
                .run(spec, &mut *sink)
                .map_err(SandboxError::from_box)?;
            self.reaper.give(destroy);
            Ok(((), run, Vec::new()))
        })?;
        Ok(r)
    }

    pub fn files(&self) -> &Confined {
        &self.workspace
    }

    /// Starts a kernel: one warm interpreter in a long-lived box.
    pub fn kernel(&self) -> Result<Arc<Kernel>, SandboxError> {
        self.kernel_answering(|k| k)
    }

    /// [`kernel`](Self::kernel), handing the kernel to `answer` before the kernel box started
    /// ahead (with `prewarm` > 0) that it took is replaced, so the caller does not wait for the
    /// replacement (nor share the CPU with it while its answer is written).
    pub fn kernel_answering<R>(
        &self,
        answer: impl FnOnce(Result<Arc<Kernel>, SandboxError>) -> R,
    ) -> R {
        let mut trace = CallTrace::start("kernel.start");
        let warm = self.take_warm_kernel();
        let took = warm.is_some();
        let k = self.start_kernel(warm);
        calltrace::step(&mut trace, if took { "took_warm" } else { "started" });
        let answered = answer(k);
        calltrace::step(&mut trace, "answered");
        if took {
            lock(&self.pool.stock).kernel_owed = true;
            self.pool.worker.wake();
        }
        answered
    }

    /// The kernel box started ahead, if one is ready and alive.
    fn take_warm_kernel(&self) -> Option<RunnerBox> {
        let mut rb = lock(&self.pool.stock).kernel.take()?;
        if rb.is_gone() {
            lock(&self.pool.stock).kernel_owed = true;
            self.pool.worker.wake();
            return None;
        }
        Some(rb)
    }

    fn start_kernel(&self, warm: Option<RunnerBox>) -> Result<Arc<Kernel>, SandboxError> {
        self.check_alive()?;
        if backend_is_vm(&self.backend) {
            return Err(SandboxError::Invalid {
                arg: "isolation".into(),
                why: "kernels are not supported with isolation vm yet (the runner's channel does not reach a guest); run cells with run_code".into(),
            });
        }
        let id = format!(
            "{}-k{}",
            self.id,
            self.next_kernel.fetch_add(1, Ordering::SeqCst)
        );
        let rb = if let Some(rb) = warm {
            rb
        } else {
            match RunnerBox::start(
                &self.backend,
                &self.base,
                "kernel",
                KERNEL_LIFE,
                &self.reaper,
            )? {
                Started::Ready(rb) => rb,
                Started::Ended(run) => {
                    let why = run.fault.as_ref().map_or_else(
                        || format!("exit code {}: {}", run.exit_code, run.stderr.trim()),
                        |f| f.reason.clone(),
                    );
                    return Err(SandboxError::Runner(format!(
                        "of the kernel ended before it was ready ({why})"
                    )));
                }
            }
        };
        let killer = rb.killer()?;
        let k = Arc::new(Kernel {
            id: id.clone(),
            rb: Mutex::new(Ok(rb)),
            killer,
            attached: AtomicBool::new(false),
        });
        if let Ok(mut m) = self.kernels.lock() {
            m.insert(id, Arc::clone(&k));
        }
        Ok(k)
    }

    pub fn get_kernel(&self, id: &str) -> Option<Arc<Kernel>> {
        self.kernels.lock().ok()?.get(id).cloned()
    }

    /// Runs a cell in a kernel; state persists between cells. A cell that times out or kills
    /// the interpreter ends the kernel (its result says why; later cells are refused).
    pub fn kernel_run(
        &self,
        k: &Kernel,
        code: &str,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, SandboxError> {
        self.kernel_run_with(k, code, None, sink)
    }

    /// [`kernel_run`](Self::kernel_run) with a deadline of this cell's (the session's when
    /// None).
    pub fn kernel_run_with(
        &self,
        k: &Kernel,
        code: &str,
        timeout: Option<Duration>,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, SandboxError> {
        self.check_alive()?;
        CallOptions {
            timeout,
            ..CallOptions::default()
        }
        .check()?;
        let timeout = timeout.unwrap_or(self.cfg.timeout);
        let max_output = self.base.max_output;
        let mut trace = CallTrace::start("kernel.run_code");
        let ((), r) = self.track(&mut trace, |trace| {
            let mut g =
                k.rb.lock()
                    .map_err(|_poison| SandboxError::Runner("kernel lock poisoned".into()))?;
            calltrace::step(trace, "locked");
            let rb = match g.as_mut() {
                Ok(rb) => rb,
                Err(why) => return Err(SandboxError::KernelDead(k.id.clone(), why.clone())),
            };
            if k.attached.load(Ordering::SeqCst) {
                return Err(SandboxError::Invalid {
                    arg: "kernel".into(),
                    why: format!("kernel {} is attached to its caller, whose cells go over the channel it took (kernel.attach)", k.id),
                });
            }
            let cell = rb.run_kernel_cell(code, timeout, max_output, sink, trace)?;
            calltrace::step(trace, "done_frame");
            match cell {
                Ok(out) => Ok(((), out.run, out.results)),
                Err(out) => {
                    *g = Err(dead_reason(&out.run));
                    Ok(((), out.run, out.results))
                }
            }
        })?;
        Ok(r)
    }

    /// Hands the kernel's channel to its caller, who then sends its cells and reads their
    /// frames without this layer in between (one process less on each cell's path). Once only:
    /// from then on [`kernel_run`](Self::kernel_run) refuses the kernel, and the caller reports a
    /// cell that did not end with `done` through [`kernel_end`](Self::kernel_end).
    pub fn kernel_attach(&self, k: &Kernel) -> Result<KernelChannel, SandboxError> {
        self.check_alive()?;
        let g =
            k.rb.lock()
                .map_err(|_poison| SandboxError::Runner("kernel lock poisoned".into()))?;
        let rb = match g.as_ref() {
            Ok(rb) => rb,
            Err(why) => return Err(SandboxError::KernelDead(k.id.clone(), why.clone())),
        };
        // The descriptor first: a kernel whose channel could not be duplicated stays usable.
        let channel = rb.channel()?;
        if k.attached.swap(true, Ordering::SeqCst) {
            return Err(SandboxError::Invalid {
                arg: "kernel".into(),
                why: format!(
                    "kernel {} is attached already (its channel is handed over once)",
                    k.id
                ),
            });
        }
        Ok(KernelChannel {
            channel,
            max_output: self.base.max_output,
            timeout: self.cfg.timeout,
            workspace: self
                .cfg
                .track_files
                .then(|| self.workspace.root().to_path_buf()),
        })
    }

    /// Ends an attached kernel whose cell did not end with `done` (`end` says why, as its
    /// caller saw it): kills its box, waits for it and returns the box's result, whose fault
    /// (a timeout, the OOM killer, a crash) explains the end. Later cells are refused.
    pub fn kernel_end(&self, k: &Kernel, end: CellEnd) -> Result<RunResult, SandboxError> {
        if !k.attached.load(Ordering::SeqCst) {
            return Err(SandboxError::Invalid {
                arg: "kernel".into(),
                why: format!(
                    "kernel {} is not attached; its cells end through kernel.run_code",
                    k.id
                ),
            });
        }
        let mut g =
            k.rb.lock()
                .map_err(|_poison| SandboxError::Runner("kernel lock poisoned".into()))?;
        let rb = match g.as_mut() {
            Ok(rb) => rb,
            Err(why) => return Err(SandboxError::KernelDead(k.id.clone(), why.clone())),
        };
        let run = rb.end_cell(end)?;
        *g = Err(dead_reason(&run));
        Ok(run)
    }

    pub fn close_kernel(&self, id: &str) -> bool {
        let k = self.kernels.lock().ok().and_then(|mut m| m.remove(id));
        if let Some(k) = k {
            k.kill();
            if let Ok(mut g) = k.rb.lock() {
                *g = Err("closed".into());
            }
            true
        } else {
            false
        }
    }

    /// Ends every box of the session and removes its directories. Idempotent.
    pub fn destroy(&self) {
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return;
        }
        // After the box it may be starting (kept until the clear below).
        self.pool.worker.stop();
        self.pool.worker.join();
        {
            let mut st = lock(&self.pool.stock);
            st.boxes.clear();
            st.kernel = None;
        }
        let ks: Vec<String> = self
            .kernels
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for k in ks {
            self.close_kernel(&k);
        }
    }

    /// Waits until every box teardown handed to the reaper is done (boxes reaped, cgroups gone).
    fn join_reaper(&mut self) {
        let (dummy, _) = mpsc::channel();
        self.reaper = Reaper::from_sender(dummy);
        if let Some(h) = self.reaper_thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = h.join();
        }
    }

    /// What the prewarmed boxes have done and hold.
    pub fn warm_stats(&self) -> PrewarmStats {
        let st = lock(&self.pool.stock);
        PrewarmStats {
            ready: st.boxes.len(),
            used: self.pool.used.load(Ordering::Relaxed),
            kernels_ready: usize::from(st.kernel.is_some()),
        }
    }

    pub fn workspace_path(&self) -> &Path {
        self.workspace.root()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.destroy();
        self.join_reaper();
        remove_tree(&self.session);
    }
}

/// The prewarm thread: starts a box for each one owed, until the Sandbox is destroyed or gone
/// (it holds the Sandbox only while starting one, so dropping it is not delayed).
fn keep_prewarmed(pool: &Prewarm, sandbox: &Weak<Sandbox>) {
    loop {
        let kernel = {
            let mut st = lock(&pool.stock);
            loop {
                if pool.worker.stopping() {
                    return;
                }
                // Boxes for calls first; then the kernel box.
                if st.owed > 0 {
                    st.owed -= 1;
                    break false;
                }
                if st.kernel_owed {
                    st.kernel_owed = false;
                    break true;
                }
                st = pool.worker.sleep(st);
            }
        };
        let Some(sb) = sandbox.upgrade() else { return };
        if sb.destroyed.load(Ordering::SeqCst) {
            return;
        }
        let (mode, life) = if kernel {
            ("kernel", KERNEL_LIFE)
        } else {
            ("once", POOL_IDLE + sb.cfg.timeout)
        };
        if let Ok(Started::Ready(rb)) =
            RunnerBox::start(&sb.backend, &sb.base, mode, life, &sb.reaper)
        {
            let mut st = lock(&pool.stock);
            if kernel {
                st.kernel = Some(rb);
            } else {
                st.boxes.push_back(rb);
            }
        }
    }
}

/// Whether `backend` runs its boxes as microVMs.
fn backend_is_vm(backend: &Arc<dyn Backend>) -> bool {
    backend.isolation() == hull_api::Isolation::Vm
}
