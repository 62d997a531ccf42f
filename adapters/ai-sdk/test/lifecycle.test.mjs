// Creation, users, mounts, stop/resume/destroy, refusals made before anything exists.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";
import { SandboxError } from "hull-sandbox";

import { IMAGE, hull, otherProcess, text, withSandboxes } from "./helpers.mjs";
import { HullCommandError, HullSandboxNotFoundError, createHullNetworkSandboxSession, resumeHullNetworkSandboxSession } from "../dist/index.js";

const refusedBecause = (re) => (e) => HarnessCapabilityUnsupportedError.isInstance(e) && re.test(e.message);

test("commands run as the image's node user (HOME writable), setup as root in /workspace, in order", () =>
  withSandboxes(async () => {
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "users", setup: ["id -u > /workspace/setup-uid; pwd > /workspace/setup-pwd", "echo second >> /workspace/setup-pwd"] });
    try {
      const r = await s.run({ command: 'whoami; id -u; echo $HOME; touch "$HOME/h" && echo home-ok; cat setup-uid setup-pwd; stat -c %U /workspace' });
      assert.equal(r.stdout, "node\n1000\n/home/node\nhome-ok\n0\n/workspace\nsecond\nnode\n");
      assert.match(s.description, /user `node` \(HOME \/home\/node\)/);
      // root's files stay root's; the user cannot reach root's place.
      assert.notEqual((await s.run({ command: "touch /root/x" })).exitCode, 0);
    } finally {
      await s.destroy();
    }
    const root = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "as-root", user: "root" });
    try {
      const r = await root.run({ command: 'whoami; touch "$HOME/h" && echo "$HOME"' });
      assert.equal(r.stdout, `root\n${root.facts.home}\n`);
      assert.match(root.description, new RegExp(`user \`root\` \\(HOME ${root.facts.home}\\)`));
    } finally {
      await root.destroy();
    }
  }));

test("a failed setup is a HullCommandError and leaves no sandbox; a taken id is a conflict", () =>
  withSandboxes(async () => {
    await assert.rejects(
      createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "bad", setup: ["echo fine", "echo broke >&2; exit 7"] }),
      (e) => e instanceof HullCommandError && e.command === "echo broke >&2; exit 7" && e.exitCode === 7 && e.stderr === "broke\n",
    );
    assert.ok(!hull(["ps"]).includes("bad"));
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "taken" });
    try {
      await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "taken" }), (e) => e instanceof SandboxError && e.kind === "conflict");
      assert.equal((await s.run({ command: "echo still" })).stdout, "still\n");
    } finally {
      await s.destroy();
    }
  }));

test("brokering, docker, a user-owned host directory and bad network options are refused before anything is made", () =>
  withSandboxes(async () => {
    const brokering = refusedBecause(/`brokerCredentials: true` needs hull's gateway network/);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "refused", brokerCredentials: true }), brokering);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, docker: true }), refusedBecause(/microVM/));
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, workspace: tmpdir(), user: "node" }), refusedBecause(/host directory/));
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "Bad Name" }), TypeError);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, prots: [1] }), /`prots` is not an option/);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, ports: [0] }), RangeError);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, ports: [80, 80] }), /given twice/);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, maxTcpConnections: 0 }), RangeError);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, networkPolicy: { mode: "open" } }), TypeError);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, networkPolicy: { mode: "custom" } }), /allows nothing/);
    assert.equal(hull(["ps", "--json"]).trim(), "");
    // Without a network option: no brokering members when asked, no interface but loopback.
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "plain", ports: [], brokerCredentials: false, security: "restricted" });
    try {
      assert.equal(s.addRequestTransformations, undefined);
      assert.equal(s.setRequestTransformations, undefined);
      const r = await s.run({ command: "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '" });
      assert.equal(r.stdout, "lo\n");
    } finally {
      await s.destroy();
    }
  }));

test("stop keeps files, resume from another process starts it again, destroy then resume is not found", () =>
  withSandboxes(async () => {
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "life" });
    await s.writeTextFile({ path: "kept.txt", content: "kept" });
    const bg = await s.spawn({ command: "sleep 305" });
    await s.stop();
    await s.stop();
    assert.match(hull(["ps"]), /life\s+stopped/);
    assert.deepEqual(await bg.wait(), { exitCode: 137 });
    const out = otherProcess(`
      const s = await hull.resumeHullNetworkSandboxSession({ sandboxId: "life" });
      const r = await s.run({ command: "cat kept.txt; whoami; pgrep -c sleep || true" });
      process.stdout.write(JSON.stringify([r.stdout, s.defaultWorkingDirectory, s.description.includes("user \`node\`")]));
      await s.close();
    `);
    assert.deepEqual(JSON.parse(out), ["keptnode\n0\n", "/workspace", true]);
    assert.match(hull(["ps"]), /life\s+running/);
    await s.destroy();
    await s.destroy();
    await assert.rejects(resumeHullNetworkSandboxSession({ sandboxId: "life" }), (e) => e instanceof HullSandboxNotFoundError && e.sandboxId === "life");
    await assert.rejects(resumeHullNetworkSandboxSession({ sandboxId: "never-made" }), (e) => e instanceof HullSandboxNotFoundError && e.sandboxId === "never-made");
  }));

test("workspace is the host directory read-write; readOnlyWorkspaces refuse writes", () =>
  withSandboxes(async () => {
    const rw = mkdtempSync(join(tmpdir(), "hull-ai-sdk-rw-"));
    const ro = mkdtempSync(join(tmpdir(), "hull-ai-sdk-ro-"));
    writeFileSync(join(rw, "host.txt"), "from host");
    writeFileSync(join(ro, "ref.txt"), "reference");
    try {
      const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "mounts", workspace: rw, readOnlyWorkspaces: [ro] });
      try {
        assert.equal(await s.readTextFile({ path: "host.txt" }), "from host");
        await s.writeTextFile({ path: "made.txt", content: "from sandbox" });
        assert.equal((await s.run({ command: "echo ran > ran.txt; whoami" })).stdout, "root\n");
        assert.equal(readFileSync(join(rw, "made.txt"), "utf8"), "from sandbox");
        assert.equal(readFileSync(join(rw, "ran.txt"), "utf8"), "ran\n");
        assert.equal(await s.readTextFile({ path: join(ro, "ref.txt") }), "reference");
        const w = await s.run({ command: `echo x > ${ro}/ref.txt` });
        assert.notEqual(w.exitCode, 0);
        assert.match(w.stderr, /Read-only file system/);
        await assert.rejects(s.writeTextFile({ path: join(ro, "new.txt"), content: "x" }));
        assert.equal(readFileSync(join(ro, "ref.txt"), "utf8"), "reference");
        assert.match(s.description, new RegExp(`Read-only directories of the host: ${ro}`));
      } finally {
        await s.destroy();
      }
      assert.equal(readFileSync(join(rw, "made.txt"), "utf8"), "from sandbox");
    } finally {
      rmSync(rw, { recursive: true, force: true });
      rmSync(ro, { recursive: true, force: true });
    }
  }));

test("an aborted creation makes nothing; per-command variables never reach a host command line", () =>
  withSandboxes(async () => {
    const ac = new AbortController();
    ac.abort(new Error("not now"));
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "aborted", abortSignal: ac.signal }), /not now/);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "aborted", abortSignal: ac.signal, template: { identity: "t", async prepare() {} } }), /not now/);
    assert.deepEqual([hull(["ps", "--json"]).trim(), hull(["template", "ls", "--json"]).trim()], ["", ""]);
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "env" });
    try {
      const secret = "s3cret-" + Math.random().toString(36).slice(2);
      const p = await s.spawn({ command: 'read -r line; [ "$line" = "$TOKEN" ] && echo same', env: { TOKEN: secret }, stdin: true });
      const r = await s.run({ command: "sleep 0.2; echo $TOKEN", env: { TOKEN: secret } });
      assert.equal(r.stdout, secret + "\n");
      // Every process of this host, the keeper and the box's included: no command line holds it.
      const { readdirSync, readFileSync } = await import("node:fs");
      for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
        let cmdline = "";
        try {
          cmdline = readFileSync(`/proc/${pid}/cmdline`, "latin1");
        } catch {}
        assert.ok(!cmdline.includes(secret), `pid ${pid}: ${cmdline}`);
      }
      const w = p.stdin.getWriter();
      await w.write(new TextEncoder().encode(secret + "\n"));
      await w.close();
      assert.equal(await text(p.stdout), "same\n");
    } finally {
      await s.destroy();
    }
  }));
