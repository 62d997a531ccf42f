// Sandbox: one `hull serve` child per sandbox; every call is a fresh box sharing one workspace.
// Options are checked when the Sandbox is constructed (TypeError/RangeError naming the option);
// what only the server can judge (an unknown image, a refused mount) rejects `start()`.

import { resolve as resolvePath } from "node:path";

import { InvalidArgument, SandboxError } from "./errors.js";
import { NamedSandbox, type NamedSandboxOptions } from "./named.js";
import { networkParam, secretsParam, type Network, type SecretSpec } from "./network.js";
import { ExecutionResult, type FileEntry } from "./result.js";
import { Server, findHull, type EventHandler } from "./server.js";

/** The `hull serve` protocol version this package speaks (checked with `hello`). */
export const PROTOCOL = 1;

export const LANGUAGES = ["python", "bash", "sh", "node"] as const;
export type Language = (typeof LANGUAGES)[number];

export interface SandboxOptions {
  /** An image from `hull pull`/the store; default: the embedded `host` image. */
  image?: string;
  /** A shell command run once, with network, in its own box; `pip install` lands in /deps. */
  setup?: string;
  /** A host directory to use as /workspace (kept after destroy); default: a private temporary one. */
  workspace?: string;
  /** Memory cap in MiB (at least 16), or null for none. Default 512. */
  memoryMb?: number | null;
  cpus?: number | null;
  /** Process cap, or null for none. Default 256. */
  pids?: number | null;
  /** Each call's deadline in seconds. Default 30. */
  timeoutS?: number;
  /** Network for calls (setup always has it): false/`none` (default), true/`host`, or a
   * gateway mode or policy (`deny-all`, `allow-all`, `custom`, `{mode, allowHosts, ...}`),
   * which a hull without the gateway refuses with NetworkUnavailable. */
  network?: Network;
  /** Secrets the gateway brokers (a gateway mode only). */
  secrets?: SecretSpec[];
  /** "SRC:DST[:ro]" host binds. Sensitive sources are refused (MountRefused). */
  /** `["SRC:DST[:ro]", ...]`, or kern's shape `{src: dst}` / `{src: [dst, "ro"]}`. */
  mounts?: string[] | Record<string, string | [string, "ro" | "rw"]>;
  /** {path: size} tmpfs mounts; size as "8m" or a number of MiB. */
  tmpfs?: Record<string, string | number>;
  env?: Record<string, string>;
  maxOutputBytes?: number | null;
  depsReadonly?: boolean;
  securityProfile?: string;
  /** Refuse to run when a cap cannot be enforced. */
  requireLimits?: boolean;
  capDrop?: string[];
  /** Report changed workspace files in each result (costs a scan before and after). */
  trackFiles?: boolean;
  /** Called with stdout chunks as they arrive (on the event loop; keep it quick). */
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  /** Boxes kept started and waiting, so a call skips the start-up. */
  prewarm?: number;
  setupTimeoutS?: number;
  /** The boxes' boundary: `"namespace"` (default) or `"vm"`, a microVM per call with a guest
   * kernel of its own (docs/vm.md; the gateway network and secrets but not `host`; `prewarm`
   * boots guests ahead, without a gateway network; no setup or kernels yet). */
  isolation?: "namespace" | "vm";
  /** With `isolation: "vm"`: refuse to run where the VM would be emulated (no usable KVM). */
  requireKvm?: boolean;
}

export interface RunCodeOptions extends SandboxOptions {
  language?: Language;
}

type Check = (name: string, v: unknown) => void;

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v);

/** Output callbacks of one call (over the sandbox's). */
interface Streams {
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

/** Options of one call, over the sandbox's own. */
export interface CallOptions extends Streams {
  /** This call's deadline in seconds. */
  timeoutS?: number;
  /** Environment variables added over the sandbox's. */
  env?: Record<string, string>;
  /** The working directory: an absolute path in the box. */
  cwd?: string;
}

/** `Sandbox.run`'s options: a call's own and the program's standard input. */
export interface RunOptions extends CallOptions {
  /** The program's standard input: text (UTF-8) or bytes; none: empty. */
  stdin?: string | Uint8Array;
}

/** `Sandbox.runCode`'s options: the language and a call's own. */
export interface CodeCallOptions extends CallOptions {
  language?: Language;
}

const CALL_OPTIONS = ["timeoutS", "env", "cwd", "onStdout", "onStderr"];

/** Refuses an option the method does not take, instead of dropping it silently. */
function checkOptionNames(method: string, options: object, known: string[]): void {
  if (options === null || typeof options !== "object") throw typeErr(`${method}'s options`, "an object", options);
  for (const k of Object.keys(options)) {
    if (!known.includes(k)) throw new TypeError(`\`${k}\` is not an option of ${method} (those are: ${known.join(", ")})`);
  }
}

/** A call's options as `hull serve` takes them (only those given), checked. */
function callParams(o: CallOptions): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (o.timeoutS !== undefined) {
    if (typeof o.timeoutS !== "number" || !(o.timeoutS > 0 && o.timeoutS <= 86400)) throw new RangeError(`timeoutS must be a number of seconds more than 0 and at most 86400, got ${describe(o.timeoutS)}`);
    out.timeout_s = o.timeoutS;
  }
  if (o.env !== undefined) {
    if (o.env === null || typeof o.env !== "object" || !Object.values(o.env).every((v) => typeof v === "string")) throw typeErr("env", "an object of strings", o.env);
    out.env = { ...o.env };
  }
  if (o.cwd !== undefined) {
    if (typeof o.cwd !== "string") throw typeErr("cwd", "a string (an absolute path in the box)", o.cwd);
    out.cwd = o.cwd;
  }
  for (const k of ["onStdout", "onStderr"] as const) {
    if (o[k] !== undefined && typeof o[k] !== "function") throw typeErr(k, "a function", o[k]);
  }
  return out;
}

/** The server's output events to `s`'s callbacks; none when it has neither. */
function outputHandler(s: Streams): EventHandler | undefined {
  const { onStdout, onStderr } = s;
  if (!onStdout && !onStderr) return undefined;
  return (event, data) => {
    if (event === "stdout") onStdout?.(data);
    else if (event === "stderr") onStderr?.(data);
  };
}

function streams(o: Streams): Streams {
  return { onStdout: o.onStdout, onStderr: o.onStderr };
}

/** `mounts` as `SRC:DST[:ro]` strings: an array of them, or kern's shape, an object
 * `{src: dst}` or `{src: [dst, "ro" | "rw"]}`. */
function mountsParam(n: string, v: unknown): string[] {
  if (Array.isArray(v)) {
    if (!v.every((x) => typeof x === "string")) throw typeErr(n, "an array of 'SRC:DST[:ro]' strings or an object {src: dst}", v);
    return [...v];
  }
  if (v === null || typeof v !== "object") throw typeErr(n, "an array of 'SRC:DST[:ro]' strings or an object {src: dst}", v);
  return Object.entries(v as Record<string, unknown>).map(([src, dst]) => {
    if (typeof dst === "string") return `${src}:${dst}`;
    if (Array.isArray(dst) && dst.length === 2 && typeof dst[0] === "string" && (dst[1] === "ro" || dst[1] === "rw")) return `${src}:${dst[0]}:${dst[1]}`;
    throw typeErr(`${n}[${JSON.stringify(src)}]`, "a target path or [target, \"ro\" | \"rw\"]", dst);
  });
}

/** A workspace path as an error message shows it. */
function shownPath(path: string | Uint8Array): string {
  return typeof path === "string" ? path : Buffer.from(path).toString("utf8");
}

function typeErr(name: string, what: string, v: unknown): TypeError {
  return new TypeError(`${name} must be ${what}, got ${describe(v)}`);
}

function describe(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "function") return "a function";
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

const str: Check = (n, v) => {
  if (typeof v !== "string") throw typeErr(n, "a string", v);
};
const bool: Check = (n, v) => {
  if (typeof v !== "boolean") throw typeErr(n, "true or false", v);
};
const strList: Check = (n, v) => {
  if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) throw typeErr(n, "an array of strings", v);
};
const intOrNull =
  (min: number, unit: string): Check =>
  (n, v) => {
    if (v === null) return;
    if (!isInt(v)) throw typeErr(n, `an integer${unit} or null`, v);
    if (v < min) throw new RangeError(`${n} must be at least ${min} (or null for no cap), got ${v}`);
  };
const positive: Check = (n, v) => {
  if (typeof v !== "number" || Number.isNaN(v)) throw typeErr(n, "a number of seconds", v);
  if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`${n} must be more than 0 seconds, got ${v}`);
};
const strMap: Check = (n, v) => {
  if (v === null || typeof v !== "object" || Array.isArray(v) || !Object.values(v).every((x) => typeof x === "string")) {
    throw typeErr(n, "an object of string values, e.g. {NAME: \"value\"}", v);
  }
};
const fn: Check = (n, v) => {
  if (typeof v !== "function") throw typeErr(n, "a function", v);
};

/** Each option: its check and its `sandbox.create` parameter name. */
const OPTIONS: Record<string, [Check, string]> = {
  image: [str, "image"],
  setup: [str, "setup"],
  workspace: [str, "workspace"],
  memoryMb: [intOrNull(16, " (MiB)"), "memory_mb"],
  cpus: [
    (n, v) => {
      if (v === null) return;
      if (typeof v !== "number" || Number.isNaN(v)) throw typeErr(n, "a number or null", v);
      if (!(v > 0)) throw new RangeError(`${n} must be more than 0 (or null for no cap), got ${v}`);
    },
    "cpus",
  ],
  pids: [intOrNull(1, ""), "pids"],
  timeoutS: [positive, "timeout_s"],
  network: [(n, v) => void networkParam(n, v), "network"],
  secrets: [(n, v) => void secretsParam(n, v), "secrets"],
  mounts: [(n, v) => void mountsParam(n, v), "mounts"],
  tmpfs: [
    (n, v) => {
      if (v === null || typeof v !== "object" || Array.isArray(v) || !Object.values(v).every((x) => typeof x === "string" || isInt(x))) {
        throw typeErr(n, "an object of {path: size}, e.g. {\"/cache\": \"64m\"}", v);
      }
    },
    "tmpfs",
  ],
  env: [strMap, "env"],
  maxOutputBytes: [intOrNull(1, " (bytes)"), "max_output_bytes"],
  depsReadonly: [bool, "deps_readonly"],
  securityProfile: [str, "security_profile"],
  requireLimits: [bool, "require_limits"],
  capDrop: [strList, "cap_drop"],
  trackFiles: [bool, "track_files"],
  onStdout: [fn, ""],
  onStderr: [fn, ""],
  prewarm: [
    (n, v) => {
      if (!isInt(v)) throw typeErr(n, "an integer", v);
      if (v < 0) throw new RangeError(`${n} must be 0 or more, got ${v}`);
    },
    "prewarm",
  ],
  setupTimeoutS: [positive, "setup_timeout_s"],
  isolation: [
    (n, v) => {
      if (v !== "namespace" && v !== "vm") throw typeErr(n, `"namespace" or "vm"`, v);
    },
    "isolation",
  ],
  requireKvm: [bool, "require_kvm"],
};

/** Checks options and turns them into `sandbox.create` params. Unknown names are refused. */
function createParams(opts: SandboxOptions): Record<string, unknown> {
  if (opts === null || typeof opts !== "object" || Array.isArray(opts)) {
    throw new TypeError(`Sandbox options must be an object, got ${describe(opts)}`);
  }
  const params: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(opts)) {
    const spec = OPTIONS[name];
    if (spec === undefined) {
      const snake = Object.entries(OPTIONS).find(([, [, p]]) => p === name);
      const hint = snake ? ` (did you mean ${snake[0]}?)` : ` (known options: ${Object.keys(OPTIONS).join(", ")})`;
      throw new TypeError(`unknown Sandbox option ${JSON.stringify(name)}${hint}`);
    }
    if (value === undefined) continue;
    spec[0](name, value);
    if (!spec[1]) continue;
    if (name === "workspace") params[spec[1]] = resolvePath(value as string);
    else if (name === "network") params[spec[1]] = networkParam(name, value);
    else if (name === "secrets") params[spec[1]] = secretsParam(name, value);
    else if (name === "mounts") params[spec[1]] = mountsParam(name, value);
    else params[spec[1]] = value;
  }
  return params;
}

/** The server names refused arguments by their protocol (snake_case) names; say the option's. */
function renameArg(e: unknown): unknown {
  if (!(e instanceof InvalidArgument) || e.arg === undefined) return e;
  const option = Object.entries(OPTIONS).find(([, [, p]]) => p === e.arg)?.[0];
  if (option === undefined || option === e.arg) return e;
  return new InvalidArgument(e.message.replaceAll(e.arg, option), option);
}

/**
 * A session of fresh boxes that share one workspace.
 *
 * ```ts
 * const sb = await Sandbox.create({ timeoutS: 10 });
 * try {
 *   const r = await sb.runCode("print(6 * 7)");
 * } finally {
 *   await sb.destroy();
 * }
 * ```
 */
/** A workspace path parameter: `name` as text, or `name_b64` for bytes that are not UTF-8, so
 * every name the workspace holds can be named. */
function wsPath(name: string, path: unknown): Record<string, string> {
  if (typeof path === "string") return { [name]: path };
  if (path instanceof Uint8Array) {
    const bytes = Buffer.from(path.buffer, path.byteOffset, path.byteLength);
    try {
      return { [name]: new TextDecoder("utf-8", { fatal: true }).decode(bytes) };
    } catch {
      return { [`${name}_b64`]: bytes.toString("base64") };
    }
  }
  throw typeErr(name, "a string or the Uint8Array/Buffer bytes of a name", path);
}

export class Sandbox {
  /** The sandbox id on its server (set by `start()`). */
  id: string | undefined;
  /** The workspace directory on the host (bound at /workspace in every box). */
  workspace: string | undefined;
  /** The setup box's output ({stdout, stderr, exit_code, duration_ms}), or null. */
  setupResult: Record<string, unknown> | null = null;

  private readonly params: Record<string, unknown>;
  private readonly onStdout?: (data: string) => void;
  private readonly onStderr?: (data: string) => void;
  private server: Server | undefined;
  private starting: Promise<this> | undefined;
  private destroyed = false;

  /** Checks the options (throwing TypeError/RangeError naming a bad one); `start()` (or any
   * call) then starts the server and creates the sandbox. */
  constructor(options: SandboxOptions = {}) {
    this.params = createParams(options);
    this.onStdout = options.onStdout;
    this.onStderr = options.onStderr;
  }

  /** Constructs and starts a Sandbox; with `name`, creates (or with `persist`, adopts) a named
   * sandbox that lives on (see `NamedSandbox`). */
  static async create(options: NamedSandboxOptions): Promise<NamedSandbox>;
  static async create(options?: SandboxOptions): Promise<Sandbox>;
  static async create(options: SandboxOptions | NamedSandboxOptions = {}): Promise<Sandbox | NamedSandbox> {
    if (options !== null && typeof options === "object" && "name" in options && options.name !== undefined) {
      return NamedSandbox.create(options as NamedSandboxOptions);
    }
    return new Sandbox(options as SandboxOptions).start();
  }

  /** Starts the `hull serve` child and creates the sandbox (runs `setup`); idempotent. */
  start(): Promise<this> {
    if (this.destroyed) return Promise.reject(new SandboxError("the sandbox was destroyed; create a new one", "destroyed"));
    this.starting ??= this.doStart();
    return this.starting;
  }

  private async doStart(): Promise<this> {
    const binary = findHull();
    const server = new Server(binary);
    this.server = server;
    try {
      const hello = await server.call("hello", {});
      if (hello?.protocol !== PROTOCOL || !Array.isArray(hello?.methods) || !hello.methods.includes("sandbox.create")) {
        throw new SandboxError(
          `${binary} speaks protocol ${describe(hello?.protocol)} without sandbox sessions; this package needs protocol ${PROTOCOL} (point HULL_BIN at a matching hull)`,
          "protocol",
        );
      }
      // The setup's output reaches onStdout/onStderr while it runs.
      const onEvent = this.params.setup !== undefined ? outputHandler({ onStdout: this.onStdout, onStderr: this.onStderr }) : undefined;
      const created = await server.call("sandbox.create", onEvent ? { ...this.params, stream: true } : this.params, onEvent);
      this.id = created.sandbox;
      this.workspace = created.workspace;
      this.setupResult = created.setup ?? null;
      return this;
    } catch (e) {
      this.destroyed = true;
      await server.close();
      throw renameArg(e);
    }
  }

  private async call(method: string, params: Record<string, unknown>, stream = false, own: Streams = {}): Promise<any> {
    await this.start();
    const server = this.server!;
    const onEvent = stream ? outputHandler({ onStdout: own.onStdout ?? this.onStdout, onStderr: own.onStderr ?? this.onStderr }) : undefined;
    if (onEvent) params.stream = true;
    return server.call(method, { sandbox: this.id, ...params }, onEvent);
  }

  /** Replaces the session's network policy while it lives (it was created with a gateway
   * mode): its running boxes (a kernel, boxes started ahead) and every later call judge their
   * next DNS queries and connections by `network` (a gateway mode or a `NetworkPolicy` without
   * ports). Resolves to how many running gateways took it. */
  async setNetworkPolicy(network: Network): Promise<number> {
    return (await this.call("sandbox.set_network", { network: networkParam("network", network) })).gateways;
  }

  /** Runs code in a fresh box. Python returns rich `results`. `timeoutS`, `env` (over the
   * sandbox's), `cwd` (an absolute path in the box), `onStdout` and `onStderr` apply to this
   * call only; an option not listed here is refused. */
  async runCode(code: string, options: CodeCallOptions = {}): Promise<ExecutionResult> {
    if (typeof code !== "string") throw typeErr("code", "a string", code);
    checkOptionNames("runCode", options, ["language", ...CALL_OPTIONS]);
    const language = options.language ?? "python";
    if (!LANGUAGES.includes(language)) {
      throw new RangeError(`language must be one of ${LANGUAGES.join(", ")}, got ${describe(language)}`);
    }
    return ExecutionResult.fromJson(await this.call("sandbox.run_code", { code, language, ...callParams(options) }, true, streams(options)));
  }

  /** Runs a command (an array of strings) in a fresh box, with this call's own options and
   * `stdin` (text or bytes) as the program's standard input. */
  async run(argv: string[], options: RunOptions = {}): Promise<ExecutionResult> {
    if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string")) {
      throw typeErr("argv", "a non-empty array of strings, e.g. [\"ls\", \"-l\"]", argv);
    }
    checkOptionNames("run", options, [...CALL_OPTIONS, "stdin"]);
    const params: Record<string, unknown> = { argv: [...argv], ...callParams(options) };
    const { stdin } = options;
    if (typeof stdin === "string") params.stdin = stdin;
    else if (stdin instanceof Uint8Array) params.stdin_b64 = Buffer.from(stdin.buffer, stdin.byteOffset, stdin.byteLength).toString("base64");
    else if (stdin !== undefined) throw typeErr("stdin", "a string or a Uint8Array/Buffer", stdin);
    return ExecutionResult.fromJson(await this.call("sandbox.run", params, true, streams(options)));
  }

  /** Writes a string (UTF-8) or bytes to a workspace path, creating parent directories. */
  async writeFile(path: string | Uint8Array, data: string | Uint8Array): Promise<void> {
    const at = wsPath("path", path);
    let bytes: Buffer;
    if (typeof data === "string") bytes = Buffer.from(data, "utf8");
    else if (data instanceof Uint8Array) bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    else throw typeErr("data", "a string or a Uint8Array/Buffer", data);
    await this.call("sandbox.write_file", { ...at, data_b64: bytes.toString("base64") });
  }

  /** Reads a regular workspace file; a file larger than `maxBytes` is refused (InvalidArgument
   * naming its size). Symlinks, FIFOs and paths
   * leaving the workspace are refused (FileOperationError). `path` is a string, or the bytes
   * of a name that is not UTF-8 (`FileEntry.pathBytes`). */
  async readFile(path: string | Uint8Array, options: { maxBytes?: number } = {}): Promise<Buffer> {
    const at = wsPath("path", path);
    const { maxBytes } = options;
    if (maxBytes !== undefined && (!isInt(maxBytes) || maxBytes < 0)) throw typeErr("maxBytes", "a non-negative integer", maxBytes);
    const r = await this.call("sandbox.read_file", { ...at, ...(maxBytes !== undefined ? { max_bytes: maxBytes } : {}) });
    // A larger file is refused naming its size, never returned as a silent prefix.
    if (r.truncated) throw new InvalidArgument(`${shownPath(path)} is ${r.size} bytes, more than maxBytes=${maxBytes}; raise maxBytes, or read a range of lines with readText`, "maxBytes");
    return Buffer.from(r.data_b64, "base64");
  }

  /** Every entry below `subdir` (recursive; symlinks listed, never followed). A name that is
   * not UTF-8 shows U+FFFD in `path` and carries its exact bytes in `pathBytes`. */
  async listFiles(subdir: string | Uint8Array = ""): Promise<FileEntry[]> {
    const r = await this.call("sandbox.list_files", wsPath("subdir", subdir));
    return (r.entries as any[]).map((e) => ({
      path: e.path,
      type: e.type,
      size: e.size,
      ...(typeof e.path_b64 === "string" ? { pathBytes: Buffer.from(e.path_b64, "base64") } : {}),
    }));
  }

  /** Writes the workspace as a .tar.gz at `dest` (a host path). */
  async snapshot(dest: string): Promise<{ files: number; bytes: number; skipped: string[] }> {
    if (typeof dest !== "string") throw typeErr("dest", "a host file path", dest);
    return this.call("sandbox.snapshot", { dest: resolvePath(dest) });
  }

  /** Replaces the workspace's contents with a .tar.gz; hostile members (absolute, `..`, links,
   * devices, FIFOs) refuse the whole archive before anything changes. */
  async restore(src: string): Promise<{ files: number; bytes: number }> {
    if (typeof src !== "string") throw typeErr("src", "a host file path", src);
    return this.call("sandbox.restore", { src: resolvePath(src) });
  }

  /** Starts one warm Python interpreter in a long-lived box; globals persist across its cells. */
  async kernel(options: { timeoutS?: number } = {}): Promise<Kernel> {
    checkOptionNames("kernel", options, ["timeoutS"]);
    callParams(options);
    const r = await this.call("kernel.start", {});
    return new Kernel(this, r.kernel, options.timeoutS);
  }

  /** @internal */
  async kernelCall(method: string, params: Record<string, unknown>, stream = false, own: Streams = {}): Promise<any> {
    return this.call(method, params, stream, own);
  }

  /** Ends every box of the sandbox, removes its directories and stops its server. Idempotent. */
  async destroy(): Promise<void> {
    if (this.destroyed) return;
    this.destroyed = true;
    if (this.starting === undefined) return;
    try {
      await this.starting;
    } catch {
      return; // a failed start already closed its server
    }
    const server = this.server!;
    try {
      await server.call("sandbox.destroy", { sandbox: this.id });
    } catch {
      // the server is gone: nothing left to destroy
    }
    await server.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }

  /** The pid of this sandbox's `hull serve` child (undefined before `start()`). */
  get serverPid(): number | undefined {
    return this.server?.pid;
  }
}

/** One warm interpreter (a long-lived box): cells share globals. */
export class Kernel {
  constructor(
    private readonly sandbox: Sandbox,
    readonly id: string,
    /** Each cell's deadline unless the cell gives its own (undefined: the sandbox's). */
    readonly timeoutS?: number,
  ) {}

  /** Runs one cell (`timeoutS` over the kernel's). A cell that times out or kills the
   * interpreter ends the kernel: later cells reject with KernelDied. */
  async runCode(code: string, options: { timeoutS?: number; onStdout?: (data: string) => void; onStderr?: (data: string) => void } = {}): Promise<ExecutionResult> {
    if (typeof code !== "string") throw typeErr("code", "a string", code);
    checkOptionNames("Kernel.runCode", options, ["timeoutS", "onStdout", "onStderr"]);
    const timeoutS = options.timeoutS ?? this.timeoutS;
    return ExecutionResult.fromJson(await this.sandbox.kernelCall("kernel.run_code", { kernel: this.id, code, ...callParams({ timeoutS }) }, true, streams(options)));
  }

  async close(): Promise<void> {
    try {
      await this.sandbox.kernelCall("kernel.close", { kernel: this.id });
    } catch {
      // already closed or dead
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Runs code once in a fresh sandbox and returns its result. */
export async function runCode(code: string, options: RunCodeOptions = {}): Promise<ExecutionResult> {
  const { language, ...sandboxOptions } = options ?? {};
  const sb = new Sandbox(sandboxOptions);
  try {
    return await sb.runCode(code, language === undefined ? {} : { language });
  } finally {
    await sb.destroy();
  }
}
