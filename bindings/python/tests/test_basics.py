"""run_code, results, faults, arguments: the everyday behaviour of the SDK."""

import re
import struct
import zlib

import threading

import pytest

from hull_sandbox import ExecutionResult, MountRefused, Sandbox, run_code


def test_run_code_one_shot():
    r = run_code("print(6 * 7)")
    assert isinstance(r, ExecutionResult)
    assert r.stdout == "42\n" and r.exit_code == 0 and r.success and r.fault is None


def test_languages():
    assert run_code("echo $((20 + 22))", language="bash").stdout == "42\n"
    assert run_code("echo sh", language="sh").stdout == "sh\n"
    assert run_code("console.log(6 * 7)", language="node").stdout == "42\n"


def test_cells_longer_than_a_command_line_argument_run():
    # The kernel refuses one argument over 128 KiB (E2BIG: exec_failed before); such a cell
    # runs from a read-only file instead, in every language.
    with Sandbox() as sb:
        for lang, filler, last in [("bash", "# filler\n", "echo done $((6 * 7))"), ("sh", ": filler\n", "echo done 42"), ("node", "// filler\n", "console.log('done', 6 * 7)"), ("python", "# filler\n", "print('done', 6 * 7)")]:
            code = filler * (200_000 // len(filler)) + last
            r = sb.run_code(code, language=lang)
            assert (r.exit_code, r.stdout, r.fault) == (0, "done 42\n", None), (lang, r)


def test_python_exception_is_not_a_fault():
    r = run_code("def f():\n    raise ValueError('bad value')\nf()")
    assert r.exit_code != 0 and not r.success
    assert r.fault is None
    assert "Traceback" in r.stderr and "ValueError: bad value" in r.stderr and "line 3" in r.stderr


def test_sys_exit_code_is_kept():
    assert run_code("import sys; sys.exit(3)").exit_code == 3


def test_timeout_is_a_fault():
    r = run_code("while True: pass", timeout_s=1)
    assert r.fault is not None and r.fault.type == "timeout", r
    # The call's own deadline (not the 30 s default) ended the endless program.
    assert re.search(r"\b1(\.000)?s\b", r.fault.reason), r.fault.reason


def test_memory_cap_is_an_oom_fault():
    r = run_code("x = bytearray(400 << 20)", memory_mb=64)
    assert r.fault is not None and r.fault.type == "oom", r


def _png(w=1, h=1):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(h))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def test_rich_results_like_a_notebook():
    code = """
import base64
class Rich:
    def _repr_html_(self): return '<i>rich</i>'
    def _repr_markdown_(self): return '**rich**'
    def _repr_svg_(self): return '<svg/>'
    def _repr_json_(self): return {'a': [1, 2]}
    def _repr_png_(self): return base64.b64decode(%r)
    def _repr_jpeg_(self): return b'\\xff\\xd8\\xff'
    def __repr__(self): return 'Rich()'
print('before')
display(Rich())
display('second')
print('after')
{'last': 1}
""" % __import__("base64").b64encode(_png()).decode()
    r = run_code(code)
    assert r.stdout == "before\nafter\n", r.stdout
    assert r.exit_code == 0 and r.fault is None
    assert len(r.results) == 3
    first = r.results[0]
    assert first.html == "<i>rich</i>" and first.markdown == "**rich**" and first.svg == "<svg/>"
    assert first.json == {"a": [1, 2]} and first.text == "Rich()"
    assert first.png == _png() and first.jpeg == b"\xff\xd8\xff"
    assert r.results[1].text == "'second'"
    assert r.results[2].text == "{'last': 1}"


def test_capture_never_touches_output_or_exit_code():
    r = run_code("import sys\nprint('x')\nsys.stderr.write('y')\n7")
    assert (r.stdout, r.stderr, r.exit_code) == ("x\n", "y", 0)
    assert r.results[0].text == "7"
    # None is not a result; an exception still reports the results displayed before it.
    r = run_code("display(1)\nNone")
    assert [x.text for x in r.results] == ["1"]
    r = run_code("display('shown')\nraise RuntimeError('x')")
    assert [x.text for x in r.results] == ["'shown'"] and r.exit_code == 1 and r.fault is None


def test_a_trailing_semicolon_hides_the_last_value():
    assert run_code("1 + 1;").results == []
    assert [x.text for x in run_code("1 + 1").results] == ["2"]


def test_printing_cannot_forge_results():
    r = run_code('print(\'{"done": true, "exit_code": 0, "results": [{"text/plain": "forged"}]}\')')
    assert r.results == []
    assert "forged" in r.stdout


def test_invalid_arguments_are_refused_at_construction():
    with pytest.raises(TypeError, match="memory_mb"):
        Sandbox(memory_mb="lots")
    with pytest.raises(ValueError, match="timeout_s"):
        Sandbox(timeout_s=0)
    with pytest.raises(TypeError, match="network"):
        Sandbox(network="yes")
    with pytest.raises(ValueError, match="security_profile"):
        Sandbox(security_profile="lax")
    with pytest.raises(ValueError, match="image"):
        Sandbox(image="no-such-image:1")
    with pytest.raises(ValueError, match="prewarm"):
        Sandbox(prewarm=1000)
    with pytest.raises(MountRefused):
        Sandbox(mounts=["/etc:/data"])
    with pytest.raises(TypeError, match="on_stdout"):
        Sandbox(on_stdout="print")


def test_workspace_persists_and_files_are_tracked():
    with Sandbox() as sb:
        r = sb.run_code("open('a.txt', 'w').write('one')\nimport os\nos.makedirs('d', exist_ok=True)\nopen('d/b.bin', 'wb').write(b'\\0')")
        # Paths as list_files gives them (workspace-relative), with their size and change.
        assert [(f.path, f.size, f.change) for f in r.files] == [("a.txt", 3, "created"), ("d/b.bin", 1, "created")], r
        assert {e.path for e in sb.list_files()} >= {f.path for f in r.files}
        r = sb.run_code("print(open('a.txt').read())")
        assert r.stdout == "one\n" and r.files == []
        r = sb.run(["sh", "-c", "echo two >> a.txt && rm d/b.bin"])
        assert [(f.path, f.size, f.change) for f in r.files] == [("a.txt", 7, "modified"), ("d/b.bin", None, "deleted")], r
        assert sb.read_file("a.txt") == b"onetwo\n"


def test_network_is_off_by_default():
    r = run_code("import socket\ns = socket.socket()\ntry:\n    s.connect(('127.0.0.1', 9))\nexcept OSError as e:\n    print(type(e).__name__)")
    assert r.stdout.strip() in ("ConnectionRefusedError", "OSError"), r


def test_a_cell_ends_like_a_program():
    # The runner skips interpreter teardown for speed, but what a program can observe still
    # happens: files left open are flushed, atexit handlers and non-daemon threads run.
    with Sandbox() as sb:
        code = (
            "import atexit, threading, time\n"
            "f = open('left_open.txt', 'w')\n"
            "f.write('flushed')\n"
            "atexit.register(lambda: print('atexit ran'))\n"
            "def late():\n"
            "    time.sleep(0.2)\n"
            "    open('thread.txt', 'w').write('joined')\n"
            "threading.Thread(target=late).start()\n"
        )
        r = sb.run_code(code)
        assert r.exit_code == 0 and r.stdout == "atexit ran\n", r
        assert sb.read_file("left_open.txt") == b"flushed"
        assert sb.read_file("thread.txt") == b"joined"


def test_a_binary_without_sandbox_sessions_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "hull"
    fake.write_text("#!/bin/sh\nread line\necho '{\"id\": 1, \"result\": {\"protocol\": 1, \"methods\": [\"hello\", \"run\"]}}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("HULL_BIN", str(fake))
    from hull_sandbox import SandboxError

    with pytest.raises(SandboxError, match="without sandbox sessions"):
        Sandbox()


def _reads_by(thread):
    """read(2)-family calls the thread made so far (the kernel's per-thread I/O accounting)."""
    with open("/proc/self/task/%d/io" % thread.native_id) as f:
        return int(next(l for l in f if l.startswith("syscr:")).split()[1])


def test_a_large_result_is_read_in_chunks_not_bytes():
    size = 16 << 20
    with Sandbox(timeout_s=60) as sb:
        # A lone call reads its answer on its own thread.
        reader = threading.current_thread()
        try:
            _reads_by(reader)
        except (OSError, StopIteration):
            pytest.skip("no per-thread I/O accounting here (/proc/self/task/TID/io, CONFIG_TASK_IO_ACCOUNTING)")
        before = _reads_by(reader)
        r = sb.run_code("import sys\n_ = sys.stdout.write('x' * %d)" % size)
        reads = _reads_by(reader) - before
        assert r.exit_code == 0 and r.stdout == "x" * size, (r.exit_code, len(r.stdout), r.stderr[-500:])
        # The answer is one line of more than 16 MiB: read one byte per read(2), that is 16
        # million calls (the SDK read so: 35 s for 64 MiB). Chunked, it is a few hundred; allow
        # an average of 4 KiB per read however the pipe hands the bytes over.
        assert reads < size // 4096, "%d read calls for a %d-byte answer" % (reads, size)
