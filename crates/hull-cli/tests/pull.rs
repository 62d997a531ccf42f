//! `hull pull` against real registries: Debian's docker-registry on loopback, started and filled
//! by `scripts/registry.sh` (scripts/test.sh runs it), and a small registry inside this test for
//! what a real one cannot be made to do on demand (a bearer-token realm, a connection cut
//! mid-blob, a manifest that does not match its pinned digest, silence).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hull_image::oci::Digest;
use serde_json::{json, Value};

/// [`hull_in`], but killed if it has not ended within a minute: a guard against a wait that
/// never ends (the caller asserts it did end), not a claim about speed.
fn hull_in_guarded(home: &Path, args: &[&str]) -> Output {
    let child = Command::new(common::bin())
        .args(args)
        .env("HULL_HOME", home)
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hull");
    let pid = i32::try_from(child.id()).unwrap();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if wait.recv_timeout(Duration::from_secs(60))
            == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        {
            // SAFETY: kill has no memory preconditions; pid is our own child, not yet reaped
            // (the main thread reaps it only after it ends).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output().expect("wait for hull");
    let _ = done.send(());
    assert!(
        out.status.code().is_some(),
        "hull {args:?} had not ended after a minute: {}",
        text(&out.stderr)
    );
    out
}

/// `hull ARGS` with its own store; HOME too, so no ~/.docker/config.json leaks in.
fn hull_in(home: &Path, args: &[&str]) -> Output {
    Command::new(common::bin())
        .args(args)
        .env("HULL_HOME", home)
        .env("HOME", home)
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "hull failed ({}): {}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn home() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hull-pull-test-")
        .tempdir_in("/tmp")
        .unwrap()
}

/// The store's images (`hull images --json` without the embedded `host`).
fn images(home: &Path) -> Vec<Value> {
    let all: Vec<Value> = serde_json::from_str(&ok(&hull_in(home, &["images", "--json"]))).unwrap();
    all.into_iter().filter(|i| i["embedded"] != true).collect()
}

/// Nothing was published: no reference, no root, no partial left behind.
fn assert_nothing_stored(home: &Path) {
    assert_eq!(images(home), Vec::<Value>::new());
    let roots = std::fs::read_dir(home.join("images/roots"))
        .map(Iterator::count)
        .unwrap_or(0);
    assert_eq!(roots, 0, "a root was published");
    let partials: Vec<_> = std::fs::read_dir(home.join("images/tmp"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("partial-"))
        .collect();
    assert!(
        partials.is_empty(),
        "a rejected partial blob was kept: {partials:?}"
    );
}

// ---- the real registry (scripts/registry.sh) ----

fn up(var: &str, default: &str) -> Option<String> {
    let addr = std::env::var(var).unwrap_or_else(|_| default.into());
    // A name too (`localhost:5055`): the static binary's pass asks hull to resolve it.
    let target = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| panic!("{var}={addr}: not a HOST:PORT this machine resolves"));
    if TcpStream::connect_timeout(&target, Duration::from_secs(1)).is_ok() {
        return Some(addr);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no test registry on {addr} in CI; scripts/test.sh should have started it"
    );
    hull_testkit::skip(format!("no test registry on {addr}; start it with `bash scripts/registry.sh start` (scripts/test.sh does)"));
    None
}

fn registry() -> Option<String> {
    up("HULL_TEST_REGISTRY", "127.0.0.1:5055")
}

fn registry_dir() -> PathBuf {
    std::env::var_os("HULL_TEST_REGISTRY_DIR")
        .map_or_else(|| PathBuf::from("/tmp/hull-test-registry"), PathBuf::from)
}

#[test]
fn pull_then_run_uses_the_image_and_its_config() {
    let Some(reg) = registry() else { return };
    let h = home();
    let image = format!("{reg}/hull-test/busybox:1");
    let out = ok(&hull_in(h.path(), &["pull", &image]));
    assert!(
        out.contains("pulled") && out.contains("1 layer(s) downloaded"),
        "{out}"
    );
    // No command: the image's Cmd runs, with its Env and WorkingDir.
    let run = ok(&hull_in(h.path(), &["run", "--image", &image]));
    assert_eq!(run, "hello-from-pulled\nmarker: hull-test/busybox\n");
    let pwd = ok(&hull_in(
        h.path(),
        &["run", "--image", &image, "--", "/bin/pwd"],
    ));
    assert_eq!(pwd.trim(), "/srv");
    let list = images(h.path());
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["name"], image.as_str());
    // `hull serve` offers it.
    let mut serve = Command::new(common::bin())
        .arg("serve")
        .env("HULL_HOME", h.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    serve
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"id\":1,\"method\":\"hello\"}\n")
        .unwrap();
    let hello: Value = serde_json::from_str(
        text(&serve.wait_with_output().unwrap().stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(hello["result"]["images"], json!(["host", image]), "{hello}");
    // --name.
    ok(&hull_in(h.path(), &["pull", &image, "--name", "bb"]));
    assert_eq!(
        ok(&hull_in(
            h.path(),
            &["run", "--image", "bb", "--", "cat", "/hull-marker"]
        )),
        "marker: hull-test/busybox\n"
    );
}

#[test]
fn re_pull_of_an_unchanged_image_downloads_no_blob() {
    let Some(reg) = registry() else { return };
    let log = registry_dir().join("anon.log");
    // Only this test pulls hull-test/repull, so its blob requests in the log are ours.
    let blob_gets = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"GET /v2/hull-test/repull/blobs/"))
            .count()
    };
    let before = blob_gets();
    let h = home();
    let image = format!("{reg}/hull-test/repull:1");
    ok(&hull_in(h.path(), &["pull", &image]));
    let deadline = Instant::now() + Duration::from_secs(5);
    while blob_gets() < before + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let after_first = blob_gets();
    assert!(after_first >= before + 2, "the first pull should fetch the config and the layer ({before} -> {after_first} blob requests in {})", log.display());
    let out = ok(&hull_in(h.path(), &["pull", &image]));
    assert!(
        out.contains("up to date") && out.contains("nothing downloaded"),
        "{out}"
    );
    let out = ok(&hull_in(h.path(), &["pull", &image, "--name", "again"]));
    assert!(out.contains("up to date"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(blob_gets(), after_first, "a re-pull requested blobs");
    assert_eq!(
        ok(&hull_in(
            h.path(),
            &["run", "--image", "again", "--", "cat", "/hull-marker"]
        )),
        "marker: hull-test/busybox\n"
    );
}

#[test]
fn digest_pinned_pulls_verify_the_manifest() {
    let Some(reg) = registry() else { return };
    let h = home();
    ok(&hull_in(
        h.path(),
        &["pull", &format!("{reg}/hull-test/busybox:1")],
    ));
    let digest = images(h.path())[0]["digest"].as_str().unwrap().to_string();
    let pinned = format!("{reg}/hull-test/busybox@{digest}");
    let h2 = home();
    ok(&hull_in(h2.path(), &["pull", &pinned]));
    assert_eq!(
        ok(&hull_in(
            h2.path(),
            &["run", "--image", &pinned, "--", "cat", "/hull-marker"]
        )),
        "marker: hull-test/busybox\n"
    );
    // A digest the registry does not have.
    let h3 = home();
    let out = hull_in(
        h3.path(),
        &[
            "pull",
            &format!("{reg}/hull-test/busybox@sha256:{}", "0".repeat(64)),
        ],
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));
    assert_nothing_stored(h3.path());
}

#[test]
fn a_multi_platform_index_picks_the_platform() {
    let Some(reg) = registry() else { return };
    let h = home();
    let image = format!("{reg}/hull-test/multi:1");
    ok(&hull_in(h.path(), &["pull", &image]));
    let host_arch = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "amd64"
    };
    assert_eq!(
        ok(&hull_in(
            h.path(),
            &["run", "--image", &image, "--", "cat", "/hull-marker"]
        )),
        format!("marker: multi linux/{host_arch}\n")
    );
    let other = if host_arch == "amd64" {
        "arm64"
    } else {
        "amd64"
    };
    ok(&hull_in(
        h.path(),
        &[
            "pull",
            &image,
            "--platform",
            &format!("linux/{other}"),
            "--name",
            "other",
        ],
    ));
    assert_eq!(
        ok(&hull_in(
            h.path(),
            &["run", "--image", "other", "--", "cat", "/hull-marker"]
        )),
        format!("marker: multi linux/{other}\n")
    );
    let out = hull_in(
        h.path(),
        &[
            "pull",
            &image,
            "--platform",
            "linux/s390x",
            "--name",
            "none",
        ],
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("linux/s390x") && err.contains("linux/amd64") && err.contains("linux/arm64"),
        "{err}"
    );
    let out = hull_in(h.path(), &["pull", &image, "--platform", "s390x"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("--platform `s390x`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_zstd_layer_is_pulled_and_unpacked() {
    let Some(reg) = registry() else { return };
    let h = home();
    let image = format!("{reg}/hull-test/busybox:zstd");
    ok(&hull_in(h.path(), &["pull", &image]));
    let root = PathBuf::from(images(h.path())[0]["rootfs"].as_str().unwrap());
    let meta: Value =
        serde_json::from_slice(&std::fs::read(root.parent().unwrap().join("meta.json")).unwrap())
            .unwrap();
    let layer = meta["layers"][0]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let blob = std::fs::read(h.path().join("images/blobs/sha256").join(&layer)).unwrap();
    assert_eq!(
        &blob[..4],
        &[0x28, 0xb5, 0x2f, 0xfd],
        "the layer is not zstd: the fixture did not do what it says"
    );
    assert_eq!(
        ok(&hull_in(
            h.path(),
            &["run", "--image", &image, "--", "cat", "/hull-marker"]
        )),
        "marker: hull-test/busybox zstd\n"
    );
}

#[test]
fn a_corrupted_blob_is_refused_and_nothing_is_published() {
    let Some(reg) = registry() else { return };
    let h = home();
    let out = hull_in(h.path(), &["pull", &format!("{reg}/hull-test/corrupt:1")]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("digest mismatch") && err.contains("layer 0"),
        "{err}"
    );
    assert_nothing_stored(h.path());
    let blobs = std::fs::read_dir(h.path().join("images/blobs/sha256"))
        .unwrap()
        .count();
    assert_eq!(blobs, 0, "the corrupted blob was kept");
}

#[test]
fn basic_auth_credentials_come_from_the_credentials_file() {
    let Some(reg) = up("HULL_TEST_AUTH_REGISTRY", "127.0.0.1:5056") else {
        return;
    };
    let h = home();
    let image = format!("{reg}/hull-test/busybox:1");
    let out = hull_in(h.path(), &["pull", &image]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("user name and password") && err.contains("auth.json"),
        "{err}"
    );
    let write = |user_pass: &str| {
        use base64::Engine as _;
        let enc = base64::engine::general_purpose::STANDARD.encode(user_pass);
        std::fs::write(
            h.path().join("auth.json"),
            json!({"auths": {reg.clone(): {"auth": enc}}}).to_string(),
        )
        .unwrap();
    };
    write("hullpull:wrong-password");
    let out = hull_in(h.path(), &["pull", &image]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("credentials for it were refused"),
        "{}",
        text(&out.stderr)
    );
    assert_nothing_stored(h.path());
    write("hullpull:pull-secret-1");
    ok(&hull_in(h.path(), &["pull", &image]));
    assert_eq!(
        ok(&hull_in(
            h.path(),
            &["run", "--image", &image, "--", "cat", "/hull-marker"]
        )),
        "marker: hull-test/busybox\n"
    );
}

// ---- failures of the network itself ----

#[test]
fn an_unreachable_registry_fails_fast_and_clearly() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again: connections are refused
    let h = home();
    // A refused connection is reported as such, not waited on until --timeout (ten minutes
    // here; the guard ends a wait after one).
    let out = hull_in_guarded(
        h.path(),
        &[
            "pull",
            "--timeout",
            "600s",
            &format!("127.0.0.1:{port}/x/y:1"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach registry 127.0.0.1:{port}")) && err.contains("refused"),
        "{err}"
    );
    assert_nothing_stored(h.path());
}

#[test]
fn a_registry_that_never_answers_times_out() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // Accept and hold every connection, never answering.
    let held = Arc::new(Mutex::new(Vec::new()));
    let h2 = Arc::clone(&held);
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            h2.lock().unwrap().push(s);
        }
    });
    let h = home();
    let t = Instant::now();
    let out = hull_in_guarded(
        h.path(),
        &[
            "pull",
            "--timeout",
            "1s",
            &format!("127.0.0.1:{port}/x/y:1"),
        ],
    );
    // The 1 s read timeout ended the wait (the answer names it), and not before its time.
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900), "gave up after {took:?}");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot reach registry")
            && err.contains("timed out")
            && err.contains("read timeout 1s")
            && err.contains("--timeout"),
        "{err}"
    );
    assert!(!held.lock().unwrap().is_empty(), "hull never connected");
    assert_nothing_stored(h.path());
}

#[test]
fn bad_arguments_name_the_flag() {
    let h = home();
    for (args, needle) in [
        (
            vec![
                "pull",
                "--insecure-registry",
                "http://10.0.0.1",
                "127.0.0.1:1/x",
            ],
            "--insecure-registry `http://10.0.0.1`",
        ),
        (
            vec!["pull", "--timeout", "soon", "127.0.0.1:1/x"],
            "--timeout: `soon`",
        ),
        (
            vec!["pull", "--parallel", "0", "127.0.0.1:1/x"],
            "--parallel 0",
        ),
    ] {
        let out = hull_in(h.path(), &args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        assert!(
            text(&out.stderr).contains(needle),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = hull_in(h.path(), &["pull", "127.0.0.1:1/UPPER"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not valid")
            && text(&out.stderr).contains("[HOST[:PORT]/]REPO"),
        "{}",
        text(&out.stderr)
    );
}

// ---- a small registry in this test ----

#[derive(Clone, Default)]
struct Behaviour {
    /// Require `Bearer tok-123`, issued by /token for the right scope (to anyone when
    /// `token_creds` is None, else only with those basic credentials).
    token: bool,
    token_creds: Option<(String, String)>,
    /// Two more layers: the second replaces /hull-marker, the third whites out /extra.
    extra_layers: bool,
    /// Each blob answer waits 300 ms first (so parallel downloads overlap visibly).
    slow_blobs: bool,
    /// Cut the first download of the layer half-way (after sending the full Content-Length).
    cut_first_layer: bool,
    /// Answer every manifest reference with the manifest (a registry that ignores digests).
    any_manifest: bool,
    /// While set, every layer response (200 or 206) is cut after half of its body.
    cut_always: Arc<AtomicBool>,
    /// The manifest declares the config one byte larger than it is.
    config_size_off: bool,
    /// The manifest lists the first layer this many times (when more than 1).
    layer_repeats: usize,
}

struct Mini {
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
    /// The most blob requests in flight at once.
    max_in_flight: Arc<AtomicUsize>,
    manifest_digest: Digest,
    layer_size: usize,
    /// The first (busybox) layer's digest.
    layer_digest: String,
}

fn busybox() -> Option<Vec<u8>> {
    let b = std::fs::read("/bin/busybox").ok();
    if b.is_none() {
        hull_testkit::skip("/bin/busybox (busybox-static) is not installed");
    }
    b
}

/// One tar member: path, contents, mode, type, link target.
type Member<'a> = (&'a str, &'a [u8], u32, tar::EntryType, Option<&'a str>);

/// A gzip layer of these members.
fn gz_layer(entries: &[Member<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, data, mode, kind, link) in entries {
        let mut hd = tar::Header::new_gnu();
        hd.set_entry_type(*kind);
        hd.set_mode(*mode);
        hd.set_size(data.len() as u64);
        if let Some(l) = link {
            hd.set_link_name(l).unwrap();
        }
        b.append_data(&mut hd, path, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn mini_image(busybox: &[u8], how: &Behaviour) -> (HashMap<String, Vec<u8>>, Vec<u8>, usize) {
    let extra_layers = how.extra_layers;
    use tar::EntryType::{Directory, Regular, Symlink};
    let mut layers = vec![gz_layer(&[
        ("bin/", b"", 0o755, Directory, None),
        ("bin/busybox", busybox, 0o755, Regular, None),
        ("bin/cat", b"", 0o777, Symlink, Some("busybox")),
        (
            "hull-marker",
            b"marker: mini registry\n",
            0o644,
            Regular,
            None,
        ),
        ("extra", b"x", 0o644, Regular, None),
    ])];
    if extra_layers {
        layers.push(gz_layer(&[(
            "hull-marker",
            b"marker: layer 2 wins\n",
            0o644,
            Regular,
            None,
        )]));
        layers.push(gz_layer(&[(".wh.extra", b"", 0o644, Regular, None)]));
    }
    let config = serde_json::to_vec(&json!({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/cat", "/hull-marker"]}})).unwrap();
    let cd = Digest::of(&config);
    let mut descs: Vec<Value> = layers.iter().map(|l| json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": Digest::of(l).to_string(), "size": l.len()})).collect();
    for _ in 1..how.layer_repeats {
        descs.insert(0, descs[0].clone());
    }
    let config_size = config.len() + usize::from(how.config_size_off);
    let manifest = serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd.to_string(), "size": config_size},
        "layers": descs}))
    .unwrap();
    let size = layers[0].len();
    let mut blobs = HashMap::new();
    for l in layers {
        blobs.insert(Digest::of(&l).to_string(), l);
    }
    blobs.insert(cd.to_string(), config);
    (blobs, manifest, size)
}

impl Mini {
    fn start(busybox: &[u8], how: Behaviour) -> Mini {
        let (blobs, manifest, layer_size) = mini_image(busybox, &how);
        let manifest_digest = Digest::of(&manifest);
        let layer_digest = serde_json::from_slice::<Value>(&manifest).unwrap()["layers"][0]
            ["digest"]
            .as_str()
            .unwrap()
            .to_string();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let log = Arc::new(Mutex::new(Vec::new()));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let state = Arc::new((
            blobs,
            manifest,
            manifest_digest.clone(),
            how,
            addr.clone(),
            Arc::clone(&log),
            Mutex::new(false),
        ));
        let (mx, inf) = (Arc::clone(&max_in_flight), in_flight);
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let st = Arc::clone(&state);
                let (mx, inf) = (Arc::clone(&mx), Arc::clone(&inf));
                std::thread::spawn(move || {
                    let (blobs, manifest, md, how, addr, log, cut_done) = &*st;
                    let _ = serve_one(
                        s,
                        blobs,
                        manifest,
                        md,
                        how,
                        addr,
                        log,
                        cut_done,
                        (&inf, &mx),
                    );
                });
            }
        });
        Mini {
            addr,
            log,
            max_in_flight,
            manifest_digest,
            layer_size,
            layer_digest,
        }
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[allow(clippy::too_many_arguments)]
fn serve_one(
    s: TcpStream,
    blobs: &HashMap<String, Vec<u8>>,
    manifest: &[u8],
    md: &Digest,
    how: &Behaviour,
    addr: &str,
    log: &Mutex<Vec<String>>,
    cut_done: &Mutex<bool>,
    (in_flight, max_in_flight): (&AtomicUsize, &AtomicUsize),
) -> std::io::Result<()> {
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let auth = headers.get("authorization").cloned().unwrap_or_default();
    let range = headers.get("range").cloned();
    log.lock().unwrap().push(format!(
        "GET {target} range={} auth={auth}",
        range.as_deref().unwrap_or("-")
    ));
    let mut w = s;
    let reply =
        |w: &mut TcpStream, status: &str, extra: &str, body: &[u8]| -> std::io::Result<()> {
            write!(
                w,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
                body.len()
            )?;
            w.write_all(body)
        };
    if let Some(query) = target.strip_prefix("/token?") {
        use base64::Engine as _;
        let want = how.token_creds.as_ref().map(|(user, pass)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
            )
        });
        if want.is_some_and(|w| auth != w) {
            return reply(
                &mut w,
                "401 Unauthorized",
                "",
                b"{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}",
            );
        }
        if !query.contains("service=mini-service")
            || !query.contains("scope=repository%3Amini%2Fimg%3Apull")
        {
            return reply(&mut w, "400 Bad Request", "", b"bad scope");
        }
        return reply(
            &mut w,
            "200 OK",
            "Content-Type: application/json\r\n",
            br#"{"token":"tok-123"}"#,
        );
    }
    if how.token && auth != "Bearer tok-123" {
        let challenge = format!("WWW-Authenticate: Bearer realm=\"http://{addr}/token\",service=\"mini-service\",scope=\"repository:mini/img:pull\"\r\n");
        return reply(&mut w, "401 Unauthorized", &challenge, b"{}");
    }
    if let Some(reference) = target.strip_prefix("/v2/mini/img/manifests/") {
        if reference == "1" || reference == md.to_string() || how.any_manifest {
            return reply(
                &mut w,
                "200 OK",
                "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n",
                manifest,
            );
        }
        return reply(
            &mut w,
            "404 Not Found",
            "",
            b"{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}",
        );
    }
    if let Some(d) = target.strip_prefix("/v2/mini/img/blobs/") {
        let Some(blob) = blobs.get(d) else {
            return reply(&mut w, "404 Not Found", "", b"");
        };
        if how.slow_blobs {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            max_in_flight.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if how.cut_always.load(Ordering::SeqCst) && blob.len() > 100_000 {
            let from = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.strip_suffix('-'))
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            let status = if from > 0 {
                format!(
                    "206 Partial Content\r\nContent-Range: bytes {from}-{}/{}",
                    blob.len() - 1,
                    blob.len()
                )
            } else {
                "200 OK".into()
            };
            write!(
                w,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                blob.len() - from
            )?;
            w.write_all(&blob[from..from + (blob.len() - from) / 2])?;
            return w.shutdown(std::net::Shutdown::Both);
        }
        if let Some(from) = range
            .as_deref()
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<usize>().ok())
        {
            let cr = format!(
                "Content-Range: bytes {from}-{}/{}\r\n",
                blob.len() - 1,
                blob.len()
            );
            return reply(&mut w, "206 Partial Content", &cr, &blob[from..]);
        }
        let cut = how.cut_first_layer
            && blob.len() > 100_000
            && !std::mem::replace(&mut *cut_done.lock().unwrap(), true);
        if cut {
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                blob.len()
            )?;
            w.write_all(&blob[..blob.len() / 2])?;
            return w.shutdown(std::net::Shutdown::Both);
        }
        return reply(&mut w, "200 OK", "", blob);
    }
    reply(&mut w, "404 Not Found", "", b"")
}

#[test]
fn bearer_token_flow_with_credentials() {
    let Some(bb) = busybox() else { return };
    let mini = Mini::start(
        &bb,
        Behaviour {
            token: true,
            token_creds: Some(("tok-user".into(), "tok-pass".into())),
            ..Behaviour::default()
        },
    );
    let h = home();
    let image = format!("{}/mini/img:1", mini.addr);
    // No credentials: the token service refuses, and the message says where they go.
    let out = hull_in(h.path(), &["pull", &image]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("token service") && text(&out.stderr).contains("auth.json"),
        "{}",
        text(&out.stderr)
    );
    assert_nothing_stored(h.path());
    // Docker's other spelling: username/password fields.
    std::fs::write(
        h.path().join("auth.json"),
        json!({"auths": {mini.addr.clone(): {"username": "tok-user", "password": "tok-pass"}}})
            .to_string(),
    )
    .unwrap();
    ok(&hull_in(h.path(), &["pull", &image]));
    assert_eq!(
        ok(&hull_in(h.path(), &["run", "--image", &image])),
        "marker: mini registry\n"
    );
    let log = mini.log();
    assert!(
        log.iter()
            .any(|l| l.starts_with("GET /token?") && l.contains("auth=Basic ")),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .filter(|l| l.contains("/blobs/"))
            .all(|l| l.ends_with("auth=Bearer tok-123")),
        "{log:#?}"
    );
}

#[test]
fn a_download_cut_mid_blob_resumes_with_a_range_request() {
    let Some(bb) = busybox() else { return };
    let mini = Mini::start(
        &bb,
        Behaviour {
            cut_first_layer: true,
            ..Behaviour::default()
        },
    );
    let h = home();
    let image = format!("{}/mini/img:1", mini.addr);
    let out = ok(&hull_in(h.path(), &["pull", &image]));
    assert!(out.contains("1 layer(s) downloaded"), "{out}");
    let log = mini.log();
    let half = mini.layer_size / 2;
    assert!(
        log.iter()
            .any(|l| l.contains("/blobs/") && l.contains(&format!("range=bytes={half}-"))),
        "no resume from byte {half}: {log:#?}"
    );
    assert_eq!(
        ok(&hull_in(h.path(), &["run", "--image", &image])),
        "marker: mini registry\n"
    );
}

#[test]
fn a_manifest_that_does_not_match_its_pinned_digest_is_refused() {
    let Some(bb) = busybox() else { return };
    let mini = Mini::start(
        &bb,
        Behaviour {
            any_manifest: true,
            ..Behaviour::default()
        },
    );
    let h = home();
    let wrong = format!("sha256:{}", "1".repeat(64));
    let out = hull_in(
        h.path(),
        &["pull", &format!("{}/mini/img@{wrong}", mini.addr)],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("digest mismatch")
            && err.contains(&wrong)
            && err.contains(&mini.manifest_digest.to_string()),
        "{err}"
    );
    assert_nothing_stored(h.path());
    assert!(
        !mini.log().iter().any(|l| l.contains("/blobs/")),
        "blobs were fetched for an unverified manifest"
    );
    // The right pin works.
    ok(&hull_in(
        h.path(),
        &[
            "pull",
            &format!("{}/mini/img@{}", mini.addr, mini.manifest_digest),
        ],
    ));
}

/// `hull pull` and `hull import` share their checks (`hull_image::checks`): a config whose size
/// is not its descriptor's is refused, and so is a manifest with more than 128 layers, before
/// any blob is requested; a layer repeated in a row is pulled and unpacked.
#[test]
fn pull_checks_descriptor_sizes_and_the_layer_count() {
    let Some(bb) = busybox() else { return };
    let mini = Mini::start(
        &bb,
        Behaviour {
            config_size_off: true,
            ..Behaviour::default()
        },
    );
    let h = home();
    let out = hull_in(h.path(), &["pull", &format!("{}/mini/img:1", mini.addr)]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("image config") && err.contains("descriptor says"),
        "{err}"
    );
    assert_nothing_stored(h.path());
    let mini = Mini::start(
        &bb,
        Behaviour {
            layer_repeats: 200,
            ..Behaviour::default()
        },
    );
    let out = hull_in(h.path(), &["pull", &format!("{}/mini/img:1", mini.addr)]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("200 layers") && err.contains("at most 128"),
        "{err}"
    );
    assert_nothing_stored(h.path());
    assert!(
        !mini.log().iter().any(|l| l.contains("/blobs/")),
        "blobs were fetched for a manifest with too many layers"
    );
    let mini = Mini::start(
        &bb,
        Behaviour {
            layer_repeats: 5,
            ..Behaviour::default()
        },
    );
    ok(&hull_in(
        h.path(),
        &["pull", &format!("{}/mini/img:1", mini.addr)],
    ));
    assert_eq!(
        ok(&hull_in(
            h.path(),
            &["run", "--image", &format!("{}/mini/img:1", mini.addr)]
        )),
        "marker: mini registry\n"
    );
}

#[test]
fn a_failed_pull_keeps_its_partial_blob_and_the_next_pull_resumes_it() {
    let Some(bb) = busybox() else { return };
    let cut = Arc::new(AtomicBool::new(true));
    let mini = Mini::start(
        &bb,
        Behaviour {
            cut_always: Arc::clone(&cut),
            ..Behaviour::default()
        },
    );
    let h = home();
    let image = format!("{}/mini/img:1", mini.addr);
    let out = hull_in(h.path(), &["pull", &image]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("layer 0"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(images(h.path()), Vec::<Value>::new());
    // Three attempts, each resuming where the last broke off: 1/2 + 1/4 + 1/8 of the layer kept.
    let partial: Vec<_> = std::fs::read_dir(h.path().join("images/tmp"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("partial-"))
        .collect();
    assert_eq!(partial.len(), 1, "{partial:?}");
    let kept = partial[0].metadata().unwrap().len();
    assert!(
        kept > 0 && kept < mini.layer_size as u64,
        "kept {kept} of {}",
        mini.layer_size
    );
    let before = mini.log().len();
    cut.store(false, Ordering::SeqCst);
    ok(&hull_in(h.path(), &["pull", &image]));
    let later: Vec<String> = mini.log()[before..].to_vec();
    let layer_gets: Vec<&String> = later
        .iter()
        .filter(|l| l.contains("/blobs/") && !l.contains("range=-"))
        .collect();
    assert!(
        layer_gets
            .iter()
            .any(|l| l.contains(&format!("range=bytes={kept}-"))),
        "the second pull did not resume from byte {kept}: {later:#?}"
    );
    assert_eq!(
        ok(&hull_in(h.path(), &["run", "--image", &image])),
        "marker: mini registry\n"
    );
}

#[test]
fn an_anonymous_token_needs_no_credentials() {
    let Some(bb) = busybox() else { return };
    let mini = Mini::start(
        &bb,
        Behaviour {
            token: true,
            ..Behaviour::default()
        },
    );
    let h = home();
    let image = format!("{}/mini/img:1", mini.addr);
    ok(&hull_in(h.path(), &["pull", &image]));
    let log = mini.log();
    assert!(
        log.iter()
            .any(|l| l.starts_with("GET /token?") && l.ends_with("auth=")),
        "the token request should carry no credentials: {log:#?}"
    );
    assert!(
        log.iter()
            .filter(|l| l.contains("/blobs/"))
            .all(|l| l.ends_with("auth=Bearer tok-123")),
        "{log:#?}"
    );
    assert_eq!(
        ok(&hull_in(h.path(), &["run", "--image", &image])),
        "marker: mini registry\n"
    );
}

#[test]
fn layers_download_in_parallel_and_apply_in_order() {
    let Some(bb) = busybox() else { return };
    let mini = Mini::start(
        &bb,
        Behaviour {
            extra_layers: true,
            slow_blobs: true,
            ..Behaviour::default()
        },
    );
    let h = home();
    let image = format!("{}/mini/img:1", mini.addr);
    let out = hull_in(h.path(), &["pull", &image]);
    let stdout = ok(&out);
    assert!(stdout.contains("3 layer(s) downloaded"), "{stdout}");
    // Not a terminal: one line per layer on stderr.
    assert_eq!(
        text(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("layer ") && l.contains("downloaded"))
            .count(),
        3,
        "{}",
        text(&out.stderr)
    );
    assert!(
        mini.max_in_flight.load(Ordering::SeqCst) >= 2,
        "layers were not downloaded in parallel"
    );
    let shown = ok(&hull_in(
        h.path(),
        &[
            "run",
            "--image",
            &image,
            "--",
            "/bin/busybox",
            "sh",
            "-c",
            "cat /hull-marker; test -e /extra && echo extra-present || echo extra-gone",
        ],
    ));
    assert_eq!(shown, "marker: layer 2 wins\nextra-gone\n");
    // --parallel 1 is one at a time.
    let mini = Mini::start(
        &bb,
        Behaviour {
            extra_layers: true,
            slow_blobs: true,
            ..Behaviour::default()
        },
    );
    let h = home();
    ok(&hull_in(
        h.path(),
        &[
            "pull",
            "--parallel",
            "1",
            &format!("{}/mini/img:1", mini.addr),
        ],
    ));
    assert_eq!(mini.max_in_flight.load(Ordering::SeqCst), 1);
}

#[test]
fn a_docker_v2_manifest_is_pulled() {
    let Some(reg) = registry() else { return };
    let h = home();
    let image = format!("{reg}/hull-test/busybox:docker");
    ok(&hull_in(h.path(), &["pull", &image]));
    assert_eq!(
        ok(&hull_in(h.path(), &["run", "--image", &image])),
        "hello-from-pulled\nmarker: hull-test/busybox\n"
    );
}

#[test]
fn two_pulls_of_one_image_at_once_download_each_blob_once() {
    let Some(bb) = busybox() else { return };
    let mini = Mini::start(
        &bb,
        Behaviour {
            slow_blobs: true,
            ..Behaviour::default()
        },
    );
    let h = home();
    let image = format!("{}/mini/img:1", mini.addr);
    let spawn = |name: &str| {
        Command::new(common::bin())
            .args(["pull", &image, "--name", name])
            .env("HULL_HOME", h.path())
            .env("HOME", h.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
        ok(&out);
    }
    // The config (small, kept in memory) may be fetched by both; the layer once: the second
    // pull waits on the first one's lock, then finds the blob stored.
    let layer_gets = mini
        .log()
        .iter()
        .filter(|l| l.contains(&format!("/blobs/{}", mini.layer_digest)))
        .count();
    assert_eq!(layer_gets, 1, "{:#?}", mini.log());
    for n in ["a", "b"] {
        assert_eq!(
            ok(&hull_in(h.path(), &["run", "--image", n])),
            "marker: mini registry\n"
        );
    }
    assert_eq!(
        std::fs::read_dir(h.path().join("images/roots"))
            .unwrap()
            .count(),
        1,
        "one root for one image"
    );
}
