"""Named sandboxes through the SDK (`Sandbox(name=..., persist=True)`, `resume`, `exec`,
`spawn`): real keepers, real processes, a second SDK client in another process. Every test
keeps its sandboxes in a directory of its own (HULL_SANDBOXES) and removes them."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

import hull_sandbox
from hull_sandbox import InvalidArgument, Sandbox, SandboxError, find_hull


@pytest.fixture
def sandboxes(tmp_path, monkeypatch):
    """A private state directory for this test's sandboxes; every one is removed at the end."""
    root = tmp_path / "sandboxes"
    monkeypatch.setenv("HULL_SANDBOXES", str(root))
    yield root
    if root.is_dir():
        for name in os.listdir(root):
            subprocess.run([find_hull(), "rm", name], env=dict(os.environ, HULL_SANDBOXES=str(root)), check=False)
        assert os.listdir(root) == []


def other_process(code):
    """Runs `code` in a second Python process (another SDK client); its stdout."""
    pkg = os.path.dirname(os.path.dirname(hull_sandbox.__file__))
    env = dict(os.environ, PYTHONPATH=pkg + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_sandbox_made_by_one_process_runs_commands_for_another(sandboxes):
    sb = Sandbox(name="one", persist=True, setup="echo made > /workspace/m", env={"GREETING": "hi"})
    try:
        r = sb.exec(["cat", "/workspace/m"])
        assert (r.exit_code, r.stdout) == (0, "made\n")
        out = other_process("""
            import hull_sandbox
            sb = hull_sandbox.resume("one")
            r = sb.exec("echo $GREETING from $$ > /workspace/other; cat /workspace/m")
            print(r.stdout, end="")
            # Adopting with the same arguments is fine; with others it is refused, naming one.
            same = hull_sandbox.Sandbox(name="one", persist=True, setup="echo made > /workspace/m", env={"GREETING": "hi"})
            same.close()
            try:
                hull_sandbox.Sandbox(name="one", persist=True, memory_mb=256, setup="echo made > /workspace/m", env={"GREETING": "hi"})
            except hull_sandbox.SandboxError as e:
                print("refused", e.kind, e.detail.get("arg"))
            sb.close()
        """)
        assert out.splitlines() == ["made", "refused config_mismatch memory_mb"]
        assert sb.exec("cat /workspace/other").stdout.startswith("hi from ")
        # Without persist=True a taken name is a conflict, never adopted.
        with pytest.raises(SandboxError) as e:
            Sandbox(name="one")
        assert e.value.kind == "conflict"
    finally:
        sb.destroy()
    assert not (sandboxes / "one").exists()
    with pytest.raises(SandboxError) as e:
        hull_sandbox.resume("one")
    assert e.value.kind == "not_found"


def test_exec_takes_argv_or_a_shell_string_and_gives_the_exit_code(sandboxes):
    with Sandbox(name="codes") as sb:
        assert sb.exec(["sh", "-c", "exit 7"]).exit_code == 7
        assert sb.exec("kill -TERM $$").exit_code == 128 + 15
        r = sb.exec(["pwd"], cwd="/tmp")
        assert r.stdout == "/tmp\n" and r.success
        got = []
        r = sb.exec("echo out; echo err >&2", on_stdout=got.append, on_stderr=lambda d: got.append("E:" + d))
        assert (r.stdout, r.stderr) == ("out\n", "err\n")
        assert sorted(got) == ["E:err\n", "out\n"]
        t0 = time.monotonic()
        r = sb.exec("sleep 30", timeout_s=0.5)
        assert r.exit_code == 137 and time.monotonic() - t0 < 10
        assert "sleep 30" not in sb.exec(["ps", "-eo", "args"]).stdout
    assert not (sandboxes / "codes").exists()


def test_a_per_command_variable_is_seen_by_that_command_only(sandboxes, monkeypatch):
    monkeypatch.setenv("HULL_CALLER_SECRET", "from-the-caller")
    with Sandbox(name="env", env={"BASE": "b"}) as sb:
        r = sb.exec("echo $BASE $TOKEN ${HULL_CALLER_SECRET-unset}", env={"TOKEN": "t1"})
        assert r.stdout == "b t1 unset\n"
        p = sb.spawn("echo $TOKEN; sleep 30", env={"TOKEN": "t2"})
        r = sb.exec("echo ${TOKEN-unset}")
        assert r.stdout == "unset\n"
        assert "t2" not in sb.exec("cat /proc/*/cmdline | tr '\\0' ' '").stdout
        p.kill()
        assert p.stdout == "t2\n"


def test_a_spawned_server_serves_across_execs_and_other_clients_and_is_gone_after_stop(sandboxes):
    server = textwrap.dedent("""
        import socket
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 8765)); s.listen(8); print("listening", flush=True)
        n = 0
        while True:
            c, _ = s.accept(); n += 1; c.sendall(b"hello %d\\n" % n); c.close()
    """)
    ask = "python3 -c 'import socket; s = socket.create_connection((\"127.0.0.1\", 8765)); print(s.recv(100).decode(), end=\"\")'"
    sb = Sandbox(name="srv", persist=True)
    try:
        # Spawned by another client, which then exits: the server runs on.
        pid = other_process("""
            import hull_sandbox, time
            sb = hull_sandbox.resume("srv")
            p = sb.spawn(["python3", "-c", %r])
            for _ in range(200):
                if "listening" in p.stdout:
                    break
                time.sleep(0.05)
            print(p.id)
            sb.close()
        """ % server).strip()
        assert pid
        assert sb.exec(ask).stdout == "hello 1\n"
        assert sb.exec("true").exit_code == 0
        assert sb.exec(ask).stdout == "hello 2\n"
        sb.stop()
        # The next exec starts the sandbox again, without the server.
        r = sb.exec(ask)
        assert r.exit_code != 0 and "onnection refused" in r.stderr, r
    finally:
        sb.destroy()


def test_kill_ends_the_whole_tree_and_is_idempotent(sandboxes):
    with Sandbox(name="tree") as sb:
        seen = []
        p = sb.spawn("sleep 301 & sleep 302 & echo started; wait", on_stdout=seen.append)
        for _ in range(200):
            if p.stdout:
                break
            time.sleep(0.05)
        assert p.stdout == "started\n" and seen == ["started\n"]
        assert p.poll() is None
        r = p.kill()
        assert r.exit_code == 137
        assert p.kill().exit_code == 137
        ps = sb.exec(["ps", "-eo", "args"]).stdout
        assert "sleep 301" not in ps and "sleep 302" not in ps
        # A process that ended on its own keeps its code through a kill.
        q = sb.spawn(["sh", "-c", "echo done; exit 5"])
        assert q.wait(30).exit_code == 5
        assert q.kill().exit_code == 5
        assert q.stdout == "done\n"


def test_arguments_of_fresh_box_sessions_are_refused_with_a_name(sandboxes):
    with pytest.raises(TypeError, match="prewarm"):
        Sandbox(name="x", prewarm=2)
    with pytest.raises(TypeError, match="name="):
        Sandbox(persist=True)
    with pytest.raises(ValueError, match="name"):
        Sandbox(name="Bad Name")
    assert not sandboxes.exists() or os.listdir(sandboxes) == []


def test_files_of_a_named_sandbox(sandboxes):
    with Sandbox(name="files") as sb:
        sb.write_file("a/b.txt", "hi\n")
        assert sb.exec("cat /workspace/a/b.txt").stdout == "hi\n"
        assert sb.read_file("/workspace/a/b.txt") == b"hi\n"
        assert sb.read_file("a/b.txt", max_bytes=3) == b"hi\n"
        with pytest.raises(InvalidArgument, match="larger than max_bytes=2"):
            sb.read_file("a/b.txt", max_bytes=2)
        assert sb.read_file("a/missing") is None
        with pytest.raises(SandboxError) as e:
            sb.read_file("a")
        assert e.value.kind == "is_a_directory"
        assert sb.stat("a/b.txt")["size"] == 3 and sb.stat("nope") is None
        assert [f.path for f in sb.list_files("a")] == ["b.txt"]
        sb.write_file("/etc/hull-test", b"\x00\xff")
        assert sb.read_file("/etc/hull-test") == b"\x00\xff"
        assert sb.delete("a") is True and sb.delete("a") is False


def _can_map_users():
    if os.geteuid() == 0:
        return True
    import pwd
    me = pwd.getpwuid(os.geteuid()).pw_name
    try:
        with open("/etc/subuid") as f:
            return any(line.split(":")[0] == me for line in f)
    except OSError:
        return False


@pytest.mark.skipif(not _can_map_users(), reason="no /etc/subuid range for this user: user= needs one rootless")
def test_a_sandbox_user_runs_commands_and_one_exec_may_name_another(sandboxes):
    with Sandbox(name="usr", user="1000", setup="echo s > /root-only; chmod 600 /root-only") as sb:
        assert sb.exec("id -u; id -g").stdout == "1000\n1000\n"
        denied = sb.exec(["cat", "/root-only"])
        assert denied.exit_code != 0 and "Permission denied" in denied.stderr
        assert sb.exec(["cat", "/root-only"], user="root").stdout == "s\n"
        assert sb.exec("grep CapEff /proc/self/status").stdout == "CapEff:\t0000000000000000\n"
        # A spawned process runs as the sandbox's user too; files are written as it.
        assert sb.spawn("id -u").wait(30).stdout == "1000\n"
        sb.write_file("/workspace/w", b"x")
        assert sb.exec("stat -c %u /workspace/w").stdout == "1000\n"
        with pytest.raises(SandboxError) as e:
            sb.exec(["true"], user="ghost")
        assert "ghost" in str(e.value) and "`user`" in str(e.value) and "--user" not in str(e.value)
        # Adopting it as another user is refused, naming the argument.
        with pytest.raises(SandboxError) as e:
            Sandbox(name="usr", persist=True, user="1001", setup="echo s > /root-only; chmod 600 /root-only")
        assert e.value.kind == "config_mismatch" and e.value.detail.get("arg") == "user"
    with pytest.raises(TypeError):
        Sandbox(user="1000")


def test_a_spawned_process_output_is_iterated_as_it_comes(sandboxes):
    with Sandbox(name="iter") as sb:
        p = sb.spawn("echo one; echo err >&2; sleep 1.5; printf 'two\\nthree'")
        seen = []
        t0 = time.monotonic()
        for stream, text in p:
            seen.append((stream, text, time.monotonic() - t0))
        assert [(s, t) for s, t, _ in seen if s == "stderr"] == [("stderr", "err\n")]
        assert "".join(t for s, t, _ in seen if s == "stdout") == "one\ntwo\nthree"
        # The first chunks came as they were printed, before the sleep: well before the last.
        assert seen[-1][2] - seen[0][2] > 0.8, seen
        assert p.poll() == 0
        # Every iterator sees the output from the start; lines() splits one stream.
        assert list(p.lines()) == ["one\n", "two\n", "three"]
        assert list(p.lines("stderr")) == ["err\n"]
        with pytest.raises(ValueError, match="stream"):
            list(p.lines("both"))


def test_a_file_is_read_as_text_or_a_range_of_its_lines(sandboxes):
    with Sandbox(name="text") as sb:
        sb.write_file("notes.txt", "first\nsecond\rstill second\nthird\nfourth")
        assert sb.read_text("notes.txt") == "first\nsecond\rstill second\nthird\nfourth"
        assert sb.read_text("notes.txt", lines=(2, 3)) == "second\rstill second\nthird\n"
        assert sb.read_text("notes.txt", lines=(3, None)) == "third\nfourth"
        assert sb.read_text("notes.txt", lines=(9, 10)) == ""
        assert sb.read_text("missing.txt") is None
        for bad in ((0, 2), (3, 2), (1,), "1-2", (True, 2)):
            with pytest.raises(ValueError, match="lines"):
                sb.read_text("notes.txt", lines=bad)
        sb.write_file("bin", b"\xff\xfe")
        with pytest.raises(UnicodeDecodeError):
            sb.read_text("bin")
        assert sb.read_text("bin", errors="replace") == "\ufffd\ufffd"


def test_a_stopped_sandbox_is_resumed_with_its_disk_and_configuration(sandboxes):
    sb = Sandbox(name="again", persist=True, env={"KEPT": "yes"})
    try:
        sb.exec("mkdir -p /opt/tool && echo v1 > /opt/tool/version && sleep 300 >/dev/null 2>&1 &")
        sb.stop()
        sb.close()
        back = hull_sandbox.resume("again")
        r = back.exec("cat /opt/tool/version; echo $KEPT; pwd; ps -eo args | grep -c '^sleep 300'")
        assert r.stdout == "v1\nyes\n/workspace\n0\n", r
        back.close()
    finally:
        hull_sandbox.resume("again").destroy()


def ps_args(sb):
    return [l.strip() for l in sb.exec(["ps", "-eo", "args"]).stdout.splitlines()]


def test_kill_by_another_client_ends_a_setsid_daemon_and_twice_is_fine(sandboxes):
    with Sandbox(name="daemon", persist=True) as sb:
        # Spawned by another client, which exits: a daemon that left the spawn's session and
        # was adopted by pid 1, beside the spawn's own child.
        handle = other_process("""
            import hull_sandbox
            sb = hull_sandbox.resume("daemon")
            p = sb.spawn("setsid sh -c 'sleep 4252 & exit 0'; sleep 4253 & wait")
            print(p.id)
            sb.close()
        """).strip()
        for _ in range(200):
            if "sleep 4252" in ps_args(sb):
                break
            time.sleep(0.05)
        assert "sleep 4252" in ps_args(sb)
        p = sb.process(handle)
        assert p.kill().exit_code == 137
        ps = ps_args(sb)
        assert "sleep 4252" not in ps and "sleep 4253" not in ps, ps
        assert p.kill().exit_code == 137
        with pytest.raises(SandboxError) as e:
            sb.process("s1n999").wait(30)
        assert e.value.kind == "not_found"
        sb.destroy()


def test_a_spawn_with_stdin_reads_what_is_written_until_close_stdin(sandboxes):
    with Sandbox(name="stdin") as sb:
        p = sb.spawn('while read l; do echo "got $l"; done; echo eof', stdin=True)
        p.write("a\n")
        p.write(b"b\n")
        p.close_stdin("c\n")
        assert p.wait(30).stdout == "got a\ngot b\ngot c\neof\n"
        with pytest.raises(SandboxError) as e:
            p.write("late")
        assert "no stdin" in str(e.value)
        with pytest.raises(TypeError):
            sb.spawn("cat", stdin="yes")


def test_a_spawns_output_is_in_hull_logs(sandboxes):
    with Sandbox(name="logs") as sb:
        sb.spawn("echo sdk-$((2+3))-marker; sleep 60")
        for _ in range(200):
            logs = subprocess.run([find_hull(), "logs", "logs"], capture_output=True, text=True).stdout
            if "sdk-5-marker" in logs:
                break
            time.sleep(0.05)
        assert "sdk-5-marker" in logs, logs


def test_file_paths_resolve_inside_the_sandbox_root(sandboxes, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    with Sandbox(name="links") as sb:
        assert sb.exec("ln -s %s /workspace/abs && ln -s ../../../../../../..%s /workspace/up" % (secret, secret)).exit_code == 0
        for link in ("abs", "up"):
            assert sb.read_file(link) is None
            try:
                sb.write_file(link, "pwned\n")
            except hull_sandbox.HullError as e:  # the link's target directory is not in the sandbox
                assert e.kind == "io", e
        assert secret.read_text() == "host secret\n"
        sb.write_file("lines.txt", "one\ntwo\nthree\n")
        assert sb.read_text("lines.txt", lines=(2, 2)) == "two\n"
        assert sb.read_text("lines.txt", lines=(3, None)) == "three\n"
        assert sb.read_text("nope.txt") is None
        with pytest.raises(SandboxError) as e:
            sb.write_file("/workspace", "x")
        assert e.value.kind == "is_a_directory"
        with pytest.raises(SandboxError) as e:
            sb.list_files("lines.txt")
        assert e.value.kind == "not_a_directory"
        # Written as the sandbox's user.
        assert sb.exec("stat -c %u lines.txt").stdout == "0\n"


def test_a_template_logs_and_the_list_of_sandboxes(sandboxes):
    with Sandbox(name="base", env={"FROM_BASE": "1"}) as base:
        assert base.exec("mkdir -p /opt && echo baked > /opt/baked && echo printed-$((6*7))").exit_code == 0
        base.stop()
        out = subprocess.run([find_hull(), "template", "save", "base", "t1"], capture_output=True, text=True)
        assert out.returncode == 0, out
        with Sandbox(name="child", template="t1", env={"MINE": "2"}) as child:
            assert child.exec("cat /opt/baked; echo $FROM_BASE$MINE").stdout == "baked\n12\n"
            listed = {s["name"]: s for s in hull_sandbox.list_sandboxes()}
            assert listed["child"]["state"] == "running" and listed["child"]["user"] == "root"
            assert listed["base"]["state"] == "stopped"
        assert "printed-42\n" in base.logs()
        assert base.logs(max_bytes=5) == base.logs()[-5:]
    with pytest.raises(ValueError) as e:
        Sandbox(name="other", template="t1", image="busybox:1")
    assert e.value.arg == "image" and "template `t1` is of image `host`" in str(e.value)
    with pytest.raises(TypeError):
        Sandbox(template="t1")
    subprocess.run([find_hull(), "template", "rm", "t1"], check=True)
    # The store's own lock file and layer directory stay; the test's state directory goes.
    import shutil
    shutil.rmtree(sandboxes / ".templates")
