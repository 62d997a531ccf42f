"""The setup phase: the only network window, installing from PyPI into /deps.

These reach PyPI (a package registry) from the setup box, as CI does."""

import pytest

from hull_sandbox import Sandbox, SandboxError


@pytest.fixture(scope="module")
def sb():
    with Sandbox(setup="pip install --only-binary=:all: pandas matplotlib tabulate", timeout_s=120, memory_mb=1024) as s:
        yield s


def test_setup_installs_into_deps(sb):
    assert sb.setup_result is not None and sb.setup_result["exit_code"] == 0
    # What the image lacks lands in /deps (a virtual environment over the image's Python); what
    # it has is used where it is, and both import (the image may or may not carry pandas).
    r = sb.run_code("import tabulate, pandas\nprint(tabulate.__file__)")
    assert r.stdout.startswith("/deps/lib/python3."), r
    assert r.stderr == "", r
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


def _image_has(*modules):
    with Sandbox() as s:
        return s.run_code("import " + ", ".join(modules)).exit_code == 0


def test_setup_resolves_against_the_image_packages():
    """pip in setup counts the image's packages as installed: after `pip install matplotlib` on
    an image with numpy and pandas (the `host` image on Debian), pandas still imports (it did
    not when pip installed a numpy it was not built for into /deps) and a chart writes nothing
    to stderr (Axes3D's warning about two matplotlibs)."""
    if not _image_has("numpy", "pandas"):
        pytest.skip("the host image has no numpy and pandas (python3-numpy, python3-pandas)")
    with Sandbox(setup="pip install --only-binary=:all: matplotlib", timeout_s=60, memory_mb=1024) as s:
        r = s.run_code("import pandas, numpy, matplotlib.pyplot as plt\nplt.plot([1, 2]);\nprint(pandas.DataFrame({'a': [1]}).shape)")
        assert (r.exit_code, r.stdout, r.stderr) == (0, "(1, 1)\n", ""), r
        assert [x.png is not None for x in r.results] == [True], r.results


def _wheel(path, name, version, source):
    """A minimal pure-Python wheel of one module (no network, no build backend)."""
    import base64
    import hashlib
    import zipfile

    dist = "%s-%s.dist-info" % (name, version)
    files = {
        name + ".py": source,
        dist + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            data = text.encode()
            z.writestr(f, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (f, digest, len(data)))
        record.append(dist + "/RECORD,,")
        z.writestr(dist + "/RECORD", "\n".join(record) + "\n")


def test_pip_install_in_a_call_lands_in_a_writable_deps(tmp_path):
    """With deps_readonly=False (and no setup), a call's `pip install` installs into /deps
    instead of failing on the image's PEP 668 marker, and a later call imports it."""
    with Sandbox(deps_readonly=False, workspace=str(tmp_path)) as s:
        _wheel(tmp_path / "hullprobe-1.0-py3-none-any.whl", "hullprobe", "1.0", "VALUE = 42\n")
        r = s.run(["pip", "install", "--no-index", "/workspace/hullprobe-1.0-py3-none-any.whl"])
        assert r.exit_code == 0, r
        r = s.run_code("import hullprobe\nprint(hullprobe.VALUE, hullprobe.__file__)")
        assert r.stdout.startswith("42 /deps/lib/python3."), r


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
