"""Sandbox(isolation="vm"): each call in a microVM with a guest kernel of its own (docs/vm.md).
The VMs boot under QEMU's TCG where /dev/kvm cannot run a standard guest (seconds each), so
these tests are few. They need QEMU, virtiofsd, the guest kernel (scripts/vm-guest.sh) and a
static hull as the guest's init (HULL_VM_AGENT; scripts/test.sh sets it)."""

import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile

import pytest

from hull_sandbox import InvalidArgument, Sandbox, SandboxError, find_hull


def _blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}


def _busybox_layout(layout):
    """An OCI image layout with busybox's static build and a few of its applets."""
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo("bin")
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(d)
        tar.add("/bin/busybox", "bin/busybox")
        for applet in ("sh", "cat", "echo", "uname", "grep"):
            link = tarfile.TarInfo("bin/" + applet)
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    layer = buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    layer_desc = dict(_blob(layout, layer), mediaType="application/vnd.oci.image.layer.v1.tar")
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = {"architecture": arch, "os": "linux", "config": {"Env": ["PATH=/bin"]}, "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    config_desc = dict(_blob(layout, json.dumps(config).encode()), mediaType="application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config_desc, "layers": [layer_desc]}
    manifest_desc = dict(_blob(layout, json.dumps(manifest).encode()), mediaType="application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": "1"}
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [manifest_desc]}, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)


@pytest.fixture(scope="module")
def vm_image():
    """The name of a busybox image in hull's store, or a skip saying what this host lacks."""
    missing = [what for what, ok in (
        ("HULL_VM_AGENT (a static hull: scripts/build-static.sh)", os.environ.get("HULL_VM_AGENT")),
        ("qemu-system-x86_64", shutil.which("qemu-system-x86_64")),
        ("virtiofsd", shutil.which("virtiofsd") or os.environ.get("HULL_VIRTIOFSD")),
        ("the guest kernel (scripts/vm-guest.sh)", os.environ.get("HULL_VM_KERNEL") or os.path.exists("/usr/local/lib/hull/vm/vmlinuz")),
        ("/bin/busybox (busybox-static)", os.path.exists("/bin/busybox")),
    ) if not ok]
    if missing:
        pytest.skip("no VM here: missing " + ", ".join(missing))
    with tempfile.TemporaryDirectory() as d:
        layout = os.path.join(d, "layout")
        _busybox_layout(layout)
        name = "hull-test-vm/busybox:1"
        out = subprocess.run([find_hull(), "import", "--name", name, layout], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        yield name


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


def test_what_a_vm_sandbox_cannot_do_yet_is_refused_naming_the_argument():
    with pytest.raises(InvalidArgument) as e:
        Sandbox(isolation="vm", prewarm=1)
    assert "prewarm" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        Sandbox(require_kvm=True)
    assert "require_kvm" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        Sandbox(name="vm-named", isolation="vm")
    assert "named" in str(e.value)
