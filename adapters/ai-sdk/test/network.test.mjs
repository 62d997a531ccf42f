// hull's gateway network through the session: published ports reached from the host's loopback
// through getPortEndpoint/getPortUrl (again after stop and resume), the policy (deny-all refuses
// a name, custom answers an allowed one with a synthetic 198.18.x.x address: the gateway answers
// it itself, nothing is resolved or sent off the host) and setNetworkPolicy replacing it live.
// Every connection of these tests is to 127.0.0.1.
import assert from "node:assert/strict";
import { test } from "node:test";

import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";

import { IMAGE, withSandboxes } from "./helpers.mjs";
import { createHullNetworkSandboxSession, resumeHullNetworkSandboxSession } from "../dist/index.js";

const unsupported = (re) => (e) => HarnessCapabilityUnsupportedError.isInstance(e) && re.test(e.message);

/** A node HTTP server in the sandbox on 0.0.0.0:`port` answering `body`; resolves once it
 * printed its ready line. */
async function serveIn(session, port, body) {
  const code = `require("http").createServer((q, r) => r.end(${JSON.stringify(body)})).listen(${port}, "0.0.0.0", () => console.log("ready"))`;
  const p = await session.spawn({ command: `node -e '${code}'` });
  const reader = p.stdout.getReader();
  let seen = "";
  while (!seen.includes("ready")) {
    const { done, value } = await reader.read();
    assert.ok(!done, `the server ended before it was ready: ${seen}`);
    seen += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return p;
}

/** What the sandbox's resolver says about `name`: its address, or `refused`. */
async function lookup(session, name) {
  const r = await session.run({ command: `node -e 'require("dns").lookup(${JSON.stringify(name)}, (e, a) => console.log(e ? "refused" : a))'` });
  return r.stdout.trim();
}

test("a published port is reached from the host through getPortEndpoint and getPortUrl, after a resume too", () =>
  withSandboxes(async () => {
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "ports", ports: [8080], maxTcpConnections: 64 });
    try {
      assert.deepEqual([...s.ports], [8080]);
      assert.match(s.description, /Ports published to the host: 8080/);
      await serveIn(s, 8080, "hello from the box");
      const { url } = await s.getPortEndpoint({ port: 8080 });
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(await (await fetch(url)).text(), "hello from the box");
      assert.equal(await s.getPortUrl({ port: 8080, protocol: "http" }), url);
      assert.equal(await s.getPortUrl({ port: 8080, protocol: "ws" }), url.replace("http:", "ws:"));
      // An unexposed port, and a port published after creation, are refused.
      await assert.rejects(s.getPortEndpoint({ port: 3000 }), unsupported(/port 3000 .*not published \(it publishes 8080/));
      await assert.rejects(s.setPorts([8080, 3000]), unsupported(/setPorts` \(3000\).*when the sandbox is created/));
      // Stopped and resumed: the same box port, at the new host port of the running sandbox.
      await s.stop();
      await s.close();
      const again = await resumeHullNetworkSandboxSession({ sandboxId: "ports" });
      try {
        assert.deepEqual([...again.ports], [8080]);
        await serveIn(again, 8080, "served again");
        const u2 = await again.getPortUrl({ port: 8080 });
        assert.equal(await (await fetch(u2)).text(), "served again");
        // setPorts narrows what the session resolves.
        await again.setPorts([]);
        assert.deepEqual([...again.ports], []);
        await assert.rejects(again.getPortEndpoint({ port: 8080 }), unsupported(/port 8080 .*not published \(it publishes none/));
      } finally {
        await again.destroy();
      }
    } finally {
      await s.destroy();
    }
  }));

test("deny-all refuses a name, custom answers an allowed one synthetically, setNetworkPolicy replaces it live", () =>
  withSandboxes(async () => {
    const deny = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "deny", networkPolicy: { mode: "deny-all" } });
    try {
      assert.equal(await lookup(deny, "api.example.test"), "refused");
      assert.match(deny.description, /no outside connection and no name lookup/);
    } finally {
      await deny.destroy();
    }
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "custom", networkPolicy: { mode: "custom", allowedHosts: ["api.example.test", "*.pkg.example.test"] } });
    try {
      assert.match(s.description, /reaches only api\.example\.test, \*\.pkg\.example\.test/);
      assert.match(await lookup(s, "api.example.test"), /^198\.1[89]\.\d+\.\d+$/);
      assert.match(await lookup(s, "a.pkg.example.test"), /^198\.1[89]\.\d+\.\d+$/);
      assert.equal(await lookup(s, "other.example.test"), "refused");
      await s.setNetworkPolicy({ mode: "deny-all" });
      assert.equal(await lookup(s, "api.example.test"), "refused");
      await s.setNetworkPolicy({ mode: "custom", allowedHosts: ["api.example.test"] });
      assert.match(await lookup(s, "api.example.test"), /^198\.1[89]\.\d+\.\d+$/);
      await assert.rejects(s.setNetworkPolicy({ mode: "custom", allowedHosts: [] }), /allows nothing/);
    } finally {
      await s.destroy();
    }
  }));

test("a sandbox made without a network option has none: deny-all is what it has, another policy is refused", () =>
  withSandboxes(async () => {
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "none" });
    try {
      assert.deepEqual([...s.ports], []);
      await s.setNetworkPolicy({ mode: "deny-all" });
      await assert.rejects(s.setNetworkPolicy({ mode: "allow-all" }), unsupported(/made without hull's gateway network/));
      assert.equal(await lookup(s, "api.example.test"), "refused");
    } finally {
      await s.destroy();
    }
  }));

test("a WebSocket server on a published port is reached through getPortEndpoint({ protocol: 'ws' })", () =>
  withSandboxes(async () => {
    const { readdirSync, readFileSync } = await import("node:fs");
    const { dirname, join } = await import("node:path");
    const { createRequire } = await import("node:module");
    const { default: WebSocket } = await import("ws");
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "wsport", ports: [8080] });
    try {
      // The ws package (pure JS) copied into the sandbox for its server.
      const root = dirname(createRequire(import.meta.url).resolve("ws/package.json"));
      for (const f of ["package.json", "index.js", ...readdirSync(join(root, "lib")).map((n) => `lib/${n}`)]) {
        await s.writeBinaryFile({ path: `/workspace/ws/${f}`, content: readFileSync(join(root, f)) });
      }
      const code = `const { WebSocketServer } = require("/workspace/ws"); const w = new WebSocketServer({ host: "0.0.0.0", port: 8080 }, () => console.log("ready")); w.on("connection", (c) => c.on("message", (m) => c.send("echo: " + m)));`;
      const p = await s.spawn({ command: `node -e '${code}'` });
      const reader = p.stdout.getReader();
      let seen = "";
      while (!seen.includes("ready")) {
        const { done, value } = await reader.read();
        assert.ok(!done, `the server ended before it was ready: ${seen}`);
        seen += new TextDecoder().decode(value);
      }
      reader.releaseLock();
      const { url } = await s.getPortEndpoint({ port: 8080, protocol: "ws" });
      assert.match(url, /^ws:\/\/127\.0\.0\.1:\d+$/);
      const ws = new WebSocket(url);
      const reply = await new Promise((resolve, reject) => {
        ws.on("open", () => ws.send("hi"));
        ws.on("message", (m) => resolve(String(m)));
        ws.on("error", reject);
      });
      ws.close();
      assert.equal(reply, "echo: hi");
    } finally {
      await s.destroy();
    }
  }));
