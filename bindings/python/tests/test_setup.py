"""The setup phase: the only network window, installing from PyPI into /deps.

These reach PyPI (a package registry) from the setup box, as CI does."""

import pytest

from hull_sandbox import Sandbox, SandboxError


@pytest.fixture(scope="module")
def sb():
    with Sandbox(setup="pip install --only-binary=:all: pandas matplotlib", timeout_s=120, memory_mb=1024) as s:
        yield s


def test_setup_installs_into_deps(sb):
    assert sb.setup_result is not None and sb.setup_result["exit_code"] == 0
    r = sb.run_code("import pandas\nprint(pandas.__file__)")
    assert r.stdout.startswith("/deps/pandas/"), r
    # Later calls have no network, and /deps is read-only.
    r = sb.run_code("open('/deps/x', 'w')")
    assert r.exit_code != 0 and "Read-only file system" in r.stderr, r
    r = sb.run_code("import socket\ntry:\n    socket.getaddrinfo('pypi.org', 443)\n    print('resolved')\nexcept OSError as e:\n    print('no network')")
    assert r.stdout == "no network\n", r


def test_dataframe_is_an_html_result(sb):
    r = sb.run_code("import pandas as pd\npd.DataFrame({'name': ['a', 'b'], 'value': [1, 2]})")
    assert r.exit_code == 0, r.stderr
    html = r.results[-1].html
    assert html is not None and "<table" in html and "value" in html
    assert "name" in r.results[-1].text


def test_matplotlib_figure_is_a_png_result(sb):
    r = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t');")
    assert r.exit_code == 0, r.stderr
    assert len(r.results) == 1, r.results
    pngs = [x.png for x in r.results if x.png]
    assert len(pngs) == 1
    assert pngs[0].startswith(b"\x89PNG\r\n\x1a\n") and len(pngs[0]) > 1000
    assert r.stdout == ""


def test_deps_writable_when_asked():
    with Sandbox(setup="true", deps_readonly=False) as s:
        r = s.run_code("open('/deps/note', 'w').write('x')\nprint(open('/deps/note').read())")
        assert r.stdout == "x\n", r


def test_failed_setup_raises():
    with pytest.raises(SandboxError, match="setup"):
        Sandbox(setup="echo doomed >&2; exit 3")


def test_setup_output_streams_to_the_callbacks_while_it_runs():
    import time

    from hull_sandbox import Sandbox

    got = []
    t0 = time.monotonic()
    with Sandbox(setup="echo one; sleep 1; echo two >&2", on_stdout=lambda d: got.append((time.monotonic() - t0, "out", d)), on_stderr=lambda d: got.append((time.monotonic() - t0, "err", d))) as sb:
        made = time.monotonic() - t0
        assert [(k, d) for _, k, d in got] == [("out", "one\n"), ("err", "two\n")], got
        # "one" came a second before the sandbox was made, not with the setup's result.
        assert got[0][0] < made - 0.5, (got, made)
        assert sb.setup_result["stdout"] == "one\n"
