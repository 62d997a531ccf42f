// The real HarnessAgent of @ai-sdk/harness over a hull session, with a model-free harness
// adapter written for this test in the shape of the Claude Code adapter: a bootstrap recipe
// (files, a command, the marker), a Node bridge spawned in the sandbox that prints a ready line,
// and turns answered by that bridge: a WebSocket server (the ws package, shipped in the
// bootstrap's files) on `ports[0]`, reached from the host through
// `getPortEndpoint({ protocol: 'ws' })` as the Claude Code adapter reaches its bridge.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { test } from "node:test";

import WebSocket from "ws";

import { HarnessAgent } from "@ai-sdk/harness/agent";

import { API_IP, API_NAME, IMAGE, fakeApi, withSandboxes } from "./helpers.mjs";
import { createHullNetworkSandboxSession } from "../dist/index.js";

const BRIDGE = `
import { appendFileSync, writeFileSync } from "node:fs";
import { userInfo } from "node:os";
import { WebSocketServer } from "ws";
appendFileSync(process.env.BRIDGE_LOG, "started\\n");
let n = 0;
const server = new WebSocketServer({ host: "0.0.0.0", port: Number(process.env.BRIDGE_PORT) }, () =>
  console.log(JSON.stringify({ type: "bridge-ready", user: userInfo().username, token: process.env.BRIDGE_TOKEN })));
server.on("connection", (ws) => ws.on("message", async (m) => {
  const { prompt, workDir } = JSON.parse(String(m));
  writeFileSync(workDir + "/turn-" + ++n + ".txt", prompt);
  // With a model API: one call with the key the bridge was given (a placeholder when brokered).
  let model = "";
  if (process.env.MODEL_URL) {
    const r = await fetch(process.env.MODEL_URL, { method: "POST", headers: { "x-api-key": process.env.MODEL_API_KEY }, body: prompt });
    model = " [" + (await r.text()) + "]";
  }
  ws.send(JSON.stringify({ type: "reply", text: prompt.toUpperCase() + " (turn " + n + " as " + userInfo().username + " in " + process.cwd() + ")" + model }));
}));
`;

/** What the sandbox holds in the key's place (the harness's placeholders look like it). */
const PLACEHOLDER = "aisdkhc_harness0test0placeholder000000000000000";
const REAL = "sk-ant-REAL-harness-0123456789";

/** The ws package's files (pure JS) as bootstrap files next to the bridge. */
function wsFiles(dir) {
  const root = dirname(createRequire(import.meta.url).resolve("ws/package.json"));
  const names = ["package.json", "index.js", "wrapper.mjs", ...readdirSync(join(root, "lib")).map((n) => `lib/${n}`)];
  return names.map((n) => ({ path: `${dir}/node_modules/ws/${n}`, content: readFileSync(join(root, n), "utf8") }));
}

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

/** The harness; with `model` ({url, key}) its bridge calls that API each turn, and the key is
 * brokered the way the Claude Code adapter brokers its own: a placeholder in the sandbox and a
 * transformation, added before the bridge starts, that puts the real key in on the way out. */
function echoHarness(counts, model) {
  return {
    specificationVersion: "harness-v1",
    harnessId: "hull-echo",
    builtinTools: {},
    async getBootstrap() {
      return {
        harnessId: "hull-echo",
        bootstrapDir: ".harness-bootstrap/hull-echo",
        files: [{ path: ".harness-bootstrap/hull-echo/bridge.mjs", content: BRIDGE }, ...wsFiles(".harness-bootstrap/hull-echo")],
        commands: [{ command: "node --check bridge.mjs && echo built >> bootstrap-runs" }],
      };
    },
    async doStart({ sandboxSession, sessionWorkDir, sessionId }) {
      counts.starts++;
      const dwd = sandboxSession.defaultWorkingDirectory;
      const home = (await sandboxSession.run({ command: 'printf "%s" "$HOME"' })).stdout;
      const env = { BRIDGE_TOKEN: "token-" + sessionId, BRIDGE_LOG: `${home}/bridge.log`, BRIDGE_PORT: String(sandboxSession.ports[0]) };
      if (model !== undefined) {
        assert.equal(typeof sandboxSession.addRequestTransformations, "function", "the session offers no brokering");
        await sandboxSession.addRequestTransformations([
          { match: { host: new URL(model.url).hostname, headers: [{ key: { exact: "x-api-key" }, value: { exact: PLACEHOLDER } }] }, transform: { headers: { "x-api-key": model.key } } },
        ]);
        Object.assign(env, { MODEL_URL: model.url, MODEL_API_KEY: PLACEHOLDER });
      }
      const proc = await sandboxSession.spawn({
        command: `node ${dwd}/.harness-bootstrap/hull-echo/bridge.mjs`,
        workingDirectory: sessionWorkDir,
        env,
      });
      const ready = JSON.parse(await lineReader(proc.stdout)());
      assert.equal(ready.type, "bridge-ready");
      counts.ready = ready;
      const { url } = await sandboxSession.getPortEndpoint({ port: sandboxSession.ports[0], protocol: "ws" });
      counts.url = url;
      const ws = new WebSocket(url);
      await new Promise((resolve, reject) => {
        ws.once("open", resolve);
        ws.once("error", reject);
      });
      const replies = [];
      let waiting = null;
      ws.on("message", (m) => {
        replies.push(JSON.parse(String(m)));
        waiting?.();
      });
      const next = async () => {
        while (replies.length === 0) await new Promise((r) => (waiting = r));
        return replies.shift();
      };
      return {
        sessionId,
        isResume: false,
        async doPromptTurn({ prompt, emit }) {
          const text = typeof prompt === "string" ? prompt : prompt.content.map((p) => p.text ?? "").join("");
          ws.send(JSON.stringify({ prompt: text, workDir: sessionWorkDir }));
          const done = (async () => {
            const reply = await next();
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
          ws.close();
          await proc.kill();
          counts.exit = await proc.wait();
          return {};
        },
        async doDestroy() {
          ws.close();
          await proc.kill();
        },
      };
    },
  };
}

test("HarnessAgent bootstraps a hull sandbox, starts a bridge in it and runs turns through it", () =>
  withSandboxes(async () => {
    const counts = { starts: 0 };
    const sandbox = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "agent", ports: [4000] });
    try {
      const agent = new HarnessAgent({ harness: echoHarness(counts) });
      const session = await agent.createSession({ sandboxSession: sandbox });
      assert.equal(counts.starts, 1);
      assert.deepEqual([counts.ready.user, counts.ready.token.startsWith("token-")], ["node", true]);
      assert.match(counts.url, /^ws:\/\/127\.0\.0\.1:\d+$/);
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

test("a turn whose bridge calls a model API with a brokered key: the real key reaches the API only", () =>
  withSandboxes(async () => {
    const api = await fakeApi();
    const counts = { starts: 0 };
    const sandbox = await createHullNetworkSandboxSession({
      image: IMAGE,
      sandboxId: "brokered-agent",
      ports: [4000],
      networkPolicy: { mode: "custom", allowedHosts: [API_NAME], allowedCIDRs: [`${API_IP}/32`] },
    });
    try {
      const agent = new HarnessAgent({ harness: echoHarness(counts, { url: `https://${API_NAME}:${api.port}/v1/messages`, key: REAL }) });
      const session = await agent.createSession({ sandboxSession: sandbox });
      assert.match(counts.url, /^ws:\/\/127\.0\.0\.1:\d+$/);
      const turn = await agent.generate({ session, prompt: "hello model" });
      assert.match(turn.text, /^HELLO MODEL \(turn 1 as node in .*\) \[model reply 1\]$/);
      assert.deepEqual(api.seen, [REAL], "the API did not get the real key");
      // The sandbox holds the placeholder only: no process's environment has the key.
      const environ = await sandbox.run({ command: "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -e sk-ant-REAL -e " + PLACEHOLDER + " || true" });
      assert.equal(environ.stdout.trim(), "1", "the bridge's environment should hold the placeholder, and nothing the real key");
      const real = await sandbox.run({ command: "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c sk-ant-REAL || true" });
      assert.equal(real.stdout.trim(), "0");
      await session.destroy?.();
    } finally {
      await sandbox.destroy();
      api.close();
    }
  }));
