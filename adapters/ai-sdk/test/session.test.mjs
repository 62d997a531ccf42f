// Every file and command member of the session against a real hull sandbox: run, spawn (streams,
// stdin, wait, tree kill, abort), reads and writes in every form, stat, listDirectory, deleteFile.
import assert from "node:assert/strict";
import { before, after, test } from "node:test";

import { IMAGE, hull, text, withSandboxes } from "./helpers.mjs";
import { createHullNetworkSandboxSession } from "../dist/index.js";

// One sandbox for this file's tests (each test cleans up what it made inside it).
let s;
let done;
before(async () => {
  let ready;
  const started = new Promise((r) => (ready = r));
  done = withSandboxes(async () => {
    s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "session" });
    ready();
    await new Promise((r) => (after.release = r));
    await s.destroy();
  });
  await started;
});
after(async () => {
  after.release();
  await done;
});

/** Processes of the sandbox whose command line matches `pattern` (from /proc, as root). */
async function running(pattern) {
  // `[s]leep`: the pattern never matches the command line of the grep looking for it.
  pattern = `[${pattern[0]}]${pattern.slice(1)}`;
  const r = await s.run({ command: `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c -- '${pattern}' || true` });
  return Number(r.stdout.trim());
}

test("run: bash, working directory, exit code, both streams, env for that command only", async () => {
  const r = await s.run({ command: "pwd; echo err >&2; [[ 1 == 1 ]] && exit 3" });
  assert.deepEqual(r, { exitCode: 3, stdout: "/workspace\n", stderr: "err\n" });
  assert.equal((await s.run({ command: "mkdir -p sub/dir && cd / && pwd" })).stdout, "/\n");
  assert.equal((await s.run({ command: "pwd", workingDirectory: "sub/dir" })).stdout, "/workspace/sub/dir\n");
  assert.equal((await s.run({ command: "pwd", workingDirectory: "/tmp" })).stdout, "/tmp\n");
  assert.equal((await s.run({ command: "echo $SECRET_ONE", env: { SECRET_ONE: "v1" } })).stdout, "v1\n");
  assert.equal((await s.run({ command: "echo ${SECRET_ONE-unset}" })).stdout, "unset\n");
  // The host's environment never reaches the sandbox.
  process.env.HOST_ONLY_VAR = "leak";
  assert.equal((await s.run({ command: "echo ${HOST_ONLY_VAR-absent}" })).stdout, "absent\n");
  delete process.env.HOST_ONLY_VAR;
  assert.equal((await s.run({ command: "kill -9 $$" })).exitCode, 137);
  const cut = await s.run({ command: "printf 0123456789; printf abc >&2", maxOutputLength: 4 });
  assert.deepEqual(cut, { exitCode: 0, stdout: "0123", stderr: "abc", stdoutLength: 10, stderrLength: 3 });
  await s.run({ command: "rm -rf sub" });
});

test("run: a pre-aborted signal starts nothing; aborting kills the command and rejects with the reason", async () => {
  const ac = new AbortController();
  ac.abort(new Error("early"));
  await assert.rejects(s.run({ command: "touch /workspace/started", abortSignal: ac.signal }), /early/);
  assert.equal(await s.stat({ path: "started" }), null);
  const late = new AbortController();
  const t0 = Date.now();
  setTimeout(() => late.abort(new Error("late")), 300);
  await assert.rejects(s.run({ command: "sleep 77; touch /workspace/finished", abortSignal: late.signal }), /late/);
  assert.ok(Date.now() - t0 < 5000);
  assert.equal(await running("sleep 77"), 0);
  // Not aborted: the result as without a signal.
  assert.deepEqual(await s.run({ command: "echo fine", abortSignal: new AbortController().signal }), { exitCode: 0, stdout: "fine\n", stderr: "" });
});

test("spawn: streams as it prints, wait, outlives later runs, kill ends its whole tree (137), idempotent", async () => {
  const p = await s.spawn({ command: "echo first $P; echo e1 >&2; sleep 0.3; echo second; exit 5", env: { P: "1" } });
  const r = p.stdout.getReader();
  // The first line comes while the process still runs.
  assert.equal(new TextDecoder().decode((await r.read()).value), "first 1\n");
  let out = "";
  for (let c = await r.read(); !c.done; c = await r.read()) out += new TextDecoder().decode(c.value);
  const [err, w] = await Promise.all([text(p.stderr), p.wait()]);
  assert.deepEqual([out, err, w], ["second\n", "e1\n", { exitCode: 5 }]);
  assert.equal(p.pid, undefined);

  // A tree: a child and a setsid'd, double-forked grandchild.
  const tree = await s.spawn({ command: "sleep 301 & setsid sh -c 'sleep 302 &' ; echo up; wait" });
  const tr = tree.stdout.getReader();
  assert.equal(new TextDecoder().decode((await tr.read()).value), "up\n");
  assert.equal((await s.run({ command: "echo between" })).stdout, "between\n");
  assert.equal(await running("sleep 30[12]"), 2);
  await tree.kill();
  assert.deepEqual(await tree.wait(), { exitCode: 137 });
  assert.equal(await running("sleep 30[12]"), 0);
  await tree.kill();
  await p.kill();
  assert.deepEqual(await p.wait(), { exitCode: 5 });
});

test("spawn: abort kills it and wait rejects with the reason; pre-aborted starts nothing", async () => {
  const ac = new AbortController();
  const p = await s.spawn({ command: "sleep 303", abortSignal: ac.signal });
  ac.abort(new Error("gone"));
  await assert.rejects(p.wait(), /gone/);
  assert.equal(await running("sleep 303"), 0);
  const pre = new AbortController();
  pre.abort(new Error("never"));
  await assert.rejects(s.spawn({ command: "touch /workspace/spawned", abortSignal: pre.signal }), /never/);
  assert.equal(await s.stat({ path: "spawned" }), null);
});

test("spawn with stdin: true: writes reach the command, close is EOF, kill ends it", async () => {
  const p = await s.spawn({ command: "while read l; do echo \"got $l $V\"; done; echo eof", env: { V: "v" }, stdin: true });
  const w = p.stdin.getWriter();
  await w.write(new TextEncoder().encode("a\nb\n"));
  await w.close();
  assert.deepEqual([await text(p.stdout), await p.wait()], ["got a v\ngot b v\neof\n", { exitCode: 0 }]);
  // A process fed by its stdin is still the keeper's: its whole tree dies with it.
  const q = await s.spawn({ command: "setsid sh -c 'sleep 304 &'; cat > /dev/null", stdin: true });
  const qw = q.stdin.getWriter();
  await qw.write(new TextEncoder().encode("x\n"));
  assert.equal(await running("sleep 304"), 1);
  await q.kill();
  assert.deepEqual(await q.wait(), { exitCode: 137 });
  await q.kill();
  assert.equal(await running("sleep 304"), 0);
  await assert.rejects(qw.write(new TextEncoder().encode("late")));
  assert.equal(p.stdin !== undefined && (await s.spawn({ command: "true" })).stdin, undefined);
});

test("files: text, bytes and streams, line ranges, parents made, overwrite, null for missing", async () => {
  await s.writeTextFile({ path: "f/g/a.txt", content: "one\ntwo\nthree\n" });
  assert.equal(await s.readTextFile({ path: "/workspace/f/g/a.txt" }), "one\ntwo\nthree\n");
  assert.equal(await s.readTextFile({ path: "f/g/a.txt", startLine: 2, endLine: 2 }), "two\n");
  assert.equal(await s.readTextFile({ path: "f/g/a.txt", startLine: 2 }), "two\nthree\n");
  assert.equal(await s.readTextFile({ path: "f/g/a.txt", endLine: 1 }), "one\n");
  assert.equal(await s.readTextFile({ path: "f/g/a.txt", startLine: 3, endLine: 99 }), "three\n");
  await s.writeTextFile({ path: "f/g/a.txt", content: "new" });
  assert.equal((await s.run({ command: "cat f/g/a.txt; stat -c %U f/g/a.txt f/g" })).stdout, "newnode\nnode\n");
  const bytes = new Uint8Array(256).map((_, i) => i);
  await s.writeBinaryFile({ path: "f/bin", content: bytes });
  assert.deepEqual(await s.readBinaryFile({ path: "f/bin" }), bytes);
  const stream = await s.readFile({ path: "f/bin" });
  assert.deepEqual(new Uint8Array(await new Response(stream).arrayBuffer()), bytes);
  const parts = ["ab", "cd", "ef"].map((t) => new TextEncoder().encode(t));
  await s.writeFile({ path: "f/streamed", content: new ReadableStream({ pull(c) { parts.length ? c.enqueue(parts.shift()) : c.close(); } }) });
  assert.equal(await s.readTextFile({ path: "f/streamed" }), "abcdef");
  await s.writeTextFile({ path: "f/latin", content: "é", encoding: "latin1" });
  assert.deepEqual([...(await s.readBinaryFile({ path: "f/latin" }))], [0xe9]);
  assert.equal(await s.readTextFile({ path: "f/latin", encoding: "latin1" }), "é");
  await s.writeTextFile({ path: "f/utf16", content: "α\nβ\nγ\n", encoding: "utf-16le" });
  assert.equal((await s.readBinaryFile({ path: "f/utf16" })).length, 12);
  assert.equal(await s.readTextFile({ path: "f/utf16", encoding: "utf-16le", startLine: 2, endLine: 2 }), "β\n");
  await assert.rejects(s.readTextFile({ path: "f/utf16", encoding: "ebcdic" }), RangeError);
  for (const m of ["readFile", "readBinaryFile", "readTextFile"]) assert.equal(await s[m]({ path: "nope/missing" }), null);
  await assert.rejects(s.readTextFile({ path: "f" }), (e) => e.kind === "is_a_directory");
  await assert.rejects(s.writeTextFile({ path: "f", content: "x" }), (e) => e.kind === "is_a_directory");
  // An unwritable place, as the sandbox's user.
  await assert.rejects(s.writeTextFile({ path: "/etc/passwd", content: "x" }));
  const ac = new AbortController();
  ac.abort(new Error("file abort"));
  await assert.rejects(s.writeTextFile({ path: "f/aborted", content: "x", abortSignal: ac.signal }), /file abort/);
  await assert.rejects(s.readTextFile({ path: "f/streamed", abortSignal: ac.signal }), /file abort/);
  assert.equal(await s.readTextFile({ path: "f/aborted" }), null);
  await s.run({ command: "rm -rf f" });
});

test("stat follows links, listDirectory lists one level, deleteFile removes files and links only", async () => {
  await s.run({ command: "mkdir -p d/sub && printf 12345 > d/file && ln -s file d/link && ln -s sub d/dirlink && mkfifo d/fifo" });
  assert.deepEqual(await s.stat({ path: "d/file" }), { type: "file", size: 5 });
  assert.deepEqual(await s.stat({ path: "d/link" }), { type: "file", size: 5 });
  assert.equal((await s.stat({ path: "d/dirlink" })).type, "directory");
  assert.equal((await s.stat({ path: "d/sub" })).type, "directory");
  assert.equal((await s.stat({ path: "d/fifo" })).type, "other");
  assert.equal(await s.stat({ path: "d/none" }), null);
  const list = (await s.listDirectory({ path: "d" })).sort((a, b) => a.name.localeCompare(b.name));
  assert.deepEqual(list, [
    { name: "dirlink", type: "symlink" },
    { name: "fifo", type: "other" },
    { name: "file", type: "file" },
    { name: "link", type: "symlink" },
    { name: "sub", type: "directory" },
  ]);
  assert.equal(await s.listDirectory({ path: "d/none" }), null);
  await assert.rejects(s.listDirectory({ path: "d/file" }), (e) => e.kind === "not_a_directory");
  assert.equal(await s.deleteFile({ path: "d/link" }), true);
  assert.deepEqual(await s.stat({ path: "d/file" }), { type: "file", size: 5 });
  await assert.rejects(s.deleteFile({ path: "d/sub" }), (e) => e.kind === "is_a_directory");
  assert.equal((await s.stat({ path: "d/sub" })).type, "directory");
  assert.equal(await s.deleteFile({ path: "d/file" }), true);
  assert.equal(await s.deleteFile({ path: "d/file" }), false);
  await s.run({ command: "rm -rf d" });
});

test("without a network option: no port is reachable, a policy other than deny-all and brokering are refused; restricted() has files and commands only", async () => {
  const { HarnessCapabilityUnsupportedError } = await import("@ai-sdk/harness");
  const refused = (re) => (e) => HarnessCapabilityUnsupportedError.isInstance(e) && re.test(e.message);
  await assert.rejects(s.getPortEndpoint({ port: 4000 }), refused(/port 4000 .*not published \(it publishes none/));
  await assert.rejects(s.getPortUrl({ port: 4000, protocol: "ws" }), refused(/not published/));
  await assert.rejects(s.setPorts([4000]), refused(/when the sandbox is created/));
  await assert.rejects(s.setNetworkPolicy({ mode: "allow-all" }), refused(/made without hull's gateway network/));
  const brokering = refused(/needs hull's gateway network, through which hull brokers credentials/);
  await assert.rejects(s.addRequestTransformations([{ match: { host: "api.example.test" }, transform: { headers: { "x-api-key": "k" } } }]), brokering);
  await assert.rejects(s.setRequestTransformations([]), brokering);
  await s.setPorts([]);
  await s.setNetworkPolicy({ mode: "deny-all" });
  assert.deepEqual(s.ports, []);
  assert.equal(s.defaultWorkingDirectory, "/workspace");
  assert.match(s.description, /user `node`/);
  assert.match(s.description, /no network access/);
  const r = s.restricted();
  for (const m of ["stop", "destroy", "setNetworkPolicy", "addRequestTransformations", "setRequestTransformations", "getPortEndpoint", "setPorts", "restricted"]) assert.equal(r[m], undefined, m);
  assert.equal((await r.run({ command: "echo via restricted" })).stdout, "via restricted\n");
  assert.equal(r.description, s.description);
  assert.ok(hull(["ps"]).includes("session"));
});
