#!/usr/bin/env python3
"""Where a warm SDK call's time goes: runs prewarmed `run_code("print(1)")` and kernel cells
`"1+1"` through `hull_sandbox` with HULL_TRACE_CALLS=1 (set here, before the server starts),
collects the `hull trace:` lines the SDK and `hull serve` print on stderr, and prints the median
time at which each named step ended, per kind of call.

    python3 benches/sdk_trace.py [--calls N] [--spacing-ms MS]

HULL_BIN selects the hull (a release build); PYTHONPATH=bindings/python/python unless installed.
"""

import argparse
import collections
import os
import re
import sys
import tempfile
import time

os.environ["HULL_TRACE_CALLS"] = "1"

LINE = re.compile(r"hull trace: (\S+) ([0-9.]+) ms: (.*)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--spacing-ms", type=float, default=100.0)
    a = ap.parse_args()
    # The server inherits stderr: point fd 2 at a file for the run, then read it back.
    log = tempfile.TemporaryFile(mode="w+")
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        import hull_sandbox

        with hull_sandbox.Sandbox(prewarm=2) as sb:
            k = sb.kernel()
            k.run_code("0")
            time.sleep(0.5)
            for _ in range(a.calls):
                sb.run_code("print(1)")
                time.sleep(a.spacing_ms / 1000.0)
                k.run_code("1+1")
                time.sleep(a.spacing_ms / 1000.0)
            k.close()
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
    log.seek(0)
    steps = collections.defaultdict(lambda: collections.defaultdict(list))
    order = collections.defaultdict(list)
    for line in log:
        m = LINE.search(line)
        if not m:
            continue
        what = m.group(1)
        for part in m.group(3).split(", "):
            name, _, t = part.rpartition(" ")
            if name not in order[what]:
                order[what].append(name)
            steps[what][name].append(float(t))
    print("load average: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    for what in sorted(steps):
        n = max(len(v) for v in steps[what].values())
        cells = ["%s %.3f" % (name, sorted(steps[what][name])[len(steps[what][name]) // 2]) for name in order[what]]
        print("%-22s n=%-3d %s" % (what, n, ", ".join(cells)))


if __name__ == "__main__":
    main()
