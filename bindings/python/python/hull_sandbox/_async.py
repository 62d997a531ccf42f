"""AsyncSandbox: the Sandbox for asyncio code.

Each call runs the blocking Sandbox call on a worker thread (`asyncio.to_thread`), so the event
loop never waits on a box, and many calls may be in flight at once, as with a Sandbox shared by
threads. The methods are the Sandbox's, with its signatures and docstrings.
"""

import asyncio
import functools

from ._sandbox import Kernel, Sandbox


def _async_of(cls, name):
    """An async method running `cls.name` of the wrapped object on a worker thread."""
    sync = getattr(cls, name)

    @functools.wraps(sync)
    async def method(self, *args, **kwargs):
        return await asyncio.to_thread(getattr(self._inner, name), *args, **kwargs)

    return method


class AsyncKernel:
    """A Kernel for asyncio code: `await k.run_code(...)`; `async with` closes it."""

    def __init__(self, kernel):
        self._inner = kernel
        self.id = kernel.id

    @property
    def timeout_s(self):
        return self._inner.timeout_s

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False


for _name in ("run_code", "close"):
    setattr(AsyncKernel, _name, _async_of(Kernel, _name))


class AsyncSandbox:
    """A Sandbox for asyncio code. `async with AsyncSandbox(...) as sb:` starts it (the
    arguments are Sandbox's) and destroys it at the end (`close` for a named one); every method
    is awaited: `await sb.run_code("print(1)")`. `await AsyncSandbox.create(...)` starts one
    outside a `with`."""

    def __init__(self, *args, **kwargs):
        self._args, self._kwargs = args, kwargs
        self._inner = None

    @classmethod
    async def create(cls, *args, **kwargs):
        sb = cls(*args, **kwargs)
        await sb._start()
        return sb

    async def _start(self):
        if self._inner is None:
            self._inner = await asyncio.to_thread(Sandbox, *self._args, **self._kwargs)
        return self

    async def __aenter__(self):
        return await self._start()

    async def __aexit__(self, *exc):
        inner = self._inner
        if inner is not None:
            await asyncio.to_thread(inner.__exit__, *exc)
        return False

    async def kernel(self, timeout_s=None):
        """Starts one warm interpreter in a long-lived box (an AsyncKernel)."""
        return AsyncKernel(await asyncio.to_thread(self._inner.kernel, timeout_s))

    def __getattr__(self, name):
        # The configuration (`timeout_s`, `image`, ...), `id`, `workspace`, `ports`, `name`.
        if name.startswith("_") or self.__dict__.get("_inner") is None:
            raise AttributeError(name)
        return getattr(self._inner, name)


for _name in ("run_code", "run", "write_file", "read_file", "read_text", "list_files", "snapshot", "restore",
              "exec", "spawn", "process", "logs", "set_network_policy", "stat", "delete", "stop", "start",
              "close", "destroy"):
    setattr(AsyncSandbox, _name, _async_of(Sandbox, _name))
del _name


async def async_run_code(code, language="python", **sandbox_args):
    """Runs code once in a fresh sandbox, for asyncio code; returns its ExecutionResult."""
    async with AsyncSandbox(**sandbox_args) as sb:
        return await sb.run_code(code, language=language)
