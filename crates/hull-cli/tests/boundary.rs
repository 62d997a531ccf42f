//! The box's boundary, tested with real system calls through the real binary. Each test proves
//! the boundary held: the file was not there, the write was refused, the call killed the box.
//! Runs as root and (in CI) again as an unprivileged user.

mod common;
use common::*;

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;

#[test]
fn host_files_outside_mounts_are_not_visible() {
    // A secret in a host directory the box was not given.
    let dir = tempfile::tempdir_in(
        std::env::var("HULL_TEST_SECRET_DIR").unwrap_or_else(|_| "/var/tmp".into()),
    )
    .unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::File::create(&secret)
        .unwrap()
        .write_all(b"hunter2")
        .unwrap();
    let code = format!(
        "import os\nfor p in [{:?}, '/etc/shadow', '/root', '/home', '/var/tmp', '/run']:\n    print(p, os.path.exists(p))\ntry:\n    open({:?}).read(); print('READ')\nexcept OSError as e:\n    print('errno', e.errno)",
        secret.display().to_string(),
        secret.display().to_string()
    );
    let v = run_json(&["--code", &code]);
    let out = stdout(&v);
    assert!(v["success"].as_bool().unwrap(), "{v}");
    for line in out.lines().take(6) {
        assert!(line.ends_with("False"), "visible in the box: {line}\n{out}");
    }
    assert!(
        out.contains("errno 2") && !out.contains("READ") && !out.contains("hunter2"),
        "{out}"
    );
}

#[test]
fn root_is_read_only_and_tmp_workspace_are_writable() {
    let code = "import os, errno\nfor p in ['/usr/hull-x', '/etc/hull-x', '/hull-x', '/bin/hull-x', '/dev/hull-x']:\n    try:\n        open(p, 'w'); print(p, 'WROTE')\n    except OSError as e:\n        print(p, errno.errorcode[e.errno])\nopen('/tmp/ok', 'w').write('1'); open('/workspace/ok', 'w').write('1'); print('writable ok')";
    let v = run_json(&["--code", code]);
    let out = stdout(&v);
    assert!(!out.contains("WROTE"), "{out}");
    assert_eq!(out.matches("EROFS").count(), 5, "{out}");
    assert!(out.contains("writable ok"), "{v}");
}

/// The `host` image's /etc files show the host's current contents and cannot be written,
/// truncated, re-moded or replaced from the box (a guard for any change to how they enter it).
#[test]
fn host_etc_files_are_current_and_cannot_be_changed() {
    let files: Vec<&str> = [
        "host.conf",
        "gai.conf",
        "timezone",
        "ld.so.cache",
        "mime.types",
    ]
    .into_iter()
    .filter(|n| {
        std::fs::symlink_metadata(format!("/etc/{n}")).is_ok_and(|m| m.file_type().is_file())
    })
    .collect();
    if files.is_empty() {
        eprintln!("skipped: none of the probed /etc files is a regular file on this host");
        return;
    }
    let code = format!(
        "import os, errno, hashlib\nfor n in {files:?}:\n    p = '/etc/' + n\n    print(n, hashlib.sha256(open(p, 'rb').read()).hexdigest())\n    for what, f in [('write', lambda: open(p, 'w')), ('append', lambda: open(p, 'a')), ('chmod', lambda: os.chmod(p, 0o666)), ('unlink', lambda: os.unlink(p)), ('rename', lambda: os.rename('/tmp', p))]:\n        try:\n            f(); print(n, what, 'DONE')\n        except OSError as e:\n            print(n, what, errno.errorcode[e.errno])"
    );
    let v = run_json(&["--code", &code]);
    let out = stdout(&v);
    assert!(v["success"].as_bool().unwrap(), "{v}");
    assert!(!out.contains("DONE"), "an /etc file was changed: {out}");
    for n in &files {
        let sum = std::process::Command::new("sha256sum")
            .arg(format!("/etc/{n}"))
            .output()
            .unwrap();
        let sum = String::from_utf8_lossy(&sum.stdout);
        let host = sum.split_whitespace().next().unwrap();
        assert!(
            out.contains(&format!("{n} {host}")),
            "{n} differs from the host's: {out}"
        );
    }
}

#[test]
fn host_loopback_server_is_unreachable_but_host_network_is_a_named_relaxation() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!("import socket\ns = socket.socket()\ns.settimeout(2)\ntry:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno)\nimport os\nprint(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'nosys')");
    let v = run_json(&["--code", &code]);
    let out = stdout(&v);
    assert!(out.contains("refused 111"), "{out} {v}");
    assert!(
        listener.accept().is_err(),
        "the host listener got a connection from the box"
    );
    // The explicit relaxation reaches it (loopback only, our own listener).
    let v = run_json(&["--network", "host", "--code", &code]);
    assert!(stdout(&v).contains("CONNECTED"), "{v}");
}

#[test]
fn only_unix_inet_and_route_netlink_sockets_can_be_made_in_the_box() {
    // AF_VSOCK reaches the hypervisor's services on cloud VMs and Firecracker hosts, and a
    // network namespace does not isolate it. Where this host has a vsock transport the socket
    // is created natively (as it would be in a box without the filter); say so either way.
    // SAFETY: socket with integer arguments; the fd, if any, is closed at once.
    let native = unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0) };
    if native >= 0 {
        println!("AF_VSOCK sockets are created natively on this host");
        // SAFETY: closing the fd just created.
        unsafe { libc::close(native) };
    } else {
        hull_testkit::skip_part(
            "vsock",
            format!(
                "AF_VSOCK is refused natively here ({}), so its check is weak",
                std::io::Error::last_os_error()
            ),
        );
    }
    let code = "import errno, socket\nfor name, fam, typ, proto in [('vsock', 40, 1, 0), ('packet', 17, 3, 0), ('bluetooth', 31, 3, 0), ('can', 29, 3, 0), ('uevent', 16, 2, 15), ('audit', 16, 3, 9)]:\n    try:\n        socket.socket(fam, typ, proto).close(); print(name, 'CREATED')\n    except OSError as e:\n        print(name, errno.errorcode[e.errno])\nsrv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\nc = socket.create_connection(srv.getsockname(), timeout=5); s, _ = srv.accept()\nc.sendall(b'ping'); print('tcp', s.recv(4).decode())\na, b = socket.socketpair(); a.send(b'x'); print('unix', b.recv(1).decode())\nprint('ifaces', [n for _, n in socket.if_nameindex()])";
    let v = run_json(&["--network", "none", "--code", code]);
    let out = stdout(&v);
    for refused in ["vsock", "packet", "bluetooth", "can"] {
        assert!(
            out.contains(&format!("{refused} EAFNOSUPPORT")),
            "{refused}: {out}\n{v}"
        );
    }
    for refused in ["uevent", "audit"] {
        assert!(
            out.contains(&format!("{refused} EPROTONOSUPPORT")),
            "{refused}: {out}\n{v}"
        );
    }
    assert!(
        out.contains("tcp ping") && out.contains("unix x") && out.contains("ifaces ['lo']"),
        "{out}\n{v}"
    );
}

/// Numbers of escape syscalls on this architecture, looked up in the policy by name.
fn nr(name: &str) -> i64 {
    hull_seccomp::default_policy()
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("{name} not in policy"))
        .nr
}

#[test]
fn each_escape_syscall_kills_the_box_and_is_named() {
    let names = [
        "ptrace",
        "mount",
        "umount2",
        "pivot_root",
        "unshare",
        "setns",
        "bpf",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "reboot",
        "swapon",
        "swapoff",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "open_tree",
        "move_mount",
        "mount_setattr",
        "keyctl",
        "add_key",
        "request_key",
        "userfaultfd",
        "perf_event_open",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "open_by_handle_at",
    ];
    for name in names {
        // The marker file proves the code ran up to the call and no further.
        let code = format!("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint('before', flush=True)\nr = libc.syscall({}, 0, 0, 0, 0, 0)\nprint('AFTER', r, ctypes.get_errno())", nr(name));
        let v = run_json(&["--code", &code]);
        assert_eq!(fault(&v).as_deref(), Some("escape_blocked"), "{name}: {v}");
        assert_eq!(v["fault"]["syscall"].as_str(), Some(name), "{name}: {v}");
        let out = stdout(&v);
        assert!(
            out.contains("before") && !out.contains("AFTER"),
            "{name}: {out}"
        );
    }
}

#[test]
fn clone_with_namespace_flags_is_killed_but_threads_and_fork_work() {
    let code = format!("import ctypes, os, threading\nt = threading.Thread(target=lambda: None); t.start(); t.join()\npid = os.fork()\nif pid == 0: os._exit(7)\nprint('fork', os.waitpid(pid, 0)[1] >> 8, flush=True)\nlibc = ctypes.CDLL(None)\nlibc.syscall({}, 0x10000000 | 17, 0, 0, 0, 0)\nprint('AFTER')", nr("clone"));
    let v = run_json(&["--code", &code]);
    assert!(stdout(&v).contains("fork 7"), "{v}");
    assert!(!stdout(&v).contains("AFTER"), "{v}");
    assert_eq!(fault(&v).as_deref(), Some("escape_blocked"), "{v}");
}

#[test]
fn a_program_killing_itself_with_sigsys_is_not_an_escape() {
    // Only the filter's own kills count; they reach the supervisor through the listener.
    let v = run_json(&[
        "--code",
        "import os, signal\nprint('before', flush=True)\nos.kill(os.getpid(), signal.SIGSYS)",
    ]);
    assert_eq!(
        v["exit_code"].as_i64(),
        Some(128 + i64::from(libc::SIGSYS)),
        "{v}"
    );
    assert!(v["fault"].is_null(), "{v}");
    assert!(stdout(&v).contains("before"), "{v}");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn foreign_abi_calls_are_killed_and_named_by_their_abi() {
    // x32 getpid: the x32 bit on a native call.
    let x32 = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint('before', flush=True)\nr = libc.syscall(0x40000000 | 39)\nprint('AFTER', r)";
    let v = run_json(&["--code", x32]);
    assert_eq!(fault(&v).as_deref(), Some("escape_blocked"), "{v}");
    assert!(
        v["fault"]["syscall"].as_str().unwrap_or("").contains("x32"),
        "{v}"
    );
    assert!(
        stdout(&v).contains("before") && !stdout(&v).contains("AFTER"),
        "{v}"
    );
    // i386 getpid through `int 0x80` (arch AUDIT_ARCH_I386), from an executable page.
    let i386 = "import ctypes, mmap\ncode = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])\nm = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\nm.write(code)\nf = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\nprint('before', flush=True)\nprint('AFTER', f())";
    let v = run_json(&["--code", i386]);
    if !std::path::Path::new("/proc/sys/abi/vsyscall32").exists() && v["fault"].is_null() {
        hull_testkit::skip_part("int80", format!("this kernel has no IA-32 emulation ({v})"));
        return;
    }
    assert_eq!(fault(&v).as_deref(), Some("escape_blocked"), "{v}");
    assert!(
        v["fault"]["syscall"]
            .as_str()
            .unwrap_or("")
            .contains("foreign-architecture"),
        "{v}"
    );
    assert!(
        stdout(&v).contains("before") && !stdout(&v).contains("AFTER"),
        "{v}"
    );
}

#[test]
fn capabilities_inside_are_zero() {
    let v = run_json(&["--", "grep", "^Cap", "/proc/self/status"]);
    let out = stdout(&v);
    assert_eq!(out.lines().count(), 5, "{out}");
    for l in out.lines() {
        assert!(l.ends_with("0000000000000000"), "{l}");
    }
    let v = run_json(&["--", "grep", "NoNewPrivs", "/proc/self/status"]);
    assert!(stdout(&v).contains('1'), "{v}");
}

#[test]
fn a_kept_capability_is_namespaced_and_visible() {
    let v = run_json(&[
        "--cap-add",
        "NET_BIND_SERVICE",
        "--",
        "grep",
        "^CapEff",
        "/proc/self/status",
    ]);
    assert!(stdout(&v).contains("0000000000000400"), "{v}");
}

#[test]
fn a_box_cannot_leave_setid_files_in_its_workspace() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    // A named workspace is visible to other host users while the box runs and afterwards: a
    // setuid copy of `id` in it would run with the box's host uid (root when hull runs as
    // root). `id` reports its effective uid, so it shows whether the bit did anything.
    let ws = tempfile::tempdir().unwrap();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let code = "import os, subprocess\nsubprocess.run(['cp', '/usr/bin/id', '/workspace/id'], check=True)\nfor mode in ['u+s', 'g+s', '6755']:\n    r = subprocess.run(['chmod', mode, '/workspace/id'], capture_output=True, text=True)\n    print('chmod', mode, 'exit', r.returncode, r.stderr.strip())\ntry:\n    os.open('/workspace/made', os.O_CREAT | os.O_WRONLY, 0o4755); print('os.open CREATED')\nexcept OSError as e:\n    print('os.open', e.strerror)";
    let v = run_json(&["--workspace", ws.path().to_str().unwrap(), "--code", code]);
    let out = stdout(&v);
    let copy = ws.path().join("id");
    let mode = std::fs::metadata(&copy).unwrap().mode();
    println!("box output:\n{out}host mode of the copy: {mode:o}");
    // As root, run the copy as another user (nobody) and see which effective uid it gets.
    let as_nobody = is_root().then(|| {
        let out = std::process::Command::new(&copy)
            .arg("-u")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let euid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        println!("the copy run as nobody reports euid {euid}");
        euid
    });
    for mode in ["u+s", "g+s", "6755"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("chmod {mode} exit 1 "))
                    && l.ends_with("Operation not permitted")),
            "chmod {mode} was not refused: {out}\n{v}"
        );
    }
    assert!(
        out.contains("os.open Operation not permitted"),
        "{out}\n{v}"
    );
    assert!(!ws.path().join("made").exists());
    assert_eq!(mode & 0o6000, 0, "the host sees a setid bit: {mode:o}");
    match as_nobody {
        Some(euid) => assert_eq!(euid, "65534", "the copy ran with another user's euid"),
        None => hull_testkit::skip_part(
            "as-another-user",
            "running the copy as another user needs root (the root run covers it)",
        ),
    }
}

#[test]
fn proc_is_fresh_and_masked() {
    // Mask only what this kernel has; at least one of these exists on any kernel we support.
    let masked: Vec<&str> = ["kcore", "keys", "timer_list", "sched_debug", "kallsyms"]
        .into_iter()
        .filter(|f| std::path::Path::new(&format!("/proc/{f}")).exists())
        .collect();
    assert!(!masked.is_empty());
    let code = format!("import os\nprint('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\nfor f in {masked:?}:\n    print(f, len(open('/proc/' + f, 'rb').read()))\ntry:\n    open('/proc/sys/kernel/hostname','w').write('x'); print('SYSWRITE')\nexcept OSError as e:\n    print('sys', e.errno)\nprint('host', open('/proc/sys/kernel/hostname').read().strip())");
    let v = run_json(&["--code", &code]);
    let out = stdout(&v);
    assert!(
        out.contains("pids [1, 2]"),
        "pid namespace not fresh: {out} {v}"
    );
    for f in &masked {
        assert!(
            out.contains(&format!("{f} 0")),
            "/proc/{f} not masked: {out}"
        );
    }
    assert!(out.contains("sys 30") && !out.contains("SYSWRITE"), "{out}");
    assert!(out.contains("host hull"), "{out}");
}

#[test]
fn dev_is_minimal() {
    let v = run_json(&[
        "--",
        "sh",
        "-c",
        "ls /dev; echo x > /dev/null && echo null-ok; head -c 4 /dev/urandom | wc -c",
    ]);
    let out = stdout(&v);
    for d in [
        "null", "zero", "full", "random", "urandom", "tty", "pts", "shm",
    ] {
        assert!(out.lines().any(|l| l == d), "missing /dev/{d}: {out}");
    }
    assert!(
        !out.lines()
            .any(|l| l == "sda" || l == "vda" || l == "kvm" || l == "mem"),
        "{out}"
    );
    assert!(
        out.contains("null-ok") && out.lines().any(|l| l.trim() == "4"),
        "{out}"
    );
}

#[test]
fn memory_cap_ends_as_oom() {
    if !cap_enforced("Memory") {
        return;
    }
    let v = run_json(&[
        "--memory",
        "64m",
        "--tmp-size",
        "16m",
        "--code",
        "x = bytearray(200 << 20)\nprint('ALLOCATED')",
    ]);
    assert_eq!(fault(&v).as_deref(), Some("oom"), "{v}");
    assert!(!stdout(&v).contains("ALLOCATED"));
    assert!(
        v["stats"]["peak_memory"].as_u64().unwrap() <= 64 << 20,
        "{v}"
    );
}

#[test]
fn fork_bomb_is_contained_by_the_pids_cap() {
    if !cap_enforced("Pids") {
        return;
    }
    let code = "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('stopped', n, e.errno, flush=True)";
    let v = run_json(&["--pids", "32", "--timeout", "10s", "--code", code]);
    let out = stdout(&v);
    assert!(
        out.contains("stopped") && out.contains(" 11"),
        "fork bomb was not stopped by EAGAIN: {v}"
    );
    let n: u64 = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(n < 32, "{n} forks got through a cap of 32");
    // The host keeps working.
    assert!(std::process::Command::new("true")
        .status()
        .unwrap()
        .success());
}

/// Whether a process whose command line contains `marker` exists on the host.
fn process_with(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
    })
}

fn leftover_cgroups(hull_pid: u32) -> Vec<String> {
    // `hull-<pid>.<random>-...`: the owner identity (hull_box::owner) starts with the pid.
    let prefix = format!("hull-{hull_pid}.");
    let mut found = Vec::new();
    let mut stack = vec![std::path::PathBuf::from("/sys/fs/cgroup")];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    if e.file_name().to_string_lossy().starts_with(&prefix) {
                        found.push(e.path().display().to_string());
                    }
                    stack.push(e.path());
                }
            }
        }
    }
    found
}

#[test]
fn timeout_kills_the_whole_box_including_daemons() {
    let marker = format!("hull-daemon-{}", std::process::id());
    let code = format!("import os, subprocess\nif os.fork() == 0:\n    os.setsid()\n    subprocess.Popen(['python3', '-c', 'import time; time.sleep(1000)', '{marker}' + '-daemon'], start_new_session=True)\n    os._exit(0)\nwhile True: pass");
    let child = std::process::Command::new(bin())
        .args(["run", "--json", "--timeout", "2s", "--code", &code])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The daemon really runs (so its absence afterwards means something); only its argv holds
    // the joined marker, the main program's holds the two halves.
    wait_for_process(&format!("{marker}-daemon"));
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fault(&v).as_deref(), Some("timeout"), "{v}");
    // The 2 s deadline, not another, ended the box (the program never ends on its own), and
    // not before its time.
    assert!(
        v["fault"]["reason"]
            .as_str()
            .unwrap()
            .contains("deadline of 2s"),
        "{v}"
    );
    let ms = v["duration_ms"].as_u64().unwrap();
    assert!(ms >= 1900, "the deadline fired after {ms} ms");
    // The killed program's CPU is counted (read before the kill: the kernel drops the times of
    // processes a dying pid 1 reaps); it spun for 2 s, so even a loaded machine gave it 200 ms.
    let cpu = v["stats"]["cpu_ms"].as_u64().unwrap();
    assert!(
        cpu >= 200,
        "cpu_ms {cpu} for a program that spun until its deadline"
    );
    assert!(
        !process_with(&marker),
        "a daemonized process outlived the box"
    );
    assert!(
        leftover_cgroups(pid).is_empty(),
        "cgroups left behind: {:?}",
        leftover_cgroups(pid)
    );
}

#[test]
fn stdout_flood_is_truncated_and_the_program_keeps_running() {
    let ws = tempfile::tempdir().unwrap();
    set_world_writable(ws.path());
    let v = run_json(&[
        "--workspace",
        ws.path().to_str().unwrap(),
        "--max-output",
        "1m",
        "--timeout",
        "60s",
        "--",
        "sh",
        "-c",
        "head -c 104857600 /dev/zero; echo done > /workspace/marker",
    ]);
    assert_eq!(v["truncated"], true, "{}", v["fault"]);
    assert_eq!(v["stdout"].as_str().unwrap().len(), 1 << 20);
    assert_eq!(fault(&v).as_deref(), Some("output_limit"));
    assert_eq!(v["exit_code"], 0);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("marker")).unwrap(),
        "done\n"
    );
}

fn set_world_writable(p: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
}

#[test]
fn missing_interpreter_is_exec_failed() {
    let v = run_json(&["--", "no-such-interpreter", "-c", "1"]);
    assert_eq!(fault(&v).as_deref(), Some("exec_failed"), "{v}");
    let reason = v["fault"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("no-such-interpreter") && reason.contains("host"),
        "{reason}"
    );
    assert_eq!(v["exit_code"], 127);
}

#[test]
fn a_python_exception_is_not_a_fault() {
    let v = run_json(&["--code", "raise ValueError('boom')"]);
    assert_eq!(v["fault"], serde_json::Value::Null);
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["success"], false);
    assert!(v["stderr"].as_str().unwrap().contains("ValueError: boom"));
}

#[test]
fn workspace_full_is_a_fault() {
    if !is_root() {
        hull_testkit::skip(
            "mounting a small tmpfs as the workspace needs root (the root run covers this)",
        );
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path().to_str().unwrap();
    assert!(std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs", p])
        .status()
        .unwrap()
        .success());
    let v = run_json(&[
        "--workspace",
        p,
        "--",
        "sh",
        "-c",
        "head -c 4194304 /dev/zero > /workspace/big",
    ]);
    let _ = std::process::Command::new("umount").arg(p).status();
    assert_eq!(fault(&v).as_deref(), Some("workspace_full"), "{v}");
}

#[test]
fn bad_options_are_refused_naming_the_argument() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["run", "--tmp-size", "64", "--", "true"],
            &["--tmp-size", "unit"],
        ),
        (
            &["run", "--tmpfs", "/cache=10", "--", "true"],
            &["--tmpfs", "unit"],
        ),
        (
            &["run", "--mount", "/etc:/data", "--", "true"],
            &["--mount", "/etc"],
        ),
        (
            &["run", "--mount", "/usr/share:/proc", "--", "true"],
            &["--mount", "/proc"],
        ),
        (
            &["run", "--mount", "/tmp:/data", "--", "true"],
            &["--mount", "/tmp", "shared"],
        ),
        (
            &["run", "--mount", "/var:/data", "--", "true"],
            &["--mount", "/var"],
        ),
        (
            &["run", "--rootfs", "/", "--", "true"],
            &["--rootfs", "whole host"],
        ),
        (
            &["run", "--memory", "32m", "--tmp-size", "64m", "--", "true"],
            &["tmpfs", "memory"],
        ),
        (&["run", "--timeout", "soon", "--", "true"], &["--timeout"]),
        (
            &["run", "--cap-add", "FLY", "--", "true"],
            &["--cap-add", "FLY"],
        ),
        (
            &[
                "run",
                "--tmpfs",
                "/data=1m",
                "--mount",
                "/usr/share:/data/x:ro",
                "--",
                "true",
            ],
            &["--tmpfs", "cover"],
        ),
        (
            &["run", "--mount", "/usr/share:relative", "--", "true"],
            &["--mount", "absolute"],
        ),
        (&["run"], &["no command"]),
        (
            &["run", "--mount", "/no/such/dir:/data", "--", "true"],
            &["--mount: source /no/such/dir", "No such file"],
        ),
        (
            &["run", "--workspace", "/etc", "--", "true"],
            &["--workspace: source /etc refused"],
        ),
        (
            &["run", "--cap-drop", "FLY", "--", "true"],
            &["--cap-drop: `FLY` is not a capability"],
        ),
    ];
    for (args, words) in cases {
        let out = hull(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        for w in *words {
            assert!(err.contains(w), "{args:?}: `{w}` missing from: {err}");
        }
    }
}

/// Credential stores are refused in any mode and shell start-up files writable, through
/// `hull run --mount` / `--workspace` with `HOME` pointing at a home made here; the refusal names
/// the path, the reason from the reviewed list and the fix, and a read-only bind of a start-up
/// file still works.
#[test]
fn credential_stores_and_start_up_files_are_refused_as_mount_sources() {
    let d = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(d.path()).unwrap().join("me");
    for dir in [".ssh", ".config/gh", ".local/bin"] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::write(home.join(".bashrc"), "echo from-bashrc").unwrap();
    let h = home.to_str().unwrap();
    let run = |args: &[String]| {
        std::process::Command::new(bin())
            .args(args)
            .env("HOME", &home)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let cases: &[(&[String], &[&str])] = &[
        (
            &[
                "run".into(),
                "--mount".into(),
                format!("{h}/.ssh:/data"),
                "--".into(),
                "true".into(),
            ],
            &[
                "--mount",
                "/me/.ssh holds SSH private keys",
                "copy only the files the box needs",
            ],
        ),
        (
            &[
                "run".into(),
                "--mount".into(),
                format!("{h}/.ssh:/data:ro"),
                "--".into(),
                "true".into(),
            ],
            &["--mount", "/me/.ssh holds SSH private keys"],
        ),
        (
            &[
                "run".into(),
                "--mount".into(),
                format!("{h}/.config:/data:ro"),
                "--".into(),
                "true".into(),
            ],
            &["--mount", "it contains", "/me/.config/g", "which holds"],
        ),
        (
            &[
                "run".into(),
                "--mount".into(),
                format!("{h}/.bashrc:/data/rc"),
                "--".into(),
                "true".into(),
            ],
            &[
                "--mount",
                "/me/.bashrc holds commands every interactive bash",
                "read-only (SRC:DST:ro",
            ],
        ),
        (
            &[
                "run".into(),
                "--workspace".into(),
                format!("{h}/.local/bin"),
                "--".into(),
                "true".into(),
            ],
            &[
                "--workspace",
                "/me/.local/bin holds commands on the user's PATH",
                "the workspace is writable",
            ],
        ),
        (
            &[
                "run".into(),
                "--mount".into(),
                "/usr:/data".into(),
                "--".into(),
                "true".into(),
            ],
            &[
                "--mount",
                "/usr holds the host's programs and libraries",
                "read-only",
            ],
        ),
    ];
    for (args, words) in cases {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(125),
            "{args:?} was not refused: {err}"
        );
        for w in *words {
            assert!(err.contains(w), "{args:?}: `{w}` missing from: {err}");
        }
    }
    let out = run(&[
        "run".into(),
        "--mount".into(),
        format!("{h}/.bashrc:/data/rc:ro"),
        "--".into(),
        "cat".into(),
        "/data/rc".into(),
    ]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("from-bashrc"),
        "a read-only bind of ~/.bashrc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mounts_bind_ro_and_rw_and_tmpfs() {
    let src = tempfile::tempdir().unwrap();
    set_world_writable(src.path());
    std::fs::write(src.path().join("in.txt"), "from host").unwrap();
    let s = src.path().to_str().unwrap();
    let v = run_json(&["--mount", &format!("{s}:/data:ro"), "--mount", &format!("{s}:/tmp/rw"), "--tmpfs", "/cache=8m", "--", "sh", "-c", "cat /data/in.txt; echo; echo x > /data/y 2>/dev/null || echo ro-refused; echo written > /tmp/rw/out.txt; df -k /cache | tail -1"]);
    let out = stdout(&v);
    assert!(
        out.contains("from host") && out.contains("ro-refused"),
        "{v}"
    );
    assert!(out.contains("8192"), "tmpfs size: {out}");
    assert_eq!(
        std::fs::read_to_string(src.path().join("out.txt")).unwrap(),
        "written\n"
    );
}

#[test]
fn plan_prints_steps_without_running() {
    let out = hull(&["run", "--plan", "--", "python3", "-c", "print(1)"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for w in [
        "clone with new namespaces",
        "pivot_root",
        "seal",
        "seccomp",
        "drop all capabilities",
        "exec",
    ] {
        assert!(text.contains(w), "{w} missing: {text}");
    }
}

#[test]
fn streaming_mode_passes_output_and_exit_code() {
    let out = hull(&["run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err"));
}

/// A tiny root filesystem holding only a static busybox at /bin/busybox.
fn busybox_root() -> Option<tempfile::TempDir> {
    let busybox = std::path::Path::new("/bin/busybox");
    if !busybox.exists() {
        hull_testkit::skip("/bin/busybox (busybox-static) is not installed");
        return None;
    }
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bin")).unwrap();
    std::fs::copy(busybox, root.path().join("bin/busybox")).unwrap();
    Some(root)
}

#[test]
fn rootfs_directory_is_the_whole_world() {
    let Some(root) = busybox_root() else { return };
    std::os::unix::fs::symlink("busybox", root.path().join("bin/sh")).unwrap();
    let v = run_json(&["--rootfs", root.path().to_str().unwrap(), "--", "/bin/sh", "-c", "echo hi; /bin/busybox ls /; test -e /usr/bin/python3 && echo HOSTLEAK; /bin/busybox touch /bin/x || echo ro"]);
    let out = stdout(&v);
    assert!(
        out.lines().next() == Some("hi")
            && out.lines().any(|l| l == "ro")
            && !out.contains("HOSTLEAK"),
        "{v}"
    );
}

#[test]
fn many_boxes_share_one_root_at_once() {
    let handles: Vec<_> = (0..20)
        .map(|i| std::thread::spawn(move || run_json(&["--code", &format!("print({i} * 2)")])))
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let v = h.join().unwrap();
        assert_eq!(stdout(&v).trim(), (i * 2).to_string(), "{v}");
    }
}

/// The host pid of the process whose command line contains `marker`.
fn find_process(marker: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.contains(marker) && cmd.starts_with("python3")).then_some(pid)
    })
}

fn wait_for_process(marker: &str) -> i32 {
    for _ in 0..500 {
        if let Some(p) = find_process(marker) {
            return p;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the box's process never appeared");
}

#[test]
fn a_kill_from_outside_is_the_killed_fault() {
    let marker = format!("hull-victim-{}", std::process::id());
    let child = std::process::Command::new(bin())
        .args([
            "run",
            "--json",
            "--",
            "python3",
            "-c",
            "import time; time.sleep(30)",
            &marker,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = wait_for_process(&marker);
    // SAFETY: kill takes plain integers; the pid is the box's program we just started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fault(&v).as_deref(), Some("killed"), "{v}");
    assert_eq!(v["exit_code"], 137);
}

#[test]
fn sigint_to_hull_kills_the_box_and_cleans_up() {
    let marker = format!("hull-interrupted-{}", std::process::id());
    let child = std::process::Command::new(bin())
        .args([
            "run",
            "--json",
            "--",
            "python3",
            "-c",
            "import time; time.sleep(30)",
            &marker,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_process(&marker);
    let hull_id = child.id();
    let hull_pid = i32::try_from(hull_id).unwrap();
    // SAFETY: kill takes plain integers; this is the hull process we started.
    unsafe { libc::kill(hull_pid, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fault(&v).as_deref(), Some("killed"), "{v}");
    assert!(
        v["fault"]["reason"].as_str().unwrap().contains("SIGINT"),
        "{v}"
    );
    assert!(
        find_process(&marker).is_none(),
        "the box outlived hull's SIGINT"
    );
    assert!(leftover_cgroups(hull_id).is_empty());
}

/// The same for a streaming `hull run` (no --json) whose box is writing output when the signal
/// comes: the output path (a writer thread) must not take the signal's default action and end
/// hull before it has killed and removed the box.
#[test]
fn sigint_to_streaming_hull_kills_the_box_and_cleans_up() {
    use std::io::Read;
    let marker = format!("hull-streaming-{}", std::process::id());
    let temp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "--",
            "python3",
            "-c",
            "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.01)",
            &marker,
        ])
        .env("TMPDIR", temp.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 5];
    out.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"tick\n");
    wait_for_process(&marker);
    let hull_id = child.id();
    let hull_pid = i32::try_from(hull_id).unwrap();
    // SAFETY: kill takes plain integers; this is the hull process we started.
    unsafe { libc::kill(hull_pid, libc::SIGINT) };
    let mut rest = Vec::new();
    let _ = out.read_to_end(&mut rest);
    let status = child.wait().unwrap();
    assert!(
        status.code().is_some(),
        "hull died of the signal instead of ending the box: {status:?}"
    );
    assert!(
        find_process(&marker).is_none(),
        "the box outlived hull's SIGINT"
    );
    assert!(leftover_cgroups(hull_id).is_empty());
    let left: Vec<_> = std::fs::read_dir(temp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("hull-ws-"))
        .collect();
    assert!(left.is_empty(), "workspace left behind: {left:?}");
}

#[test]
fn unenforceable_caps_warn_or_are_refused_with_require_limits() {
    let out = std::process::Command::new(bin())
        .args(["run", "--json", "--memory", "128m", "--", "true"])
        .env("HULL_CGROUP_PARENT", "hull-no-such-parent")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["success"], true, "{v}");
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains("not enforced") && warnings.contains("HULL_CGROUP_PARENT"),
        "{v}"
    );
    let out = std::process::Command::new(bin())
        .args(["run", "--require-limits", "--memory", "128m", "--", "true"])
        .env("HULL_CGROUP_PARENT", "hull-no-such-parent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--require-limits"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_setup_failure_names_step_errno_and_path() {
    let out = hull(&["run", "--cwd", "/no/such/dir", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("enter working directory")
            && err.contains("/no/such/dir")
            && err.contains("No such file"),
        "{err}"
    );
    let out = hull(&["run", "--json", "--cwd", "/no/such/dir", "--", "true"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "setup_failed", "{v}");
}

#[test]
fn an_image_symlink_cannot_redirect_a_mount_target() {
    let Some(root) = busybox_root() else { return };
    // A hostile image: /data points at the host's /etc.
    std::os::unix::fs::symlink("/etc", root.path().join("data")).unwrap();
    let src = tempfile::tempdir().unwrap();
    let out = hull(&[
        "run",
        "--rootfs",
        root.path().to_str().unwrap(),
        "--mount",
        &format!("{}:/data/x", src.path().display()),
        "--",
        "/bin/busybox",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/data/x"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !std::path::Path::new("/etc/x").exists(),
        "a mount point was created in the host's /etc"
    );
}

#[test]
fn cpu_cap_throttles() {
    if !cap_enforced("Cpu") {
        return;
    }
    // Busy for 2 s of wall time: unthrottled that is ~2000 ms of CPU, at 0.25 CPUs ~500 ms.
    let code = "import time\nt = time.time()\nwhile time.time() - t < 2: pass";
    let v = run_json(&["--cpus", "0.25", "--code", code]);
    let cpu = v["stats"]["cpu_ms"].as_u64().unwrap();
    assert!(
        v["success"] == true && cpu < 1200,
        "cpu_ms {cpu} under a 0.25 CPU cap: {v}"
    );
}

#[test]
fn the_box_dies_with_a_killed_supervisor() {
    let marker = format!("hull-orphan-{}", std::process::id());
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "--",
            "python3",
            "-c",
            "import time; time.sleep(30)",
            &marker,
        ])
        .spawn()
        .unwrap();
    wait_for_process(&marker);
    child.kill().unwrap(); // SIGKILL: hull gets no chance to clean up
    child.wait().unwrap();
    for _ in 0..200 {
        if find_process(&marker).is_none() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the box outlived its SIGKILLed supervisor");
}

#[test]
fn a_source_swapped_for_a_symlink_after_the_check_is_not_followed() {
    // A directory and a symlink to /etc trade places as fast as possible while boxes bind the
    // directory: each box must see our directory or fail to start, never the host's /etc.
    let base = tempfile::tempdir().unwrap();
    let real = base.path().join("src");
    let evil = base.path().join("evil");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("marker"), "ours").unwrap();
    std::os::unix::fs::symlink("/etc", &evil).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (a, b) = (
        std::ffi::CString::new(real.to_str().unwrap()).unwrap(),
        std::ffi::CString::new(evil.to_str().unwrap()).unwrap(),
    );
    let flag = std::sync::Arc::clone(&stop);
    let swapper = std::thread::spawn(move || {
        let mut swaps = 0u64;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            // SAFETY: both are valid C strings naming entries in our temporary directory.
            unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            swaps += 1;
        }
        swaps
    });
    let (mut ours, mut refused) = (0, 0);
    for _ in 0..60 {
        let out = hull(&[
            "run",
            "--json",
            "--mount",
            &format!("{}:/data:ro", real.display()),
            "--",
            "sh",
            "-c",
            "ls /data",
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("passwd") && !text.contains("shadow"),
            "the host's /etc was bound: {text}"
        );
        if text.contains("marker") {
            ours += 1;
        } else {
            refused += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 100, "the race did not run");
    assert!(ours + refused == 60);
}

#[test]
fn a_stalled_reader_does_not_hold_off_the_deadline() {
    let marker = format!("hull-flooder-{}", std::process::id());
    // Nobody reads hull's stdout for a while: the pipe fills at once.
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "--timeout",
            "1s",
            "--",
            "python3",
            "-c",
            "import sys\nwhile True: sys.stdout.write('x' * 65536)",
            &marker,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_process(&marker);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let alive = find_process(&marker).is_some();
    drop(child.stdout.take()); // unblock hull's writer
    child.wait().unwrap();
    assert!(
        !alive,
        "the box outlived its 1 s deadline while its reader stalled"
    );
}

/// Paths under `dir` (to `depth` levels) whose name starts with `prefix`.
fn find_named(
    dir: &std::path::Path,
    prefix: &str,
    depth: usize,
    out: &mut Vec<std::path::PathBuf>,
) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if e.file_name().to_string_lossy().starts_with(prefix) {
            out.push(e.path());
        } else if depth > 1 {
            find_named(&e.path(), prefix, depth - 1, out);
        }
    }
}

#[test]
fn a_sigkilled_hull_leaves_nothing_the_next_hull_does_not_sweep() {
    // A hull of our own, SIGKILLed (by its pid) while its box sleeps.
    let mut child = std::process::Command::new(bin())
        .args(["run", "--", "sleep", "30"])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("spawn hull");
    let pid = child.id();
    let temp = std::env::temp_dir();
    let ws_prefix = format!("hull-ws-{pid}.");
    let cg_prefix = format!("hull-{pid}.");
    let leftovers = || {
        let mut v = Vec::new();
        find_named(&temp, &ws_prefix, 1, &mut v);
        find_named(
            std::path::Path::new("/sys/fs/cgroup"),
            &cg_prefix,
            5,
            &mut v,
        );
        v
    };
    // Wait until the box is up (its workspace and cgroup exist).
    let t = std::time::Instant::now();
    while leftovers().len() < 2 && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Seen while the box lives: other tests' hulls may sweep them as soon as ours is dead.
    let before = leftovers();
    child.kill().expect("SIGKILL our hull");
    child.wait().unwrap();
    assert!(
        before.iter().any(|p| p.starts_with(&temp)),
        "no workspace seen for hull {pid}: {before:?}"
    );
    if cap_enforced("Pids") {
        assert!(
            before.iter().any(|p| p.starts_with("/sys/fs/cgroup")),
            "no cgroup seen for hull {pid}: {before:?}"
        );
    }
    // The box died with its supervisor; the next hull removes what is left (a dying box's
    // cgroup may stay busy for a moment, so allow a few runs).
    let t = std::time::Instant::now();
    loop {
        let v = run_json(&["--", "true"]);
        assert!(v["success"].as_bool().unwrap(), "{v}");
        let left = leftovers();
        if left.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "still left after sweeps: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// This user's name and the starts of its /etc/subuid and /etc/subgid ranges, if it has them.
fn subid_ranges() -> (String, Option<u32>, Option<u32>) {
    let id = |flag: &str| {
        String::from_utf8(
            std::process::Command::new("id")
                .arg(flag)
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim()
        .to_string()
    };
    let (me, uid) = (id("-un"), id("-u"));
    let range = |file: &str| {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() == 3 && (f[0] == me || f[0] == uid))
                    .then(|| f[1].parse::<u32>().ok())
                    .flatten()
            })
    };
    let (u, g) = (range("/etc/subuid"), range("/etc/subgid"));
    (me, u, g)
}

#[test]
fn subids_map_a_range_through_the_uidmap_helpers_or_are_refused_naming_the_fix() {
    // With a range in /etc/subuid and /etc/subgid (CI's unprivileged user), `--subids` maps ids
    // 1-65536 inside to it: a file chowned to 1000 inside is owned by start+999 on the host.
    // Without one (CI's root), the box is refused before anything runs, naming the file and
    // the fix.
    let (me, subuid, subgid) = subid_ranges();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_str().unwrap();
    let out = hull(&[
        "run",
        "--subids",
        "--cap-add",
        "CHOWN",
        "--workspace",
        ws,
        "--",
        "sh",
        "-c",
        "cat /proc/self/uid_map; touch /workspace/f; chown 1000:1000 /workspace/f && echo chowned",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if caller_ids().0 == 0 {
        // Host root's boxes map to hull's own range, all 65536 ids of it with --subids, and a
        // named workspace is an idmapped copy whose ids on disk are the box's own.
        println!("host root: --subids maps hull's range");
        assert!(
            out.status.success() && stdout.contains("chowned"),
            "{stdout}\n{stderr}"
        );
        assert_eq!(
            stdout.split_whitespace().take(3).collect::<Vec<_>>(),
            ["0", "2147287040", "65536"],
            "{stdout}"
        );
        let f = std::fs::metadata(dir.path().join("f")).unwrap();
        assert_eq!(
            (
                std::os::unix::fs::MetadataExt::uid(&f),
                std::os::unix::fs::MetadataExt::gid(&f)
            ),
            (1000, 1000),
            "{stdout}"
        );
        return;
    }
    match (subuid, subgid) {
        (Some(u), Some(g)) => {
            println!("{me} has sub-ids from {u} (uids) and {g} (gids): testing the mapping");
            assert!(
                out.status.success() && stdout.contains("chowned"),
                "{stdout}\n{stderr}"
            );
            assert_eq!(
                stdout
                    .lines()
                    .filter(|l| !l.trim().is_empty() && l.split_whitespace().count() == 3)
                    .count(),
                2,
                "root and the range mapped: {stdout}"
            );
            let meta = std::os::unix::fs::MetadataExt::uid(
                &std::fs::metadata(dir.path().join("f")).unwrap(),
            );
            assert_eq!(meta, u + 999, "{stdout}");
            // Without --subids the same chown has no id 1000 to give.
            let out = hull(&[
                "run",
                "--cap-add",
                "CHOWN",
                "--workspace",
                ws,
                "--",
                "sh",
                "-c",
                "touch /workspace/g; chown 1000:1000 /workspace/g && echo chowned",
            ]);
            assert!(
                !String::from_utf8_lossy(&out.stdout).contains("chowned"),
                "{out:?}"
            );
        }
        _ => {
            println!("{me} has no sub-id range: testing the refusal");
            assert_eq!(out.status.code(), Some(125), "{stdout}\n{stderr}");
            assert!(
                stderr.contains("--subids")
                    && stderr.contains("/etc/sub")
                    && stderr.contains("usermod"),
                "{stderr}"
            );
            assert!(
                stdout.is_empty() && !dir.path().join("f").exists(),
                "the box ran: {stdout}"
            );
        }
    }
}

/// The host uid and gid (real, effective, saved, fs) of process `pid`, from its status file.
fn host_ids(pid: i32) -> (Vec<u32>, Vec<u32>) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ids = |key: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap()
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect()
    };
    (ids("Uid:"), ids("Gid:"))
}

/// As host root, a directory the box may write becomes an idmapped copy; on a file system that
/// cannot be idmapped (ramfs) the refusal names the argument the caller used for it: the
/// workspace or a mount, as `hull run` (`--workspace`, `--mount`) and `hull serve` (`workspace`,
/// `mounts`) spell it. The ramfs is mounted in a mount namespace of the test's own.
#[test]
fn an_idmap_refusal_names_the_field_the_directory_came_from() {
    if !is_root() {
        hull_testkit::skip("only host root's boxes use idmapped mounts (the root run covers this)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let serve_input = [
        serde_json::json!({"id": 1, "method": "run", "params": {"argv": ["true"], "workspace": d}}),
        serde_json::json!({"id": 2, "method": "run", "params": {"argv": ["true"], "mounts": [format!("{d}:/data")]}}),
        serde_json::json!({"id": "end", "method": "shutdown"}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect::<String>();
    let script = r#"mount -t ramfs ramfs "$D" || exit 90
"$HULL" run --json --workspace "$D" -- true
"$HULL" run --json --mount "$D:/data" -- true
printf '%s' "$SERVE_INPUT" | "$HULL" serve"#;
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("D", d)
        .env("HULL", bin())
        .env("SERVE_INPUT", serve_input)
        .stdin(std::process::Stdio::null())
        .output();
    let out = match out {
        Ok(o) if o.status.code() != Some(90) => o,
        Ok(o) => {
            hull_testkit::skip(format!(
                "cannot mount a ramfs in a new mount namespace: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
            return;
        }
        Err(e) => {
            hull_testkit::skip(format!("cannot run unshare(1): {e}"));
            return;
        }
    };
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let all = format!(
        "{lines:?}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines.len(), 5, "{all}");
    if lines[0].get("error").is_none() {
        hull_testkit::skip(
            "this kernel's ramfs supports idmapped mounts: no file system here refuses one",
        );
        return;
    }
    for (v, flag) in [(&lines[0], "--workspace"), (&lines[1], "--mount")] {
        assert_eq!(v["error"]["kind"], "mount_source", "{all}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{flag}: {d}: ")) && message.contains("idmapped"),
            "{all}"
        );
    }
    for (id, key) in [(1, "workspace"), (2, "mounts")] {
        let e = &lines
            .iter()
            .find(|l| l["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id}: {all}"))["error"];
        assert_eq!(e["kind"], "mount_source", "{all}");
        assert_eq!(e["arg"], key, "{all}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{key}: {d}: ")),
            "{all}"
        );
    }
}

#[test]
fn host_roots_box_is_never_host_root_and_its_files_belong_to_the_directory_owner() {
    // The box's processes, seen from the host: as host root they run as hull's own range
    // (2147287040), never uid 0, with no supplementary groups; rootless, as the caller.
    let me = caller_ids();
    let marker = format!("hull-remap-{}", std::process::id());
    let ws = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "--timeout",
            "20s",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "python3",
            "-c",
            "import os, time; open('/workspace/made', 'w').write('x'); os.mkdir('/workspace/d'); time.sleep(20)",
            &marker,
        ])
        .spawn()
        .unwrap();
    let pid = wait_for_process(&marker);
    for _ in 0..500 {
        if ws.path().join("d").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (uids, gids) = host_ids(pid);
    let groups = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Groups:").map(|g| g.trim().to_string()))
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let expected = if me.0 == 0 { 2_147_287_040 } else { me.0 };
    assert_eq!(uids, vec![expected; 4], "box uids on the host");
    assert_eq!(
        gids,
        vec![if me.0 == 0 { 2_147_287_040 } else { me.1 }; 4],
        "box gids on the host"
    );
    if me.0 == 0 {
        assert!(groups.is_empty(), "host root's groups kept: {groups}");
    }
    // What the box made in the named workspace belongs to the workspace's owner (the caller),
    // not to the box's host ids.
    for name in ["made", "d"] {
        let m = std::fs::metadata(ws.path().join(name)).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((m.uid(), m.gid()), me, "{name}");
    }
    if me.0 != 0 {
        hull_testkit::skip_part(
            "other-owner",
            "a workspace owned by another user needs root to make (the root run covers it)",
        );
        return;
    }
    // As root, a directory owned by someone else: the box is its owner, its files are theirs.
    let other = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(other.path(), Some(65534), Some(65534)).unwrap();
    let v = run_json(&[
        "--workspace",
        other.path().to_str().unwrap(),
        "--code",
        "import os; open('/workspace/f', 'w').write('x'); print(os.stat('/workspace').st_uid)",
    ]);
    assert_eq!(stdout(&v).trim(), "0", "{v}");
    let m = std::fs::metadata(other.path().join("f")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    // A file capability written through such a directory would be stored for its owner (host
    // root for a root-owned one): SETFCAP is refused, by name, and never kept through ALL.
    let out = hull(&["run", "--cap-add", "SETFCAP", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("SETFCAP") && err.contains("as root"),
        "{out:?}"
    );
    let v = run_json(&[
        "--cap-add",
        "ALL",
        "--code",
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])",
    ]);
    let eff = u64::from_str_radix(stdout(&v).trim(), 16).unwrap();
    assert_eq!(eff & (1 << 31), 0, "SETFCAP kept through ALL: {v}");
    assert_eq!(eff & (1 << 4), 0, "FSETID kept through ALL: {v}");
    assert_ne!(eff & 1, 0, "CHOWN should be kept through ALL: {v}");
    let out = hull(&["run", "--cap-add", "fsetid", "--", "true"]);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("FSETID"),
        "{out:?}"
    );
}

/// The caller's effective uid and gid.
fn caller_ids() -> (u32, u32) {
    let m = std::fs::metadata("/proc/self").unwrap();
    use std::os::unix::fs::MetadataExt;
    (m.uid(), m.gid())
}

#[test]
fn proc_hides_host_memory_layout_and_pid_1_shows_no_host_command_line() {
    // Pid 1 is a copy of the supervisor: its command line (which holds this very code) would
    // show hull's host argv. Host memory maps are masked like the other sensitive /proc files.
    let marker = format!("hull-argv-secret-{}", std::process::id());
    let memory: Vec<&str> = ["kpageflags", "kpagecount", "kpagecgroup", "vmallocinfo"]
        .into_iter()
        .filter(|f| std::path::Path::new(&format!("/proc/{f}")).exists())
        .collect();
    println!("host memory files this kernel has: {memory:?}");
    let code = format!(
        "import os, stat\n# {marker}\nc = open('/proc/1/cmdline', 'rb').read()\nprint('cmdline', c, {marker:?}.encode() in c)\nprint('comm', open('/proc/1/comm').read().strip())\nfor f in {memory:?}:\n    st = os.stat('/proc/' + f)\n    print(f, stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3))"
    );
    let v = run_json(&["--code", &code]);
    let out = stdout(&v);
    assert!(v["success"] == true, "{v}");
    assert!(
        out.contains("cmdline b'hull-init\\x00' False"),
        "pid 1 shows the host's argv: {out}"
    );
    assert!(out.contains("comm hull-init"), "{out}");
    for f in &memory {
        assert!(
            out.contains(&format!("{f} True")),
            "/proc/{f} not masked: {out}"
        );
    }
}

#[test]
fn a_box_exhausting_per_user_budgets_leaves_the_callers_own_calls_working() {
    // Inotify instances and queued signals are counted per user, and a box's are charged to
    // the user who ran hull: the box takes all it can, and while it holds them the caller can
    // still make its own.
    let ws = tempfile::tempdir().unwrap();
    let code = "import ctypes, signal, threading, time\nlibc = ctypes.CDLL(None, use_errno=True)\nfds = []\nwhile len(fds) < 100000:\n    fd = libc.inotify_init1(0)\n    if fd < 0:\n        break\n    fds.append(fd)\nino_err = ctypes.get_errno()\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\nq, qerr = 0, 0\ntry:\n    while q < 1000000:\n        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)\n        q += 1\nexcept OSError as e:\n    qerr = e.errno\nopen('/workspace/held', 'w').write('%d %d %d %d' % (len(fds), ino_err, q, qerr))\ntime.sleep(30)";
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "--timeout",
            "60s",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--code",
            code,
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let held = ws.path().join("held");
    for _ in 0..3000 {
        if std::fs::read_to_string(&held).is_ok_and(|s| s.split(' ').count() == 4) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let text = std::fs::read_to_string(&held).expect("the box reported what it holds");
    let n: Vec<i64> = text.split(' ').map(|x| x.parse().unwrap()).collect();
    // The caller's own calls, while the box holds everything it could take.
    // SAFETY: inotify_init1 takes a flag word; the descriptor is closed right after.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    let ino_errno = std::io::Error::last_os_error();
    if fd >= 0 {
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
    }
    let sig = std::process::Command::new("python3")
        .args(["-c", "import signal, threading\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\nsignal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)\nprint('queued')"])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "the box held {} inotify instances (then errno {}) and {} queued signals (then errno {})",
        n[0], n[1], n[2], n[3]
    );
    assert_eq!(
        n[1],
        i64::from(libc::EMFILE),
        "the box's inotify ran out another way: {text}"
    );
    assert_eq!(
        n[3],
        i64::from(libc::EAGAIN),
        "the box's signal queue ran out another way: {text}"
    );
    assert!(
        fd >= 0,
        "the caller's inotify_init1 failed while the box held {}: {ino_errno}",
        n[0]
    );
    assert!(
        sig.status.success() && String::from_utf8_lossy(&sig.stdout).contains("queued"),
        "the caller could not queue a signal while the box held {}: {sig:?}",
        n[2]
    );
}

#[test]
fn a_subids_box_that_chowns_its_temporary_workspace_leaves_nothing_behind() {
    // Files and directories a `--subids --cap-add CHOWN` box gives to its sub-ids belong to ids
    // of the caller's range on the host, which the caller cannot remove as itself (a directory
    // of another uid, without write permission for us). The teardown must remove the box's
    // temporary workspace all the same.
    let (me, subuid, subgid) = subid_ranges();
    if subuid.is_none() || subgid.is_none() {
        hull_testkit::skip(format!(
            "{me} has no /etc/subuid and /etc/subgid range (the rootless pass has one)"
        ));
        return;
    }
    // A temporary directory of our own, so only this test's hulls write there.
    let temp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin())
        .args([
            "run",
            "--json",
            "--subids",
            "--cap-add",
            "CHOWN",
            "--",
            "sh",
            "-c",
            "cd /workspace && touch f && chown 1000:1000 f && mkdir -p d/e && touch d/g d/e/h \
             && chmod 700 d/e && chmod 500 d && chown -R 1000:1000 d && mkdir s && touch s/t \
             && chown 3000 s/t && chmod 1777 s && chown 2000 s && echo chowned",
        ])
        .env("TMPDIR", temp.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        v["success"].as_bool().unwrap() && stdout(&v).contains("chowned"),
        "{v}"
    );
    let left: Vec<_> = std::fs::read_dir(temp.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("hull-ws-")
        })
        .collect();
    assert!(
        left.is_empty(),
        "the box's temporary workspace was left behind: {left:?}\nwarnings: {}\nstderr: {}",
        v["warnings"],
        String::from_utf8_lossy(&out.stderr)
    );
    // A hull SIGKILLed while such a box runs cannot remove it; the next sweep must.
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "--subids",
            "--cap-add",
            "CHOWN",
            "--",
            "sh",
            "-c",
            "cd /workspace && mkdir -p d/e && touch d/e/h && chmod 500 d && chown -R 1000:1000 d \
             && mkdir s && chown 2000 s && sleep 30",
        ])
        .env("TMPDIR", temp.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let workspaces = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(temp.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("hull-ws-")
            })
            .collect()
    };
    // The box has chowned its tree once `s` belongs to another uid.
    let me = std::fs::metadata(temp.path()).unwrap().uid();
    let t = std::time::Instant::now();
    while !workspaces()
        .iter()
        .any(|w| std::fs::metadata(w.join("s")).is_ok_and(|m| m.uid() != me))
    {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "the box never chowned its workspace: {:?}",
            workspaces()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(workspaces().len(), 1, "{:?}", workspaces());
    let out = std::process::Command::new(bin())
        .args(["doctor", "--json"])
        .env("TMPDIR", temp.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        workspaces().is_empty(),
        "the sweep left a --subids box's workspace: {:?}\n{}",
        workspaces(),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `hull run` makes its temporary workspace before it has read its arguments; a run that uses
/// none (help, a refused flag, a named workspace, a plan) or whose box fails must not leave it.
#[test]
fn a_workspace_made_ahead_is_never_left_behind() {
    let temp = tempfile::tempdir().unwrap();
    let named = tempfile::tempdir().unwrap();
    let named = named.path().to_str().unwrap().to_string();
    for args in [
        &["run", "--help"][..],
        &["run", "--no-such-flag"],
        &["run", "--memory", "1x", "--", "true"],
        &["run", "--plan", "--", "true"],
        &["run", "--workspace", &named, "--", "true"],
        &["run", "--", "/no/such/program"],
        &["run", "--", "sh", "-c", "echo x > /workspace/f"],
        &["run"],
    ] {
        let out = std::process::Command::new(bin())
            .args(args)
            .env("TMPDIR", temp.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let left: Vec<_> = std::fs::read_dir(temp.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("hull-ws-"))
            .collect();
        assert!(
            left.is_empty(),
            "{args:?} left {left:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `hull doctor` checks the gateway network's device as this user opens it: ok where a box
/// could make its TAP, and otherwise missing with the fix named (`chmod 0666 /dev/net/tun`).
#[test]
fn doctor_checks_that_this_user_can_open_dev_net_tun() {
    let out = std::process::Command::new(bin())
        .args(["doctor", "--json"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let checks: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tun = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "gateway network")
        .unwrap_or_else(|| panic!("no gateway network check: {checks}"));
    let openable = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .is_ok();
    if openable {
        assert_eq!(tun["status"], "ok", "{tun}");
    } else {
        assert_eq!(tun["status"], "missing", "{tun}");
        assert!(
            tun["fix"]
                .as_str()
                .unwrap_or_default()
                .contains("/dev/net/tun"),
            "{tun}"
        );
    }
}
