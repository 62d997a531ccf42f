"""Kernel cells sent straight to the interpreter: `kernel.attach` hands this process the
kernel's channel (over `hull serve --fd-socket`), so a cell crosses one process boundary each
way instead of two (on a VM each wake of an idle process costs ~0.1 ms; docs/performance.md).

The channel's far end is code nobody has read (a cell can write anything to it), so this module
holds it to what `hull serve` holds it to (crates/hull/src/cell.rs): a frame is one JSON object
per line of at most `max_frame` bytes and `max_frame_values` values, output is base64 and kept up
to `max_output` bytes per stream, and the cell has a deadline. A cell that does not end with
`done` (its deadline passed, the channel closed or broke its protocol) is ended by the server
(`kernel.end`), which kills the box and says how it ended (a timeout, the OOM killer, a crash).
"""

import base64
import binascii
import codecs
import json
import os
import socket
import struct
import sys
import time

from . import _scan

#: The deepest nesting of arrays and objects a frame may have (the server's parser's limit).
MAX_DEPTH = 128
#: Every byte but the brackets, deleted to measure nesting.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STATS = {"peak_memory": None, "cpu_ms": 0, "setup_us": 0}
#: struct timeval, as SO_RCVTIMEO and SO_SNDTIMEO take it.
_TIMEVAL = struct.Struct("@ll")
#: How stale the socket's timeout may get before a wait re-arms it (the most a deadline can be
#: overrun by).
_REARM_S = 0.005


class _Broken(Exception):
    """The channel broke its protocol; the text says how (the result's warning)."""


def _structural(text):
    """How many values the structural characters in `text` make (outside strings or not)."""
    return text.count(b",") + text.count(b"[") + text.count(b"{") + text.count(b":")


def _outside_strings(line):
    """The parts of a JSON text outside its strings: escaped backslashes and quotes removed
    first, so every remaining quote opens or closes a string. Linear in the text."""
    return line.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[0::2]


def _check_shape(line, max_values):
    """Refuses a frame of more values or deeper nesting than the server takes, before it is
    parsed (a tree of Python values costs many times its text)."""
    if 1 + _structural(line) <= max_values and line.count(b"[") + line.count(b"{") <= MAX_DEPTH:
        return
    outside = _outside_strings(line)
    if 1 + sum(_structural(p) for p in outside) > max_values:
        raise _Broken("the runner sent a frame of more than %d JSON values; rich results were dropped and the box killed" % max_values)
    # At most as many brackets as values: a bounded loop.
    depth = deepest = 0
    for b in b"".join(outside).translate(None, _NOT_BRACKETS):
        depth += 1 if b in (0x5B, 0x7B) else -1
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise _Broken("the runner sent a frame nested more than %d deep; rich results were dropped and the box killed" % MAX_DEPTH)


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


def decode(line, max_values):
    """One frame: ("out", stream, bytes), ("done", exit_code, results) or None (ignored).
    Raises _Broken saying why the channel is broken."""
    _check_shape(line, max_values)
    try:
        frame = json.loads(line, parse_constant=_no_constant)
    except Exception as e:  # ValueError, RecursionError, UnicodeDecodeError: all the runner's doing
        raise _Broken("the runner's channel carried a malformed frame (%s); rich results were dropped and the box killed" % type(e).__name__) from None
    if not isinstance(frame, dict):
        raise _Broken("the runner's channel carried a frame that is not an object; rich results were dropped and the box killed")
    s = frame.get("stream")
    if isinstance(s, str):
        data = frame.get("data")
        try:
            raw = base64.b64decode(data if isinstance(data, str) else "", validate=True)
        except (binascii.Error, ValueError):
            raise _Broken("the runner's channel carried output that is not base64; the box was killed") from None
        return ("out", "stderr" if s == "stderr" else "stdout", raw)
    if "done" in frame:
        rc = frame.get("exit_code")
        if isinstance(rc, bool) or not isinstance(rc, int) or not -(2**31) <= rc < 2**31:
            rc = 1
        results = frame.get("results")
        return ("done", rc, results if isinstance(results, list) else [])
    return None


def _text(b):
    """A stream's bytes as a result carries them: text, and base64 when the text is not them."""
    try:
        return b.decode("utf-8"), None
    except UnicodeDecodeError:
        return b.decode("utf-8", "replace"), base64.b64encode(b).decode("ascii")


class Channel:
    """An attached kernel's channel and the limits the server gave with it."""

    def __init__(self, sock, attached):
        # Blocking, bounded by SO_RCVTIMEO/SO_SNDTIMEO (see _time_out).
        sock.settimeout(None)
        self.sock = sock
        self.max_output = int(attached["max_output"])
        self.max_frame = int(attached["max_frame"])
        self.max_values = int(attached["max_frame_values"])
        self.timeout_s = float(attached["timeout_s"])
        #: Bytes read past the last frame (kept for the next cell, as the server's reader does).
        self.buf = bytearray()
        self._armed = 0.0
        ws = attached.get("workspace")
        self.ws_fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if ws else None

    def close(self):
        try:
            self.sock.close()
        finally:
            if self.ws_fd is not None:
                os.close(self.ws_fd)
                self.ws_fd = None

    def run(self, code, timeout_s, offer, end):
        """Runs one cell; `offer(stream, text)` gets output as it arrives, `end(how, **kw)` asks
        the server to end a cell that did not finish (returning the box's result). Returns the
        result as `hull serve` would answer `kernel.run_code`, and whether the kernel lives."""
        try:
            body = code.encode("utf-8")
        except UnicodeEncodeError as e:
            from ._errors import InvalidArgument

            raise InvalidArgument("code holds U+%04X, a lone surrogate: not valid Unicode text, so it cannot be sent" % ord(e.object[e.start]), "code") from None
        # The deadline starts after the scan, as the server's does.
        before = _scan.scan(self.ws_fd) if self.ws_fd is not None else None
        t0 = t_scan = time.monotonic()
        deadline = t0 + timeout_s
        out = {"stdout": bytearray(), "stderr": bytearray()}
        decoders = {}
        dropped = 0
        how, detail = self._send(b"%d\n" % len(body) + body, deadline)
        t_sent = time.monotonic()
        if how is None:
            while True:
                how, detail = self._frame(deadline)
                if how != "out":
                    break
                stream, data = detail
                if offer is not None and data:
                    d = decoders.get(stream)
                    if d is None:
                        d = decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
                    text = d.decode(data)
                    if text:
                        offer(stream, text)
                kept = out[stream]
                room = max(0, self.max_output - len(kept))
                kept += data[:room]
                dropped += max(0, len(data) - room)
        t_done = time.monotonic()
        if how == "done":
            rc, results = detail
            r = {"exit_code": rc, "success": rc == 0, "fault": None, "stats": dict(_STATS), "warnings": [], "results": results}
        elif how == "timeout":
            r = end("timeout", timeout_s=timeout_s)
        elif how == "broken":
            r = end("broken", warning=detail)
        else:
            r = end("gone")
        if how != "done":
            r["success"] = False
            r["results"] = []
        r["stdout"], b64 = _text(bytes(out["stdout"]))
        if b64 is not None:
            r["stdout_b64"] = b64
        r["stderr"], b64 = _text(bytes(out["stderr"]))
        if b64 is not None:
            r["stderr_b64"] = b64
        r["truncated"] = bool(r.get("truncated")) or dropped > 0
        r["dropped_bytes"] = dropped
        r["duration_ms"] = int((time.monotonic() - t0) * 1000)
        if before is not None:
            now, complete = _scan.scan(self.ws_fd)
            if not (complete and before[1]):
                r.setdefault("warnings", []).append(_scan.INCOMPLETE)
            r["files"] = _scan.changed(before[0], now)
        else:
            r["files"] = []
        if _TRACE:
            t_end = time.monotonic()
            ms = lambda t: (t - t0) * 1000  # noqa: E731
            sys.stderr.write("hull trace: sdk.kernel.direct %.3f ms: scan_before %.3f, sent %.3f, done_frame %.3f, scan_after %.3f\n" % (ms(t_end), ms(t_scan), ms(t_sent), ms(t_done), ms(t_end)))
        return r, how == "done"

    def _send(self, msg, deadline):
        """Sends a cell, giving up at the deadline (a runner that stopped reading would block a
        plain send forever once the socket's buffer is full)."""
        view = memoryview(msg)
        while view:
            if not self._time_out(deadline):
                return "timeout", None
            try:
                n = self.sock.send(view)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return "gone", None
            view = view[n:]
        return None, None

    def _time_out(self, deadline):
        """Bounds the socket's next blocking calls by what is left until `deadline` (the
        kernel's SO_RCVTIMEO/SO_SNDTIMEO: a blocked call then fails with EAGAIN); False when
        nothing is left. One pair of setsockopt calls per wait, where a Python socket timeout
        would cost a poll and two fcntl calls per send and receive."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        us = max(1, int(left * 1e6))
        tv = _TIMEVAL.pack(us // 1000000, us % 1000000)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self._armed = time.monotonic()
        return True

    def _frame(self, deadline):
        """The next frame: ("out", (stream, bytes)), ("done", (rc, results)), or how the cell
        ended without one: ("timeout"|"gone", None), ("broken", why)."""
        buf = self.buf
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl >= 0:
                line = bytes(buf[:nl])
                del buf[: nl + 1]
                start = 0
                try:
                    f = decode(line, self.max_values)
                except _Broken as e:
                    return "broken", str(e)
                if f is None:
                    continue
                if f[0] == "out":
                    return "out", (f[1], f[2])
                return "done", (f[1], f[2])
            if len(buf) > self.max_frame:
                return "broken", "the runner sent a frame over %d bytes; rich results were dropped and the box killed" % self.max_frame
            start = len(buf)
            # A wait armed a while ago would outlast the deadline by that while: re-armed.
            if time.monotonic() - self._armed > _REARM_S and not self._time_out(deadline):
                return "timeout", None
            try:
                chunk = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                # The socket's own timeout (set to the deadline when the cell went out) passed.
                if not self._time_out(deadline):
                    return "timeout", None
                continue
            except OSError:
                return "gone", None
            if not chunk:
                return "gone", None
            buf += chunk


_TRACE = os.environ.get("HULL_TRACE_CALLS", "0") not in ("", "0")
