//! Workspace confinement of the host-side file operations and archives, without a box: the
//! hostile entries are planted directly, as code in a box would plant them.

use std::os::unix::fs::symlink;

use hull::files::Confined;
use hull::SandboxError;

fn ws() -> (tempfile::TempDir, Confined) {
    let d = tempfile::tempdir().unwrap();
    let c = Confined::open(d.path()).unwrap();
    (d, c)
}

/// The refusal's whole chain as one line (a system error such as ENOTDIR is the source of a
/// `PathFailed`, not part of its message).
fn refused(r: Result<impl std::fmt::Debug, SandboxError>) -> String {
    match r {
        Err(e @ (SandboxError::Path { .. } | SandboxError::PathFailed { .. })) => {
            hull_api::Chain(&e).to_string()
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn symlinks_anywhere_in_a_path_are_refused() {
    let (d, c) = ws();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    symlink(outside.path(), d.path().join("dir")).unwrap();
    symlink(outside.path().join("secret"), d.path().join("file")).unwrap();
    std::fs::create_dir(d.path().join("real")).unwrap();
    symlink("../dir", d.path().join("real/up")).unwrap();
    for p in ["dir/secret", "file", "real/up/secret"] {
        assert!(refused(c.read_file(p, 100)).contains("symlink"), "{p}");
        refused(c.write_file(p, b"x"));
    }
    refused(c.write_file("dir/new/deeper", b"x"));
    refused(c.list("dir"));
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret")).unwrap(),
        "s"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "something was created outside"
    );
}

#[test]
fn non_regular_files_are_refused_without_blocking() {
    let (d, c) = ws();
    let fifo = d.path().join("fifo");
    let cpath = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o644) }, 0);
    std::fs::create_dir(d.path().join("adir")).unwrap();
    // Opening the FIFO would wait for a writer forever, so the operations run on a thread and
    // a minute without their answer fails the test (a hang guard, not a speed claim).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        assert!(refused(c.read_file("fifo", 10)).contains("fifo"));
        refused(c.write_file("fifo", b"x"));
        refused(c.read_file("adir", 10));
        refused(c.write_file("adir", b"x"));
        let _ = tx.send(());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("a file operation blocked on the FIFO")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("a refusal check failed (the thread's panic is above)")
        }
    }
}

#[test]
fn writes_truncate_and_create_parents() {
    let (d, c) = ws();
    c.write_file("a/b/c.txt", b"long content").unwrap();
    c.write_file("/workspace/a/b/c.txt", b"short").unwrap();
    assert_eq!(std::fs::read(d.path().join("a/b/c.txt")).unwrap(), b"short");
    let (data, size) = c.read_file("a/b/c.txt", 2).unwrap();
    assert_eq!((data.as_slice(), size), (&b"sh"[..], 5));
    let (entries, complete) = c.list("").unwrap();
    assert!(complete);
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["a", "a/b", "a/b/c.txt"]);
}

#[test]
fn snapshot_skips_what_restore_would_refuse_and_round_trips() {
    let (d, c) = ws();
    c.write_file("keep/x.txt", b"data").unwrap();
    symlink("/etc/passwd", d.path().join("link")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let snap = out.path().join("s.tar.gz");
    let rep = hull::archive::snapshot(&c, &snap).unwrap();
    assert_eq!(rep.files, 1);
    assert_eq!(rep.skipped, ["link"]);
    let (_d2, c2) = ws();
    c2.write_file("old", b"gone after restore").unwrap();
    let r = hull::archive::restore(&c2, &snap).unwrap();
    assert_eq!(r.files, 1);
    assert_eq!(c2.read_file("keep/x.txt", 100).unwrap().0, b"data");
    refused(c2.read_file("old", 10));
}

/// One archive member: name, kind, data, mode.
type Member<'a> = (&'a str, tar::EntryType, &'a [u8], u32);

/// A `.tar.gz` at `path` with raw members, written as a hostile tool would write them.
fn tar_gz(path: &std::path::Path, members: &[Member<'_>]) {
    let f = std::fs::File::create(path).unwrap();
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        f,
        flate2::Compression::fast(),
    ));
    for (name, kind, data, mode) in members {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(*mode);
        h.set_size(data.len() as u64);
        let raw = &mut h.as_old_mut().name;
        raw.fill(0);
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap();
}

/// Every path below `root` (not following symlinks) with its type and contents, sorted.
fn tree(root: &std::path::Path) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(p);
                out.push((rel, "dir".into(), Vec::new()));
            } else if t.is_symlink() {
                let target = std::fs::read_link(&p).unwrap();
                out.push((
                    rel,
                    "symlink".into(),
                    target.into_os_string().into_encoded_bytes(),
                ));
            } else {
                out.push((rel, "file".into(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The box plants a symlink to a host directory where the caller's snapshot destination
/// passes (the destination lies in a workspace): nothing may be written through it.
#[test]
fn a_snapshot_never_writes_through_a_symlink_planted_in_its_destination() {
    let (d, c) = ws();
    c.write_file("x.txt", b"x").unwrap();
    let host = tempfile::tempdir().unwrap();
    symlink(host.path(), d.path().join("out")).unwrap();
    std::fs::create_dir(d.path().join("real")).unwrap();
    symlink(host.path(), d.path().join("real/deeper")).unwrap();
    for dest in [
        d.path().join("out/snap.tar.gz"),
        d.path().join("real/deeper/snap.tar.gz"),
    ] {
        let e = hull::archive::snapshot(&c, &dest).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{}: {e}", dest.display());
        assert_eq!(
            std::fs::read_dir(host.path()).unwrap().count(),
            0,
            "the snapshot to {} wrote through the planted link",
            dest.display()
        );
    }
    // A symlink as the last component is replaced, never followed.
    let victim = host.path().join("victim");
    symlink(&victim, d.path().join("real/snap.tar.gz")).unwrap();
    hull::archive::snapshot(&c, &d.path().join("real/snap.tar.gz")).unwrap();
    assert!(!victim.exists());
    assert!(std::fs::symlink_metadata(d.path().join("real/snap.tar.gz"))
        .unwrap()
        .is_file());
}

/// Another sandbox's box plants links to a host archive it cannot read itself (the file, or a
/// directory on its path); restoring from the link must not hand the host file to this one.
#[test]
fn a_restore_never_reads_a_host_file_through_a_planted_symlink() {
    let host = tempfile::tempdir().unwrap();
    let private = host.path().join("private.tar.gz");
    tar_gz(
        &private,
        &[("secret.txt", tar::EntryType::Regular, b"host secret", 0o644)],
    );
    let (other, _) = ws();
    symlink(&private, other.path().join("export.tar.gz")).unwrap();
    symlink(host.path(), other.path().join("exports")).unwrap();
    let (d, c) = ws();
    c.write_file("mine.txt", b"mine").unwrap();
    let before = tree(d.path());
    for src in [
        other.path().join("export.tar.gz"),
        other.path().join("exports/private.tar.gz"),
    ] {
        let e = hull::archive::restore(&c, &src).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{}: {e}", src.display());
        assert_eq!(tree(d.path()), before, "{}", src.display());
    }
    // The same archive named by its own path restores.
    hull::archive::restore(&c, &private).unwrap();
    assert_eq!(c.read_file("secret.txt", 100).unwrap().0, b"host secret");
}

/// Archives whose members disagree about a name (a file and a directory, a file under a file,
/// a file twice) are refused before the workspace is touched: its files stay byte for byte.
#[test]
fn a_restore_with_conflicting_members_leaves_the_workspace_exactly_as_it_was() {
    let (d, c) = ws();
    c.write_file("keep/data.bin", &[0, 1, 2, 255]).unwrap();
    c.write_file("top.txt", b"top").unwrap();
    symlink("keep/data.bin", d.path().join("a-link")).unwrap();
    let before = tree(d.path());
    let out = tempfile::tempdir().unwrap();
    let p = out.path().join("bad.tar.gz");
    let file = tar::EntryType::Regular;
    let dir = tar::EntryType::Directory;
    let cases: &[&[Member<'_>]] = &[
        &[("x", file, b"1", 0o644), ("x/", dir, b"", 0o755)],
        &[("x/", dir, b"", 0o755), ("x", file, b"1", 0o644)],
        &[("x", file, b"1", 0o644), ("x/y", file, b"2", 0o644)],
        &[("x/y", file, b"2", 0o644), ("x", file, b"1", 0o644)],
        &[("x", file, b"1", 0o644), ("./x", file, b"2", 0o644)],
    ];
    for members in cases {
        tar_gz(&p, members);
        match hull::archive::restore(&c, &p) {
            Err(e @ hull::SandboxError::Member { .. }) => {
                assert!(e.to_string().contains("`x"), "{members:?}: {e}")
            }
            other => panic!("{members:?}: not refused as a member: {other:?}"),
        }
        assert_eq!(tree(d.path()), before, "{members:?} changed the workspace");
    }
}

/// Restored files never carry setuid, setgid or sticky bits, whatever the archive says.
#[test]
fn restored_files_never_carry_setuid_bits() {
    use std::os::unix::fs::PermissionsExt;
    let (d, c) = ws();
    let out = tempfile::tempdir().unwrap();
    let p = out.path().join("suid.tar.gz");
    tar_gz(
        &p,
        &[
            ("bin/", tar::EntryType::Directory, b"", 0o7777),
            ("bin/su", tar::EntryType::Regular, b"#!/bin/sh\n", 0o6755),
            ("bin/sticky", tar::EntryType::Regular, b"x", 0o1777),
        ],
    );
    hull::archive::restore(&c, &p).unwrap();
    for f in ["bin", "bin/su", "bin/sticky"] {
        let mode = std::fs::symlink_metadata(d.path().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7000, 0, "{f}: {mode:o}");
        assert_eq!(mode & 0o022, 0, "{f} is writable by others: {mode:o}");
    }
}

/// A member that passes every check but cannot be created (a 300-byte name component) fails the
/// restore while unpacking: the workspace is left exactly as it was, with no staging left over.
#[test]
fn a_restore_that_fails_while_unpacking_leaves_the_workspace_exactly_as_it_was() {
    let (d, c) = ws();
    c.write_file("keep/data.bin", &[9, 8, 7]).unwrap();
    let before = tree(d.path());
    let out = tempfile::tempdir().unwrap();
    let p = out.path().join("long.tar.gz");
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        std::fs::File::create(&p).unwrap(),
        flate2::Compression::fast(),
    ));
    for name in ["ok.txt".to_string(), format!("d/{}", "x".repeat(300))] {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(1);
        b.append_data(&mut h, name, &b"y"[..]).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap();
    hull::archive::restore(&c, &p).unwrap_err();
    assert_eq!(tree(d.path()), before);
}

/// A path that cannot be opened for a reason of the system's (it does not exist) keeps that
/// error as its typed source: a front end's chain shows it once, and a caller can match its
/// kind; the message names the path only.
#[test]
fn a_path_that_cannot_be_opened_keeps_the_system_error_as_its_source() {
    let (_d, c) = ws();
    let e = c.read_file("no/such/file", 10).unwrap_err();
    let source = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .unwrap_or_else(|| panic!("no io::Error source: {e:?}"));
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(e.to_string(), "no/such/file");
    assert_eq!(e.kind(), "path_refused");
}
