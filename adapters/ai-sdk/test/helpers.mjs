// Shared by the tests: which hull and image to use, and a fresh sandboxes directory per test.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
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
