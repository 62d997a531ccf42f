//! One VM run from the host: the guest's pieces found, the initramfs ensured, one virtiofsd
//! per share and QEMU started (each with its output in the run's private directory), the
//! agent's connection accepted, the program run through it with its output streamed, and
//! everything killed and removed at the end. The program's deadline is kept from outside:
//! at the deadline the VM is killed, whatever the guest is doing.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;

use crate::accel::{self, Accel};
use crate::assets::{Guest, Tools};
use crate::error::VmError;
use crate::proto::{self, Ask, Exec, Stream, Tell};
use crate::qemu::{Machine, Share};
pub use crate::share::ShareIds;
pub use crate::sys::Ids;

/// What to run in a VM.
#[derive(Clone, Debug, PartialEq)]
pub struct VmRun {
    /// The image's unpacked root, shared read-only.
    pub root: PathBuf,
    /// Shared read-write at `/workspace`.
    pub workspace: PathBuf,
    /// As host root (required then): the host ids the guest's root is on the image's root,
    /// and what QEMU runs as once it has opened its files (hull's range, never host root).
    /// `None` for an unprivileged caller: the guest's root is the caller on every share.
    pub ids: Option<Ids>,
    /// As host root (required then): how the guest's root's ids on the workspace are chosen.
    pub workspace_ids: Option<ShareIds>,
    /// Host directories shared at paths of the program's root.
    pub mounts: Vec<VmMount>,
    /// Files copied into the guest, bound read-only after the shares (a share is a directory).
    pub files: Vec<VmFile>,
    /// Sizes of the program's `/tmp` and `/dev/shm`, in bytes.
    pub tmp_size: u64,
    pub shm_size: u64,
    pub exec: Exec,
    /// Guest RAM in bytes.
    pub memory: u64,
    pub cpus: u32,
    /// The program's deadline (from the request sent to the agent).
    pub timeout: Duration,
    /// How long the guest may take to boot and answer `ready`.
    pub boot_timeout: Duration,
    /// Refuse to run emulated (TCG).
    pub require_kvm: bool,
    /// Where the initramfs is cached.
    pub cache: PathBuf,
    /// Where the run's private directory (sockets, logs) is made.
    pub scratch: PathBuf,
    /// Output kept per stream in the outcome (the sink sees all of it).
    pub max_output: u64,
    /// The gateway network (none: no network device); its link is given to [`run_linked`].
    pub net: Option<VmNet>,
}

/// A VM's gateway network: a virtio-net device whose frames travel as datagrams on the link
/// socket [`run_linked`] is given (its other end is the gateway's), configured in the guest
/// as a namespace box's TAP is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmNet {
    /// The device's MAC (the box's, so the gateway sees the same link).
    pub mac: [u8; 6],
    /// The device's MTU (QEMU's `host_mtu`, which the guest's driver takes).
    pub mtu: u32,
    /// The program's `/etc/resolv.conf`.
    pub resolv_conf: String,
}

/// A host directory shared with the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmMount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
    /// As host root (required then): how the guest's root's ids on this share are chosen.
    pub ids: Option<ShareIds>,
}

/// A file's bytes, seen read-only at `target` in the program's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmFile {
    pub bytes: Vec<u8>,
    pub target: String,
    /// Permission bits (set-id bits are dropped).
    pub mode: u32,
}

/// How a VM run ended.
#[derive(Clone, Debug, Default)]
pub struct VmOutcome {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub oom: bool,
    pub timed_out: bool,
    /// The program could not be started: why (its `code` is 127 or 126).
    pub exec_failed: Option<String>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
    pub dropped_bytes: u64,
    /// `kvm` or `tcg`.
    pub accel: &'static str,
    /// The guest kernel's release.
    pub kernel: String,
    /// From QEMU's start to the agent's `ready`.
    pub boot: Duration,
    /// From the request to the program's end.
    pub duration: Duration,
    pub warnings: Vec<String>,
    /// The forwarded signal (SIGINT, SIGTERM, SIGHUP) hull received, which ended the VM.
    pub interrupted: Option<i32>,
}

pub use crate::leftovers::{sweep, DIR_PREFIX};

/// A child process killed and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The last `n` bytes of a file, as text (QEMU's stderr, the console).
fn tail(path: &Path, n: usize) -> String {
    let data = std::fs::read(path).unwrap_or_default();
    let from = data.len().saturating_sub(n);
    String::from_utf8_lossy(&data[from..]).into_owned()
}

/// What QEMU and the file servers of the run in `dir` said last (their logs' tails), for an
/// error: QEMU's stderr, then each virtiofsd's that said anything.
fn helper_logs(dir: &Path) -> String {
    let mut said = tail(&dir.join("qemu.err"), 2000).trim().to_owned();
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    logs.retain(|p| p.extension().is_some_and(|e| e == "log") && !p.ends_with("console.log"));
    logs.sort();
    for log in logs {
        let t = tail(&log, 1000);
        if !t.trim().is_empty() {
            let name = log.file_stem().unwrap_or_default().to_string_lossy();
            said.push_str(&format!(" [virtiofsd for {name}: {}]", t.trim()));
        }
    }
    said
}

/// Starts virtiofsd for `dir`, listening on `sock`: hull binds it and passes the listening
/// descriptor (`--fd`), so QEMU can connect at once (its requests wait in the socket until
/// virtiofsd reads them) and, as host root, a virtiofsd that is not root needs no right to
/// the run's private directory. If virtiofsd dies, the socket is closed with it and QEMU's
/// connection fails: the error then shows the helpers' logs ([`helper_logs`]).
fn virtiofsd(
    tools: &Tools,
    dir: &Path,
    sock: &Path,
    log: &Path,
    readonly: bool,
    ids: Option<ShareIds>,
) -> Result<Proc, VmError> {
    // As host root: the directory opened once (its owner read from it, not from its path
    // again), the helper started in it.
    let opened = match ids {
        Some(how) => {
            Some(
                crate::share::open(dir, how, readonly).map_err(|error| VmError::Share {
                    path: dir.to_path_buf(),
                    error,
                })?,
            )
        }
        None => None,
    };
    let out = std::fs::File::create(log).map_err(|source| VmError::Io {
        step: "making virtiofsd's log",
        source,
    })?;
    let listener = UnixListener::bind(sock).map_err(|source| VmError::Io {
        step: "making virtiofsd's socket",
        source,
    })?;
    let mut cmd = Command::new(&tools.virtiofsd);
    cmd.arg("--shared-dir");
    // As host root the helper cannot look up a path through host root's directories (the
    // store is in root's home): it starts in the directory, which it shares as `.`.
    if let Some((fd, _)) = &opened {
        crate::sys::enter_dir(&mut cmd, fd);
        cmd.arg(".");
    } else {
        cmd.arg(dir);
    }
    cmd.args(["--fd", "3"]).args([
        "--sandbox",
        "namespace",
        "--cache",
        "auto",
        "--log-level",
        "error",
    ]);
    if readonly {
        cmd.arg("--readonly");
    }
    // The guest's root is one host user on the share, never host root: virtiofsd's user
    // namespace maps its root to the caller, as a namespace box's root is, so files the guest
    // makes belong to the caller; as host root (where virtiofsd refuses `--uid-map`) hull
    // makes that namespace itself, mapped to `ids` (hull's range or the share's owner).
    let mapper = match opened.as_ref().map(|o| o.1) {
        Some(ids) => Some(
            crate::sys::in_userns(&mut cmd, ids).map_err(|source| VmError::Io {
                step: "making virtiofsd's user namespace",
                source,
            })?,
        ),
        None => {
            let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
            cmd.arg(format!("--uid-map=:0:{}:1:", uid.as_raw()))
                .arg(format!("--gid-map=:0:{}:1:", gid.as_raw()));
            None
        }
    };
    let err = out.try_clone().map_err(|source| VmError::Io {
        step: "making virtiofsd's log",
        source,
    })?;
    crate::sys::pass_fd(&mut cmd, &listener, 3);
    crate::sys::as_helper(&mut cmd, 4);
    let spawned = cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn();
    let unmapped = mapper.and_then(crate::sys::MapWriter::finish);
    let child = spawned.map_err(|e| VmError::Start {
        step: "starting virtiofsd",
        detail: match unmapped {
            Some(why) => format!("its user namespace could not be mapped ({why})"),
            None => format!("{}: {e}", tools.virtiofsd.display()),
        },
    })?;
    drop(listener);
    Ok(Proc(child))
}

/// The agent's side of the channel, read line by line against deadlines.
struct Channel {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    line: Vec<u8>,
    /// Whether a forwarded signal ends the wait ([`Read1::Signal`]): only for the run the
    /// caller waits on, never for a VM booted ahead (the signal is someone else's).
    signals: bool,
}

/// Streams `input` to the guest as [`Ask::Stdin`] frames on `port`, then [`Ask::StdinEnd`], on
/// a thread that ends with the input or the channel (never joined: see [`Input`]). Only this
/// thread writes the channel while the program runs.
fn feed(mut input: Input, mut port: UnixStream) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; proto::CHUNK];
        loop {
            let n = match input.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A non-blocking descriptor the caller gave: its bytes come later.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(_) => 0,
            };
            let frame = if n == 0 {
                Ask::StdinEnd
            } else {
                Ask::Stdin {
                    b64: base64::engine::general_purpose::STANDARD.encode(&buf[..n]),
                }
            };
            if port.write_all(&proto::line(&frame)).is_err() || n == 0 {
                return;
            }
        }
    });
}

/// What reading a frame came to.
enum Read1 {
    Frame(Tell),
    Deadline,
    Closed,
    /// A forwarded signal reached hull ([`crate::sys::FORWARDED`]).
    Signal(i32),
}

impl Channel {
    fn next(&mut self, deadline: Instant) -> Result<Read1, VmError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Read1::Deadline);
            }
            if let Some(sig) = self.signals.then(crate::sys::pending_forwarded).flatten() {
                return Ok(Read1::Signal(sig));
            }
            // At most 100 ms a wait, so the caller's checks run.
            let wait = left.min(Duration::from_millis(100));
            let _ = self.reader.get_ref().set_read_timeout(Some(wait));
            let room = (proto::MAX_LINE + 1).saturating_sub(self.line.len()) as u64;
            match (&mut self.reader)
                .take(room)
                .read_until(b'\n', &mut self.line)
            {
                Ok(0) => return Ok(Read1::Closed),
                Ok(_) if self.line.ends_with(b"\n") => {
                    let frame =
                        serde_json::from_slice::<Tell>(&self.line).map_err(|e| VmError::Protocol {
                            why: format!("a frame that is not JSON of the protocol ({e})"),
                        });
                    self.line.clear();
                    return frame.map(Read1::Frame);
                }
                Ok(_) if self.line.len() > proto::MAX_LINE => {
                    return Err(VmError::Protocol {
                        why: format!("a line over {} bytes", proto::MAX_LINE),
                    })
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(source) => {
                    return Err(VmError::Io {
                        step: "reading the agent channel",
                        source,
                    })
                }
            }
        }
    }

    fn send(&mut self, ask: &Ask) -> Result<(), VmError> {
        self.writer
            .write_all(&proto::line(ask))
            .map_err(|source| VmError::Io {
                step: "writing the agent channel",
                source,
            })
    }
}

/// Accepts QEMU's connection to the agent socket (it connects as it starts).
fn accept(
    listener: &UnixListener,
    qemu: &mut Proc,
    dir: &Path,
    signals: bool,
) -> Result<Option<UnixStream>, VmError> {
    listener
        .set_nonblocking(true)
        .map_err(|source| VmError::Io {
            step: "listening for the agent channel",
            source,
        })?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                return Ok(Some(s));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(source) => {
                return Err(VmError::Io {
                    step: "accepting the agent channel",
                    source,
                })
            }
        }
        // A signal for hull first: a terminal's Ctrl-C also ends QEMU.
        if signals && crate::sys::forwarded_is_pending() {
            return Ok(None);
        }
        if let Ok(Some(st)) = qemu.0.try_wait() {
            return Err(VmError::Start {
                step: "starting QEMU",
                detail: format!("it exited ({st}): {}", helper_logs(dir)),
            });
        }
        if Instant::now() > deadline {
            return Err(VmError::Start {
                step: "starting QEMU",
                detail: format!(
                    "it did not connect the agent channel within 30 s: {}",
                    helper_logs(dir)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `run` in a fresh VM; `sink` gets the program's output as it comes.
pub fn run(run: &VmRun, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<VmOutcome, VmError> {
    run_linked(run, None, None, sink)
}

/// The program's standard input, read on a thread of its own while the program runs (a file,
/// or `hull run -i`'s fd 0). Left to itself once the program ends: a terminal's read does
/// not end with it.
pub type Input = Box<dyn std::io::Read + Send>;

/// [`run`], the VM's network device on `link` (a connected `SOCK_DGRAM` unix socket, one
/// Ethernet frame per datagram) when `run.net` asks for one, and the program's standard input
/// streamed from `input` (`run.exec.stdin` must say so).
pub fn run_linked(
    run: &VmRun,
    link: Option<std::os::fd::OwnedFd>,
    input: Option<Input>,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<VmOutcome, VmError> {
    // SIGINT, SIGTERM and SIGHUP end the VM and are reported, as they end a namespace box,
    // instead of ending hull with the VM's result untold; threads started from here (and the
    // helpers' own masks, reset at their exec) inherit the block.
    let _signals = answer_signals()?;
    match start_vm(run, link, true)? {
        Started::Ready(vm) => vm.exec(run, input, sink),
        Started::Interrupted(out) => Ok(out),
    }
}

/// A guest booted and waiting for its program: its helpers, its private directory and its
/// agent channel. Dropped unused, its VM ends and its directory goes.
pub struct Booted {
    // Held for their drop, in this order: QEMU before the shares' helpers, the directory last.
    _qemu: Proc,
    _root_fs: Proc,
    _ws_fs: Proc,
    _mount_fs: Vec<Proc>,
    chan: Channel,
    console: PathBuf,
    accel: Accel,
    kernel: String,
    boot: Duration,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for Booted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Booted")
            .field("dir", &self.dir.path())
            .field("kernel", &self.kernel)
            .finish_non_exhaustive()
    }
}

/// Boots `run`'s guest ahead of its program (no network device: a gateway's link is per run),
/// for [`Booted::exec`] later with a program of the same `run`'s but for its `exec`, deadline
/// and output cap. Forwarded signals are left to whoever waits on a run.
pub fn boot(run: &VmRun) -> Result<Booted, VmError> {
    if run.net.is_some() {
        return Err(VmError::Protocol {
            why: "a VM with a network device is booted with its run (its link is the run's)".into(),
        });
    }
    let _signals = answer_signals()?;
    match start_vm(run, None, false)? {
        Started::Ready(vm) => Ok(vm),
        Started::Interrupted(_) => Err(VmError::Protocol {
            why: "a VM booted ahead answered a signal".into(),
        }),
    }
}

/// Blocks the forwarded signals in this thread while the guard lives, for
/// [`crate::sys::pending_forwarded`] to take them.
fn answer_signals() -> Result<crate::sys::ForwardedBlocked, VmError> {
    crate::sys::ForwardedBlocked::block().map_err(|source| VmError::Io {
        step: "blocking the signals a VM's run answers",
        source,
    })
}

/// A VM's start ended by the forwarded signal `sig`.
fn interrupted(accel: &Accel, started: Instant, sig: i32) -> Started {
    Started::Interrupted(VmOutcome {
        accel: accel.name(),
        boot: started.elapsed(),
        signal: Some(libc::SIGKILL),
        interrupted: Some(sig),
        ..VmOutcome::default()
    })
}

/// The forwarded signal pending, taken (SIGINT if another thread took it first).
fn taken_signal() -> i32 {
    crate::sys::pending_forwarded().unwrap_or(libc::SIGINT)
}

/// What starting a VM came to.
enum Started {
    Ready(Booted),
    /// A forwarded signal ended it before its guest was ready.
    Interrupted(VmOutcome),
}

/// Starts `run`'s helpers and QEMU and waits for the guest's `ready`; `signals`: a forwarded
/// signal ends the wait.
fn start_vm(
    run: &VmRun,
    link: Option<std::os::fd::OwnedFd>,
    signals: bool,
) -> Result<Started, VmError> {
    if run.net.is_some() != link.is_some() {
        return Err(VmError::Protocol {
            why: "a network device needs its link socket, and a link its device".into(),
        });
    }
    if rustix::process::geteuid().is_root()
        && (run.ids.is_none()
            || run.workspace_ids.is_none()
            || run.mounts.iter().any(|m| m.ids.is_none()))
    {
        return Err(VmError::HostRoot);
    }
    sweep(&run.scratch);
    let guest = Guest::find()?;
    let tools = Tools::find()?;
    let accel = crate::kvm_probe::choose(&tools.qemu, &guest.kernel, &run.cache);
    if let (true, Accel::Tcg { why }) = (run.require_kvm, &accel) {
        return Err(VmError::KvmRequired { why: why.clone() });
    }
    let initramfs = crate::initramfs::ensure(&guest, &run.cache).map_err(|source| VmError::Io {
        step: "making the guest's initramfs",
        source,
    })?;
    // A signal taken during the trial or the initramfs's build ends the run before any helper.
    if signals && crate::sys::forwarded_is_pending() {
        return Ok(interrupted(&accel, Instant::now(), taken_signal()));
    }
    let io = |step| move |source| VmError::Io { step, source };
    std::fs::create_dir_all(&run.scratch).map_err(io("making the VM's private directory"))?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("{DIR_PREFIX}{}-", std::process::id()))
        .tempdir_in(&run.scratch)
        .map_err(io("making the VM's private directory"))?;
    let d = dir.path();
    let root_fs = virtiofsd(
        &tools,
        &run.root,
        &d.join("root.sock"),
        &d.join("root.log"),
        true,
        run.ids.map(ShareIds::Fixed),
    )?;
    let ws_fs = virtiofsd(
        &tools,
        &run.workspace,
        &d.join("ws.sock"),
        &d.join("ws.log"),
        false,
        run.workspace_ids,
    )?;
    let mut mount_fs = Vec::new();
    let mut guest_mounts = Vec::new();
    let mut shares = vec![
        Share {
            tag: proto::ROOT_TAG.into(),
            socket: d.join("root.sock"),
        },
        Share {
            tag: proto::WORKSPACE_TAG.into(),
            socket: d.join("ws.sock"),
        },
    ];
    for (i, m) in run.mounts.iter().enumerate() {
        let sock = d.join(format!("m{i}.sock"));
        mount_fs.push(virtiofsd(
            &tools,
            &m.source,
            &sock,
            &d.join(format!("m{i}.log")),
            m.read_only,
            m.ids,
        )?);
        let tag = format!("hull.m{i}");
        shares.push(Share {
            tag: tag.clone(),
            socket: sock,
        });
        guest_mounts.push(proto::GuestMount {
            tag,
            target: m.target.clone(),
            read_only: m.read_only,
        });
    }
    let listener =
        UnixListener::bind(d.join("agent.sock")).map_err(io("listening for the agent channel"))?;
    // As host root, QEMU gives up root once its files are open: hull's ids, in an empty root.
    let run_as = match run.ids {
        Some(ids) => {
            let empty = d.join("empty");
            std::fs::create_dir(&empty).map_err(io("making QEMU's empty root"))?;
            Some((ids, empty))
        }
        None => None,
    };
    let machine = Machine {
        accel: accel.clone(),
        kernel: guest.kernel.clone(),
        initramfs,
        memory_mib: (run.memory >> 20).max(128),
        cpus: run.cpus.max(1),
        shares,
        agent: d.join("agent.sock"),
        console: d.join("console.log"),
        tsc_khz: accel::host_tsc_khz(),
        run_as,
        net: run.net.as_ref().map(|n| (n.mac, n.mtu)),
    };
    let err_log = d.join("qemu.err");
    let err_file = std::fs::File::create(&err_log).map_err(io("making QEMU's log"))?;
    let started = Instant::now();
    let mut qemu_cmd = Command::new(&tools.qemu);
    if let Some(l) = &link {
        crate::sys::pass_fd(&mut qemu_cmd, l, crate::qemu::NET_FD);
    }
    crate::sys::as_helper(&mut qemu_cmd, if link.is_some() { 4 } else { 3 });
    // As host root QEMU changes its ids (`-run-with`), which clears its death signal: it runs
    // under an init of its own that keeps one, so it still dies with this hull.
    if machine.run_as.is_some() {
        crate::sys::in_own_pid_ns(&mut qemu_cmd);
    }
    let mut qemu = Proc(
        qemu_cmd
            .args(machine.argv())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .spawn()
            .map_err(|e| VmError::Start {
                step: "starting QEMU",
                detail: format!("{}: {e}", tools.qemu.display()),
            })?,
    );
    // QEMU holds its end of the network link now: ours would keep the gateway's frames
    // queued after QEMU died instead of refused.
    drop(link);
    let Some(stream) = accept(&listener, &mut qemu, d, signals)? else {
        return Ok(interrupted(&accel, started, taken_signal()));
    };
    let mut chan = Channel {
        reader: BufReader::new(
            stream
                .try_clone()
                .map_err(io("opening the agent channel"))?,
        ),
        writer: stream,
        line: Vec::new(),
        signals,
    };
    chan.send(&Ask::Boot(proto::Boot {
        mounts: guest_mounts,
        files: run
            .files
            .iter()
            .map(|f| proto::GuestFile {
                target: f.target.clone(),
                mode: f.mode & 0o777,
                b64: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &f.bytes),
            })
            .collect(),
        tmp_size: run.tmp_size,
        shm_size: run.shm_size,
        net: run.net.as_ref().map(|n| proto::GuestNet {
            resolv_conf: n.resolv_conf.clone(),
        }),
    }))?;
    let failed_boot = |what: String| VmError::Start {
        step: "booting the guest",
        detail: format!(
            "{what}; its console said: {} {}",
            tail(&machine.console, 3000),
            helper_logs(d)
        ),
    };
    let kernel = match chan.next(started + run.boot_timeout)? {
        Read1::Frame(Tell::Ready { kernel }) => kernel,
        Read1::Frame(Tell::Failed { step, error }) => return Err(VmError::Guest { step, error }),
        Read1::Frame(other) => {
            return Err(VmError::Protocol {
                why: format!("{other:?} before ready"),
            })
        }
        Read1::Deadline => {
            return Err(failed_boot(format!(
                "it was not ready within {} s",
                run.boot_timeout.as_secs()
            )))
        }
        Read1::Closed => return Err(failed_boot("it stopped before it was ready".into())),
        Read1::Signal(sig) => return Ok(interrupted(&accel, started, sig)),
    };
    Ok(Started::Ready(Booted {
        _qemu: qemu,
        _root_fs: root_fs,
        _ws_fs: ws_fs,
        _mount_fs: mount_fs,
        chan,
        console: machine.console.clone(),
        accel,
        kernel,
        boot: started.elapsed(),
        dir,
    }))
}

impl Booted {
    /// Runs `run.exec` in this guest (booted for a `run` like this one) to its end, under
    /// `run.timeout`; the VM ends with it.
    pub fn exec(
        mut self,
        run: &VmRun,
        input: Option<Input>,
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<VmOutcome, VmError> {
        let io = |step| move |source| VmError::Io { step, source };
        let _signals = answer_signals()?;
        if run.exec.stdin != input.is_some() {
            return Err(VmError::Protocol {
                why: "a streamed input needs its reader, and a reader the exec's `stdin`".into(),
            });
        }
        self.chan.signals = true;
        let chan = &mut self.chan;
        let accel = self.accel.clone();
        let mut out = VmOutcome {
            accel: accel.name(),
            kernel: self.kernel.clone(),
            boot: self.boot,
            ..VmOutcome::default()
        };
        let console = self.console.clone();
        if let Accel::Tcg { why } = &accel {
            out.warnings.push(format!(
            "the VM is emulated (QEMU TCG), so it is slow: {why}; --require-kvm refuses instead"
        ));
        }
        chan.send(&Ask::Exec(run.exec.clone()))?;
        if let Some(input) = input {
            let port = chan
                .writer
                .try_clone()
                .map_err(io("opening the agent channel"))?;
            feed(input, port);
        }
        let began = Instant::now();
        let deadline = began + run.timeout;
        loop {
            match chan.next(deadline)? {
                Read1::Frame(Tell::Out { stream, b64 }) => {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .map_err(|e| VmError::Protocol {
                            why: format!("output that is not base64 ({e})"),
                        })?;
                    sink(stream, &bytes);
                    let keep = match stream {
                        Stream::Stdout => &mut out.stdout,
                        Stream::Stderr => &mut out.stderr,
                    };
                    let room = usize::try_from(run.max_output)
                        .unwrap_or(usize::MAX)
                        .saturating_sub(keep.len());
                    if bytes.len() > room {
                        out.truncated = true;
                        out.dropped_bytes += (bytes.len() - room) as u64;
                    }
                    keep.extend_from_slice(&bytes[..bytes.len().min(room)]);
                }
                Read1::Frame(Tell::Exit { code, signal, oom }) => {
                    (out.code, out.signal, out.oom) = (code, signal, oom);
                    break;
                }
                Read1::Frame(Tell::NotStarted { code, reason }) => {
                    (out.code, out.exec_failed) = (Some(code), Some(reason));
                    break;
                }
                Read1::Frame(Tell::Failed { step, error }) => {
                    return Err(VmError::Guest { step, error })
                }
                Read1::Frame(Tell::Ready { .. }) => {
                    return Err(VmError::Protocol {
                        why: "ready twice".into(),
                    })
                }
                Read1::Deadline => {
                    out.timed_out = true;
                    break;
                }
                Read1::Signal(sig) => {
                    (out.signal, out.interrupted) = (Some(libc::SIGKILL), Some(sig));
                    break;
                }
                Read1::Closed => {
                    // A terminal's Ctrl-C reaches QEMU too (the same process group), which ends.
                    if let Some(sig) = crate::sys::pending_forwarded() {
                        (out.signal, out.interrupted) = (Some(libc::SIGKILL), Some(sig));
                        break;
                    }
                    return Err(VmError::Start {
                        step: "running the program",
                        detail: format!(
                            "the guest stopped; its console said: {}",
                            tail(&console, 3000)
                        ),
                    });
                }
            }
        }
        out.duration = began.elapsed();
        // The VM ends here (`self` drops: QEMU first): its state is nothing the host keeps (the
        // workspace's writes were synced by the guest before it said the program's end).
        Ok(out)
    }
}
