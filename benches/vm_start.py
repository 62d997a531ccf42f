#!/usr/bin/env python3
"""The microVM tier's start and memory (docs/vm.md): `hull run --isolation vm -- true` against
the namespace box's `hull run -- true` on the same busybox root, interleaved round by round,
then the memory of one idle VM (PSS of QEMU and its virtiofsd processes, from smaps_rollup).

    HULL_VM_AGENT=target/x86_64-unknown-linux-gnu/release/hull \\
        python3 benches/vm_start.py --hull target/release/hull --rounds 10
        PYTHONPATH=bindings/python/python python3 benches/vm_start.py --sdk --rounds 5

Needs what `hull run --isolation vm` needs (hull doctor's microvm line) and /bin/busybox, and
an unprivileged user (a VM is refused as host root; docs/vm.md)."""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def busybox_root(d):
    root = os.path.join(d, "root")
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
    for a in ("sh", "true", "sleep"):
        os.symlink("busybox", os.path.join(root, "bin", a))
    return root


def timed(argv):
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1000


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def pss_kib(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    kids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            kids.append(int(p))
            kids += descendants(int(p))
    return kids


def sdk_calls(a):
    """A VM session's call through the Python SDK, with and without a guest booted ahead
    (`prewarm=1`), interleaved; calls spaced (`--spacing`) as an agent spaces them, so the
    replacement guest has booted before the next call."""
    from hull_sandbox import Sandbox
    name = "hull-bench-vm/busybox:1"
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, os.path.join(here, "..", "scripts", "busybox-image.py"), name],
                   check=True, env=dict(os.environ, HULL_BIN=a.hull))
    cold, warm = [], []
    with Sandbox(image=name, isolation="vm") as c, Sandbox(image=name, isolation="vm", prewarm=1) as w:
        time.sleep(a.spacing)
        for _ in range(a.rounds):
            for sb, xs in ((c, cold), (w, warm)):
                t = time.perf_counter()
                r = sb.run(["echo"])
                xs.append((time.perf_counter() - t) * 1000)
                assert r.exit_code == 0, r
            time.sleep(a.spacing)
    print("load average after: %s" % open("/proc/loadavg").read().split()[:3])
    for label, xs in (("VM call, booted for it", cold), ("VM call, booted ahead", warm)):
        print("%-24s p50 %8.1f ms  p90 %8.1f ms  (%d calls)" % (label, statistics.median(xs), pct(xs, 90), len(xs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hull", default="target/release/hull")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--sdk", action="store_true", help="time a VM session's calls through the Python SDK, prewarm=1 against none")
    ap.add_argument("--spacing", type=float, default=10.0, help="with --sdk: seconds between rounds")
    a = ap.parse_args()
    if a.sdk:
        os.environ["HULL_BIN"] = os.path.abspath(a.hull)
        sdk_calls(a)
        return
    with tempfile.TemporaryDirectory() as d:
        root = busybox_root(d)
        base = [a.hull, "run", "--rootfs", root]
        ns, vm = [], []
        timed(base + ["--isolation", "vm", "--", "true"])  # the initramfs is built once
        for _ in range(a.rounds):
            ns.append(timed(base + ["--", "true"]))
            vm.append(timed(base + ["--isolation", "vm", "--", "true"]))
        print("load average before/after: %s" % open("/proc/loadavg").read().split()[:3])
        for name, xs in (("namespace box", ns), ("microVM", vm)):
            print("%-14s p50 %8.1f ms  p90 %8.1f ms  (%d runs)" % (name, statistics.median(xs), pct(xs, 90), len(xs)))
        # One idle VM: its program sleeps; measured once the agent has started it.
        p = subprocess.Popen(base + ["--isolation", "vm", "--", "sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(12)
        procs = descendants(p.pid)
        total = 0
        for pid in procs:
            try:
                comm = open("/proc/%d/comm" % pid).read().strip()
            except OSError:
                continue
            kib = pss_kib(pid)
            total += kib
            print("  %-20s pid %-7d PSS %7.1f MiB" % (comm, pid, kib / 1024))
        print("idle VM (QEMU + virtiofsd): PSS %.1f MiB" % (total / 1024))
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
