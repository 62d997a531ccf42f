# hull's cell runner. It runs inside a box as `python3 -c RUNNER MODE SOCKET` and is not user
# API. It connects to SOCKET (a Unix socket the supervisor listens on, in a private directory
# bound at /run/hull), then runs cells like a notebook: the last bare expression's value, every
# display(obj) and every open matplotlib figure become mime bundles. Bundles travel on the
# socket, never on stdout/stderr, so printing cannot forge them and capture never changes the
# program's output or exit code.
#   once:   read one cell, run it with the box's own stdout/stderr, send the bundles, exit with
#           the cell's exit code (1 for an exception, the code of SystemExit).
#   kernel: run cells until the socket closes, keeping globals; each cell's fd 1 and 2 are pipes
#           whose bytes are forwarded as frames, then a `done` frame carries the bundles.
import ast, base64, builtins, io, json, linecache, os, socket, sys, threading, traceback

_MODE, _SOCK = sys.argv[1], sys.argv[2]
sys.argv = [""]
_chan = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
_chan.connect(_SOCK)
_rfile = _chan.makefile("rb")
_send_lock = threading.Lock()
_results = []
_cell_no = [0]


def _send(obj):
    data = (json.dumps(obj) + "\n").encode()
    with _send_lock:
        _chan.sendall(data)


def _b64(b):
    return base64.b64encode(b).decode("ascii")


def _figure_bundle(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return {"image/png": _b64(buf.getvalue()), "text/plain": "<Figure %dx%d>" % tuple(int(x) for x in fig.get_size_inches() * fig.dpi)}


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
        data[mime] = json.loads(v) if isinstance(v, str) else v
    else:
        data[mime] = v.decode() if isinstance(v, bytes) else str(v)


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
os.environ.setdefault("MPLBACKEND", "Agg")


def _figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        for n in plt.get_fignums():
            _results.append(_figure_bundle(plt.figure(n)))
        plt.close("all")
    except Exception:
        traceback.print_exc()


def _run_cell(code, g):
    """Runs one cell; returns its exit code (0, 1 for an exception, SystemExit's code)."""
    _cell_no[0] += 1
    name = "<cell %d>" % _cell_no[0] if _MODE == "kernel" else "<cell>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    try:
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
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
        tb = e.__traceback__
        if tb is not None and tb.tb_frame.f_code is _run_cell.__code__:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        return 1
    finally:
        _figures()


def _globals():
    return {"__name__": "__main__", "__builtins__": builtins, "display": display}


def _pump(fd, stream, max_frame=65536):
    while True:
        try:
            b = os.read(fd, max_frame)
        except OSError:
            break
        if not b:
            break
        _send({"stream": stream, "data": _b64(b)})
    os.close(fd)


def _kernel():
    g = _globals()
    saved = (os.dup(1), os.dup(2))
    while True:
        line = _rfile.readline()
        if not line:
            return
        msg = json.loads(line)
        _results.clear()
        sys.stdout.flush()
        sys.stderr.flush()
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        os.dup2(w1, 1)
        os.dup2(w2, 2)
        os.close(w1)
        os.close(w2)
        pumps = [threading.Thread(target=_pump, args=(r1, "stdout"), daemon=True), threading.Thread(target=_pump, args=(r2, "stderr"), daemon=True)]
        for p in pumps:
            p.start()
        code = _run_cell(msg["code"], g)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for p in pumps:
            p.join(1.0)
        _send({"done": True, "exit_code": code, "results": list(_results)})


def _once():
    line = _rfile.readline()
    if not line:
        return 0
    msg = json.loads(line)
    code = _run_cell(msg["code"], _globals())
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    _send({"done": True, "exit_code": code, "results": _results})
    return code


if _MODE == "kernel":
    _kernel()
else:
    _code = _once()
    _chan.close()
    sys.exit(_code)
