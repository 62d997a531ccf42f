//! Real programs run under the default filter (KillMode::KillProcess, so any `kill` rule
//! shows up as SIGSYS): bash with coreutils, python3 (threads, multiprocessing, subprocess,
//! sockets, asyncio; numpy/pandas/matplotlib when installed), node, gcc, git, busybox. A tool
//! that is not installed is skipped with a printed reason.

mod common;

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use common::{default_program, require, require_kill_process, spawn, Exit};
use hull_seccomp::KillMode;

/// Seconds before a hung program is killed by SIGALRM.
const TIMEOUT_SECS: libc::c_uint = 120;

fn cstrings(items: &[&str]) -> Vec<CString> {
    items
        .iter()
        .map(|s| CString::new(*s).expect("no NUL"))
        .collect()
}

fn null_terminated(items: &[CString]) -> Vec<*const libc::c_char> {
    items
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Runs `argv` (absolute path first) in `dir` under the default filter; returns how it ended
/// and its combined stdout/stderr.
fn run_under_filter(argv: &[&str], dir: &Path) -> (Exit, String) {
    let program = default_program(KillMode::KillProcess);
    let fprog = program.as_fprog();
    // HOME and TMPDIR are the run's own directory: nothing a program writes outlives the run
    // or meets a file another user's run left in /tmp.
    let home = format!("HOME={}", dir.display());
    let tmpdir = format!("TMPDIR={}", dir.display());
    let env = cstrings(&[
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG=C.UTF-8",
        "MPLBACKEND=Agg",
        "GIT_CONFIG_NOSYSTEM=1",
        &home,
        &tmpdir,
    ]);
    let args = cstrings(argv);
    let (argv_ptrs, env_ptrs) = (null_terminated(&args), null_terminated(&env));
    let dir_c = CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL");
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into a live array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (read_end, write_end) = (fds[0], fds[1]);

    let child = spawn(|| {
        // Only async-signal-safe calls on fds and strings prepared before fork.
        // SAFETY: dup2 of the pipe's write end (ours) onto stdout; no memory involved.
        if unsafe { libc::dup2(write_end, 1) } < 0 {
            return 125;
        }
        // SAFETY: as above, onto stderr.
        if unsafe { libc::dup2(write_end, 2) } < 0 {
            return 125;
        }
        // SAFETY: `dir_c` is a NUL-terminated string made before fork and alive here.
        if unsafe { libc::chdir(dir_c.as_ptr()) } != 0 {
            return 125;
        }
        if hull_seccomp::set_no_new_privs().is_err() {
            return 125;
        }
        // SAFETY: `fprog` points into `program`, alive for the whole call; after the filter
        // only alarm and execve run, both allowed by the default policy.
        if unsafe { hull_seccomp::install_raw(&fprog, false) }.is_err() {
            return 126;
        }
        // SAFETY: alarm takes an integer and touches no memory.
        unsafe { libc::alarm(TIMEOUT_SECS) };
        // SAFETY: `args`, `argv_ptrs` and `env_ptrs` (NUL-terminated strings, null-terminated
        // pointer arrays into them) were made before fork and are alive; execve returns only on
        // failure.
        unsafe { libc::execve(args[0].as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr()) };
        127
    });
    // SAFETY: closes the parent's copy of the write end, which nothing else here holds.
    unsafe { libc::close(write_end) };
    // SAFETY: the read end is a fresh descriptor from pipe2 that nothing else owns.
    let reader = unsafe { OwnedFd::from_raw_fd(read_end) };
    let mut output = String::new();
    let mut file = std::fs::File::from(reader);
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).expect("read child output");
    output.push_str(&String::from_utf8_lossy(&bytes));
    (child.wait(), output)
}

/// Runs a script through `interpreter -c`-style args and asserts a clean exit with `marker`.
fn assert_runs(argv: &[&str], marker: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (exit, output) = run_under_filter(argv, dir.path());
    assert!(
        exit == Exit::Code(0) && output.contains(marker),
        "{} ended with {exit:?} (SIGSYS = {}); output:\n{output}",
        argv[0],
        libc::SIGSYS
    );
}

fn find_tool(candidates: &[&'static str]) -> Option<&'static str> {
    candidates.iter().copied().find(|p| Path::new(p).exists())
}

const BASH_SCRIPT: &str = r#"
set -euo pipefail
mkdir -p a/b && echo hello > a/b/f && cp -a a c && mv c/b/f c/b/g && ln -s g c/b/link
test "$(cat c/b/link)" = hello
printf '3\n1\n2\n' | sort -n | tr '\n' ' ' | grep -q '1 2 3'
tar czf t.tgz a && mkdir x && tar xzf t.tgz -C x && diff -r a x/a
find . -name f | xargs ls -l > /dev/null
sed -n 's/hel/HEL/p' a/b/f | awk '{print length($0)}' | grep -q 5
cat <(echo proc-subst) > /dev/null
( sleep 0.1 & wait )
chmod 600 a/b/f && stat -c %a a/b/f | grep -q 600 && touch -d @0 a/b/f
id -u > /dev/null && uname -a > /dev/null && date > /dev/null && df . > /dev/null && du -s . > /dev/null
nproc > /dev/null && ps -e > /dev/null 2>&1 || true
rm -rf a c x t.tgz
echo BASH-OK
"#;

#[test]
fn bash_and_coreutils_run() {
    if !require_kill_process() {
        return;
    }
    let Some(bash) = find_tool(&["/bin/bash", "/usr/bin/bash"]) else {
        require(false, "bash is not installed");
        return;
    };
    assert_runs(&[bash, "-c", BASH_SCRIPT], "BASH-OK");
}

const PYTHON_SCRIPT: &str = r#"
import asyncio, concurrent.futures, hashlib, json, mmap, multiprocessing as mp, os, select
import shutil, signal, socket, sqlite3, subprocess, sys, tempfile, threading, time, resource

def square(x):
    return x * x

def main():
    out = []
    t = threading.Thread(target=lambda: out.append(sum(range(1000))))
    t.start(); t.join(); assert out == [499500]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert list(ex.map(square, range(8)))[-1] == 49
    for method in ("fork", "spawn", "forkserver"):
        with mp.get_context(method).Pool(2) as pool:
            assert pool.map(square, range(10))[-1] == 81, method
    q = mp.Queue(); p = mp.Process(target=q.put, args=(7,)); p.start(); assert q.get() == 7; p.join()
    lock = mp.Lock(); lock.acquire(); lock.release()
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).stdout == b"1\n"
    assert subprocess.run("echo hi | cat", shell=True, capture_output=True).stdout == b"hi\n"
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    c = socket.create_connection(srv.getsockname()); s, _ = srv.accept()
    c.sendall(b"ping"); assert s.recv(4) == b"ping"
    a, b = socket.socketpair(); a.send(b"x"); assert b.recv(1) == b"x"
    async def echo():
        r, w = await asyncio.open_connection(*srv.getsockname())
        w.write(b"z"); await w.drain(); w.close()
    asyncio.run(echo())
    ep = select.epoll(); ep.register(b.fileno(), select.EPOLLIN); ep.close()
    d = tempfile.mkdtemp(); f = os.path.join(d, "f")
    with open(f, "wb") as fh: fh.write(b"data" * 1000)
    shutil.copy(f, f + "2"); os.rename(f + "2", f + "3")
    with open(f, "r+b") as fh:
        m = mmap.mmap(fh.fileno(), 0); assert m[:4] == b"data"; m.close()
    db = sqlite3.connect(os.path.join(d, "db")); db.execute("create table t(x)"); db.commit(); db.close()
    shutil.rmtree(d)
    signal.setitimer(signal.ITIMER_REAL, 0)
    assert os.cpu_count() >= 1 and resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 0
    hashlib.sha256(b"x").hexdigest(); json.dumps({"a": 1}); time.sleep(0.01)
    try:
        import numpy as np, pandas as pd
        import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
        a = np.random.rand(200, 200); assert (a @ a).shape == (200, 200)
        df = pd.DataFrame({"x": range(10)}); assert df.x.sum() == 45
        plt.plot([1, 2, 3]); plt.savefig("plot.png")  # the cwd: this run's own directory
        print("SCIENCE-OK")
    except ImportError as e:
        print("SKIP science stack:", e)
    print("PYTHON-OK")

if __name__ == "__main__":
    main()
"#;

#[test]
fn python3_runs_with_threads_and_multiprocessing() {
    if !require_kill_process() {
        return;
    }
    let Some(python) = find_tool(&["/usr/bin/python3", "/usr/local/bin/python3"]) else {
        require(false, "python3 is not installed");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("check.py");
    std::fs::write(&script, PYTHON_SCRIPT).expect("write script");
    let script = script.to_str().expect("utf-8 path");
    let (exit, output) = run_under_filter(&[python, script], dir.path());
    assert!(
        exit == Exit::Code(0) && output.contains("PYTHON-OK"),
        "python3: {exit:?}\n{output}"
    );
    if output.contains("SKIP science stack") {
        hull_testkit::skip_part(
            "science-stack",
            format!("numpy/pandas/matplotlib not installed for {python}"),
        );
    }
}

const NODE_SCRIPT: &str = r#"
const { Worker } = require('worker_threads');
const cp = require('child_process'), fs = require('fs'), http = require('http'), crypto = require('crypto');
(async () => {
  await new Promise((ok, err) => {
    const w = new Worker('require("worker_threads").parentPort.postMessage(6*7)', { eval: true });
    w.on('message', m => m === 42 ? ok() : err(m)); w.on('error', err);
  });
  if (cp.execSync('echo hi').toString() !== 'hi\n') throw 'exec';
  await fs.promises.writeFile('f', 'x'); await fs.promises.readFile('f'); fs.watch('.').close();
  crypto.createHash('sha256').update('x').digest('hex'); crypto.randomBytes(16);
  const srv = http.createServer((q, s) => s.end('pong')).listen(0, '127.0.0.1');
  await new Promise(r => srv.on('listening', r));
  const body = await new Promise(r => http.get({ port: srv.address().port, host: '127.0.0.1' },
    res => { let b = ''; res.on('data', d => b += d); res.on('end', () => r(b)); }));
  srv.close();
  if (body !== 'pong') throw 'http';
  console.log('NODE-OK');
})().catch(e => { console.error(e); process.exit(1); });
"#;

#[test]
fn node_runs_with_workers_and_http() {
    if !require_kill_process() {
        return;
    }
    let Some(node) = find_tool(&["/usr/bin/node", "/usr/local/bin/node"]) else {
        require(false, "node is not installed");
        return;
    };
    assert_runs(&[node, "-e", NODE_SCRIPT], "NODE-OK");
}

#[test]
fn gcc_compiles_and_runs_a_threaded_program() {
    if !require_kill_process() {
        return;
    }
    let Some(bash) = find_tool(&["/bin/bash", "/usr/bin/bash"]) else {
        require(false, "bash is not installed");
        return;
    };
    if !require(
        find_tool(&["/usr/bin/gcc"]).is_some(),
        "gcc is not installed",
    ) {
        return;
    }
    let script = r#"set -e
cat > t.c <<'C'
#include <pthread.h>
#include <stdio.h>
static void *run(void *p) { return p; }
int main(void) { pthread_t t; void *r; pthread_create(&t, 0, run, (void *)42); pthread_join(t, &r);
  printf("C-OK %ld\n", (long)r); return 0; }
C
gcc -O2 -pthread -o t t.c && ./t"#;
    assert_runs(&[bash, "-c", script], "C-OK 42");
}

#[test]
fn git_commits_and_clones() {
    if !require_kill_process() {
        return;
    }
    let Some(bash) = find_tool(&["/bin/bash", "/usr/bin/bash"]) else {
        require(false, "bash is not installed");
        return;
    };
    if !require(
        find_tool(&["/usr/bin/git", "/usr/local/bin/git"]).is_some(),
        "git is not installed",
    ) {
        return;
    }
    let script = r#"set -e
git init -q r && cd r && git config user.email t@t && git config user.name t
echo a > a && git add a && git commit -qm one && git log --oneline | grep -q one
cd .. && git clone -q r r2 && test -f r2/a && git -C r2 gc -q && echo GIT-OK"#;
    assert_runs(&[bash, "-c", script], "GIT-OK");
}

#[test]
fn busybox_runs() {
    if !require_kill_process() {
        return;
    }
    let Some(busybox) = find_tool(&["/bin/busybox", "/usr/bin/busybox"]) else {
        require(false, "busybox is not installed");
        return;
    };
    let script = "set -e; mkdir d; echo x > d/f; cp -r d e; ls e | grep -q f; echo x | sha256sum >/dev/null; \
                  ps >/dev/null; wget --help >/dev/null 2>&1 || true; echo BUSYBOX-OK";
    assert_runs(&[busybox, "sh", "-c", script], "BUSYBOX-OK");
}

const SETID_SCRIPT: &str = r#"
tar cf t.tar suid
mkdir x && tar xpf t.tar -C x; echo "tar exit $?"
test -x x/suid && echo "tar extracted"
cp -a suid copy; echo "cp -a exit $?"
install -m 755 suid installed && echo "install 755 ok"
install -m 4755 suid installed-setuid; echo "install 4755 exit $?"
chmod u+s installed; echo "chmod u+s exit $?"
chmod g+s installed; echo "chmod g+s exit $?"
chmod 750 installed && echo "chmod 750 ok"
python3 - <<'PY'
import os
try:
    os.open("created", os.O_CREAT | os.O_WRONLY, 0o4755); print("os.open CREATED")
except OSError as e:
    print("os.open", e.errno, e.strerror)
fd = os.open("created-plain", os.O_CREAT | os.O_WRONLY, 0o755); os.fchmod(fd, 0o700); os.close(fd)
print("python plain ok")
PY
echo SETID-DONE
"#;

/// What tools do when the filter refuses a set-id mode: GNU tar extracts the member and reports
/// the mode it could not set (exit 2), `cp -a` copies without the bit (exit 1), `install -m
/// 4755` fails, ordinary modes work. Nothing ends with a set-id bit.
#[test]
fn tools_keep_working_when_setid_modes_are_refused() {
    if !require_kill_process() {
        return;
    }
    let Some(bash) = find_tool(&["/bin/bash", "/usr/bin/bash"]) else {
        require(false, "bash is not installed");
        return;
    };
    if !require(
        find_tool(&["/usr/bin/python3"]).is_some()
            && find_tool(&["/usr/bin/tar", "/bin/tar"]).is_some(),
        "python3 or tar is not installed",
    ) {
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("suid");
    std::fs::copy("/bin/true", &source).expect("copy /bin/true");
    // Natively the owner may make it setuid, which is what the archive carries.
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    let (exit, output) = run_under_filter(&[bash, "-c", SETID_SCRIPT], dir.path());
    assert!(
        exit == Exit::Code(0) && output.contains("SETID-DONE"),
        "{exit:?}\n{output}"
    );
    for expected in [
        "tar exit 2",
        "Cannot change mode to rwsr-xr-x: Operation not permitted",
        "tar extracted",
        "cp -a exit 1",
        "install 755 ok",
        "install 4755 exit 1",
        "chmod u+s exit 1",
        "chmod g+s exit 1",
        "chmod 750 ok",
        "os.open 1 Operation not permitted",
        "python plain ok",
    ] {
        assert!(
            output.contains(expected),
            "missing {expected:?} in:\n{output}"
        );
    }
    for name in [
        "x/suid",
        "copy",
        "installed",
        "installed-setuid",
        "created-plain",
    ] {
        let path = dir.path().join(name);
        if let Ok(meta) = std::fs::metadata(&path) {
            assert_eq!(meta.mode() & 0o6000, 0, "{name} has mode {:o}", meta.mode());
        }
    }
    assert_eq!(
        std::fs::metadata(dir.path().join("installed"))
            .expect("installed")
            .mode()
            & 0o7777,
        0o750
    );
    assert!(
        !dir.path().join("created").exists(),
        "os.open created the setuid file"
    );
}
