// Processes started by the session's `spawn`: hull spawns (`named.spawn`), owned by the
// sandbox's keeper (they outlive this process, are killed with their whole tree through their own
// cgroup), their output streamed into web ReadableStreams; with `stdin: true` the keeper holds a
// pipe as their stdin, written through `named.write_stdin`.
import { SandboxError, type NamedSandbox, type Process } from "hull-sandbox";

import { abortReason } from "./errors.js";

/** What one command is given. */
export interface CommandSpec {
  command: string;
  cwd: string;
  env?: Record<string, string>;
  abortSignal?: AbortSignal;
  stdin?: boolean;
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
    ...(spec.stdin === true ? { stdin: true } : {}),
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
  if (spec.stdin !== true) return { stdout: out.stream, stderr: err.stream, wait, kill };
  // Each write is one keeper call, in order (a WritableStream writes one chunk at a time);
  // close is end of file, moot once the process has ended (the keeper dropped its stdin then);
  // an abort of the stream closes it too.
  const stdin = new WritableStream<Uint8Array>({
    write: (chunk) => proc.write(chunk),
    close: async () => {
      try {
        await proc.closeStdin();
      } catch (e) {
        // Refused because the process ended (its exit may reach this client a moment after the
        // keeper dropped the pipe): nothing to close. Refused while it runs: say so.
        const ended = await Promise.race([done.then(() => true, () => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1000).unref())]);
        if (!ended) throw e;
      }
    },
    abort: () => proc.closeStdin().catch(() => {}),
  });
  return { stdout: out.stream, stderr: err.stream, stdin, wait, kill };
}
