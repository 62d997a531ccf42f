"""AsyncSandbox: the Sandbox's calls awaited from asyncio code, concurrently."""

import asyncio
import inspect
import time

import hull_sandbox
from hull_sandbox import AsyncSandbox, Sandbox, async_run_code


def test_calls_are_awaited_and_run_concurrently():
    async def go():
        async with AsyncSandbox(timeout_s=10) as sb:
            assert sb.timeout_s == 10 and sb.workspace
            await sb.write_file("a.txt", "from async")
            assert await sb.read_file("a.txt") == b"from async"
            # Three one-second calls at once take about one second, not three: the loop never
            # waits on a box.
            t = time.monotonic()
            rs = await asyncio.gather(*(sb.run_code("import time; time.sleep(1); print(%d)" % i) for i in range(3)))
            took = time.monotonic() - t
            assert [r.stdout for r in rs] == ["0\n", "1\n", "2\n"]
            assert took < 2.5, took
            async with await sb.kernel() as k:
                await k.run_code("x = 20")
                assert (await k.run_code("x * 2 + 2")).results[0].text == "42"
            files = await sb.list_files()
            assert [f.path for f in files] == ["a.txt"]
        assert (await async_run_code("print('once')")).stdout == "once\n"

    asyncio.run(go())


def test_the_async_methods_keep_the_sandboxs_signatures_and_docs():
    for name in ("run_code", "run", "read_file", "write_file", "list_files", "destroy"):
        a, s = getattr(AsyncSandbox, name), getattr(Sandbox, name)
        assert inspect.iscoroutinefunction(a), name
        assert inspect.signature(a) == inspect.signature(s) and a.__doc__ == s.__doc__, name
    assert isinstance(hull_sandbox.__version__, str) and hull_sandbox.__version__
    # PEP 561: the package says it carries its types.
    import os

    assert os.path.exists(os.path.join(os.path.dirname(hull_sandbox.__file__), "py.typed"))
