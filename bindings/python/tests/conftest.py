"""Tests of hull-sandbox against the real hull binary (HULL_BIN, else the installed wheel's)."""

import os

import pytest


def hull_cgroups():
    """The box cgroups (hull-* directories) below this process's cgroups, by controller path."""
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
                        if name.startswith("hull-") and os.path.isdir(os.path.join(b, name)):
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


@pytest.fixture
def cgroups_before():
    return hull_cgroups()
