"""Kernel cells over the channel `hull serve` hands the SDK (`kernel.attach`): they reach the
interpreter without the server, give what the server's path gives, and hold the interpreter to
the same rules (deadline, output cap, untrusted frames, a host-side file scan that follows no
link out of the workspace)."""

import os
import signal
import time

import pytest

from hull_sandbox import KernelDied, Sandbox
from hull_sandbox import _sandbox

#: Python that finds the runner's channel the way hostile code would: by its descriptor.
CHANNEL = """import os, socket
def chan():
    for f in os.listdir('/proc/self/fd'):
        try:
            if int(f) > 2 and os.readlink('/proc/self/fd/' + f).startswith('socket:'):
                return socket.socket(fileno=os.dup(int(f)))
        except OSError:
            pass
"""


def through_server():
    """A Sandbox whose kernels' cells go through `hull serve` (HULL_KERNEL_DIRECT=0)."""
    _sandbox._DIRECT = False
    try:
        return Sandbox(timeout_s=5, max_output_bytes=64)
    finally:
        _sandbox._DIRECT = True


def test_cells_reach_the_interpreter_with_the_server_stopped():
    with Sandbox(timeout_s=5) as sb:
        with sb.kernel() as k:
            assert k._chan is not None, "the kernel was not attached"
            k.run_code("x = 41")
            os.kill(sb.server_pid, signal.SIGSTOP)
            try:
                t = time.monotonic()
                r = k.run_code("x + 1")
                took = time.monotonic() - t
            finally:
                os.kill(sb.server_pid, signal.SIGCONT)
            assert r.results[0].text == "42" and took < 4, (r, took)


CELLS = [
    "import os\nos.makedirs('d/e', exist_ok=True)\nopen('d/e/f.txt', 'w').write('abc')\nopen('gone.txt', 'w').write('x')\nprint('made')",
    "import os, sys\nos.remove('gone.txt')\nopen('d/e/f.txt', 'a').write('more')\nos.symlink('/etc', 'etc_link')\nopen(b'bad\\xffname', 'w').write('y')\nsys.stdout.buffer.write(b'\\xff\\xfebin\\n')\n'value'",
    "print('x' * 200)\nimport sys\nprint('err', file=sys.stderr)\n1/0",
    "class H:\n    def _repr_html_(self): return '<b>h</b>'\n    def __repr__(self): return 'H'\ndisplay(H())\nraise SystemExit(7)",
]


def comparable(r):
    return {
        "stdout": r.stdout,
        "stdout_bytes": r.stdout_bytes,
        "stderr": r.stderr.replace("<cell 3>", "<cell>"),
        "exit_code": r.exit_code,
        "success": r.success,
        "fault": r.fault,
        "truncated": r.truncated,
        "results": [b.data for b in r.results],
        "files": [(f.path, f.change, f.size, f.raw) for f in r.files],
        "warnings": r.warnings,
        "stats": r.stats,
    }


def test_a_direct_cell_answers_as_the_server_would():
    direct = Sandbox(timeout_s=5, max_output_bytes=64)
    served = through_server()
    try:
        kd, ks = direct.kernel(), served.kernel()
        assert kd._chan is not None and ks._chan is None
        for code in CELLS:
            a, b = kd.run_code(code), ks.run_code(code)
            assert comparable(a) == comparable(b), (code, a, b)
        # The second cell's changes, as both report them (the link is listed, not followed).
        r = kd.run_code("import os\nos.remove('etc_link')")
        assert [(f.path, f.change) for f in r.files] == [("etc_link", "deleted")], r
    finally:
        direct.destroy()
        served.destroy()


def test_streamed_output_reaches_callbacks():
    got = []
    with Sandbox() as sb:
        with sb.kernel() as k:
            r = k.run_code("print('é' * 3)\nimport sys\nprint('e', file=sys.stderr)", on_stdout=got.append, on_stderr=got.append)
            deadline = time.monotonic() + 5
            while len("".join(got)) < 9 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert sorted("".join(got).split()) == ["e", "ééé"], got
            assert r.stdout == "ééé\n"


def test_a_broken_channel_ends_the_kernel_with_a_warning():
    with Sandbox(timeout_s=5) as sb:
        with sb.kernel() as k:
            r = k.run_code(CHANNEL + "chan().sendall(b'garbage\\n')\nimport time\ntime.sleep(2)")
            assert any("malformed frame" in w for w in r.warnings), r
            assert not r.success
            with pytest.raises(KernelDied):
                k.run_code("1")
        with sb.kernel() as k:
            # A frame of more values than a frame may hold is refused before it is parsed.
            r = k.run_code(CHANNEL + "chan().sendall(b'[' + b'0,' * 300000 + b'0]\\n')\nimport time\ntime.sleep(2)")
            assert any("JSON values" in w for w in r.warnings), r
        with sb.kernel() as k:
            r = k.run_code(CHANNEL + "chan().sendall(b'{\"stream\": \"stdout\", \"data\": \"!!\"}\\n')\nimport time\ntime.sleep(2)")
            assert any("not base64" in w for w in r.warnings), r


def test_deadlines_hold_for_a_runner_that_stops_reading():
    with Sandbox(timeout_s=2) as sb:
        with sb.kernel() as k:
            k.run_code("import os, signal, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGSTOP)), daemon=True).start()")
            time.sleep(0.8)
            # Bigger than the socket's buffer: sending it blocks on a runner that reads no more.
            t = time.monotonic()
            r = k.run_code("x = '%s'" % ("a" * (8 << 20)))
            assert r.fault is not None and r.fault.type == "timeout", r
            assert time.monotonic() - t < 10
            with pytest.raises(KernelDied):
                k.run_code("1")


def test_an_interpreter_that_dies_reports_how():
    with Sandbox(timeout_s=5) as sb:
        with sb.kernel() as k:
            r = k.run_code("import os\nos._exit(3)")
            assert r.exit_code == 3 and not r.success and r.fault is None, r
            with pytest.raises(KernelDied):
                k.run_code("1")


def test_destroying_the_sandbox_ends_a_running_cell():
    import threading

    sb = Sandbox(timeout_s=600)
    k = sb.kernel()
    out = []

    def cell():
        try:
            out.append(k.run_code("import time\ntime.sleep(3600)"))
        except Exception as e:  # the sandbox is gone: the server may refuse kernel.end
            out.append(e)

    t = threading.Thread(target=cell)
    t.start()
    time.sleep(0.5)
    sb.destroy()
    t.join(20)
    assert not t.is_alive() and out, "a destroyed sandbox left its kernel's cell waiting"


def test_a_deeply_nested_frame_ends_the_kernel_with_a_warning():
    with Sandbox(timeout_s=5) as sb:
        with sb.kernel() as k:
            frame = "b'{\"done\": 1, \"results\": ' + b'[' * 5000 + b']' * 5000 + b'}\\n'"
            r = k.run_code(CHANNEL + "chan().sendall(%s)\nimport time\ntime.sleep(2)" % frame)
            assert any("nested more than 128" in w for w in r.warnings), r
            with pytest.raises(KernelDied):
                k.run_code("1")


def test_an_interrupted_cell_ends_the_kernel_instead_of_shifting_results():
    with Sandbox(timeout_s=5) as sb:
        with sb.kernel() as k:
            k.run_code("x = 1")
            chan = k._chan
            real = chan._frame

            def interrupted(deadline):
                chan._frame = real
                raise KeyboardInterrupt()

            chan._frame = interrupted
            with pytest.raises(KeyboardInterrupt):
                k.run_code("import time\ntime.sleep(0.2)\nprint('late')\n'first'")
            # The next cell is refused, never answered with the interrupted cell's frames.
            with pytest.raises(KernelDied):
                k.run_code("'second'")


def test_stale_hand_offs_are_skipped_and_closed():
    import socket as s

    ours, theirs = s.socketpair(s.AF_UNIX, s.SOCK_SEQPACKET)
    try:
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        s.send_fds(theirs, [b"k1"], [r1])
        s.send_fds(theirs, [b"k2"], [r2])
        fake = type("Fake", (), {"fds": ours})()
        got = _sandbox._Server.take_fd(fake, "k2")
        try:
            assert os.fstat(got).st_ino == os.fstat(r2).st_ino
            # Close-on-exec, so no child of this process inherits a runner's channel.
            import fcntl

            assert fcntl.fcntl(got, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        finally:
            os.close(got)
        for fd in (r1, w1, r2, w2):
            os.close(fd)
    finally:
        ours.close()
        theirs.close()


def test_the_scan_skips_a_directory_that_is_not_the_one_listed(tmp_path):
    from hull_sandbox import _scan

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        w = _scan._Walk()
        assert _scan._visit(fd, b"d", (0, 0), w) is None and not w.complete
        entries, complete = _scan.scan(fd)
        assert list(entries) == [b"d/f"] and complete
    finally:
        os.close(fd)


def test_cells_from_many_threads_each_get_their_own_answer():
    from concurrent.futures import ThreadPoolExecutor

    with Sandbox(timeout_s=10) as sb:
        with sb.kernel() as k:
            k.run_code("import time\nseen = []")

            def cell(i):
                r = k.run_code("time.sleep(0.01)\nseen.append(%d)\nprint('out', %d)\n%d * 10" % (i, i, i))
                return i, r

            with ThreadPoolExecutor(max_workers=4) as pool:
                got = list(pool.map(cell, range(12)))
            for i, r in got:
                assert r.stdout == "out %d\n" % i and r.results[0].text == str(i * 10), (i, r)
            assert sorted(int(x) for x in k.run_code("seen").results[0].text.strip("[]").split(", ")) == list(range(12))
