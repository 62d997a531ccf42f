// Shared by the tests: which hull and image to use, and a fresh sandboxes directory per test.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import dgram from "node:dgram";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// The real binary: HULL_BIN, else this checkout's debug build.
if (!process.env.HULL_BIN) {
  const built = resolve(dirname(fileURLToPath(import.meta.url)), "../../../target/debug/hull");
  if (existsSync(built)) process.env.HULL_BIN = built;
}

/** The node image the tests run on (scripts/node-image.sh imports it). */
export const IMAGE = process.env.HULL_AI_SDK_IMAGE ?? "ai-sdk-node:1";

export const dist = resolve(dirname(fileURLToPath(import.meta.url)), "../dist/index.js");

export function hull(args) {
  return execFileSync(process.env.HULL_BIN, args, { env: process.env, encoding: "utf8" });
}

/** Runs `t` with HULL_SANDBOXES set to a fresh directory; fails if it left a sandbox or a
 * template behind (after removing them). */
export async function withSandboxes(t) {
  const root = mkdtempSync(join(tmpdir(), "hull-ai-sdk-"));
  const before = process.env.HULL_SANDBOXES;
  process.env.HULL_SANDBOXES = join(root, "sandboxes");
  let failed = true;
  try {
    await t(process.env.HULL_SANDBOXES);
    failed = false;
  } finally {
    let left = [];
    try {
      left = readdirSync(process.env.HULL_SANDBOXES).filter((n) => !n.startsWith("."));
    } catch {}
    for (const n of left) execFileSync(process.env.HULL_BIN, ["rm", n], { env: process.env });
    let templates = "";
    try {
      templates = hull(["template", "ls", "--json"]).trim();
      for (const line of templates.split("\n").filter(Boolean)) hull(["template", "rm", JSON.parse(line).name]);
    } catch {}
    if (before === undefined) delete process.env.HULL_SANDBOXES;
    else process.env.HULL_SANDBOXES = before;
    rmSync(root, { recursive: true, force: true });
    // (A failing test's own error is the one to see.)
    if (!failed) assert.deepEqual(left, [], "a test left sandboxes behind");
  }
}

/** Runs an ES module's code in another Node process with the adapter imported as `hull`; its
 * stdout. */
export function otherProcess(code) {
  return execFileSync(process.execPath, ["--input-type=module", "-e", `import * as hull from ${JSON.stringify(dist)};\n${code}`], {
    env: process.env,
    encoding: "utf8",
  });
}

export const text = (s) => new Response(s).text();

/** The name and loopback address of the fake model API the brokering tests reach. */
export const API_NAME = "api.example.test";
export const API_IP = "127.0.0.12";

/** A test CA and a certificate for API_NAME signed by it (openssl), in a fresh directory. */
export function apiCerts() {
  const dir = mkdtempSync(join(tmpdir(), "hull-ai-sdk-tls-"));
  const run = (args) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  run(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=hull adapter test CA"]);
  run(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", `/CN=${API_NAME}`]);
  execFileSync("sh", ["-c", `printf 'subjectAltName=DNS:${API_NAME}\\n' > ext.cnf`], { cwd: dir });
  run(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf"]);
  return dir;
}

/** A DNS responder on 127.0.0.1 answering API_NAME's A query with API_IP (others: no answer). */
export async function apiDns() {
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
    const found = labels.join(".").toLowerCase() === API_NAME && qtype === 1;
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


/** The fake model API: an HTTPS server on API_IP (apiCerts' certificate) recording each
 * request's `x-api-key` and counting connections, the DNS responder, and HULL_NET_DNS / HULL_NET_UPSTREAM_CA pointing
 * hull's gateway at them (for sandboxes made from now on). `close()` undoes all of it. */
export async function fakeApi() {
  const https = await import("node:https");
  const { readFileSync } = await import("node:fs");
  const dir = apiCerts();
  const seen = [];
  const server = https.createServer({ key: readFileSync(join(dir, "server.key")), cert: readFileSync(join(dir, "server.pem")) }, (q, r) => {
    seen.push(q.headers["x-api-key"] ?? "");
    r.end(`model reply ${seen.length}`);
  });
  const counts = { connections: 0 };
  server.on("connection", () => counts.connections++);
  await new Promise((r) => server.listen(0, API_IP, r));
  const resolver = await apiDns();
  const saved = { HULL_NET_DNS: process.env.HULL_NET_DNS, HULL_NET_UPSTREAM_CA: process.env.HULL_NET_UPSTREAM_CA };
  process.env.HULL_NET_DNS = `127.0.0.1:${resolver.address().port}`;
  process.env.HULL_NET_UPSTREAM_CA = join(dir, "ca.pem");
  return {
    port: server.address().port,
    seen,
    /** TCP connections the server accepted (TLS verified or not). */
    get connections() {
      return counts.connections;
    },
    close() {
      server.close();
      resolver.close();
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
