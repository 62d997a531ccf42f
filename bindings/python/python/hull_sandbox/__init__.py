"""hull-sandbox: run untrusted code in a fresh, kernel-enforced box (the Python SDK of hull)."""

from ._errors import FileOperationError, HullError, InvalidArgument, InvalidArgumentType, KernelDied, MountRefused, NetworkUnavailable, SandboxError
from ._result import ExecutionResult, Fault, FileChange, FileEntry, Result
from ._named import Process
from ._sandbox import Kernel, Sandbox, find_hull, list_sandboxes, resume, run_code
from ._async import AsyncKernel, AsyncSandbox, async_run_code

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    __version__ = _version("hull-sandbox")
except PackageNotFoundError:  # run from the source tree, not installed
    __version__ = "0+source"

__all__ = [
    "run_code", "Sandbox", "Kernel", "AsyncSandbox", "AsyncKernel", "async_run_code", "__version__", "Process", "resume", "list_sandboxes", "ExecutionResult", "Result", "Fault", "FileEntry", "FileChange",
    "HullError", "SandboxError", "InvalidArgument", "InvalidArgumentType", "MountRefused", "NetworkUnavailable", "FileOperationError", "KernelDied", "find_hull",
]
