"""The network options reach hull serve: a gateway mode puts the sandbox's boxes behind their
gateway (names judged by the policy, refusals at once, the gateway as their DNS server), secrets
are refused until the gateway brokers them (never run without); kern's egress_allow=[...] is a
custom host list; bad entries are named by hull. Nothing leaves the host: names are refused
without the host resolving them, and the one connection tried is to the gateway itself."""

import pytest

from hull_sandbox import NetworkUnavailable, Sandbox, SandboxError, resume, run_code
from hull_sandbox._errors import InvalidArgument
from hull_sandbox._sandbox import _network


PROBE = """
import socket
try:
    print('name', socket.gethostbyname('api.example.test'))
except OSError as e:
    print('name refused')
try:
    socket.create_connection(('10.0.2.2', 9), timeout=5)
    print('connected')
except ConnectionRefusedError:
    print('connect refused')
print(open('/etc/resolv.conf').read().strip())
"""


@pytest.mark.parametrize("network", ["deny-all", "custom", {"mode": "custom", "allow_hosts": ["api.other.test"], "ports": [8080]}])
def test_a_gateway_mode_puts_the_box_behind_its_gateway(network):
    r = run_code(PROBE, network=network)
    assert r.stdout == "name refused\nconnect refused\nnameserver 10.0.2.2\n", r
    with Sandbox(network=network) as sb:
        assert sb.run_code(PROBE).stdout.endswith("connect refused\nnameserver 10.0.2.2\n")


def test_a_brokered_secret_is_only_a_placeholder_in_the_box(monkeypatch):
    # (Brokering's data path, the real value upstream and the scrubbed echo, is tested end
    # to end in crates/hull-cli/tests/brokering.rs.)
    monkeypatch.setenv("HULL_PY_NET_KEY", "sk-py-real-value")
    code = "import os, glob\nprint(os.environ['HULL_PY_NET_KEY'])\nprint(os.environ['SSL_CERT_FILE'])\ndef env_of(p):\n    try:\n        return open(p, 'rb').read()\n    except OSError:\n        return b''\nprint(any(b'sk-py-real' in env_of(p) for p in glob.glob('/proc/[0-9]*/environ')))"
    r = run_code(code, network="custom", secrets=[{"name": "HULL_PY_NET_KEY", "env": "HULL_PY_NET_KEY", "hosts": ["api.example.test"]}])
    key, bundle, leaked = r.stdout.splitlines()
    assert key.startswith("hull-secret-HULL_PY_NET_KEY-") and bundle == "/.hull-ca/bundle.pem" and leaked == "False", r
    # The system bundle (what programs read without the variables) holds the gateway CA too,
    # in a session's boxes as in a one-shot one.
    covered = "print(open('/etc/ssl/certs/ca-certificates.crt').read().strip().endswith(open('/.hull-ca/ca.pem').read().strip()))"
    secrets = [{"name": "K", "value": "sk-py-secret", "hosts": ["api.example.test"]}]
    assert run_code(covered, network="custom", secrets=secrets).stdout == "True\n"
    with Sandbox(network="custom", secrets=secrets) as sb:
        assert sb.run_code(covered).stdout == "True\n"


def test_egress_allow_is_a_custom_host_list():
    assert _network(False, ["api.openai.com", "*.pypi.org"]) == {"mode": "custom", "allow_hosts": ["api.openai.com", "*.pypi.org"]}
    assert _network({"deny_cidrs": ["10.0.0.0/8"]}, ["a.com"]) == {"mode": "custom", "deny_cidrs": ["10.0.0.0/8"], "allow_hosts": ["a.com"]}
    assert _network("custom", []) == {"mode": "custom", "allow_hosts": []}
    with pytest.raises(ValueError, match="egress_allow"):
        _network(True, ["a.com"])
    with pytest.raises(TypeError, match="egress_allow"):
        _network(False, "a.com")
    # Through hull: api.example.test is allowed, any other name is not.
    with Sandbox(egress_allow=["api.example.test"]) as sb:
        out = sb.run_code("import socket\nfor n in ('api.example.test', 'other.example.test'):\n    try:\n        print(n, socket.gethostbyname(n).startswith('198.1'))\n    except OSError:\n        print(n, 'refused')").stdout
    assert out == "api.example.test True\nother.example.test refused\n", out


def test_bad_entries_are_named_by_hull():
    with pytest.raises(InvalidArgument) as e:
        Sandbox(egress_allow=["a..b"])
    assert e.value.arg == "network" and "allow_hosts: allowed host `a..b`" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        Sandbox(network={"mode": "none", "ports": [80]})
    assert "mode none with ports" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        Sandbox(network=True, secrets=[{"name": "K", "value": "sk-py-secret", "hosts": ["a.com"]}])
    assert e.value.arg == "secrets" and "sk-py-secret" not in str(e.value)
    with pytest.raises(TypeError, match="network must be True/False or one of"):
        Sandbox(network="maybe")


def test_none_and_host_run_as_before():
    assert run_code("print(1)", network=False).stdout.strip() == "1"
    assert run_code("print(1)", network="none").stdout.strip() == "1"


def test_a_named_sandbox_takes_the_network_and_refuses_a_value(tmp_path, monkeypatch):
    monkeypatch.setenv("HULL_SANDBOXES", str(tmp_path))
    monkeypatch.setenv("HULL_PY_NAMED_KEY", "sk-py-named-value")
    sb = Sandbox(name="netsec", egress_allow=["api.example.test"], secrets=[{"name": "K", "env": "HULL_PY_NAMED_KEY", "hosts": ["api.example.test"]}])
    try:
        out = sb.exec(["sh", "-c", "echo $K"]).stdout
        assert out.startswith("hull-secret-K-") and "sk-py" not in out, out
    finally:
        sb.destroy()
    with pytest.raises(InvalidArgument) as e:
        Sandbox(name="netpy", network="custom", secrets=[{"name": "K", "value": "sk-py-secret", "hosts": ["api.example.com"]}])
    assert e.value.arg == "secrets" and "give `env`" in str(e.value)
    assert not (tmp_path / "netpy").exists()


def test_a_named_sandboxs_policy_is_replaced_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("HULL_SANDBOXES", str(tmp_path))
    probe = "import socket\ntry:\n    print(socket.gethostbyname('api.example.test').startswith('198.1'))\nexcept OSError:\n    print('refused')"
    sb = Sandbox(name="livepy", egress_allow=["api.example.test"])
    try:
        assert sb.exec(["python3", "-c", probe]).stdout == "True\n"
        assert sb.set_network_policy("deny-all") is True
        assert sb.exec(["python3", "-c", probe]).stdout == "refused\n"
        assert sb.set_network_policy(egress_allow=["api.example.test"]) is True
        assert sb.exec(["python3", "-c", probe]).stdout == "True\n"
        with pytest.raises(InvalidArgument) as e:
            sb.set_network_policy("host")
        assert e.value.arg == "network"
    finally:
        sb.destroy()


def _line_from(port):
    """The first line a loopback server at `port` sends (retrying while the box's server starts)."""
    import socket
    import time

    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
                got = c.makefile().readline()
                if got:
                    return got
        except OSError:
            pass
        time.sleep(0.05)
    return "nothing"


def test_a_named_sandboxs_published_ports_reach_its_server_from_the_hosts_loopback(tmp_path, monkeypatch):
    monkeypatch.setenv("HULL_SANDBOXES", str(tmp_path))
    server = "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', 8080)); s.listen(8)\nwhile True:\n    c, _ = s.accept(); c.sendall(b'from the box\\n'); c.close()\n"
    sb = Sandbox(name="portspy", network={"mode": "deny-all", "ports": [8080]})
    try:
        assert [p["port"] for p in sb.ports] == [8080]
        assert sb.ports[0]["host_port"] > 0
        sb.spawn(["python3", "-c", server])
        assert _line_from(sb.ports[0]["host_port"]) == "from the box\n"
        sb.stop()
        assert sb.ports == []
        again = resume("portspy")
        try:
            assert [p["port"] for p in again.ports] == [8080]
            again.spawn(["python3", "-c", server])
            assert _line_from(again.ports[0]["host_port"]) == "from the box\n"
        finally:
            again.close()
    finally:
        sb.destroy()
    plain = Sandbox(name="plainpy")
    try:
        assert plain.ports == []
    finally:
        plain.destroy()


def test_a_sessions_policy_is_replaced_while_it_lives():
    # Names only (answered by the gateway itself): nothing is dialled.
    probe = "import socket\ntry:\n    print(socket.gethostbyname('api.example.test').startswith('198.1'))\nexcept OSError:\n    print('refused')"
    with Sandbox(egress_allow=["api.example.test"]) as sb:
        with sb.kernel() as k:
            assert k.run_code(probe).stdout == "True\n"
            assert sb.set_network_policy("deny-all") >= 1
            assert k.run_code(probe).stdout == "refused\n"
            assert sb.run_code(probe).stdout == "refused\n"
            sb.set_network_policy(egress_allow=["api.example.test"])
            assert k.run_code(probe).stdout == "True\n"
    with Sandbox() as plain:
        with pytest.raises(SandboxError) as e:
            plain.set_network_policy("deny-all")
    assert e.value.arg == "network"
