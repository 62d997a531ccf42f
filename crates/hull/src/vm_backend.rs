//! The microVM tier behind the [`Backend`] seam: a [`BoxSpec`] run in a VM of hull-vm's, its
//! outcome turned into the same [`RunResult`] (output, exit code, `timeout` and `oom` faults)
//! a namespace box gives. What the VM tier cannot honour yet is refused by [`VmBackend::check`]
//! naming the field, never dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hull_box::result::{stream_text, Fault, FaultType, Stats};
use hull_box::spec::{Network, RootSpec, SpecError, SpecField, Stdin};
use hull_box::{BoxError, BoxSpec, OutputSink, RunResult, Stream, TapHandler};
use hull_vm::proto::{self, Exec};
use hull_vm::share::ShareIds;

use crate::backend::{Backend, Destroy};
use crate::error::SandboxError;
use crate::files::Confined;
use crate::vm_files::is_file_mount;

/// Guest RAM beyond the program's memory cap: the guest kernel, its init and its tmpfs
/// directories (the program's cap is its cgroup's `memory.max` in the guest, so an OOM is the
/// program's, reported as a namespace box's is).
const GUEST_OVERHEAD: u64 = 128 << 20;
/// Guest RAM when the spec has no memory cap.
const DEFAULT_GUEST_RAM: u64 = 512 << 20;

/// Runs boxes as microVMs (QEMU microvm; docs/vm.md).
#[derive(Clone, Debug)]
pub struct VmBackend {
    /// Refuse to run emulated (TCG).
    pub require_kvm: bool,
    /// How long a guest may take to boot.
    pub boot_timeout: Duration,
    /// Where the guest's initramfs is cached (`$HULL_HOME/vm`).
    pub cache: PathBuf,
    /// Where a VM's private directory and a temporary workspace are made.
    pub scratch: PathBuf,
    /// Guests kept booted ahead for runs in a session's workspace without a network device
    /// (a Sandbox's `prewarm`; 0: none).
    pub prewarm: usize,
    warm: crate::vm_warm::WarmVms,
}

impl VmBackend {
    /// The backend with hull's defaults: the cache under `$HULL_HOME/vm`, scratch in the
    /// temporary directory, boots allowed two minutes (emulated boots take seconds).
    pub fn new(require_kvm: bool) -> VmBackend {
        VmBackend {
            require_kvm,
            boot_timeout: Duration::from_secs(120),
            cache: hull_image::store::default_home().join("vm"),
            scratch: std::env::temp_dir(),
            prewarm: 0,
            warm: crate::vm_warm::WarmVms::default(),
        }
    }

    /// The same, keeping `n` guests booted ahead ([`VmBackend::prewarm`]).
    #[must_use]
    pub fn with_prewarm(mut self, n: usize) -> VmBackend {
        self.prewarm = n;
        self
    }
}

/// A VM's failure as the engine's error (kind `vm_failed`, the VM's error as the cause).
fn vm_error(e: hull_vm::VmError) -> BoxError {
    BoxError::Backend {
        what: "the microVM",
        kind: "vm_failed",
        error: Box::new(e),
    }
}

fn refuse(field: SpecField, why: &str) -> BoxError {
    BoxError::Spec(SpecError::Invalid {
        field,
        why: format!("{why} with isolation vm (not yet supported there)"),
    })
}

/// The image's root directory, or the refusal of the `host` image.
fn root_dir(spec: &BoxSpec) -> Result<&Path, BoxError> {
    match &spec.root {
        RootSpec::Dir(d) => Ok(d),
        RootSpec::Host => Err(BoxError::Spec(SpecError::Invalid {
            field: SpecField::Root,
            why: "the `host` image is a view of this host's own directories; a VM runs an image: give --image NAME (hull pull) or --rootfs DIR".into(),
        })),
    }
}

impl Backend for VmBackend {
    fn check(&self, spec: &BoxSpec) -> Result<(), BoxError> {
        spec.validate().map_err(BoxError::Spec)?;
        root_dir(spec)?;
        // Each directory mount is a virtio-fs share of its own; a file is copied in.
        let range = crate::vm_ids::range();
        crate::vm_files::check(spec, range)?;
        if !spec.tmpfs.is_empty() {
            return Err(refuse(SpecField::Tmpfs, "extra tmpfs mounts are refused"));
        }
        if spec.network == Network::Host {
            return Err(refuse(
                SpecField::Network,
                "the host's network is refused (a VM has the gateway network or none)",
            ));
        }
        if !spec.cap_add.is_empty() {
            return Err(refuse(SpecField::CapAdd, "--cap-add is refused"));
        }
        if !spec.cap_drop.is_empty() {
            return Err(refuse(SpecField::CapDrop, "--cap-drop is refused"));
        }
        if spec.user.is_some() {
            return Err(refuse(SpecField::User, "another user is refused"));
        }
        if spec.subids {
            return Err(refuse(SpecField::Subids, "--subids is refused"));
        }
        if spec.writable_root.is_some() {
            return Err(refuse(
                SpecField::Root,
                "a writable root on disk is refused",
            ));
        }
        if spec.stdin == Stdin::Terminal {
            return Err(refuse(
                SpecField::Stdin,
                "a terminal of the program's own is refused",
            ));
        }
        if let Some(range) = range {
            if let Some(w) = &spec.workspace {
                crate::vm_ids::check_share(w, false, SpecField::Workspace, range)?;
            }
            for m in spec.mounts.iter().filter(|m| !is_file_mount(m)) {
                crate::vm_ids::check_share(&m.source, m.read_only, SpecField::Mounts, range)?;
            }
        }
        Ok(())
    }

    fn run(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
    ) -> Result<(RunResult, Destroy), BoxError> {
        self.check(spec)?;
        if spec.network == Network::Gateway {
            return Err(BoxError::NoTapHandler);
        }
        self.run_vm(spec, sink, None)
    }

    fn run_served(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
        tap: &mut TapHandler<'_>,
    ) -> Result<(RunResult, Destroy), BoxError> {
        self.check(spec)?;
        if spec.network != Network::Gateway {
            return self.run_vm(spec, sink, None);
        }
        // The VM's link: a datagram pair, one Ethernet frame per datagram. QEMU's network
        // device takes one end; the gateway takes the other as it takes a box's TAP, before
        // the guest boots (frames the guest sends first wait in the socket).
        let (gateway_end, vm_end) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::DGRAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| BoxError::Io {
            what: "making the VM's network link".into(),
            error: e.into(),
        })?;
        #[allow(clippy::cast_possible_wrap)] // a pid fits
        let pid = std::process::id() as libc::pid_t;
        tap(hull_box::Tap {
            fd: gateway_end,
            pid,
        })
        .map_err(|error| BoxError::Gateway { error })?;
        self.run_vm(spec, sink, Some(vm_end))
    }

    fn files(&self, workspace: &Path) -> Result<Confined, SandboxError> {
        Confined::open(workspace)
    }

    fn isolation(&self) -> hull_api::Isolation {
        hull_api::Isolation::Vm
    }

    fn prewarm(&self, base: &BoxSpec) {
        if self.prewarm == 0 || self.check(base).is_err() {
            return;
        }
        // What cannot be built now is the first call's error.
        if let Ok(Built {
            run, temp: None, ..
        }) = self.build(base)
        {
            self.warm.refill(&run, self.prewarm);
        }
    }
}

/// What one run of a spec is made of: the VM's run, the program's input, and the temporary
/// workspace made for it (removed when dropped).
struct Built {
    run: hull_vm::VmRun,
    input: Option<hull_vm::vm::Input>,
    temp: Option<tempfile::TempDir>,
}

impl VmBackend {
    /// Runs `spec` in a VM, its network device on `link` (the gateway network's); in one
    /// booted ahead when this backend keeps some and `spec` can take one.
    fn run_vm(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
        link: Option<std::os::fd::OwnedFd>,
    ) -> Result<(RunResult, Destroy), BoxError> {
        let Built { run, input, temp } = self.build(spec)?;
        let mut relay = |s: proto::Stream, b: &[u8]| {
            sink.chunk(
                match s {
                    proto::Stream::Stdout => Stream::Stdout,
                    proto::Stream::Stderr => Stream::Stderr,
                },
                b,
            );
        };
        // A VM booted ahead serves a run of the same shape: no network device (a gateway's
        // link is the run's) and the session's own workspace (not a temporary one).
        let warmable = self.prewarm > 0 && link.is_none() && temp.is_none();
        let out = if warmable {
            let out = match self.warm.take(&run) {
                Some(vm) => vm.exec(&run, input, &mut relay),
                None => hull_vm::run_linked(&run, None, input, &mut relay),
            };
            // The next one boots after this run, not against it for the CPU.
            self.warm.refill(&run, self.prewarm);
            out
        } else {
            hull_vm::run_linked(&run, link, input, &mut relay)
        }
        .map_err(vm_error)?;
        Ok((result_of(&out, spec), Box::new(move || drop(temp))))
    }

    /// The VM's run for `spec`, its input and its temporary workspace.
    fn build(&self, spec: &BoxSpec) -> Result<Built, BoxError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |error| BoxError::Io { what, error }
        };
        // The program's input streams to the guest while it runs: a call's bytes from their
        // file, `hull run -i`'s from this process's fd 0 (a pipe, or the terminal relay's).
        let input: Option<hull_vm::vm::Input> = match &spec.stdin {
            Stdin::File(p) => Some(Box::new(
                std::fs::File::open(p).map_err(io("opening the program's input"))?,
            )),
            Stdin::Inherit => Some(Box::new(std::fs::File::from(
                std::os::fd::AsFd::as_fd(&std::io::stdin())
                    .try_clone_to_owned()
                    .map_err(io("taking this process's standard input"))?,
            ))),
            Stdin::Null | Stdin::Terminal => None,
        };
        let range = crate::vm_ids::range();
        // A fresh workspace when none is given, removed with the VM. As host root the VM's
        // root writes it as hull's range: a directory in it, given to the range (the one
        // made here stays host root's, so a later hull's sweep knows it for its own).
        let temp = match &spec.workspace {
            Some(_) => None,
            None => Some(
                tempfile::Builder::new()
                    .prefix(&format!(
                        "{}ws-{}-",
                        hull_vm::vm::DIR_PREFIX,
                        std::process::id()
                    ))
                    .tempdir_in(&self.scratch)
                    .map_err(io("making the VM's workspace"))?,
            ),
        };
        let (workspace, workspace_ids) = match (&spec.workspace, &temp, range) {
            (Some(w), _, None) => (w.clone(), None),
            // `check` refused what would be refused; the VM decides again on the directory
            // as it opens it.
            (Some(w), _, Some(r)) => (w.clone(), Some(ShareIds::Owner { range: r })),
            (None, Some(t), None) => (t.path().to_path_buf(), None),
            (None, Some(t), Some(r)) => {
                let w = t.path().join("w");
                std::fs::create_dir(&w).map_err(io("making the VM's workspace"))?;
                std::os::unix::fs::chown(&w, Some(r.uid), Some(r.gid))
                    .map_err(io("giving the VM's workspace to hull's range"))?;
                (w, Some(ShareIds::Fixed(r)))
            }
            (None, None, _) => return Err(BoxError::Internal("no workspace")),
        };
        let files = crate::vm_files::copies(spec, range)?;
        let mut mounts = Vec::new();
        for m in spec.mounts.iter().filter(|m| !is_file_mount(m)) {
            mounts.push(hull_vm::VmMount {
                source: m.source.clone(),
                target: m.target.clone(),
                read_only: m.read_only,
                ids: range.map(|r| ShareIds::Owner { range: r }),
            });
        }
        let ram = spec
            .memory
            .map_or(DEFAULT_GUEST_RAM, |m| m.saturating_add(GUEST_OVERHEAD));
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a small CPU count
        let cpus = spec.cpus.map_or(1, |c| c.ceil().max(1.0) as u32);
        let run = hull_vm::VmRun {
            root: root_dir(spec)?.to_path_buf(),
            workspace,
            ids: range,
            workspace_ids,
            mounts,
            files,
            tmp_size: spec.tmp_size,
            shm_size: spec.shm_size,
            exec: Exec {
                argv: spec.argv.clone(),
                env: spec.env.clone(),
                cwd: spec.cwd.clone(),
                stdin: input.is_some(),
                hostname: spec.hostname.clone(),
                memory: spec.memory,
                pids: spec.pids,
            },
            memory: ram,
            cpus,
            timeout: spec.timeout,
            boot_timeout: self.boot_timeout,
            require_kvm: self.require_kvm,
            cache: self.cache.clone(),
            scratch: self.scratch.clone(),
            max_output: spec.max_output,
            net: (spec.network == Network::Gateway).then(|| hull_vm::VmNet {
                mac: hull_box::tap::BOX_MAC,
                mtu: hull_box::tap::MTU,
                resolv_conf: String::from_utf8_lossy(hull_box::tap::RESOLV_CONF).into_owned(),
            }),
        };
        Ok(Built { run, input, temp })
    }
}

/// The VM's outcome as a namespace box's result.
fn result_of(out: &hull_vm::VmOutcome, spec: &BoxSpec) -> RunResult {
    let (stdout, stdout_b64) = stream_text(&out.stdout);
    let (stderr, stderr_b64) = stream_text(&out.stderr);
    let exit_code = match (out.code, out.signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 128 + libc::SIGKILL,
    };
    let fault = if let Some(sig) = out.interrupted {
        Some(Fault {
            kind: FaultType::Killed,
            reason: format!(
                "hull received {}; the VM was killed",
                hull_box::signal_name(sig)
            ),
            syscall: None,
        })
    } else if let Some(reason) = &out.exec_failed {
        Some(Fault {
            kind: FaultType::ExecFailed,
            reason: reason.clone(),
            syscall: None,
        })
    } else if out.timed_out {
        Some(Fault {
            kind: FaultType::Timeout,
            reason: format!(
                "the program ran past its {} ms deadline; the VM was killed",
                spec.timeout.as_millis()
            ),
            syscall: None,
        })
    } else if out.oom {
        Some(Fault {
            kind: FaultType::Oom,
            reason: "the guest ran out of memory and its kernel killed a process of the program's"
                .into(),
            syscall: None,
        })
    } else {
        None
    };
    let exit_code = if out.timed_out {
        128 + libc::SIGKILL
    } else {
        exit_code
    };
    RunResult {
        stdout,
        stderr,
        exit_code,
        success: exit_code == 0 && fault.is_none(),
        fault,
        truncated: out.truncated,
        duration_ms: u64::try_from((out.boot + out.duration).as_millis()).unwrap_or(u64::MAX),
        stats: Stats::default(),
        warnings: out.warnings.clone(),
        dropped_bytes: out.dropped_bytes,
        stdout_b64,
        stderr_b64,
    }
}
