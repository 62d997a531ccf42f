// Errors. Bad arguments throw TypeError/RangeError naming the argument; what the server refuses
// or cannot do comes back as one of the classes below, mapped from its error `kind`.

/** The `error` object of a `hull serve` answer. */
export interface ServerError {
  kind?: string;
  message?: string;
  chain?: string[];
  arg?: string;
  step?: string;
  reason?: string;
  [key: string]: unknown;
}

/** Base of hull's errors. `kind` is the server's error kind; `chain` its cause chain. */
export class HullError extends Error {
  readonly kind: string | undefined;
  readonly chain: string[];
  readonly detail: ServerError;

  constructor(message: string, kind?: string, detail: ServerError = {}) {
    super(message);
    this.name = new.target.name;
    this.kind = kind;
    this.chain = Array.isArray(detail.chain) ? [...detail.chain] : [];
    this.detail = { ...detail };
  }
}

/** The box (or the sandbox) could not start or be used. `step` and `reason` say where the box's
 * setup failed when it did. */
export class SandboxError extends HullError {
  get step(): string | undefined {
    return typeof this.detail.step === "string" ? this.detail.step : undefined;
  }

  get reason(): string {
    return typeof this.detail.reason === "string" ? this.detail.reason : this.message;
  }
}

/** A mount was refused (a sensitive host source, or a target hull sets up itself). */
export class MountRefused extends SandboxError {}

/** The network asked for cannot be given by this hull (a gateway mode a build or host cannot
 * serve). `mode` is the refused mode; the sandbox never starts with another network. */
export class NetworkUnavailable extends SandboxError {
  get mode(): string | undefined {
    return typeof this.detail.mode === "string" ? this.detail.mode : undefined;
  }
}

/** A workspace file operation was refused (a symlink, FIFO, device, `..`) or failed. */
export class FileOperationError extends HullError {}

/** The kernel's interpreter is gone (a timeout or crash ended it). */
export class KernelDied extends SandboxError {}

/** An argument the server refused (an unknown image, too many prewarmed boxes, ...); `arg`
 * names it. A RangeError, like the refusals made before a server starts. */
export class InvalidArgument extends RangeError {
  readonly arg: string | undefined;

  constructor(message: string, arg?: string) {
    super(message);
    this.name = "InvalidArgument";
    this.arg = arg;
  }
}

/** Maps a server error object to the matching error class. */
export function fromServerError(err: ServerError): Error {
  const kind = err.kind;
  const msg = typeof err.message === "string" ? err.message : "hull error";
  switch (kind) {
    case "invalid_argument":
      return new InvalidArgument(msg, err.arg);
    case "mount_refused":
      return new MountRefused(msg, kind, err);
    case "path_refused":
    case "io":
      return new FileOperationError(msg, kind, err);
    case "network_unavailable":
      return new NetworkUnavailable(msg, kind, err);
    case "kernel_dead":
      return new KernelDied(msg, kind, err);
    default:
      return new SandboxError(msg, kind, err);
  }
}
