"""Concurrency, kernels, streaming callbacks and prewarmed boxes."""

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import children, hull_cgroups, pids_cap_enforced
from hull_sandbox import KernelDied, Sandbox


def test_100_concurrent_calls_on_one_sandbox_leave_nothing_behind():
    sb = Sandbox(timeout_s=60)
    server = sb.server_pid
    # Another hull alive throughout, with spare cgroups in the same parents (as other tests'
    # and other users' hulls on a shared machine have): it must not count as left behind.
    other = Sandbox()
    try:
        def call(i):
            return sb.run_code("import os\nprint(%d * 2)\n%d" % (i, i))

        with ThreadPoolExecutor(max_workers=100) as ex:
            results = list(ex.map(call, range(100)))
        for i, r in enumerate(results):
            assert r.exit_code == 0 and r.fault is None, r
            assert r.stdout == "%d\n" % (i * 2)
            assert [x.text for x in r.results] == [str(i)]
        # Every box is reaped while the sandbox still lives (teardown is asynchronous but quick).
        deadline = time.monotonic() + 10
        while children(sb.server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children(sb.server_pid) == [], "boxes left running"
        # While it lives the server keeps spare cgroups named for it: the check below looks
        # where they are.
        if pids_cap_enforced():
            assert hull_cgroups(server), "no cgroup named for hull %d found while it runs" % server
    finally:
        sb.destroy()
    # Only this test's server's cgroups: other hulls on the machine have theirs in the same
    # parents. The server has exited (destroy waits for it), so none of its may remain.
    try:
        assert sb._server.proc.poll() is not None
        assert hull_cgroups(server) == set(), "cgroups left behind"
        if pids_cap_enforced():
            assert hull_cgroups(other.server_pid), "the other hull's cgroups are not where the check looks"
    finally:
        other.destroy()


def test_kernel_keeps_state_between_cells():
    with Sandbox(timeout_s=3) as sb:
        with sb.kernel() as k:
            r = k.run_code("import os\ncounter = 40\ndef bump():\n    global counter\n    counter += 1\n    return counter")
            assert r.exit_code == 0 and r.stdout == "", r
            assert k.run_code("bump()").results[0].text == "41"
            r = k.run_code("print('out'); bump()")
            assert r.stdout == "out\n" and r.results[0].text == "42"
            r = k.run_code("undefined_name")
            assert r.exit_code != 0 and r.fault is None and "NameError" in r.stderr
            assert k.run_code("counter").results[0].text == "42"
            # The kernel shares the workspace with ordinary calls.
            k.run_code("open('from_kernel.txt', 'w').write('k')")
            assert sb.read_file("from_kernel.txt") == b"k"
            r = k.run_code("while True: pass")
            assert r.fault is not None and r.fault.type == "timeout"
            with pytest.raises(KernelDied):
                k.run_code("counter")
        # A new kernel starts fresh.
        with sb.kernel() as k2:
            assert "NameError" in k2.run_code("counter").stderr


def test_streaming_callbacks_get_output_as_it_arrives():
    # The program prints `start`, then waits (up to 10 s) for the callback that gets it to
    # answer through the workspace: it prints `end` only if its first line reached the callback
    # while it still ran.
    got = []
    boxes = []

    def on_stdout(data):
        got.append(data)
        if "start" in data:
            open(os.path.join(boxes[0].workspace, "ack"), "w").close()

    with Sandbox(on_stdout=on_stdout, on_stderr=lambda d: got.append("ERR:" + d)) as sb:
        boxes.append(sb)
        r = sb.run_code(
            "import os, sys, time\nprint('start', flush=True)\nfor _ in range(1000):\n    if os.path.exists('/workspace/ack'): break\n    time.sleep(0.01)\n"
            "print('end' if os.path.exists('/workspace/ack') else 'the first chunk came only after the program ended')\nsys.stderr.write('e\\n')"
        )
        assert r.stdout == "start\nend\n", r.stdout
        deadline = time.monotonic() + 5
        while "".join(got).count("\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "".join(g for g in got if not g.startswith("ERR:")) == "start\nend\n"
        assert "ERR:e\n" in got


def test_a_slow_callback_drops_chunks_instead_of_stalling_the_box():
    def slow(data):
        time.sleep(0.2)

    with Sandbox(on_stdout=slow, timeout_s=20) as sb:
        r = sb.run_code("import sys, time\nfor i in range(3000):\n    print(i)\n    sys.stdout.flush()\n    time.sleep(0.0002)")
        # A stalled box (3000 chunks at 0.2 s each would take 10 minutes) would have met its
        # 20 s deadline: no fault means the callback did not hold it up.
        assert r.exit_code == 0 and r.fault is None, r.fault
        assert r.stdout.count("\n") == 3000, "captured output is complete regardless of the callback"
        assert r.dropped_chunks > 0


def test_prewarmed_boxes_serve_calls_with_the_call_own_deadline():
    with Sandbox(prewarm=2, timeout_s=1) as sb:
        time.sleep(1.5)  # longer than timeout_s: a warm box's deadline starts with its call
        for _ in range(4):
            r = sb.run_code("print('warm')\n1")
            assert r.stdout == "warm\n" and r.fault is None and r.results[0].text == "1", r
        r = sb.run_code("while True: pass")
        assert r.fault is not None and r.fault.type == "timeout"
        # Each box runs one call only: state does not leak between calls.
        sb.run_code("import builtins\nbuiltins.leak = 1")
        assert "NameError" in sb.run_code("leak").stderr


def test_streamed_text_keeps_split_characters_whole():
    got = []
    with Sandbox(on_stdout=got.append) as sb:
        # Write a multi-byte character one byte at a time: chunks split it.
        r = sb.run_code("import os, time\nfor b in 'é€'.encode():\n    os.write(1, bytes([b]))\n    time.sleep(0.05)")
        assert r.stdout == "é€"
        deadline = time.monotonic() + 5
        while "".join(got) != "é€" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "".join(got) == "é€", got


def test_a_given_workspace_is_used_and_kept(tmp_path):
    (tmp_path / "input.txt").write_text("from the host")
    with Sandbox(workspace=str(tmp_path)) as sb:
        r = sb.run_code("print(open('input.txt').read())\nopen('output.txt', 'w').write('from the box')")
        assert r.stdout == "from the host\n" and [f.path for f in r.files] == ["output.txt"]
    assert (tmp_path / "output.txt").read_text() == "from the box"


def test_kernel_and_run_output_stream_too():
    got = []
    with Sandbox(on_stdout=got.append, on_stderr=lambda d: got.append("ERR:" + d)) as sb:
        with sb.kernel() as k:
            r = k.run_code("import sys\nprint('from the kernel')\nprint('oops', file=sys.stderr)")
            assert r.stdout == "from the kernel\n" and r.stderr == "oops\n"
        r = sb.run(["sh", "-c", "echo from run"])
        assert r.stdout == "from run\n"
        deadline = time.monotonic() + 5
        want = {"from the kernel\n", "ERR:oops\n", "from run\n"}
        while not want <= set(_lines(got)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert want <= set(_lines(got)), got


def _lines(chunks):
    out, err = "".join(c for c in chunks if not c.startswith("ERR:")), "".join(c[4:] for c in chunks if c.startswith("ERR:"))
    return [l + "\n" for l in out.splitlines()] + ["ERR:" + l + "\n" for l in err.splitlines()]


def _alive_with(marker):
    """Whether a process whose command line holds `marker` runs on this host."""
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read().replace(b"\0", b" "):
                    return True
        except OSError:
            pass
    return False


def _running(pid):
    """Whether process `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_client_ends_its_boxes_at_once():
    # A client process (ours) with a call in flight whose deadline is a minute away.
    marker = "sleep %d.5" % (50_000_000 + os.getpid())
    script = (
        "import sys, threading\n"
        "from hull_sandbox import Sandbox\n"
        "sb = Sandbox(timeout_s=60)\n"
        "print(sb.server_pid, flush=True)\n"
        "sb.run_code(%r)\n" % ("import subprocess\nsubprocess.run(%r.split())" % marker)
    )
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server = int(client.stdout.readline())
        deadline = time.monotonic() + 20
        while not _alive_with(marker):
            assert time.monotonic() < deadline, "the call never started"
            time.sleep(0.05)
    finally:
        client.kill()  # SIGKILL: the SDK cleans nothing up
        client.wait()
    # Its server sees stdin close and ends the box now, not at the call's deadline.
    deadline = time.monotonic() + 10
    while (_alive_with(marker) or _running(server)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive_with(marker), "the box outlived its killed client by 10 s"
    assert not _running(server), "hull serve outlived its killed client by 10 s"
    assert hull_cgroups(server) == set(), "cgroups left behind"
