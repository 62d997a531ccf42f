// Bad arguments are refused naming the argument: at construction (TypeError/RangeError) for what
// the SDK can judge, at start() for what only the server can (unknown image, refused mount).
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import "./helpers.mjs";
import { InvalidArgument, MountRefused, Sandbox, SandboxError, runCode } from "../dist/index.js";

test("bad options are refused at construction, naming the option", () => {
  const cases = [
    [{ memoryMb: "lots" }, TypeError, /memoryMb/],
    [{ memoryMb: 8 }, RangeError, /memoryMb must be at least 16/],
    [{ memoryMb: 1.5 }, TypeError, /memoryMb/],
    [{ timeoutS: 0 }, RangeError, /timeoutS/],
    [{ timeoutS: "10" }, TypeError, /timeoutS/],
    [{ network: "yes" }, TypeError, /network must be true\/false or one of none, host, deny-all, allow-all, custom/],
    [{ mounts: "/a:/b" }, TypeError, /mounts must be an array of 'SRC:DST\[:ro\]' strings or an object/],
    [{ env: { A: 1 } }, TypeError, /env/],
    [{ tmpfs: ["/cache"] }, TypeError, /tmpfs/],
    [{ prewarm: -1 }, RangeError, /prewarm must be 0 or more/],
    [{ cpus: 0 }, RangeError, /cpus/],
    [{ onStdout: "print" }, TypeError, /onStdout must be a function/],
    [{ memory_mb: 64 }, TypeError, /unknown Sandbox option "memory_mb" \(did you mean memoryMb\?\)/],
    [{ bogus: 1 }, TypeError, /unknown Sandbox option "bogus"/],
  ];
  for (const [opts, cls, msg] of cases) {
    assert.throws(() => new Sandbox(opts), (e) => e instanceof cls && msg.test(e.message), JSON.stringify(opts));
  }
});

test("bad call arguments are refused naming the argument", async () => {
  const sb = new Sandbox(); // never started: the checks come first
  await assert.rejects(sb.runCode(42), /code must be a string/);
  await assert.rejects(sb.runCode("1", { language: "ruby" }), (e) => e instanceof RangeError && /language must be one of python, bash, sh, node/.test(e.message));
  await assert.rejects(sb.run("ls -l"), /argv must be a non-empty array of strings/);
  await assert.rejects(sb.writeFile("a", 5), /data must be a string or a Uint8Array/);
  await assert.rejects(sb.readFile("a", { maxBytes: -1 }), /maxBytes/);
  assert.equal(sb.serverPid, undefined);
  await assert.rejects(runCode("1", { language: "cobol" }), RangeError);
});

test("what only the server can judge rejects start(), naming it", async () => {
  await assert.rejects(Sandbox.create({ image: "no-such-image:1" }), (e) => e instanceof InvalidArgument && e instanceof RangeError && /image/.test(e.message));
  await assert.rejects(Sandbox.create({ prewarm: 1000 }), (e) => e instanceof RangeError && /prewarm/.test(e.message));
  await assert.rejects(Sandbox.create({ securityProfile: "lax" }), (e) => e instanceof RangeError && /securityProfile/.test(e.message) && e.arg === "securityProfile");
  await assert.rejects(Sandbox.create({ mounts: ["/etc:/data"] }), (e) => e instanceof MountRefused && e instanceof SandboxError);
});

test("the engine's refusals name the option as the caller wrote it, never a hull run flag", async () => {
  const cases = [
    [{ capDrop: ["FLY"] }, InvalidArgument, "capDrop", "--cap-drop"],
    [{ memoryMb: 16, tmpfs: { "/big": "64m" } }, InvalidArgument, "tmpfs", "--memory"],
    [{ workspace: "/etc" }, InvalidArgument, "workspace", "--workspace"],
    [{ mounts: ["/etc:/data"] }, MountRefused, "mounts", "--mount"],
  ];
  for (const [opts, cls, name, flag] of cases) {
    await assert.rejects(
      Sandbox.create(opts),
      (e) => e instanceof cls && e.message.startsWith(`${name}: `) && !e.message.includes(flag) && (cls !== InvalidArgument || e.arg === name),
      JSON.stringify(opts),
    );
  }
});

test("a binary without sandbox sessions is refused", async () => {
  const dir = mkdtempSync(join(tmpdir(), "hull-node-fake-"));
  const saved = process.env.HULL_BIN;
  try {
    const fake = join(dir, "hull");
    writeFileSync(fake, `#!/bin/sh\nread line\necho '{"id": 1, "result": {"protocol": 1, "methods": ["hello", "run"]}}'\nread line\n`);
    chmodSync(fake, 0o755);
    process.env.HULL_BIN = fake;
    await assert.rejects(Sandbox.create(), (e) => e instanceof SandboxError && /without sandbox sessions/.test(e.message));
    process.env.HULL_BIN = join(dir, "missing");
    await assert.rejects(Sandbox.create(), (e) => e instanceof SandboxError && /HULL_BIN/.test(e.message));
  } finally {
    process.env.HULL_BIN = saved;
    rmSync(dir, { recursive: true, force: true });
  }
});

test("text with a lone surrogate is refused naming the argument, not sent to hang", async () => {
  // JSON.stringify escapes a lone surrogate as \ud800, which the server's JSON parser refuses:
  // its error could name no call, so the call would wait forever.
  const sb = await Sandbox.create();
  try {
    const call = sb.runCode("x = '\ud800'");
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("the call never returned")), 10_000).unref());
    await assert.rejects(Promise.race([call, timeout]), (e) => e instanceof TypeError && /code/.test(e.message) && /surrogate/.test(e.message));
    // A pair is well formed and goes through; the sandbox still works.
    const r = await sb.runCode("print(len('\ud83d\ude00'))");
    assert.equal(r.stdout, "1\n");
  } finally {
    await sb.destroy();
  }
});

test("binary output comes back intact and a cut output is no success", async () => {
  const sb = new Sandbox({ maxOutputBytes: 1000 });
  try {
    const r = await sb.run(["sh", "-c", "printf 'ok\\377\\000'; printf 'err' >&2"]);
    assert.deepEqual(r.stdoutBytes, Buffer.from([0x6f, 0x6b, 0xff, 0x00]));
    assert.equal(r.stdout, "ok\ufffd\u0000");
    assert.deepEqual(r.stderrBytes, Buffer.from("err"));
    assert.equal(r.success, true);
    const cut = await sb.runCode("print('x' * 5000)");
    assert.equal(cut.truncated, true);
    assert.equal(cut.fault?.type, "output_limit");
    assert.equal(cut.success, false);
  } finally {
    await sb.destroy();
  }
});

test("per-call options apply to that call only, and an unknown option is refused", async () => {
  const sb = new Sandbox({ timeoutS: 5, env: { A: "session" } });
  try {
    let r = await sb.runCode("import os; print(os.environ['A'], os.getcwd())", { env: { A: "call" }, cwd: "/tmp" });
    assert.equal(r.stdout, "call /tmp\n");
    assert.equal((await sb.runCode("import os; print(os.environ['A'])")).stdout, "session\n");
    r = await sb.runCode("import time; time.sleep(10)", { timeoutS: 1 });
    assert.equal(r.fault?.type, "timeout");
    r = await sb.run(["sh", "-c", "echo $A $PWD"], { env: { A: "x" }, cwd: "/workspace" });
    assert.equal(r.stdout, "x /workspace\n");
    const got = [];
    await sb.runCode("print('s')", { onStdout: (d) => got.push(d) });
    assert.equal(got.join(""), "s\n");
    const k = await sb.kernel({ timeoutS: 1 });
    assert.equal((await k.runCode("import time; time.sleep(3)")).fault?.type, "timeout");
    await assert.rejects(sb.runCode("1", { timeout: 3 }), (e) => e instanceof TypeError && /`timeout` is not an option of runCode/.test(e.message));
    await assert.rejects(sb.run(["true"], { cwd: "rel" }), (e) => e instanceof InvalidArgument && /cwd/.test(e.message));
  } finally {
    await sb.destroy();
  }
});

test("run takes stdin as text or bytes", async () => {
  const sb = new Sandbox();
  try {
    assert.equal((await sb.run(["cat"], { stdin: "one\ntwo\n" })).stdout, "one\ntwo\n");
    const r = await sb.run(["sh", "-c", "od -An -tx1 | tr -d ' \\n'"], { stdin: Buffer.from([0, 255, 16]) });
    assert.equal(r.stdout, "00ff10");
    assert.equal((await sb.run(["cat"])).stdout, "");
    await assert.rejects(sb.run(["cat"], { stdin: 3 }), (e) => e instanceof TypeError && /stdin/.test(e.message));
    await assert.rejects(sb.runCode("1", { stdin: "x" }), (e) => e instanceof TypeError && /`stdin` is not an option of runCode/.test(e.message));
  } finally {
    await sb.destroy();
  }
});

test("mounts take kern's object shape too", async () => {
  const dir = mkdtempSync(join(tmpdir(), "hull-mounts-"));
  try {
    writeFileSync(join(dir, "in.txt"), "mounted");
    const sb = new Sandbox({ mounts: { [dir]: ["/data", "ro"] } });
    try {
      const r = await sb.run(["sh", "-c", "cat /data/in.txt; touch /data/x"]);
      assert.equal(r.stdout, "mounted");
      assert.match(r.stderr, /Read-only/);
    } finally {
      await sb.destroy();
    }
    assert.throws(() => new Sandbox({ mounts: { [dir]: ["/data", "rx"] } }), TypeError);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("setup output streams to onStdout while the setup runs", async () => {
  const got = [];
  const t0 = Date.now();
  const sb = new Sandbox({ setup: "echo one; sleep 1; echo two", onStdout: (d) => got.push([Date.now() - t0, d]) });
  try {
    await sb.start();
    const made = Date.now() - t0;
    assert.deepEqual(got.map(([, d]) => d), ["one\n", "two\n"]);
    assert.ok(got[0][0] < made - 500, JSON.stringify({ got, made }));
  } finally {
    await sb.destroy();
  }
});
