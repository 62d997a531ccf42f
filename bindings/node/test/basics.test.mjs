// runCode, results, faults: the everyday behaviour of the SDK against the real hull binary.
import assert from "node:assert/strict";
import { test } from "node:test";

import { png } from "./helpers.mjs";
import { ExecutionResult, Sandbox, runCode } from "../dist/index.js";

test("runCode once", async () => {
  const r = await runCode("print(6 * 7)");
  assert.ok(r instanceof ExecutionResult);
  assert.equal(r.stdout, "42\n");
  assert.equal(r.exitCode, 0);
  assert.equal(r.success, true);
  assert.equal(r.fault, null);
  assert.equal(r.truncated, false);
  assert.ok(r.durationMs > 0);
});

test("languages", async () => {
  assert.equal((await runCode("echo $((20 + 22))", { language: "bash" })).stdout, "42\n");
  assert.equal((await runCode("echo sh", { language: "sh" })).stdout, "sh\n");
  assert.equal((await runCode("console.log(6 * 7)", { language: "node" })).stdout, "42\n");
});

test("a python exception is the program's error, not a fault", async () => {
  const r = await runCode("def f():\n    raise ValueError('bad value')\nf()");
  assert.notEqual(r.exitCode, 0);
  assert.equal(r.success, false);
  assert.equal(r.fault, null);
  assert.match(r.stderr, /Traceback/);
  assert.match(r.stderr, /ValueError: bad value/);
  assert.equal((await runCode("import sys; sys.exit(3)")).exitCode, 3);
});

test("a timeout is a fault", async () => {
  const r = await runCode("while True: pass", { timeoutS: 1 });
  assert.ok(r.fault, JSON.stringify(r));
  assert.equal(r.fault.type, "timeout");
  // The call's own deadline (not the 30 s default) ended the endless program.
  assert.match(r.fault.reason, /\b1(\.000)?s\b/);
  assert.equal(r.success, false);
});

test("the memory cap is an oom fault", async () => {
  const r = await runCode("x = bytearray(400 << 20)", { memoryMb: 64 });
  assert.equal(r.fault?.type, "oom", JSON.stringify(r));
});

test("rich results like a notebook", async () => {
  const code = `
import base64
class Rich:
    def _repr_html_(self): return '<i>rich</i>'
    def _repr_markdown_(self): return '**rich**'
    def _repr_svg_(self): return '<svg/>'
    def _repr_json_(self): return {'a': [1, 2]}
    def _repr_png_(self): return base64.b64decode('${png(2, 2).toString("base64")}')
    def _repr_jpeg_(self): return b'\\xff\\xd8\\xff'
    def __repr__(self): return 'Rich()'
print('before')
display(Rich())
display('second')
print('after')
{'last': 1}
`;
  const r = await runCode(code);
  assert.equal(r.stdout, "before\nafter\n");
  assert.equal(r.exitCode, 0);
  assert.equal(r.results.length, 3);
  const [first, second, last] = r.results;
  assert.equal(first.html, "<i>rich</i>");
  assert.equal(first.markdown, "**rich**");
  assert.equal(first.svg, "<svg/>");
  assert.deepEqual(first.json, { a: [1, 2] });
  assert.equal(first.text, "Rich()");
  assert.deepEqual(first.png, png(2, 2));
  assert.deepEqual(first.jpeg, Buffer.from([0xff, 0xd8, 0xff]));
  assert.ok(first.formats().includes("image/png"));
  assert.equal(second.text, "'second'");
  assert.equal(second.png, null);
  assert.equal(last.text, "{'last': 1}");
});

test("printing cannot forge results", async () => {
  const r = await runCode(`print('{"done": true, "exit_code": 0, "results": [{"text/plain": "forged"}]}')`);
  assert.deepEqual(r.results, []);
  assert.match(r.stdout, /forged/);
});

test("a matplotlib figure comes back as a PNG", async (t) => {
  const sb = await Sandbox.create({ timeoutS: 60 });
  t.after(() => sb[Symbol.asyncDispose]());
  const probe = await sb.runCode("import matplotlib");
  if (probe.exitCode !== 0) {
    t.skip(`matplotlib cannot be imported in the box (install python3-matplotlib): ${probe.stderr.trim().split("\n").pop()}`);
    return;
  }
  const r = await sb.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')");
  assert.equal(r.exitCode, 0, r.stderr);
  const images = r.results.filter((x) => x.png !== null);
  assert.equal(images.length, 1, JSON.stringify(r.results.map((x) => x.formats())));
  const bytes = images[0].png;
  assert.deepEqual(bytes.subarray(0, 8), Buffer.from("89504e470d0a1a0a", "hex"));
  assert.ok(bytes.length > 1000);
});

test("network is off by default", async () => {
  const r = await runCode("import socket\ns = socket.socket()\ntry:\n    s.connect(('127.0.0.1', 9))\nexcept OSError as e:\n    print(type(e).__name__)");
  assert.ok(["ConnectionRefusedError", "OSError"].includes(r.stdout.trim()), JSON.stringify(r));
});

test("the workspace persists across calls and changed files are reported", async () => {
  const sb = await Sandbox.create();
  try {
    let r = await sb.runCode("open('a.txt', 'w').write('one')\nimport os\nos.makedirs('d', exist_ok=True)\nopen('d/b.bin', 'wb').write(b'\\0')");
    assert.deepEqual(r.files, [{ path: "a.txt", change: "created", size: 3 }, { path: "d/b.bin", change: "created", size: 1 }]);
    r = await sb.runCode("print(open('a.txt').read())");
    assert.equal(r.stdout, "one\n");
    assert.deepEqual(r.files, []);
    r = await sb.run(["sh", "-c", "echo two >> a.txt && rm d/b.bin"]);
    assert.deepEqual(r.files, [{ path: "a.txt", change: "modified", size: 7 }, { path: "d/b.bin", change: "deleted", size: null }]);
    assert.equal((await sb.readFile("a.txt")).toString(), "onetwo\n");
  } finally {
    await sb.destroy();
  }
});

test("a missing program is an exec_failed fault naming it", async () => {
  const sb = await Sandbox.create();
  try {
    const r = await sb.run(["no-such-program-hull-test"]);
    assert.equal(r.fault?.type, "exec_failed", JSON.stringify(r));
    assert.match(r.fault.reason, /no-such-program-hull-test/);
  } finally {
    await sb.destroy();
  }
});

test("each option reaches the box under its protocol name", async () => {
  const { mkdtempSync, readFileSync, rmSync, writeFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join, relative } = await import("node:path");
  const dir = mkdtempSync(join(tmpdir(), "hull-node-ws-"));
  writeFileSync(join(dir, "input.txt"), "from the host");
  // A relative workspace path is resolved against the caller's cwd.
  const sb = await Sandbox.create({
    workspace: relative(process.cwd(), dir),
    env: { GREETING: "hello" },
    tmpfs: { "/cache": "8m" },
    maxOutputBytes: 1000,
    trackFiles: false,
    pids: 64,
  });
  try {
    assert.equal(sb.workspace, dir);
    let r = await sb.runCode("import os\nprint(os.environ['GREETING'], os.path.ismount('/cache'), open('input.txt').read())\nopen('out.txt', 'w').write('x')");
    assert.equal(r.stdout, "hello True from the host\n", r.stderr);
    assert.deepEqual(r.files, [], "trackFiles: false still reported files");
    assert.equal(readFileSync(join(dir, "out.txt"), "utf8"), "x");
    r = await sb.runCode("print('y' * 5000)");
    assert.equal(r.truncated, true);
    assert.ok(r.stdout.length <= 1000, `${r.stdout.length} bytes kept`);
  } finally {
    await sb.destroy();
  }
  // The caller's workspace outlives the sandbox.
  assert.equal(readFileSync(join(dir, "input.txt"), "utf8"), "from the host");
  rmSync(dir, { recursive: true, force: true });
});
