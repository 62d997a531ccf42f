// Templates: built once (also under concurrent creations and from another process), restored
// without setup or prepare, a failed build leaving nothing, pruning.
import assert from "node:assert/strict";
import { test } from "node:test";

import { IMAGE, hull, otherProcess, withSandboxes } from "./helpers.mjs";
import { HullCommandError, TEMPLATE_PREFIX, createHullNetworkSandboxSession, pruneHullTemplates, templateName } from "../dist/index.js";

/** hull's templates and sandboxes, by name. */
const templates = () => hull(["template", "ls", "--json"]).trim().split("\n").filter(Boolean).map((l) => JSON.parse(l).name);
const sandboxes = () => hull(["ps", "--json"]).trim().split("\n").filter(Boolean).map((l) => JSON.parse(l).name);

function countingTemplate(identity) {
  const t = {
    identity,
    prepares: 0,
    async prepare({ session }) {
      t.prepares++;
      // The restricted session: no lifecycle members.
      assert.equal(session.stop, undefined);
      await session.writeTextFile({ path: "prepared.txt", content: `prepared by ${(await session.run({ command: "whoami" })).stdout}` });
      assert.equal((await session.run({ command: "echo p >> /workspace/prepare-runs" })).exitCode, 0);
    },
  };
  return t;
}

const setup = ["echo s >> /workspace/setup-runs", "mkdir -p /opt/tool && echo v1 > /opt/tool/version"];

test("a template is built once under concurrent creations and restored without setup or prepare", () =>
  withSandboxes(async () => {
    const t = countingTemplate("tools-v1");
    const made = await Promise.all(["a", "b", "c"].map((id) => createHullNetworkSandboxSession({ image: IMAGE, sandboxId: id, setup, template: t })));
    const name = templateName("tools-v1", IMAGE, undefined, setup);
    assert.ok(name.startsWith(TEMPLATE_PREFIX) && name.length === TEMPLATE_PREFIX.length + 24);
    assert.equal(t.prepares, 1);
    assert.deepEqual(templates(), [name]);
    // The builder is gone; the three sandboxes stand on the template.
    assert.deepEqual(sandboxes().sort(), ["a", "b", "c"]);
    for (const s of made) {
      const r = await s.run({ command: "cat setup-runs prepare-runs prepared.txt /opt/tool/version; whoami" });
      assert.equal(r.stdout, "s\np\nprepared by node\nv1\nnode\n");
      assert.match(s.description, /from a prepared template/);
    }
    // Each sandbox's disk is its own.
    await made[0].writeTextFile({ path: "mine", content: "a" });
    assert.equal(await made[1].readTextFile({ path: "mine" }), null);
    // Another process restores it too, without building (its own prepare would count there).
    const out = otherProcess(`
      let prepares = 0;
      const s = await hull.createHullNetworkSandboxSession({ image: ${JSON.stringify(IMAGE)}, sandboxId: "d", setup: ${JSON.stringify(setup)},
        template: { identity: "tools-v1", async prepare() { prepares++; } } });
      process.stdout.write(JSON.stringify([prepares, (await s.run({ command: "cat setup-runs" })).stdout]));
      await s.close();
    `);
    assert.deepEqual(JSON.parse(out), [0, "s\n"]);
    // Another identity, image, user or setup is another template.
    assert.notEqual(templateName("tools-v2", IMAGE, undefined, setup), name);
    assert.notEqual(templateName("tools-v1", IMAGE, "root", setup), name);
    assert.notEqual(templateName("tools-v1", IMAGE, undefined, [...setup, "true"]), name);
    for (const s of made) await s.destroy();
    await (await import("../dist/index.js")).resumeHullNetworkSandboxSession({ sandboxId: "d" }).then((s) => s.destroy());
    // Pruning: a young template stays under an age, goes without one; sandboxes keep working.
    const keep = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "e", setup, template: t });
    assert.equal(t.prepares, 1);
    assert.deepEqual(await pruneHullTemplates({ olderThan: 3_600_000 }), []);
    assert.deepEqual(await pruneHullTemplates(), [name]);
    assert.deepEqual(templates(), []);
    assert.equal((await keep.run({ command: "cat /opt/tool/version" })).stdout, "v1\n");
    await keep.destroy();
  }));

test("a failed build (setup or prepare) leaves no template and no builder, and the next creation builds again", () =>
  withSandboxes(async () => {
    await assert.rejects(
      createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "x", setup: ["exit 9"], template: countingTemplate("fails") }),
      (e) => e instanceof HullCommandError && e.exitCode === 9 && e.command === "exit 9",
    );
    assert.deepEqual([templates(), sandboxes()], [[], []]);
    const broken = { identity: "prepare-fails", prepares: 0, async prepare() { broken.prepares++; throw new Error("prepare broke"); } };
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "y", template: broken }), /prepare broke/);
    await assert.rejects(createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "y", template: broken }), /prepare broke/);
    assert.equal(broken.prepares, 2);
    assert.deepEqual([templates(), sandboxes()], [[], []]);
    const ok = countingTemplate("prepare-fails");
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "y", template: ok });
    assert.equal(ok.prepares, 1);
    assert.equal(await s.readTextFile({ path: "prepared.txt" }), "prepared by node\n");
    await s.destroy();
  }));
