"""The Sandbox() arguments do what they say, in the box."""

import socket
import threading

import pytest

import hull_sandbox
from hull_sandbox import FileOperationError, InvalidArgument, InvalidArgumentType, MountRefused, Sandbox, SandboxError


def test_env_tmpfs_and_mounts(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("mounted")
    with Sandbox(env={"GREETING": "hi"}, tmpfs={"/scratch": "8m"}, mounts=["%s:/data:ro" % data]) as sb:
        r = sb.run(["sh", "-c", "echo $GREETING; cat /data/in.txt; echo; df -k /scratch | tail -1; touch /data/x"])
        lines = r.stdout.splitlines()
        assert lines[0] == "hi" and lines[1] == "mounted", r
        assert lines[2].split()[1] == "8192", r
        assert r.exit_code != 0 and "Read-only" in r.stderr
        assert not (data / "x").exists()


def test_max_output_bytes_truncates():
    with Sandbox(max_output_bytes=1000) as sb:
        r = sb.run_code("print('x' * 5000)")
        assert r.truncated and len(r.stdout) == 1000 and r.exit_code == 0


def test_track_files_off():
    with Sandbox(track_files=False) as sb:
        r = sb.run_code("open('a', 'w').write('1')")
        assert r.files == [] and sb.read_file("a") == b"1"


def test_pids_cap():
    script = ["sh", "-c", "for i in $(seq 30); do sleep 0.2 & done; wait"]
    with Sandbox(pids=8) as sb:
        r = sb.run(script)
        assert r.exit_code != 0 and "Cannot fork" in r.stderr, r
    with Sandbox(pids=None) as sb:
        assert sb.run(script).exit_code == 0


def test_network_flag_reaches_host_loopback_only_when_asked():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.sendall(b"hello from the host")
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    code = "import socket\ns = socket.create_connection(('127.0.0.1', %d), timeout=2)\nprint(s.recv(100).decode())" % port
    try:
        with Sandbox() as sb:
            r = sb.run_code(code)
            assert r.exit_code != 0 and "ConnectionRefused" in r.stderr, r
        with Sandbox(network=True) as sb:
            r = sb.run_code(code)
            assert r.stdout == "hello from the host\n", r
    finally:
        srv.close()


def test_cap_drop_and_security_profile_default_are_accepted():
    with Sandbox(cap_drop=["NET_RAW"], security_profile="default", cpus=1) as sb:
        assert sb.run_code("print(1)").stdout == "1\n"


def test_require_limits_runs_where_caps_are_enforced():
    # CI machines of this project enforce every cap, so this must not raise there.
    with Sandbox(require_limits=True, memory_mb=256, cpus=1, pids=64) as sb:
        assert sb.run_code("print('capped')").stdout == "capped\n"


def test_text_that_is_not_valid_unicode_is_refused_naming_the_argument():
    # A lone surrogate cannot be encoded as UTF-8; hull serve could not parse the request, and
    # its error (id null) would reach no call: the caller would wait forever.
    with Sandbox() as sb:
        got = []

        def call():
            try:
                sb.run_code("x = '\ud800'")
            except Exception as e:  # noqa: BLE001 - the test inspects it below
                got.append(e)

        t = threading.Thread(target=call, daemon=True)
        t.start()
        t.join(20)
        assert not t.is_alive(), "the call with a lone surrogate never returned"
        assert isinstance(got[0], ValueError) and "code" in str(got[0]) and "surrogate" in str(got[0]), got
        assert sb.run_code("print('still fine')").stdout == "still fine\n"


@pytest.mark.parametrize(
    "kwargs, arg, flag",
    [
        ({"mounts": ["/etc:/data"]}, "mounts", "--mount"),
        ({"workspace": "/etc"}, "workspace", "--workspace"),
        ({"memory_mb": 16, "tmpfs": {"/big": "64m"}}, "tmpfs", "--memory"),
        ({"cap_drop": ["FLY"]}, "cap_drop", "--cap-drop"),
    ],
)
def test_refusals_name_the_argument_as_python_spells_it(kwargs, arg, flag):
    # The engine names a field; hull serve spells it as the Sandbox() argument, never as
    # `hull run`'s flag, in the exception's message and its `arg`.
    with pytest.raises(ValueError) as e:
        Sandbox(**kwargs)
    err = e.value
    got_arg = err.detail.get("arg") if isinstance(err, MountRefused) else err.arg
    assert got_arg == arg, (err, got_arg)
    assert str(err).startswith(arg + ": ") and flag not in str(err), str(err)


def test_a_refused_mount_reads_once_down_its_chain(tmp_path):
    with pytest.raises(MountRefused) as e:
        Sandbox(mounts=["%s:/data" % (tmp_path / "missing")])
    chain = e.value.chain
    assert len(chain) >= 2 and str(e.value) == ": ".join(chain), chain
    for parent, cause in zip(chain, chain[1:]):
        assert cause not in parent, chain


@pytest.mark.parametrize(
    "make, builtin",
    [
        (lambda: Sandbox(timeout_s=0), ValueError),
        (lambda: Sandbox(memory_mb="lots"), TypeError),
        (lambda: Sandbox(network="everywhere"), TypeError),
        (lambda: Sandbox(user="root"), TypeError),
        (lambda: Sandbox(cap_drop=["FLY"]), ValueError),
        (lambda: hull_sandbox.run_code(5), TypeError),
        (lambda: hull_sandbox.run_code("1", language="cobol"), ValueError),
    ],
)
def test_every_refused_argument_is_a_sandbox_error_and_still_its_builtin(make, builtin):
    # `except SandboxError` sees every refusal (the SDK's own checks and the server's), and code
    # written against ValueError/TypeError keeps working.
    with pytest.raises(SandboxError) as e:
        make()
    assert isinstance(e.value, InvalidArgument) and isinstance(e.value, builtin), type(e.value).__mro__


def test_refusals_of_calls_on_an_open_sandbox_are_sandbox_errors():
    with Sandbox() as sb:
        for call, builtin in [
            (lambda: sb.run(["ls", 5]), TypeError),
            (lambda: sb.read_file("x", max_bytes="all"), TypeError),
            (lambda: sb.read_text("x", lines=(0, 1)), ValueError),
            (lambda: sb.write_file("x", 5), TypeError),
        ]:
            with pytest.raises(SandboxError) as e:
                call()
            assert isinstance(e.value, builtin), e.value
        assert issubclass(InvalidArgumentType, InvalidArgument)
        with pytest.raises(SandboxError) as e:
            sb.read_file("../outside")
        assert isinstance(e.value, FileOperationError) and isinstance(e.value, OSError)


def test_the_configuration_reads_back_and_cannot_be_changed():
    with Sandbox(timeout_s=7, memory_mb=128, pids=64, env={"A": "1"}, network=False) as sb:
        assert (sb.timeout_s, sb.memory_mb, sb.pids, sb.image, sb.network) == (7, 128, 64, None, False)
        sb.env["A"] = "2"  # a copy: the sandbox's own stays as made
        assert sb.env == {"A": "1"}
        with pytest.raises(AttributeError):
            sb.timeout_s = 60
        assert sb.timeout_s == 7


def test_a_result_is_true_exactly_when_the_call_succeeded():
    with Sandbox() as sb:
        ok, failed = sb.run_code("print(1)"), sb.run_code("raise SystemExit(3)")
        assert ok and ok.success
        assert not failed and failed.exit_code == 3


def test_a_workspace_that_does_not_exist_yet_is_made_private_and_kept(tmp_path):
    ws = tmp_path / "new" / "deeper"
    with Sandbox(workspace=str(ws)) as sb:
        r = sb.run_code("open('made.txt', 'w').write('kept')")
        assert r.success, r
    assert (ws / "made.txt").read_text() == "kept"
    for d in (ws, ws.parent):
        assert d.stat().st_mode & 0o777 == 0o700, oct(d.stat().st_mode)
    # An existing file there is still refused, naming the argument.
    (tmp_path / "file").write_text("x")
    with pytest.raises(SandboxError, match="workspace"):
        Sandbox(workspace=str(tmp_path / "file"))


def test_binary_output_comes_back_intact_and_a_cut_output_is_no_success():
    with Sandbox(max_output_bytes=1000) as sb:
        r = sb.run(["sh", "-c", "printf 'ok\\377\\000'; printf 'err' >&2"])
        assert r.stdout_bytes == b"ok\xff\x00" and r.stdout == "ok\ufffd\x00", r
        assert r.stderr_bytes == b"err" and r.success, r
        cut = sb.run_code("print('x' * 5000)")
        assert cut.truncated and cut.exit_code == 0 and cut.fault.type == "output_limit"
        assert not cut.success, cut


def test_per_call_options_apply_to_that_call_only():
    with Sandbox(prewarm=1, timeout_s=5, env={"A": "session"}) as sb:
        r = sb.run_code("import os; print(os.environ['A'], os.environ['B'], os.getcwd())", env={"A": "call", "B": "b"}, cwd="/tmp")
        assert r.stdout == "call b /tmp\n", r
        # The next call has the sandbox's own again (a prewarmed box serves it).
        assert sb.run_code("import os; print(os.environ['A'], os.getcwd())").stdout == "session /workspace\n"
        r = sb.run_code("import time; time.sleep(10)", timeout_s=1)
        assert r.fault.type == "timeout" and "1.000s" in r.fault.reason, r
        # A deadline longer than the sandbox's is honoured too (its own box, not a prewarmed one).
        r = sb.run_code("import time; time.sleep(6); print('slept')", timeout_s=9)
        assert r.stdout == "slept\n" and r.fault is None, r
        r = sb.run(["sh", "-c", "echo $A $PWD"], env={"A": "x"}, cwd="/workspace")
        assert r.stdout == "x /workspace\n", r
        got = []
        sb.run_code("print('streamed')", on_stdout=got.append)
        assert "".join(got) == "streamed\n", got
        k = sb.kernel(timeout_s=1)
        assert k.run_code("import time; time.sleep(3)").fault.type == "timeout"
        for bad in [dict(cwd="rel"), dict(timeout_s=0), dict(env={"A": 1}), dict(env={"A=B": "x"})]:
            with pytest.raises(InvalidArgument):
                sb.run_code("1", **bad)


def test_run_takes_stdin_as_text_or_bytes():
    with Sandbox() as sb:
        assert sb.run(["cat"], stdin="one\ntwo\n").stdout == "one\ntwo\n"
        r = sb.run(["sh", "-c", "od -An -tx1 | tr -d ' \\n'"], stdin=b"\x00\xff\x10")
        assert r.stdout == "00ff10", r
        assert sb.run(["cat"]).stdout == ""
        with pytest.raises(InvalidArgumentType, match="stdin"):
            sb.run(["cat"], stdin=3)
        # run_code takes none (the server refuses one, naming it).
        with pytest.raises(InvalidArgument, match="stdin"):
            sb._server.call("sandbox.run_code", sb._p(code="1", stdin="x"))


def test_cap_drop_is_the_container_default_set_less_those_named():
    # kern's meaning: cap_drop=() keeps a container's default set inside the user namespace (a
    # server binds a port below 1024); a name drops that one; no cap_drop keeps none.
    code = (
        "import socket\n"
        "eff = int([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1], 16)\n"
        "s = socket.socket()\n"
        "try:\n    s.bind(('127.0.0.1', 80)); low = 'bound'\n"
        "except OSError as e:\n    low = e.errno\n"
        "print(eff != 0, bool(eff & (1 << 10)), low)"
    )
    for kw, want in [({}, "False False 13"), ({"cap_drop": ()}, "True True bound"), ({"cap_drop": ["NET_BIND_SERVICE"]}, "True False 13"), ({"cap_drop": ["ALL"]}, "False False 13")]:
        with Sandbox(**kw) as sb:
            r = sb.run_code(code)
            assert r.stdout.strip() == want, (kw, r)
    # With the gateway network the default set goes without NET_RAW (never kept on that link).
    with Sandbox(network="deny-all", cap_drop=()) as sb:
        assert sb.run_code(code).stdout.strip() == "True True bound"


def test_mounts_take_kerns_dict_shape_too(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("mounted")
    out = tmp_path / "out"
    out.mkdir()
    with Sandbox(mounts={str(data): ("/data", "ro"), str(out): "/out"}) as sb:
        r = sb.run(["sh", "-c", "cat /data/in.txt; echo written > /out/f; touch /data/x"])
        assert r.stdout == "mounted" and "Read-only" in r.stderr, r
    assert (out / "f").read_text() == "written\n" and not (data / "x").exists()
    with pytest.raises(InvalidArgument, match="mounts"):
        Sandbox(mounts={str(data): ("/data", "rx")})
    # kern's targets inside the workspace and a tmpfs inside a bind: the box makes the mount
    # points (prewarmed boxes and kernels too).
    with Sandbox(mounts={str(data): ("/workspace/data", "ro"), str(out): "/out"}, tmpfs={"/out/cache": "1m"}, prewarm=1) as sb:
        r = sb.run_code("print(open('/workspace/data/in.txt').read())\nimport os\nprint(os.statvfs('/out/cache').f_blocks * os.statvfs('/out/cache').f_frsize)")
        assert r.stdout == "mounted\n1048576\n", r
        with sb.kernel() as k:
            assert k.run_code("open('/workspace/data/in.txt').read()").results[0].text == "'mounted'"
