// The real HarnessAgent of @ai-sdk/harness over a hull session, with a model-free harness
// adapter written for this test in the shape of the Claude Code adapter: a bootstrap recipe
// (files, a command, the marker), a Node bridge spawned in the sandbox that prints a ready line,
// and turns answered by that bridge. Without hull's network (ports) the bridge is reached over
// the spawn's stdin and stdout (`spawn({ stdin: true })`) instead of a WebSocket.
import assert from "node:assert/strict";
import { test } from "node:test";

import { HarnessAgent } from "@ai-sdk/harness/agent";

import { IMAGE, withSandboxes } from "./helpers.mjs";
import { createHullNetworkSandboxSession } from "../dist/index.js";

const BRIDGE = `
import { appendFileSync, writeFileSync } from "node:fs";
import { userInfo } from "node:os";
import { createInterface } from "node:readline";
appendFileSync(process.env.BRIDGE_LOG, "started\\n");
console.log(JSON.stringify({ type: "bridge-ready", user: userInfo().username, token: process.env.BRIDGE_TOKEN }));
let n = 0;
for await (const line of createInterface({ input: process.stdin })) {
  const { prompt, workDir } = JSON.parse(line);
  writeFileSync(workDir + "/turn-" + ++n + ".txt", prompt);
  console.log(JSON.stringify({ type: "reply", text: prompt.toUpperCase() + " (turn " + n + " as " + userInfo().username + " in " + process.cwd() + ")" }));
}
`;

/** Lines of a byte stream, one at a time. */
function lineReader(stream) {
  const reader = stream.getReader();
  const dec = new TextDecoder();
  let buf = "";
  return async () => {
    for (;;) {
      const nl = buf.indexOf("\n");
      if (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        return line;
      }
      const { done, value } = await reader.read();
      if (done) return null;
      buf += dec.decode(value, { stream: true });
    }
  };
}

function echoHarness(counts) {
  return {
    specificationVersion: "harness-v1",
    harnessId: "hull-echo",
    builtinTools: {},
    async getBootstrap() {
      return {
        harnessId: "hull-echo",
        bootstrapDir: ".harness-bootstrap/hull-echo",
        files: [{ path: ".harness-bootstrap/hull-echo/bridge.mjs", content: BRIDGE }],
        commands: [{ command: "node --check bridge.mjs && echo built >> bootstrap-runs" }],
      };
    },
    async doStart({ sandboxSession, sessionWorkDir, sessionId }) {
      counts.starts++;
      const dwd = sandboxSession.defaultWorkingDirectory;
      const home = (await sandboxSession.run({ command: 'printf "%s" "$HOME"' })).stdout;
      const proc = await sandboxSession.spawn({
        command: `node ${dwd}/.harness-bootstrap/hull-echo/bridge.mjs`,
        workingDirectory: sessionWorkDir,
        env: { BRIDGE_TOKEN: "token-" + sessionId, BRIDGE_LOG: `${home}/bridge.log` },
        stdin: true,
      });
      const next = lineReader(proc.stdout);
      const ready = JSON.parse(await next());
      assert.equal(ready.type, "bridge-ready");
      counts.ready = ready;
      const writer = proc.stdin.getWriter();
      return {
        sessionId,
        isResume: false,
        async doPromptTurn({ prompt, emit }) {
          const text = typeof prompt === "string" ? prompt : prompt.content.map((p) => p.text ?? "").join("");
          await writer.write(new TextEncoder().encode(JSON.stringify({ prompt: text, workDir: sessionWorkDir }) + "\n"));
          const done = (async () => {
            const reply = JSON.parse(await next());
            emit({ type: "stream-start", warnings: [] });
            emit({ type: "text-start", id: "t" });
            emit({ type: "text-delta", id: "t", delta: reply.text });
            emit({ type: "text-end", id: "t" });
            const usage = { inputTokens: { total: 1 }, outputTokens: { total: 1 } };
            emit({ type: "finish-step", finishReason: { unified: "stop" }, usage });
            emit({ type: "finish", finishReason: { unified: "stop" }, totalUsage: usage });
          })();
          return { done, async submitToolResult() {} };
        },
        async doCompact() {},
        async doContinueTurn() {
          throw new Error("no continuation in this test harness");
        },
        async doSuspendTurn() {
          throw new Error("no suspension in this test harness");
        },
        async doDetach() {
          return {};
        },
        async doStop() {
          await proc.kill();
          counts.exit = await proc.wait();
          return {};
        },
        async doDestroy() {
          await proc.kill();
        },
      };
    },
  };
}

test("HarnessAgent bootstraps a hull sandbox, starts a bridge in it and runs turns through it", () =>
  withSandboxes(async () => {
    const counts = { starts: 0 };
    const sandbox = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "agent" });
    try {
      const agent = new HarnessAgent({ harness: echoHarness(counts) });
      const session = await agent.createSession({ sandboxSession: sandbox });
      assert.equal(counts.starts, 1);
      assert.deepEqual([counts.ready.user, counts.ready.token.startsWith("token-")], ["node", true]);
      const first = await agent.generate({ session, prompt: "hello sandbox" });
      const second = await agent.generate({ session, prompt: "again" });
      const workDir = (await sandbox.run({ command: "ls -d /workspace/hull-echo-*" })).stdout.trim();
      assert.equal(first.text, `HELLO SANDBOX (turn 1 as node in ${workDir})`);
      assert.equal(second.text, `AGAIN (turn 2 as node in ${workDir})`);
      assert.equal(await sandbox.readTextFile({ path: `${workDir}/turn-1.txt` }), "hello sandbox");
      // The recipe ran once and left its marker; a second agent session skips it.
      const boot = await sandbox.listDirectory({ path: ".harness-bootstrap/hull-echo" });
      assert.ok(boot.some((e) => e.name.startsWith(".bootstrap-") && e.name.endsWith(".ok")), JSON.stringify(boot));
      await session.destroy?.();
      const again = await agent.createSession({ sandboxSession: sandbox });
      assert.equal((await agent.generate({ session: again, prompt: "third" })).text.startsWith("THIRD (turn 1"), true);
      assert.equal(await sandbox.readTextFile({ path: ".harness-bootstrap/hull-echo/bootstrap-runs" }), "built\n");
      assert.equal(await sandbox.readTextFile({ path: "/home/node/bridge.log" }), "started\nstarted\n");
      await again.destroy?.();
      // A caller-provided sandbox outlives the agent's sessions.
      assert.equal((await sandbox.run({ command: "echo alive" })).stdout, "alive\n");
    } finally {
      await sandbox.destroy();
    }
  }));
