"""Sandbox(isolation="vm"): each call in a microVM with a guest kernel of its own (docs/vm.md).
The VMs boot under QEMU's TCG where /dev/kvm cannot run a standard guest (seconds each), so
these tests are few. They need QEMU, virtiofsd, the guest kernel (scripts/vm-guest.sh) and a
static hull as the guest's init (HULL_VM_AGENT; scripts/test.sh sets it)."""

import os
import platform
import shutil
import subprocess
import sys
import time

import pytest

from hull_sandbox import InvalidArgument, Sandbox, SandboxError, find_hull


# scripts/busybox-image.py makes the image (also used by the Node and MCP tests); the rootless
# pass stages a copy beside this file.
_HERE = os.path.dirname(os.path.abspath(__file__))
BUSYBOX_IMAGE = os.path.join(_HERE, "busybox-image.py")
if not os.path.exists(BUSYBOX_IMAGE):
    BUSYBOX_IMAGE = os.path.join(_HERE, "..", "..", "..", "scripts", "busybox-image.py")


def _missing():
    """What this host lacks to boot a VM (nothing: an empty list)."""
    return [what for what, ok in (
        ("HULL_VM_AGENT (a static hull: scripts/build-static.sh)", os.environ.get("HULL_VM_AGENT")),
        ("qemu-system-x86_64", shutil.which("qemu-system-x86_64")),
        ("virtiofsd", shutil.which("virtiofsd") or os.environ.get("HULL_VIRTIOFSD")),
        ("the guest kernel (scripts/vm-guest.sh)", os.environ.get("HULL_VM_KERNEL") or os.path.exists("/usr/local/lib/hull/vm/vmlinuz")),
        ("/bin/busybox (busybox-static)", os.path.exists("/bin/busybox")),
    ) if not ok]


def _busybox_image():
    """The name of a busybox image in hull's store (made now)."""
    name = "hull-test-vm/busybox:1"
    out = subprocess.run([sys.executable, BUSYBOX_IMAGE, name], capture_output=True, text=True, env=dict(os.environ, HULL_BIN=find_hull()))
    assert out.returncode == 0, out.stderr
    return name


@pytest.fixture(scope="module")
def vm_image():
    """The name of a busybox image in hull's store, or a skip saying what this host lacks."""
    if os.geteuid() == 0:
        pytest.skip("the rootless pass boots it; the root pass boots test_as_host_root_a_vm_sandbox_writes_as_hulls_range_and_never_as_root")
    missing = _missing()
    if missing:
        pytest.skip("no VM here: missing " + ", ".join(missing))
    return _busybox_image()


def test_a_vm_sandboxs_calls_run_under_a_kernel_of_their_own_and_share_the_workspace(vm_image, tmp_path):
    with Sandbox(image=vm_image, isolation="vm", workspace=str(tmp_path), memory_mb=128) as sb:
        r = sb.run(["sh", "-c", "uname -r; grep CapEff /proc/self/status; echo made > /workspace/f; echo err >&2; exit 3"])
        assert r.exit_code == 3, r
        kernel, caps = r.stdout.splitlines()[:2]
        assert kernel != platform.release(), "the guest's kernel, not the host's"
        assert caps.split() == ["CapEff:", "0000000000000000"]
        assert r.stderr == "err\n"
        # The workspace is the host's directory, and the next call (another VM) sees it.
        assert (tmp_path / "f").read_text() == "made\n"
        assert sb.run(["cat", "/workspace/f"]).stdout == "made\n"
        assert sb.read_file("f") == b"made\n"
        with pytest.raises(SandboxError) as e:
            sb.kernel()
        assert "isolation" in str(e.value)


def _qemus():
    """Pids of this user's QEMU processes."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            continue
        name = status.split("\n", 1)[0].split()[-1]
        uid = next(int(l.split()[1]) for l in status.splitlines() if l.startswith("Uid:"))
        if name.startswith("qemu-system") and uid == os.geteuid():
            out.append(int(pid))
    return out


def test_a_vm_sandbox_with_prewarm_runs_its_calls_in_guests_booted_ahead(vm_image):
    """prewarm=N boots N guests when the session is made and one after each call that took
    one: a call's guest has then been up since before the call (its /proc/uptime says so: a
    guest booted for the call would show only its boot). The guests end with the session."""
    before = set(_qemus())
    with Sandbox(image=vm_image, isolation="vm", prewarm=1) as sb:
        deadline = time.time() + 120
        while not set(_qemus()) - before and time.time() < deadline:
            time.sleep(0.2)
        assert set(_qemus()) - before, "no guest was booted ahead"
        # Booted (seconds under TCG), then idle until the call.
        time.sleep(25)
        r = sb.run(["cat", "/proc/uptime"])
        assert r.exit_code == 0, r
        assert float(r.stdout.split()[0]) >= 20, r.stdout
        # The next one was booted after that call; the session's files are the same.
        r = sb.run(["sh", "-c", "echo made > /workspace/f; cat /workspace/f"])
        assert r.stdout == "made\n", r
    deadline = time.time() + 30
    while set(_qemus()) - before and time.time() < deadline:
        time.sleep(0.2)
    assert not set(_qemus()) - before, "a guest booted ahead outlived its session"


def test_a_vm_sandbox_is_behind_its_gateway(vm_image):
    """A gateway mode gives each call's VM a network device served by its own gateway (the
    namespace tier's): the program's resolver is the gateway, which answers it (here refusing
    a name deny-all does not allow). What the policy lets through is vm.rs's
    a_vm_behind_its_gateway_... (loopback servers of the test's)."""
    with Sandbox(image=vm_image, isolation="vm", network="deny-all") as sb:
        r = sb.run(["sh", "-c", "cat /etc/resolv.conf; nslookup example.test 2>&1; true"])
        assert r.exit_code == 0, r
        assert r.stdout.startswith("nameserver 10.0.2.2\n"), r.stdout
        assert "server can't find example.test" in r.stdout, r.stdout


def test_a_vm_sandbox_holds_only_its_secrets_placeholders_and_trusts_the_gateway_ca(monkeypatch):
    """Credential brokering in a VM session, in both passes (as host root the trust reaches the
    guest as hull's range would read it): the guest's environment has the placeholder, never
    the value; the gateway CA is in the trust directory and at the end of the image's system
    bundle, which is read-only. The brokered round trip itself is vm.rs's
    a_vm_brokered_secret_reaches_its_host_and_never_the_guest (curl through loopback servers)."""
    missing = _missing()
    if missing:
        pytest.fail("both passes boot a VM here; missing " + ", ".join(missing))
    image = _busybox_image()
    monkeypatch.setenv("HULL_PY_VM_KEY", "sk-py-vm-real")
    secrets = [{"name": "K", "env": "HULL_PY_VM_KEY", "hosts": ["api.example.test"]}]
    script = ("echo $K; echo $SSL_CERT_FILE; grep -l sk-py-vm-real /proc/[0-9]*/environ || echo clean; "
              "echo x >> /etc/ssl/certs/ca-certificates.crt || echo read-only; "
              "cat /.hull-ca/ca.pem; echo =bundle=; cat /etc/ssl/certs/ca-certificates.crt")
    with Sandbox(image=image, isolation="vm", network="custom", secrets=secrets) as sb:
        r = sb.run(["sh", "-c", script])
    assert r.exit_code == 0, r
    head, bundle = r.stdout.split("=bundle=\n")
    key, cert_file, clean, read_only, ca = head.split("\n", 4)
    assert key.startswith("hull-secret-K-") and "sk-py-vm-real" not in r.stdout, r
    assert (cert_file, clean, read_only) == ("/.hull-ca/bundle.pem", "clean", "read-only"), r
    assert ca.startswith("-----BEGIN CERTIFICATE-----"), r
    assert bundle.startswith("# the test image's CA bundle\n") and bundle.endswith(ca), r


def test_what_a_vm_sandbox_cannot_do_yet_is_refused_naming_the_argument():
    with pytest.raises(InvalidArgument) as e:
        Sandbox(isolation="vm", prewarm=1, network="deny-all")
    assert "prewarm" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        Sandbox(isolation="vm", network=True)
    assert "network" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        Sandbox(require_kvm=True)
    assert "require_kvm" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        Sandbox(name="vm-named", isolation="vm")
    assert "named" in str(e.value)


def test_as_host_root_a_vm_sandbox_writes_as_hulls_range_and_never_as_root(tmp_path):
    """As host root the guest's root is hull's range on every share it writes (it could
    otherwise leave a setuid-root program on the host): the session's workspace is given to
    the range, files the host puts there follow it (the program can change them), and a
    writable workspace of host root's own is refused, naming it."""
    if os.geteuid() != 0:
        pytest.skip("host root's mapping; an unprivileged caller's is its own")
    missing = _missing()
    if missing:
        pytest.fail("the root pass boots a VM; missing " + ", ".join(missing))
    name = "hull-test-vm/busybox:1"
    out = subprocess.run([sys.executable, BUSYBOX_IMAGE, name], capture_output=True, text=True, env=dict(os.environ, HULL_BIN=find_hull()))
    assert out.returncode == 0, out.stderr
    base = 0x7FFD0000
    with pytest.raises(InvalidArgument) as e:
        Sandbox(isolation="vm", image=name, workspace=str(tmp_path))
    assert "workspace" in str(e.value) and "host root's" in str(e.value), e.value
    with Sandbox(isolation="vm", image=name) as sb:
        sb.write_file("notes/in.txt", b"from the host\n")
        r = sb.run(["sh", "-c", "id -u; cat notes/in.txt; echo more >> notes/in.txt; echo made > f; chmod 4755 f"])
        assert r.exit_code == 0 and r.stdout == "0\nfrom the host\n", r
        ws = sb.workspace
        for p in (ws, os.path.join(ws, "notes"), os.path.join(ws, "notes", "in.txt"), os.path.join(ws, "f")):
            st = os.stat(p)
            assert (st.st_uid, st.st_gid) == (base, base), (p, st)
        assert sb.read_file("notes/in.txt") == b"from the host\nmore\n"
        # The setuid bit the guest set is on a file of the range's, never of host root's.
        assert os.stat(os.path.join(ws, "f")).st_mode & 0o4000
        # Only what hull made is given away: not another user's file, nor one a hard link
        # shares with a file of host root's elsewhere.
        outside = tmp_path / "roots-file"
        outside.write_bytes(b"root's\n")
        os.link(outside, os.path.join(ws, "linked"))
        with open(os.path.join(ws, "users"), "wb"):
            pass
        os.chown(os.path.join(ws, "users"), 1001, 1001)
        sb.write_file("linked", b"x")
        sb.write_file("users", b"y")
        assert (os.stat(outside).st_uid, os.stat(os.path.join(ws, "users")).st_uid) == (0, 1001)
        # A restored workspace is the range's too, so the program can change what came back.
        os.unlink(os.path.join(ws, "linked"))
        snap = tmp_path / "snap.tar.gz"
        sb.snapshot(snap)
        sb.restore(snap)
        r = sb.run(["sh", "-c", "echo again >> notes/in.txt && touch notes/new && cat notes/in.txt"])
        assert r.exit_code == 0 and r.stdout == "from the host\nmore\nagain\n", r
