"""Which workspace paths a cell changed, for kernel cells that bypass `hull serve` (`_direct`).

The same scan `hull serve` makes (crates/hull/src/files.rs), done from this process: the
workspace is held open as a descriptor, entries are `lstat`ed from their directory's descriptor,
and a subdirectory is listed only when the directory opened (`O_NOFOLLOW`) is the one listed
(device and inode), so a link or a directory the box swaps in during the walk is never followed
out of the workspace. One directory is open at a time, and the same caps (entries, path bytes,
depth) stop a walk of a hostile tree while it reads; a stopped walk says so.
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
    """What the workspace (an open directory descriptor) holds now: (entries, complete).

    Depth first, each directory's entries before its subdirectories, one directory open at a
    time: a subdirectory is opened by its path from the workspace and listed only when it is
    the directory that was listed there (device and inode), so one the box swaps for a link
    during the walk is skipped (and the walk says it is incomplete)."""
    w = _Walk()
    pending = [(b"", None, 0)]
    try:
        while pending:
            path, ident, depth = pending.pop()
            subdirs = _visit(root_fd, path, ident, w)
            if subdirs is None:
                continue
            for name, sub_ident in reversed(subdirs):
                if depth + 1 >= MAX_DEPTH:
                    w.complete = False
                    continue
                pending.append((path + b"/" + name if path else name, sub_ident, depth + 1))
    except _Full:
        w.complete = False
    return w.entries, w.complete


class _Full(Exception):
    pass


def _visit(root_fd, path, ident, w):
    """Lists one directory into `w`; its subdirectories as (name, (dev, ino)), sorted, or None
    when it could not be opened or is not the directory listed before."""
    if not path:
        return _list(root_fd, path, w)
    try:
        fd = os.open(path, _OPEN_DIR, dir_fd=root_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != ident:
            w.complete = False
            return None
        return _list(fd, path, w)
    finally:
        os.close(fd)


def _list(dfd, prefix, w):
    """One directory's entries (stopping at the caps while reading it)."""
    here = []
    subdirs = []
    try:
        it = os.scandir(dfd)
    except OSError:
        return None
    with it:
        for e in it:
            name = os.fsencode(e.name)
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
                subdirs.append((name, (st.st_dev, st.st_ino)))
            else:
                here.append((path, (kind, st.st_size, st.st_mtime_ns)))
    for path, v in here:
        w.entries[path] = v
    subdirs.sort()
    return subdirs


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
