// Templates: a sandbox set up and prepared once, frozen as a hull template
// (`ai-sdk-harness-template-<digest>`), that later sessions start from without copying and
// without running setup or prepare again (docs/named.md, "Templates"). A build runs once per
// name: one promise per name in this process, and a lock directory across processes; a failed
// build removes its builder and leaves no template.
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import type { Experimental_SandboxSession } from "@ai-sdk/provider-utils";
import { listTemplates, removeTemplate, type TemplateListing } from "hull-sandbox";

import { raceAbort, throwIfAborted } from "./errors.js";

export const TEMPLATE_PREFIX = "ai-sdk-harness-template-";

/** What `template` takes: `agent.getSandboxTemplate()` in newer harness versions, or any
 * object of this shape. `prepare` runs once, on the restricted session of a throwaway sandbox
 * after `setup`. */
export interface HullSandboxTemplate {
  readonly identity: string;
  prepare(options: { session: Experimental_SandboxSession; abortSignal?: AbortSignal }): PromiseLike<void>;
}

/** The template's hull name: a digest over what makes its disk. */
export function templateName(identity: string, image: string, user: string | undefined, setup: readonly string[]): string {
  const digest = createHash("sha256").update(JSON.stringify([1, identity, image, user ?? null, setup])).digest("hex");
  return TEMPLATE_PREFIX + digest.slice(0, 24);
}

/** Template `name` as hull lists it, or undefined. */
export async function findTemplate(name: string): Promise<TemplateListing | undefined> {
  return (await listTemplates()).find((t) => t.name === name);
}

const building = new Map<string, Promise<void>>();

/** Builds template `name` with `build` unless it exists; once per name however many callers. */
export function ensureTemplate(name: string, build: () => Promise<void>, signal?: AbortSignal): Promise<void> {
  let p = building.get(name);
  if (p === undefined) {
    p = withLock(name, async () => {
      if ((await findTemplate(name)) === undefined) await build();
    }, signal).finally(() => building.delete(name));
    building.set(name, p);
  }
  return raceAbort(p, signal);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Runs `f` holding a lock directory for `name` (per user and per sandboxes directory); a lock
 * whose holder died is taken over. */
async function withLock(name: string, f: () => Promise<void>, signal?: AbortSignal): Promise<void> {
  const uid = process.getuid?.() ?? 0;
  const scope = createHash("sha256").update(process.env.HULL_SANDBOXES ?? "").digest("hex").slice(0, 12);
  const dir = join(tmpdir(), `ai-sdk-sandbox-hull-${uid}`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lock = join(dir, `${scope}-${name}.lock`);
  for (;;) {
    try {
      mkdirSync(lock, { mode: 0o700 });
      writeFileSync(join(lock, "pid"), String(process.pid));
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      let holder = NaN;
      try {
        holder = Number(readFileSync(join(lock, "pid"), "utf8"));
      } catch {
        // being written: wait
      }
      if (Number.isInteger(holder) && !alive(holder)) rmSync(lock, { recursive: true, force: true });
      else {
        // Another process builds it: wait (an abort ends the wait, not that build).
        throwIfAborted(signal);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
  try {
    await f();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** A fresh builder sandbox's id. */
export function builderId(name: string): string {
  return `ai-sdk-build-${name.slice(TEMPLATE_PREFIX.length, TEMPLATE_PREFIX.length + 12)}-${randomBytes(4).toString("hex")}`;
}

/** `pruneHullTemplates`: removes this adapter's templates (all, or those saved at least
 * `olderThan` ms ago) and returns their names. Sandboxes made from them keep working. */
export async function pruneHullTemplates(options: { olderThan?: number } = {}): Promise<string[]> {
  const { olderThan } = options;
  if (olderThan !== undefined && !(typeof olderThan === "number" && olderThan >= 0)) throw new RangeError(`olderThan must be 0 or more milliseconds, got ${olderThan}`);
  const removed: string[] = [];
  for (const t of await listTemplates()) {
    if (!t.name.startsWith(TEMPLATE_PREFIX)) continue;
    if (olderThan !== undefined && t.age_s * 1000 < olderThan) continue;
    if (await removeTemplate(t.name)) removed.push(t.name);
  }
  return removed;
}
