"""Results of a call: ExecutionResult, its rich results (mime bundles) and faults."""

import base64
from dataclasses import dataclass, field
from typing import List, Optional


@dataclass(frozen=True)
class Fault:
    """Why a run did not end on its own terms (`timeout`, `oom`, `escape_blocked`, ...)."""

    type: str
    reason: str
    syscall: Optional[str] = None


class Result:
    """One mime bundle: the last expression's value, a display(obj), or a matplotlib figure."""

    def __init__(self, bundle):
        self.data = dict(bundle)

    def _b64(self, mime):
        v = self.data.get(mime)
        return base64.b64decode(v) if isinstance(v, str) else None

    @property
    def text(self):
        return self.data.get("text/plain")

    @property
    def html(self):
        return self.data.get("text/html")

    @property
    def markdown(self):
        return self.data.get("text/markdown")

    @property
    def svg(self):
        return self.data.get("image/svg+xml")

    @property
    def latex(self):
        return self.data.get("text/latex")

    @property
    def json(self):
        return self.data.get("application/json")

    @property
    def png(self):
        """PNG bytes, or None."""
        return self._b64("image/png")

    @property
    def jpeg(self):
        """JPEG bytes, or None."""
        return self._b64("image/jpeg")

    def formats(self):
        return list(self.data)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return dict(self.data)

    def __repr__(self):
        return "Result(%s)" % ", ".join(self.data)


@dataclass(frozen=True)
class FileEntry:
    #: The path relative to the workspace, for display: bytes that are not UTF-8 show as U+FFFD,
    #: so two such names can look alike; `path_bytes` tells them apart.
    path: str
    type: str
    size: int
    #: The path's bytes when it is not UTF-8 (else None).
    raw: Optional[bytes] = None

    @property
    def path_bytes(self) -> bytes:
        """The path's exact bytes; `read_file` and `write_file` take them."""
        return self.raw if self.raw is not None else self.path.encode()


@dataclass(frozen=True)
class FileChange:
    """A workspace path a call created, modified or deleted (`ExecutionResult.files`), in the
    form `list_files` gives: relative to the workspace."""

    path: str
    #: "created", "modified" or "deleted".
    change: str
    #: The size now, None once deleted.
    size: Optional[int] = None
    #: The path's bytes when it is not UTF-8 (else None).
    raw: Optional[bytes] = None

    @property
    def path_bytes(self) -> bytes:
        return self.raw if self.raw is not None else self.path.encode()

    @classmethod
    def from_json(cls, f):
        raw = base64.b64decode(f["path_b64"]) if f.get("path_b64") else None
        return cls(f.get("path", ""), f.get("change", ""), f.get("size"), raw)


@dataclass
class ExecutionResult:
    stdout: str
    stderr: str
    exit_code: int
    #: exit_code == 0 and no fault (any fault, output_limit included, is not a success).
    success: bool
    fault: Optional[Fault]
    truncated: bool
    duration_ms: int
    #: Workspace paths the call created, modified or deleted (FileChange), when tracked.
    files: List["FileChange"] = field(default_factory=list)
    results: List[Result] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    #: Output chunks the streaming callbacks did not get because they were too slow.
    dropped_chunks: int = 0
    #: The exact bytes of stdout and stderr (`stdout`/`stderr` show bytes that are not UTF-8 as
    #: U+FFFD).
    stdout_bytes: bytes = field(default=b"", repr=False)
    stderr_bytes: bytes = field(default=b"", repr=False)

    def __bool__(self):
        # `if sb.run_code(...):` asks whether the call succeeded (kern's results read the same).
        return self.success

    @classmethod
    def from_json(cls, r, dropped_chunks=0):
        f = r.get("fault")
        return cls(
            stdout=r.get("stdout", ""),
            stderr=r.get("stderr", ""),
            exit_code=r.get("exit_code", -1),
            success=bool(r.get("success")),
            fault=Fault(f["type"], f.get("reason", ""), f.get("syscall")) if f else None,
            truncated=bool(r.get("truncated")),
            duration_ms=r.get("duration_ms", 0),
            files=[FileChange.from_json(f) for f in r.get("files") or [] if isinstance(f, dict)],
            results=[Result(b) for b in r.get("results") or []],
            stats=dict(r.get("stats") or {}),
            warnings=list(r.get("warnings") or []),
            dropped_chunks=dropped_chunks,
            # The server sends the exact bytes (base64) only when a stream is not UTF-8.
            stdout_bytes=base64.b64decode(r["stdout_b64"]) if r.get("stdout_b64") else r.get("stdout", "").encode("utf-8", "surrogatepass"),
            stderr_bytes=base64.b64decode(r["stderr_b64"]) if r.get("stderr_b64") else r.get("stderr", "").encode("utf-8", "surrogatepass"),
        )
