"""Sandbox: one `hull serve` child process per sandbox, JSON lines over its stdin/stdout.

Requests carry ids; a waiting caller's thread reads the answers (its own, and hands others' to
their callers), so a Sandbox can be used from many threads at once and a lone call has no thread
hop. Streamed output goes through a bounded queue to
a separate callback thread: when a callback is slow, chunks are dropped (and counted) instead of
stalling the reader, the server or the box.
"""

import array
import base64
import copy
import inspect
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import weakref

from . import _direct, _named
from ._errors import InvalidArgument, InvalidArgumentType, SandboxError, from_error
from ._result import ExecutionResult, FileEntry

_LANGUAGES = ("python", "bash", "sh", "node")
#: The `hull serve` protocol version this package speaks (checked with `hello`).
PROTOCOL = 1
_STREAM_QUEUE = 256
#: Buffer size of the pipes to `hull serve`: an answer can be one line of many MiB (a run's
#: output is capped at 64 MiB per stream by default), read in chunks this large, never byte by
#: byte (an unbuffered pipe's readline makes one read(2) per byte).
_PIPE_BUFFER = 1 << 20
#: HULL_TRACE_CALLS=1: each call's steps (sent, answer read, parsed) on stderr, in the shape
#: `hull serve` prints its own part in.
_TRACE = os.environ.get("HULL_TRACE_CALLS", "0") not in ("", "0")
#: Kernel cells go straight to the interpreter over a channel `hull serve` hands over (set
#: HULL_KERNEL_DIRECT=0 to send them through the server, as the Node SDK does).
_DIRECT = os.environ.get("HULL_KERNEL_DIRECT", "1") not in ("", "0")


def _published(result):
    """`ports` of a named.create / named.start result as [{"port", "host_port"}]."""
    ports = result.get("ports") if isinstance(result, dict) else None
    return [{"port": int(p["port"]), "host_port": int(p["host_port"])} for p in ports or []]


def find_hull():
    """The `hull` binary: $HULL_BIN, else the one this package's wheel installed, else PATH."""
    env = os.environ.get("HULL_BIN")
    if env:
        return env
    candidates = [os.path.join(sysconfig.get_path("scripts"), "hull"), os.path.join(os.path.dirname(sys.executable), "hull")]
    user = sysconfig.get_path("scripts", scheme=sysconfig.get_preferred_scheme("user")) if hasattr(sysconfig, "get_preferred_scheme") else None
    if user:
        candidates.append(os.path.join(user, "hull"))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("hull")
    if found:
        return found
    raise SandboxError("the hull binary was not found: reinstall hull-sandbox (pip install ./bindings/python) or set HULL_BIN", "not_found")


def _grow_pipe(f):
    """Asks for a pipe as large as the read buffer, so the server hands a large answer over in
    fewer, larger pieces. Best effort: the kernel may refuse (fs.pipe-max-size, the user's pipe
    quota); reading is chunked either way."""
    try:
        import fcntl

        fcntl.fcntl(f.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BUFFER)
    except (ImportError, OSError):
        pass


def _request_line(method, params):
    """A request as UTF-8 JSON, all but its leading `{"id": N, `. Text with a lone surrogate
    (which Python strings can hold) has no UTF-8 form: it is refused here, naming the argument,
    since the server could not parse the line and its error could reach no caller."""
    body = json.dumps({"method": method, "params": params}, ensure_ascii=False)[1:] + "\n"
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = e.object[e.start]
        names = [k for k, v in (params or {}).items() if not _encodable(v)]
        raise InvalidArgument("%s holds U+%04X, a lone surrogate: not valid Unicode text, so it cannot be sent (encode binary data as bytes, e.g. write_file)" % (names[0] if names else "an argument", ord(bad))) from None


def _encodable(v):
    try:
        json.dumps(v, ensure_ascii=False).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


class _Call:
    __slots__ = ("answer", "on_event")

    def __init__(self, on_event):
        self.answer = None
        self.on_event = on_event


class _Server:
    """One `hull serve` process. Answers are read by a waiting caller's own thread: the first to
    wait reads lines (handing other calls' answers and events to them) until its own answer is
    in, then lets the next waiter read. A call made while no other is in flight reads its answer
    itself, with no hop to another thread."""

    def __init__(self, binary):
        #: Where the server hands descriptors over (`--fd-socket`): a kernel's channel, so its
        #: cells skip the server. HULL_KERNEL_DIRECT=0 keeps every cell on the server's path.
        self.fds = None
        argv, keep = [binary, "serve"], ()
        if _DIRECT:
            self.fds, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            argv += ["--fd-socket", str(theirs.fileno())]
            keep = (theirs.fileno(),)
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=_PIPE_BUFFER, pass_fds=keep)
        finally:
            if self.fds is not None:
                theirs.close()
        #: Held from a `kernel.attach` request until its descriptor is taken.
        self.attaching = threading.Lock()
        _grow_pipe(self.proc.stdout)
        self._wlock = threading.Lock()
        self._plock = threading.Lock()
        #: Signalled when an answer is handed over or the reading turn is free.
        self._turn = threading.Condition(self._plock)
        self._reading = False
        self._eof = False
        self._pending = {}
        self._next = 0
        self._closed = False

    def _dispatch(self, line):
        """Hands one line to its call (an event to its callback, an answer to its waiter)."""
        try:
            msg = json.loads(line)
        except ValueError:
            return
        with self._plock:
            call = self._pending.get(msg.get("id"))
        if call is None:
            return
        if "event" in msg:
            if call.on_event is not None:
                call.on_event(msg["event"], msg.get("data", ""))
            return
        with self._turn:
            self._pending.pop(msg.get("id"), None)
            call.answer = msg
            self._turn.notify_all()

    def _fail_all(self):
        # The server is gone: fail whoever still waits.
        with self._turn:
            self._eof = True
            pending, self._pending = self._pending, {}
            for call in pending.values():
                call.answer = {"error": {"kind": "server_exited", "message": "hull serve exited (exit status %s)" % self.proc.poll()}}
            self._turn.notify_all()

    def _await(self, call):
        """Waits for call's answer, reading the server's lines while no other thread does."""
        with self._turn:
            while call.answer is None and self._reading:
                self._turn.wait()
            if call.answer is not None:
                return
            self._reading = True
        try:
            # A buffered reader: each read(2) takes what the pipe holds, up to _PIPE_BUFFER, and
            # readline returns as soon as a line is complete, so streamed events are not delayed.
            while call.answer is None:
                line = self.proc.stdout.readline()
                if not line:
                    self._fail_all()
                    break
                self._dispatch(line)
        finally:
            with self._turn:
                self._reading = False
                self._turn.notify_all()

    def call(self, method, params, on_event=None):
        t0 = time.perf_counter() if _TRACE else 0.0
        line = _request_line(method, params)
        call = _Call(on_event)
        with self._plock:
            if self._closed:
                raise SandboxError("the sandbox was destroyed; create a new one", "destroyed")
            if self._eof:
                raise SandboxError("hull serve is not running (exit status %s)" % self.proc.poll(), "server_exited")
            self._next += 1
            rid = self._next
            self._pending[rid] = call
        line = b'{"id": %d, ' % rid + line
        try:
            with self._wlock:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            with self._plock:
                self._pending.pop(rid, None)
            raise SandboxError("hull serve is not running: %s" % e, "server_exited") from e
        if _TRACE:
            t_sent = time.perf_counter()
        self._await(call)
        ans = call.answer
        if _TRACE:
            t_got = time.perf_counter()
            sys.stderr.write("hull trace: sdk.%s %.3f ms: sent %.3f, answered %.3f\n" % (method, (t_got - t0) * 1000, (t_sent - t0) * 1000, (t_got - t0) * 1000))
        if "error" in ans:
            raise from_error(ans["error"])
        return ans.get("result")

    def close(self):
        with self._plock:
            if self._closed:
                return
            self._closed = True
        _shutdown(self.proc)
        if self.fds is not None:
            self.fds.close()

    def take_fd(self, tag):
        """The descriptor the server just handed over for `tag` (a kernel id). Hand-offs left
        by a request that was interrupted before its descriptor was taken are closed and
        skipped; the wait is bounded (the server sends the descriptor before it answers)."""
        self.fds.settimeout(10)
        while True:
            try:
                got, fds = _recv_fd(self.fds)
            except (OSError, socket.timeout) as e:
                raise SandboxError("hull serve answered kernel %r without handing its channel over (%s)" % (tag, e), "protocol") from e
            if got.decode("utf-8", "replace") == tag and len(fds) == 1:
                return fds[0]
            for fd in fds:
                os.close(fd)


def _recv_fd(sock):
    """One message and the descriptors it carries, received close-on-exec (MSG_CMSG_CLOEXEC:
    no child of this process inherits them). socket.recv_fds would drop the flag."""
    fds = array.array("i")
    msg, anc, _flags, _addr = sock.recvmsg(256, socket.CMSG_SPACE(fds.itemsize), socket.MSG_CMSG_CLOEXEC)
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return msg, list(fds)


def _shutdown(proc):
    if proc.poll() is not None:
        return
    try:
        proc.stdin.write(b'{"id": 0, "method": "shutdown"}\n')
        proc.stdin.flush()
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _Streamer:
    """Hands streamed output to the user's callbacks on their own thread, through a bounded
    queue; when the queue is full the chunk is dropped, so a slow callback never stalls a box."""

    def __init__(self, on_stdout, on_stderr):
        self.on = {"stdout": on_stdout, "stderr": on_stderr}
        self.q = queue.Queue(maxsize=_STREAM_QUEUE)
        self.dropped = 0
        self._lock = threading.Lock()
        self.t = threading.Thread(target=self._loop, name="hull-stream-callbacks", daemon=True)
        self.t.start()

    def offer(self, stream, data):
        if self.on.get(stream) is None:
            return
        try:
            self.q.put_nowait((stream, data))
        except queue.Full:
            with self._lock:
                self.dropped += 1

    def _loop(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            stream, data = item
            try:
                self.on[stream](data)
            except Exception:  # a callback's error must not kill the stream thread
                import traceback

                traceback.print_exc()

    def take_dropped(self):
        with self._lock:
            d, self.dropped = self.dropped, 0
        return d

    def close(self):
        try:
            self.q.put(None, timeout=5)
        except queue.Full:
            pass


def _check_callbacks(on_stdout, on_stderr):
    for name, cb in (("on_stdout", on_stdout), ("on_stderr", on_stderr)):
        if cb is not None and not callable(cb):
            raise InvalidArgumentType("%s must be callable, got %r" % (name, cb))


def _call_options(timeout_s, env, cwd):
    """A call's own options as `hull serve` takes them (only those given)."""
    out = {}
    if timeout_s is not None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
            raise InvalidArgumentType("timeout_s must be a number of seconds, got %r" % (timeout_s,))
        if not 0 < timeout_s <= 86400:
            raise InvalidArgument("timeout_s must be more than 0 and at most 86400, got %r" % (timeout_s,), "timeout_s")
        out["timeout_s"] = timeout_s
    if env is not None:
        out["env"] = _named.check_env(env)
    if cwd is not None:
        if not isinstance(cwd, str):
            raise InvalidArgumentType("cwd must be a string (an absolute path in the box), got %r" % (cwd,))
        out["cwd"] = cwd
    return out


def _mounts(mounts):
    """kern's shape too: `{src: dst}` and `{src: (dst, "ro"|"rw")}` as 'SRC:DST[:ro]' strings."""
    if not isinstance(mounts, dict):
        return mounts
    out = []
    for src, dst in mounts.items():
        mode = None
        if isinstance(dst, (tuple, list)):
            if len(dst) != 2 or dst[1] not in ("ro", "rw"):
                raise InvalidArgument("mounts: %r: give (dst, 'ro') or (dst, 'rw'), got %r" % (src, dst), "mounts")
            dst, mode = dst
        if not isinstance(src, (str, os.PathLike)) or not isinstance(dst, (str, os.PathLike)):
            raise InvalidArgumentType("mounts: %r: source and target must be paths, got %r" % (src, dst))
        out.append("%s:%s%s" % (os.fspath(src), os.fspath(dst), ":" + mode if mode else ""))
    return out


def _shown(path):
    """A workspace path as an error message shows it."""
    return path.decode("utf-8", "backslashreplace") if isinstance(path, bytes) else str(path)


def _check(name, value, types, what):
    if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)))):
        raise InvalidArgumentType("%s must be %s, got %r" % (name, what, value))


_MODES = ("none", "host", "deny-all", "allow-all", "custom")


def _network(network, egress_allow):
    """`network=` (True/False, a mode's name, or a dict {mode, allow_hosts, allow_cidrs,
    deny_cidrs, ports, max_tcp_connections}) and kern's `egress_allow=[hosts]` (a custom host
    list, added to network's) as `hull serve`'s `network` parameter; None when neither asks for
    anything. hull checks the entries; a gateway mode is refused by a hull that cannot give it
    (NetworkUnavailable), never run with no network or the host's."""
    if network is None or isinstance(network, bool):
        value = "host" if network else None
    elif isinstance(network, str):
        if network not in _MODES:
            raise InvalidArgumentType("network must be True/False or one of %s, got %r" % (", ".join(_MODES), network))
        value = network
    elif isinstance(network, dict):
        value = dict(network)
    else:
        raise InvalidArgumentType("network must be True/False, a mode (%s) or a dict {mode, allow_hosts, allow_cidrs, deny_cidrs, ports, max_tcp_connections}, got %r" % (", ".join(_MODES), network))
    if egress_allow is None:
        return value
    if isinstance(egress_allow, str) or not isinstance(egress_allow, (list, tuple)) or not all(isinstance(h, str) for h in egress_allow):
        raise InvalidArgumentType("egress_allow must be a list of host names ('api.example.com', '*.example.com'), got %r" % (egress_allow,))
    if value is None or value == "custom":
        return {"mode": "custom", "allow_hosts": list(egress_allow)}
    if isinstance(value, dict) and value.get("mode") in (None, "custom"):
        value["mode"] = "custom"
        value["allow_hosts"] = list(value.get("allow_hosts") or []) + list(egress_allow)
        return value
    raise InvalidArgument("egress_allow is a custom host list: it does not go with network=%r (leave network out, or use network='custom')" % (network,))


def _secrets(secrets):
    """`secrets=`: a list of {name, value or env, hosts, headers} dicts, as given (hull checks
    them; a value is never echoed back)."""
    if secrets is None:
        return None
    if not isinstance(secrets, (list, tuple)) or not all(isinstance(s, dict) for s in secrets):
        raise InvalidArgumentType("secrets must be a list of {name, value or env, hosts, headers} dicts")
    return [dict(s) for s in secrets]


def _path(name, path):
    """A workspace path parameter: `name` as text, or `name_b64` for bytes that are not UTF-8
    (as `FileEntry.path_bytes` gives them), so every name the workspace holds can be named."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        try:
            return {name: path.decode("utf-8")}
        except UnicodeDecodeError:
            return {name + "_b64": base64.b64encode(path).decode()}
    return {name: path}


def _text_path(path):
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = path.decode("utf-8")
    if not isinstance(path, str) or not path:
        raise InvalidArgumentType("path must be a non-empty str, got %r" % (path,))
    return path


class Sandbox:
    """A session of fresh boxes that share one workspace. Use as a context manager.

    With `name=`, a named sandbox instead (docs/named.md): one box that lives on, with its own
    disk and long-lived processes (`exec`, `spawn`, `stop`, `destroy`). `persist=True` adopts
    the sandbox of that name when it exists (made with the same arguments, else refused naming
    the one that differs) and leaves it running at the end of a `with` block; without it, a
    taken name is a conflict and the sandbox is destroyed at the end of the block. `user=`
    (named only) runs every command as that user of the image (`setup` runs as root).
    `template=` (named only) starts from a saved template (`hull template save`): its disk and
    configuration, the arguments given here over them."""

    def __init__(self, image=None, setup=None, workspace=None, memory_mb=512, cpus=None, pids=256, timeout_s=30, network=False, mounts=None, tmpfs=None, env=None, max_output_bytes=None, deps_readonly=True, security_profile=None, require_limits=False, cap_drop=None, track_files=True, on_stdout=None, on_stderr=None, prewarm=0, setup_timeout_s=600, name=None, persist=False, ro_workspaces=None, idle_timeout_s=None, max_duration_s=None, user=None, template=None, egress_allow=None, secrets=None, isolation=None, require_kvm=False):
        self._config = {k: v for k, v in locals().items() if k in _CONFIG}
        net = _network(network, egress_allow)
        secrets = _secrets(secrets)
        _check("isolation", isolation, str, "'namespace' or 'vm'")
        _check("require_kvm", require_kvm, bool, "True or False")
        if name is not None:
            if isolation not in (None, "namespace") or require_kvm:
                raise InvalidArgument("isolation='vm' is not supported for named sandboxes yet")
            args = dict(locals())
            del args["isolation"], args["require_kvm"]
            del args["self"], args["name"], args["persist"], args["net"], args["egress_allow"]
            # named.create takes no boolean: `False` is the default (not sent), `True` is host.
            args["network"] = net
            self._init_named(name, persist, args)
            return
        for k, v in (("persist", persist), ("ro_workspaces", ro_workspaces), ("idle_timeout_s", idle_timeout_s), ("max_duration_s", max_duration_s), ("user", user), ("template", template)):
            if v not in (None, False):
                raise InvalidArgumentType("%s is an argument of a named sandbox: give name= too" % k)
        self.name = None
        _check("image", image, str, "a string")
        _check("setup", setup, str, "a shell command string")
        _check("workspace", workspace, (str, os.PathLike), "a directory path")
        _check("memory_mb", memory_mb, int, "an int (MiB) or None")
        _check("cpus", cpus, (int, float), "a number or None")
        _check("pids", pids, int, "an int or None")
        _check("timeout_s", timeout_s, (int, float), "a number of seconds")
        _check("mounts", mounts, (list, tuple, dict), "a list of 'SRC:DST[:ro]' strings or a {src: dst} / {src: (dst, 'ro')} dict")
        mounts = _mounts(mounts)
        _check("tmpfs", tmpfs, (dict, list, tuple), "a {path: size} dict")
        _check("env", env, dict, "a dict of strings")
        _check("max_output_bytes", max_output_bytes, int, "an int or None")
        _check("deps_readonly", deps_readonly, bool, "True or False")
        _check("security_profile", security_profile, str, "None or 'default'")
        _check("require_limits", require_limits, bool, "True or False")
        _check("cap_drop", cap_drop, (list, tuple), "a list of capability names")
        _check("track_files", track_files, bool, "True or False")
        _check("prewarm", prewarm, int, "an int")
        _check("setup_timeout_s", setup_timeout_s, (int, float), "a number of seconds")
        _check_callbacks(on_stdout, on_stderr)
        if timeout_s is None or timeout_s <= 0:
            raise InvalidArgument("timeout_s must be more than 0, got %r" % (timeout_s,))
        if memory_mb is not None and memory_mb < 16:
            raise InvalidArgument("memory_mb must be at least 16 (or None for no cap), got %r" % (memory_mb,))
        if prewarm < 0:
            raise InvalidArgument("prewarm must be 0 or more, got %r" % (prewarm,))
        params = {
            "image": image, "setup": setup, "workspace": os.path.abspath(os.fspath(workspace)) if workspace is not None else None,
            "memory_mb": memory_mb, "cpus": cpus, "pids": pids, "timeout_s": timeout_s, "network": net if net is not None else False, "secrets": secrets,
            "mounts": list(mounts) if mounts is not None else None, "tmpfs": tmpfs, "env": env,
            "max_output_bytes": max_output_bytes, "deps_readonly": deps_readonly, "security_profile": security_profile,
            "require_limits": require_limits, "cap_drop": list(cap_drop) if cap_drop is not None else None,
            "track_files": track_files, "prewarm": prewarm, "setup_timeout_s": setup_timeout_s,
        }
        # A microVM per call (docs/vm.md); sent only when asked, so older hulls are not refused.
        if isolation is not None:
            params["isolation"] = isolation
        if require_kvm:
            params["require_kvm"] = True
        self._streamer = _Streamer(on_stdout, on_stderr) if (on_stdout or on_stderr) else None
        binary = find_hull()
        self._server = _Server(binary)
        self._finalizer = weakref.finalize(self, _shutdown, self._server.proc)
        try:
            hello = self._server.call("hello", {})
            if hello.get("protocol") != PROTOCOL or "sandbox.create" not in hello.get("methods", []):
                raise SandboxError("%s speaks protocol %r without sandbox sessions; this package needs protocol %d (reinstall hull-sandbox or point HULL_BIN at a matching hull)" % (binary, hello.get("protocol"), PROTOCOL), "protocol")
            # The setup's output reaches on_stdout/on_stderr while it runs.
            created = self._server.call("sandbox.create", params, self._streaming(params) if setup else None)
        except BaseException:
            self._close_server()
            raise
        self.id = created["sandbox"]
        #: The sandbox's workspace directory on the host (bound at /workspace in every box).
        self.workspace = created["workspace"]
        #: The setup box's output ({stdout, stderr, exit_code, duration_ms}), or None.
        self.setup_result = created.get("setup")
        self._destroyed = False

    def _init_named(self, name, persist, args):
        if not isinstance(name, str):
            raise InvalidArgumentType("name must be a string, got %r" % (name,))
        _named.check_named_args(args, _SANDBOX_DEFAULTS)
        _check("setup", args.get("setup"), (str, list, tuple), "a shell command string or a list of them")
        _check("env", args.get("env"), dict, "a dict of strings")
        self._open_named(name)
        try:
            made = self._server.call("named.create", _named.create_params(name, persist, args))
            self.ports = _published(made)
        except BaseException:
            self._close_server()
            raise
        self._persist = bool(persist)

    def _open_named(self, name):
        self.name = name
        self.id = None
        self.workspace = None
        self.setup_result = None
        self._streamer = None
        self._destroyed = False
        self._persist = True
        # The published ports of the running sandbox, [{"port", "host_port"}] (127.0.0.1 on the
        # host): set by creation, resume and start() (every start publishes new host ports),
        # emptied by stop().
        self.ports = []
        binary = find_hull()
        self._server = _Server(binary)
        self._finalizer = weakref.finalize(self, _shutdown, self._server.proc)
        try:
            hello = self._server.call("hello", {})
            if "named.create" not in hello.get("methods", []):
                raise SandboxError("%s has no named sandboxes; point HULL_BIN at a newer hull" % binary, "protocol")
        except BaseException:
            self._close_server()
            raise

    @classmethod
    def _resume(cls, name):
        sb = cls.__new__(cls)
        # A resumed sandbox's configuration is its creator's; these attributes read None.
        sb._config = {}
        sb._open_named(name)
        try:
            sb.ports = _published(sb._server.call("named.start", {"sandbox": name}))
        except BaseException:
            sb._close_server()
            raise
        return sb

    # -- named sandboxes -----------------------------------------------------------------

    def exec(self, cmd, env=None, cwd=None, timeout_s=None, on_stdout=None, on_stderr=None, user=None):
        """Runs a command in the named sandbox (a list is argv, a str one shell string, run by
        bash, else sh); `env` is merged over the sandbox's for this command only. Past
        timeout_s the command is killed (exit 137). A stopped sandbox starts first. `user`
        (a user of the image, `root` too) runs it as another user than the sandbox's."""
        if self.name is None:
            raise _named.not_named("exec")
        p = _named.command_params(cmd, env, cwd, timeout_s, user)
        p["sandbox"] = self.name
        on_event = None
        if on_stdout is not None or on_stderr is not None:
            p["stream"] = True
            on_event = _named._Collect(on_stdout, on_stderr)
        return ExecutionResult.from_json(self._server.call("named.exec", p, on_event))

    def spawn(self, cmd, env=None, cwd=None, on_stdout=None, on_stderr=None, user=None, stdin=False):
        """Starts a background process and returns its Process at once. It runs on across
        later execs and after this process exits, until kill() or stop(). With stdin=True its
        stdin is a pipe the keeper holds: Process.write(data), then Process.close_stdin()."""
        if self.name is None:
            raise _named.not_named("spawn")
        if not isinstance(stdin, bool):
            raise InvalidArgumentType("stdin must be True or False, got %r" % (stdin,))
        p = _named.command_params(cmd, env, cwd, user=user)
        p["sandbox"] = self.name
        if stdin:
            p["stdin"] = True
        r = self._server.call("named.spawn", p)
        return _named.Process(self, r["process"], on_stdout, on_stderr)

    def process(self, handle):
        """The Process of a handle spawned earlier, by this client or any other (`Process.id`):
        wait on it, read its output from its start, kill it. The keeper owns spawned processes,
        so a handle outlives the client that spawned it (not a stop of the sandbox)."""
        if self.name is None:
            raise _named.not_named("process")
        if not isinstance(handle, str):
            raise InvalidArgumentType("handle must be a str (a Process's id), got %r" % (handle,))
        return _named.Process(self, handle)

    def logs(self, max_bytes=None):
        """What every exec and spawn of the named sandbox printed (`hull logs`), as text; its
        last `max_bytes` bytes when given."""
        if self.name is None:
            raise _named.not_named("logs")
        p = {"sandbox": self.name}
        if max_bytes is not None:
            _check("max_bytes", max_bytes, int, "an int or None")
            p["max_bytes"] = max_bytes
        return self._server.call("named.logs", p)["logs"]

    def set_network_policy(self, network=None, egress_allow=None):
        """Replaces the network policy while the sandbox lives (it was created with a gateway
        mode): its next DNS queries and connections are judged by `network` (a gateway mode's
        name or a dict {mode, allow_hosts, allow_cidrs, deny_cidrs}; `egress_allow` as in the
        constructor). Ports and the connection cap stay as created. A named sandbox's later
        starts keep it, and this returns whether it was running; a session's running boxes (a
        kernel, boxes started ahead) and every later call take it, and this returns how many
        running gateways did."""
        value = _network(network, egress_allow)
        if value is None:
            raise InvalidArgument("set_network_policy needs a gateway mode (deny-all, allow-all or custom) or egress_allow")
        if self.name is None:
            return self._server.call("sandbox.set_network", self._p(network=value))["gateways"]
        return self._server.call("named.set_network", {"sandbox": self.name, "network": value})["running"]

    def stat(self, path):
        """A named sandbox's path: {type, size, mtime_s, mode}, or None when it is missing."""
        if self.name is None:
            raise _named.not_named("stat")
        return self._server.call("named.stat", {"sandbox": self.name, "path": _text_path(path)})

    def delete(self, path):
        """Removes a path of a named sandbox (a directory with what it holds); False if missing."""
        if self.name is None:
            raise _named.not_named("delete")
        return self._server.call("named.delete", {"sandbox": self.name, "path": _text_path(path)})["deleted"]

    def stop(self):
        """Ends every process of the named sandbox; its disk stays (the next exec, or
        hull_sandbox.resume, starts it again)."""
        if self.name is None:
            raise _named.not_named("stop")
        self._server.call("named.stop", {"sandbox": self.name})
        self.ports = []

    def start(self):
        """Starts a stopped named sandbox (nothing when it runs); returns its published ports."""
        if self.name is None:
            raise _named.not_named("start")
        self.ports = _published(self._server.call("named.start", {"sandbox": self.name}))
        return self.ports

    def close(self):
        """Lets go of a named sandbox without stopping it (its server ends; the sandbox and
        its spawned processes run on). A sandbox without a name is destroyed."""
        if self.name is None:
            self.destroy()
            return
        if not self._destroyed:
            self._destroyed = True
            self._close_server()

    # -- calls ---------------------------------------------------------------------------

    def _p(self, **kw):
        kw["sandbox"] = self.id
        return kw

    def _streaming(self, params):
        if self._streamer is None:
            return None
        params["stream"] = True
        return self._streamer.offer

    def _call_streamer(self, on_stdout, on_stderr):
        """Where one call's output goes: a streamer of its own when it gives callbacks (over
        the sandbox's; the caller closes it), else the sandbox's (None without callbacks)."""
        if on_stdout is None and on_stderr is None:
            return self._streamer
        _check_callbacks(on_stdout, on_stderr)
        own = self._streamer.on if self._streamer else {}
        return _Streamer(on_stdout or own.get("stdout"), on_stderr or own.get("stderr"))

    def _call_streamed(self, method, params, on_stdout, on_stderr):
        """One call; `on_stdout`/`on_stderr` of this call (over the sandbox's) get its output."""
        streamer = self._call_streamer(on_stdout, on_stderr)
        if streamer is not None:
            params["stream"] = True
        try:
            r = self._server.call(method, params, streamer.offer if streamer else None)
            return ExecutionResult.from_json(r, streamer.take_dropped() if streamer else 0)
        finally:
            if streamer is not None and streamer is not self._streamer:
                streamer.close()

    def run_code(self, code, language="python", timeout_s=None, env=None, cwd=None, on_stdout=None, on_stderr=None):
        """Runs code in a fresh box. Python returns rich `results`. `timeout_s`, `env` (added
        over the sandbox's) and `cwd` (an absolute path in the box) apply to this call only, as
        do `on_stdout`/`on_stderr`."""
        if not isinstance(code, str):
            raise InvalidArgumentType("code must be a string, got %r" % (type(code).__name__,))
        if language not in _LANGUAGES:
            raise InvalidArgument("language must be one of %s, got %r" % (", ".join(_LANGUAGES), language))
        params = self._p(code=code, language=language, **_call_options(timeout_s, env, cwd))
        return self._call_streamed("sandbox.run_code", params, on_stdout, on_stderr)

    def run(self, argv, timeout_s=None, env=None, cwd=None, on_stdout=None, on_stderr=None, stdin=None):
        """Runs a command (a list of strings) in a fresh box, with this call's own `timeout_s`,
        `env` and `cwd` when given, and `stdin` (str as UTF-8, or bytes) as the program's
        standard input (none: empty)."""
        if isinstance(argv, str) or not all(isinstance(a, str) for a in argv):
            raise InvalidArgumentType("argv must be a list of strings, e.g. ['ls', '-l']")
        params = self._p(argv=list(argv), **_call_options(timeout_s, env, cwd))
        if isinstance(stdin, str):
            params["stdin"] = stdin
        elif isinstance(stdin, (bytes, bytearray, memoryview)):
            params["stdin_b64"] = base64.b64encode(bytes(stdin)).decode()
        elif stdin is not None:
            raise InvalidArgumentType("stdin must be str or bytes, got %s" % type(stdin).__name__)
        return self._call_streamed("sandbox.run", params, on_stdout, on_stderr)

    def write_file(self, path, data):
        """Writes str (UTF-8) or bytes to a workspace path (str, or bytes for a name that is not
        UTF-8), creating parent directories."""
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidArgumentType("data must be str or bytes")
        if self.name is not None:
            # A named sandbox: any path of its root (relative: below /workspace), parents made.
            self._server.call("named.write_file", {"sandbox": self.name, "path": _text_path(path), "data_b64": base64.b64encode(bytes(data)).decode()})
            return
        self._server.call("sandbox.write_file", self._p(data_b64=base64.b64encode(bytes(data)).decode(), **_path("path", path)))

    def read_file(self, path, max_bytes=None):
        """Reads a regular file of the workspace as bytes. `path` is str, or bytes for a name that
        is not UTF-8 (`FileEntry.path_bytes`). `max_bytes` bounds what is read: a larger file
        raises InvalidArgument naming its size (never a silent prefix)."""
        _check("max_bytes", max_bytes, int, "an int or None")
        if max_bytes is not None and max_bytes < 0:
            raise InvalidArgument("max_bytes must be 0 or more, got %r" % (max_bytes,), "max_bytes")
        if self.name is not None:
            # A named sandbox: None for a missing file; a directory raises (kind is_a_directory);
            # a file larger than max_bytes (or than one read returns) raises, naming the limit.
            r = self._server.call("named.read_file", {"sandbox": self.name, "path": _text_path(path), "max_bytes": max_bytes})
            return None if r is None else base64.b64decode(r["data_b64"])
        r = self._server.call("sandbox.read_file", self._p(max_bytes=max_bytes, **_path("path", path)))
        if r.get("truncated"):
            raise InvalidArgument("%s is %d bytes, more than max_bytes=%d; raise max_bytes, or read a range of lines with read_text(lines=...)" % (_shown(path), r.get("size", 0), max_bytes), "max_bytes")
        return base64.b64decode(r["data_b64"])

    def read_text(self, path, lines=None, encoding="utf-8", errors="strict"):
        """A file as text (None for a missing file of a named sandbox). `lines=(first, last)`
        keeps lines first to last, counted from 1, both included (`last` None: to the end);
        each line keeps its newline (lines end at "\\n" only). A named sandbox's keeper cuts the
        range; a session's workspace file is cut here."""
        if lines is not None:
            if not (isinstance(lines, (tuple, list)) and len(lines) == 2 and isinstance(lines[0], int) and not isinstance(lines[0], bool) and lines[0] >= 1
                    and (lines[1] is None or (isinstance(lines[1], int) and not isinstance(lines[1], bool) and lines[1] >= lines[0]))):
                raise InvalidArgument("lines must be (first, last): line numbers from 1, first <= last (last None: to the end), got %r" % (lines,))
        if self.name is not None:
            # A named sandbox: its keeper cuts the range (only those lines cross the socket).
            p = {"sandbox": self.name, "path": _text_path(path)}
            if lines is not None:
                p["start_line"] = lines[0]
                if lines[1] is not None:
                    p["end_line"] = lines[1]
            r = self._server.call("named.read_file", p)
            return None if r is None else base64.b64decode(r["data_b64"]).decode(encoding, errors)
        data = self.read_file(path)
        if data is None:
            return None
        text = data.decode(encoding, errors)
        if lines is None:
            return text
        first, last = lines
        # Lines end at "\n" only (not at the other characters str.splitlines breaks at).
        parts = text.split("\n")
        found = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        return "".join(found[first - 1:last])

    def list_files(self, subdir=""):
        """Every entry below subdir (recursive, symlinks listed, never followed). A name that is
        not UTF-8 shows U+FFFD in `path`; `path_bytes` is exact and read_file/write_file take it."""
        if self.name is not None:
            # A named sandbox: the entries of one directory (not recursive); None if it is missing.
            r = self._server.call("named.list_files", {"sandbox": self.name, "path": _text_path(subdir or "/workspace")})
            return None if r is None else [FileEntry(e["name"], e["type"], e["size"]) for e in r["entries"]]
        r = self._server.call("sandbox.list_files", self._p(**_path("subdir", subdir)))
        return [FileEntry(e["path"], e["type"], e["size"], base64.b64decode(e["path_b64"]) if "path_b64" in e else None) for e in r["entries"]]

    def snapshot(self, dest):
        """Writes the workspace as a .tar.gz at dest (a host path)."""
        return self._server.call("sandbox.snapshot", self._p(dest=os.path.abspath(os.fspath(dest))))

    def restore(self, src):
        """Replaces the workspace's contents with a .tar.gz (hostile members are refused)."""
        return self._server.call("sandbox.restore", self._p(src=os.path.abspath(os.fspath(src))))

    def kernel(self, timeout_s=None):
        """Starts one warm interpreter in a long-lived box; state is kept between its cells.
        `timeout_s` is each cell's deadline (the sandbox's by default; a cell may give its own)."""
        _call_options(timeout_s, None, None)
        srv = self._server
        if srv.fds is None:
            return Kernel(self, srv.call("kernel.start", self._p())["kernel"], timeout_s)
        # Started and attached in one round trip: its cells then skip the server.
        with srv.attaching:
            r = srv.call("kernel.start", self._p(attach=True))
            k = Kernel(self, r["kernel"], timeout_s)
            try:
                k._chan = _direct.Channel(socket.socket(fileno=srv.take_fd(k.id)), r["attached"])
            except BaseException:
                k.close()
                raise
        self.__dict__.setdefault("_attached", weakref.WeakSet()).add(k)
        return k

    def destroy(self):
        """Ends every box of the sandbox, removes its directories and stops its server."""
        if getattr(self, "name", None) is not None:
            # A named sandbox: removed for good (running or stopped), then let go of.
            if not self._server._closed:
                try:
                    self._server.call("named.rm", {"sandbox": self.name})
                finally:
                    self._destroyed = True
                    self._close_server()
            return
        if getattr(self, "_destroyed", True):
            return
        self._destroyed = True
        try:
            self._server.call("sandbox.destroy", self._p())
        except SandboxError:
            pass
        self._close_server()

    def _close_server(self):
        # Attached kernels' channels and workspace descriptors: their boxes are gone with it.
        for k in list(getattr(self, "_attached", ())):
            with k._lock:
                k._drop_channel()
        self._server.close()
        if self._streamer is not None:
            self._streamer.close()
        self._finalizer.detach()

    @property
    def server_pid(self):
        return self._server.proc.pid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if getattr(self, "name", None) is not None and self._persist:
            self.close()
        else:
            self.destroy()
        return False


_SANDBOX_DEFAULTS = {k: v.default for k, v in inspect.signature(Sandbox.__init__).parameters.items()}


def list_sandboxes():
    """Every named sandbox of this user (`hull ps`): dicts with name, state (running or
    stopped), image, user, age_s and size_bytes."""
    sb = Sandbox.__new__(Sandbox)
    sb._open_named(None)
    try:
        return sb._server.call("named.list", {})["sandboxes"]
    finally:
        sb._close_server()


def resume(name):
    """The named sandbox `name`, started again if it was stopped (same configuration, disk and
    working directory). A missing one is a SandboxError of kind `not_found`."""
    return Sandbox._resume(name)


#: The arguments a Sandbox exposes as read-only attributes (`sb.timeout_s`, `sb.image`, ...),
#: as they were given (`secrets` is left out: it can hold values).
_CONFIG = ("image", "setup", "memory_mb", "cpus", "pids", "timeout_s", "network", "mounts", "tmpfs", "env", "max_output_bytes", "deps_readonly", "security_profile", "require_limits", "cap_drop", "track_files", "prewarm", "setup_timeout_s", "persist", "ro_workspaces", "idle_timeout_s", "max_duration_s", "user", "template", "egress_allow")


def _config_property(name):
    def get(self):
        return copy.copy(self._config.get(name))

    return property(get, doc="The `%s` this sandbox was made with (read-only)." % name)


for _name in _CONFIG:
    setattr(Sandbox, _name, _config_property(_name))
del _name


class Kernel:
    """One warm interpreter (a long-lived box): cells share globals. Use as a context manager."""

    def __init__(self, sandbox, kernel_id, timeout_s=None):
        self._sb = sandbox
        self.id = kernel_id
        #: Each cell's deadline unless the cell gives its own (None: the sandbox's).
        self.timeout_s = timeout_s
        #: The interpreter's channel when attached (cells then skip the server), until the
        #: kernel ends; one cell at a time goes over it.
        self._chan = None
        self._lock = threading.Lock()

    def run_code(self, code, timeout_s=None, on_stdout=None, on_stderr=None):
        """Runs one cell; `timeout_s` over the kernel's. A cell that passes it ends the kernel."""
        if not isinstance(code, str):
            raise InvalidArgumentType("code must be a string")
        t = timeout_s if timeout_s is not None else self.timeout_s
        options = _call_options(t, None, None)
        with self._lock:
            if self._chan is not None and not self._sb._server._closed:
                return self._direct(code, options.get("timeout_s", self._chan.timeout_s), on_stdout, on_stderr)
        # Not attached, or ended (the server then says why a cell cannot run).
        params = self._sb._p(kernel=self.id, code=code, **options)
        return self._sb._call_streamed("kernel.run_code", params, on_stdout, on_stderr)

    def _direct(self, code, timeout_s, on_stdout, on_stderr):
        sb = self._sb
        streamer = sb._call_streamer(on_stdout, on_stderr)
        end = lambda how, **kw: sb._server.call("kernel.end", sb._p(kernel=self.id, end=how, **kw))  # noqa: E731
        try:
            r, alive = self._chan.run(code, timeout_s, streamer.offer if streamer else None, end)
        except BaseException:
            # Interrupted mid-cell (KeyboardInterrupt, the server gone): the channel may hold
            # this cell's frames, which the next cell would take for its own. The kernel ends.
            self._drop_channel()
            try:
                end("broken", warning="the caller stopped reading the cell's frames")
            except BaseException:
                pass
            raise
        finally:
            if streamer is not None and streamer is not sb._streamer:
                streamer.close()
        if not alive:
            self._drop_channel()
        return ExecutionResult.from_json(r, streamer.take_dropped() if streamer else 0)

    def _drop_channel(self):
        if self._chan is not None:
            self._chan.close()
            self._chan = None

    def close(self):
        try:
            self._sb._server.call("kernel.close", self._sb._p(kernel=self.id))
        except SandboxError:
            pass
        with self._lock:
            self._drop_channel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def run_code(code, language="python", **sandbox_args):
    """Runs code once in a fresh sandbox and returns its ExecutionResult."""
    with Sandbox(**sandbox_args) as sb:
        return sb.run_code(code, language=language)
