"""Tests of hull-sandbox against the real hull binary (HULL_BIN, else the installed wheel's)."""

import functools
import json
import os
import subprocess

from hull_sandbox import find_hull


def hull_cgroups(server_pid):
    """The box cgroups (and spare cgroups made ahead) of the hull whose pid is server_pid, below
    this process's cgroups and HULL_CGROUP_PARENT: hull names them after its owner identity,
    `hull-<its pid>.<random>-...`. Only a test's own server's count, since other hulls (other
    tests, other users) share the parents."""
    prefix = "hull-%d." % server_pid
    found = set()
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            bases = []
            if controllers == "":
                bases.append("/sys/fs/cgroup" + path)
            for c in controllers.split(","):
                if c in ("memory", "pids", "cpu"):
                    bases.append("/sys/fs/cgroup/%s%s" % (c, path))
            parent = os.environ.get("HULL_CGROUP_PARENT")
            if parent:
                bases += ["/sys/fs/cgroup/%s/%s" % (c, parent) for c in ("memory", "pids", "cpu")] + ["/sys/fs/cgroup/" + parent]
            for b in bases:
                try:
                    for name in os.listdir(b):
                        if name.startswith(prefix) and os.path.isdir(os.path.join(b, name)):
                            found.add(os.path.join(b, name))
                except OSError:
                    pass
    return found


def children(pid):
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += f.read().split()
    except OSError:
        pass
    return out


@functools.lru_cache(maxsize=None)
def pids_cap_enforced():
    """Whether `hull doctor` says box cgroups (the pids cap) work here."""
    out = subprocess.run([find_hull(), "doctor", "--json"], capture_output=True, text=True).stdout
    try:
        checks = json.loads(out)
    except ValueError:
        return False
    return any(c.get("name") == "cgroup Pids cap" and c.get("status") == "enforced" for c in checks)
