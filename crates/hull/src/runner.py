# hull's cell runner. It runs inside a box as `python3 -S -c RUNNER MODE SOCKET` and is not user
# API. It connects to SOCKET (a Unix socket the supervisor listens on, in a private directory
# bound at /run/hull), then runs cells like a notebook: the last bare expression's value, every
# display(obj) and every open matplotlib figure become mime bundles. Bundles travel on the
# socket, never on stdout/stderr, so printing cannot forge them and capture never changes the
# program's output or exit code.
#   once:   read one cell, run it with the box's own stdout/stderr, send the bundles, then end the
#           way the interpreter would (non-daemon threads joined, atexit handlers run, files left
#           open in the cell's globals closed) but skip interpreter teardown, which costs
#           milliseconds; exit with the cell's code (1 for an exception, SystemExit's code).
#   kernel: run cells until the socket closes, keeping globals; each cell's fd 1 and 2 are pipes
#           (made once, pumped by one thread) whose bytes are forwarded as frames, then a `done`
#           frame carries the bundles.
# Host -> runner: `<byte length>\n<UTF-8 code>` per cell. Runner -> host: JSON lines.
# Startup matters (a call waits for it), so only builtin modules are imported before connecting: the
# socket is `_socket`, the parse is compile(..., PyCF_ONLY_AST), JSON is written by `_enc`, and
# traceback/linecache/json/threading are imported only when needed.
import sys

# `python3 -c` puts '' (the working directory, /workspace) first on sys.path, so a module the
# box planted there (`_socket.py`, `binascii.py` where those are not built in) would run before
# the runner has connected. The runner imports without it and puts it back for the cell, whose
# `import x` finds /workspace/x.py as under `python3 -c`.
_CWD_PATH = [sys.path.pop(0)] if sys.path and sys.path[0] in ("", ".") else []
_SITE_PENDING = [True]
import _socket, binascii, builtins, os

_MODE, _SOCK = sys.argv[1], sys.argv[2]
sys.argv = [""]


def _channel(path):
    # The socket lives only in these closures, not in __main__'s globals, so a cell does not
    # come across it by name. It can still find the descriptor: the host treats every frame as
    # untrusted (size- and value-capped, a malformed one kills the box).
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.connect(path)
    return (lambda n: s.recv(n)), (lambda b: s.sendall(b)), (lambda: s.close())


_recv, _sendall, _close = _channel(_SOCK)
del _channel


def _system_site():
    """Runs the image's part of what `-S` held back, before the cell arrives: the system
    site-packages directories and their .pth files (read-only image files, whose imports can
    take milliseconds). Imports here resolve only in the image: PYTHONPATH entries (/deps,
    which setup and cells write) are off sys.path meanwhile, and the user site (under the
    writable HOME) and sitecustomize/usercustomize wait for the cell (`_restore_path`)."""
    # PYTHONPATH's entries lead sys.path (the working directory is off it already), made
    # absolute by the interpreter (an empty entry is the working directory).
    extra = set()
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        extra.update((p, os.path.abspath(p)) if p else (p, os.getcwd()))
    n = 0
    while n < len(sys.path) and sys.path[n] in extra:
        n += 1
    held = sys.path[:n]
    del sys.path[:n]
    before = list(sys.path)
    try:
        import site

        # site.main() decides whether the user site is on (ENABLE_USER_SITE: off in a venv
        # without system packages, for one); only reading it waits for the cell.
        held_back = (site.addusersitepackages, site.addsitepackages, site.execsitecustomize, site.execusercustomize)
        site.addusersitepackages = lambda known_paths: known_paths
        site.execsitecustomize = site.execusercustomize = lambda: None
        add_site = site.addsitepackages

        def image_only(known_paths, prefixes=None):
            # A virtual environment at /deps (the setup's, over the image's Python) is writable
            # like PYTHONPATH: its site-packages wait for the cell too.
            prefixes = site.PREFIXES if prefixes is None else prefixes
            if _in_venv():
                prefixes = [p for p in prefixes if p != sys.prefix]
            return add_site(known_paths, prefixes)

        site.addsitepackages = image_only
        try:
            site.main()
        finally:
            site.addusersitepackages, site.addsitepackages, site.execsitecustomize, site.execusercustomize = held_back
    except Exception:
        import traceback

        traceback.print_exc()
    added = [p for p in sys.path if p not in before]
    sys.path[0:0] = held
    # Where the system site-packages begin (the user site goes before them).
    return added[0] if added else None


def _in_venv():
    """Whether the interpreter runs in a virtual environment (the setup's /deps): its
    site-packages wait for the cell, like PYTHONPATH's entries (see `_system_site`)."""
    return sys.prefix != sys.base_prefix


def _before_image_site(add):
    """Calls `add` (which appends to sys.path) and moves what it added to where the image's
    site-packages begin."""
    before = list(sys.path)
    add()
    new = [p for p in sys.path if p not in before]
    for p in new:
        sys.path.remove(p)
    at = sys.path.index(_SITE_AT) if _SITE_AT in sys.path else len(sys.path)
    sys.path[at:at] = new


def _restore_path():
    """Runs the rest of what `-S` held back (the user site, sitecustomize, usercustomize) and
    puts the working directory back on sys.path, as `python3 -c` would have them for the cell
    (once)."""
    if not _SITE_PENDING:
        return
    _SITE_PENDING.clear()
    try:
        import site

        # Where site.main() puts them: the environment's site-packages (site.venv() adds them
        # first), then the user site, before the image's.
        if _in_venv():
            _before_image_site(lambda: site.addsitepackages(set(sys.path), [sys.prefix]))
        if site.ENABLE_USER_SITE:
            _before_image_site(lambda: site.addusersitepackages(None))
        site.execsitecustomize()
        if site.ENABLE_USER_SITE:
            site.execusercustomize()
    except Exception:
        import traceback

        traceback.print_exc()
    while _CWD_PATH:
        sys.path.insert(0, _CWD_PATH.pop())

_results = []
_cell_no = [0]
_buf = [b""]
_lock = None
_ONLY_AST = 0x400  # ast.PyCF_ONLY_AST, without importing ast


def _recv_cell():
    """The next cell's code, or None when the host closed the socket."""
    while b"\n" not in _buf[0]:
        b = _recv(65536)
        if not b:
            return None
        _buf[0] += b
    head, rest = _buf[0].split(b"\n", 1)
    n = int(head)
    while len(rest) < n:
        b = _recv(max(65536, n - len(rest)))
        if not b:
            return None
        rest += b
    _buf[0] = rest[n:]
    return rest[:n].decode("utf-8", "replace")


_ESC = {i: "\\u%04x" % i for i in range(32)}
_ESC[34] = '\\"'
_ESC[92] = "\\\\"


def _enc(o):
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, str):
        return '"' + o.translate(_ESC) + '"'
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return float.__repr__(o) if o == o and o not in (float("inf"), float("-inf")) else "null"
    if isinstance(o, dict):
        return "{" + ",".join(_enc(str(k)) + ":" + _enc(v) for k, v in o.items()) + "}"
    if isinstance(o, (list, tuple)):
        return "[" + ",".join(_enc(v) for v in o) + "]"
    return _enc(str(o))


def _send(obj):
    data = (_enc(obj) + "\n").encode("utf-8", "replace")
    if _lock is None:
        _sendall(data)
    else:
        with _lock:
            _sendall(data)


def _b64(b):
    return binascii.b2a_base64(bytes(b), newline=False).decode("ascii")


def _figure_bundle(fig):
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    w, h = fig.get_size_inches() * fig.dpi
    return {"image/png": _b64(buf.getvalue()), "text/plain": "<Figure size %dx%d>" % (int(w), int(h))}


_MIME = [
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_json_", "application/json"),
    ("_repr_latex_", "text/latex"),
]


def _put(data, mime, v):
    if isinstance(v, tuple):
        v = v[0]
    if v is None:
        return
    if mime in ("image/png", "image/jpeg"):
        data[mime] = _b64(v) if isinstance(v, (bytes, bytearray)) else str(v)
    elif mime == "application/json":
        if isinstance(v, str):
            import json

            v = json.loads(v)
        data[mime] = v
    else:
        data[mime] = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _bundle(obj):
    if type(obj).__module__.startswith("matplotlib.figure"):
        b = _figure_bundle(obj)
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            plt.close(obj)
        return b
    data = {}
    if not isinstance(obj, type):
        mb = getattr(obj, "_repr_mimebundle_", None)
        if callable(mb):
            try:
                r = mb()
                if isinstance(r, tuple):
                    r = r[0]
                for mime, v in (r or {}).items():
                    _put(data, mime, v)
            except Exception:
                pass
        for meth, mime in _MIME:
            f = getattr(obj, meth, None)
            if callable(f) and mime not in data:
                try:
                    _put(data, mime, f())
                except Exception:
                    pass
    try:
        data.setdefault("text/plain", repr(obj))
    except Exception as e:
        data["text/plain"] = "<repr failed: %s>" % e
    return data


def display(*objs, raw=False, **_ignored):
    """Show objects as rich results of this cell (like IPython's display)."""
    for o in objs:
        if raw and isinstance(o, dict):
            _results.append({str(k): v for k, v in o.items()})
        else:
            _results.append(_bundle(o))


builtins.display = display


def _figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        for n in plt.get_fignums():
            _results.append(_figure_bundle(plt.figure(n)))
        plt.close("all")
    except Exception:
        import traceback

        traceback.print_exc()


def _run_cell(code, g):
    """Runs one cell; returns its exit code (0, 1 for an exception, SystemExit's code)."""
    _cell_no[0] += 1
    name = "<cell %d>" % _cell_no[0] if _MODE == "kernel" else "<cell>"
    try:
        tree = compile(code, name, "exec", _ONLY_AST)
        last = None
        # As in IPython, a trailing `;` keeps the last expression's value from being shown.
        if tree.body and type(tree.body[-1]).__name__ == "Expr" and not code.rstrip().endswith(";"):
            import _ast

            last = _ast.Expression(body=tree.body.pop().value)
        exec(compile(tree, name, "exec"), g)
        if last is not None:
            v = eval(compile(last, name, "eval"), g)
            if v is not None:
                g["_"] = v
                display(v)
        return 0
    except SystemExit as e:
        c = e.code
        if c is None:
            return 0
        if isinstance(c, int):
            return c
        print(c, file=sys.stderr)
        return 1
    except BaseException as e:
        import linecache, traceback

        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tb = e.__traceback__
        if tb is not None and tb.tb_frame.f_code is _run_cell.__code__:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        return 1
    finally:
        _figures()


def _globals():
    return {"__name__": "__main__", "__builtins__": builtins, "display": display}


def _flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


def _kernel():
    # fd 1 and 2 of a cell are two pipes made once, pumped by one thread for the kernel's life:
    # a cell costs no pipe or thread start. After the cell the main thread drains what is left
    # (under the pump's lock, so every byte goes out before `done`, in order).
    # `_thread`, not `threading`: importing threading costs an idle kernel ~0.7 MiB (PSS).
    global _lock
    import _thread
    import select

    _lock = _thread.allocate_lock()
    g = _globals()
    saved = (os.dup(1), os.dup(2))
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    for r in (r1, r2):
        os.set_blocking(r, False)
    names = {r1: "stdout", r2: "stderr"}
    drain_lock = _thread.allocate_lock()

    def drain(fd):
        while True:
            try:
                b = os.read(fd, 65536)
            except OSError:  # BlockingIOError: the pipe is empty
                return
            if not b:
                return
            _send({"stream": names[fd], "data": _b64(b)})

    def pump():
        p = select.poll()
        for r in (r1, r2):
            p.register(r, select.POLLIN)
        while True:
            for fd, _ in p.poll():
                with drain_lock:
                    drain(fd)

    _thread.start_new_thread(pump, ())
    while True:
        code = _recv_cell()
        if code is None:
            return
        # The user site and sitecustomize run when the first cell arrives, not when the
        # interpreter starts (a kernel can be started ahead of its use).
        _restore_path()
        _results.clear()
        _flush()
        os.dup2(w1, 1)
        os.dup2(w2, 2)
        rc = _run_cell(code, g)
        _flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        with drain_lock:
            drain(r1)
            drain(r2)
        _send({"done": True, "exit_code": rc, "results": list(_results)})


def _end(rc, g):
    """What interpreter shutdown does that a program can observe, then a fast exit."""
    t = sys.modules.get("threading")
    if t is not None:
        try:
            t._shutdown()  # join non-daemon threads, as Py_Finalize does first
        except Exception:
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except Exception:
        pass
    try:
        # Dropping the cell's globals closes (and so flushes) files it left open, as teardown would.
        g.clear()
    except Exception:
        pass
    _flush()
    os._exit(rc & 0xFF if rc >= 0 else 1)


# The first AST parse builds every AST node type (~3 ms); do it while the box waits for its cell,
# and the image's site-packages (.pth files can import for milliseconds) too.
compile("0", "<warm-up>", "exec", _ONLY_AST)
_SITE_AT = _system_site()
if _MODE == "kernel":
    _kernel()
else:
    code = _recv_cell()
    if code is None:
        os._exit(0)
    _restore_path()
    g = _globals()
    rc = _run_cell(code, g)
    _flush()
    _send({"done": True, "exit_code": rc, "results": _results})
    _close()
    _end(rc, g)
