//! File operations as a sandbox's `--user` where the keeper cannot take that user's ids: rootless,
//! a user's ids in the box are the caller's sub-ids, which a process of the caller can take only
//! inside a user namespace that maps them. The keeper runs `hull __files` there (a fresh user
//! namespace mapped as the box's, hull-box's `spawn_mapped`): it gets the box's root directory
//! (an `O_PATH` descriptor, SCM_RIGHTS with the first byte on its stdin, a socket), takes the
//! user's ids as its file-system ids, runs the one operation ([`super::files::Files`]) with the
//! user's permissions, and answers on the same socket in the keeper's own frames (`STDOUT` data,
//! then `RESULT`). So what it writes is the user's, and it can write where the user can (the
//! user's `/workspace`), and nowhere the user cannot.
//!
//! Over a rootless fuse-overlayfs root every operation (root's too) runs this way, in the box's
//! own user namespace ([`Enter::Join`]): the root is a FUSE mount of
//! that namespace, refused to the keeper outside it.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use clap::Args;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::files::{answer, FileOp, Files};
use super::wire;

/// `hull __files` (not for people: the keeper runs it).
#[derive(Debug, Args)]
pub struct FilesArgs {
    #[arg(long)]
    pub uid: u32,
    #[arg(long)]
    pub gid: u32,
    /// Where relative paths start (the sandbox's working directory).
    #[arg(long)]
    pub cwd: String,
    /// The operation, as JSON.
    pub op: String,
}

/// The helper's side (see the module comment); its stdin and stdout are one socket.
pub fn main(a: &FilesArgs) -> i32 {
    // Fd 0 is the socket the keeper gave (see the module comment), borrowed for the whole run.
    let sock = std::io::stdin();
    let sock = sock.as_fd();
    let op: FileOp = match serde_json::from_str(&a.op) {
        Ok(op) => op,
        Err(e) => {
            eprintln!("hull __files: bad operation: {e}");
            return 2;
        }
    };
    let root = match receive_root(sock) {
        Ok(root) => root,
        Err(e) => {
            eprintln!("hull __files: no root directory: {e}");
            return 2;
        }
    };
    let files = Files::in_namespace(root, a.cwd.clone());
    let mut out = std::io::stdout().lock();
    let mut input = std::io::stdin().lock();
    let r = {
        let mut data = |d: &[u8]| wire::write_frame(&mut out, wire::STDOUT, d);
        files.run(&op, (a.uid, a.gid), &mut data, &mut input)
    };
    let ok = wire::write_frame(&mut out, wire::RESULT, answer(r).to_string().as_bytes())
        .and_then(|()| out.flush());
    i32::from(ok.is_err())
}

fn receive_root(sock: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut root = None;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            for fd in fds {
                root.get_or_insert(fd);
            }
        }
    }
    root.ok_or_else(|| std::io::Error::other("no descriptor came with the first byte"))
}

/// Which user namespace `hull __files` runs in.
#[derive(Debug, Clone, Copy)]
pub enum Enter<'a> {
    /// A fresh one mapped as the box's (the caller's sub-id ranges, uids then gids).
    Mapped(&'a (hull_box::subids::IdRange, hull_box::subids::IdRange)),
    /// The box's own (this descriptor of it, opened while its pid 1 still let the keeper): a
    /// rootless fuse-overlayfs root is a FUSE mount of that namespace, which no process outside
    /// it (or its children) may use.
    Join(BorrowedFd<'a>),
}

/// A started `hull __files`; dropped unwaited (an error on the way), it is killed and reaped.
enum Helper {
    Mapped(hull_box::subids::MappedChild),
    Joined(Joined),
}

/// A `hull __files` joined to the box's user namespace, killed and reaped if never waited for
/// (as [`hull_box::subids::MappedChild`] is).
struct Joined(Option<std::process::Child>);

impl Joined {
    fn wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        match self.0.take() {
            Some(mut c) => c.wait(),
            None => Err(std::io::Error::other("already waited for")),
        }
    }
}

impl Drop for Joined {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The keeper's side: runs `op` as `owner` through `hull __files` in the user namespace
/// `enter` names, `input` its data, and copies its frames to `w`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    root: BorrowedFd<'_>,
    cwd: &str,
    op: &FileOp,
    owner: (u32, u32),
    enter: Enter<'_>,
    input: &mut (dyn Read + Send),
    w: &mut UnixStream,
) -> Result<(), String> {
    let (mut ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let text = |s: String| std::ffi::CString::new(s).map_err(|_| "a NUL byte".to_string());
    let args = [
        text("hull".into())?,
        text("__files".into())?,
        text(format!("--uid={}", owner.0))?,
        text(format!("--gid={}", owner.1))?,
        text(format!("--cwd={cwd}"))?,
        text(serde_json::to_string(op).map_err(|e| e.to_string())?)?,
    ];
    let argv: Vec<&std::ffi::CStr> = args.iter().map(|a| a.as_c_str()).collect();
    let child = match enter {
        Enter::Mapped(ranges) => Helper::Mapped(
            hull_box::subids::spawn_mapped(
                &[c"/proc/self/exe"],
                &argv,
                theirs.as_fd(),
                theirs.as_fd(),
                &ranges.0,
                &ranges.1,
            )
            .map_err(|e| format!("start hull __files: {}", hull_api::Chain(&e)))?,
        ),
        Enter::Join(ns) => {
            let ns = ns
                .try_clone_to_owned()
                .map_err(|e| format!("dup the box's user namespace: {e}"))?;
            let io = |s: &UnixStream| {
                s.try_clone()
                    .map(|c| std::process::Stdio::from(OwnedFd::from(c)))
                    .map_err(|e| e.to_string())
            };
            let mut cmd = std::process::Command::new("/proc/self/exe");
            std::os::unix::process::CommandExt::arg0(&mut cmd, "hull");
            cmd.args(args[1..].iter().map(|a| a.to_string_lossy().into_owned()))
                .stdin(io(&theirs)?)
                .stdout(io(&theirs)?);
            crate::sys::join_user_namespace(&mut cmd, ns);
            Helper::Joined(Joined(Some(
                cmd.spawn()
                    .map_err(|e| format!("start hull __files: {e}"))?,
            )))
        }
    };
    drop(theirs);
    let fds = [root];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(
        &ours,
        &[IoSlice::new(b"R")],
        &mut control,
        SendFlags::empty(),
    )
    .map_err(|e| format!("hand the root to hull __files: {e}"))?;
    let mut feed = ours.try_clone().map_err(|e| e.to_string())?;
    let writes = matches!(op, FileOp::Write { .. });
    std::thread::scope(|scope| {
        scope.spawn(move || {
            if writes {
                let _ = std::io::copy(input, &mut feed);
            }
            let _ = feed.shutdown(std::net::Shutdown::Write);
        });
        std::io::copy(&mut ours, w).map_err(|e| format!("relay hull __files: {e}"))
    })?;
    match child {
        Helper::Mapped(child) => match child.wait() {
            Ok(Some(s)) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0 => Ok(()),
            Ok(s) => Err(format!("hull __files ended with wait status {s:?}")),
            Err(e) => Err(hull_api::Chain(&e).to_string()),
        },
        Helper::Joined(joined) => match joined.wait() {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("hull __files ended: {s}")),
            Err(e) => Err(format!("wait for hull __files: {e}")),
        },
    }
}
