// Sandbox({ isolation: "vm" }): each call in a microVM with a guest kernel of its own
// (docs/vm.md). The VMs boot under QEMU's TCG where /dev/kvm cannot run a standard guest
// (seconds each), so the test is one. It needs QEMU, virtiofsd, the guest kernel
// (scripts/vm-guest.sh) and a static hull as the guest's init (HULL_VM_AGENT; scripts/test.sh
// sets it).
import "./helpers.mjs";
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir, release } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Sandbox, InvalidArgument } from "../dist/index.js";

function onPath(name) {
  return (process.env.PATH ?? "").split(":").some((d) => d && existsSync(join(d, name)));
}

/** What this host lacks for a VM, or an empty list. */
function missing() {
  const out = [];
  if (process.getuid?.() === 0) out.push("an unprivileged user (the rootless pass boots it; the root pass boots the Python SDK's host-root VM test)");
  if (!process.env.HULL_VM_AGENT) out.push("HULL_VM_AGENT (a static hull: scripts/build-static.sh)");
  if (!onPath("qemu-system-x86_64")) out.push("qemu-system-x86_64");
  if (!onPath("virtiofsd") && !process.env.HULL_VIRTIOFSD) out.push("virtiofsd");
  if (!process.env.HULL_VM_KERNEL && !existsSync("/usr/local/lib/hull/vm/vmlinuz")) out.push("the guest kernel (scripts/vm-guest.sh)");
  if (!existsSync("/bin/busybox")) out.push("/bin/busybox (busybox-static)");
  return out;
}

/** Imports an image of this host's busybox as `name` (scripts/busybox-image.py). */
function importBusybox(name) {
  // Beside the package (the rootless pass stages it there), else the checkout's.
  const here = dirname(fileURLToPath(import.meta.url));
  const staged = resolve(here, "../busybox-image.py");
  const script = existsSync(staged) ? staged : resolve(here, "../../../scripts/busybox-image.py");
  execFileSync("python3", [script, name], { stdio: "pipe", env: process.env });
}

test("a VM sandbox's calls run under a kernel of their own and share the workspace", async (t) => {
  const lacks = missing();
  if (lacks.length) return t.skip(`no VM here: missing ${lacks.join(", ")}`);
  const dir = mkdtempSync(join(tmpdir(), "hull-node-vm-"));
  const sb = new Sandbox({ image: "hull-test-vm/busybox-node:1", isolation: "vm", memoryMb: 128, workspace: join(dir, "ws") });
  try {
    mkdirSync(join(dir, "ws"));
    importBusybox("hull-test-vm/busybox-node:1");
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
  const sb = new Sandbox({ isolation: "vm", prewarm: 1, network: "deny-all" });
  await assert.rejects(sb.start(), (e) => e instanceof InvalidArgument && e.arg === "prewarm");
  await sb.destroy();
});
