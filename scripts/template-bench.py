#!/usr/bin/env python3
"""Template restore speed (docs/performance.md, "Templates"), interleaved A B C A B C:
`hull create` + the first `hull exec -- true` from the `host` image, from a template holding
~10 MB and from one holding ~200 MB (files written by its setup under /workspace and /opt);
each sandbox removed after its round (not timed). Also the time of each `template save`.

usage: template-bench.py [HULL] [ROUNDS] [BIG_MB]   (default target/release/hull, 30, 200)
"""
import os
import subprocess
import sys
import tempfile
import time

HULL = sys.argv[1] if len(sys.argv) > 1 else "target/release/hull"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
BIG_MB = int(sys.argv[3]) if len(sys.argv) > 3 else 200


def stats(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2], xs[min(len(xs) - 1, int(len(xs) * 0.9))]


def hull(env, *args):
    subprocess.run([HULL, *args], env=env, check=True, stdin=subprocess.DEVNULL)


def template(env, name, mb):
    # Many files (1 MiB each) in /workspace and a tree in /opt: what a setup leaves.
    setup = (
        f"mkdir -p /opt/t && for i in $(seq {mb}); do "
        f"head -c 1048576 /dev/zero > /workspace/f$i; echo $i > /opt/t/n$i; done"
    )
    hull(env, "create", f"src-{name}", "--setup", setup)
    hull(env, "stop", f"src-{name}")
    t0 = time.perf_counter()
    hull(env, "template", "save", f"src-{name}", name)
    return time.perf_counter() - t0


def create_exec(env, name, extra):
    t0 = time.perf_counter()
    hull(env, "create", name, *extra)
    hull(env, "exec", name, "--", "true")
    dt = time.perf_counter() - t0
    hull(env, "rm", name)
    return dt


def main():
    with tempfile.TemporaryDirectory(prefix="hull-template-bench-", dir="/var/tmp") as root:
        env = dict(os.environ, HULL_SANDBOXES=root)
        saves = {"10 MB": template(env, "small", 10), f"{BIG_MB} MB": template(env, "big", BIG_MB)}
        cases = {
            "image (host)": [],
            "template, 10 MB": ["--template", "small"],
            f"template, {BIG_MB} MB": ["--template", "big"],
        }
        times = {k: [] for k in cases}
        for k, extra in cases.items():  # warm caches
            create_exec(env, "warm", extra)
        for r in range(ROUNDS):
            for k, extra in cases.items():
                times[k].append(create_exec(env, f"b{r}", extra))
        print(f"load average: {os.getloadavg()}")
        for k, s in saves.items():
            print(f"template save, {k}: {s * 1000:.1f} ms")
        for k, xs in times.items():
            p50, p90 = stats(xs)
            print(f"create + first exec, {k}: {p50 * 1000:.1f} / {p90 * 1000:.1f} ms (p50 / p90, {len(xs)} runs)")
        for n in ["src-small", "src-big"]:
            hull(env, "rm", n)
        hull(env, "template", "rm", "small")
        hull(env, "template", "rm", "big")


if __name__ == "__main__":
    main()
