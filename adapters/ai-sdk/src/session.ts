// The session: one hull named sandbox as `HarnessV1NetworkSandboxSession` (and the
// `Experimental_SandboxSession` of @ai-sdk/provider-utils). Commands are bash strings run as the
// sandbox's user through its keeper; file operations are the keeper's own (nothing runs in the
// sandbox for them, paths never leave its root); `restricted()` is the same sandbox without the
// lifecycle and network members.
import { posix } from "node:path";

import type { HarnessV1NetworkPolicy, HarnessV1NetworkSandboxSession, HarnessV1PortEndpoint, HarnessV1RequestTransformation } from "@ai-sdk/harness";
import type {
  Experimental_SandboxSession,
  Experimental_SandboxProcess,
  Experimental_SandboxRunOptions,
  Experimental_SandboxSpawnOptions,
  Experimental_SandboxSpawnOptionsWithStdin,
  Experimental_SandboxSpawnOptionsWithoutStdin,
  Experimental_SandboxWriteFileOptions,
} from "@ai-sdk/provider-utils";
import { InvalidArgument, SandboxError, type NamedSandbox, type NetworkPolicy } from "hull-sandbox";

import { raceAbort, sandboxNotFound, throwIfAborted } from "./errors.js";
import { spawnInSandbox, type SpawnedProcess } from "./process.js";
import { checkPorts, describeNetwork, hullPolicy } from "./network.js";
import { checkList, toHull } from "./transformations.js";
import * as unsupported from "./unsupported.js";

/** The directory commands start in and relative paths resolve against; never changes. */
export const WORKSPACE = "/workspace";

/** Reads are one keeper answer: a file larger than this is refused, not cut. */
const MAX_READ = 64 << 20;

type PathOptions = { path: string; abortSignal?: AbortSignal };
type WritableProcess = Experimental_SandboxProcess & { readonly stdin: WritableStream<Uint8Array> };

/** What a session knows of its sandbox, for `description`. */
export interface SandboxFacts {
  id: string;
  image: string;
  user: string;
  home: string;
  template?: string;
  workspace?: string;
  readOnlyWorkspaces: string[];
  brokerCredentials: boolean;
  /** Whether hull's gateway brokers for it (made with a network policy and brokering). */
  brokering: boolean;
  /** The network it was made with: null for none at all, undefined when not known (resumed). */
  network?: NetworkPolicy | null;
}

function checkEnv(env: unknown): Record<string, string> | undefined {
  if (env === undefined) return undefined;
  if (env === null || typeof env !== "object") throw new TypeError("env must be an object of strings");
  for (const [k, v] of Object.entries(env)) {
    if (typeof v !== "string") throw new TypeError(`env.${k} must be a string`);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new TypeError(`env: \`${k}\` is not a variable name`);
  }
  return env as Record<string, string>;
}

function checkCommand(command: unknown): string {
  if (typeof command !== "string" || command.trim() === "") throw new TypeError("command must be a non-empty shell string");
  return command;
}

/** Cuts a string to `max` UTF-16 code units (`maxOutputLength`). */
function cut(s: string, max: number | undefined): string {
  return max === undefined || s.length <= max ? s : s.slice(0, max);
}

function encodingOf(encoding: string | undefined): BufferEncoding {
  const e = (encoding ?? "utf-8").toLowerCase();
  const map: Record<string, BufferEncoding> = { "utf-8": "utf8", utf8: "utf8", ascii: "ascii", latin1: "latin1", "iso-8859-1": "latin1", "utf-16le": "utf16le", utf16le: "utf16le", base64: "base64", hex: "hex" };
  const b = map[e];
  if (b === undefined) throw new RangeError(`encoding \`${encoding}\` is not supported (utf-8, ascii, latin1, utf-16le, base64, hex)`);
  return b;
}

export class HullNetworkSandboxSession implements HarnessV1NetworkSandboxSession {
  readonly id: string;
  readonly defaultWorkingDirectory = WORKSPACE;
  readonly description: string;
  /** The published box ports this session resolves (`setPorts` narrows them). */
  private exposed: ReadonlyArray<number>;
  /** Present unless made with `brokerCredentials: false`: hull's gateway puts the values into
   * matching requests on their way out (`set` replaces the list, `add` merges: the same match
   * and header names replace, others append); refused for a sandbox without the gateway. */
  readonly setRequestTransformations?: (t: ReadonlyArray<HarnessV1RequestTransformation>) => Promise<void>;
  readonly addRequestTransformations?: (t: ReadonlyArray<HarnessV1RequestTransformation>) => Promise<void>;
  private destroyed = false;
  /** Transformation changes, one at a time and in order. */
  private changing: Promise<unknown> = Promise.resolve();

  /** @internal Made by createHullNetworkSandboxSession / resumeHullNetworkSandboxSession. */
  constructor(
    private readonly sb: NamedSandbox,
    readonly facts: SandboxFacts,
  ) {
    this.id = facts.id;
    this.exposed = Object.freeze(sb.ports.map((p) => p.port));
    this.description = describe(facts, this.exposed);
    if (facts.brokerCredentials) {
      this.setRequestTransformations = (t) => this.transform("setRequestTransformations", t, false);
      this.addRequestTransformations = (t) => this.transform("addRequestTransformations", t, true);
    }
  }

  /** A path of the sandbox: relative ones against the working directory. */
  private path(p: unknown): string {
    if (typeof p !== "string" || p === "") throw new TypeError("path must be a non-empty string");
    return posix.resolve(WORKSPACE, p);
  }

  /** One keeper call; a removed sandbox is HullSandboxNotFoundError. */
  private async op<T>(signal: AbortSignal | undefined, f: () => Promise<T>): Promise<T> {
    throwIfAborted(signal);
    try {
      return await raceAbort(f(), signal);
    } catch (e) {
      throw sandboxNotFound(e, this.id);
    }
  }

  // ---- commands ----

  async run(o: Experimental_SandboxRunOptions): Promise<{ exitCode: number; stdout: string; stderr: string; stdoutLength?: number; stderrLength?: number }> {
    const command = checkCommand(o.command);
    const env = checkEnv(o.env);
    const cwd = this.path(o.workingDirectory ?? WORKSPACE);
    const max = o.maxOutputLength;
    if (max !== undefined && !(Number.isSafeInteger(max) && max > 0)) throw new RangeError(`maxOutputLength must be a positive safe integer, got ${max}`);
    throwIfAborted(o.abortSignal);
    let r: { exitCode: number; stdout: string; stderr: string };
    try {
      if (o.abortSignal === undefined) {
        // One exec: one round trip through the keeper.
        const x = await this.sb.exec(command, { cwd, ...(env ? { env } : {}) });
        r = { exitCode: x.exitCode ?? 1, stdout: x.stdout, stderr: x.stderr };
      } else {
        // Abortable: a keeper spawn, killed with its tree when the signal fires.
        const p = await spawnInSandbox(this.sb, { command, cwd, env, abortSignal: o.abortSignal });
        const [stdout, stderr, { exitCode }] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.wait()]);
        r = { exitCode, stdout, stderr };
      }
    } catch (e) {
      throw sandboxNotFound(e, this.id);
    }
    if (max === undefined) return r;
    return { exitCode: r.exitCode, stdout: cut(r.stdout, max), stderr: cut(r.stderr, max), stdoutLength: r.stdout.length, stderrLength: r.stderr.length };
  }

  spawn(o: Experimental_SandboxSpawnOptionsWithStdin): Promise<WritableProcess>;
  spawn(o: Experimental_SandboxSpawnOptionsWithoutStdin): Promise<Experimental_SandboxProcess>;
  spawn(o: Experimental_SandboxSpawnOptions): Promise<Experimental_SandboxProcess | WritableProcess>;
  async spawn(o: Experimental_SandboxSpawnOptions): Promise<Experimental_SandboxProcess | WritableProcess> {
    const command = checkCommand(o.command);
    const env = checkEnv(o.env);
    const cwd = this.path(o.workingDirectory ?? WORKSPACE);
    throwIfAborted(o.abortSignal);
    let p: SpawnedProcess;
    try {
      p = await spawnInSandbox(this.sb, { command, cwd, env, abortSignal: o.abortSignal, stdin: o.stdin === true });
    } catch (e) {
      throw sandboxNotFound(e, this.id);
    }
    const handle = { stdout: p.stdout, stderr: p.stderr, wait: () => p.wait(), kill: () => p.kill() };
    return p.stdin !== undefined ? { ...handle, stdin: p.stdin } : handle;
  }

  // ---- files ----

  /** One read of at most MAX_READ bytes; a larger file is a SandboxError `too_large` (hull
   * refuses it rather than cut it short). */
  private async readCapped(path: string): Promise<Buffer | null> {
    try {
      return await this.sb.readFile(path, { maxBytes: MAX_READ });
    } catch (e) {
      if (e instanceof InvalidArgument) throw new SandboxError(`${path} is larger than the ${MAX_READ} bytes one read of this adapter takes`, "too_large");
      throw e;
    }
  }

  async readBinaryFile(o: PathOptions): Promise<Uint8Array | null> {
    const path = this.path(o.path);
    return this.op(o.abortSignal, async () => {
      const data = await this.readCapped(path);
      if (data === null) return null;
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    });
  }

  async readFile(o: PathOptions): Promise<ReadableStream<Uint8Array> | null> {
    const bytes = await this.readBinaryFile(o);
    if (bytes === null) return null;
    return new ReadableStream<Uint8Array>({
      start(c) {
        if (bytes.length > 0) c.enqueue(bytes);
        c.close();
      },
    });
  }

  async readTextFile(o: PathOptions & { encoding?: string; startLine?: number; endLine?: number }): Promise<string | null> {
    const path = this.path(o.path);
    const encoding = encodingOf(o.encoding);
    const { startLine, endLine } = o;
    if (startLine !== undefined && !(Number.isInteger(startLine) && startLine >= 1)) throw new RangeError(`startLine must be a line number from 1, got ${startLine}`);
    if (endLine !== undefined && !(Number.isInteger(endLine) && endLine >= (startLine ?? 1))) throw new RangeError(`endLine must be a line number from startLine on, got ${endLine}`);
    return this.op(o.abortSignal, async () => {
      // The keeper cuts the range: only those lines cross the socket.
      const ranged = startLine !== undefined || endLine !== undefined;
      if (!ranged || encoding === "utf16le") {
        const r = await this.readCapped(path);
        if (r === null) return null;
        const text = r.toString(encoding);
        if (!ranged) return text;
        // The keeper cuts at "\n" bytes, which UTF-16 does not have: cut the text here.
        const lines = text.split(/(?<=\n)/);
        return lines.slice((startLine ?? 1) - 1, endLine ?? lines.length).join("");
      }
      return this.sb.readText(path, { lines: [startLine ?? 1, endLine ?? null], encoding });
    });
  }

  async writeBinaryFile(o: { path: string; content: Uint8Array; abortSignal?: AbortSignal }): Promise<void> {
    const path = this.path(o.path);
    if (!(o.content instanceof Uint8Array)) throw new TypeError("content must be a Uint8Array");
    const data = Buffer.from(o.content.buffer, o.content.byteOffset, o.content.byteLength);
    await this.op(o.abortSignal, () => this.sb.writeFile(path, data));
  }

  async writeTextFile(o: { path: string; content: string; encoding?: string; abortSignal?: AbortSignal }): Promise<void> {
    if (typeof o.content !== "string") throw new TypeError("content must be a string");
    const bytes = Buffer.from(o.content, encodingOf(o.encoding));
    await this.writeBinaryFile({ path: o.path, content: bytes, abortSignal: o.abortSignal });
  }

  async writeFile(o: Experimental_SandboxWriteFileOptions): Promise<void> {
    throwIfAborted(o.abortSignal);
    // The keeper takes a file in one call: the stream is read to its end first.
    const chunks: Uint8Array[] = [];
    const reader = o.content.getReader();
    try {
      for (;;) {
        const { done, value } = await raceAbort(reader.read(), o.abortSignal);
        if (done) break;
        chunks.push(value);
      }
    } catch (e) {
      await reader.cancel(e).catch(() => {});
      throw e;
    }
    await this.writeBinaryFile({ path: o.path, content: Buffer.concat(chunks), abortSignal: o.abortSignal });
  }

  async stat(o: PathOptions): Promise<{ type: "file" | "directory" | "other"; size: number } | null> {
    const path = this.path(o.path);
    return this.op(o.abortSignal, async () => {
      const r = await this.sb.stat(path);
      if (r === null) return null;
      if (r.type !== "symlink") return { type: r.type === "file" ? "file" : r.type === "dir" ? "directory" : "other", size: r.size };
      // The keeper never follows a link; the interface does: ask the sandbox (as its user).
      const x = await this.sb.exec(["stat", "-L", "-c", "%F|%s", "--", path]);
      if (x.exitCode !== 0) return null;
      const [kind, size] = x.stdout.trim().split("|");
      return { type: /^regular/.test(kind) ? "file" : kind === "directory" ? "directory" : "other", size: Number(size) };
    });
  }

  async listDirectory(o: PathOptions): Promise<Array<{ name: string; type: "file" | "directory" | "symlink" | "other" }> | null> {
    const path = this.path(o.path);
    return this.op(o.abortSignal, async () => {
      const r = await this.sb.listFiles(path);
      if (r === null) return null;
      return r.map((e) => ({
        name: e.name,
        type: e.type === "file" ? "file" : e.type === "dir" ? "directory" : e.type === "symlink" ? "symlink" : "other",
      }));
    });
  }

  async deleteFile(o: PathOptions): Promise<boolean> {
    const path = this.path(o.path);
    return this.op(o.abortSignal, async () => {
      // hull's delete takes a directory with what it holds; this member refuses one.
      const s = await this.sb.stat(path);
      if (s === null) return false;
      if (s.type === "dir") throw new SandboxError(`${path} is a directory; deleteFile removes files only`, "is_a_directory");
      return this.sb.delete(path);
    });
  }

  // ---- lifecycle ----

  /** Ends every process of the sandbox; its disk stays. The next call (or a resume) starts it
   * again. Idempotent. */
  async stop(): Promise<void> {
    if (this.destroyed) return;
    try {
      await this.sb.stop();
    } catch (e) {
      throw sandboxNotFound(e, this.id);
    }
  }

  /** Removes the sandbox, running or stopped, with its disk. Idempotent. */
  async destroy(): Promise<void> {
    if (this.destroyed) return;
    this.destroyed = true;
    await this.sb.destroy();
  }

  /** Lets go of the sandbox without stopping it (this process's `hull serve` ends). */
  async close(): Promise<void> {
    await this.sb.close();
  }

  /** The same sandbox with only files and commands: no lifecycle, no network members. */
  restricted(): Experimental_SandboxSession {
    const bind = <K extends keyof this>(k: K) => (this[k] as any).bind(this);
    return Object.freeze({
      description: this.description,
      run: bind("run"),
      spawn: bind("spawn"),
      readFile: bind("readFile"),
      readBinaryFile: bind("readBinaryFile"),
      readTextFile: bind("readTextFile"),
      writeFile: bind("writeFile"),
      writeBinaryFile: bind("writeBinaryFile"),
      writeTextFile: bind("writeTextFile"),
      stat: bind("stat"),
      listDirectory: bind("listDirectory"),
      deleteFile: bind("deleteFile"),
    }) as Experimental_SandboxSession;
  }

  // ---- the network (hull's gateway: published ports, the policy replaced live) ----

  /** Box ports published on the host's 127.0.0.1 (as created, or as `setPorts` narrowed). */
  get ports(): ReadonlyArray<number> {
    return this.exposed;
  }

  /** `http|https|ws://127.0.0.1:<host port>` of a published port (a stopped sandbox starts:
   * every start publishes new host ports, so the running sandbox's are asked for). */
  async getPortEndpoint(o: { port: number; protocol?: "http" | "https" | "ws" }): Promise<HarnessV1PortEndpoint> {
    const protocol = o.protocol ?? "http";
    if (!["http", "https", "ws"].includes(protocol)) throw new TypeError(`protocol must be http, https or ws, got ${String(protocol)}`);
    if (!this.exposed.includes(o.port)) return unsupported.unexposedPort(o.port, this.exposed);
    const live = await this.op(undefined, () => this.sb.start());
    const found = live.find((p) => p.port === o.port);
    if (found === undefined) return unsupported.unexposedPort(o.port, live.map((p) => p.port));
    return { url: `${protocol}://127.0.0.1:${found.hostPort}` };
  }

  async getPortUrl(o: { port: number; protocol?: "http" | "https" | "ws" }): Promise<string> {
    return (await this.getPortEndpoint(o)).url;
  }

  /** Narrows the ports this session resolves; a port not published at creation is refused
   * (hull publishes at creation; a narrowed port's host port stays open until the sandbox
   * stops). */
  async setPorts(ports: ReadonlyArray<number>, options?: { abortSignal?: AbortSignal }): Promise<void> {
    throwIfAborted(options?.abortSignal);
    const want = checkPorts("ports", ports);
    const created = this.sb.ports.map((p) => p.port);
    const extra = want.filter((p) => !created.includes(p));
    if (extra.length > 0) return unsupported.portsAfterCreation(extra);
    this.exposed = Object.freeze(want);
  }

  /** Hands hull the transformations (in its form first: a condition it has no form for is
   * refused, nothing changed), in place of the set or merged into it (`add`: hull keeps the set,
   * so a session resumed in another process adds to what the gateway holds). */
  private transform(member: string, given: ReadonlyArray<HarnessV1RequestTransformation>, add: boolean): Promise<void> {
    const run = async () => {
      if (!this.facts.brokering) return unsupported.requestTransformations(member);
      const hull = toHull(checkList(given));
      try {
        await this.op(undefined, () => (add ? this.sb.addRequestTransformations(hull) : this.sb.setRequestTransformations(hull)));
      } catch (e) {
        if (e instanceof Error && /created without brokering/.test(e.message)) return unsupported.requestTransformations(member);
        throw e;
      }
    };
    const done = this.changing.then(run, run);
    this.changing = done.catch(() => {});
    return done;
  }

  /** Replaces the policy while the sandbox runs: its next name lookups and connections are
   * judged by it (and later starts keep it). */
  async setNetworkPolicy(policy: HarnessV1NetworkPolicy): Promise<void> {
    const hull = hullPolicy(policy);
    try {
      await this.op(undefined, () => this.sb.setNetworkPolicy(hull));
    } catch (e) {
      if (e instanceof RangeError && (e as { arg?: unknown }).arg === "network" && /created without the gateway network/.test(e.message)) {
        // No network at all is already what deny-all asks for.
        if (hull.mode === "deny-all") return;
        return unsupported.policyWithoutGateway(String(hull.mode));
      }
      throw e;
    }
  }
}

/** The text an agent reads about its sandbox. */
function describe(f: SandboxFacts, ports: ReadonlyArray<number>): string {
  const lines = [
    `This is a hull sandbox (\`${f.id}\`, image \`${f.image}\`${f.template ? `, from a prepared template` : ""}): a Linux box of its own with a persistent disk.`,
    `Commands run with bash as the user \`${f.user}\` (HOME ${f.home}), without root's privileges; the working directory is ${WORKSPACE}${f.workspace ? ", a directory of the host mounted read-write" : ", on the sandbox's own disk"}.`,
  ];
  if (f.readOnlyWorkspaces.length > 0) lines.push(`Read-only directories of the host: ${f.readOnlyWorkspaces.join(", ")} (writes there fail).`);
  if (f.network !== undefined) lines.push(describeNetwork(f.network ?? undefined));
  if (f.brokering && f.network) {
    lines.push(
      "Credentials for some hosts are added by hull's gateway outside the sandbox: use the placeholder values you are given as they are. The gateway's CA is trusted through SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT, NODE_EXTRA_CA_CERTS and the system certificate bundle; a client that ignores them (or pins certificates) cannot reach those hosts.",
    );
  }
  if (ports.length > 0) lines.push(`Ports published to the host: ${ports.join(", ")} (a server there must listen on 0.0.0.0).`);
  return lines.join("\n");
}
