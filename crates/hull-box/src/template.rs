//! Templates: a box's read-only skeleton, built once and entered by many boxes.
//!
//! Most of a box's setup is the same for every box of one image: ~90 steps that make a tmpfs
//! root, bind the image's directories and files into it and seal it read-only. A template
//! process does those steps once, in a user, mount and pid namespace of its own, mounts a
//! procfs of its pid namespace in the root, keeps that mount namespace (the "host" one: the
//! host's tree plus the sealed root) and pivots a copy of it into the sealed root (the "root"
//! one: nothing else), then exits; the Runtime keeps descriptors of the user namespace and both
//! mount namespaces. Each box forks a plain child that joins the host one to clone its bind
//! sources into detached mounts, joins the root one and unshares its own namespaces below it
//! (a fresh user namespace first), so the kernel copies the sealed tree in one step, with every
//! mount locked read-only in the copy (a box cannot unmount or remount what it was given). The
//! box's own writable mounts (the cloned sources attached) and its procfs follow in a pid 1
//! the entry process forks as the supervisor's child; no pivot or unmount is left per box.
//! Boxes stay independent: none can reach the template's namespaces (it has no capability
//! there), and the shared tree is read-only for all.
//!
//! Worth it only in a long-lived Runtime (`hull serve`, `hull bench`, the SDKs): for a single
//! box, building the template costs what it saves.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::channel::Channel;

use crate::error::BoxError;
use crate::launch;
use crate::plan::BoxPlan;
use crate::poison::lock;
use crate::proto::UnexpectedMessage;
use crate::split::{LaunchPlan, TemplateFds, TemplatePlan};
use crate::sys::child::{self, ChildContext, ChildPlan, Pid1Role, PoolHelper, Pooled};
use crate::sys::{self, Errno};
use crate::warm::Worker;

/// The most templates one Runtime keeps (one per distinct skeleton: image, hostname, network
/// mode, user mount points); past it the oldest is dropped (boxes using it keep it alive).
const MAX_TEMPLATES: usize = 8;

/// Ready network and user namespaces each template keeps: creating them (and bringing up a
/// loopback) is the costliest part of entering a template, so a thread does it ahead of the
/// boxes.
const POOL: usize = 2;

/// Descriptors of a template's user and mount namespaces, and its pool of network namespaces
/// (owned by the template's user namespace, each used by one box only).
pub(crate) struct Template {
    user: OwnedFd,
    /// The mount namespace the skeleton was built in: the host's tree plus the sealed root
    /// (where boxes clone their bind sources from).
    host: OwnedFd,
    /// A copy of it pivoted into the sealed root, with the host's tree detached (what boxes copy).
    mnt: OwnedFd,
    nets: Mutex<Vec<OwnedFd>>,
    /// For a gateway skeleton (see [`crate::tap`]): network namespaces with the TAP already
    /// made in them, each with the TAP's descriptor (the pool's; never in a box).
    taps: Mutex<Vec<PooledTap>>,
    /// Boxes of the gateway network use this template: its pool makes TAPs, not loopback-only
    /// network namespaces.
    gateway: AtomicBool,
    /// Making a pooled TAP failed once (`/dev/net/tun` not openable as the template's root):
    /// gateway boxes are built whole from then on.
    tap_failed: AtomicBool,
    /// Ready namespaces of a box's own: a user namespace below `user` with uid and gid 0 mapped,
    /// and ipc and uts namespaces it owns (one set per box).
    users: Mutex<Vec<OwnNs>>,
    /// Making a pooled namespace failed once: boxes unshare their own from then on.
    pool_failed: AtomicBool,
    /// Its root is not the caller's (host root, see [`crate::remap`]): whoever joins its user
    /// namespace becomes that root before making namespaces below it.
    remapped: bool,
}

/// A network namespace with the gateway network's TAP made in it, and the TAP.
pub(crate) struct PooledTap {
    net: OwnedFd,
    tap: OwnedFd,
}

impl Drop for Template {
    /// Closing a TAP's last descriptor unregisters it, ~23 ms each: the pooled ones go on a
    /// helper thread, off whatever dropped the template (a Runtime going, a template replaced).
    fn drop(&mut self) {
        let taps = std::mem::take(&mut *lock(&self.taps));
        if !taps.is_empty() {
            let _ = crate::ending::spawn_helper("hull-tap-close", move || drop(taps));
        }
    }
}

/// A box's own user namespace (ids mapped) with the ipc and uts namespaces it owns.
pub(crate) struct OwnNs {
    user: OwnedFd,
    ipc: OwnedFd,
    uts: OwnedFd,
}

impl Template {
    /// The kind of namespace this template's pools are short of, if any (user namespaces first:
    /// every box takes one).
    fn wants(&self) -> Option<Pooled> {
        if self.pool_failed.load(Ordering::Relaxed) {
            None
        } else if lock(&self.users).len() < POOL {
            Some(Pooled::User)
        } else if self.gateway.load(Ordering::Relaxed) {
            (!self.tap_failed.load(Ordering::Relaxed) && lock(&self.taps).len() < POOL)
                .then_some(Pooled::Tap)
        } else if lock(&self.nets).len() < POOL {
            Some(Pooled::Net)
        } else {
            None
        }
    }
}

/// What a box entering a template holds until its entry process has joined the namespaces.
pub(crate) struct Entered {
    _template: Arc<Template>,
    _net: Option<OwnedFd>,
    _own: Option<OwnNs>,
    /// A gateway box's pooled TAP, for the caller (`engine::hand_over` takes it).
    pub(crate) tap: Option<OwnedFd>,
}

/// The Runtime's templates, by skeleton, and the thread that fills their network pools.
pub(crate) struct Templates {
    pool: Arc<TemplatePool>,
    /// An empty host directory the templates assemble their roots on (in their own mount
    /// namespaces), so the host's /tmp, where bind sources may live, stays visible to boxes.
    stage: String,
}

#[derive(Default)]
struct TemplatePool {
    built: Mutex<Vec<(u64, Arc<Template>)>>,
    /// The pool thread (`hull-netpool`).
    worker: Worker,
    /// Boxes that entered a pooled network namespace (for tests and `hull bench`).
    pooled: std::sync::atomic::AtomicU64,
    /// Boxes that entered a pooled user namespace.
    pooled_users: std::sync::atomic::AtomicU64,
}

impl Drop for Templates {
    fn drop(&mut self) {
        // Joined, so no pool helper is being made once the Runtime is gone.
        self.pool.worker.stop();
        self.pool.worker.join();
        let _ = std::fs::remove_dir(&self.stage);
    }
}

impl Templates {
    pub fn new() -> Result<Templates, BoxError> {
        // The owner identity lets a later hull sweep the directory if we are SIGKILLed
        // (`leftovers`).
        let template = format!(
            "{}{}-XXXXXX",
            crate::leftovers::STAGE_PREFIX,
            crate::owner::id()
        );
        let dir = tempfile_dir(&std::env::temp_dir().join(template))?;
        Ok(Templates {
            pool: Arc::default(),
            stage: dir,
        })
    }

    pub fn len(&self) -> usize {
        lock(&self.pool.built).len()
    }

    /// How many boxes entered a pooled network namespace so far.
    pub fn pooled_nets(&self) -> u64 {
        self.pool.pooled.load(Ordering::Relaxed)
    }

    /// How many boxes entered a pooled user namespace so far.
    pub fn pooled_users(&self) -> u64 {
        self.pool.pooled_users.load(Ordering::Relaxed)
    }

    /// Where this Runtime's templates assemble their roots.
    pub fn stage(&self) -> &str {
        &self.stage
    }

    /// Splits `plan` and enters it into the template for its skeleton, building that template
    /// the first time, with a pooled network namespace when one is ready. A plan whose skeleton
    /// cannot be shared comes back whole (a fresh box's), with nothing entered.
    ///
    /// A gateway box enters only with a pooled TAP (its network namespace and TAP made ahead by
    /// the pool: the box's own pid 1 could not reach `/dev/net/tun` in the template's root);
    /// while the pool has none it is built whole, as a fresh box that makes its own.
    pub fn prepare(&self, plan: BoxPlan) -> Result<(LaunchPlan, Option<Entered>), BoxError> {
        let whole = plan.makes_tap().then(|| plan.clone());
        let (skeleton, entry_plan) = match plan.split_template() {
            Ok(split) => split,
            Err(whole) => return Ok((LaunchPlan::Fresh(whole), None)),
        };
        let key = skeleton.template_key();
        let template = {
            let mut built = lock(&self.pool.built);
            match built.iter().find(|(k, _)| *k == key) {
                Some((_, t)) => Arc::clone(t),
                None => {
                    let t = Arc::new(build(&skeleton)?);
                    if built.len() >= MAX_TEMPLATES {
                        built.remove(0);
                    }
                    built.push((key, Arc::clone(&t)));
                    t
                }
            }
        };
        let mut tap = None;
        let net = if let Some(whole) = whole {
            template.gateway.store(true, Ordering::Relaxed);
            let pooled = lock(&template.taps).pop();
            self.start_filler();
            self.pool.worker.wake();
            // A box keeping NET_BIND_SERVICE needs a network namespace its own user namespace
            // owns: it makes its own TAP.
            let pooled = pooled.filter(|_| entry_plan.can_share_pooled_net());
            let Some(PooledTap { net, tap: t }) = pooled else {
                return Ok((LaunchPlan::Fresh(whole), None));
            };
            tap = Some(t);
            Some(net)
        } else if entry_plan.can_share_pooled_net() {
            lock(&template.nets).pop()
        } else {
            None
        };
        if net.is_some() {
            self.pool.pooled.fetch_add(1, Ordering::Relaxed);
        }
        let own = lock(&template.users).pop();
        if own.is_some() {
            self.pool.pooled_users.fetch_add(1, Ordering::Relaxed);
        }
        self.start_filler();
        self.pool.worker.wake();
        let plan = entry_plan.enter(&TemplateFds {
            user: template.user.as_raw_fd(),
            host: template.host.as_raw_fd(),
            root: template.mnt.as_raw_fd(),
            net: net.as_ref().map(AsRawFd::as_raw_fd),
            own: own
                .as_ref()
                .map(|o| [o.user.as_raw_fd(), o.ipc.as_raw_fd(), o.uts.as_raw_fd()]),
        });
        Ok((
            LaunchPlan::Templated(plan),
            Some(Entered {
                _template: template,
                _net: net,
                _own: own,
                tap,
            }),
        ))
    }

    /// Starts the thread that keeps each template's network pool full (once).
    fn start_filler(&self) {
        // Without the thread there is no pool: boxes unshare their own network namespace.
        self.pool.worker.start_once("hull-netpool", || {
            let pool = Arc::clone(&self.pool);
            move || keep_namespaces_ready(&pool)
        });
    }
}

/// The pool helpers' stack (they make a namespace or two and pause).
const HELPER_STACK: usize = 64 * 1024;

/// The pool filler: makes a namespace for the first template that wants one, else sleeps until
/// a box takes one (or a second passes).
fn keep_namespaces_ready(pool: &TemplatePool) {
    let Some(mut stack) = sys::Stack::reserve(HELPER_STACK) else {
        // Without a stack for the helpers there is no pool: boxes unshare their own namespaces.
        return;
    };
    while !pool.worker.stopping() {
        let wanting = lock(&pool.built)
            .iter()
            .find_map(|(_, t)| t.wants().map(|k| (Arc::clone(t), k)));
        match wanting {
            Some((t, Pooled::Tap)) => match make_pooled_tap(&t, stack.get()) {
                Ok(pooled) => lock(&t.taps).push(pooled),
                Err(_) => t.tap_failed.store(true, Ordering::Relaxed),
            },
            Some((t, kind)) => match make_pooled(&t, kind, stack.get()) {
                Ok(fds) => match kind {
                    Pooled::Net | Pooled::Tap => lock(&t.nets).extend(fds),
                    Pooled::User => {
                        if let Ok([user, ipc, uts]) = <[OwnedFd; 3]>::try_from(fds) {
                            lock(&t.users).push(OwnNs { user, ipc, uts });
                        }
                    }
                },
                Err(_) => t.pool_failed.store(true, Ordering::Relaxed),
            },
            None => {
                drop(pool.worker.sleep(lock(&pool.built)));
            }
        }
    }
}

/// Namespaces for one box, made by a child that joins the template's user namespace and waits
/// to be killed once we hold descriptors of them: a network namespace owned by that user
/// namespace, with its loopback up; or a user namespace below it with uid and gid 0 mapped (to
/// the template's 0, as a box's own would be) and ipc and uts namespaces owned by it (in that
/// order).
///
/// The child shares our memory (`CLONE_VM`) and runs on `stack`, the pool thread's own: a fork
/// would copy the supervisor's page tables and leave every page it writes afterwards to be
/// copied again on the next write, twice per box on top of the box's own fork.
fn make_pooled(t: &Template, kind: Pooled, stack: &mut [u8]) -> Result<Vec<OwnedFd>, BoxError> {
    let sysf = |what: &'static str| move |errno: Errno| BoxError::Sys { what, errno };
    let (ready_r, ready_w) = sys::pipe().map_err(sysf("create the pool pipe"))?;
    let args = PoolHelper {
        user: t.user.as_raw_fd(),
        ready: ready_w.as_raw_fd(),
        kind,
        become_root: t.remapped,
        parent: sys::getpid(),
    };
    child::with_pool_helper(stack, &args, |pid| {
        drop(ready_w);
        let mut fds = [sys::poll_in(ready_r.as_fd())];
        let mut b = [0u8; 1];
        let ready = sys::poll(&mut fds, 5000).is_ok_and(|n| n == 1)
            && sys::read(ready_r.as_fd(), &mut b).is_ok_and(|n| n == 1);
        if !ready {
            return Err(BoxError::Sys {
                what: "make a pooled namespace",
                errno: Errno(libc::EIO),
            });
        }
        let kinds: &[&str] = match kind {
            Pooled::Net | Pooled::Tap => &["net"],
            Pooled::User => &["user", "ipc", "uts"],
        };
        kinds
            .iter()
            .map(|k| {
                let path = format!("/proc/{pid}/ns/{k}");
                std::fs::File::open(&path)
                    .map(OwnedFd::from)
                    .map_err(|error| BoxError::Io {
                        what: format!("open {path}"),
                        error,
                    })
            })
            .collect()
    })
    .map_err(sysf("start the namespace pool helper"))?
}

/// A network namespace with the gateway network's TAP in it (see [`Pooled::Tap`]), made by a
/// pool helper that sends the TAP's descriptor over a socket with its report.
fn make_pooled_tap(t: &Template, stack: &mut [u8]) -> Result<PooledTap, BoxError> {
    let sysf = |what: &'static str| move |errno: Errno| BoxError::Sys { what, errno };
    let (ours, theirs) = sys::seqpacket_pair().map_err(sysf("create the pool socket"))?;
    let args = PoolHelper {
        user: t.user.as_raw_fd(),
        ready: theirs.as_raw_fd(),
        kind: Pooled::Tap,
        become_root: t.remapped,
        parent: sys::getpid(),
    };
    child::with_pool_helper(stack, &args, |pid| {
        drop(theirs);
        let mut fds = [sys::poll_in(ours.as_fd())];
        let mut b = [0u8; 1];
        let tap = match sys::poll(&mut fds, 5000) {
            Ok(1) => match sys::recv_with_fd(ours.as_fd(), &mut b) {
                Ok((1, Some(tap))) => Some(tap),
                _ => None,
            },
            _ => None,
        };
        let Some(tap) = tap else {
            return Err(BoxError::Sys {
                what: "make a pooled TAP",
                errno: Errno(libc::EIO),
            });
        };
        let path = format!("/proc/{pid}/ns/net");
        let net = std::fs::File::open(&path)
            .map(OwnedFd::from)
            .map_err(|error| BoxError::Io {
                what: format!("open {path}"),
                error,
            })?;
        Ok(PooledTap { net, tap })
    })
    .map_err(sysf("start the namespace pool helper"))?
}

/// `mkdtemp(3)` of `template` (ending in XXXXXX), as a UTF-8 path.
fn tempfile_dir(template: &std::path::Path) -> Result<String, BoxError> {
    let fail = |errno| BoxError::Sys {
        what: "create the template staging directory",
        errno,
    };
    let dir = sys::mkdtemp(std::path::Path::new(&*template.to_string_lossy())).map_err(fail)?;
    dir.into_os_string()
        .into_string()
        .map_err(|_| fail(Errno(libc::EINVAL)))
}

/// Runs the skeleton in a template process and keeps its namespaces.
fn build(plan: &TemplatePlan) -> Result<Template, BoxError> {
    let sysf = |what: &'static str| move |errno: Errno| BoxError::Sys { what, errno };
    let (sock_parent, sock_child) =
        sys::seqpacket_pair().map_err(sysf("create the template channel"))?;
    let null = std::fs::File::open("/dev/null").map_err(|error| BoxError::Io {
        what: "open /dev/null".into(),
        error,
    })?;
    let empty = child::pointer_array(&[]);
    let ctx = ChildContext {
        plan: ChildPlan::Template(plan),
        sock: sock_child.as_raw_fd(),
        peer: sock_parent.as_raw_fd(),
        supervisor: launch::supervisor_pidfd(),
        stdin: null.as_raw_fd(),
        stdout: null.as_raw_fd(),
        stderr: null.as_raw_fd(),
        tty: false,
        argv: &empty,
        envp: &empty,
        seccomp: None,
        trace: None,
        pid1_stack: None,
        pid1: Pid1Role::Program,
        trees: &[],
        strings: None,
    };
    // The template process runs the skeleton and ends in HoldTemplate's exit.
    let pid = match child::clone_box(plan.clone_flags, &ctx) {
        Ok(pid) => pid,
        Err(errno) => {
            return Err(BoxError::Clone {
                errno,
                hint: "building a template needs user and mount namespaces; run `hull doctor`"
                    .into(),
            })
        }
    };
    drop(sock_child);
    let channel = Channel::new(sock_parent);
    // Host root's template maps its root to hull's range (see `remap`), which only we can write.
    let mapped = match plan.id_maps() {
        Some(maps) => launch::map_ids(pid, &channel, maps, plan, false),
        None => Ok(()),
    };
    let answer = mapped.and_then(|()| channel.expect_ready(10_000, plan));
    let remapped = plan.id_maps().is_some();
    let result = match answer {
        Ok(Some(host)) => open_ns(pid, host, remapped),
        Ok(None) => Err(UnexpectedMessage {
            expected: "Ready with the template's mount namespace",
            got: "Ready without a descriptor",
        }
        .into()),
        Err(e) => Err(e),
    };
    // The template process has done its part; its namespaces live on in our descriptors. (It
    // would also leave on the hangup, but a box forked meanwhile by another thread may hold a
    // copy of our end for a moment.)
    drop(channel);
    let _ = sys::kill(pid, libc::SIGKILL);
    let _ = sys::wait4(pid, false);
    result
}

fn open_ns(pid: libc::pid_t, host: OwnedFd, remapped: bool) -> Result<Template, BoxError> {
    let open = |kind: &str| -> Result<OwnedFd, BoxError> {
        let path = format!("/proc/{pid}/ns/{kind}");
        std::fs::File::open(&path)
            .map(OwnedFd::from)
            .map_err(|error| BoxError::Io {
                what: format!("open the template's namespace {path}"),
                error,
            })
    };
    Ok(Template {
        user: open("user")?,
        host,
        mnt: open("mnt")?,
        nets: Mutex::new(Vec::new()),
        taps: Mutex::new(Vec::new()),
        gateway: AtomicBool::new(false),
        tap_failed: AtomicBool::new(false),
        users: Mutex::new(Vec::new()),
        pool_failed: AtomicBool::new(false),
        remapped,
    })
}
