// Compiled (never run) by `npm run build` against the emitted dist/*.d.ts: the shipped types
// accept the documented API and reject misuse (each @ts-expect-error must be an error, or tsc fails).
import { ExecutionResult, FileOperationError, Kernel, MountRefused, NetworkUnavailable, Result, Sandbox, SandboxError, runCode, type Fault, type NetworkPolicy, type SandboxOptions, type SecretSpec } from "../../dist/index.js";

export async function documentedUse(): Promise<void> {
  const policy: NetworkPolicy = { mode: "custom", allowHosts: ["*.example.com"], denyCidrs: ["10.0.0.0/8"], ports: [8080], maxTcpConnections: 64 };
  const secret: SecretSpec = { name: "API_KEY", env: "MY_KEY", hosts: ["api.example.com"] };
  await Sandbox.create({ network: policy, secrets: [secret] }).catch((e: unknown) => {
    if (e instanceof NetworkUnavailable) void e.mode;
  });
  await Sandbox.create({ network: "deny-all" }).catch(() => undefined);
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
  // @ts-expect-error network is a boolean, a mode or a policy
  new Sandbox({ network: "yes" });
  // @ts-expect-error policy keys are camelCase
  new Sandbox({ network: { allow_hosts: ["a.com"] } });
  // @ts-expect-error not a language
  await sb.runCode("1", { language: "ruby" });
  // @ts-expect-error argv is an array
  await sb.run("ls -l");
  // @ts-expect-error a path is a string or bytes
  await sb.readFile(7);
  // @ts-expect-error results are read-only mime bundles
  (await sb.runCode("1")).results[0].data["text/plain"] = "x";
}

import { NamedSandbox, Process, listSandboxes, resume, type NamedSandboxOptions, type SandboxListing } from "../../dist/index.js";

export async function namedUse(): Promise<void> {
  const o: NamedSandboxOptions = { name: "dev", persist: true, memoryMb: 256, setup: ["true"], idleTimeoutS: 60 };
  const sb: NamedSandbox = await Sandbox.create(o);
  const r: ExecutionResult = await sb.exec(["ls"], { env: { A: "b" }, cwd: "/tmp", timeoutS: 5, onStdout: (s: string) => void s });
  void r.exitCode;
  const p: Process = await sb.spawn("sleep 1");
  for await (const [stream, text] of p) void (stream === "stderr" ? text : text.length);
  for await (const line of p.lines("stderr")) void line.length;
  const part: string | null = await sb.readText("a.txt", { lines: [2, null] });
  void part;
  const printed: string = await sb.logs({ maxBytes: 100 });
  const all: SandboxListing[] = await listSandboxes();
  void (printed.length + all.map((s) => s.user).length);
  const fromTemplate: NamedSandbox = await Sandbox.create({ name: "t", template: "tools" });
  void fromTemplate;
  const w: ExecutionResult = await p.wait();
  void w;
  await p.kill();
  const again: NamedSandbox = await resume("dev");
  await again.stop();
  // @ts-expect-error a named sandbox has no session options
  await Sandbox.create({ name: "x", prewarm: 2 });
}
