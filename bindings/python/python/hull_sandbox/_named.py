"""Named sandboxes (`Sandbox(name=..., persist=True)`, `resume(name)`): one box that lives on
past this process, reached through `hull serve`'s `named.*` methods (docs/named.md).

A named Sandbox keeps a `hull serve` process of its own only to talk to the sandbox's keeper;
closing it (or this process exiting) leaves the sandbox and what `spawn` started running.
"""

import base64
import os
import threading

from ._errors import InvalidArgument, InvalidArgumentType, SandboxError
from ._result import ExecutionResult

#: The arguments a named sandbox is made with (by their SDK names). Sandbox's other arguments
#: belong to sessions of fresh boxes and are refused with `name=`.
NAMED_ARGS = ("image", "setup", "workspace", "ro_workspaces", "memory_mb", "cpus", "pids", "env", "idle_timeout_s", "max_duration_s", "user", "template", "network", "secrets")


def check_env(env):
    """`env` when it is a dict of strings (a copy); else InvalidArgumentType naming it."""
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise InvalidArgumentType("env must be a dict of strings, got %r" % (env,))
    return dict(env)


def command_params(cmd, env, cwd, timeout_s=None, user=None):
    """`cmd` as `named.exec`'s parameters: a list is argv, a str one shell string."""
    if isinstance(cmd, str):
        p = {"shell": cmd}
    elif isinstance(cmd, (list, tuple)) and cmd and all(isinstance(a, str) for a in cmd):
        p = {"argv": list(cmd)}
    else:
        raise InvalidArgumentType("cmd must be a shell string or a non-empty list of strings, got %r" % (cmd,))
    if env is not None:
        p["env"] = check_env(env)
    if cwd is not None:
        p["cwd"] = os.fspath(cwd)
    if user is not None:
        if not isinstance(user, str):
            raise InvalidArgumentType("user must be a string (NAME, UID, NAME:GROUP or UID:GID), got %r" % (user,))
        p["user"] = user
    if timeout_s is not None:
        if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or timeout_s <= 0:
            raise InvalidArgument("timeout_s must be a number of seconds more than 0, got %r" % (timeout_s,))
        p["timeout_s"] = timeout_s
    return p


class _Collect:
    """Streamed output handed to callbacks (in order, on the reading thread) and kept, in order
    of arrival too, for iterators (`finish` wakes them at the end)."""

    def __init__(self, on_stdout, on_stderr):
        self.on = {"stdout": on_stdout, "stderr": on_stderr}
        self.parts = {"stdout": [], "stderr": []}
        self.events = []
        self.finished = False
        self.cond = threading.Condition()

    def finish(self):
        with self.cond:
            self.finished = True
            self.cond.notify_all()

    def follow(self, error):
        """(stream, data) chunks from the first, waiting for more until finish(); then raises
        error() if it gives one."""
        i = 0
        while True:
            with self.cond:
                while i >= len(self.events) and not self.finished:
                    self.cond.wait()
                if i >= len(self.events):
                    break
                item = self.events[i]
            i += 1
            yield item
        e = error()
        if e is not None:
            raise e

    def __call__(self, event, data):
        if event in self.parts:
            self.parts[event].append(data)
            with self.cond:
                self.events.append((event, data))
                self.cond.notify_all()
            cb = self.on.get(event)
            if cb is not None:
                try:
                    cb(data)
                except Exception:  # a callback's error must not kill the reader
                    import traceback

                    traceback.print_exc()


class Process:
    """A background process started by `Sandbox.spawn`: it runs on after this object, this
    process and later execs, until `kill()` or the sandbox stops. Its output (from its start) is
    streamed to the spawn's callbacks and kept: `stdout`/`stderr` so far, `wait()` for the end.
    `Sandbox.process(id)` gives the Process of a handle in another client."""

    def __init__(self, sandbox, handle, on_stdout=None, on_stderr=None):
        self._sb = sandbox
        #: The process's handle (`named.wait`/`named.kill` take it).
        self.id = handle
        self._collect = _Collect(on_stdout, on_stderr)
        self._done = threading.Event()
        self._result = None
        self._error = None
        self._t = threading.Thread(target=self._follow, name="hull-spawn-%s" % handle, daemon=True)
        self._t.start()

    def _follow(self):
        try:
            r = self._sb._server.call("named.wait", {"sandbox": self._sb.name, "process": self.id, "stream": True}, self._collect)
            self._result = ExecutionResult.from_json(r)
        except BaseException as e:  # handed to wait()
            self._error = e
        self._done.set()
        self._collect.finish()

    def output(self):
        """Iterates over the process's output as it comes: `(stream, text)` pairs ("stdout" or
        "stderr") in order of arrival, from its start (every iterator sees all of it), ending
        when the process ends. `for stream, text in process:` is the same."""
        return self._collect.follow(lambda: self._error)

    def __iter__(self):
        return self.output()

    def lines(self, stream="stdout"):
        """Iterates over the lines (with their newline; a last one without) one stream printed,
        as they come, ending when the process ends."""
        if stream not in ("stdout", "stderr"):
            raise InvalidArgument("stream must be 'stdout' or 'stderr', got %r" % (stream,))
        rest = ""
        for s, text in self.output():
            if s != stream:
                continue
            rest += text
            *done, rest = rest.split("\n")
            for line in done:
                yield line + "\n"
        if rest:
            yield rest

    @property
    def stdout(self):
        """What the process printed on stdout so far."""
        return "".join(self._collect.parts["stdout"])

    @property
    def stderr(self):
        return "".join(self._collect.parts["stderr"])

    def wait(self, timeout_s=None):
        """Waits for the process to end: its ExecutionResult (exit code 128+N for signal N, 137
        once killed). Raises TimeoutError after timeout_s (the process runs on)."""
        if not self._done.wait(timeout_s):
            raise TimeoutError("process %s still runs after %ss" % (self.id, timeout_s))
        if self._error is not None:
            raise self._error
        return self._result

    def poll(self):
        """The exit code, or None while it runs."""
        return self._result.exit_code if self._done.is_set() and self._result is not None else None

    def write(self, data):
        """Writes to the stdin of a process spawned with stdin=True (str as UTF-8, or bytes);
        returns once the keeper has written it all (a process that does not read holds it)."""
        self._write_stdin(data, False)

    def close_stdin(self, data=b""):
        """Closes the process's stdin (it reads end of file), after writing `data`."""
        self._write_stdin(data, True)

    def _write_stdin(self, data, eof):
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidArgumentType("data must be str or bytes, got %s" % type(data).__name__)
        p = {"sandbox": self._sb.name, "process": self.id, "data_b64": base64.b64encode(bytes(data)).decode("ascii")}
        if eof:
            p["eof"] = True
        self._sb._server.call("named.write_stdin", p)

    def kill(self):
        """Kills the process and everything it started, daemons that left its session
        included (its own cgroup; exit 137); a process that has ended already keeps its code.
        Idempotent."""
        self._sb._server.call("named.kill", {"sandbox": self._sb.name, "process": self.id})
        return self.wait(30)

    def __repr__(self):
        return "Process(%r, sandbox=%r)" % (self.id, self._sb.name)


def check_named_args(given, defaults):
    """Refuses a session-only argument given with `name=` (its value differs from the default)."""
    for k, v in given.items():
        if k not in NAMED_ARGS and k not in ("on_stdout", "on_stderr", "timeout_s") and v != defaults.get(k):
            raise InvalidArgumentType("%s is not an argument of a named sandbox (those are: %s)" % (k, ", ".join(NAMED_ARGS)))


def create_params(name, persist, args):
    p = {"name": name, "adopt": bool(persist)}
    for k in NAMED_ARGS:
        v = args.get(k)
        if v is None:
            continue
        if k == "workspace":
            v = os.path.abspath(os.fspath(v))
        elif k == "ro_workspaces":
            v = [os.path.abspath(os.fspath(x)) for x in v]
        elif k == "setup" and isinstance(v, str):
            v = [v]
        p[k] = v
    if "pids" in p and p["pids"] is None:
        p["pids"] = 0
    return p


def not_named(what):
    return SandboxError("%s needs a named sandbox: Sandbox(name=...)" % what, "invalid_argument")
