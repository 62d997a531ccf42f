// Named sandboxes (`Sandbox.create({ name, persist })`, `resume(name)`): one box that lives on
// past this process, reached through `hull serve`'s `named.*` methods (docs/named.md). A
// NamedSandbox keeps a `hull serve` child only to talk to the sandbox's keeper: closing it (or
// this process exiting) leaves the sandbox, and what `spawn` started, running.

import { resolve as resolvePath } from "node:path";

import { InvalidArgument, SandboxError } from "./errors.js";
import { ExecutionResult } from "./result.js";
import { findHull, Server, type EventHandler } from "./server.js";
import { networkParam, secretsParam, type Network, type SecretSpec } from "./network.js";

/** What a named sandbox is made with. */
export interface NamedSandboxOptions {
  /** 1 to 63 of a-z, 0-9, `_`, `.`, `-`, starting with a letter or digit. */
  name: string;
  /** Adopt the sandbox of this name when it exists (made with the same options, else refused
   * naming the one that differs), and leave it running at dispose; without it a taken name is
   * a conflict and dispose destroys the sandbox. */
  persist?: boolean;
  image?: string;
  /** Shell commands run once at creation (as root); a failure removes the sandbox. */
  setup?: string | string[];
  /** A host directory at /workspace (read-write); default: the sandbox's own disk. */
  workspace?: string;
  /** Host directories mounted read-only at their own paths. */
  roWorkspaces?: string[];
  memoryMb?: number | null;
  cpus?: number | null;
  pids?: number | null;
  env?: Record<string, string>;
  idleTimeoutS?: number;
  maxDurationS?: number;
  /** The user of the image every command runs as (`NAME`, `UID`, `NAME:GROUP`, `UID:GID`,
   * from its /etc/passwd); setup runs as root, /workspace and the user's home are made its.
   * Default: root. Needs an /etc/subuid range when hull is not run as root. */
  user?: string;
  /** A saved template (`hull template save`) to start from: its disk and configuration, these
   * options over them (another image or a workspace is refused). */
  template?: string;
  /** As a Sandbox's `network` (a gateway mode is refused by a hull without the gateway). */
  network?: Network;
  /** As a Sandbox's `secrets`, but only `env` references: a named sandbox's configuration is
   * kept on disk, where a value is never written. */
  secrets?: SecretSpec[];
  /** Credential brokering with no secret given (a gateway `network` only): the gateway's CA is
   * trusted in the sandbox from the start, so `setRequestTransformations` can put values into
   * its requests while it runs. */
  brokering?: boolean;
}

/** A request transformation as hull's gateway takes it (`docs/serve.md`,
 * `named.set_transformations`): requests to `match.hosts` that match every other given part get
 * `headers` set (or added) on their way out; a value is a literal or `{secret, prefix}`. */
export interface Transformation {
  match: {
    hosts: string[];
    path?: { exact: string } | { prefix: string } | { regex: string };
    method?: string;
    query?: Record<string, string>;
    headers?: Record<string, string>;
  };
  action?: "set" | "add";
  headers: Record<string, string | { secret: string; prefix?: string }>;
}

/** How one command runs. */
export interface ExecOptions {
  /** Merged over the sandbox's environment for this command only. */
  env?: Record<string, string>;
  cwd?: string;
  /** The user this command runs as (`root` too), instead of the sandbox's `user`. */
  user?: string;
  /** Past this the command is killed (exit 137). */
  timeoutS?: number;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

const OPTION_NAMES: Record<string, string> = {
  name: "name",
  persist: "adopt",
  image: "image",
  setup: "setup",
  workspace: "workspace",
  roWorkspaces: "ro_workspaces",
  memoryMb: "memory_mb",
  cpus: "cpus",
  pids: "pids",
  env: "env",
  idleTimeoutS: "idle_timeout_s",
  maxDurationS: "max_duration_s",
  user: "user",
  template: "template",
  network: "network",
  secrets: "secrets",
  brokering: "brokering",
};

function createParams(o: NamedSandboxOptions): Record<string, unknown> {
  if (typeof o.name !== "string") throw new TypeError(`name must be a string, got ${typeof o.name}`);
  const p: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) {
    const wire = OPTION_NAMES[k];
    if (wire === undefined) {
      throw new TypeError(`${k} is not an option of a named sandbox (those are: ${Object.keys(OPTION_NAMES).join(", ")})`);
    }
    if (v === undefined) continue;
    if (k === "workspace") p[wire] = resolvePath(v as string);
    else if (k === "roWorkspaces") p[wire] = (v as string[]).map((d) => resolvePath(d));
    else if (k === "setup") p[wire] = typeof v === "string" ? [v] : v;
    else if (k === "pids" && v === null) p[wire] = 0;
    else if (k === "network") p[wire] = networkParam(k, v);
    else if (k === "secrets") p[wire] = secretsParam(k, v);
    else p[wire] = v;
  }
  return p;
}

/** The server names a differing argument as the protocol does; say the option's name. */
function optionName(e: unknown): unknown {
  if (e instanceof SandboxError && typeof e.detail?.arg === "string") {
    const opt = Object.entries(OPTION_NAMES).find(([, w]) => w === e.detail.arg)?.[0];
    if (opt !== undefined && opt !== e.detail.arg) {
      return new SandboxError(e.message.replaceAll(String(e.detail.arg), opt), e.kind, { ...e.detail, arg: opt });
    }
  }
  return e;
}

function commandParams(cmd: string | string[], o: ExecOptions): Record<string, unknown> {
  const p: Record<string, unknown> = {};
  if (typeof cmd === "string") p.shell = cmd;
  else if (Array.isArray(cmd) && cmd.length > 0 && cmd.every((a) => typeof a === "string")) p.argv = [...cmd];
  else throw new TypeError("cmd must be a shell string or a non-empty array of strings");
  if (o.env !== undefined) {
    if (o.env === null || typeof o.env !== "object" || !Object.values(o.env).every((v) => typeof v === "string")) {
      throw new TypeError("env must be an object of strings");
    }
    p.env = o.env;
  }
  if (o.cwd !== undefined) p.cwd = o.cwd;
  if (o.user !== undefined) {
    if (typeof o.user !== "string") throw new TypeError("user must be a string");
    p.user = o.user;
  }
  if (o.timeoutS !== undefined) {
    if (typeof o.timeoutS !== "number" || !(o.timeoutS > 0)) throw new RangeError(`timeoutS must be more than 0 seconds, got ${o.timeoutS}`);
    p.timeout_s = o.timeoutS;
  }
  return p;
}

function collector(o: { onStdout?: (d: string) => void; onStderr?: (d: string) => void }, kept?: { stdout: string; stderr: string }): EventHandler {
  return (event, data) => {
    if (event === "stdout") {
      if (kept) kept.stdout += data;
      o.onStdout?.(data);
    } else if (event === "stderr") {
      if (kept) kept.stderr += data;
      o.onStderr?.(data);
    }
  };
}

function textPath(path: unknown): string {
  if (typeof path !== "string" || path === "") throw new TypeError("path must be a non-empty string");
  return path;
}

/** A published box port and the `127.0.0.1` port it is reached at on the host. */
export interface PublishedPort {
  port: number;
  hostPort: number;
}

function publishedPorts(r: any): PublishedPort[] {
  if (!Array.isArray(r?.ports)) return [];
  return r.ports.map((p: any) => ({ port: Number(p.port), hostPort: Number(p.host_port) }));
}

/** A named sandbox: `exec`, `spawn`, files, `stop`, `destroy`. */
export class NamedSandbox {
  private closed = false;
  /** The published ports (`network: {ports}`) as the running sandbox publishes them on the
   * host's `127.0.0.1`: set by creation, `resume` and `start()` (every start publishes new
   * host ports), emptied by `stop()`. */
  ports: PublishedPort[] = [];

  private constructor(
    readonly name: string,
    private readonly server: Server,
    private readonly persist: boolean,
  ) {}

  private static async open(name: string): Promise<Server> {
    const binary = findHull();
    const server = new Server(binary);
    try {
      const hello = await server.call("hello", {});
      if (!Array.isArray(hello?.methods) || !hello.methods.includes("named.create")) {
        throw new SandboxError(`${binary} has no named sandboxes; point HULL_BIN at a newer hull`, "protocol");
      }
    } catch (e) {
      await server.close();
      throw e;
    }
    void name;
    return server;
  }

  /** @internal Creates (or, with `persist`, adopts) the sandbox. */
  static async create(options: NamedSandboxOptions): Promise<NamedSandbox> {
    const params = createParams(options);
    const server = await NamedSandbox.open(options.name);
    let made;
    try {
      made = await server.call("named.create", params);
    } catch (e) {
      await server.close();
      throw optionName(e);
    }
    const sb = new NamedSandbox(options.name, server, options.persist === true);
    sb.ports = publishedPorts(made);
    return sb;
  }

  /** @internal */
  static async resume(name: string): Promise<NamedSandbox> {
    if (typeof name !== "string") throw new TypeError("name must be a string");
    const server = await NamedSandbox.open(name);
    let started;
    try {
      started = await server.call("named.start", { sandbox: name });
    } catch (e) {
      await server.close();
      throw e;
    }
    const sb = new NamedSandbox(name, server, true);
    sb.ports = publishedPorts(started);
    return sb;
  }

  /** @internal */
  call(method: string, params: Record<string, unknown>, onEvent?: EventHandler): Promise<any> {
    return this.server.call(method, { sandbox: this.name, ...params }, onEvent);
  }

  /** What every exec and spawn printed (`hull logs`), as text; its last `maxBytes` bytes when
   * given. */
  async logs(options: { maxBytes?: number } = {}): Promise<string> {
    const p: Record<string, unknown> = {};
    if (options.maxBytes !== undefined) {
      if (!Number.isInteger(options.maxBytes) || options.maxBytes < 0) throw new RangeError(`maxBytes must be a whole number, got ${options.maxBytes}`);
      p.max_bytes = options.maxBytes;
    }
    return (await this.call("named.logs", p)).logs;
  }

  /** Replaces the sandbox's network policy while it runs (it was created with a gateway mode):
   * its next DNS queries and connections are judged by `network` (a gateway mode or a
   * `NetworkPolicy` without ports), and later starts keep it. Ports and the connection cap stay
   * as created. Resolves to whether the sandbox was running. */
  async setNetworkPolicy(network: Network): Promise<boolean> {
    return (await this.call("named.set_network", { network: networkParam("network", network) })).running;
  }

  /** Replaces the request transformations of the running sandbox (made with `brokering`):
   * every request from now on gets them (on open connections too); `[]` removes them all. They live in its gateway
   * only (never on disk; withdrawn when it stops), so they are set again after a start. */
  async setRequestTransformations(transformations: Transformation[]): Promise<void> {
    if (!Array.isArray(transformations)) throw new TypeError("transformations must be a list");
    await this.call("named.set_transformations", { transformations });
  }

  /** Merges `transformations` into the running sandbox's (a transformation with the same
   * match and header names replaces the one there, others are appended), as the AI SDK's
   * `addRequestTransformations` does; hull keeps the set, so any process may add to it. */
  async addRequestTransformations(transformations: Transformation[]): Promise<void> {
    if (!Array.isArray(transformations)) throw new TypeError("transformations must be a list");
    await this.call("named.set_transformations", { transformations, add: true });
  }

  /** @internal One call on a server of its own (listing, templates). */
  static async once(method: string, params: Record<string, unknown>): Promise<any> {
    const server = await NamedSandbox.open("");
    try {
      return await server.call(method, params);
    } finally {
      await server.close();
    }
  }

  /** @internal Every named sandbox (`hull ps`). */
  static async list(): Promise<SandboxListing[]> {
    const server = await NamedSandbox.open("");
    try {
      return (await server.call("named.list", {})).sandboxes;
    } finally {
      await server.close();
    }
  }

  /** Runs a command (an array is argv, a string one shell string run by bash, else sh). A
   * stopped sandbox starts first. Exit code 128+N for signal N. */
  async exec(cmd: string | string[], options: ExecOptions = {}): Promise<ExecutionResult> {
    const p = commandParams(cmd, options);
    let onEvent: EventHandler | undefined;
    if (options.onStdout || options.onStderr) {
      p.stream = true;
      onEvent = collector(options);
    }
    return ExecutionResult.fromJson(await this.call("named.exec", p, onEvent));
  }

  /** Starts a background process and resolves at once with its Process; it runs on across
   * later execs and after this process exits, until `kill()` or `stop()`. */
  async spawn(cmd: string | string[], options: Omit<ExecOptions, "timeoutS"> & { stdin?: boolean } = {}): Promise<Process> {
    const { stdin, ...rest } = options;
    const p = commandParams(cmd, rest);
    if (stdin !== undefined) {
      if (typeof stdin !== "boolean") throw new TypeError("stdin must be true or false");
      // Its stdin is a pipe the keeper holds: `process.write()`, then `process.closeStdin()`.
      p.stdin = stdin;
    }
    const r = await this.call("named.spawn", p);
    return new Process(this, r.process, options);
  }

  /** The Process of a handle spawned earlier, by this client or any other (`Process.id`): the
   * keeper owns spawned processes, so a handle outlives its client (not a stop). */
  process(id: string): Process {
    if (typeof id !== "string") throw new TypeError(`id must be a string (a Process's id), got ${String(id)}`);
    return new Process(this, id);
  }

  /** Reads a file of the sandbox's root (a relative path is below /workspace); null when it is
   * missing; a directory rejects (kind `is_a_directory`); a file larger than `maxBytes` rejects
   * (InvalidArgument), never cut short. */
  async readFile(path: string, options: { maxBytes?: number } = {}): Promise<Buffer | null> {
    const { maxBytes } = options;
    if (maxBytes !== undefined && (!Number.isInteger(maxBytes) || maxBytes < 0)) throw new TypeError(`maxBytes must be a non-negative integer, got ${maxBytes}`);
    // A larger file is refused by the server (InvalidArgument naming the limit), never cut short.
    const r = await this.call("named.read_file", { path: textPath(path), ...(maxBytes !== undefined ? { max_bytes: maxBytes } : {}) });
    return r === null ? null : Buffer.from(r.data_b64, "base64");
  }

  /** A file as text (null when it is missing). `lines: [first, last]` keeps lines first to last,
   * counted from 1, both included (`last` null: to the end), each with its newline; lines end
   * at "\n" only. The sandbox's keeper cuts the range. */
  async readText(path: string, options: { lines?: [number, number | null]; encoding?: BufferEncoding } = {}): Promise<string | null> {
    const { lines, encoding = "utf8" } = options;
    if (lines !== undefined) {
      const [first, last] = Array.isArray(lines) && lines.length === 2 ? lines : [NaN, NaN];
      if (!Number.isInteger(first) || first < 1 || !(last === null || (Number.isInteger(last) && last >= first))) {
        throw new RangeError(`lines must be [first, last]: line numbers from 1, first <= last (last null: to the end), got ${JSON.stringify(lines)}`);
      }
    }
    // The keeper cuts the range: only those lines cross the socket.
    const p: Record<string, unknown> = { path: textPath(path) };
    if (lines !== undefined) {
      p.start_line = lines[0];
      if (lines[1] !== null) p.end_line = lines[1];
    }
    const r = await this.call("named.read_file", p);
    return r === null ? null : Buffer.from(r.data_b64, "base64").toString(encoding);
  }

  /** Writes a file (parents made, an existing file overwritten), as the sandbox's user. */
  async writeFile(path: string, data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    await this.call("named.write_file", { path: textPath(path), data_b64: bytes.toString("base64") });
  }

  /** `{type, size, mtime_s, mode}` of a path, or null when it is missing. */
  async stat(path: string): Promise<{ type: string; size: number; mtime_s: number; mode: number } | null> {
    return this.call("named.stat", { path: textPath(path) });
  }

  /** The entries of one directory (not recursive), or null when it is missing. */
  async listFiles(path = "/workspace"): Promise<{ name: string; type: string; size: number; mtime_s: number }[] | null> {
    const r = await this.call("named.list_files", { path: textPath(path) });
    return r === null ? null : r.entries;
  }

  /** Removes a path (a directory with what it holds); false when it was missing. */
  async delete(path: string): Promise<boolean> {
    return (await this.call("named.delete", { path: textPath(path) })).deleted;
  }

  /** Freezes this stopped sandbox's disk and configuration as template `name` (`hull template
   * save`): `Sandbox.create({ name, template })` then starts from it without copying. A running
   * sandbox is refused (kind `sandbox_running`), a taken name is a `conflict`. */
  async saveTemplate(name: string): Promise<void> {
    if (typeof name !== "string") throw new TypeError("name must be a string");
    await this.call("named.template_save", { name });
  }

  /** Ends every process; the disk stays (the next exec, or `resume`, starts it again). */
  async stop(): Promise<void> {
    await this.call("named.stop", {});
    this.ports = [];
  }

  /** Starts a stopped sandbox (nothing when it runs); resolves with its published ports. */
  async start(): Promise<PublishedPort[]> {
    this.ports = publishedPorts(await this.call("named.start", {}));
    return this.ports;
  }

  /** Removes the sandbox for good (running or stopped) and lets go of it. Idempotent. */
  async destroy(): Promise<void> {
    if (this.closed) return;
    try {
      await this.call("named.rm", {});
    } finally {
      await this.close();
    }
  }

  /** Lets go of the sandbox without stopping it. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.server.close();
  }

  /** `await using`: a persistent sandbox is let go of, another destroyed. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.persist) await this.close();
    else await this.destroy();
  }
}

/** A background process of a named sandbox (`NamedSandbox.spawn`). Its output, from its start,
 * goes to the spawn's callbacks and is kept in `stdout`/`stderr`. */
export class Process {
  stdout = "";
  stderr = "";
  private readonly done: Promise<ExecutionResult>;
  private result: ExecutionResult | undefined;
  /** Every chunk so far, in order of arrival, for the iterators. */
  private readonly chunks: ["stdout" | "stderr", string][] = [];
  private ended = false;
  private wake: (() => void)[] = [];

  constructor(
    private readonly sandbox: NamedSandbox,
    /** The process's handle. */
    readonly id: string,
    callbacks: { onStdout?: (d: string) => void; onStderr?: (d: string) => void } = {},
  ) {
    const kept = { stdout: "", stderr: "" };
    const onEvent = collector(callbacks, kept);
    this.done = this.sandbox.call("named.wait", { process: id, stream: true }, (e, d) => {
      onEvent(e, d);
      this.stdout = kept.stdout;
      this.stderr = kept.stderr;
      if (e === "stdout" || e === "stderr") {
        this.chunks.push([e, d]);
        this.notify();
      }
    }).then((r) => {
      this.result = ExecutionResult.fromJson(r);
      return this.result;
    });
    // A rejection is the waiter's to see; never an unhandled one.
    this.done.catch(() => {});
    this.done.finally(() => {
      this.ended = true;
      this.notify();
    }).catch(() => {});
  }

  private notify(): void {
    const w = this.wake;
    this.wake = [];
    for (const f of w) f();
  }

  /** The output as it comes: `[stream, text]` pairs in order of arrival, from the process's
   * start (every iterator sees all of it), ending when it ends (rejecting as `wait()` would).
   * `for await (const [stream, text] of process)` is the same. */
  async *output(): AsyncGenerator<["stdout" | "stderr", string], void, undefined> {
    let i = 0;
    for (;;) {
      if (i < this.chunks.length) {
        yield this.chunks[i++];
        continue;
      }
      if (this.ended) break;
      await new Promise<void>((r) => this.wake.push(r));
    }
    await this.done;
  }

  [Symbol.asyncIterator](): AsyncGenerator<["stdout" | "stderr", string], void, undefined> {
    return this.output();
  }

  /** One stream's lines (each with its newline; a last one without) as they come. */
  async *lines(stream: "stdout" | "stderr" = "stdout"): AsyncGenerator<string, void, undefined> {
    if (stream !== "stdout" && stream !== "stderr") throw new RangeError(`stream must be "stdout" or "stderr", got ${String(stream)}`);
    let rest = "";
    for await (const [s, text] of this.output()) {
      if (s !== stream) continue;
      rest += text;
      const parts = rest.split("\n");
      rest = parts.pop() ?? "";
      for (const l of parts) yield l + "\n";
    }
    if (rest !== "") yield rest;
  }

  /** Resolves when the process has ended (exit code 128+N for signal N, 137 once killed). */
  wait(): Promise<ExecutionResult> {
    return this.done;
  }

  /** The exit code, or null while it runs. */
  poll(): number | null {
    return this.result ? this.result.exitCode : null;
  }

  /** Writes to the process's stdin (a spawn made with `stdin: true`); resolves once the keeper
   * has written it all (a process that does not read holds it). `closeStdin()` ends it. */
  async write(data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    await this.sandbox.call("named.write_stdin", { process: this.id, data_b64: bytes.toString("base64") });
  }

  /** Closes the process's stdin (it reads end of file); `data` is written first. */
  async closeStdin(data: string | Uint8Array = ""): Promise<void> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    await this.sandbox.call("named.write_stdin", { process: this.id, data_b64: bytes.toString("base64"), eof: true });
  }

  /** Kills the process and everything it started, daemons that left its session included (its
   * own cgroup; exit 137); one that ended already keeps its code. Idempotent. */
  async kill(): Promise<ExecutionResult> {
    await this.sandbox.call("named.kill", { process: this.id });
    return this.done;
  }
}

/** One named sandbox as `listSandboxes()` reports it. */
export interface SandboxListing {
  name: string;
  state: "running" | "stopped";
  image: string;
  user: string;
  age_s: number;
  size_bytes: number;
  /** The published ports of a running sandbox (`[]` while stopped). */
  ports?: { port: number; host_port: number }[];
}

/** Every named sandbox of this user (`hull ps`). */
export function listSandboxes(): Promise<SandboxListing[]> {
  return NamedSandbox.list();
}

/** The named sandbox `name`, started again if it was stopped. */
export function resume(name: string): Promise<NamedSandbox> {
  return NamedSandbox.resume(name);
}

/** One saved template as `listTemplates()` reports it (`hull template ls`). */
export interface TemplateListing {
  name: string;
  /** The sandbox it was saved from. */
  from: string;
  image: string;
  user: string;
  age_s: number;
  size_bytes: number;
  layers: number;
}

/** Every saved template of this user (`hull template ls`). */
export async function listTemplates(): Promise<TemplateListing[]> {
  return (await NamedSandbox.once("named.template_list", {})).templates;
}

/** Removes template `name` (`hull template rm`); false when there was none. Sandboxes made
 * from it keep working (its layers go with the last of them). */
export async function removeTemplate(name: string): Promise<boolean> {
  if (typeof name !== "string") throw new TypeError("name must be a string");
  return (await NamedSandbox.once("named.template_rm", { name })).removed;
}

/** Removes the templates saved at least `olderThanS` seconds ago (all without it; `hull
 * template prune`); their names. */
export async function pruneTemplates(options: { olderThanS?: number } = {}): Promise<string[]> {
  const p: Record<string, unknown> = {};
  if (options.olderThanS !== undefined) {
    if (typeof options.olderThanS !== "number" || !(options.olderThanS >= 0)) throw new RangeError(`olderThanS must be 0 or more seconds, got ${options.olderThanS}`);
    p.older_than_s = options.olderThanS;
  }
  return (await NamedSandbox.once("named.template_prune", p)).removed;
}
