#!/usr/bin/env python3
"""Memory of an idle kernel: the PSS (/proc/PID/smaps_rollup) of every process a kernel adds
under `hull serve` (the box's processes; the server's own growth is reported apart), after one
cell `"1+1"`. Compare kern's with `--peers` when kern_sandbox is installed.

    python3 benches/kernel_pss.py

HULL_BIN selects the hull; PYTHONPATH=bindings/python/python unless hull-sandbox is installed.
"""

import os
import time


def pss_kib(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def comm(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")[0].decode(errors="replace")[:40]
    except OSError:
        return "?"


def main():
    import hull_sandbox

    with hull_sandbox.Sandbox() as sb:
        server = sb.server_pid
        time.sleep(0.5)
        before = set(descendants(server))
        server_before = pss_kib(server)
        k = sb.kernel()
        k.run_code("1+1")
        time.sleep(1.0)
        added = [p for p in descendants(server) if p not in before]
        total = 0
        for p in added:
            v = pss_kib(p)
            total += v or 0
            print("  pid %-7d %-40s PSS %s KiB" % (p, comm(p), v))
        print("idle kernel: %d processes, PSS %.2f MiB (server grew %+.2f MiB)" % (len(added), total / 1024.0, ((pss_kib(server) or 0) - (server_before or 0)) / 1024.0))
        k.close()


if __name__ == "__main__":
    main()
