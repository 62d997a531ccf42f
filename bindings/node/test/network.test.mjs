// The network options reach hull serve: a gateway mode puts the box behind its gateway (names
// judged by the policy, refusals at once, the gateway as DNS server); secrets are refused until
// the gateway brokers them; a policy object's camelCase keys reach hull as its snake_case ones
// (a bad entry is named by hull); `none` and `host` are as before. Nothing leaves the host.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import "./helpers.mjs";
import { InvalidArgument, NetworkUnavailable, Sandbox, listSandboxes, resume, runCode } from "../dist/index.js";
import { connect } from "node:net";

const PROBE = [
  "import socket",
  "try:",
  "    print('name', socket.gethostbyname('api.example.test'))",
  "except OSError:",
  "    print('name refused')",
  "try:",
  "    socket.create_connection(('10.0.2.2', 9), timeout=5)",
  "    print('connected')",
  "except ConnectionRefusedError:",
  "    print('connect refused')",
  "print(open('/etc/resolv.conf').read().strip())",
].join("\n");

test("a gateway mode puts the box behind its gateway", async () => {
  for (const network of ["deny-all", "custom", { allowHosts: ["api.other.test"], ports: [8080], maxTcpConnections: 8 }]) {
    const r = await runCode(PROBE, { network });
    assert.equal(r.stdout, "name refused\nconnect refused\nnameserver 10.0.2.2\n", JSON.stringify(r));
  }
  // A brokered secret is only a placeholder in the box (the data path: brokering.rs).
  process.env.HULL_NODE_NET_KEY = "sk-node-real-value";
  try {
    const r = await runCode("import os\nprint(os.environ['HULL_NODE_NET_KEY'])", {
      network: "custom",
      secrets: [{ name: "HULL_NODE_NET_KEY", env: "HULL_NODE_NET_KEY", hosts: ["api.example.test"] }],
    });
    assert.match(r.stdout, /^hull-secret-HULL_NODE_NET_KEY-[0-9a-f]{32}\n$/);
  } finally {
    delete process.env.HULL_NODE_NET_KEY;
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
    process.env.HULL_NODE_NAMED_KEY = "sk-node-named-value";
    const sb = await Sandbox.create({ name: "netsec", network: { allowHosts: ["api.example.test"] }, secrets: [{ name: "K", env: "HULL_NODE_NAMED_KEY", hosts: ["api.example.test"] }] });
    try {
      const out = (await sb.exec(["sh", "-c", "echo $K"])).stdout;
      assert.match(out, /^hull-secret-K-[0-9a-f]{32}\n$/);
    } finally {
      await sb.destroy();
      delete process.env.HULL_NODE_NAMED_KEY;
    }
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

test("a named sandbox's policy is replaced while it runs", async () => {
  const dir = mkdtempSync(join(tmpdir(), "hull-node-live-"));
  const before = process.env.HULL_SANDBOXES;
  process.env.HULL_SANDBOXES = dir;
  const probe = "import socket\ntry:\n    print(socket.gethostbyname('api.example.test').startswith('198.1'))\nexcept OSError:\n    print('refused')";
  try {
    const sb = await Sandbox.create({ name: "livenode", network: { allowHosts: ["api.example.test"] } });
    try {
      assert.equal((await sb.exec(["python3", "-c", probe])).stdout, "True\n");
      assert.equal(await sb.setNetworkPolicy("deny-all"), true);
      assert.equal((await sb.exec(["python3", "-c", probe])).stdout, "refused\n");
      await assert.rejects(sb.setNetworkPolicy("host"), (e) => e instanceof InvalidArgument && e.arg === "network");
    } finally {
      await sb.destroy();
    }
  } finally {
    if (before === undefined) delete process.env.HULL_SANDBOXES;
    else process.env.HULL_SANDBOXES = before;
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The first line a loopback server at `port` sends (retrying while the box's server starts). */
async function lineFrom(port) {
  for (let i = 0; i < 100; i++) {
    const got = await new Promise((resolve) => {
      const c = connect({ host: "127.0.0.1", port });
      let data = "";
      c.on("data", (d) => (data += d));
      c.on("end", () => resolve(data));
      c.on("error", () => resolve(""));
    });
    if (got) return got;
    await new Promise((r) => setTimeout(r, 50));
  }
  return "nothing";
}

test("a named sandbox's published ports reach its server from the host's loopback", async () => {
  const dir = mkdtempSync(join(tmpdir(), "hull-node-ports-"));
  const before = process.env.HULL_SANDBOXES;
  process.env.HULL_SANDBOXES = dir;
  const server = "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', 8080)); s.listen(8)\nwhile True:\n    c, _ = s.accept(); c.sendall(b'from the box\\n'); c.close()\n";
  try {
    const sb = await Sandbox.create({ name: "portsnode", network: { mode: "deny-all", ports: [8080] } });
    try {
      assert.equal(sb.ports.length, 1);
      assert.equal(sb.ports[0].port, 8080);
      assert.ok(sb.ports[0].hostPort > 0, JSON.stringify(sb.ports));
      await sb.spawn(["python3", "-c", server]);
      assert.equal(await lineFrom(sb.ports[0].hostPort), "from the box\n");
      const listed = (await listSandboxes()).find((s) => s.name === "portsnode");
      assert.deepEqual(listed.ports, [{ port: 8080, host_port: sb.ports[0].hostPort }]);
      // Stopped, nothing is published; resumed, the ports are the new keeper's.
      await sb.stop();
      assert.deepEqual(sb.ports, []);
      const again = await resume("portsnode");
      try {
        assert.equal(again.ports.length, 1);
        assert.equal(again.ports[0].port, 8080);
        await again.spawn(["python3", "-c", server]);
        assert.equal(await lineFrom(again.ports[0].hostPort), "from the box\n");
      } finally {
        await again.close();
      }
    } finally {
      await sb.destroy();
    }
    const plain = await Sandbox.create({ name: "plainnode" });
    try {
      assert.deepEqual(plain.ports, []);
    } finally {
      await plain.destroy();
    }
  } finally {
    if (before === undefined) delete process.env.HULL_SANDBOXES;
    else process.env.HULL_SANDBOXES = before;
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a session's policy is replaced while it lives", async () => {
  // Names only (answered by the gateway itself): nothing is dialled.
  const probe = "import socket\ntry:\n    print(socket.gethostbyname('api.example.test').startswith('198.1'))\nexcept OSError:\n    print('refused')";
  const sb = await Sandbox.create({ network: { mode: "custom", allowHosts: ["api.example.test"] } });
  try {
    const k = await sb.kernel();
    assert.equal((await k.runCode(probe)).stdout, "True\n");
    assert.ok((await sb.setNetworkPolicy("deny-all")) >= 1);
    assert.equal((await k.runCode(probe)).stdout, "refused\n");
    assert.equal((await sb.runCode(probe)).stdout, "refused\n");
    await sb.setNetworkPolicy({ mode: "custom", allowHosts: ["api.example.test"] });
    assert.equal((await k.runCode(probe)).stdout, "True\n");
  } finally {
    await sb.destroy();
  }
  const plain = await Sandbox.create();
  try {
    await assert.rejects(plain.setNetworkPolicy("deny-all"), (e) => e.arg === "network");
  } finally {
    await plain.destroy();
  }
});
