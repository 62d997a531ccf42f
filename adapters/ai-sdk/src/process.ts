// Processes started by the session's `spawn`: a hull spawn (`named.spawn`, owned by the sandbox's
// keeper, killed with its whole tree through its own cgroup) streamed into web ReadableStreams;
// or, with `stdin: true`, a `hull exec -i` child of this process (the keeper's spawns have no
// stdin), killed by killing that client: the keeper then SIGKILLs the command's process group.
import { spawn as spawnChild } from "node:child_process";
import { Readable, Writable } from "node:stream";

import { SandboxError, findHull, type NamedSandbox, type Process } from "hull-sandbox";

import { abortReason } from "./errors.js";

/** What one command is given. */
export interface CommandSpec {
  command: string;
  cwd: string;
  env?: Record<string, string>;
  abortSignal?: AbortSignal;
}

/** A spawned process as the harness sees it. */
export interface SpawnedProcess {
  readonly stdout: ReadableStream<Uint8Array>;
  readonly stderr: ReadableStream<Uint8Array>;
  readonly stdin?: WritableStream<Uint8Array>;
  wait(): Promise<{ exitCode: number }>;
  kill(): Promise<void>;
}

/** A stream fed from callbacks; closed once, errors after a cancel ignored. */
function pushStream(): { stream: ReadableStream<Uint8Array>; push(s: string): void; close(): void } {
  let ctl!: ReadableStreamDefaultController<Uint8Array>;
  let open = true;
  const enc = new TextEncoder();
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      ctl = c;
    },
    cancel() {
      open = false;
    },
  });
  return {
    stream,
    push(s) {
      if (open && s.length > 0) ctl.enqueue(enc.encode(s));
    },
    close() {
      if (open) {
        open = false;
        ctl.close();
      }
    },
  };
}

/** Wires an abort signal to a kill, and `wait()` to reject with its reason once it fired. */
function withAbort(signal: AbortSignal | undefined, kill: () => Promise<void>, done: Promise<number>): () => Promise<{ exitCode: number }> {
  if (signal === undefined) return () => done.then((exitCode) => ({ exitCode }));
  const onAbort = () => void kill().catch(() => {});
  signal.addEventListener("abort", onAbort, { once: true });
  if (signal.aborted) onAbort();
  const waited = done.then(
    (exitCode) => {
      signal.removeEventListener("abort", onAbort);
      if (signal.aborted) throw abortReason(signal);
      return { exitCode };
    },
    (e) => {
      signal.removeEventListener("abort", onAbort);
      throw signal.aborted ? abortReason(signal) : e;
    },
  );
  waited.catch(() => {});
  return () => waited;
}

/** A keeper-owned spawn (`named.spawn`): output streamed, tree killed by its cgroup. */
export async function spawnInSandbox(sb: NamedSandbox, spec: CommandSpec): Promise<SpawnedProcess> {
  const out = pushStream();
  const err = pushStream();
  const proc: Process = await sb.spawn(spec.command, {
    cwd: spec.cwd,
    ...(spec.env !== undefined ? { env: spec.env } : {}),
    onStdout: out.push,
    onStderr: err.push,
  });
  const done = proc.wait().then(
    (r) => r.exitCode,
    (e) => {
      // Stopping the sandbox ends every process in it with SIGKILL: as a kill, 137.
      if (e instanceof SandboxError && /sandbox stopped/.test(e.message)) return 137;
      throw e;
    },
  );
  done.finally(() => {
    out.close();
    err.close();
  }).catch(() => {});
  let killed: Promise<void> | undefined;
  const kill = (): Promise<void> => {
    // Idempotent: one kill call; a process gone with its sandbox (stopped) has nothing to kill.
    killed ??= proc.kill().then(
      () => {},
      () => {},
    );
    return killed;
  };
  const wait = withAbort(spec.abortSignal, kill, done);
  return { stdout: out.stream, stderr: err.stream, wait, kill };
}

/** Variables `hull exec` itself reads: given to it with their value on its command line
 * (visible in the host's `ps`), every other one by name only, its value in hull's environment. */
const HULLS_OWN = /^(HULL_|XDG_)|^(PATH|HOME|TMPDIR|LD_[A-Z_]+)$/;

/** A command with a writable stdin: `hull exec -i` as a child of this process. */
export function spawnWithStdin(sandboxId: string, spec: CommandSpec): SpawnedProcess {
  const args = ["exec", "-i", "-w", spec.cwd];
  const env: Record<string, string | undefined> = { ...process.env };
  for (const [k, v] of Object.entries(spec.env ?? {})) {
    if (HULLS_OWN.test(k)) args.push("-e", `${k}=${v}`);
    else {
      args.push("-e", k);
      env[k] = v;
    }
  }
  args.push("--shell", sandboxId, "--", spec.command);
  const child = spawnChild(findHull(), args, { env, stdio: ["pipe", "pipe", "pipe"] });
  const done = new Promise<number>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve(code ?? 128 + (signal === "SIGKILL" ? 9 : 15)));
  });
  done.catch(() => {});
  child.stdin.on("error", () => {});
  let killed: Promise<void> | undefined;
  const kill = (): Promise<void> => {
    // The client going away is what makes the keeper kill the command's process group.
    if (killed === undefined) {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      killed = done.then(
        () => {},
        () => {},
      );
    }
    return killed;
  };
  const wait = withAbort(spec.abortSignal, kill, done);
  return {
    stdout: Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>,
    stderr: Readable.toWeb(child.stderr) as ReadableStream<Uint8Array>,
    stdin: Writable.toWeb(child.stdin) as WritableStream<Uint8Array>,
    wait,
    kill,
  };
}
