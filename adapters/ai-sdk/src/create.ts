// createHullNetworkSandboxSession and resumeHullNetworkSandboxSession: the options checked (what
// hull cannot honour refused before anything is made), the sandbox made (from a template when
// one is given), the setup run as root in /workspace, the session returned.
import type { HarnessV1NetworkPolicy } from "@ai-sdk/harness";
import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";
import { NamedSandbox, Sandbox, SandboxError, listSandboxes, resume, type NamedSandboxOptions } from "hull-sandbox";

import { HullCommandError, HullSandboxNotFoundError, abortReason, sandboxNotFound, throwIfAborted } from "./errors.js";
import { HullNetworkSandboxSession, type SandboxFacts } from "./session.js";
import { builderId, ensureTemplate, findTemplate, templateName, type HullSandboxTemplate } from "./templates.js";
import { networkOption } from "./network.js";
import { checkBrokering } from "./unsupported.js";

export const DEFAULT_IMAGE = "node:24";

export interface HullNetworkSandboxSessionOptions {
  /** An image of hull's store (`hull pull`, `hull import`) with Node.js; default `node:24`. */
  image?: string;
  /** The image's user commands run as; default `node` when the image has one, else root. */
  user?: string;
  /** Shell commands run once, in order, as root, in /workspace (in the template's builder when
   * a template is given). A failure is a HullCommandError and removes the sandbox. */
  setup?: string[];
  /** Built once (setup, then `prepare` on the restricted session), then restored. */
  template?: HullSandboxTemplate;
  /** The sandbox's name (1 to 63 of a-z, 0-9, `_`, `.`, `-`); a taken one is a conflict. */
  sandboxId?: string;
  /** A host directory mounted read-write at /workspace (commands then run as root). */
  workspace?: string;
  /** Host directories mounted read-only at their own paths. */
  readOnlyWorkspaces?: string[];
  /** MiB of memory. */
  memory?: number;
  cpus?: number;
  /** Milliseconds the sandbox may live / stay idle before it is stopped. */
  maxDuration?: number;
  idleTimeout?: number;
  /** Every hull sandbox is `restricted` (no_new_privs, no setuid path to root, no mount
   * capability): both values are accepted and give the same sandbox. */
  security?: "restricted" | "default";
  /** Box ports published on the host's 127.0.0.1 (at free ports: `getPortEndpoint`). A server
   * must listen on 0.0.0.0 in the sandbox. */
  ports?: number[];
  /** Egress through hull's gateway (`allow-all`: the public internet; `deny-all`; `custom`:
   * `allowedHosts` incl. `*.domain`, `allowedCIDRs`, `deniedCIDRs` winning). Without it, nor
   * `ports` or `maxTcpConnections`, the sandbox has no network at all (`deny-all` otherwise). */
  networkPolicy?: HarnessV1NetworkPolicy;
  /** Credential brokering: not wired to hull by this adapter yet, `true` is refused; the
   * default leaves the request-transformation members present, refusing. */
  brokerCredentials?: boolean;
  /** The most TCP connections open at once through the gateway (hull's default 1024). */
  maxTcpConnections?: number;
  /** Docker in the sandbox: not on this tier (refused). */
  docker?: boolean;
  abortSignal?: AbortSignal;
}

const OPTION_NAMES = new Set<string>([
  "image", "user", "setup", "template", "sandboxId", "workspace", "readOnlyWorkspaces", "memory", "cpus", "maxDuration",
  "idleTimeout", "security", "ports", "networkPolicy", "brokerCredentials", "maxTcpConnections", "docker", "abortSignal",
]);

const NAME = /^[a-z0-9][a-z0-9_.-]{0,62}$/;

function refuse(message: string): HarnessCapabilityUnsupportedError {
  return new HarnessCapabilityUnsupportedError({ message: `ai-sdk-sandbox-hull: ${message}` });
}

function checkOptions(o: HullNetworkSandboxSessionOptions): void {
  if (o === null || typeof o !== "object") throw new TypeError("options must be an object");
  for (const k of Object.keys(o)) if (!OPTION_NAMES.has(k)) throw new TypeError(`\`${k}\` is not an option of createHullNetworkSandboxSession (those are: ${[...OPTION_NAMES].join(", ")})`);
  if (o.sandboxId !== undefined && !(typeof o.sandboxId === "string" && NAME.test(o.sandboxId))) throw new TypeError(`sandboxId \`${o.sandboxId}\`: 1 to 63 of a-z, 0-9, _, ., -, starting with a letter or digit`);
  if (o.setup !== undefined && !(Array.isArray(o.setup) && o.setup.every((c) => typeof c === "string"))) throw new TypeError("setup must be an array of shell strings");
  if (o.security !== undefined && o.security !== "restricted" && o.security !== "default") throw new TypeError(`security must be "restricted" or "default", got ${String(o.security)}`);
  if (o.template !== undefined && !(typeof o.template?.identity === "string" && typeof o.template?.prepare === "function")) throw new TypeError("template must be { identity: string, prepare({ session }) }");
  for (const k of ["memory", "cpus", "maxDuration", "idleTimeout"] as const) {
    const v = o[k];
    if (v !== undefined && !(typeof v === "number" && v > 0 && Number.isFinite(v))) throw new RangeError(`${k} must be a number above 0, got ${String(v)}`);
  }
  networkOption(o);
  checkBrokering(o);
  if (o.docker === true) throw refuse("`docker: true` needs hull's microVM tier, not in this build");
  if (o.workspace !== undefined && o.user !== undefined && o.user !== "root") {
    throw refuse(`\`workspace\` with \`user: ${o.user}\`: hull cannot hand a host directory to a user of the sandbox (its files would belong to unmapped ids on the host); leave \`user\` unset or "root"`);
  }
  if (o.workspace !== undefined && o.template !== undefined) throw refuse("`workspace` with `template`: a template's /workspace is its own disk");
}

/** The hull options a sandbox is made with (resources, mounts). */
function resources(o: HullNetworkSandboxSessionOptions): Partial<NamedSandboxOptions> {
  const r: Partial<NamedSandboxOptions> = {};
  if (o.memory !== undefined) r.memoryMb = Math.ceil(o.memory);
  if (o.cpus !== undefined) r.cpus = o.cpus;
  if (o.maxDuration !== undefined) r.maxDurationS = o.maxDuration / 1000;
  if (o.idleTimeout !== undefined) r.idleTimeoutS = o.idleTimeout / 1000;
  if (o.readOnlyWorkspaces !== undefined) r.roWorkspaces = [...o.readOnlyWorkspaces];
  const network = networkOption(o);
  if (network !== undefined) r.network = network;
  if (brokering(o)) r.brokering = true;
  return r;
}

/** Whether the sandbox brokers credentials: asked for (the default) and with hull's gateway
 * network, which does the brokering. */
function brokering(o: HullNetworkSandboxSessionOptions): boolean {
  return o.brokerCredentials !== false && networkOption(o) !== undefined;
}

function missingUser(e: unknown, user: string): boolean {
  return e instanceof SandboxError && e.message.includes(`no user \`${user}\``);
}

/** HOME as the sandbox's commands see it (what an agent is told, and what adapters use). */
async function homeOf(sb: NamedSandbox): Promise<string> {
  const r = await sb.exec('printf "%s" "$HOME"');
  return r.exitCode === 0 && r.stdout.startsWith("/") ? r.stdout : "/";
}

/** hull's refusal of a failed setup command as a HullCommandError (hull has removed the
 * sandbox already); anything else unchanged. */
function setupFailure(e: unknown): unknown {
  if (!(e instanceof SandboxError)) return e;
  const m = /setup command `([\s\S]*)` failed with exit code (\d+)(?:; its stderr:\n?([\s\S]*))?$/.exec(e.message);
  if (m === null) return e;
  const stderr = (m[3] ?? "").replace(/^ {2}/gm, "");
  return new HullCommandError({ command: m[1], exitCode: Number(m[2]), stderr: stderr === "" ? "" : stderr + "\n" });
}

/** Makes the sandbox (the default user probed) with its setup: hull runs the setup commands
 * as root in /workspace before /workspace and the user's home are handed to the user, and
 * removes the sandbox when one fails. */
async function makeSandbox(id: string, o: HullNetworkSandboxSessionOptions, image: string): Promise<{ sb: NamedSandbox; user: string }> {
  const base: NamedSandboxOptions = {
    name: id,
    image,
    ...resources(o),
    ...(o.workspace !== undefined ? { workspace: o.workspace } : {}),
    ...(o.setup !== undefined && o.setup.length > 0 ? { setup: [...o.setup] } : {}),
  };
  let sb: NamedSandbox;
  let user: string;
  try {
    if (o.user === undefined && o.workspace === undefined) {
      try {
        sb = await Sandbox.create({ ...base, user: "node" });
        user = "node";
      } catch (e) {
        if (!missingUser(e, "node")) throw e;
        sb = await Sandbox.create(base);
        user = "root";
      }
    } else {
      user = o.user ?? "root";
      sb = await Sandbox.create(user === "root" ? base : { ...base, user });
    }
  } catch (e) {
    throw setupFailure(e);
  }
  if (o.abortSignal?.aborted) {
    await sb.destroy().catch(() => {});
    throw abortReason(o.abortSignal);
  }
  return { sb, user };
}

function randomId(): string {
  return `ai-sdk-${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
}

/** Makes a new hull sandbox and returns its session. Creation never resumes: a taken
 * `sandboxId` is a conflict (hull's SandboxError of kind `conflict`). */
export async function createHullNetworkSandboxSession(options: HullNetworkSandboxSessionOptions = {}): Promise<HullNetworkSandboxSession> {
  checkOptions(options);
  throwIfAborted(options.abortSignal);
  const image = options.image ?? DEFAULT_IMAGE;
  const id = options.sandboxId ?? randomId();
  const facts = (user: string, home: string, template?: string): SandboxFacts => ({
    id,
    image,
    user,
    home,
    ...(template !== undefined ? { template } : {}),
    ...(options.workspace !== undefined ? { workspace: options.workspace } : {}),
    readOnlyWorkspaces: [...(options.readOnlyWorkspaces ?? [])],
    brokerCredentials: options.brokerCredentials !== false,
    brokering: brokering(options),
    network: networkOption(options) ?? null,
  });

  if (options.template === undefined) {
    const { sb, user } = await makeSandbox(id, options, image);
    return new HullNetworkSandboxSession(sb, facts(user, await homeOf(sb)));
  }

  const template = options.template;
  const setup = options.setup ?? [];
  const name = templateName(template.identity, image, options.user, setup);
  // Built already (the usual case): no lock, one listing.
  let listed = await findTemplate(name);
  if (listed === undefined) await ensureTemplate(name, async () => {
    // A throwaway sandbox: setup, prepare on its restricted session, stop, save, remove.
    const { sb, user } = await makeSandbox(builderId(name), { ...options, readOnlyWorkspaces: undefined }, image);
    try {
      const builder = new HullNetworkSandboxSession(sb, { ...facts(user, await homeOf(sb)), id: sb.name });
      await template.prepare({ session: builder.restricted(), ...(options.abortSignal ? { abortSignal: options.abortSignal } : {}) });
      throwIfAborted(options.abortSignal);
      await sb.stop();
      await sb.saveTemplate(name);
    } finally {
      await sb.destroy().catch(() => {});
    }
  }, options.abortSignal);
  listed ??= await findTemplate(name);
  throwIfAborted(options.abortSignal);
  const sb = await Sandbox.create({ name: id, template: name, ...resources(options) });
  if (options.abortSignal?.aborted) {
    await sb.destroy().catch(() => {});
    throw abortReason(options.abortSignal);
  }
  const user = listed?.user ?? "root";
  return new HullNetworkSandboxSession(sb, facts(user, await homeOf(sb), name));
}

/** Reattaches to sandbox `sandboxId` from this or another process, starting it again if it
 * was stopped. Never creates: an unknown id is HullSandboxNotFoundError. */
export async function resumeHullNetworkSandboxSession(options: { sandboxId: string; abortSignal?: AbortSignal; brokerCredentials?: boolean }): Promise<HullNetworkSandboxSession> {
  if (options === null || typeof options !== "object" || typeof options.sandboxId !== "string") throw new TypeError("sandboxId must be a string");
  for (const k of Object.keys(options)) if (!["sandboxId", "abortSignal", "brokerCredentials"].includes(k)) throw new TypeError(`\`${k}\` is not an option of resumeHullNetworkSandboxSession`);
  throwIfAborted(options.abortSignal);
  const id = options.sandboxId;
  if (!NAME.test(id)) throw new HullSandboxNotFoundError(id);
  let sb: NamedSandbox;
  try {
    sb = await resume(id);
  } catch (e) {
    throw sandboxNotFound(e, id);
  }
  const listed = (await listSandboxes()).find((s) => s.name === id);
  const user = listed?.user ?? "root";
  return new HullNetworkSandboxSession(sb, {
    id,
    image: listed?.image ?? "unknown",
    user,
    home: await homeOf(sb),
    readOnlyWorkspaces: [],
    brokerCredentials: options.brokerCredentials !== false,
    // Not known here: hull refuses transformations for a sandbox made without brokering.
    brokering: options.brokerCredentials !== false,
  });
}
