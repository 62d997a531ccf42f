// Compiled (never run) by `npm run build` against dist/*.d.ts: the shipped types satisfy the
// harness's session interface and the newest provider-utils session type, and reject misuse.
import type { HarnessV1NetworkSandboxSession } from "@ai-sdk/harness";
import type { Experimental_SandboxSession } from "@ai-sdk/provider-utils";

import { HullCommandError, HullSandboxNotFoundError, createHullNetworkSandboxSession, pruneHullTemplates, resumeHullNetworkSandboxSession } from "../../dist/index.js";

export async function consumer(): Promise<void> {
  const s = await createHullNetworkSandboxSession({ image: "node:24", setup: ["true"], template: { identity: "x", async prepare({ session }) { await session.run({ command: "true" }); } } });
  const network: HarnessV1NetworkSandboxSession = s;
  const basic: Experimental_SandboxSession = s;
  const restricted: Experimental_SandboxSession = s.restricted();
  const withStdin = await s.spawn({ command: "cat", stdin: true });
  const w: WritableStream<Uint8Array> = withStdin.stdin;
  const plain = await s.spawn({ command: "true" });
  // @ts-expect-error: no stdin without `stdin: true`
  void plain.stdin.getWriter();
  const st: { type: "file" | "directory" | "other"; size: number } | null = await s.stat({ path: "x" });
  const resumed = await resumeHullNetworkSandboxSession({ sandboxId: s.id });
  const removed: string[] = await pruneHullTemplates({ olderThan: 1000 });
  const e: unknown = null;
  if (e instanceof HullCommandError) void [e.command, e.exitCode, e.stderr];
  if (e instanceof HullSandboxNotFoundError) void e.sandboxId;
  // @ts-expect-error: sandboxId is required to resume
  await resumeHullNetworkSandboxSession({});
  // @ts-expect-error: not an option
  await createHullNetworkSandboxSession({ prots: [1] });
  // @ts-expect-error: security is restricted or default
  await createHullNetworkSandboxSession({ security: "off" });
  void [network, basic, restricted, w, st, resumed, removed];
}
