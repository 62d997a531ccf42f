// Request transformations through hull's gateway, end to end on loopback only: an HTTPS server on
// 127.0.0.12 (its own test CA, given to the gateway's upstream trust through HULL_NET_UPSTREAM_CA)
// stands for a model API, a DNS responder on 127.0.0.1 (HULL_NET_DNS) maps its name there, and
// the sandbox holds only a placeholder where the key would be. No model, no key, no traffic off
// this host.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import dgram from "node:dgram";
import { mkdtempSync, readFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";

import { IMAGE, withSandboxes } from "./helpers.mjs";
import { createHullNetworkSandboxSession } from "../dist/index.js";

const NAME = "api.example.test";
const API_IP = "127.0.0.12";
const REAL = "sk-ant-REAL-0123456789abcdef";
const PLACEHOLDER = "aisdkhc_test0placeholder0value00000000000000000";

/** A test CA and a certificate for NAME signed by it (openssl), in a fresh directory. */
function certs() {
  const dir = mkdtempSync(join(tmpdir(), "hull-ai-sdk-tls-"));
  const run = (args) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  run(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=hull adapter test CA"]);
  run(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", `/CN=${NAME}`]);
  execFileSync("sh", ["-c", `printf 'subjectAltName=DNS:${NAME}\\n' > ext.cnf`], { cwd: dir });
  run(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf"]);
  return dir;
}

/** A DNS responder on 127.0.0.1 answering NAME's A query with API_IP (others: no answer). */
async function dns() {
  const sock = dgram.createSocket("udp4");
  sock.on("message", (q, from) => {
    // The question starts at 12: labels, then type and class.
    let i = 12;
    const labels = [];
    while (q[i] !== 0 && i < q.length) {
      labels.push(q.subarray(i + 1, i + 1 + q[i]).toString());
      i += q[i] + 1;
    }
    const qtype = q.readUInt16BE(i + 1);
    const question = q.subarray(12, i + 5);
    const found = labels.join(".").toLowerCase() === NAME && qtype === 1;
    const head = Buffer.alloc(12);
    q.copy(head, 0, 0, 2);
    head.writeUInt16BE(0x8180, 2);
    head.writeUInt16BE(1, 4);
    head.writeUInt16BE(found ? 1 : 0, 6);
    const answer = found ? Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...API_IP.split(".").map(Number)]) : Buffer.alloc(0);
    sock.send(Buffer.concat([head, question, answer]), from.port, from.address);
  });
  await new Promise((r) => sock.bind(0, "127.0.0.1", r));
  return sock;
}

test("transformations put their values into matching requests upstream only; add merges, set replaces; hull-less conditions are refused", () =>
  withSandboxes(async () => {
    const dir = certs();
    const seen = [];
    const server = https.createServer({ key: readFileSync(join(dir, "server.key")), cert: readFileSync(join(dir, "server.pem")) }, (q, r) => {
      seen.push(q.headers["x-api-key"] ?? "");
      r.end("ok");
    });
    await new Promise((r) => server.listen(0, API_IP, r));
    const port = server.address().port;
    const resolver = await dns();
    const saved = { dns: process.env.HULL_NET_DNS, ca: process.env.HULL_NET_UPSTREAM_CA };
    process.env.HULL_NET_DNS = `127.0.0.1:${resolver.address().port}`;
    process.env.HULL_NET_UPSTREAM_CA = join(dir, "ca.pem");
    const s = await createHullNetworkSandboxSession({
      image: IMAGE,
      sandboxId: "brokered",
      networkPolicy: { mode: "custom", allowedHosts: [NAME], allowedCIDRs: [`${API_IP}/32`] },
    });
    try {
      // The request as an agent's client makes it: the placeholder where the key goes.
      const call = async (key) => {
        const code = `fetch("https://${NAME}:${port}/v1/messages", { headers: { "x-api-key": "${key}" } }).then((r) => r.text()).then((t) => console.log(t), (e) => console.log("failed", e.cause?.code ?? e.message))`;
        return (await s.run({ command: `node -e '${code}'` })).stdout.trim();
      };
      const rule = (value) => ({
        match: { host: NAME, path: { startsWith: "/v1/" }, method: ["POST", "GET"], headers: [{ key: { exact: "x-api-key" }, value: { exact: PLACEHOLDER } }] },
        transform: { headers: { "x-api-key": value } },
      });
      await s.addRequestTransformations([rule(REAL)]);
      assert.equal(await call(PLACEHOLDER), "ok");
      assert.equal(seen.at(-1), REAL, "the matching request did not get the value");
      assert.equal(await call("another-key"), "ok");
      assert.equal(seen.at(-1), "another-key", "a request the rule does not match was changed");
      // The same match and header: add replaces it.
      await s.addRequestTransformations([rule("second-value")]);
      assert.equal(await call(PLACEHOLDER), "ok");
      assert.equal(seen.at(-1), "second-value");
      // The value never reaches the sandbox's processes.
      const env = await s.run({ command: "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c sk-ant-REAL || true" });
      assert.equal(env.stdout.trim(), "0");
      // A condition hull cannot express is refused, and nothing changes.
      await assert.rejects(
        s.addRequestTransformations([{ match: { host: NAME, headers: [{ key: { exact: "x-api-key" }, value: { startsWith: "aisdkhc_" } }] }, transform: { headers: { "x-api-key": REAL } } }]),
        (e) => HarnessCapabilityUnsupportedError.isInstance(e) && /header value matched by startsWith/.test(e.message),
      );
      assert.equal(await call(PLACEHOLDER), "ok");
      assert.equal(seen.at(-1), "second-value");
      // set([]) removes them: the connection is no longer intercepted, so the sandbox's client
      // (which trusts the gateway's CA, not the test CA) cannot verify the real host.
      const before = seen.length;
      await s.setRequestTransformations([]);
      assert.match(await call(PLACEHOLDER), /^failed/);
      assert.equal(seen.length, before, "the upstream was reached without interception");
    } finally {
      await s.destroy();
      server.close();
      resolver.close();
      for (const [k, v] of [["HULL_NET_DNS", saved.dns], ["HULL_NET_UPSTREAM_CA", saved.ca]]) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  }));
