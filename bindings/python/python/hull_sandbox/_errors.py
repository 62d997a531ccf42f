"""Exceptions. Every error this package raises is a HullError, and every refusal of an argument
or a call a SandboxError: bad arguments raise InvalidArgument (also a ValueError) or
InvalidArgumentType (also a TypeError), naming the argument, so `except SandboxError` sees them
all while `except ValueError`/`except TypeError` keep working."""


class HullError(Exception):
    """Base of hull's errors. `kind` is the server's error kind; `chain` its cause chain."""

    def __init__(self, message, kind=None, chain=None, detail=None):
        super().__init__(message)
        self.kind = kind
        self.chain = list(chain or [])
        self.detail = dict(detail or {})


class SandboxError(HullError):
    """The box (or the sandbox) could not start or be used. `step` and `reason` say where the
    box's setup failed when it did."""

    @property
    def step(self):
        return self.detail.get("step")

    @property
    def reason(self):
        return self.detail.get("reason") or str(self)


class MountRefused(SandboxError, ValueError):
    """A mount was refused (a sensitive host source, or a target hull sets up itself)."""


class NetworkUnavailable(SandboxError):
    """The network asked for cannot be given by this hull (a gateway mode a build or host cannot
    serve). `mode` is the refused mode. The sandbox is never started with no network or the
    host's instead."""

    @property
    def mode(self):
        return self.detail.get("mode")


class FileOperationError(SandboxError, OSError):
    """A workspace file operation was refused (a symlink, FIFO, device, `..`) or failed."""


class KernelDied(SandboxError):
    """The kernel's interpreter is gone (a timeout or crash ended it)."""


class InvalidArgument(SandboxError, ValueError):
    """An argument was refused, by this package or by the server; the message names it (`arg`
    too when the server named it)."""

    def __init__(self, message, arg=None, kind="invalid_argument", chain=None, detail=None):
        SandboxError.__init__(self, message, kind, chain, detail)
        self.arg = arg


class InvalidArgumentType(InvalidArgument, TypeError):
    """An argument of the wrong type (an InvalidArgument that is also a TypeError)."""


def from_error(err):
    kind = err.get("kind")
    msg = err.get("message", "hull error")
    chain = err.get("chain")
    if kind == "invalid_argument":
        return InvalidArgument(msg, err.get("arg"), kind, chain, err)
    if kind == "mount_refused":
        return MountRefused(msg, kind, chain, err)
    if kind in ("path_refused", "io"):
        return FileOperationError(msg, kind, chain, err)
    if kind == "network_unavailable":
        return NetworkUnavailable(msg, kind, chain, err)
    if kind == "kernel_dead":
        return KernelDied(msg, kind, chain, err)
    return SandboxError(msg, kind, chain, err)
