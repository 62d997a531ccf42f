#!/usr/bin/env python3
"""Imports an image of this host's static busybox into hull's store, for the tests of the
microVM tier (which runs an image, never `host`): an OCI layout made here (one uncompressed
layer with /bin/busybox, a few of its applets and an empty system CA bundle, PATH=/bin), then `hull import --name NAME`.

    python3 scripts/busybox-image.py NAME        # HULL_BIN names hull (default: hull on PATH)

Nothing is downloaded; needs /bin/busybox (Debian's busybox-static)."""

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile

APPLETS = ("sh", "cat", "echo", "uname", "grep", "ls", "sleep")


def blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}


def layout_of_busybox(layout):
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo("bin")
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(d)
        tar.add("/bin/busybox", "bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo("bin/" + applet)
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        # A system CA bundle where Debian keeps it (no certificate in it: nothing here
        # speaks TLS), which a credential-brokered sandbox gets covered with the gateway CA.
        for name in ("etc", "etc/ssl", "etc/ssl/certs"):
            d = tarfile.TarInfo(name)
            d.type, d.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(d)
        text = b"# the test image's CA bundle\n"
        f = tarfile.TarInfo("etc/ssl/certs/ca-certificates.crt")
        f.size, f.mode = len(text), 0o644
        tar.addfile(f, io.BytesIO(text))
    layer = buf.getvalue()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = {"architecture": arch, "os": "linux", "config": {"Env": ["PATH=/bin"]},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": dict(blob(layout, json.dumps(config).encode()), mediaType="application/vnd.oci.image.config.v1+json"),
                "layers": [dict(blob(layout, layer), mediaType="application/vnd.oci.image.layer.v1.tar")]}
    desc = dict(blob(layout, json.dumps(manifest).encode()), mediaType="application/vnd.oci.image.manifest.v1+json")
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [desc]}, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: busybox-image.py NAME")
    hull = os.environ.get("HULL_BIN") or "hull"
    with tempfile.TemporaryDirectory() as d:
        layout = os.path.join(d, "layout")
        layout_of_busybox(layout)
        out = subprocess.run([hull, "import", "--name", sys.argv[1], layout], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("busybox-image.py: hull import failed: " + out.stderr.strip())


if __name__ == "__main__":
    main()
