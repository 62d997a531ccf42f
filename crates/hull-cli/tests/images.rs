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
        hull_testkit::skip("/bin/busybox (busybox-static) is not installed");
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
    // The embedded `host` first, then the store's.
    assert_eq!(list[0]["name"], "host");
    assert_eq!(list[0]["embedded"], true);
    assert_eq!(list[1]["name"], "test/bb:v1");

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
    assert_eq!(
        list,
        json!([{"name": "host", "digest": null, "embedded": true}])
    );
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

/// A `docker save` archive in `dir` (manifest.json, a config, one uncompressed layer holding
/// `/marker`), tagged `tag`; its path.
fn docker_archive(dir: &Path, busybox: &[u8], marker: &str, tag: &str) -> std::path::PathBuf {
    let gz = layer(busybox, marker);
    let mut raw = Vec::new();
    std::io::copy(&mut flate2::read::GzDecoder::new(gz.as_slice()), &mut raw).unwrap();
    std::fs::create_dir(dir.join("abc")).unwrap();
    std::fs::write(dir.join("abc/layer.tar"), &raw).unwrap();
    std::fs::write(dir.join("cfg.json"), config()).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(
            &json!([{"Config": "cfg.json", "RepoTags": [tag], "Layers": ["abc/layer.tar"]}]),
        )
        .unwrap(),
    )
    .unwrap();
    let archive = dir.join("image.tar");
    let mut t = tar::Builder::new(std::fs::File::create(&archive).unwrap());
    for f in ["manifest.json", "cfg.json", "abc/layer.tar"] {
        t.append_path_with_name(dir.join(f), f).unwrap();
    }
    t.into_inner().unwrap().flush().unwrap();
    archive
}

#[test]
fn import_a_docker_archive_and_an_oci_archive() {
    let Some(bb) = busybox() else { return };
    let home = tempfile::tempdir().unwrap();
    // docker save layout: manifest.json, <config>.json, <id>/layer.tar (uncompressed).
    let work = tempfile::tempdir().unwrap();
    let archive = docker_archive(work.path(), &bb, "from-docker", "dock/bb:latest");
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
    // A file that is no archive at all is said to be none, without its bytes quoted back
    // (the tar reader's error used to print them).
    let files = tempfile::tempdir().unwrap();
    let junk = files.path().join("junk.bin");
    let mut bytes = b"secret-looking text ".repeat(20);
    bytes.extend((0..=255u8).cycle().take(3000));
    std::fs::write(&junk, &bytes).unwrap();
    let out = hull_in(home.path(), &["import", junk.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("junk.bin is not an OCI image layout")
            && err.contains("nor a docker or OCI archive"),
        "{err}"
    );
    assert!(!err.contains("secret-looking") && err.len() < 300, "{err}");
}

/// An archive names its image itself: an OCI archive's `ref.name` when it is a whole name
/// (`ocibb:7`; a bare tag stays `imported:TAG`), a docker archive's tag; and a Docker Hub name
/// stored in full (`docker.io/library/hubbb:3`) is found as the user types it (`hubbb:3`).
#[test]
fn imports_take_the_archives_own_names_and_hub_names_resolve_short() {
    let Some(bb) = busybox() else { return };
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let layout = tempfile::tempdir().unwrap();
    oci_layout(layout.path(), &bb, "named-by-ref", false);
    let index = layout.path().join("index.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    v["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] = json!("ocibb:7");
    std::fs::write(&index, serde_json::to_vec(&v).unwrap()).unwrap();
    let oci_tar = work.path().join("oci.tar");
    let mut t = tar::Builder::new(std::fs::File::create(&oci_tar).unwrap());
    t.append_dir_all(".", layout.path()).unwrap();
    t.into_inner().unwrap().flush().unwrap();
    let out = ok(&hull_in(
        home.path(),
        &["import", oci_tar.to_str().unwrap()],
    ));
    assert!(out.starts_with("imported ocibb:7 "), "{out}");
    let run = |image: &str| {
        ok(&hull_in(
            home.path(),
            &[
                "run",
                "--image",
                image,
                "--",
                "/bin/busybox",
                "cat",
                "/marker",
            ],
        ))
    };
    assert_eq!(run("ocibb:7"), "named-by-ref");

    // The same image under a Hub name in full, as docker archives write their tags.
    let archive = docker_archive(
        work.path(),
        &bb,
        "from-the-hub",
        "docker.io/library/hubbb:3",
    );
    ok(&hull_in(
        home.path(),
        &["import", archive.to_str().unwrap()],
    ));
    assert_eq!(run("hubbb:3"), "from-the-hub");
    assert_eq!(run("docker.io/library/hubbb:3"), "from-the-hub");
}

/// A gzip layer holding `files` (name, contents); a name `.wh.NAME` is a whiteout.
fn small_layer(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data.as_bytes()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// Changes a document of [`small_layout`] ("config", "manifest", "index") before it is hashed.
type Edit<'a> = &'a dyn Fn(&str, &mut Value);

/// Writes an OCI layout whose manifest lists `order` (indexes into `layers`, each blob written
/// once); `edit` may change the config, manifest and top descriptor before each is hashed.
fn small_layout(dir: &Path, layers: &[Vec<u8>], order: &[usize], edit: &dyn Fn(&str, &mut Value)) {
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let descs: Vec<Value> = layers
        .iter()
        .map(|l| {
            let mut d = put(dir, l);
            d["mediaType"] = json!("application/vnd.oci.image.layer.v1.tar+gzip");
            d
        })
        .collect();
    let mut cfg = json!({"architecture": "amd64", "os": "linux", "config": {}});
    edit("config", &mut cfg);
    let mut c = put(dir, &serde_json::to_vec(&cfg).unwrap());
    c["mediaType"] = json!("application/vnd.oci.image.config.v1+json");
    let mut manifest = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": c, "layers": order.iter().map(|i| descs[*i].clone()).collect::<Vec<_>>()});
    edit("manifest", &mut manifest);
    let mut m = put(dir, &serde_json::to_vec(&manifest).unwrap());
    m["mediaType"] = json!("application/vnd.oci.image.manifest.v1+json");
    let mut index = json!({"schemaVersion": 2, "manifests": [m]});
    edit("index", &mut index);
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}

fn import_err(home: &Path, layout: &Path) -> String {
    let out = hull_in(home, &["import", layout.to_str().unwrap(), "--name", "t:1"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "imported: {err}");
    assert_eq!(roots(home), 0, "a root was published: {err}");
    err
}

/// Every descriptor's size must match its blob (the layer's, the config's, the manifest's).
#[test]
fn import_refuses_a_descriptor_whose_size_does_not_match_its_blob() {
    let layer = small_layer(&[("f", "data")]);
    let bump = |v: &mut Value| *v = json!(v.as_u64().unwrap() + 1);
    let cases: [(&str, Edit<'_>); 3] = [
        ("layer 0", &|what, v| {
            if what == "manifest" {
                bump(&mut v["layers"][0]["size"]);
            }
        }),
        ("config", &|what, v| {
            if what == "manifest" {
                bump(&mut v["config"]["size"]);
            }
        }),
        ("manifest", &|what, v| {
            if what == "index" {
                bump(&mut v["manifests"][0]["size"]);
            }
        }),
    ];
    for (what, edit) in cases {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        small_layout(dir.path(), std::slice::from_ref(&layer), &[0], edit);
        let err = import_err(home.path(), dir.path());
        assert!(
            err.contains(what) && err.contains("descriptor"),
            "{what}: {err}"
        );
    }
}

/// Manifests, configs and indexes over 4 MiB are refused, as `hull pull` refuses them.
#[test]
fn import_refuses_documents_over_4_mib() {
    let layer = small_layer(&[("f", "data")]);
    let pad = "x".repeat(5 << 20);
    for doc in ["index", "manifest", "config"] {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        small_layout(
            dir.path(),
            std::slice::from_ref(&layer),
            &[0],
            &|what, v| {
                if what == doc {
                    v["annotations"] = json!({ "pad": pad });
                }
            },
        );
        let err = import_err(home.path(), dir.path());
        assert!(err.contains("4194304"), "{doc}: {err}");
    }
    // A docker archive's manifest.json and config too.
    for doc in ["manifest.json", "cfg.json"] {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("layer.tar"), b"").unwrap();
        std::fs::write(
            dir.path().join("cfg.json"),
            serde_json::to_vec(&json!({"os": "linux"})).unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("manifest.json"),
            serde_json::to_vec(&json!([{"Config": "cfg.json", "Layers": ["layer.tar"]}])).unwrap(),
        )
        .unwrap();
        let mut big = std::fs::read(dir.path().join(doc)).unwrap();
        big.extend(std::iter::repeat_n(b' ', 5 << 20));
        std::fs::write(dir.path().join(doc), big).unwrap();
        let err = import_err(home.path(), dir.path());
        assert!(err.contains("4194304"), "{doc}: {err}");
    }
}

/// More layers than the limit are refused, naming it, in OCI layouts and docker archives; a
/// blob listed 10,000 times is one such image.
#[test]
fn import_refuses_more_layers_than_the_limit_naming_it() {
    let layer = small_layer(&[("f", "data")]);
    for n in [129, 10_000] {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        small_layout(
            dir.path(),
            std::slice::from_ref(&layer),
            &vec![0; n],
            &|_, _| {},
        );
        let err = import_err(home.path(), dir.path());
        assert!(
            err.contains(&format!("{n} layers")) && err.contains("at most 128"),
            "{n}: {err}"
        );
    }
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut raw = Vec::new();
    std::io::copy(
        &mut flate2::read::GzDecoder::new(layer.as_slice()),
        &mut raw,
    )
    .unwrap();
    std::fs::write(dir.path().join("layer.tar"), raw).unwrap();
    std::fs::write(
        dir.path().join("cfg.json"),
        serde_json::to_vec(&json!({"os": "linux"})).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("manifest.json"),
        serde_json::to_vec(&json!([{"Config": "cfg.json", "Layers": vec!["layer.tar"; 10_000]}]))
            .unwrap(),
    )
    .unwrap();
    let err = import_err(home.path(), dir.path());
    assert!(
        err.contains("10000 layers") && err.contains("at most 128"),
        "{err}"
    );
}

/// The `imported ... (SIZE, N layers, M unpacked)` counts of an import.
fn unpacked(out: &str) -> (usize, usize) {
    let tail = out.rsplit('(').next().unwrap();
    let nums: Vec<usize> = tail
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let n = nums.len();
    assert!(
        n >= 2 && tail.contains("layers") && tail.contains("unpacked"),
        "{out}"
    );
    (nums[n - 2], nums[n - 1])
}

/// A layer repeated right after itself is unpacked once (unpacking it again changes nothing);
/// repeated after another layer it is unpacked again, since that layer may have removed what
/// it holds, and the root is what applying every layer in order gives.
#[test]
fn a_repeated_layer_is_unpacked_once_in_a_row_and_again_after_another() {
    let a = small_layer(&[("f", "from a")]);
    let b = small_layer(&[(".wh.f", ""), ("g", "from b")]);
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    small_layout(
        dir.path(),
        &[a.clone(), b.clone()],
        &vec![0; 100],
        &|_, _| {},
    );
    let out = ok(&hull_in(
        home.path(),
        &["import", dir.path().to_str().unwrap(), "--name", "rep:1"],
    ));
    assert_eq!(unpacked(&out), (100, 1), "{out}");
    for (order, present) in [
        (&[0, 1][..], false),
        (&[0, 1, 0][..], true),
        (&[0, 0, 1, 1, 0, 0][..], true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        small_layout(dir.path(), &[a.clone(), b.clone()], order, &|_, _| {});
        let name = format!("rep:{}", order.len());
        let out = ok(&hull_in(
            home.path(),
            &["import", dir.path().to_str().unwrap(), "--name", &name],
        ));
        let runs = 1 + order.windows(2).filter(|w| w[0] != w[1]).count();
        assert_eq!(unpacked(&out), (order.len(), runs), "{order:?}: {out}");
        let digest = out
            .split_whitespace()
            .nth(2)
            .unwrap()
            .trim_start_matches("sha256:")
            .to_string();
        let root = home.path().join("images/roots").join(digest).join("rootfs");
        assert_eq!(root.join("f").exists(), present, "{order:?}");
        assert_eq!(std::fs::read_to_string(root.join("g")).unwrap(), "from b");
    }
}

/// An image archive whose blob is a symlink to a host file (which would also let one name
/// /dev/zero and never finish) is refused: blobs and documents are opened with no link
/// followed and must be regular files inside the image.
#[test]
fn import_never_follows_a_link_in_the_image_to_a_host_file() {
    let host = tempfile::tempdir().unwrap();
    let layer = small_layer(&[("from-host", "host file")]);
    let host_file = host.path().join("layer.tgz");
    std::fs::write(&host_file, &layer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    small_layout(dir.path(), std::slice::from_ref(&layer), &[0], &|_, _| {});
    let blob = dir
        .path()
        .join("blobs/sha256")
        .join(Digest::of(&layer).hex());
    std::fs::remove_file(&blob).unwrap();
    std::os::unix::fs::symlink(&host_file, &blob).unwrap();
    let archive = host.path().join("image.tar");
    let mut t = tar::Builder::new(std::fs::File::create(&archive).unwrap());
    t.follow_symlinks(false);
    t.append_dir_all(".", dir.path()).unwrap();
    t.into_inner().unwrap().flush().unwrap();
    let home = tempfile::tempdir().unwrap();
    let err = import_err(home.path(), &archive);
    assert!(err.contains("symbolic link"), "{err}");
}

/// Images built by docker and its kin carry no `/etc/resolv.conf` (their engine mounts one):
/// in a box a resolver would then ask the box's own loopback. The store adds the sandbox
/// network's (to an image published before it did, at its next use); a box on the gateway
/// network resolves and connects through it, and one on the host's network sees the host's
/// file. Loopback only: the gateway asks a test DNS server and reaches a test echo server.
#[test]
fn an_image_without_resolv_conf_resolves_names_on_the_sandbox_and_host_networks() {
    let Some(bb) = busybox() else { return };
    let home = tempfile::tempdir().unwrap();
    let layout = tempfile::tempdir().unwrap();
    oci_layout(layout.path(), &bb, "dns", false);
    ok(&hull_in(
        home.path(),
        &[
            "import",
            layout.path().to_str().unwrap(),
            "--name",
            "t/dns:1",
        ],
    ));
    let root = std::fs::read_dir(home.path().join("images/roots"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let added = root.join("rootfs/etc/resolv.conf");
    assert_eq!(
        std::fs::read(&added).unwrap(),
        hull_image::resolver::RESOLV_CONF
    );
    // An image stored before the store added the file gets it at its next use.
    std::fs::remove_file(&added).unwrap();

    let server = std::net::Ipv4Addr::new(127, 0, 0, 23);
    let echo = common::net::Echo::start(server);
    let dns = common::net::Dns::start(&[("api.example.test", server)]);
    let script = format!(
        "grep nameserver /etc/resolv.conf; busybox nslookup api.example.test | grep -c 198.1; echo hi | busybox nc api.example.test {}",
        echo.addr.port()
    );
    let out = Command::new(common::bin())
        .args([
            "run",
            "--image",
            "t/dns:1",
            "--allow-host",
            "api.example.test",
            "--allow-cidr",
            "127.0.0.23/32",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ])
        .env("HULL_HOME", home.path())
        .env("HULL_NET_DNS", dns.addr.to_string())
        .output()
        .unwrap();
    assert_eq!(
        ok(&out),
        "nameserver 10.0.2.2\n1\necho: hi\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(dns.asked("api.example.test"), 1);
    assert_eq!(echo.accepted(), 1);

    // The host's network: the host's own file covers the image's.
    if let Ok(host) = std::fs::read_to_string("/etc/resolv.conf") {
        let out = ok(&hull_in(
            home.path(),
            &[
                "run",
                "--image",
                "t/dns:1",
                "--network",
                "host",
                "--",
                "/bin/busybox",
                "cat",
                "/etc/resolv.conf",
            ],
        ));
        assert_eq!(out, host);
    }
}
