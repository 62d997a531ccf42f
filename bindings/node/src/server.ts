// One `hull serve` child process and the reader that dispatches its answers.
//
// Requests carry ids; the stdout data handler splits lines and hands each answer to the promise waiting on that id and
// each streamed `{"id","event","data"}` frame to that call's callback, so many calls can be in
// flight on one server. The child is unref'd while no call waits, so a forgotten Sandbox does not
// keep node alive (the server then sees its stdin close and cleans up).

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";
import { createRequire } from "node:module";

import { SandboxError, fromServerError, type ServerError } from "./errors.js";

export type EventHandler = (event: string, data: string) => void;

interface Pending {
  resolve: (v: any) => void;
  reject: (e: Error) => void;
  onEvent?: EventHandler;
}

/** The `hull` binary: $HULL_BIN, else `hull` on PATH. */
/** The per-platform package carrying the static hull (`npm install hull-sandbox` brings the
 * one for this machine through optionalDependencies), as esbuild and biome ship theirs. */
const PLATFORM_PACKAGE = `hull-sandbox-${process.platform}-${process.arch}`;

/** The hull to run: HULL_BIN (an explicit choice wins), else the per-platform package's, else
 * the first `hull` on PATH. */
export function findHull(): string {
  const env = process.env.HULL_BIN;
  if (env) return env;
  try {
    const p = createRequire(import.meta.url).resolve(`${PLATFORM_PACKAGE}/bin/hull`);
    accessSync(p, constants.X_OK);
    return p;
  } catch {
    // not installed (a source checkout, another platform): PATH next
  }
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, "hull");
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  throw new SandboxError(`the hull binary was not found: install ${PLATFORM_PACKAGE}, put \`hull\` on PATH or set HULL_BIN to its path`, "not_found");
}

export class Server {
  readonly proc: ChildProcessWithoutNullStreams;
  private pending = new Map<number, Pending>();
  private next = 0;
  private closed = false;
  private closing = false;
  private exited: Promise<void>;
  private stderrTail = "";

  constructor(readonly binary: string) {
    this.proc = spawn(binary, ["serve"], { stdio: ["pipe", "pipe", "pipe"] });
    let spawnError: Error | undefined;
    this.proc.on("error", (e) => {
      spawnError = e;
    });
    // Keep the last few KiB of the server's stderr for error messages.
    this.proc.stderr.setEncoding("utf8");
    this.proc.stderr.on("data", (d: string) => {
      this.stderrTail = (this.stderrTail + d).slice(-4096);
    });
    this.proc.stdin.on("error", () => {
      // EPIPE when the server died; the exit handler fails the waiting calls.
    });
    // Lines are split here, on the chunk's bytes, and each answer is dispatched in the same tick
    // it arrives (no readline interface between the pipe and the waiting promise).
    let carry: Buffer[] = [];
    this.proc.stdout.on("data", (chunk: Buffer) => {
      let start = 0;
      for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10, start)) {
        const piece = chunk.subarray(start, nl);
        const line = carry.length ? Buffer.concat([...carry, piece]) : piece;
        carry = [];
        this.dispatch(line.toString("utf8"));
        start = nl + 1;
      }
      if (start < chunk.length) carry.push(chunk.subarray(start));
    });
    this.exited = new Promise((resolve) => {
      this.proc.on("close", (code, signal) => {
        this.closed = true;
        const why = spawnError
          ? `could not start ${binary}: ${spawnError.message} (set HULL_BIN to the hull binary)`
          : `hull serve exited (${signal ? "signal " + signal : "exit status " + code})${this.stderrTail ? ": " + this.stderrTail.trim() : ""}`;
        const waiting = [...this.pending.values()];
        this.pending.clear();
        for (const p of waiting) p.reject(new SandboxError(why, "server_exited"));
        resolve();
      });
    });
    this.idle();
  }

  private dispatch(line: string): void {
    let msg: any;
    try {
      msg = JSON.parse(line);
    } catch {
      return;
    }
    if (msg === null || typeof msg !== "object") return;
    const p = this.pending.get(msg.id);
    if (p === undefined) return;
    if ("event" in msg) {
      if (p.onEvent) {
        try {
          p.onEvent(String(msg.event), typeof msg.data === "string" ? msg.data : "");
        } catch (e) {
          // A callback's error must not break the reader.
          console.error("hull-sandbox: an output callback threw:", e);
        }
      }
      return;
    }
    this.pending.delete(msg.id);
    if (this.pending.size === 0) this.idle();
    if (msg.error) p.reject(fromServerError(msg.error as ServerError));
    else p.resolve(msg.result);
  }

  /** Lets node exit while no call waits. */
  private idle(): void {
    this.proc.unref();
    (this.proc.stdout as any).unref?.();
    (this.proc.stderr as any).unref?.();
    (this.proc.stdin as any).unref?.();
  }

  private busy(): void {
    this.proc.ref();
    (this.proc.stdout as any).ref?.();
    (this.proc.stderr as any).ref?.();
    (this.proc.stdin as any).ref?.();
  }

  /** Sends one request and resolves with its `result` (or rejects with its mapped error). */
  call(method: string, params: Record<string, unknown>, onEvent?: EventHandler): Promise<any> {
    if (this.closed || this.closing) {
      return Promise.reject(new SandboxError("the sandbox's server is closed (destroyed or exited); create a new Sandbox", "destroyed"));
    }
    const bad = illFormed(params);
    if (bad !== undefined) {
      return Promise.reject(new TypeError(`${bad} holds a lone surrogate: not valid Unicode text, so it cannot be sent (pass binary data as a Buffer or Uint8Array)`));
    }
    const id = ++this.next;
    const call = new Promise<any>((resolve, reject) => {
      if (this.pending.size === 0) this.busy();
      this.pending.set(id, { resolve, reject, onEvent });
      this.proc.stdin.write(JSON.stringify({ id, method, params }) + "\n");
    });
    return TRACE ? traced(method, call) : call;
  }

  /** Asks the server to shut down (it destroys every sandbox), then waits for it to exit;
   * kills it if it has not exited within 30 s. */
  async close(): Promise<void> {
    if (!this.closed && !this.closing) {
      this.closing = true;
      this.busy();
      try {
        this.proc.stdin.write(JSON.stringify({ id: 0, method: "shutdown" }) + "\n");
        this.proc.stdin.end();
      } catch {
        // already gone
      }
      const timer = setTimeout(() => this.proc.kill("SIGKILL"), 30_000);
      await this.exited;
      clearTimeout(timer);
    }
    await this.exited;
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }
}

/** HULL_TRACE_CALLS=1: each call's time on stderr, in the shape `hull serve` prints its part. */
const TRACE = !["", "0", undefined].includes(process.env.HULL_TRACE_CALLS);

function traced<T>(method: string, call: Promise<T>): Promise<T> {
  const t0 = performance.now();
  const done = () => {
    const ms = (performance.now() - t0).toFixed(3);
    process.stderr.write(`hull trace: sdk.${method} ${ms} ms: answered ${ms}\n`);
  };
  call.then(done, done);
  return call;
}

/** A lone surrogate: a UTF-16 code unit of a pair without its other half (a string can hold
 * one, UTF-8 and so the server's JSON cannot). In a `u` regex, a whole pair is one code point,
 * so only lone halves match. */
const LONE_SURROGATE = /\p{Cs}/u;

/** The name of the first argument (or nested key) whose text holds a lone surrogate: the server
 * could not parse such a line, and its error could reach no caller, so the call would wait
 * forever. */
function illFormed(v: unknown, name = ""): string | undefined {
  if (typeof v === "string") return LONE_SURROGATE.test(v) ? name || "an argument" : undefined;
  if (Array.isArray(v)) {
    for (const x of v) {
      const bad = illFormed(x, name);
      if (bad !== undefined) return bad;
    }
  } else if (v !== null && typeof v === "object" && !ArrayBuffer.isView(v)) {
    for (const [k, x] of Object.entries(v)) {
      const bad = illFormed(x, name || k);
      if (bad !== undefined) return bad;
    }
  }
  return undefined;
}
