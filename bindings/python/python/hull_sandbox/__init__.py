"""hull-sandbox: run untrusted code in a fresh, kernel-enforced box (the Python SDK of hull)."""

from ._errors import FileOperationError, HullError, InvalidArgument, InvalidArgumentType, KernelDied, MountRefused, NetworkUnavailable, SandboxError
from ._result import ExecutionResult, Fault, FileChange, FileEntry, Result
from ._named import Process
from ._sandbox import Kernel, Sandbox, find_hull, list_sandboxes, resume, run_code

__all__ = [
    "run_code", "Sandbox", "Kernel", "Process", "resume", "list_sandboxes", "ExecutionResult", "Result", "Fault", "FileEntry", "FileChange",
    "HullError", "SandboxError", "InvalidArgument", "InvalidArgumentType", "MountRefused", "NetworkUnavailable", "FileOperationError", "KernelDied", "find_hull",
]
