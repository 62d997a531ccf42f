//! Black-box tests of the `hull` binary's behaviour as a command-line tool (not of boxes).

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// A report whose reader went away (`hull doctor | head`) ends quietly by SIGPIPE, as `ls`
/// does, instead of panicking on the failed write (exit 101 with a backtrace hint).
#[test]
fn reports_end_quietly_when_their_reader_goes_away() {
    for args in [&["doctor", "--json"][..], &["doctor"], &["images"]] {
        let (read, write) = rustix::pipe::pipe().expect("a pipe");
        drop(read);
        let out = Command::new(common::bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .output()
            .expect("spawn hull");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "hull {args:?}: {err}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "hull {args:?}: {out:?}"
        );
    }
}

/// Bad arguments exit 125 like every other hull error (docker's convention: a program's own
/// exit codes are never hull's), naming the flag; `--help` exits 0.
#[test]
fn bad_arguments_exit_125_and_help_exits_0() {
    for args in [
        &["run", "--no-such-flag", "--", "true"][..],
        &["run", "--network", "maybe", "--", "true"],
        &["doctor", "--no-such-flag"],
        &[],
    ] {
        let out = Command::new(common::bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        assert_eq!(out.status.code(), Some(125), "hull {args:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "hull {args:?} said nothing");
    }
    for args in [&["--help"][..], &["run", "--help"], &["--version"]] {
        let out = Command::new(common::bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        assert_eq!(out.status.code(), Some(0), "hull {args:?}: {out:?}");
    }
}
