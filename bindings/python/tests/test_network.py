"""The network options reach hull serve: a gateway mode comes back as NetworkUnavailable naming
the mode (this hull does not run the gateway yet), never as a sandbox with no network or the
host's; kern's egress_allow=[...] is a custom host list; bad entries are named by hull."""

import pytest

from hull_sandbox import NetworkUnavailable, Sandbox, run_code
from hull_sandbox._errors import InvalidArgument
from hull_sandbox._sandbox import _network


@pytest.mark.parametrize("network", ["deny-all", "allow-all", "custom", {"mode": "custom", "allow_hosts": ["api.example.com"], "ports": [8080]}])
def test_a_gateway_mode_reaches_hull_and_is_refused_naming_it(network):
    with pytest.raises(NetworkUnavailable) as e:
        run_code("print('RAN')", network=network)
    mode = network if isinstance(network, str) else network["mode"]
    assert e.value.mode == mode and e.value.kind == "network_unavailable"
    assert "network mode `%s` needs the hull-net gateway" % mode in str(e.value)


def test_egress_allow_is_a_custom_host_list():
    assert _network(False, ["api.openai.com", "*.pypi.org"]) == {"mode": "custom", "allow_hosts": ["api.openai.com", "*.pypi.org"]}
    assert _network({"deny_cidrs": ["10.0.0.0/8"]}, ["a.com"]) == {"mode": "custom", "deny_cidrs": ["10.0.0.0/8"], "allow_hosts": ["a.com"]}
    assert _network("custom", []) == {"mode": "custom", "allow_hosts": []}
    with pytest.raises(ValueError, match="egress_allow"):
        _network(True, ["a.com"])
    with pytest.raises(TypeError, match="egress_allow"):
        _network(False, "a.com")
    # Through hull: the custom mode comes back refused (the gateway is not wired yet).
    with pytest.raises(NetworkUnavailable) as e:
        Sandbox(egress_allow=["api.example.com"])
    assert e.value.mode == "custom"


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
    with pytest.raises(NetworkUnavailable) as e:
        Sandbox(name="netpy", egress_allow=["api.example.com"], secrets=[{"name": "K", "env": "HOME", "hosts": ["api.example.com"]}])
    assert e.value.mode == "custom"
    with pytest.raises(InvalidArgument) as e:
        Sandbox(name="netpy", network="custom", secrets=[{"name": "K", "value": "sk-py-secret", "hosts": ["api.example.com"]}])
    assert e.value.arg == "secrets" and "give `env`" in str(e.value)
    assert not (tmp_path / "netpy").exists()
