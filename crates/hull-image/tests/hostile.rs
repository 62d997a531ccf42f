//! Layer extraction against normal and hostile archives, generated here byte by byte (the tar
//! crate's builder refuses `..`, so hostile names are written into raw headers).

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use hull_image::{extract_layer, Compression, ExtractError, Limits};

/// One member of a test archive.
struct M<'a> {
    name: &'a str,
    kind: tar::EntryType,
    data: &'a [u8],
    link: &'a str,
    mode: u32,
}

fn file<'a>(name: &'a str, data: &'a [u8]) -> M<'a> {
    M {
        name,
        kind: tar::EntryType::Regular,
        data,
        link: "",
        mode: 0o644,
    }
}
fn dir(name: &str) -> M<'_> {
    M {
        name,
        kind: tar::EntryType::Directory,
        data: b"",
        link: "",
        mode: 0o755,
    }
}
fn symlink<'a>(name: &'a str, target: &'a str) -> M<'a> {
    M {
        name,
        kind: tar::EntryType::Symlink,
        data: b"",
        link: target,
        mode: 0o777,
    }
}
fn hardlink<'a>(name: &'a str, target: &'a str) -> M<'a> {
    M {
        name,
        kind: tar::EntryType::Link,
        data: b"",
        link: target,
        mode: 0o644,
    }
}

/// Builds a tar with raw names (no validation), so hostile members can be expressed.
fn archive(members: &[M<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in members {
        let mut h = tar::Header::new_old();
        {
            let old = h.as_old_mut();
            old.name[..m.name.len()].copy_from_slice(m.name.as_bytes());
            old.linkname[..m.link.len()].copy_from_slice(m.link.as_bytes());
        }
        h.set_entry_type(m.kind);
        h.set_size(m.data.len() as u64);
        h.set_mode(m.mode);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(m.data);
        let pad = (512 - m.data.len() % 512) % 512;
        out.extend(std::iter::repeat_n(0u8, pad));
    }
    out.extend([0u8; 1024]);
    out
}

fn unpack(root: &Path, members: &[M<'_>]) -> Result<hull_image::Report, ExtractError> {
    extract_layer(
        archive(members).as_slice(),
        Compression::Detect,
        root,
        &Limits::default(),
    )
}

fn refused_member(r: Result<hull_image::Report, ExtractError>) -> String {
    match r {
        Err(ExtractError::Refused { member, .. }) => member,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_normal_layer_unpacks() {
    let root = tempfile::tempdir().unwrap();
    let r = unpack(
        root.path(),
        &[
            dir("usr/"),
            dir("usr/bin/"),
            file("usr/bin/tool", b"#!/bin/sh\n"),
            symlink("bin", "usr/bin"),
            hardlink("usr/bin/tool2", "usr/bin/tool"),
            file("./etc/os-release", b"ID=test\n"),
        ],
    )
    .unwrap();
    assert_eq!(r.entries, 6);
    assert_eq!(
        std::fs::read(root.path().join("usr/bin/tool")).unwrap(),
        b"#!/bin/sh\n"
    );
    assert_eq!(
        std::fs::read_link(root.path().join("bin"))
            .unwrap()
            .to_str(),
        Some("usr/bin")
    );
    let a = std::fs::metadata(root.path().join("usr/bin/tool")).unwrap();
    let b = std::fs::metadata(root.path().join("usr/bin/tool2")).unwrap();
    assert_eq!(a.ino(), b.ino());
    assert_eq!(
        std::fs::read(root.path().join("etc/os-release")).unwrap(),
        b"ID=test\n"
    );
}

#[test]
fn dotdot_and_absolute_paths_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    let root = outside.path().join("root");
    std::fs::create_dir(&root).unwrap();
    assert_eq!(
        refused_member(unpack(&root, &[file("../escaped", b"x")])),
        "../escaped"
    );
    assert!(!outside.path().join("escaped").exists());
    assert_eq!(
        refused_member(unpack(&root, &[file("a/../../escaped2", b"x")])),
        "a/../../escaped2"
    );
    assert!(!outside.path().join("escaped2").exists());
    let abs = outside.path().join("abs").display().to_string();
    assert_eq!(refused_member(unpack(&root, &[file(&abs, b"x")])), abs);
    assert!(!outside.path().join("abs").exists());
}

#[test]
fn a_symlinked_parent_cannot_carry_a_write_outside() {
    let outside = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let target = outside.path().display().to_string();
    let m = refused_member(unpack(
        root.path(),
        &[symlink("evil", &target), file("evil/pwned", b"x")],
    ));
    assert_eq!(m, "evil/pwned");
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "something was written outside the root"
    );
    // The same trick across layers: the symlink comes from a lower layer.
    let root2 = tempfile::tempdir().unwrap();
    unpack(root2.path(), &[symlink("lower", &target)]).unwrap();
    refused_member(unpack(root2.path(), &[file("lower/pwned", b"x")]));
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn a_file_replaces_a_symlink_instead_of_writing_through_it() {
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "original").unwrap();
    let root = tempfile::tempdir().unwrap();
    unpack(root.path(), &[symlink("x", victim.to_str().unwrap())]).unwrap();
    unpack(root.path(), &[file("x", b"new")]).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
    assert_eq!(std::fs::read(root.path().join("x")).unwrap(), b"new");
    assert!(!std::fs::symlink_metadata(root.path().join("x"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn hard_links_must_stay_inside() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    let root = tempfile::tempdir().unwrap();
    assert_eq!(
        refused_member(unpack(root.path(), &[hardlink("h", "../secret")])),
        "h"
    );
    assert_eq!(
        refused_member(unpack(
            root.path(),
            &[hardlink(
                "h2",
                &outside.path().join("secret").display().to_string()
            )]
        )),
        "h2"
    );
    // Through a symlinked directory inside the root.
    let m = refused_member(unpack(
        root.path(),
        &[
            symlink("out", outside.path().to_str().unwrap()),
            hardlink("h3", "out/secret"),
        ],
    ));
    assert_eq!(m, "h3");
    assert_eq!(
        std::fs::metadata(outside.path().join("secret"))
            .unwrap()
            .nlink(),
        1
    );
}

#[test]
fn whiteouts_and_opaque_whiteouts_apply() {
    let root = tempfile::tempdir().unwrap();
    unpack(
        root.path(),
        &[
            dir("d/"),
            file("d/x", b"1"),
            file("d/keep", b"1"),
            file("f", b"1"),
            dir("o/"),
            file("o/old", b"1"),
        ],
    )
    .unwrap();
    let r = unpack(
        root.path(),
        &[
            file("d/.wh.x", b""),
            file(".wh.f", b""),
            dir("o/"),
            file("o/.wh..wh..opq", b""),
            file("o/new", b"2"),
        ],
    )
    .unwrap();
    assert_eq!(r.whiteouts, 3);
    assert!(!root.path().join("d/x").exists() && root.path().join("d/keep").exists());
    assert!(!root.path().join("f").exists());
    assert!(
        !root.path().join("d/.wh.x").exists(),
        "the whiteout marker itself was created"
    );
    let names: Vec<String> = std::fs::read_dir(root.path().join("o"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["new".to_string()]);
}

#[test]
fn setuid_bits_are_dropped_unless_asked() {
    let root = tempfile::tempdir().unwrap();
    let mut m = file("su", b"x");
    m.mode = 0o4755;
    let r = unpack(root.path(), &[m]).unwrap();
    assert_eq!(r.dropped_setuid, vec!["su".to_string()]);
    assert_eq!(
        std::fs::metadata(root.path().join("su"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o755
    );
    let root2 = tempfile::tempdir().unwrap();
    let mut m = file("su", b"x");
    m.mode = 0o4755;
    let lim = Limits {
        keep_setuid: true,
        ..Limits::default()
    };
    extract_layer(
        archive(&[m]).as_slice(),
        Compression::None,
        root2.path(),
        &lim,
    )
    .unwrap();
    assert_eq!(
        std::fs::metadata(root2.path().join("su"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o4755
    );
}

#[test]
fn device_nodes_are_skipped_and_reported() {
    let root = tempfile::tempdir().unwrap();
    let dev = M {
        name: "dev/sda",
        kind: tar::EntryType::Block,
        data: b"",
        link: "",
        mode: 0o660,
    };
    let r = unpack(root.path(), &[dev]).unwrap();
    assert_eq!(r.skipped_devices, vec!["dev/sda".to_string()]);
    assert!(!root.path().join("dev/sda").exists());
}

#[test]
fn size_and_entry_limits_name_the_member() {
    let root = tempfile::tempdir().unwrap();
    let big = vec![0u8; 4096];
    let lim = Limits {
        max_bytes: 5000,
        ..Limits::default()
    };
    let r = extract_layer(
        archive(&[file("a", &big), file("b", &big)]).as_slice(),
        Compression::None,
        root.path(),
        &lim,
    );
    assert!(
        matches!(r, Err(ExtractError::Limit { ref member, .. }) if member == "b"),
        "{r:?}"
    );
    let lim = Limits {
        max_entries: 2,
        ..Limits::default()
    };
    let r = extract_layer(
        archive(&[file("a", b""), file("b", b""), file("c", b"")]).as_slice(),
        Compression::None,
        root.path(),
        &lim,
    );
    assert!(
        matches!(r, Err(ExtractError::Limit { ref member, .. }) if member == "c"),
        "{r:?}"
    );
}

#[test]
fn gzip_and_zstd_layers_are_detected() {
    let tar = archive(&[file("hello", b"world")]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(tar.as_slice(), 1).unwrap();
    for blob in [gz, zst] {
        let root = tempfile::tempdir().unwrap();
        extract_layer(
            blob.as_slice(),
            Compression::Detect,
            root.path(),
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(std::fs::read(root.path().join("hello")).unwrap(), b"world");
    }
}

#[test]
fn a_truncated_archive_is_an_error() {
    let root = tempfile::tempdir().unwrap();
    let tar = archive(&[file("hello", &[7u8; 3000])]);
    let r = extract_layer(
        &tar[..1500],
        Compression::None,
        root.path(),
        &Limits::default(),
    );
    assert!(r.is_err(), "{r:?}");
}
