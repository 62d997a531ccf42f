// The adapter's own errors. hull's errors (the Node SDK's HullError family: SandboxError with its
// `kind`, FileOperationError, ...) come through as they are; these two carry what a caller acts
// on: the failed setup step and the missing sandbox.
import { SandboxError } from "hull-sandbox";

/** A setup command (or another creation step) failed; the half-made sandbox was removed. */
export class HullCommandError extends Error {
  readonly command: string;
  readonly exitCode: number;
  readonly stderr: string;

  constructor(options: { command: string; exitCode: number; stderr: string; message?: string }) {
    super(options.message ?? `sandbox command \`${options.command}\` failed with exit code ${options.exitCode}${options.stderr ? `: ${options.stderr.trim().slice(-2000)}` : ""}`);
    this.name = "HullCommandError";
    this.command = options.command;
    this.exitCode = options.exitCode;
    this.stderr = options.stderr;
  }
}

/** No hull sandbox has this id (never made, or destroyed). */
export class HullSandboxNotFoundError extends Error {
  readonly sandboxId: string;

  constructor(sandboxId: string, options?: { cause?: unknown }) {
    super(`no hull sandbox named \`${sandboxId}\` (never created, or destroyed)`, options);
    this.name = "HullSandboxNotFoundError";
    this.sandboxId = sandboxId;
  }
}

/** hull's `not_found` for the sandbox itself, as the adapter's error; anything else unchanged. */
export function sandboxNotFound(e: unknown, sandboxId: string): unknown {
  if (e instanceof SandboxError && e.kind === "not_found" && /no sandbox named/.test(e.message)) {
    return new HullSandboxNotFoundError(sandboxId, { cause: e });
  }
  return e;
}

/** The reason an aborted signal carries (a DOMException AbortError when it carries none). */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/** Rejects at once when the signal has been aborted: nothing is started. */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw abortReason(signal);
}

/** `p`, or the abort reason as soon as the signal aborts (what `p` does then is left to it). */
export function raceAbort<T>(p: PromiseLike<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return Promise.resolve(p);
  throwIfAborted(signal);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortReason(signal));
    signal.addEventListener("abort", onAbort, { once: true });
    Promise.resolve(p).then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}
