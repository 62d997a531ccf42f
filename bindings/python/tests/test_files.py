"""Workspace file operations: confined, never following symlinks, never blocking on FIFOs."""

import io
import os
import tarfile
import threading

import pytest

from hull_sandbox import FileOperationError, InvalidArgument, Sandbox, SandboxError


@pytest.fixture
def sb():
    with Sandbox() as s:
        yield s


def test_write_read_list(sb):
    sb.write_file("dir/sub/data.bin", b"\x00\x01\x02\xff")
    sb.write_file("/workspace/text.txt", "héllo")
    assert sb.read_file("dir/sub/data.bin") == b"\x00\x01\x02\xff"
    assert sb.read_file("text.txt").decode() == "héllo"
    assert sb.read_file("dir/sub/data.bin", max_bytes=4) == b"\x00\x01\x02\xff"
    # A file larger than max_bytes raises naming its size: never a silent prefix.
    with pytest.raises(InvalidArgument, match=r"dir/sub/data.bin is 4 bytes, more than max_bytes=2") as e:
        sb.read_file("dir/sub/data.bin", max_bytes=2)
    assert isinstance(e.value, SandboxError) and e.value.arg == "max_bytes"
    entries = {e.path: e for e in sb.list_files()}
    assert entries["dir/sub/data.bin"].type == "file" and entries["dir/sub/data.bin"].size == 4
    assert entries["dir"].type == "dir"
    assert [e.path for e in sb.list_files("dir/sub")] == ["dir/sub/data.bin"]
    assert sb.run(["cat", "/workspace/text.txt"]).stdout == "héllo"


def test_symlinks_are_never_followed(sb):
    r = sb.run(["sh", "-c", "ln -s /etc/passwd passwd && ln -s /etc etc && ln -s / root"])
    assert r.exit_code == 0, r
    for path in ["passwd", "etc/passwd", "root/etc/passwd"]:
        with pytest.raises(FileOperationError, match="symlink"):
            sb.read_file(path)
    with open("/etc/passwd", "rb") as f:
        before = f.read()
    for path in ["passwd", "etc/hull-owned", "root/tmp/hull-owned"]:
        with pytest.raises(FileOperationError):
            sb.write_file(path, "owned")
    with open("/etc/passwd", "rb") as f:
        assert f.read() == before
    assert not os.path.exists("/etc/hull-owned")
    kinds = {e.path: e.type for e in sb.list_files()}
    assert kinds["passwd"] == "symlink" and kinds["etc"] == "symlink"


def test_escapes_by_path_are_refused(sb):
    for path in ["../x", "/etc/passwd", "a/../../x", "/workspace/../etc/passwd"]:
        with pytest.raises(FileOperationError):
            sb.read_file(path)


def test_fifo_is_refused_without_hanging(sb):
    assert sb.run(["mkfifo", "/workspace/pipe"]).exit_code == 0
    # Opening the FIFO would wait for a writer forever: the calls run on a thread, and a minute
    # without their answer fails the test (a hang guard, not a speed claim).
    errors = []

    def calls():
        for op in (lambda: sb.read_file("pipe"), lambda: sb.write_file("pipe", "x")):
            try:
                op()
                errors.append(None)
            except FileOperationError as e:
                errors.append(e)

    t = threading.Thread(target=calls, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "a file operation blocked on the FIFO"
    assert len(errors) == 2 and all(errors), errors
    assert "fifo" in str(errors[0])


def test_snapshot_round_trip(sb, tmp_path):
    sb.write_file("keep/a.txt", "alpha")
    sb.write_file("b.bin", bytes(range(256)))
    snap = tmp_path / "ws.tar.gz"
    sb.snapshot(snap)
    sb.run(["sh", "-c", "rm -rf keep b.bin && echo junk > junk"])
    sb.restore(snap)
    assert sb.read_file("keep/a.txt") == b"alpha"
    assert sb.read_file("b.bin") == bytes(range(256))
    assert "junk" not in [e.path for e in sb.list_files()]
    # A fresh sandbox restored from the snapshot sees the same files.
    with Sandbox() as other:
        other.restore(snap)
        assert other.run_code("print(open('keep/a.txt').read())").stdout == "alpha\n"


def _archive(path, member):
    with tarfile.open(path, "w:gz") as t:
        ok = tarfile.TarInfo("fine.txt")
        ok.size = 2
        t.addfile(ok, io.BytesIO(b"ok"))
        t.addfile(member, io.BytesIO(b"x" * member.size) if member.size else None)


@pytest.mark.parametrize("name,kind,link", [
    ("../escape.txt", tarfile.REGTYPE, ""),
    ("/abs.txt", tarfile.REGTYPE, ""),
    ("a/../../escape.txt", tarfile.REGTYPE, ""),
    ("link", tarfile.SYMTYPE, "/etc/passwd"),
    ("hard", tarfile.LNKTYPE, "/etc/passwd"),
    ("dev", tarfile.CHRTYPE, ""),
    ("fifo", tarfile.FIFOTYPE, ""),
])
def test_hostile_restore_is_refused(sb, tmp_path, name, kind, link):
    sb.write_file("precious.txt", "keep me")
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = link
    m.size = 1 if kind == tarfile.REGTYPE else 0
    p = tmp_path / "bad.tar.gz"
    _archive(p, m)
    with pytest.raises(FileOperationError) as e:
        sb.restore(p)
    assert name in str(e.value)
    assert sb.read_file("precious.txt") == b"keep me"
    assert not os.path.exists(tmp_path.parent / "escape.txt")


def test_names_that_are_not_utf8_round_trip(sb):
    """Two names that differ only in bytes that are not UTF-8 are listed distinctly (`path` shows
    U+FFFD, `path_bytes` is exact) and each reads back its own content by its bytes."""
    r = sb.run(["python3", "-c", "open(b'a\\xff', 'w').write('ff'); open(b'a\\xfe', 'w').write('fe')"])
    assert r.exit_code == 0, r
    entries = [e for e in sb.list_files() if e.path_bytes.startswith(b"a")]
    assert sorted(e.path_bytes for e in entries) == [b"a\xfe", b"a\xff"]
    assert all(e.path == "a\ufffd" for e in entries)
    for e in entries:
        assert sb.read_file(e.path_bytes) == {b"a\xff": b"ff", b"a\xfe": b"fe"}[e.path_bytes]
    sb.write_file(b"b\xfd", "written")
    assert sb.run(["python3", "-c", "print(open(b'b\\xfd').read())"]).stdout == "written\n"
    assert [e.path_bytes for e in sb.list_files(b"") if e.path_bytes == b"b\xfd"] == [b"b\xfd"]
    # UTF-8 names need nothing else: their bytes are their text.
    sb.write_file("plain.txt", "p")
    plain = [e for e in sb.list_files() if e.path == "plain.txt"][0]
    assert plain.path_bytes == b"plain.txt"
