//! Boots real VMs (QEMU microvm, TCG on hosts whose /dev/kvm cannot run a standard guest) and
//! runs programs in them through the agent. Each VM takes seconds under TCG, so these tests
//! are few. They need QEMU, virtiofsd, the guest kernel (scripts/vm-guest.sh) and a static
//! hull (HULL_VM_AGENT; scripts/build-static.sh): without them they skip, saying which.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hull_vm::proto::{Exec, Stream};
use hull_vm::VmRun;

/// A busybox root with the applets the tests use and a file of the image's, in `dir`; `Err`
/// is why this host cannot boot the guest.
fn vm_root(dir: &Path) -> Result<PathBuf, String> {
    if rustix::process::geteuid().is_root() {
        return Err(
            "the rootless pass boots it; the root pass boots one in as_host_root_the_guest_writes_as_the_ids_it_is_given_and_its_helpers_give_up_root"
                .into(),
        );
    }
    image_root(dir)
}

/// The busybox root of [`vm_root`], for either pass.
fn image_root(dir: &Path) -> Result<PathBuf, String> {
    ready().map_err(|why| format!("no VM here: {why}"))?;
    let root = hull_testkit::busybox_root(
        dir,
        &[
            "sh", "cat", "echo", "uname", "ls", "dd", "sleep", "id", "head", "mkdir",
        ],
    )?;
    std::fs::write(root.join("image-file"), "from the image\n").unwrap();
    Ok(root)
}

/// Whether this host can boot the guest; otherwise the skip's reason.
fn ready() -> Result<(), String> {
    hull_vm::assets::Guest::find().map_err(|e| e.to_string())?;
    hull_vm::assets::Tools::find().map_err(|e| e.to_string())?;
    Ok(())
}

fn request(dir: &Path, root: PathBuf, argv: &[&str]) -> VmRun {
    let workspace = dir.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    VmRun {
        root,
        workspace,
        ids: None,
        workspace_ids: None,
        mounts: Vec::new(),
        files: Vec::new(),
        tmp_size: 64 << 20,
        shm_size: 64 << 20,
        exec: Exec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![("PATH".into(), "/bin".into())],
            cwd: "/workspace".into(),
            stdin: false,
            hostname: "hull".into(),
            memory: None,
            pids: Some(64),
        },
        memory: 256 << 20,
        cpus: 1,
        timeout: Duration::from_secs(60),
        boot_timeout: Duration::from_secs(120),
        require_kvm: false,
        cache: dir.join("cache"),
        scratch: dir.join("scratch"),
        max_output: 1 << 20,
        net: None,
    }
}

#[test]
fn a_program_runs_under_a_kernel_of_its_own_and_shares_only_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let root = match vm_root(dir.path()) {
        Ok(r) => r,
        Err(why) => return hull_testkit::skip(why),
    };
    let script = "uname -r; cat /image-file; echo out > /workspace/made; echo err >&2; \
                  echo changed > /image-file; cat /image-file; ls /host-only 2>&1; exit 7";
    std::fs::write(dir.path().join("host-only"), "secret").unwrap();
    let mut streamed: Vec<(Stream, Vec<u8>)> = Vec::new();
    let run = request(dir.path(), root.clone(), &["sh", "-c", script]);
    let out = hull_vm::run(&run, &mut |s, b| streamed.push((s, b.to_vec()))).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let host_kernel = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(out.code, Some(7), "{out:?}");
    assert_eq!(lines[0], out.kernel, "the guest reports its own kernel");
    assert_ne!(lines[0], host_kernel, "a kernel other than the host's");
    assert_eq!(lines[1], "from the image");
    assert_eq!(lines[2], "changed", "the root is writable in the guest");
    assert!(lines[3].contains("No such file"), "{stdout}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("made")).unwrap(),
        "out\n",
        "the workspace is the host's directory"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("image-file")).unwrap(),
        "from the image\n",
        "the image is shared read-only: the guest's change stays in the guest"
    );
    let streamed_out: Vec<u8> = streamed
        .iter()
        .filter(|(s, _)| *s == Stream::Stdout)
        .flat_map(|(_, b)| b.clone())
        .collect();
    assert_eq!(
        streamed_out, out.stdout,
        "output is streamed as well as kept"
    );
    eprintln!(
        "booted in {:?} ({}), ran in {:?}",
        out.boot, out.accel, out.duration
    );
}

#[test]
fn the_deadline_kills_the_vm_and_a_missing_program_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = match vm_root(dir.path()) {
        Ok(r) => r,
        Err(why) => return hull_testkit::skip(why),
    };
    let mut run = request(
        dir.path(),
        root.clone(),
        &["sh", "-c", "echo started; sleep 600"],
    );
    run.timeout = Duration::from_secs(2);
    let out = hull_vm::run(&run, &mut |_, _| {}).unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
    assert!(out.duration < Duration::from_secs(10), "{:?}", out.duration);

    // A program that is not there is the run's result (127, as a shell says it), not an error.
    let run = request(dir.path(), root, &["no-such-program"]);
    let out = hull_vm::run(&run, &mut |_, _| {}).unwrap();
    assert_eq!(out.code, Some(127), "{out:?}");
    let why = out.exec_failed.unwrap_or_default();
    assert!(why.contains("no-such-program: not found"), "{why}");
}

/// Held by the tests that start processes as root and by the one that watches every process
/// under this test binary for root's: the KVM trial's QEMU is root's by design.
static ROOTS_PROCESSES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The processes under this test's process (children, theirs, ...): pid, name and `Uid:`
/// line. (As host root QEMU runs under a keeper of its own: see `sys::in_own_pid_ns`.)
fn helpers() -> Vec<(String, (String, String))> {
    let mut all = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        };
        let pid = e.file_name().to_string_lossy().into_owned();
        all.push((pid, field("PPid:"), field("Name:"), field("Uid:")));
    }
    let mut under = vec![std::process::id().to_string()];
    let mut found = Vec::new();
    let mut i = 0;
    while i < under.len() {
        for (pid, ppid, name, uid) in &all {
            if *ppid == under[i] {
                under.push(pid.clone());
                found.push((pid.clone(), (name.clone(), uid.clone())));
            }
        }
        i += 1;
    }
    found
}

#[test]
fn as_host_root_the_guest_writes_as_the_ids_it_is_given_and_its_helpers_give_up_root() {
    if !rustix::process::geteuid().is_root() {
        return hull_testkit::skip("host root's mapping; an unprivileged caller's is its own");
    }
    let dir = tempfile::tempdir().unwrap();
    // Without the ids every share needs, nothing runs (nothing would be written as root).
    let unmapped = request(dir.path(), dir.path().join("root"), &["true"]);
    assert!(matches!(
        hull_vm::run(&unmapped, &mut |_, _| {}),
        Err(hull_vm::VmError::HostRoot)
    ));
    assert!(!dir.path().join("scratch").exists(), "nothing was made");
    let root = match image_root(dir.path()) {
        Ok(r) => r,
        Err(why) => return hull_testkit::skip(format!("no VM here: {why}")),
    };
    // Ids the kernel cannot map (-1): virtiofsd never runs unmapped, and the error says why.
    let mut unmappable = request(dir.path(), root.clone(), &["true"]);
    let bad = hull_vm::vm::Ids {
        uid: u32::MAX,
        gid: u32::MAX,
    };
    (unmappable.ids, unmappable.workspace_ids) =
        (Some(bad), Some(hull_vm::vm::ShareIds::Fixed(bad)));
    let err = hull_vm::run(&unmappable, &mut |_, _| {}).unwrap_err();
    assert!(
        err.to_string().contains("virtiofsd")
            && format!("{err:?}").contains("could not be mapped (writing uid_map"),
        "{err:?}"
    );
    // hull's range (hull_box::remap::BASE); this crate only passes the ids on.
    let ids = hull_vm::vm::Ids {
        uid: 0x7FFD_0000,
        gid: 0x7FFD_0000,
    };
    let mut run = request(
        dir.path(),
        root,
        &[
            "sh",
            "-c",
            "id -u; cat /image-file; echo made > /workspace/f; chmod 4755 /workspace/f; \
             echo theirs > /data/g; chmod 2755 /data/g; sleep 2",
        ],
    );
    std::os::unix::fs::chown(&run.workspace, Some(ids.uid), Some(ids.gid)).unwrap();
    (run.ids, run.workspace_ids) = (Some(ids), Some(hull_vm::vm::ShareIds::Fixed(ids)));
    // A user's directory whose group is another's (disk): the guest's root writes it as its
    // owner, with the range's group, never the directory's.
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(1234), Some(6)).unwrap();
    run.mounts.push(hull_vm::VmMount {
        source: data.clone(),
        target: "/data".into(),
        read_only: false,
        ids: Some(hull_vm::vm::ShareIds::Owner { range: ids }),
    });
    let _alone = ROOTS_PROCESSES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // The last state seen of each: QEMU is host root until its files are open.
            let mut seen = std::collections::BTreeMap::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                seen.extend(helpers());
                std::thread::sleep(Duration::from_millis(50));
            }
            seen
        })
    };
    let out = hull_vm::run(&run, &mut |_, _| {});
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = watch.join().unwrap();
    let out = out.unwrap();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0\nfrom the image\n",
        "the guest's root, reading the image hull's range reads"
    );
    // What the guest's root made is the range's on the host: a setuid bit it sets is the
    // range's, never host root's.
    let meta = std::fs::metadata(run.workspace.join("f")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.gid()), (ids.uid, ids.gid));
    assert_eq!(meta.mode() & 0o4000, 0o4000);
    let theirs = std::fs::metadata(data.join("g")).unwrap();
    assert_eq!((theirs.uid(), theirs.gid()), (1234, ids.gid));
    let want = format!("{0} {0} {0} {0}", ids.uid);
    assert!(
        seen.values().any(|(n, _)| n.starts_with("qemu-system"))
            && seen.values().any(|(n, _)| n == "virtiofsd"),
        "{seen:?}"
    );
    // QEMU and the image's and workspace's virtiofsd as the range, the user's share's as
    // its owner: none as host root.
    let theirs_ids = "1234 1234 1234 1234".to_string();
    for (name, uids) in seen.values() {
        if name.starts_with("qemu-system") {
            assert_eq!(uids, &want, "{name}");
        } else if name == "virtiofsd" {
            assert!(*uids == want || *uids == theirs_ids, "{name}: {uids}");
        }
    }
}

/// KVM is tried with the guest kernel before a VM uses it, once, and the answer kept: here
/// (kvm_pvm) QEMU asserts on `-cpu host` and stops the guest on the fallback, so the answer is
/// TCG naming both; on a host whose KVM works it is KVM. The trial is what a nested host gets
/// whose flags do not give it away (this one's are, so VMs here never run the trial).
#[test]
fn kvm_is_tried_with_the_guest_kernel_once_and_the_answer_kept() {
    if let Err(why) = ready() {
        return hull_testkit::skip(format!("no VM here: {why}"));
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return hull_testkit::skip(format!("/dev/kvm cannot be opened ({e}): no KVM to try"));
    }
    let guest = hull_vm::assets::Guest::find().unwrap();
    let tools = hull_vm::assets::Tools::find().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let _alone = ROOTS_PROCESSES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let started = std::time::Instant::now();
    let a = hull_vm::kvm_probe::verified(&tools.qemu, &guest.kernel, cache.path());
    let took = started.elapsed();
    eprintln!("the trial's answer after {took:?}: {a:?}");
    if let hull_vm::Accel::Tcg { why } = &a {
        assert!(
            why.starts_with("KVM could not run the guest kernel (-cpu host: ")
                && why.contains("; -cpu host,-arch-capabilities: "),
            "{why}"
        );
    }
    let kept = std::fs::read_to_string(cache.path().join("accel.json")).unwrap();
    assert!(
        kept.contains(&format!("\"accel\":\"{}\"", a.name())),
        "{kept}"
    );
    // Kept: asked again, the answer comes from the cache at once.
    let started = std::time::Instant::now();
    assert_eq!(
        hull_vm::kvm_probe::verified(&tools.qemu, &guest.kernel, cache.path()),
        a
    );
    assert!(
        started.elapsed() < took,
        "{took:?} then {:?}",
        started.elapsed()
    );
}
