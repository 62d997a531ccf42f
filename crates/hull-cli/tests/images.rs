//! `hull import` / `images` / `rmi` / `run --image`, with OCI layouts and docker archives built
//! here from a static busybox.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use hull_image::oci::Digest;
use serde_json::{json, Value};

fn busybox() -> Option<Vec<u8>> {
    let b = std::fs::read("/bin/busybox").ok();
    if b.is_none() {
        eprintln!("SKIP: /bin/busybox (busybox-static) is not installed");
    }
    b
}

/// A gzip layer with busybox, /bin/sh, /srv and a marker file.
fn layer(busybox: &[u8], marker: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut add = |path: &str, data: &[u8], mode: u32, kind: tar::EntryType, link: Option<&str>| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        if let Some(l) = link {
            h.set_link_name(l).unwrap();
        }
        b.append_data(&mut h, path, data).unwrap();
    };
    add("bin/", b"", 0o755, tar::EntryType::Directory, None);
    add("bin/busybox", busybox, 0o755, tar::EntryType::Regular, None);
    add(
        "bin/sh",
        b"",
        0o777,
        tar::EntryType::Symlink,
        Some("busybox"),
    );
    add("srv/", b"", 0o755, tar::EntryType::Directory, None);
    add(
        "marker",
        marker.as_bytes(),
        0o644,
        tar::EntryType::Regular,
        None,
    );
    b.into_inner().unwrap().finish().unwrap()
}

fn config() -> Vec<u8> {
    serde_json::to_vec(&json!({"architecture": "amd64", "os": "linux", "config": {"Env": ["GREETING=hi"], "Cmd": ["/bin/sh", "-c", "echo $GREETING from image; pwd; cat /marker"], "WorkingDir": "/srv"}})).unwrap()
}

fn put(dir: &Path, bytes: &[u8]) -> Value {
    let d = Digest::of(bytes);
    std::fs::write(dir.join("blobs/sha256").join(d.hex()), bytes).unwrap();
    json!({"digest": d.to_string(), "size": bytes.len()})
}

/// Writes an OCI image layout; `multi` wraps the manifest in a two-platform index.
fn oci_layout(dir: &Path, busybox: &[u8], marker: &str, multi: bool) {
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let mut l = put(dir, &layer(busybox, marker));
    l["mediaType"] = json!("application/vnd.oci.image.layer.v1.tar+gzip");
    let mut c = put(dir, &config());
    c["mediaType"] = json!("application/vnd.oci.image.config.v1+json");
    let manifest = serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": c, "layers": [l]})).unwrap();
    let mut m = put(dir, &manifest);
    m["mediaType"] = json!("application/vnd.oci.image.manifest.v1+json");
    let top = if multi {
        let arch = if cfg!(target_arch = "aarch64") {
            "arm64"
        } else {
            "amd64"
        };
        let other = json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{}", "0".repeat(64)), "size": 1, "platform": {"os": "linux", "architecture": "s390x"}});
        let mut mine = m.clone();
        mine["platform"] = json!({"os": "linux", "architecture": arch});
        let index = serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [other, mine]})).unwrap();
        let mut i = put(dir, &index);
        i["mediaType"] = json!("application/vnd.oci.image.index.v1+json");
        i
    } else {
        m
    };
    let mut top = top;
    top["annotations"] = json!({"org.opencontainers.image.ref.name": "v1"});
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [top]})).unwrap(),
    )
    .unwrap();
}

fn hull_in(home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(common::bin())
        .args(args)
        .env("HULL_HOME", home)
        .output()
        .unwrap()
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn roots(home: &Path) -> usize {
    std::fs::read_dir(home.join("images/roots"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn import_an_oci_layout_run_it_reimport_and_remove() {
    let Some(bb) = busybox() else { return };
    let home = tempfile::tempdir().unwrap();
    let layout = tempfile::tempdir().unwrap();
    oci_layout(layout.path(), &bb, "layout-one", false);
    let out = ok(&hull_in(
        home.path(),
        &[
            "import",
            layout.path().to_str().unwrap(),
            "--name",
            "test/bb:v1",
        ],
    ));
    assert!(
        out.contains("test/bb:v1") && out.contains("sha256:"),
        "{out}"
    );
    let list: Value =
        serde_json::from_str(&ok(&hull_in(home.path(), &["images", "--json"]))).unwrap();
    assert_eq!(list[0]["name"], "test/bb:v1");

    // The image config is applied: Cmd, Env and WorkingDir.
    let run = ok(&hull_in(home.path(), &["run", "--image", "test/bb:v1"]));
    assert_eq!(run, "hi from image\n/srv\nlayout-one");
    // The image's root is read-only in the box and the host is not visible.
    let run = ok(&hull_in(
        home.path(),
        &[
            "run",
            "--image",
            "test/bb:v1",
            "--",
            "/bin/sh",
            "-c",
            "touch /bin/x 2>/dev/null || echo ro; test -e /usr/bin/python3 || echo isolated",
        ],
    ));
    assert_eq!(run, "ro\nisolated\n");

    // Re-import: nothing new is unpacked.
    let meta = home.path().join("images/roots");
    let before: Vec<_> = std::fs::read_dir(&meta)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().modified().unwrap())
        .collect();
    ok(&hull_in(
        home.path(),
        &[
            "import",
            layout.path().to_str().unwrap(),
            "--name",
            "test/bb:v1",
        ],
    ));
    let after: Vec<_> = std::fs::read_dir(&meta)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().modified().unwrap())
        .collect();
    assert_eq!(before, after);
    assert_eq!(roots(home.path()), 1);

    ok(&hull_in(home.path(), &["rmi", "test/bb:v1"]));
    assert_eq!(roots(home.path()), 0);
    assert_eq!(
        std::fs::read_dir(home.path().join("images/blobs/sha256"))
            .unwrap()
            .count(),
        0
    );
    let out = hull_in(home.path(), &["run", "--image", "test/bb:v1", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
}

#[test]
fn a_corrupted_blob_is_refused_and_nothing_is_published() {
    let Some(bb) = busybox() else { return };
    let home = tempfile::tempdir().unwrap();
    let layout = tempfile::tempdir().unwrap();
    oci_layout(layout.path(), &bb, "corrupt-me", false);
    // Flip a byte in the biggest blob (the layer).
    let mut blobs: Vec<_> = std::fs::read_dir(layout.path().join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    blobs.sort_by_key(|p| std::fs::metadata(p).unwrap().len());
    let layer = blobs.last().unwrap();
    let mut bytes = std::fs::read(layer).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(layer, bytes).unwrap();
    let out = hull_in(
        home.path(),
        &["import", layout.path().to_str().unwrap(), "--name", "bad:1"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("digest mismatch"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(roots(home.path()), 0);
    let list: Value =
        serde_json::from_str(&ok(&hull_in(home.path(), &["images", "--json"]))).unwrap();
    assert_eq!(list, json!([]));
}

#[test]
fn a_multi_platform_index_picks_this_host() {
    let Some(bb) = busybox() else { return };
    let home = tempfile::tempdir().unwrap();
    let layout = tempfile::tempdir().unwrap();
    oci_layout(layout.path(), &bb, "multi", true);
    ok(&hull_in(
        home.path(),
        &[
            "import",
            layout.path().to_str().unwrap(),
            "--name",
            "multi:v1",
        ],
    ));
    assert_eq!(
        ok(&hull_in(
            home.path(),
            &[
                "run",
                "--image",
                "multi:v1",
                "--",
                "/bin/busybox",
                "cat",
                "/marker"
            ]
        )),
        "multi"
    );
}

#[test]
fn import_a_docker_archive_and_an_oci_archive() {
    let Some(bb) = busybox() else { return };
    let home = tempfile::tempdir().unwrap();
    // docker save layout: manifest.json, <config>.json, <id>/layer.tar (uncompressed).
    let work = tempfile::tempdir().unwrap();
    let gz = layer(&bb, "from-docker");
    let mut raw = Vec::new();
    std::io::copy(&mut flate2::read::GzDecoder::new(gz.as_slice()), &mut raw).unwrap();
    std::fs::create_dir(work.path().join("abc")).unwrap();
    std::fs::write(work.path().join("abc/layer.tar"), &raw).unwrap();
    std::fs::write(work.path().join("cfg.json"), config()).unwrap();
    std::fs::write(work.path().join("manifest.json"), serde_json::to_vec(&json!([{"Config": "cfg.json", "RepoTags": ["dock/bb:latest"], "Layers": ["abc/layer.tar"]}])).unwrap()).unwrap();
    let archive = work.path().join("image.tar");
    let mut t = tar::Builder::new(std::fs::File::create(&archive).unwrap());
    for f in ["manifest.json", "cfg.json", "abc/layer.tar"] {
        t.append_path_with_name(work.path().join(f), f).unwrap();
    }
    t.into_inner().unwrap().flush().unwrap();
    let out = ok(&hull_in(
        home.path(),
        &["import", archive.to_str().unwrap()],
    ));
    assert!(out.contains("dock/bb:latest"), "{out}");
    assert_eq!(
        ok(&hull_in(
            home.path(),
            &[
                "run",
                "--image",
                "dock/bb:latest",
                "--",
                "/bin/busybox",
                "cat",
                "/marker"
            ]
        )),
        "from-docker"
    );

    // An OCI layout packed as a tar.
    let layout = tempfile::tempdir().unwrap();
    oci_layout(layout.path(), &bb, "from-oci-archive", false);
    let oci_tar = work.path().join("oci.tar");
    let mut t = tar::Builder::new(std::fs::File::create(&oci_tar).unwrap());
    t.append_dir_all(".", layout.path()).unwrap();
    t.into_inner().unwrap().flush().unwrap();
    ok(&hull_in(
        home.path(),
        &["import", oci_tar.to_str().unwrap(), "--name", "ociarch:1"],
    ));
    assert_eq!(
        ok(&hull_in(
            home.path(),
            &[
                "run",
                "--image",
                "ociarch:1",
                "--",
                "/bin/busybox",
                "cat",
                "/marker"
            ]
        )),
        "from-oci-archive"
    );
}

#[test]
fn bad_import_input_is_explained() {
    let home = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = hull_in(home.path(), &["import", empty.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an OCI image layout"));
    let out = hull_in(
        home.path(),
        &[
            "import",
            empty.path().to_str().unwrap(),
            "--name",
            "../evil",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid"));
}
