// Results of a call: ExecutionResult, its rich results (mime bundles) and faults.

/** Why a run did not end on its own terms (`timeout`, `oom`, `escape_blocked`, `killed`,
 * `exec_failed`, `output_limit`, `workspace_full`). A program's own error is not a fault. */
export interface Fault {
  type: string;
  reason: string;
  syscall?: string;
}

/** One mime bundle: the last expression's value, a `display(obj)`, or a matplotlib figure. */
export class Result {
  readonly data: Readonly<Record<string, unknown>>;

  constructor(bundle: Record<string, unknown>) {
    this.data = Object.freeze({ ...bundle });
  }

  private str(mime: string): string | null {
    const v = this.data[mime];
    return typeof v === "string" ? v : null;
  }

  private bytes(mime: string): Buffer | null {
    const v = this.data[mime];
    return typeof v === "string" ? Buffer.from(v, "base64") : null;
  }

  get text(): string | null {
    return this.str("text/plain");
  }
  get html(): string | null {
    return this.str("text/html");
  }
  get markdown(): string | null {
    return this.str("text/markdown");
  }
  get svg(): string | null {
    return this.str("image/svg+xml");
  }
  get latex(): string | null {
    return this.str("text/latex");
  }
  /** The `application/json` value (any JSON value), or undefined when absent. */
  get json(): unknown {
    return this.data["application/json"];
  }
  /** PNG bytes, or null. */
  get png(): Buffer | null {
    return this.bytes("image/png");
  }
  /** JPEG bytes, or null. */
  get jpeg(): Buffer | null {
    return this.bytes("image/jpeg");
  }
  /** The mime types this bundle carries. */
  formats(): string[] {
    return Object.keys(this.data);
  }
}

/** A workspace path a call created, modified or deleted (`ExecutionResult.files`), relative to
 * the workspace as `listFiles` gives paths. */
export interface FileChange {
  path: string;
  change: "created" | "modified" | "deleted";
  /** The size now; null once deleted. */
  size: number | null;
  /** The path's exact bytes, present only when it is not UTF-8. */
  pathBytes?: Buffer;
}

/** One workspace entry from `listFiles` (symlinks are listed, never followed). */
export interface FileEntry {
  /** Relative to the workspace, for display: bytes that are not UTF-8 show as U+FFFD, so two
   * such names can look alike (`pathBytes` tells them apart). */
  path: string;
  type: string;
  size: number;
  /** The path's exact bytes, present only when it is not UTF-8; readFile/writeFile take them. */
  pathBytes?: Buffer;
}

/** The outcome of one call (run, runCode, a kernel cell). */
export class ExecutionResult {
  stdout = "";
  stderr = "";
  /** The exact bytes of stdout (`stdout` shows bytes that are not UTF-8 as U+FFFD). */
  stdoutBytes: Buffer = Buffer.alloc(0);
  /** The exact bytes of stderr. */
  stderrBytes: Buffer = Buffer.alloc(0);
  exitCode = -1;
  /** True when the program exited 0 without a fault (any fault, `output_limit` included). */
  success = false;
  fault: Fault | null = null;
  truncated = false;
  durationMs = 0;
  /** Workspace paths the call created, modified or deleted. */
  files: FileChange[] = [];
  results: Result[] = [];
  stats: Record<string, unknown> = {};
  warnings: string[] = [];

  static fromJson(r: Record<string, any>): ExecutionResult {
    const out = new ExecutionResult();
    out.stdout = typeof r.stdout === "string" ? r.stdout : "";
    out.stderr = typeof r.stderr === "string" ? r.stderr : "";
    // The server sends the exact bytes (base64) only when a stream is not UTF-8.
    out.stdoutBytes = typeof r.stdout_b64 === "string" ? Buffer.from(r.stdout_b64, "base64") : Buffer.from(out.stdout, "utf8");
    out.stderrBytes = typeof r.stderr_b64 === "string" ? Buffer.from(r.stderr_b64, "base64") : Buffer.from(out.stderr, "utf8");
    out.exitCode = typeof r.exit_code === "number" ? r.exit_code : -1;
    out.success = Boolean(r.success);
    const f = r.fault;
    out.fault = f && typeof f === "object" ? { type: String(f.type), reason: String(f.reason ?? ""), ...(f.syscall ? { syscall: String(f.syscall) } : {}) } : null;
    out.truncated = Boolean(r.truncated);
    out.durationMs = typeof r.duration_ms === "number" ? r.duration_ms : 0;
    out.files = Array.isArray(r.files)
      ? r.files.filter((f: unknown) => f && typeof f === "object").map((f: Record<string, any>) => ({
          path: String(f.path ?? ""),
          change: f.change,
          size: typeof f.size === "number" ? f.size : null,
          ...(typeof f.path_b64 === "string" ? { pathBytes: Buffer.from(f.path_b64, "base64") } : {}),
        }))
      : [];
    out.results = Array.isArray(r.results) ? r.results.map((b: Record<string, unknown>) => new Result(b)) : [];
    out.stats = r.stats && typeof r.stats === "object" ? { ...r.stats } : {};
    out.warnings = Array.isArray(r.warnings) ? r.warnings.map(String) : [];
    return out;
  }
}
