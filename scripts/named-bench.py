#!/usr/bin/env python3
"""Named sandboxes' speed (docs/performance.md, "Named sandboxes"), interleaved A B A B:

- exec round trip of `true` in a running sandbox against bare fork+exec: through the keeper's
  socket (what an SDK would do: one request, frames back) against `posix_spawn` + `waitpid` of
  /bin/true in this process; and whole `hull exec NAME -- true` processes against whole
  `/bin/true` processes (both started by Python's subprocess);
- create-to-first-exec (`hull create` then `hull exec -- true`) against one `hull run -- true`.

usage: named-bench.py [HULL] [RUNS]   (default target/release/hull, 300)
"""
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

HULL = sys.argv[1] if len(sys.argv) > 1 else "target/release/hull"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 300
CREATES = max(RUNS // 10, 10)


def stats(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2], xs[min(len(xs) - 1, int(len(xs) * 0.9))]


def bare_spawn():
    t0 = time.perf_counter()
    pid = os.posix_spawn("/bin/true", ["true"], {})
    os.waitpid(pid, 0)
    return time.perf_counter() - t0


def via_socket(path):
    t0 = time.perf_counter()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    req = {"op": "exec", "argv": ["true"], "env": [], "cwd": None, "stdin": False}
    s.sendall(json.dumps(req).encode() + b"\n")
    buf = b""
    code = None
    while code is None:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("the keeper closed the connection")
        buf += chunk
        while len(buf) >= 5:
            kind, n = struct.unpack("<BI", buf[:5])
            if len(buf) < 5 + n:
                break
            data, buf = buf[5 : 5 + n], buf[5 + n :]
            if kind == 4:
                code = struct.unpack("<i", data)[0]
            elif kind == 5:
                raise SystemExit(data.decode())
    s.close()
    assert code == 0, code
    return time.perf_counter() - t0


def process(argv, env):
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    with tempfile.TemporaryDirectory(prefix="hull-named-bench-") as root:
        env = dict(os.environ, HULL_SANDBOXES=root)
        subprocess.run([HULL, "create", "bench"], env=env, check=True)
        sock = os.path.join(root, "bench", "control.sock")
        for _ in range(20):  # warm caches
            via_socket(sock)
            bare_spawn()
        cases = {
            "bare posix_spawn of /bin/true": lambda: bare_spawn(),
            "keeper socket round trip (exec true)": lambda: via_socket(sock),
            "process /bin/true": lambda: process(["/bin/true"], env),
            "process `hull exec bench -- true`": lambda: process(
                [HULL, "exec", "bench", "--", "true"], env
            ),
        }
        times = {k: [] for k in cases}
        for _ in range(RUNS):
            for k, f in cases.items():
                times[k].append(f())
        create = {"`hull run -- true`": [], "`hull create` + first `hull exec -- true`": []}
        for i in range(CREATES):
            create["`hull run -- true`"].append(process([HULL, "run", "--", "true"], env))
            t0 = time.perf_counter()
            subprocess.run([HULL, "create", f"c{i}"], env=env, check=True)
            subprocess.run([HULL, "exec", f"c{i}", "--", "true"], env=env, check=True)
            create["`hull create` + first `hull exec -- true`"].append(time.perf_counter() - t0)
            subprocess.run([HULL, "rm", f"c{i}"], env=env, check=True)
        subprocess.run([HULL, "rm", "bench"], env=env, check=True)
    print(f"load average {os.getloadavg()}, {RUNS} runs interleaved, {CREATES} creates")
    for group in (times, create):
        for k, xs in group.items():
            p50, p90 = stats(xs)
            print(f"  {k:<48} p50 {p50 * 1000:7.3f} ms  p90 {p90 * 1000:7.3f} ms")
    b = stats(times["bare posix_spawn of /bin/true"])[0]
    k = stats(times["keeper socket round trip (exec true)"])[0]
    pb = stats(times["process /bin/true"])[0]
    pk = stats(times["process `hull exec bench -- true`"])[0]
    print(f"  exec over the socket - bare spawn: {(k - b) * 1000:+.3f} ms (p50s)")
    print(f"  `hull exec` process - /bin/true process: {(pk - pb) * 1000:+.3f} ms (p50s)")


if __name__ == "__main__":
    main()
