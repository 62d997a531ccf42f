// Concurrency, kernels, streaming callbacks, prewarmed boxes and the server's lifetime.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { waitFor } from "./helpers.mjs";
import { KernelDied, Sandbox, SandboxError } from "../dist/index.js";

// The children of every thread of `pid`: a box's pid 1 is the child of the server thread that
// started it, not of its main thread.
function children(pid) {
  let tasks;
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  return tasks.flatMap((tid) => {
    try {
      return readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").split(/\s+/).filter(Boolean);
    } catch {
      return [];
    }
  });
}

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test("30 concurrent runCode calls on one Sandbox", async () => {
  const sb = await Sandbox.create({ timeoutS: 60 });
  try {
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => sb.runCode(`print(${i} * 2)\n${i}`)));
    results.forEach((r, i) => {
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.fault, null);
      assert.equal(r.stdout, `${i * 2}\n`);
      assert.deepEqual(r.results.map((x) => x.text), [String(i)]);
    });
    assert.ok(await waitFor(() => children(sb.serverPid).length === 0, 10_000), "boxes left running");
  } finally {
    await sb.destroy();
  }
});

test("a kernel keeps state between cells", async () => {
  const sb = await Sandbox.create({ timeoutS: 3 });
  try {
    const k = await sb.kernel();
    let r = await k.runCode("counter = 40\ndef bump():\n    global counter\n    counter += 1\n    return counter");
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, "");
    assert.equal((await k.runCode("bump()")).results[0].text, "41");
    r = await k.runCode("print('out'); bump()");
    assert.equal(r.stdout, "out\n");
    assert.equal(r.results[0].text, "42");
    r = await k.runCode("undefined_name");
    assert.notEqual(r.exitCode, 0);
    assert.equal(r.fault, null);
    assert.match(r.stderr, /NameError/);
    assert.equal((await k.runCode("counter")).results[0].text, "42");
    await k.runCode("open('from_kernel.txt', 'w').write('k')");
    assert.equal((await sb.readFile("from_kernel.txt")).toString(), "k");
    r = await k.runCode("while True: pass");
    assert.equal(r.fault?.type, "timeout");
    await assert.rejects(k.runCode("counter"), KernelDied);
    await k.close();
    // A new kernel starts fresh.
    const k2 = await sb.kernel();
    assert.match((await k2.runCode("counter")).stderr, /NameError/);
    await k2.close();
  } finally {
    await sb.destroy();
  }
});

test("streaming callbacks get output as it arrives", async () => {
  // The program prints `start`, then waits (up to 10 s) for the callback that gets it to answer
  // through the workspace: it prints `end` only if its first line reached the callback while it
  // still ran.
  const out = [];
  const err = [];
  let sb;
  sb = await Sandbox.create({
    onStdout: (d) => {
      if (d.includes("start") && sb) writeFileSync(join(sb.workspace, "ack"), "");
      out.push(d);
    },
    onStderr: (d) => err.push(d),
  });
  try {
    const r = await sb.runCode(
      "import os, sys, time\nprint('start', flush=True)\nfor _ in range(1000):\n    if os.path.exists('/workspace/ack'): break\n    time.sleep(0.01)\n" +
        "print('end' if os.path.exists('/workspace/ack') else 'the first chunk came only after the program ended')\nsys.stderr.write('e\\n')",
    );
    assert.equal(r.stdout, "start\nend\n");
    await waitFor(() => out.join("") === "start\nend\n" && err.join("") === "e\n");
    assert.equal(out.join(""), "start\nend\n");
    assert.equal(err.join(""), "e\n");
    // Kernel cells and run() stream too.
    out.length = 0;
    const k = await sb.kernel();
    await k.runCode("print('from the kernel')");
    await k.close();
    await sb.run(["sh", "-c", "echo from run"]);
    await waitFor(() => out.join("") === "from the kernel\nfrom run\n");
    assert.equal(out.join(""), "from the kernel\nfrom run\n");
  } finally {
    await sb.destroy();
  }
});

test("streamed text keeps split characters whole", async () => {
  const got = [];
  const sb = await Sandbox.create({ onStdout: (d) => got.push(d) });
  try {
    const r = await sb.runCode("import os, time\nfor b in 'é€'.encode():\n    os.write(1, bytes([b]))\n    time.sleep(0.05)");
    assert.equal(r.stdout, "é€");
    await waitFor(() => got.join("") === "é€");
    assert.equal(got.join(""), "é€");
  } finally {
    await sb.destroy();
  }
});

test("prewarmed boxes serve calls with each call's own deadline", async () => {
  const sb = await Sandbox.create({ prewarm: 2, timeoutS: 1 });
  try {
    await new Promise((r) => setTimeout(r, 1500));
    for (let i = 0; i < 3; i++) {
      const r = await sb.runCode("print('warm')\n1");
      assert.equal(r.stdout, "warm\n");
      assert.equal(r.fault, null);
    }
    assert.equal((await sb.runCode("while True: pass")).fault?.type, "timeout");
  } finally {
    await sb.destroy();
  }
});

test("destroy stops the server; later calls are refused", async () => {
  const sb = new Sandbox();
  assert.equal(sb.serverPid, undefined);
  await sb.start();
  const pid = sb.serverPid;
  assert.ok(alive(pid));
  const ws = sb.workspace;
  assert.ok(ws && existsSync(ws), `workspace ${ws} missing`);
  await sb.destroy();
  assert.equal(existsSync(ws), false, "the private workspace outlived destroy()");
  assert.ok(await waitFor(() => !alive(pid)), "hull serve still running after destroy");
  await assert.rejects(sb.runCode("1"), SandboxError);
  await sb.destroy(); // idempotent
});

test("a script that forgets destroy() still exits, and its server goes away", async () => {
  const script = `
import { Sandbox } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
const sb = await Sandbox.create();
const r = await sb.runCode("print('hi')");
console.log(sb.serverPid, r.stdout.trim());
`;
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { timeout: 30_000, encoding: "utf8" });
  const [pid, said] = out.trim().split(" ");
  assert.equal(said, "hi");
  assert.ok(await waitFor(() => !alive(Number(pid)), 10_000), "the orphaned hull serve kept running");
});

test("calls waiting on a server that dies reject with SandboxError", async () => {
  const sb = await Sandbox.create({ timeoutS: 10 });
  const pending = sb.runCode("import time\ntime.sleep(3)");
  await new Promise((r) => setTimeout(r, 300));
  process.kill(sb.serverPid, "SIGKILL"); // the hull serve this test started
  await assert.rejects(pending, (e) => e instanceof SandboxError && e.kind === "server_exited" && /signal SIGKILL/.test(e.message));
  await assert.rejects(sb.runCode("1"), SandboxError);
  await sb.destroy();
});

test("a throwing output callback does not break the call", async () => {
  const seen = [];
  const sb = await Sandbox.create({
    onStdout: (d) => {
      seen.push(d);
      throw new Error("callback bug");
    },
  });
  const errors = [];
  const saved = console.error;
  console.error = (...a) => errors.push(a.join(" "));
  try {
    const r = await sb.runCode("print('a', flush=True)\nprint('b')");
    assert.equal(r.stdout, "a\nb\n");
    await waitFor(() => seen.join("") === "a\nb\n");
    assert.equal(seen.join(""), "a\nb\n");
    assert.ok(errors.some((e) => /callback bug/.test(e)));
  } finally {
    console.error = saved;
    await sb.destroy();
  }
});
