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

fn refused(r: Result<impl std::fmt::Debug, SandboxError>) -> String {
    match r {
        Err(e @ SandboxError::Path { .. }) => e.to_string(),
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
    let t0 = std::time::Instant::now();
    assert!(refused(c.read_file("fifo", 10)).contains("fifo"));
    refused(c.write_file("fifo", b"x"));
    refused(c.read_file("adir", 10));
    refused(c.write_file("adir", b"x"));
    assert!(t0.elapsed().as_secs() < 2);
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
