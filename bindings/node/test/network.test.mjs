// The network options reach hull serve: a gateway mode comes back as NetworkUnavailable naming
// the mode (this hull does not run the gateway yet), never as a sandbox with no network or the
// host's; a policy object's camelCase keys reach hull as its snake_case ones (a bad entry is
// named by hull); `none` and `host` are as before.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import "./helpers.mjs";
import { InvalidArgument, NetworkUnavailable, Sandbox, runCode } from "../dist/index.js";

test("a gateway mode reaches hull and is refused naming it", async () => {
  for (const network of ["deny-all", "allow-all", "custom", { allowHosts: ["api.example.com"], ports: [8080], maxTcpConnections: 8 }]) {
    const mode = typeof network === "string" ? network : "custom";
    await assert.rejects(runCode("print('RAN')", { network }), (e) => {
      assert.ok(e instanceof NetworkUnavailable, String(e));
      assert.equal(e.mode, mode);
      assert.match(e.message, new RegExp(`network mode \`${mode}\` needs the hull-net gateway`));
      return true;
    });
  }
});

test("bad policy entries are named by hull, unknown keys by the SDK", async () => {
  await assert.rejects(Sandbox.create({ network: { allowHosts: ["a..b"] } }), (e) => {
    assert.ok(e instanceof InvalidArgument, String(e));
    assert.equal(e.arg, "network");
    assert.match(e.message, /allow_hosts: allowed host `a\.\.b`/);
    return true;
  });
  await assert.rejects(Sandbox.create({ network: { mode: "none", ports: [80] } }), /mode none with ports/);
  await assert.rejects(Sandbox.create({ network: true, secrets: [{ name: "K", value: "sk-node-secret", hosts: ["a.com"] }] }), (e) => {
    assert.equal(e.arg, "secrets");
    assert.ok(!e.message.includes("sk-node-secret"), e.message);
    return true;
  });
  assert.throws(() => new Sandbox({ network: { allow_hosts: ["a.com"] } }), /network\.allow_hosts is not a network option/);
});

test("none and host run as before", async () => {
  assert.equal((await runCode("print(1)", { network: false })).stdout.trim(), "1");
  assert.equal((await runCode("print(1)", { network: "none" })).stdout.trim(), "1");
});

test("a named sandbox takes the network and refuses a secret's value", async () => {
  const dir = mkdtempSync(join(tmpdir(), "hull-node-net-"));
  const before = process.env.HULL_SANDBOXES;
  process.env.HULL_SANDBOXES = dir;
  try {
    await assert.rejects(
      Sandbox.create({ name: "netnode", network: { allowHosts: ["api.example.com"] }, secrets: [{ name: "K", env: "HOME", hosts: ["api.example.com"] }] }),
      (e) => e instanceof NetworkUnavailable && e.mode === "custom",
    );
    await assert.rejects(
      Sandbox.create({ name: "netnode", network: "custom", secrets: [{ name: "K", value: "sk-node-secret", hosts: ["api.example.com"] }] }),
      (e) => /give `env`/.test(e.message) && !e.message.includes("sk-node-secret"),
    );
    assert.ok(!existsSync(join(dir, "netnode")));
  } finally {
    if (before === undefined) delete process.env.HULL_SANDBOXES;
    else process.env.HULL_SANDBOXES = before;
    rmSync(dir, { recursive: true, force: true });
  }
});
