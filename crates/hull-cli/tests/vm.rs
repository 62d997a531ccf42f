//! `hull run --isolation vm`: the microVM tier through the CLI, as a user calls it. The VMs
//! boot under TCG on hosts whose /dev/kvm cannot run a standard guest (seconds each), so the
//! tests that boot one are few and each checks several things. They need QEMU, virtiofsd, the
//! guest kernel (scripts/vm-guest.sh) and a static hull as the guest's init (HULL_VM_AGENT;
//! scripts/test.sh sets it); the refusals need none of it.

mod common;

use std::path::{Path, PathBuf};

use common::{fault, hull, stdout};

/// Why this host cannot boot a VM, if it cannot.
fn no_vm() -> Option<String> {
    if std::env::var_os("HULL_VM_AGENT").is_none() {
        return Some("HULL_VM_AGENT is not set (a static hull: scripts/build-static.sh)".into());
    }
    if let Err(e) = hull_vm::assets::Guest::find() {
        return Some(e.to_string());
    }
    hull_vm::assets::Tools::find().err().map(|e| e.to_string())
}

/// The busybox root a VM test runs, in `dir`; `Err` is why this host cannot boot one.
fn vm_root(dir: &Path) -> Result<PathBuf, String> {
    if common::is_root() {
        return Err(
            "the rootless pass boots it (host root's mapping: guest_boot and the Python SDK's test_vm boot one as root)".into(),
        );
    }
    image_root(dir)
}

/// A temporary directory and [`vm_root`] in it, or `None` once the skip is said.
fn booting_root() -> Option<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    match vm_root(dir.path()) {
        Ok(root) => Some((dir, root)),
        Err(why) => {
            hull_testkit::skip(why);
            None
        }
    }
}

/// What VM runs left in `tmp` (their TMPDIR): each hull's lock file stays for the next sweep
/// to judge (hull-box's owner.rs), nothing else may.
fn left_in(tmp: &Path) -> Vec<std::fs::DirEntry> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with("hull-live-"))
        .collect()
}

/// [`vm_root`] in either pass.
fn image_root(dir: &Path) -> Result<PathBuf, String> {
    if let Some(why) = no_vm() {
        return Err(format!("no VM here: {why}"));
    }
    hull_testkit::busybox_root(
        dir,
        &[
            "sh", "cat", "echo", "grep", "hostname", "dd", "sleep", "seq", "wc", "mount", "id",
            "ls", "nc",
        ],
    )
}

/// `hull run --isolation vm --rootfs ROOT` and then `rest`: the start of every booting call.
fn vm_run<'a>(root: &'a Path, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "run",
        "--isolation",
        "vm",
        "--rootfs",
        root.to_str().unwrap(),
    ];
    v.extend_from_slice(rest);
    v
}

fn json(out: &std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn what_a_vm_cannot_honour_yet_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["--isolation", "vm", "--", "true"], "--image"),
        (
            &[
                "--isolation",
                "vm",
                "--rootfs",
                root,
                "--mount",
                "/etc/hostname:/x",
                "--",
                "true",
            ],
            "--mount",
        ),
        (
            &[
                "--isolation",
                "vm",
                "--rootfs",
                root,
                "--network",
                "host",
                "--",
                "true",
            ],
            "--network",
        ),
        (
            &[
                "--isolation",
                "vm",
                "--rootfs",
                root,
                "--cap-add",
                "NET_ADMIN",
                "--",
                "true",
            ],
            "--cap-add",
        ),
        (&["--require-kvm", "--", "true"], "--require-kvm"),
    ];
    for (args, flag) in cases {
        let mut full = vec!["run"];
        full.extend_from_slice(args);
        let out = hull(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
    }
    // A file is copied into the guest, which cannot write it back: read-only only.
    let file = dir.path().join("note");
    std::fs::write(&file, "x").unwrap();
    let file_mount = format!("{}:/x", file.display());
    let out = hull(&[
        "run",
        "--isolation",
        "vm",
        "--rootfs",
        root,
        "--mount",
        &file_mount,
        "--",
        "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mount it read-only (`:ro`)"), "{err}");
    let out = hull(&["run", "--isolation", "kvm", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("`kvm`"));
    if common::is_root() {
        // Host root: the guest's root never writes as host root (a setuid-root file on the
        // host), so a writable share host root owns is refused, naming it and the fix.
        let owned = dir.path().join("roots");
        std::fs::create_dir(&owned).unwrap();
        let share = owned.to_str().unwrap();
        let mount = format!("{share}:/data");
        for (args, flag) in [
            (["--workspace", share], "--workspace"),
            (["--mount", mount.as_str()], "--mount"),
        ] {
            let mut full = vec!["run", "--isolation", "vm", "--rootfs", root];
            full.extend_from_slice(&args);
            full.extend_from_slice(&["--", "true"]);
            let out = hull(&full);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(125), "{err}");
            assert!(
                err.contains(flag) && err.contains("host root's") && err.contains("read-only"),
                "{err}"
            );
        }
        // A directory reached through a symlink is refused: another user's link must not
        // point host root's VM at a directory of someone else's.
        let real = dir.path().join("users");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::chown(&real, Some(1234), Some(1234)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let out = hull(&[
            "run",
            "--isolation",
            "vm",
            "--rootfs",
            root,
            "--workspace",
            link.to_str().unwrap(),
            "--",
            "true",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(
            err.contains("--workspace") && err.contains("symlink"),
            "{err}"
        );
    }
}

#[test]
fn a_vm_runs_the_program_without_capabilities_under_its_memory_and_pids_caps() {
    let Some((dir, root)) = booting_root() else {
        return;
    };
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("in"), "shared\n").unwrap();
    let data_mount = format!("{}:/data:ro", data.display());
    // In one VM (each boot takes seconds here): the hostname, the capability sets, a
    // remount the program may not do, 12 children under a pids cap of 8, a file in the
    // workspace, then 200 MiB into the root's upper layer (the guest's tmpfs, charged to the program) under a 64 MiB memory cap.
    let script = "hostname; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; \
        mount -o remount,rw / 2>/dev/null && echo remounted || echo no-remount; \
        echo '|/workspace/h' > /proc/sys/kernel/core_pattern 2>/dev/null && echo core-written || echo core-refused; \
        echo b > /proc/sysrq-trigger 2>/dev/null; echo dev $(ls /dev); \
        (for i in 1 2 3 4 5 6 7 8 9 10 11 12; do (echo >> /tmp/n; exec sleep 2) & done) 2>/dev/null; \
        sleep 3; n=0; while read l; do n=$((n+1)); done < /tmp/n; echo children $n; \
        echo kept > /workspace/out; cat /data/in; echo x > /data/new 2>/dev/null || echo read-only; \
        dd if=/dev/zero of=/fill bs=1M count=200 2>/dev/null; echo survived";
    let out = hull(&vm_run(
        &root,
        &[
            "--json",
            "--workspace",
            ws.to_str().unwrap(),
            "--memory",
            "64m",
            "--pids",
            "8",
            "--hostname",
            "vmbox",
            "--mount",
            &data_mount,
            "--",
            "sh",
            "-c",
            script,
        ],
    ));
    let v = json(&out);
    let text = stdout(&v);
    assert!(text.starts_with("vmbox\n"), "{v}");
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert!(
            text.contains(&format!("{set}:\t0000000000000000")),
            "{set} not empty: {text}"
        );
    }
    assert!(text.contains("no-remount"), "{text}");
    // /proc/sys is read-only: a core_pattern written by the guest's root would run a program
    // with every capability. /dev holds only the program's nodes (no console, no kmsg).
    assert!(text.contains("core-refused"), "{text}");
    assert!(
        text.contains(
            "dev fd full null ptmx pts random shm stderr stdin stdout tty urandom zero\n"
        ),
        "{text}"
    );
    let children: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("children "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(usize::MAX);
    assert!(
        children < 8,
        "the pids cap of 8 held: {children} children ran ({text})"
    );
    assert_eq!(std::fs::read_to_string(ws.join("out")).unwrap(), "kept\n");
    assert!(
        text.contains("shared\nread-only\n"),
        "a read-only mount: {text}"
    );
    assert!(!data.join("new").exists());
    assert_eq!(fault(&v).as_deref(), Some("oom"), "{v}");
    assert!(!text.contains("survived") || fault(&v).is_some(), "{v}");
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains("emulated") || !warnings.contains("tcg"),
        "an emulated VM says so: {warnings}"
    );
}

#[test]
fn a_vm_past_its_deadline_is_killed_and_the_result_says_timeout() {
    let Some((dir, root)) = booting_root() else {
        return;
    };
    // Its own temporary directory (the VM's private directory and workspace are made there),
    // so what is left is this test's alone: the other tests' VMs run beside it.
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(common::bin())
            .args(vm_run(&root, args))
            .env("TMPDIR", &tmp)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let started = std::time::Instant::now();
    let out = run(&["--timeout", "2s", "--", "sh", "-c", "echo begun; sleep 600"]);
    assert_eq!(out.status.code(), Some(137));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "begun\n",
        "output streamed"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("timeout"), "{err}");
    // A program the image does not have: 127 and the exec_failed fault, as in a namespace box.
    let v = json(&run(&["--json", "--", "no-such-program"]));
    assert_eq!(v["exit_code"], 127, "{v}");
    assert_eq!(fault(&v).as_deref(), Some("exec_failed"), "{v}");
    assert!(started.elapsed() < std::time::Duration::from_secs(100));
    // Nothing of the VMs is left: no private directory, no temporary workspace.
    let left = left_in(&tmp);
    assert!(
        left.is_empty(),
        "the VMs' directories are removed: {left:?}"
    );
}

/// The pids whose parent is `pid`, with their command names.
fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the comm may hold spaces, so split after its ')'.
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid = tail
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push((p, head.split_once('(').map_or("", |c| c.1).to_owned()));
        }
    }
    out
}

/// Every process under `pid` (children, theirs, ...), with its command name.
fn descendants_of(pid: u32) -> Vec<(u32, String)> {
    let mut found = children_of(pid);
    let mut i = 0;
    while i < found.len() {
        let more = children_of(found[i].0);
        found.extend(more);
        i += 1;
    }
    found
}

/// Whether `pid` has ended (gone, or a zombie waiting for its new parent).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, t)| t.split_whitespace().next() == Some("Z")),
    }
}

#[test]
fn a_killed_hull_leaves_no_vm_and_the_next_run_removes_its_directories() {
    // Both passes: as host root QEMU changes its ids, which clears its death signal (it runs
    // under an init of its own in a PID namespace, which dies with hull).
    let dir = tempfile::tempdir().unwrap();
    let root = match image_root(dir.path()) {
        Ok(r) => r,
        Err(why) => return hull_testkit::skip(why),
    };
    let scratch = dir.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    // The guest says it runs the program through the workspace (as host root, one of
    // another user's: hull's own range).
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    if common::is_root() {
        std::os::unix::fs::chown(&ws, Some(0x7FFD_0000), Some(0x7FFD_0000)).unwrap();
    }
    // hull is started holding a descriptor without close-on-exec (as a shell's redirection
    // leaves one): its helpers must not inherit it.
    let marker = dir.path().join("inherited-marker");
    std::fs::write(&marker, "").unwrap();
    let mut hull = std::process::Command::new("sh")
        .args(["-c", "exec 7<\"$0\"; exec \"$@\""])
        .arg(&marker)
        .arg(common::bin())
        .args(vm_run(
            &root,
            &[
                "--workspace",
                ws.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "echo up > /workspace/up; exec sleep 600",
            ],
        ))
        .env("TMPDIR", &scratch)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let helpers = loop {
        let kids = descendants_of(hull.id());
        if kids.iter().any(|(_, c)| c.starts_with("qemu")) {
            break kids;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no QEMU started: {kids:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(helpers.iter().any(|(_, c)| c == "virtiofsd"), "{helpers:?}");
    // QEMU runs under its seccomp filter (-sandbox), installed as it starts.
    let seccomp = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Seccomp:").map(|m| m.trim().to_owned()))
    };
    for (pid, _) in helpers.iter().filter(|(_, c)| c.starts_with("qemu")) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while seccomp(*pid).as_deref() != Some("2") {
            assert!(
                std::time::Instant::now() < deadline,
                "QEMU runs without a seccomp filter: Seccomp: {:?}",
                seccomp(*pid)
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let holds_marker = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == marker))
            })
            .unwrap_or(false)
    };
    assert!(
        holds_marker(hull.id()),
        "hull itself holds the inherited descriptor"
    );
    for (pid, name) in &helpers {
        if name.starts_with("qemu") || name == "virtiofsd" {
            assert!(!holds_marker(*pid), "{name} inherited hull's descriptor");
        }
    }
    // Killed while the guest runs the program (as host root QEMU has changed its ids by then,
    // which cleared its own death signal).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ws.join("up").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the program never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    hull.kill().unwrap();
    hull.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while helpers.iter().any(|(p, _)| !ended(*p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the VM outlived its hull: {:?}",
            helpers
                .iter()
                .filter(|(p, _)| !ended(*p))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("hull-vm-"))
            .collect()
    };
    assert!(
        !left(&scratch).is_empty(),
        "the killed hull could not remove its directories"
    );
    // The next VM run sweeps them (here one refused at once for want of KVM, where it is so).
    let out = std::process::Command::new(common::bin())
        .args(vm_run(&root, &["--require-kvm", "--", "true"]))
        .env("TMPDIR", &scratch)
        .output()
        .unwrap();
    assert!(out.status.code().is_some());
    assert_eq!(left(&scratch), Vec::<String>::new());
}

/// A static probe that plants `/sbin/modprobe` in its own (writable) root, then asks for a
/// socket family no module is loaded for, which makes the kernel run modprobe on its own.
const HELPER_PROBE: &str = r##"
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
int main(void) {
    mkdir("/sbin", 0755);
    FILE *f = fopen("/sbin/modprobe", "w");
    if (!f) { perror("modprobe"); return 2; }
    fputs("#!/bin/sh\necho ran > /workspace/helper-ran\ngrep CapEff /proc/self/status >> /workspace/helper-ran\n", f);
    fclose(f);
    chmod("/sbin/modprobe", 0755);
    int s = socket(5, SOCK_DGRAM, 0);
    printf("socket %d\n", s);
    return 0;
}
"##;

#[test]
fn the_kernels_helpers_never_run_what_the_program_planted_in_its_root() {
    let Some((dir, root)) = booting_root() else {
        return;
    };
    // A kernel helper (modprobe for a socket family, request-key, a core dump's pipe) is run
    // by the kernel with every capability, looked up in the root init had when it ran it.
    let src = dir.path().join("probe.c");
    std::fs::write(&src, HELPER_PROBE).unwrap();
    let built = std::process::Command::new("gcc")
        .args(["-static", "-O1", "-o"])
        .arg(root.join("bin/probe"))
        .arg(&src)
        .output();
    match built {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("gcc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => return hull_testkit::skip(format!("no gcc to build the probe: {e}")),
    }
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let v = json(&hull(&vm_run(
        &root,
        &[
            "--json",
            "--workspace",
            ws.to_str().unwrap(),
            "--",
            "/bin/probe",
        ],
    )));
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(stdout(&v).starts_with("socket "), "{v}");
    assert!(
        !ws.join("helper-ran").exists(),
        "the kernel ran the program's /sbin/modprobe: {:?}",
        std::fs::read_to_string(ws.join("helper-ran"))
    );
}

/// `--network` with a VM: the guest's virtio-net device is served by the same gateway as a
/// namespace box's TAP, so a name the policy allows is reached, another is not, and a
/// published port reaches the guest from the host's loopback. Loopback only: a DNS and an
/// echo server of the test's.
#[test]
fn a_vm_behind_its_gateway_reaches_what_the_policy_allows_and_publishes_a_port() {
    use std::io::{BufRead, Read, Write};
    use std::net::Ipv4Addr;
    let Some((_dir, root)) = booting_root() else {
        return;
    };
    let server = Ipv4Addr::new(127, 0, 0, 13);
    let echo = common::net::Echo::start(server);
    let dns =
        common::net::Dns::start(&[("api.example.test", server), ("other.example.test", server)]);
    let port = echo.addr.port().to_string();
    let script = format!(
        "cat /etc/resolv.conf; \
         echo hi | nc -w 10 api.example.test {port}; \
         echo hi | nc -w 10 other.example.test {port} || echo other-refused; \
         echo pong | nc -l -p 8080"
    );
    let mut child = std::process::Command::new(common::bin())
        .args(vm_run(
            &root,
            &[
                "--allow-host",
                "api.example.test",
                "--allow-cidr",
                "127.0.0.13/32",
                "--publish",
                "8080",
                "--timeout",
                "60s",
                "--",
                "sh",
                "-c",
                &script,
            ],
        ))
        .env("HULL_NET_DNS", dns.addr.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The published port is said before the guest boots.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let host_port = loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "no port said: {said}"
        );
        said.push_str(&line);
        if let Some(p) = line.trim().rsplit_once("published at 127.0.0.1:") {
            break p.1.parse::<u16>().unwrap();
        }
    };
    // The guest listens once it has booted and reached the echo server (seconds under TCG),
    // answers one connection and ends.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(50);
    let pong = loop {
        let mut got = String::new();
        if let Ok(mut s) = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, host_port)) {
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let _ = s.write_all(b"ping\n");
            let _ = s.read_to_string(&mut got);
        }
        if got.contains("pong") || std::time::Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    let out = child.wait_with_output().unwrap();
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(pong.trim(), "pong", "{stdout} {said}{rest}");
    assert_eq!(out.status.code(), Some(0), "{stdout} {said}{rest}");
    assert!(stdout.starts_with("nameserver 10.0.2.2\n"), "{stdout}");
    assert!(stdout.contains("echo: hi\n"), "{stdout} {said}{rest}");
    assert!(stdout.contains("other-refused"), "{stdout}");
    // Only the allowed name's connection reached the server.
    assert_eq!(echo.accepted(), 1);
    // The port is the host's loopback only, and gone with the VM.
    assert!(std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, host_port)).is_err());
}

/// Credential brokering in a VM: the guest holds only the placeholder, trusts the gateway's
/// CA through the environment and through its system bundle (copied into the guest, read-only,
/// as a caller's read-only file mount is), and the real value reaches only the secret's host:
/// a loopback HTTPS server of the test's, whose name a loopback DNS server of the test's maps.
#[test]
fn a_vm_brokered_secret_reaches_its_host_and_never_the_guest() {
    const REAL: &str = "sk-REAL-vm-0123456789";
    let Some((dir, root)) = booting_root() else {
        return;
    };
    if let Err(why) = hull_testkit::add_host_program(&root, "curl") {
        return hull_testkit::skip(why);
    }
    // The image's own bundle, which hull covers with a copy holding the gateway CA.
    let bundle = root.join("etc/ssl/certs/ca-certificates.crt");
    std::fs::create_dir_all(bundle.parent().unwrap()).unwrap();
    let host_bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    std::fs::write(&bundle, &host_bundle).unwrap();
    let note = dir.path().join("note.txt");
    std::fs::write(&note, "a note of the host's\n").unwrap();
    let f = common::tls::Fixture::new();
    let port = f.srv.port;
    let script = format!(
        "echo \"env $KEY\"\n\
         curl -sS https://api.example.test:{port}/a -H \"Authorization: Bearer $KEY\"; echo\n\
         unset SSL_CERT_FILE CURL_CA_BUNDLE REQUESTS_CA_BUNDLE\n\
         curl -sS https://api.example.test:{port}/b -H \"Authorization: Bearer $KEY\"; echo\n\
         echo x >> /etc/ssl/certs/ca-certificates.crt || echo bundle-read-only\n\
         cat /etc/note.txt; echo x >> /etc/note.txt || echo note-read-only\n"
    );
    let note_mount = format!("{}:/etc/note.txt:ro", note.display());
    let out = std::process::Command::new(common::bin())
        .args(vm_run(
            &root,
            &[
                "--allow-host",
                "api.example.test",
                "--allow-cidr",
                "127.0.0.12/32",
                "--secret",
                "KEY=env:HULL_TEST_REAL_KEY@api.example.test",
                "--mount",
                &note_mount,
                "--timeout",
                "90s",
                "--",
                "sh",
                "-c",
                &script,
            ],
        ))
        .env("HULL_TEST_REAL_KEY", REAL)
        .envs(f.env())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let placeholder = lines[0].strip_prefix("env ").unwrap_or_default();
    assert!(placeholder.starts_with("hull-secret-KEY-"), "{stdout}");
    assert!(
        !stdout.contains(REAL),
        "the real value reached the guest: {stdout}"
    );
    // The API echoes what it got; the gateway scrubbed the value back to the placeholder.
    let echoed = format!("auth=Bearer {placeholder}");
    assert_eq!(
        lines[1..],
        [
            echoed.as_str(),
            echoed.as_str(),
            "bundle-read-only",
            "a note of the host's",
            "note-read-only",
        ],
        "{stdout}\n{stderr}"
    );
    let seen = std::fs::read_to_string(f.dir.path().join("seen.log")).unwrap_or_default();
    assert_eq!(
        seen.lines()
            .filter(|l| l.starts_with("api.example.test") && l.ends_with(&format!("Bearer {REAL}")))
            .count(),
        2,
        "{seen}"
    );
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        "a note of the host's\n"
    );
}

/// The program's standard input streams into the guest while it runs (`-i` here; a Sandbox
/// call's bytes the same way): more than the 4 MiB an agent request holds arrives whole, and
/// a program that never reads its input still ends (the rest is dropped, nothing blocks).
#[test]
fn a_vm_programs_input_streams_in_and_one_that_never_reads_it_still_ends() {
    use std::io::Write;
    let Some((_dir, root)) = booting_root() else {
        return;
    };
    const LEN: usize = 6 << 20;
    for (argv, want) in [
        (&["sh", "-c", "wc -c"][..], format!("{LEN}")),
        (&["echo", "never read"][..], "never read".to_string()),
    ] {
        let mut args = vec!["-i", "--timeout", "90s", "--"];
        args.extend_from_slice(argv);
        let mut child = std::process::Command::new(common::bin())
            .args(vm_run(&root, &args))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            // A program that never reads lets the write fail once it ended: that is fine.
            let _ = stdin.write_all(&vec![b'x'; LEN]);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            (out.status.code(), stdout.trim()),
            (Some(0), want.as_str()),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Init has every capability, so a path it follows once the program's `/proc` is mounted
/// could take it through `/proc/<pid>/root` into its own root (found by a review: a file mount
/// under an image's `/etc -> /proc/2/root/...` link made and bound files in the initramfs's
/// root). An image's link where init mounts `/tmp` is replaced by a plain directory, and a file
/// mount reached through a magic link is refused, naming where.
#[test]
fn image_links_through_proc_never_steer_init_out_of_the_programs_root() {
    let Some((dir, root)) = booting_root() else {
        return;
    };
    std::os::unix::fs::symlink("/proc/2/root/escaped", root.join("tmp")).unwrap();
    let note = dir.path().join("note.txt");
    std::fs::write(&note, "note\n").unwrap();
    let out = hull(&vm_run(
        &root,
        &[
            "--",
            "sh",
            "-c",
            "echo kept > /tmp/f && cat /tmp/f && grep -c ' /tmp tmpfs ' /proc/mounts",
        ],
    ));
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref()
        ),
        (Some(0), "kept\n1\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(root.join("tmp")).unwrap();
    std::os::unix::fs::symlink("/proc/2/root/rw/upper", root.join("etc")).unwrap();
    let mount = format!("{}:/etc/planted.conf:ro", note.display());
    let out = hull(&vm_run(
        &root,
        &["--mount", &mount, "--", "cat", "/planted.conf"],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}\n{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        err.contains("opening /etc in the program's root: Too many levels of symbolic links"),
        "{err}"
    );
}

/// SIGTERM (as SIGINT and SIGHUP) to hull ends its VM and is reported, as for a namespace box:
/// the result says the program was killed and why, hull exits 137, and nothing of the VM is
/// left (before, hull died of the signal and its VM's directories waited for a sweep).
#[test]
fn a_signal_to_hull_ends_its_vm_and_is_reported() {
    use std::io::BufRead;
    let Some((dir, root)) = booting_root() else {
        return;
    };
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut child = std::process::Command::new(common::bin())
        .args(vm_run(
            &root,
            &[
                "--timeout",
                "120s",
                "--",
                "sh",
                "-c",
                "echo begun; sleep 600",
            ],
        ))
        .env("TMPDIR", &tmp)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "begun\n");
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{err}");
    assert!(
        err.contains("hull received SIGTERM; the VM was killed"),
        "{err}"
    );
    let left = left_in(&tmp);
    assert!(
        left.is_empty(),
        "the VM's directories are removed: {left:?}"
    );
}
