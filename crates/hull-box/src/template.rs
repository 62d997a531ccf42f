//! Templates: a box's read-only skeleton, built once and entered by many boxes.
//!
//! Most of a box's setup is the same for every box of one image: ~90 steps that make a tmpfs
//! root, bind the image's directories and files into it and seal it read-only. A template
//! process does those steps once, in a user and mount namespace of its own, and exits; the
//! Runtime keeps descriptors of the two namespaces. Each box then forks a plain child that
//! joins them and unshares its own namespaces below them (a fresh user namespace first), so the
//! kernel copies the sealed tree in one step, with every mount locked read-only in the copy
//! (a box cannot unmount or remount what it was given). The box's own writable mounts, its
//! procfs and the pivot follow as before, in a pid 1 the entry process forks as the
//! supervisor's child. Boxes stay independent: none can reach the template's namespaces (it has
//! no capability there), and the shared tree is read-only for all.
//!
//! Worth it only in a long-lived Runtime (`hull serve`, `hull bench`, the SDKs): for a single
//! box, building the template costs what it saves.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use crate::child::{self, ChildContext};
use crate::error::BoxError;
use crate::plan::BoxPlan;
use crate::proto::Message;
use crate::sys::{self, Errno};

/// The most templates one Runtime keeps (one per distinct skeleton: image, hostname, network
/// mode, user mount points); past it the oldest is dropped (boxes using it keep it alive).
const MAX_TEMPLATES: usize = 8;

/// Descriptors of a template's user and mount namespaces.
pub(crate) struct Template {
    user: OwnedFd,
    mnt: OwnedFd,
}

/// The Runtime's templates, by skeleton.
pub(crate) struct Templates {
    built: Mutex<Vec<(u64, Arc<Template>)>>,
    /// An empty host directory the templates assemble their roots on (in their own mount
    /// namespaces), so the host's /tmp, where bind sources may live, stays visible to boxes.
    stage: String,
}

impl Drop for Templates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.stage);
    }
}

impl Templates {
    pub fn new() -> Result<Templates, BoxError> {
        // The pid lets a later hull sweep the directory if we are SIGKILLed (`leftovers`).
        let template = format!("{}{}-XXXXXX", crate::leftovers::STAGE_PREFIX, sys::getpid());
        let dir = tempfile_dir(&std::env::temp_dir().join(template))?;
        Ok(Templates { built: Mutex::new(Vec::new()), stage: dir })
    }

    pub fn len(&self) -> usize {
        self.built.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Where this Runtime's templates assemble their roots.
    pub fn stage(&self) -> &str {
        &self.stage
    }

    /// Splits `plan` and enters it into the template for its skeleton, building that template
    /// the first time. A plan whose skeleton cannot be shared comes back whole, with no template.
    pub fn prepare(&self, plan: BoxPlan) -> Result<(BoxPlan, Option<Arc<Template>>), BoxError> {
        let (skeleton, mut boxed) = match plan.split_template() {
            Ok(split) => split,
            Err(whole) => return Ok((whole, None)),
        };
        let key = skeleton.template_key();
        let mut built = self.built.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let template = match built.iter().find(|(k, _)| *k == key) {
            Some((_, t)) => Arc::clone(t),
            None => {
                let t = Arc::new(build(&skeleton)?);
                if built.len() >= MAX_TEMPLATES {
                    built.remove(0);
                }
                built.push((key, Arc::clone(&t)));
                t
            }
        };
        boxed.set_template_fds(template.user.as_raw_fd(), template.mnt.as_raw_fd());
        Ok((boxed, Some(template)))
    }
}

/// `mkdtemp(3)` of `template` (ending in XXXXXX), as a UTF-8 path.
fn tempfile_dir(template: &std::path::Path) -> Result<String, BoxError> {
    let mut bytes = template.to_string_lossy().into_owned().into_bytes();
    bytes.push(0);
    // SAFETY: a NUL-terminated, writable buffer ending in XXXXXX.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(BoxError::Sys { what: "create the template staging directory", errno: Errno::last() });
    }
    bytes.pop();
    String::from_utf8(bytes).map_err(|_| BoxError::Sys { what: "create the template staging directory", errno: Errno(libc::EINVAL) })
}

/// Runs the skeleton in a template process and keeps its namespaces.
fn build(plan: &BoxPlan) -> Result<Template, BoxError> {
    let sysf = |what: &'static str| move |errno: Errno| BoxError::Sys { what, errno };
    let (sock_parent, sock_child) = sys::seqpacket_pair().map_err(sysf("create the template channel"))?;
    let null = std::fs::File::open("/dev/null").map_err(|error| BoxError::Io { what: "open /dev/null".into(), error })?;
    let empty = child::pointer_array(&[]);
    let ctx = ChildContext {
        plan,
        sock: sock_child.as_raw_fd(),
        peer: sock_parent.as_raw_fd(),
        stdin: null.as_raw_fd(),
        stdout: null.as_raw_fd(),
        stderr: null.as_raw_fd(),
        argv: &empty,
        envp: &empty,
        seccomp: None,
        trace: None,
    };
    // SAFETY: the child runs only `child::run` over the template plan (allocation-free wrappers,
    // ending in HoldTemplate's exit).
    let pid = match unsafe { sys::clone_fork(plan.clone_flags) } {
        Ok(0) => child::run(&ctx),
        Ok(pid) => pid,
        Err(errno) => return Err(BoxError::Clone { errno, hint: "building a template needs user and mount namespaces; run `hull doctor`".into() }),
    };
    drop(sock_child);
    let answer = await_message(&sock_parent, 10_000);
    let result = match answer {
        Ok(Message::Ready) => open_ns(pid),
        Ok(Message::SetupFailed { step, errno }) => Err(crate::supervise::setup_error(plan, step, errno)),
        Ok(_) => Err(BoxError::Sys { what: "build a template (unexpected message)", errno: Errno(libc::EPROTO) }),
        Err(e) => Err(e),
    };
    // The template process has done its part; its namespaces live on in our descriptors. (It
    // would also leave on the hangup, but a box forked meanwhile by another thread may hold a
    // copy of our end for a moment.)
    drop(sock_parent);
    let _ = sys::kill(pid, libc::SIGKILL);
    let _ = sys::wait4(pid, false);
    result
}

fn open_ns(pid: libc::pid_t) -> Result<Template, BoxError> {
    let open = |kind: &str| -> Result<OwnedFd, BoxError> {
        let path = format!("/proc/{pid}/ns/{kind}");
        std::fs::File::open(&path).map(OwnedFd::from).map_err(|error| BoxError::Io { what: format!("open the template's namespace {path}"), error })
    };
    Ok(Template { user: open("user")?, mnt: open("mnt")? })
}

/// Waits up to `timeout_ms` for one message on `sock`.
pub(crate) fn await_message(sock: &OwnedFd, timeout_ms: i32) -> Result<Message, BoxError> {
    let mut fds = [libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    let n = sys::poll(&mut fds, timeout_ms).map_err(|errno| BoxError::Sys { what: "wait for the box", errno })?;
    if n == 0 {
        return Err(BoxError::Sys { what: "wait for the box's first message", errno: Errno(libc::ETIMEDOUT) });
    }
    let mut m = [0u8; 64];
    match sys::recv_with_fd(sock.as_fd(), &mut m) {
        Ok((0, _)) => Err(BoxError::SetupVanished(0)),
        Ok((len, _)) => Ok(Message::decode(&m[..len])?),
        Err(errno) => Err(BoxError::Sys { what: "read the box channel", errno }),
    }
}
