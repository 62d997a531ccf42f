// A small bench of the adapter over hull: create-to-ready (from the image, and restored from a
// prepared template, and behind hull's gateway with a published port), the run('true') round
// trip, writeTextFile/readTextFile round trips, and getPortEndpoint to the first byte of a
// server in the sandbox (fetched from the host's 127.0.0.1).
// Medians (and p90) of N runs; sandboxes live in a directory of their own, removed at the end.
//
//   node bench/bench.mjs [N]          (HULL_BIN, HULL_AI_SDK_IMAGE as for the tests)
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { createHullNetworkSandboxSession, pruneHullTemplates } from "../dist/index.js";

const here = dirname(fileURLToPath(import.meta.url));
if (!process.env.HULL_BIN && existsSync(resolve(here, "../../../target/debug/hull"))) process.env.HULL_BIN = resolve(here, "../../../target/debug/hull");
const IMAGE = process.env.HULL_AI_SDK_IMAGE ?? "ai-sdk-node:1";
const N = Number(process.argv[2] ?? 20);
const root = mkdtempSync(join(tmpdir(), "hull-ai-sdk-bench-"));
process.env.HULL_SANDBOXES = join(root, "sandboxes");

function stats(ms) {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return `median ${q(0.5).toFixed(1)} ms, p90 ${q(0.9).toFixed(1)} ms (n=${s.length})`;
}

async function time(f) {
  const t0 = performance.now();
  await f();
  return performance.now() - t0;
}

const template = { identity: "bench-v1", async prepare({ session }) { await session.writeTextFile({ path: "prepared", content: "yes" }); } };
try {
  const fresh = [];
  const restored = [];
  // The template's one build, outside the figures.
  const first = await createHullNetworkSandboxSession({ image: IMAGE, template, setup: ["true"] });
  await first.destroy();
  for (let i = 0; i < N; i++) {
    let s;
    fresh.push(await time(async () => {
      s = await createHullNetworkSandboxSession({ image: IMAGE });
      await s.run({ command: "true" });
    }));
    await s.destroy();
    restored.push(await time(async () => {
      s = await createHullNetworkSandboxSession({ image: IMAGE, template, setup: ["true"] });
      await s.run({ command: "true" });
    }));
    await s.destroy();
  }
  const s = await createHullNetworkSandboxSession({ image: IMAGE });
  const run = [];
  const write = [];
  const read = [];
  for (let i = 0; i < N * 5; i++) {
    run.push(await time(() => s.run({ command: "true" })));
    write.push(await time(() => s.writeTextFile({ path: "f.txt", content: "x".repeat(1024) })));
    read.push(await time(() => s.readTextFile({ path: "f.txt" })));
  }
  await s.destroy();
  // Behind the gateway: creation with a published port, then getPortEndpoint + a fetch's first
  // byte from a node HTTP server in the sandbox.
  const gated = [];
  for (let i = 0; i < N; i++) {
    let g;
    gated.push(await time(async () => {
      g = await createHullNetworkSandboxSession({ image: IMAGE, ports: [8080] });
      await g.run({ command: "true" });
    }));
    await g.destroy();
  }
  const g = await createHullNetworkSandboxSession({ image: IMAGE, ports: [8080] });
  const server = await g.spawn({ command: `node -e 'require("http").createServer((q, r) => r.end("x")).listen(8080, "0.0.0.0", () => console.log("ready"))'` });
  const reader = server.stdout.getReader();
  for (let seen = ""; !seen.includes("ready"); ) {
    const { done, value } = await reader.read();
    if (done) throw new Error("the bench's server ended");
    seen += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const port = [];
  for (let i = 0; i < N * 5; i++) {
    port.push(await time(async () => {
      const { url } = await g.getPortEndpoint({ port: 8080 });
      const body = (await fetch(url)).body.getReader();
      await body.read();
      await body.cancel();
    }));
  }
  await g.destroy();
  const hull = execFileSync(process.env.HULL_BIN ?? "hull", ["--version"], { encoding: "utf8" }).trim();
  console.log(`${hull}, image ${IMAGE}, node ${process.version}`);
  console.log(`create to first run('true'), from the image:     ${stats(fresh)}`);
  console.log(`create to first run('true'), from the template:  ${stats(restored)}`);
  console.log(`run({ command: 'true' }) round trip:              ${stats(run)}`);
  console.log(`writeTextFile 1 KiB round trip:                   ${stats(write)}`);
  console.log(`readTextFile 1 KiB round trip:                    ${stats(read)}`);
  console.log(`create to first run('true'), gateway + 1 port:   ${stats(gated)}`);
  console.log(`getPortEndpoint + fetch to first byte:            ${stats(port)}`);
} finally {
  await pruneHullTemplates().catch(() => {});
  rmSync(root, { recursive: true, force: true });
}
