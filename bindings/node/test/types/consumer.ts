// Compiled (never run) by `npm run build` against the emitted dist/*.d.ts: the shipped types
// accept the documented API and reject misuse (each @ts-expect-error must be an error, or tsc fails).
import { ExecutionResult, FileOperationError, Kernel, MountRefused, Result, Sandbox, SandboxError, runCode, type Fault, type SandboxOptions } from "../../dist/index.js";

export async function documentedUse(): Promise<void> {
  const opts: SandboxOptions = { image: "host", memoryMb: 256, cpus: 1.5, pids: null, timeoutS: 5, network: false, env: { A: "b" }, tmpfs: { "/cache": "64m" }, onStdout: (s: string) => void s };
  const sb: Sandbox = await Sandbox.create(opts);
  const r: ExecutionResult = await sb.runCode("1", { language: "python" });
  const fault: Fault | null = r.fault;
  const code: number = r.exitCode;
  const first: Result | undefined = r.results[0];
  const png: Buffer | null | undefined = first?.png;
  const text: string | null | undefined = first?.text;
  const bytes: Buffer = await sb.readFile("a", { maxBytes: 10 });
  await sb.writeFile("a", new Uint8Array([1]));
  for (const f of await sb.listFiles()) {
    const name: string | Buffer = f.pathBytes ?? f.path;
    await sb.readFile(name);
  }
  const k: Kernel = await sb.kernel();
  await k.runCode("x = 1");
  await k.close();
  await sb.destroy();
  await runCode("echo hi", { language: "bash", timeoutS: 1 });
  const e: unknown = null;
  if (e instanceof MountRefused) {
    const base: SandboxError = e;
    void base.step;
  }
  if (e instanceof FileOperationError) void e.kind;
  void [fault, code, png, text, bytes];
}

export async function misuse(sb: Sandbox): Promise<void> {
  // @ts-expect-error snake_case names are not options
  new Sandbox({ memory_mb: 64 });
  // @ts-expect-error network is a boolean
  new Sandbox({ network: "yes" });
  // @ts-expect-error not a language
  await sb.runCode("1", { language: "ruby" });
  // @ts-expect-error argv is an array
  await sb.run("ls -l");
  // @ts-expect-error a path is a string or bytes
  await sb.readFile(7);
  // @ts-expect-error results are read-only mime bundles
  (await sb.runCode("1")).results[0].data["text/plain"] = "x";
}
