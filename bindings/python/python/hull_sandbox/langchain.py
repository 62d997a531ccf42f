"""LangChain over hull: a tool that runs a model's code in a hull sandbox (needs langchain-core),
and an execution policy for LangChain's shell middleware (needs langchain).

`hull_code_tool(**sandbox_args)` starts one Sandbox (its workspace persists across the tool's
calls; every call is a fresh network-off box) and returns a LangChain tool. The tool's output is
text written for a model to act on: stdout, the trailing value, the traceback on error, a labelled
sandbox fault (`[sandbox: timeout] ...`) and a mention of each image result. The program's own
output cannot forge those labels: terminal escapes, control and invisible characters are
stripped, and a `[sandbox` it prints (or one with a look-alike bracket) is shown as `(sandbox`,
also at the edges of a cut.

`hull_execution_policy(...)` is a policy for `ShellToolMiddleware(execution_policy=...)` (a peer of
langchain's `DockerExecutionPolicy`): the middleware's long-lived shell runs in a named sandbox
(`hull exec -i NAME -- bash`), one sandbox for the whole agent run.
"""

import os
import re
import subprocess
import threading
import uuid
import weakref
from typing import Literal, Optional, Type

try:
    from langchain_core.tools import BaseTool, ToolException
    from pydantic import BaseModel, Field, PrivateAttr
except ImportError as e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "hull_sandbox.langchain needs langchain-core: pip install 'hull-sandbox[langchain]' "
        "(or pip install langchain-core)"
    ) from e

from ._errors import InvalidArgument, InvalidArgumentType
from ._sandbox import Sandbox, find_hull

__all__ = ["hull_code_tool", "HullCodeTool", "format_result", "hull_execution_policy"]

#: Characters of each of stdout, stderr and a text result kept in the tool's output.
DEFAULT_MAX_CHARS = 8000

# CSI/OSC/other escape sequences, then any C0/C1 control character but tab and newline.
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Characters that show as nothing: Unicode's Default_Ignorable_Code_Point set (zero-width
# characters and joiners, bidi controls, the combining grapheme joiner, variation selectors, tag
# characters, Hangul fillers, Mongolian selectors, Khmer inherent vowels, BOM, ...) plus the
# braille blank and the interlinear annotation marks. They could hide text or split a `[sandbox`
# so it escapes the rewrite below. (`hull mcp` strips the same set: crates/hull-cli/src/mcp/sanitize.rs.)
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]"
)
# Opening brackets a reader could take for `[` (reviewed from Unicode's opening brackets: square
# brackets with quills, strokes, ticks and underbars, white square brackets, bracket pieces, half
# brackets, ceiling and floor, tortoise-shell, lenticular and corner brackets, editorial brackets,
# and their fullwidth, halfwidth, small and vertical forms; not parentheses, braces or angle
# brackets). `hull mcp` escapes the same list (sanitize.rs: OPENERS).
_OPENERS = (
    "[\uff3b\u2045\u2308\u230a\u23a1\u23a2\u23a3\u2772\u27e6\u27ec\u298b\u298d\u298f\u2997\u2e02\u2e04"
    "\u2e09\u2e0c\u2e1c\u2e22\u2e24\u2e55\u2e57\u300c\u300e\u3010\u3014\u3016\u3018\u301a\ufe17\ufe39"
    "\ufe3b\ufe41\ufe43\ufe47\ufe5d\uff62"
)
# An opening bracket (ASCII or a look-alike) before "sandbox": what could pass for a label.
_LABEL = re.compile("[%s](\\s*)(sandbox)" % re.escape(_OPENERS), re.IGNORECASE)
_IMAGES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")


def _clean(text, max_chars):
    """Program output made safe to frame: no escapes, control or invisible characters, at most
    max_chars (the middle is cut, with a marker saying how much), and no forged labels. The label
    rewrite comes after the cut, so no cut point can bring a label back."""
    text = _CONTROLS.sub("", _ESCAPES.sub("", text.replace("\r\n", "\n").replace("\r", "\n")))
    text = _INVISIBLE.sub("", text)
    if len(text) <= max_chars:
        return _unlabel(text)
    head, tail = max_chars * 2 // 3, max_chars // 3
    cut = len(text) - head - tail
    return "%s\n[... %d characters cut ...]\n%s" % (_unlabel(text[:head]), cut, _unlabel(text[-tail:]))


def _unlabel(text):
    """`[sandbox` (or with a look-alike bracket) becomes `(sandbox`: only the tool writes labels."""
    return _LABEL.sub(r"(\1\2", text)


def format_result(r, max_chars=DEFAULT_MAX_CHARS):
    """An ExecutionResult as text for a model: what it printed, its value, its error, its fault."""
    parts = []
    if r.stdout:
        parts.append("stdout:\n" + _clean(r.stdout, max_chars).rstrip("\n"))
    for res in r.results:
        images = [m for m in _IMAGES if m in res.data]
        for m in images:
            size = len(res.png or b"") if m == "image/png" else len(res.jpeg or b"") if m == "image/jpeg" else len(res.data[m].encode())
            parts.append("[%s result: %d bytes]" % (m, size))
        if res.text is not None and not (images and res.text.startswith("<Figure")):
            parts.append("result:\n" + _clean(res.text, max_chars))
        elif res.text is None and not images and res.data:
            parts.append("[result in %s]" % ", ".join(res.data))
    if r.stderr:
        parts.append("stderr:\n" + _clean(r.stderr, max_chars).rstrip("\n"))
    if r.truncated:
        parts.append("[sandbox: output truncated] the program wrote more than the output cap; the rest was dropped")
    if r.fault is not None:
        parts.append("[sandbox: %s] %s" % (r.fault.type, _clean(r.fault.reason, 2000)))
    elif r.exit_code != 0:
        parts.append("[exit code %d]" % r.exit_code)
    if r.files:
        parts.append("[files changed: %s]" % ", ".join(_clean("/workspace/%s (%s)" % (f.path, f.change), 500) for f in r.files[:50]) + (" ..." if len(r.files) > 50 else ""))
    if not parts:
        parts.append("[no output] the code ran without printing anything and without a trailing value")
    return "\n".join(parts)


class RunCodeInput(BaseModel):
    code: str = Field(description="The program to run. In Python the value of a trailing expression is shown, like a notebook cell.")
    language: Literal["python", "bash", "sh", "node"] = Field(default="python", description="python (default), bash, sh or node")


class CodeInput(BaseModel):
    code: str = Field(description="The program to run, in the tool's language (a Markdown code fence around it is fine).")


# A Markdown fence around the whole code (```python ... ```), as models often write it.
_FENCE = re.compile(r"\A\s*```[\w+-]*[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)


def _unfenced(code):
    m = _FENCE.match(code)
    return m.group(1) if m else code


def _failed(r):
    """The code raised, exited non-zero or a fault ended it: the ToolMessage's status is error."""
    return r.fault is not None or r.exit_code != 0


class HullCodeTool(BaseTool):
    """Runs code in a hull sandbox; see `hull_code_tool`. `close()` destroys the sandbox."""

    name: str = "run_code"
    description: str = (
        "Run code in an isolated sandbox and see its output. Each call is a fresh process with no "
        "network; files written under /workspace (the working directory) persist between calls. "
        "Returns stdout, the value of a trailing Python expression, the traceback on error, "
        "images produced (matplotlib figures are captured), and a [sandbox: ...] label when the "
        "sandbox stopped the program (timeout, out of memory, blocked system call)."
    )
    args_schema: Type[BaseModel] = RunCodeInput
    # The model reads the text; the application gets the ExecutionResult (charts as bytes) as
    # the ToolMessage's artifact.
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    # A failed run (an exception, a non-zero exit, a fault) is a ToolException: its text is the
    # content and the ToolMessage's status is "error" (the artifact is then none).
    handle_tool_error: bool = True
    max_chars: int = DEFAULT_MAX_CHARS
    #: The one language of a tool made with `language=` (its input is then only `code`).
    language: Optional[str] = None
    #: Code longer than this (UTF-8 bytes) is refused without running.
    max_code_bytes: Optional[int] = None

    _sandbox: Optional[Sandbox] = PrivateAttr(default=None)
    _owned: bool = PrivateAttr(default=True)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def _run(self, code, language="python", run_manager=None):
        with self._lock:
            sb = self._sandbox
        if sb is None:
            raise ToolException("[sandbox: closed] this tool's sandbox was destroyed")
        code = _unfenced(code)
        if self.max_code_bytes is not None and len(code.encode("utf-8", "surrogatepass")) > self.max_code_bytes:
            raise ToolException("[sandbox: refused] the code is %d bytes, more than this tool's max_code_bytes=%d; send less" % (len(code.encode("utf-8", "surrogatepass")), self.max_code_bytes))
        r = sb.run_code(code, language=self.language or language)
        text = format_result(r, self.max_chars)
        if _failed(r):
            raise ToolException(text)
        return text, r

    @property
    def sandbox(self):
        """The Sandbox the tool runs in (read files the model wrote, restore a snapshot, ...)."""
        return self._sandbox

    def close(self):
        """Destroys the sandbox the tool made; one it was handed stays the caller's."""
        with self._lock:
            sb, self._sandbox = self._sandbox, None
        if sb is not None and self._owned:
            sb.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


_LANG_NAMES = {"python": "Python", "bash": "bash", "sh": "POSIX sh", "node": "JavaScript (Node.js)"}


def hull_code_tool(sandbox=None, *, language=None, name=None, description=None, max_chars=DEFAULT_MAX_CHARS, max_code_bytes=None, **sandbox_args):
    """A LangChain tool running code in a hull Sandbox.

    `hull_code_tool(sb, language="python")` wraps an open Sandbox (kern's shape): the caller
    keeps it (`close()` leaves it running). `hull_code_tool(timeout_s=..., memory_mb=...)`
    makes one from the Sandbox() arguments, started now so a bad argument raises here;
    `close()` (or `with`) destroys it. With `language`, the tool runs that language only, takes
    only `code`, and is named for it (`run_python`, `run_bash`, ...); without, it takes
    `language` too and is named `run_code`. A Markdown fence around the code is stripped. A run
    that raised, exited non-zero or was stopped by the sandbox comes back with status "error".
    """
    if isinstance(sandbox, str) and name is None:
        # The older shape: hull_code_tool("tool_name", **sandbox_args).
        sandbox, name = None, sandbox
    if sandbox is not None and not isinstance(sandbox, Sandbox):
        raise InvalidArgumentType("sandbox must be an open hull_sandbox.Sandbox, got %r" % (sandbox,))
    if sandbox is not None and sandbox_args:
        raise InvalidArgumentType("%s: Sandbox() arguments go with no sandbox (the tool then makes one), not with an open sandbox" % ", ".join(sorted(sandbox_args)))
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 100:
        raise InvalidArgument("max_chars must be an int of at least 100, got %r" % (max_chars,))
    if max_code_bytes is not None and (not isinstance(max_code_bytes, int) or isinstance(max_code_bytes, bool) or max_code_bytes < 1):
        raise InvalidArgument("max_code_bytes must be a positive int or None, got %r" % (max_code_bytes,))
    if language is not None and language not in _LANG_NAMES:
        raise InvalidArgument("language must be one of %s, got %r" % (", ".join(_LANG_NAMES), language))
    fields = {"name": name or ("run_%s" % language if language else "run_code"), "max_chars": max_chars, "max_code_bytes": max_code_bytes, "language": language}
    if language is not None:
        fields["args_schema"] = CodeInput
        fields["description"] = (
            "Run %s code in an isolated sandbox and see its output. Each call is a fresh process "
            "with no network; files written under /workspace (the working directory) persist "
            "between calls. Returns what the program printed%s, errors, and a [sandbox: ...] "
            "label when the sandbox stopped it (timeout, out of memory, blocked system call)."
        ) % (_LANG_NAMES[language], ", the value of a trailing expression and images (matplotlib figures)" if language == "python" else "")
    if description is not None:
        fields["description"] = description
    tool = HullCodeTool(**fields)
    if sandbox is not None:
        tool._sandbox, tool._owned = sandbox, False
    else:
        tool._sandbox = Sandbox(**sandbox_args)
    return tool


# -- the shell middleware's execution policy ----------------------------------------------------

_POLICY_MISSING = (
    "hull_execution_policy needs langchain (the package with the shell middleware, not only "
    "langchain-core): pip install 'hull-sandbox[langchain-shell]' (or pip install langchain)"
)

#: How long a non-persistent sandbox outlives its session's last shell: the middleware restarts a
#: shell (after a command timeout, or when the model asks) by stopping it and spawning the next
#: one at once, and that next shell must find the sandbox, its files and processes, still there.
_REMOVE_AFTER_S = 2.0

_POLICY_CLASS = []


def _policy_class():
    """HullExecutionPolicy, defined against the installed langchain on first use (importing this
    module needs only langchain-core)."""
    if _POLICY_CLASS:
        return _POLICY_CLASS[0]
    try:
        from langchain.agents.middleware.shell_tool import BaseExecutionPolicy
    except ImportError:
        try:
            from langchain.agents.middleware._execution import BaseExecutionPolicy
        except ImportError as e:
            raise ImportError(_POLICY_MISSING) from e
    import dataclasses
    from typing import Any, Sequence, Union

    @dataclasses.dataclass
    class HullExecutionPolicy(BaseExecutionPolicy):
        """Runs the shell middleware's long-lived shell in a hull named sandbox (see
        `hull_execution_policy`)."""

        name: Optional[str] = None
        persist: bool = False
        image: Optional[str] = None
        setup: Union[str, Sequence[str], None] = None
        memory_mb: Optional[int] = 512
        cpus: Optional[float] = None
        pids: Optional[int] = 256
        ro_workspaces: Optional[Sequence[str]] = None
        mount_workspace: bool = True
        idle_timeout_s: Optional[float] = None
        max_duration_s: Optional[float] = None
        _shells: Any = dataclasses.field(init=False, repr=False, compare=False, default=None)

        def __post_init__(self):
            super().__post_init__()
            _check_policy(self)
            self._shells = _Shells(self.persist)
            weakref.finalize(self, self._shells.close)

        def spawn(self, *, workspace, env, command):
            """Starts `command` (the middleware's shell) in this session's sandbox, made (or, with
            persist, adopted) on the session's first spawn, and returns the `hull exec -i`
            process: its stdin, stdout and stderr are the shell's."""
            return self._shells.spawn(self, workspace, env, command)

        def sandboxes(self):
            """The names of the sandboxes this policy's sessions use now."""
            return self._shells.names()

        def close(self):
            """Ends every shell this policy started and removes its sandboxes (not a persistent
            one). Also done when the policy is garbage-collected or the interpreter exits."""
            self._shells.close()

    _POLICY_CLASS.append(HullExecutionPolicy)
    return HullExecutionPolicy


_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def _check_policy(p):
    """The policy's own fields, checked when it is made (not at the agent's first command)."""
    def number(field, v, least, kind=(int, float)):
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool) or v < least):
            raise InvalidArgument("%s must be %s of at least %s or None, got %r" % (field, "an int" if kind is int else "a number", least, v))

    if p.name is not None and (not isinstance(p.name, str) or not _NAME.fullmatch(p.name)):
        raise InvalidArgument("name must be 1 to 63 of a-z, 0-9, _, ., - starting with a letter or digit, got %r" % (p.name,))
    if p.persist and p.name is None:
        raise InvalidArgument("persist=True needs name=: the sandbox later agent runs come back to")
    if p.setup is not None and not isinstance(p.setup, str) and not (isinstance(p.setup, (list, tuple)) and all(isinstance(c, str) for c in p.setup)):
        raise InvalidArgumentType("setup must be a shell command string or a list of them, got %r" % (p.setup,))
    if p.image is not None and not isinstance(p.image, str):
        raise InvalidArgumentType("image must be a string, got %r" % (p.image,))
    number("memory_mb", p.memory_mb, 16, int)
    number("pids", p.pids, 0, int)
    number("cpus", p.cpus, 0.01)
    number("idle_timeout_s", p.idle_timeout_s, 0.001)
    number("max_duration_s", p.max_duration_s, 0.001)


def __getattr__(name):
    if name == "HullExecutionPolicy":
        return _policy_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


class _Session:
    """One shell session of the middleware (an agent run) and its sandbox. The middleware hands
    every spawn of a session the same `env` dict (its ShellSession keeps it), so that object tells
    a restart of a session's shell from a new session; it is held here so its id stays unique."""

    __slots__ = ("env", "name", "live", "timer")

    def __init__(self, env, name):
        self.env = env
        self.name = name
        self.live = set()
        self.timer = None


def _remove(name):
    subprocess.run([find_hull(), "rm", name], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)


class _Shells:
    """The sessions of one policy: their sandboxes, live shells and pending removals."""

    def __init__(self, persist):
        self.persist = persist
        self.lock = threading.Lock()
        self.sessions = {}
        self.closed = False

    def names(self):
        with self.lock:
            return sorted({s.name for s in self.sessions.values()})

    def spawn(self, policy, workspace, env, command):
        stale = []
        with self.lock:
            if self.closed:
                raise RuntimeError("this hull execution policy was closed")
            s = self.sessions.get(id(env))
            if s is not None and s.env is env:
                # A restart: the same sandbox, whose removal (if pending) is called off.
                if s.timer is not None:
                    s.timer.cancel()
                    s.timer = None
            else:
                s = None
                name = policy.name or "lc-shell-" + uuid.uuid4().hex[:12]
                # An ended session of this name whose removal is pending goes first.
                for k, o in list(self.sessions.items()):
                    if o.name == name and not o.live and o.timer is not None:
                        o.timer.cancel()
                        stale.append(self.sessions.pop(k))
        if s is None:
            if not self.persist and stale:
                _remove(name)
            _make(policy, name, workspace)
            s = _Session(env, name)
            with self.lock:
                self.sessions[id(env)] = s
        argv = [find_hull(), "exec", "-i", "-w", "/workspace"]
        for k in env:
            argv += ["-e", k]  # the value from hull exec's environment: never on a command line
        argv += [s.name, "--", *command]
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, encoding="utf-8", errors="replace", bufsize=1,
                env=dict(os.environ, **{k: str(v) for k, v in env.items()}),
                # Its own process group: the middleware kills a stuck shell with killpg, which
                # ends `hull exec`, and the keeper then kills the shell's tree in the sandbox.
                start_new_session=True,
            )
        except BaseException:
            self._ended(s, None)
            raise
        with self.lock:
            s.live.add(proc)
        threading.Thread(target=self._watch, args=(s, proc), name="hull-shell-" + s.name, daemon=True).start()
        return proc

    def _watch(self, s, proc):
        proc.wait()
        self._ended(s, proc)

    def _ended(self, s, proc):
        """A shell ended: its session ends (and its sandbox goes, unless persistent) once no shell
        of the session follows soon."""
        with self.lock:
            s.live.discard(proc)
            if s.live or s.timer is not None or self.sessions.get(id(s.env)) is not s:
                return
            s.timer = threading.Timer(_REMOVE_AFTER_S, self._expire, args=(s,))
            s.timer.daemon = True
            s.timer.start()

    def _expire(self, s):
        with self.lock:
            if s.timer is None or s.live or self.sessions.get(id(s.env)) is not s:
                return
            s.timer = None
            del self.sessions[id(s.env)]
        if not self.persist:
            _remove(s.name)

    def close(self):
        """Kills the live shells and removes the sandboxes of non-persistent sessions."""
        with self.lock:
            self.closed = True
            sessions, self.sessions = list(self.sessions.values()), {}
            for s in sessions:
                if s.timer is not None:
                    s.timer.cancel()
                    s.timer = None
        for s in sessions:
            for proc in list(s.live):
                try:
                    os.killpg(proc.pid, 9)
                except OSError:
                    pass
                proc.wait()
            if not self.persist:
                _remove(s.name)


def _make(policy, name, workspace):
    """Makes the session's sandbox (with persist, adopts it: the same arguments, else refused)."""
    from langchain.agents.middleware.shell_tool import SHELL_TEMP_PREFIX

    args = dict(
        image=policy.image, setup=list(policy.setup) if isinstance(policy.setup, (list, tuple)) else policy.setup,
        memory_mb=policy.memory_mb, cpus=policy.cpus, pids=policy.pids,
        ro_workspaces=list(policy.ro_workspaces) if policy.ro_workspaces else None,
        idle_timeout_s=policy.idle_timeout_s, max_duration_s=policy.max_duration_s,
    )
    # The middleware's workspace_root is the caller's directory: mounted at /workspace, as the
    # Docker policy mounts it. Its own temporary directory (no workspace_root) is not: the
    # sandbox's /workspace is then its own disk.
    if policy.mount_workspace and not os.path.basename(os.fspath(workspace)).startswith(SHELL_TEMP_PREFIX):
        args["workspace"] = os.fspath(workspace)
    Sandbox(name=name, persist=policy.persist, **args).close()


def hull_execution_policy(**kwargs):
    """An execution policy for LangChain's `ShellToolMiddleware` that runs its long-lived shell
    in a hull named sandbox:

        from langchain.agents.middleware import ShellToolMiddleware
        middleware = ShellToolMiddleware(execution_policy=hull_execution_policy(memory_mb=1024))

    Each agent run (a session of the middleware) gets a sandbox of its own, made at its first
    command and removed once the run's shell has ended; a shell the middleware restarts (after a
    command timeout, or when the model asks) comes back in the same sandbox, its files there.
    `name=` names the sandbox (else `lc-shell-<random>`); `persist=True` (with a name) adopts the
    sandbox of that name when it exists (made with the same arguments, else refused) and keeps
    it after the run, for the next run or `hull exec NAME`.

    Arguments: `name, persist, image, setup` (a shell command or a list, run once at creation),
    `memory_mb` (512), `cpus, pids` (256), `ro_workspaces, idle_timeout_s, max_duration_s` (as
    for `Sandbox(name=...)`), `mount_workspace` (True: the middleware's `workspace_root`, when
    given, is mounted at /workspace), and langchain's own `command_timeout, startup_timeout,
    termination_timeout, max_output_lines, max_output_bytes`. The shell starts in /workspace
    with the middleware's `env` (passed to `hull exec -e NAME`, so no value is on a command
    line); the sandbox has no network. `policy.close()` ends its shells and removes its
    sandboxes now (also done at garbage collection and interpreter exit)."""
    return _policy_class()(**kwargs)
