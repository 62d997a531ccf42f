"""hull_sandbox.langchain.hull_execution_policy: langchain's real ShellToolMiddleware and agent
(create_agent) with a scripted chat model, its shell in a real hull named sandbox."""

import json
import os
import re
import subprocess
import time

import pytest

pytest.importorskip("langchain.agents.middleware.shell_tool", reason="langchain is not installed (scripts/setup.sh installs it)")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import ShellToolMiddleware  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

from hull_sandbox import SandboxError, find_hull  # noqa: E402
from hull_sandbox.langchain import hull_execution_policy  # noqa: E402


class ShellScript(BaseChatModel):
    """A stand-in for a tool-calling chat model: one call of the bound shell tool per command
    (in order, one per turn), then an answer quoting every tool message."""

    commands: list
    tools: list = []

    @property
    def _llm_type(self):
        return "scripted-shell-model"

    def bind_tools(self, tools, **kwargs):
        return self.model_copy(update={"tools": [convert_to_openai_tool(t) for t in tools]})

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        done = [m for m in messages if isinstance(m, ToolMessage)]
        if len(done) < len(self.commands):
            name = self.tools[0]["function"]["name"]
            call = {"name": name, "args": {"command": self.commands[len(done)]}, "id": "call_%d" % len(done)}
            msg = AIMessage(content="", tool_calls=[call])
        else:
            msg = AIMessage(content="\n---\n".join(m.content for m in done))
        return ChatResult(generations=[ChatGeneration(message=msg)])


def run_agent(policy, commands, **middleware_args):
    """One agent run; the tool messages' contents, in order."""
    agent = create_agent(ShellScript(commands=commands), middleware=[ShellToolMiddleware(execution_policy=policy, **middleware_args)])
    out = agent.invoke({"messages": [HumanMessage("Use the shell.")]})
    tools = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(tools) == len(commands), out["messages"]
    assert out["messages"][-1].content == "\n---\n".join(m.content for m in tools)
    return [m.content for m in tools]


@pytest.fixture
def sandboxes(tmp_path, monkeypatch):
    """A private state directory for this test's sandboxes; every one is removed at the end."""
    root = tmp_path / "sandboxes"
    monkeypatch.setenv("HULL_SANDBOXES", str(root))
    yield root
    if root.is_dir():
        for name in os.listdir(root):
            subprocess.run([find_hull(), "rm", name], check=False)


def listed(root):
    return sorted(n for n in os.listdir(root) if not n.startswith(".")) if root.is_dir() else []


def gone_soon(root, name, seconds=10):
    end = time.monotonic() + seconds
    while name in listed(root) and time.monotonic() < end:
        time.sleep(0.1)
    return name not in listed(root)


def test_the_agents_shell_runs_in_one_sandbox_that_goes_with_the_run(sandboxes):
    policy = hull_execution_policy(name="lc-agent")
    try:
        out = run_agent(policy, [
            "hostname; cat /proc/1/comm; cd /tmp && export HULL_LC_STATE=kept && echo from-the-sandbox > /workspace/proof && echo $$ > /tmp/shell-pid",
            "pwd; echo $HULL_LC_STATE; cat /workspace/proof; [ $$ = $(cat /tmp/shell-pid) ] && echo same-shell",
            "ls /workspace/proof /run/lc-agent-host-only",
        ])
        # Inside the sandbox: its hostname is its name, the pid 1 the shell sees is the box's
        # init, and the shell lived across the calls (the cd, the variable and its pid carried over).
        assert out[0] == "lc-agent\nhull-init\n", out
        assert out[1] == "/tmp\nkept\nfrom-the-sandbox\nsame-shell\n", out
        # stderr and the exit code reach the model as the middleware labels them.
        lines = out[2].splitlines()
        assert sorted(lines[:2]) == ["/workspace/proof", "[stderr] ls: cannot access '/run/lc-agent-host-only': No such file or directory"], out
        assert lines[2:] == ["", "Exit code: 2"], out
        # The run is over: its shell ended and its sandbox is removed.
        assert gone_soon(sandboxes, "lc-agent"), listed(sandboxes)
        assert policy.sandboxes() == []
    finally:
        policy.close()


def test_without_a_name_each_run_gets_a_fresh_sandbox(sandboxes):
    policy = hull_execution_policy()
    try:
        first = run_agent(policy, ["hostname; echo one > /workspace/f"])[0].strip()
        second = run_agent(policy, ["hostname; cat /workspace/f 2>&1"])[0].splitlines()
        assert re.fullmatch(r"lc-shell-[0-9a-f]{12}", first), first
        assert second[0] != first and second[0].startswith("lc-shell-")
        assert "No such file or directory" in second[1]
        assert gone_soon(sandboxes, second[0]) and gone_soon(sandboxes, first)
    finally:
        policy.close()


def test_a_persistent_sandbox_is_kept_and_adopted_by_the_next_run(sandboxes):
    policy = hull_execution_policy(name="lc-keep", persist=True, memory_mb=256, cpus=1, pids=64, setup="echo set-up > /workspace/setup")
    try:
        assert run_agent(policy, ["cat /workspace/setup; echo run-one > /workspace/note; cd /tmp; pwd"]) == ["set-up\n/tmp\n"]
        time.sleep(3)
        # The run's session is over (the policy holds nothing of it), its sandbox kept.
        assert "lc-keep" in listed(sandboxes) and policy.sandboxes() == []
        # Made with the policy's caps (its configuration as hull create records it).
        cfg = json.loads((sandboxes / "lc-keep" / "config.json").read_text())
        assert (cfg["memory"], cfg["cpus"], cfg["pids"]) == (256 << 20, 1.0, 64), cfg
        # The next run: the same disk, a new shell (it starts in /workspace again).
        assert run_agent(policy, ["cat note; pwd"]) == ["run-one\n/workspace\n"]
        r = subprocess.run([find_hull(), "exec", "lc-keep", "--", "cat", "/workspace/note"], capture_output=True, text=True)
        assert r.stdout == "run-one\n"
        # Adopting with other arguments is refused, naming the one that differs.
        with pytest.raises(SandboxError) as e:
            run_agent(hull_execution_policy(name="lc-keep", persist=True, memory_mb=128, cpus=1, pids=64, setup="echo set-up > /workspace/setup"), ["true"])
        assert e.value.kind == "config_mismatch" and e.value.detail.get("arg") == "memory_mb"
    finally:
        policy.close()
    assert "lc-keep" in listed(sandboxes)
    with pytest.raises(ValueError, match="name="):
        hull_execution_policy(persist=True)


def test_a_timed_out_command_restarts_the_shell_in_the_same_sandbox(sandboxes):
    policy = hull_execution_policy(name="lc-restart", command_timeout=2)
    try:
        out = run_agent(policy, [
            "echo before > /workspace/f; echo $$",
            "sleep 60",
            "cat /workspace/f; echo $$; ps -eo args | grep -c '^sleep 60' || true",
        ])
        assert out[1].startswith("Error: Command timed out"), out
        lines = out[2].splitlines()
        # The file is still there (the same sandbox), the shell is a new one, and the command
        # that timed out was killed with the old shell.
        assert lines[0] == "before" and lines[1] != out[0] and lines[2] == "0", out
        assert gone_soon(sandboxes, "lc-restart")
    finally:
        policy.close()


def test_the_workspace_root_is_mounted_and_variables_stay_off_command_lines(sandboxes, tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "README").write_text("the host's project\n")
    secret = "s3cr3t-%d" % os.getpid()
    policy = hull_execution_policy()
    try:
        out = run_agent(policy, [
            "cat README; echo made-inside > out.txt; echo $LC_TOKEN",
            # (`[s]` keeps grep from finding its own command line)
            "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '[s]%s' || true" % secret[1:],
        ], workspace_root=str(root), env={"LC_TOKEN": secret})
        assert out[0] == "the host's project\n%s\n" % secret, out
        assert out[1] == "0\n", out
        assert (root / "out.txt").read_text() == "made-inside\n"
        # On the host too: the variable is in hull exec's environment, not its command line.
        proc = policy.spawn(workspace=root, env={"LC_TOKEN": secret}, command=("/bin/bash",))
        proc.stdin.write("echo $LC_TOKEN\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == secret + "\n"
        with open("/proc/%d/cmdline" % proc.pid, "rb") as f:
            argv = f.read().split(b"\0")
        assert b"LC_TOKEN" in argv and not any(secret.encode() in a for a in argv), argv
        proc.stdin.write("exit\n")
        proc.stdin.close()
        assert proc.wait(10) == 0
    finally:
        policy.close()


def test_bad_fields_are_refused_when_the_policy_is_made(sandboxes):
    for bad, field in (({"name": "Bad Name"}, "name"), ({"persist": True}, "name="), ({"memory_mb": "lots"}, "memory_mb"),
                       ({"memory_mb": 8}, "memory_mb"), ({"cpus": 0}, "cpus"), ({"pids": -1}, "pids"), ({"setup": 3}, "setup"),
                       ({"max_output_lines": 0}, "max_output_lines")):
        with pytest.raises((ValueError, TypeError), match=field):
            hull_execution_policy(**bad)
    with pytest.raises(TypeError, match="network"):
        hull_execution_policy(network=True)
    assert listed(sandboxes) == []


def test_without_langchain_the_policy_says_what_to_install():
    import sys

    code = "import sys\nsys.modules['langchain'] = None\nfrom hull_sandbox.langchain import hull_execution_policy\ntry:\n    hull_execution_policy()\nexcept ImportError as e:\n    print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'hull-sandbox[langchain-shell]'" in out, out


def test_close_ends_the_live_shells_and_removes_their_sandboxes_at_once(sandboxes, tmp_path):
    policy = hull_execution_policy(name="lc-close")
    proc = policy.spawn(workspace=tmp_path / "langchain-shell-x", env={}, command=("/bin/bash",))
    proc.stdin.write("sleep 300 & hostname\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "lc-close\n"
    assert policy.sandboxes() == ["lc-close"] and "lc-close" in listed(sandboxes)
    policy.close()
    assert proc.poll() is not None
    assert "lc-close" not in listed(sandboxes)
    with pytest.raises(RuntimeError, match="closed"):
        policy.spawn(workspace=tmp_path, env={}, command=("/bin/bash",))


def test_an_async_agent_run(sandboxes):
    import asyncio

    policy = hull_execution_policy(name="lc-async")
    try:
        agent = create_agent(ShellScript(commands=["export N=41", "echo $((N + 1)) $(hostname)"]), middleware=[ShellToolMiddleware(execution_policy=policy)])
        out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("Use the shell.")]}))
        tools = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
        assert tools == ["<no output>", "42 lc-async\n"], tools
        assert gone_soon(sandboxes, "lc-async")
    finally:
        policy.close()
