// Sandbox({ isolation: "vm" }): each call in a microVM with a guest kernel of its own
// (docs/vm.md). The VMs boot under QEMU's TCG where /dev/kvm cannot run a standard guest
// (seconds each), so the test is one. It needs QEMU, virtiofsd, the guest kernel
// (scripts/vm-guest.sh) and a static hull as the guest's init (HULL_VM_AGENT; scripts/test.sh
// sets it).
import "./helpers.mjs";
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, copyFileSync, writeFileSync } from "node:fs";
import { tmpdir, release, arch } from "node:os";
import { join } from "node:path";
import { Sandbox, InvalidArgument } from "../dist/index.js";

function onPath(name) {
  return (process.env.PATH ?? "").split(":").some((d) => d && existsSync(join(d, name)));
}

/** What this host lacks for a VM, or an empty list. */
function missing() {
  const out = [];
  if (!process.env.HULL_VM_AGENT) out.push("HULL_VM_AGENT (a static hull: scripts/build-static.sh)");
  if (!onPath("qemu-system-x86_64")) out.push("qemu-system-x86_64");
  if (!onPath("virtiofsd") && !process.env.HULL_VIRTIOFSD) out.push("virtiofsd");
  if (!process.env.HULL_VM_KERNEL && !existsSync("/usr/local/lib/hull/vm/vmlinuz")) out.push("the guest kernel (scripts/vm-guest.sh)");
  if (!existsSync("/bin/busybox")) out.push("/bin/busybox (busybox-static)");
  return out;
}

/** Imports an OCI layout of busybox's static build into hull's store as `name`. */
function importBusybox(dir, name) {
  const root = join(dir, "root");
  mkdirSync(join(root, "bin"), { recursive: true });
  copyFileSync("/bin/busybox", join(root, "bin", "busybox"));
  for (const a of ["sh", "cat", "echo", "uname", "grep"]) symlinkSync("busybox", join(root, "bin", a));
  const layout = join(dir, "layout");
  const blobs = join(layout, "blobs", "sha256");
  mkdirSync(blobs, { recursive: true });
  const blob = (data) => {
    const digest = createHash("sha256").update(data).digest("hex");
    writeFileSync(join(blobs, digest), data);
    return { digest: `sha256:${digest}`, size: data.length };
  };
  execFileSync("tar", ["-C", root, "-cf", join(dir, "layer.tar"), "bin"]);
  const layer = readFileSync(join(dir, "layer.tar"));
  const layerDesc = { mediaType: "application/vnd.oci.image.layer.v1.tar", ...blob(layer) };
  const config = { architecture: arch() === "x64" ? "amd64" : arch(), os: "linux", config: { Env: ["PATH=/bin"] }, rootfs: { type: "layers", diff_ids: [`sha256:${createHash("sha256").update(layer).digest("hex")}`] } };
  const configDesc = { mediaType: "application/vnd.oci.image.config.v1+json", ...blob(Buffer.from(JSON.stringify(config))) };
  const manifest = { schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json", config: configDesc, layers: [layerDesc] };
  const manifestDesc = { mediaType: "application/vnd.oci.image.manifest.v1+json", ...blob(Buffer.from(JSON.stringify(manifest))) };
  writeFileSync(join(layout, "index.json"), JSON.stringify({ schemaVersion: 2, manifests: [manifestDesc] }));
  writeFileSync(join(layout, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  execFileSync(process.env.HULL_BIN, ["import", "--name", name, layout], { stdio: "pipe" });
}

test("a VM sandbox's calls run under a kernel of their own and share the workspace", async (t) => {
  const lacks = missing();
  if (lacks.length) return t.skip(`no VM here: missing ${lacks.join(", ")}`);
  const dir = mkdtempSync(join(tmpdir(), "hull-node-vm-"));
  const sb = new Sandbox({ image: "hull-test-vm/busybox-node:1", isolation: "vm", memoryMb: 128, workspace: join(dir, "ws") });
  try {
    mkdirSync(join(dir, "ws"));
    importBusybox(dir, "hull-test-vm/busybox-node:1");
    const r = await sb.run(["sh", "-c", "uname -r; grep CapEff /proc/self/status; echo made > /workspace/f"]);
    assert.equal(r.exitCode, 0, JSON.stringify(r));
    const [kernel, caps] = r.stdout.split("\n");
    assert.notEqual(kernel, release(), "the guest's kernel, not the host's");
    assert.deepEqual(caps.split(/\s+/), ["CapEff:", "0000000000000000"]);
    assert.equal(readFileSync(join(dir, "ws", "f"), "utf8"), "made\n");
    await assert.rejects(sb.kernel(), (e) => e instanceof InvalidArgument && /isolation/.test(e.message));
  } finally {
    await sb.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("isolation and requireKvm are checked, and a VM sandbox refuses what it cannot do yet", async () => {
  assert.throws(() => new Sandbox({ isolation: "kvm" }), TypeError);
  assert.throws(() => new Sandbox({ requireKvm: "yes" }), TypeError);
  const sb = new Sandbox({ isolation: "vm", prewarm: 1 });
  await assert.rejects(sb.start(), (e) => e instanceof InvalidArgument && e.arg === "prewarm");
  await sb.destroy();
});
