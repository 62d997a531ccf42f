#!/usr/bin/env python3
"""The SDK's warm paths as a user calls them, through `hull_sandbox` (and kern_sandbox when it is
installed and its image is cached, or a baseline build with --baseline), interleaved A B A B: a prewarmed `run_code("print(1)")`,
`kernel()` start, and a kernel cell `"1+1"`. Prints p50/p90 in ms and the load average.

    python3 benches/sdk_warm.py [--rounds N] [--spacing-ms MS] [--peers] [--through-serve]

Set HULL_BIN to the hull to measure (a release build: `cargo build --release -p hull-cli`),
PYTHONPATH to bindings/python/python unless hull-sandbox is installed. A benchmark, not a test.
"""

import argparse
import os
import time


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def ms(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1000.0


class Subject:
    """One SDK's sandbox with prewarm=2 and one kernel."""

    def __init__(self, name, module, **kw):
        self.name = name
        self.sb = module.Sandbox(prewarm=2, **kw)
        if hasattr(self.sb, "__enter__") and name == "kern":
            self.sb.__enter__()
        self.k = self.sb.kernel()
        # kern's kernel starts on entering it (`with sbx.kernel() as k:`); hull's at once.
        if name == "kern":
            self.k.__enter__()
        self.k.run_code("0")
        self.times = {"run_code": [], "kernel_start": [], "kernel_cell": []}

    def round(self, spacing):
        r = []
        self.times["run_code"].append(ms(lambda: r.append(self.sb.run_code("print(1)"))))
        assert r[-1].stdout == "1\n", r[-1]
        time.sleep(spacing)
        self.times["kernel_cell"].append(ms(lambda: r.append(self.k.run_code("1+1"))))
        t = time.perf_counter()
        k = self.sb.kernel()
        if self.name == "kern":
            k.__enter__()
        self.times["kernel_start"].append((time.perf_counter() - t) * 1000.0)
        if self.name == "kern":
            k.__exit__(None, None, None)
        else:
            k.close()
        time.sleep(spacing)

    def close(self):
        if self.name == "kern":
            self.k.__exit__(None, None, None)
        else:
            self.k.close()
        if self.name == "kern":
            self.sb.__exit__(None, None, None)
        else:
            self.sb.destroy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--spacing-ms", type=float, default=100.0, help="pause after each call, as an agent spaces them (the pool refills meanwhile)")
    ap.add_argument("--peers", action="store_true", help="also kern_sandbox, interleaved")
    ap.add_argument("--image", help="the image both run on: hull's name (e.g. bench-python:1, from benches/python-image.sh); kern's is localhost/NAME (default: hull's host root, kern's own image)")
    ap.add_argument("--through-serve", action="store_true", help="also hull with kernel cells sent through `hull serve` (HULL_KERNEL_DIRECT=0), interleaved")
    ap.add_argument("--baseline", nargs=2, metavar=("PYTHON_DIR", "HULL_BIN"), help="also another build, interleaved: its python/ directory (holding hull_sandbox) and its hull binary")
    a = ap.parse_args()
    import hull_sandbox

    own = {"image": a.image} if a.image else {}
    subjects = [Subject("hull", hull_sandbox, **own)]
    if a.through_serve:
        from hull_sandbox import _sandbox

        _sandbox._DIRECT = False
        subjects.append(Subject("serve", hull_sandbox, **own))
        _sandbox._DIRECT = True
    if a.baseline:
        import importlib.util

        spec = importlib.util.spec_from_file_location("hull_sandbox_base", os.path.join(a.baseline[0], "hull_sandbox", "__init__.py"), submodule_search_locations=[os.path.join(a.baseline[0], "hull_sandbox")])
        base = importlib.util.module_from_spec(spec)
        import sys

        sys.modules["hull_sandbox_base"] = base
        spec.loader.exec_module(base)
        own = os.environ.get("HULL_BIN")
        os.environ["HULL_BIN"] = a.baseline[1]
        subjects.append(Subject("base", base))
        if own is None:
            del os.environ["HULL_BIN"]
        else:
            os.environ["HULL_BIN"] = own
    if a.peers:
        import kern_sandbox

        subjects.append(Subject("kern", kern_sandbox, **({"image": "localhost/" + a.image} if a.image else {})))
    for _ in range(3):  # warm-up
        for s in subjects:
            s.round(a.spacing_ms / 1000.0)
    for s in subjects:
        for v in s.times.values():
            v.clear()
    for _ in range(a.rounds):
        for s in subjects:
            s.round(a.spacing_ms / 1000.0)
    print("load average: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    print("%-6s %-13s %9s %9s" % ("sdk", "what", "p50 ms", "p90 ms"))
    for s in subjects:
        for what, v in s.times.items():
            print("%-6s %-13s %9.3f %9.3f" % (s.name, what, pct(v, 50), pct(v, 90)))
    h = subjects[0]
    for k in subjects[1:]:
        for what in h.times:
            print("ratio hull/%s %-13s p50 %.2fx  p90 %.2fx" % (k.name, what, pct(h.times[what], 50) / pct(k.times[what], 50), pct(h.times[what], 90) / pct(k.times[what], 90)))
    for s in subjects:
        s.close()


if __name__ == "__main__":
    main()
