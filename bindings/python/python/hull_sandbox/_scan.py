"""Which workspace paths a cell changed, for kernel cells that bypass `hull serve` (`_direct`).

The same scan `hull serve` makes (crates/hull/src/files.rs), done from this process: the
workspace is held open as a descriptor, every directory is opened from its parent's descriptor
with `O_NOFOLLOW`, and entries are `lstat`ed from their directory's descriptor, so a symlink or a
directory the box swaps in during the walk is never followed out of the workspace. The same caps
(entries, path bytes, depth) stop a walk of a hostile tree; a stopped walk says so.
"""

import base64
import os
import stat

#: The most entries one walk holds, the most path bytes, and how deep it descends: past any
#: of them the walk stops and says it is incomplete (the server's caps).
MAX_ENTRIES = 100_000
MAX_PATH_BYTES = 16 << 20
MAX_DEPTH = 256

INCOMPLETE = ("files: the workspace holds more than %d entries, %d bytes of paths or %d levels of directories; changes were tracked only in the part scanned" % (MAX_ENTRIES, MAX_PATH_BYTES, MAX_DEPTH))

_KINDS = (
    (stat.S_ISREG, "file"),
    (stat.S_ISDIR, "dir"),
    (stat.S_ISLNK, "symlink"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "char_device"),
    (stat.S_ISBLK, "block_device"),
)

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _kind(mode):
    for test, name in _KINDS:
        if test(mode):
            return name
    return "unknown"


class _Walk:
    __slots__ = ("entries", "count", "bytes", "complete")

    def __init__(self):
        #: Path bytes (relative, `/`-separated) -> (kind, size, mtime_ns), directories left out.
        self.entries = {}
        self.count = 0
        self.bytes = 0
        self.complete = True


def scan(root_fd):
    """What the workspace (an open directory descriptor) holds now: (entries, complete)."""
    w = _Walk()
    try:
        _walk(root_fd, b"", 0, w)
    except _Full:
        w.complete = False
    return w.entries, w.complete


class _Full(Exception):
    pass


def _walk(dfd, prefix, depth, w):
    try:
        names = sorted(os.fsencode(n) for n in os.listdir(dfd))
    except OSError:
        return
    subdirs = []
    for name in names:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            continue
        path = prefix + b"/" + name if prefix else name
        cost = len(path) * (1 if _is_utf8(path) else 2)
        if w.count >= MAX_ENTRIES or w.bytes + cost > MAX_PATH_BYTES:
            raise _Full()
        w.count += 1
        w.bytes += cost
        kind = _kind(st.st_mode)
        if kind == "dir":
            subdirs.append((name, path))
        else:
            w.entries[path] = (kind, st.st_size, st.st_mtime_ns)
    for name, path in subdirs:
        if depth + 1 >= MAX_DEPTH:
            w.complete = False
            continue
        try:
            sub = os.open(name, _OPEN_DIR, dir_fd=dfd)
        except OSError:
            continue
        try:
            _walk(sub, path, depth + 1, w)
        finally:
            os.close(sub)


def _is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def changed(before, now):
    """The changes from `before` to `now` (scan entries) as the server reports them: dicts of
    `path` (relative; bytes that are not UTF-8 shown as U+FFFD, exact in `path_b64`), `size`
    (None once deleted) and `change` (created, modified, deleted), sorted by path bytes."""
    out = []
    for path, (kind, size, mtime) in now.items():
        old = before.get(path)
        if old is None:
            out.append((path, size, "created"))
        elif old != (kind, size, mtime):
            out.append((path, size, "modified"))
    out.extend((path, None, "deleted") for path in before if path not in now)
    out.sort(key=lambda c: c[0])
    shown = []
    for path, size, change in out:
        f = {"path": path.decode("utf-8", "replace"), "size": size, "change": change}
        if not _is_utf8(path):
            f["path_b64"] = base64.b64encode(path).decode("ascii")
        shown.append(f)
    return shown
