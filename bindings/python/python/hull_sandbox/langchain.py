"""A LangChain tool that runs a model's code in a hull sandbox (needs langchain-core).

`hull_code_tool(**sandbox_args)` starts one Sandbox (its workspace persists across the tool's
calls; every call is a fresh network-off box) and returns a LangChain tool. The tool's output is
text written for a model to act on: stdout, the trailing value, the traceback on error, a labelled
sandbox fault (`[sandbox: timeout] ...`) and a mention of each image result. The program's own
output cannot forge those labels: terminal escapes, control and invisible characters are
stripped, and a `[sandbox` it prints (or one with a look-alike bracket) is shown as `(sandbox`,
also at the edges of a cut.
"""

import re
import threading
from typing import Literal, Optional, Type

try:
    from langchain_core.tools import BaseTool
    from pydantic import BaseModel, Field, PrivateAttr
except ImportError as e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "hull_sandbox.langchain needs langchain-core: pip install 'hull-sandbox[langchain]' "
        "(or pip install langchain-core)"
    ) from e

from ._sandbox import Sandbox

__all__ = ["hull_code_tool", "HullCodeTool", "format_result"]

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
        parts.append("[files changed: %s]" % ", ".join(_clean(f, 500) for f in r.files[:50]) + (" ..." if len(r.files) > 50 else ""))
    if not parts:
        parts.append("[no output] the code ran without printing anything and without a trailing value")
    return "\n".join(parts)


class RunCodeInput(BaseModel):
    code: str = Field(description="The program to run. In Python the value of a trailing expression is shown, like a notebook cell.")
    language: Literal["python", "bash", "sh", "node"] = Field(default="python", description="python (default), bash, sh or node")


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
    max_chars: int = DEFAULT_MAX_CHARS

    _sandbox: Optional[Sandbox] = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def _run(self, code, language="python", run_manager=None):
        with self._lock:
            sb = self._sandbox
        if sb is None:
            return "[sandbox: closed] this tool's sandbox was destroyed", None
        r = sb.run_code(code, language=language)
        return format_result(r, self.max_chars), r

    @property
    def sandbox(self):
        """The Sandbox the tool runs in (read files the model wrote, restore a snapshot, ...)."""
        return self._sandbox

    def close(self):
        with self._lock:
            sb, self._sandbox = self._sandbox, None
        if sb is not None:
            sb.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def hull_code_tool(name="run_code", description=None, max_chars=DEFAULT_MAX_CHARS, **sandbox_args):
    """A LangChain tool running code in one hull Sandbox made from `sandbox_args` (the Sandbox()
    arguments: timeout_s, memory_mb, setup, image, ...). The sandbox starts now, so a bad argument
    raises here; `tool.close()` (or `with`) destroys it."""
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 100:
        raise ValueError("max_chars must be an int of at least 100, got %r" % (max_chars,))
    fields = {"name": name, "max_chars": max_chars}
    if description is not None:
        fields["description"] = description
    tool = HullCodeTool(**fields)
    tool._sandbox = Sandbox(**sandbox_args)
    return tool
