// Named sandboxes through the SDK: `Sandbox.create({ name, persist })`, `resume`, `exec`,
// `spawn`, with real keepers and a second SDK client in another process. Every test keeps its
// sandboxes in a directory of its own (HULL_SANDBOXES) and removes them.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import "./helpers.mjs";
import { InvalidArgument, NamedSandbox, Sandbox, SandboxError, listSandboxes, listTemplates, pruneTemplates, removeTemplate, resume } from "../dist/index.js";

const dist = resolve(dirname(fileURLToPath(import.meta.url)), "../dist/index.js");

/** Runs `t` with HULL_SANDBOXES set to a fresh directory; removes every sandbox left in it. */
async function withSandboxes(t) {
  const root = mkdtempSync(join(tmpdir(), "hull-named-node-"));
  const before = process.env.HULL_SANDBOXES;
  process.env.HULL_SANDBOXES = join(root, "sandboxes");
  try {
    await t(process.env.HULL_SANDBOXES);
  } finally {
    let left = [];
    try {
      left = readdirSync(process.env.HULL_SANDBOXES);
    } catch {}
    for (const n of left) execFileSync(process.env.HULL_BIN, ["rm", n], { env: process.env });
    if (before === undefined) delete process.env.HULL_SANDBOXES;
    else process.env.HULL_SANDBOXES = before;
    rmSync(root, { recursive: true, force: true });
    assert.deepEqual(left, [], "a test left sandboxes behind");
  }
}

/** Runs an ES module's code in another Node process (a second SDK client); its stdout. */
function otherProcess(code) {
  return execFileSync(process.execPath, ["--input-type=module", "-e", `import * as hull from ${JSON.stringify(dist)};\n${code}`], {
    env: process.env,
    encoding: "utf8",
  });
}

test("a sandbox made by one process runs commands for another, and is adopted only with the same options", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "one", persist: true, setup: "echo made > /workspace/m", env: { G: "hi" } });
    assert.ok(sb instanceof NamedSandbox);
    try {
      assert.equal((await sb.exec(["cat", "/workspace/m"])).stdout, "made\n");
      const out = otherProcess(`
        const sb = await hull.resume("one");
        const r = await sb.exec("echo $G > /workspace/other; cat /workspace/m");
        process.stdout.write(r.stdout);
        try {
          await hull.Sandbox.create({ name: "one", persist: true, memoryMb: 256, setup: "echo made > /workspace/m", env: { G: "hi" } });
        } catch (e) {
          console.log("refused", e.kind, e.detail.arg);
        }
        await sb.close();
      `);
      assert.deepEqual(out.trim().split("\n"), ["made", "refused config_mismatch memoryMb"]);
      assert.equal((await sb.exec("cat /workspace/other")).stdout, "hi\n");
      await assert.rejects(Sandbox.create({ name: "one" }), (e) => e instanceof SandboxError && e.kind === "conflict");
    } finally {
      await sb.destroy();
    }
    await assert.rejects(resume("one"), (e) => e instanceof SandboxError && e.kind === "not_found");
  }));

test("exec gives exit codes, streams, takes env per command and kills at its timeout", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "codes" });
    try {
      assert.equal((await sb.exec(["sh", "-c", "exit 7"])).exitCode, 7);
      assert.equal((await sb.exec("kill -TERM $$")).exitCode, 143);
      const got = [];
      const r = await sb.exec("echo out $T; echo err >&2", { env: { T: "t1" }, onStdout: (d) => got.push(d), onStderr: (d) => got.push("E:" + d) });
      assert.deepEqual([r.stdout, r.stderr, got.sort()], ["out t1\n", "err\n", ["E:err\n", "out t1\n"]]);
      assert.equal((await sb.exec("echo ${T-unset}")).stdout, "unset\n");
      assert.equal((await sb.exec(["pwd"], { cwd: "/tmp" })).stdout, "/tmp\n");
      const t = await sb.exec("sleep 30", { timeoutS: 0.5 });
      assert.equal(t.exitCode, 137);
    } finally {
      await sb.destroy();
    }
  }));

test("a spawned process runs on after its client exits, is killed with its tree, and is gone after stop", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "spawn", persist: true });
    try {
      otherProcess(`
        const sb = await hull.resume("spawn");
        const p = await sb.spawn("while :; do date +%s%N > /tmp/beat; sleep 0.05; done");
        await sb.close();
      `);
      const beat = async () => (await sb.exec("cat /tmp/beat")).stdout;
      const a = await beat();
      await new Promise((r) => setTimeout(r, 300));
      assert.notEqual(await beat(), a, "the spawned loop stopped with its client");
      const seen = [];
      const p = await sb.spawn(["sh", "-c", "sleep 301 & sleep 302 & echo started; wait"], { onStdout: (d) => seen.push(d) });
      for (let i = 0; i < 200 && p.stdout === ""; i++) await new Promise((r) => setTimeout(r, 50));
      assert.equal(p.stdout, "started\n");
      assert.equal(p.poll(), null);
      assert.equal((await p.kill()).exitCode, 137);
      assert.equal((await p.kill()).exitCode, 137);
      assert.deepEqual(seen, ["started\n"]);
      const ps = (await sb.exec(["ps", "-eo", "args"])).stdout;
      assert.ok(!ps.includes("sleep 301") && !ps.includes("sleep 302"), ps);
      await sb.stop();
      const after = (await sb.exec(["ps", "-eo", "args"])).stdout;
      assert.ok(!after.includes("date +%s%N"), after);
    } finally {
      await sb.destroy();
    }
  }));

test("files of a named sandbox are read, written, listed and deleted in its root", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "files" });
    try {
      await sb.writeFile("a/b.txt", "hi\n");
      assert.equal((await sb.exec("cat /workspace/a/b.txt")).stdout, "hi\n");
      assert.equal((await sb.readFile("/workspace/a/b.txt")).toString(), "hi\n");
      assert.equal(await sb.readFile("a/missing"), null);
      assert.equal((await sb.readFile("a/b.txt", { maxBytes: 3 })).toString(), "hi\n");
      await assert.rejects(sb.readFile("a/b.txt", { maxBytes: 2 }), (e) => e instanceof InvalidArgument && /larger than max_bytes=2/.test(e.message));
      await assert.rejects(sb.readFile("a"), (e) => e instanceof SandboxError && e.kind === "is_a_directory");
      assert.equal((await sb.stat("a/b.txt")).size, 3);
      assert.deepEqual((await sb.listFiles("a")).map((e) => e.name), ["b.txt"]);
      assert.equal(await sb.delete("a"), true);
      assert.equal(await sb.delete("a"), false);
    } finally {
      await sb.destroy();
    }
  }));

/** Whether a sandbox may have users besides root: hull runs as root, or this user has an
 * /etc/subuid range. */
function canMapUsers() {
  if (process.getuid() === 0) return true;
  const me = execFileSync("id", ["-un"]).toString().trim();
  try {
    return readFileSync("/etc/subuid", "utf8").split("\n").some((l) => l.split(":")[0] === me);
  } catch {
    return false;
  }
}

test("a sandbox made with user runs commands as that user, and one exec may name root", { skip: !canMapUsers() && "no /etc/subuid range for this user: user needs one rootless" }, () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "usr", user: "1000", setup: "echo s > /root-only; chmod 600 /root-only" });
    try {
      assert.equal((await sb.exec("id -u; id -g")).stdout, "1000\n1000\n");
      const denied = await sb.exec(["cat", "/root-only"]);
      assert.notEqual(denied.exitCode, 0);
      assert.equal((await sb.exec(["cat", "/root-only"], { user: "root" })).stdout, "s\n");
      assert.equal((await sb.exec("grep CapEff /proc/self/status")).stdout, "CapEff:\t0000000000000000\n");
      await assert.rejects(Sandbox.create({ name: "usr", persist: true, user: "1001", setup: "echo s > /root-only; chmod 600 /root-only" }), (e) => e instanceof SandboxError && e.detail.arg === "user");
    } finally {
      await sb.destroy();
    }
  }));

test("a spawned process's output is iterated as it comes, and by lines", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "iter" });
    try {
      const p = await sb.spawn("echo one; echo err >&2; sleep 1.5; printf 'two\\nthree'");
      const seen = [];
      const t0 = Date.now();
      for await (const [stream, text] of p) seen.push([stream, text, Date.now() - t0]);
      assert.deepEqual(seen.filter(([s]) => s === "stderr").map(([s, t]) => [s, t]), [["stderr", "err\n"]]);
      assert.equal(seen.filter(([s]) => s === "stdout").map(([, t]) => t).join(""), "one\ntwo\nthree");
      // The first chunks came as they were printed, before the sleep: well before the last.
      assert.ok(seen[seen.length - 1][2] - seen[0][2] > 800, JSON.stringify(seen));
      assert.equal(p.poll(), 0);
      // Every iterator sees the output from the start.
      const lines = [];
      for await (const l of p.lines()) lines.push(l);
      assert.deepEqual(lines, ["one\n", "two\n", "three"]);
      const errs = [];
      for await (const l of p.lines("stderr")) errs.push(l);
      assert.deepEqual(errs, ["err\n"]);
    } finally {
      await sb.destroy();
    }
  }));

test("a file is read as text or a range of its lines", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "text" });
    try {
      await sb.writeFile("notes.txt", "first\nsecond\rstill second\nthird\nfourth");
      assert.equal(await sb.readText("notes.txt"), "first\nsecond\rstill second\nthird\nfourth");
      assert.equal(await sb.readText("notes.txt", { lines: [2, 3] }), "second\rstill second\nthird\n");
      assert.equal(await sb.readText("notes.txt", { lines: [3, null] }), "third\nfourth");
      assert.equal(await sb.readText("notes.txt", { lines: [9, 10] }), "");
      assert.equal(await sb.readText("missing.txt"), null);
      for (const bad of [[0, 2], [3, 2], [1], "1-2", [1.5, 2]]) {
        await assert.rejects(sb.readText("notes.txt", { lines: bad }), RangeError);
      }
      await sb.writeFile("latin", Buffer.from([0xe9]));
      assert.equal(await sb.readText("latin", { encoding: "latin1" }), "\u00e9");
    } finally {
      await sb.destroy();
    }
  }));

test("a stopped sandbox is resumed with its disk and configuration", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "again", persist: true, env: { KEPT: "yes" } });
    try {
      await sb.exec("mkdir -p /opt/tool && echo v1 > /opt/tool/version && sleep 300 >/dev/null 2>&1 &");
      await sb.stop();
      await sb.close();
      const back = await resume("again");
      const r = await back.exec("cat /opt/tool/version; echo $KEPT; pwd; ps -eo args | grep -c '^sleep 300'");
      assert.equal(r.stdout, "v1\nyes\n/workspace\n0\n");
      await back.close();
    } finally {
      await (await resume("again")).destroy();
    }
  }));

const psArgs = async (sb) => (await sb.exec(["ps", "-eo", "args"])).stdout.split("\n").map((l) => l.trim());

test("another client kills a handle by its id, a setsid daemon included, and twice is fine", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "daemon", persist: true });
    try {
      const id = otherProcess(`
        const sb = await hull.resume("daemon");
        const p = await sb.spawn("setsid sh -c 'sleep 4262 & exit 0'; sleep 4263 & wait");
        console.log(p.id);
        await sb.close();
      `).trim();
      for (let i = 0; i < 200 && !(await psArgs(sb)).includes("sleep 4262"); i++) await new Promise((r) => setTimeout(r, 50));
      assert.ok((await psArgs(sb)).includes("sleep 4262"));
      const p = sb.process(id);
      assert.equal((await p.kill()).exitCode, 137);
      const ps = await psArgs(sb);
      assert.ok(!ps.includes("sleep 4262") && !ps.includes("sleep 4263"), ps.join("\n"));
      assert.equal((await p.kill()).exitCode, 137);
    } finally {
      await sb.destroy();
    }
  }));

test("file paths resolve inside the sandbox's root; line ranges; typed errors", () =>
  withSandboxes(async () => {
    const dir = mkdtempSync(join(tmpdir(), "hull-host-secret-"));
    const secret = join(dir, "secret.txt");
    writeFileSync(secret, "host secret\n");
    const sb = await Sandbox.create({ name: "links" });
    try {
      assert.equal((await sb.exec(`ln -s ${secret} /workspace/abs && ln -s ../../../../../../..${secret} /workspace/up`)).exitCode, 0);
      for (const link of ["abs", "up"]) {
        assert.equal(await sb.readFile(link), null);
        await sb.writeFile(link, "pwned\n").catch((e) => assert.equal(e.kind, "io"));
      }
      assert.equal(readFileSync(secret, "utf8"), "host secret\n");
      await sb.writeFile("lines.txt", "one\ntwo\nthree\n");
      assert.equal(await sb.readText("lines.txt", { lines: [2, 2] }), "two\n");
      assert.equal(await sb.readText("nope.txt"), null);
      await assert.rejects(sb.writeFile("/workspace", "x"), (e) => e.kind === "is_a_directory");
      await assert.rejects(sb.listFiles("lines.txt"), (e) => e.kind === "not_a_directory");
    } finally {
      await sb.destroy();
      rmSync(dir, { recursive: true, force: true });
    }
  }));

test("a sandbox from a template, its logs, and the list of sandboxes", () =>
  withSandboxes(async (root) => {
    const base = await Sandbox.create({ name: "base", env: { FROM_BASE: "1" } });
    try {
      assert.equal((await base.exec("mkdir -p /opt && echo baked > /opt/baked && echo printed-$((6*7))")).exitCode, 0);
      await base.stop();
      execFileSync(process.env.HULL_BIN, ["template", "save", "base", "t1"], { env: process.env });
      const child = await Sandbox.create({ name: "child", template: "t1", env: { MINE: "2" } });
      try {
        assert.equal((await child.exec("cat /opt/baked; echo $FROM_BASE$MINE")).stdout, "baked\n12\n");
        const listed = Object.fromEntries((await listSandboxes()).map((s) => [s.name, s]));
        assert.equal(listed.child.state, "running");
        assert.equal(listed.child.user, "root");
        assert.equal(listed.base.state, "stopped");
      } finally {
        await child.destroy();
      }
      const logs = await base.logs();
      assert.ok(logs.includes("printed-42\n"), logs);
      assert.equal(await base.logs({ maxBytes: 5 }), logs.slice(-5));
      await assert.rejects(Sandbox.create({ name: "other", template: "t1", image: "busybox:1" }), (e) => /template `t1` is of image `host`/.test(e.message));
    } finally {
      await base.destroy();
      execFileSync(process.env.HULL_BIN, ["template", "rm", "t1"], { env: process.env });
      rmSync(join(root, ".templates"), { recursive: true, force: true });
    }
  }));

test("templates are saved, listed, removed and pruned through the SDK", () =>
  withSandboxes(async (root) => {
    const base = await Sandbox.create({ name: "base" });
    try {
      assert.equal((await base.exec("echo baked > /workspace/baked")).exitCode, 0);
      await assert.rejects(base.saveTemplate("t1"), (e) => e instanceof SandboxError && e.kind === "sandbox_running");
      await base.stop();
      await base.saveTemplate("t1");
      await assert.rejects(base.saveTemplate("t1"), (e) => e instanceof SandboxError && e.kind === "conflict");
      const [t] = await listTemplates();
      assert.deepEqual([t.name, t.from, t.image, t.user, t.layers], ["t1", "base", "host", "root", 1]);
      const child = await Sandbox.create({ name: "child", template: "t1" });
      try {
        assert.equal(await removeTemplate("t1"), true);
        assert.equal(await removeTemplate("t1"), false);
        assert.equal(await child.readText("/workspace/baked"), "baked\n");
      } finally {
        await child.destroy();
      }
      await base.saveTemplate("t2");
      assert.deepEqual(await pruneTemplates({ olderThanS: 3600 }), []);
      assert.deepEqual(await pruneTemplates(), ["t2"]);
      assert.deepEqual(await listTemplates(), []);
    } finally {
      await base.destroy();
      rmSync(join(root, ".templates"), { recursive: true, force: true });
    }
  }));

test("a spawn with stdin reads what is written, until closeStdin", () =>
  withSandboxes(async () => {
    const sb = await Sandbox.create({ name: "stdin" });
    try {
      const p = await sb.spawn("while read l; do echo \"got $l\"; done; echo eof", { stdin: true });
      await p.write("a\n");
      await p.write(new Uint8Array([0x62, 0x0a]));
      await p.closeStdin("c\n");
      assert.equal((await p.wait()).stdout, "got a\ngot b\ngot c\neof\n");
      await assert.rejects(p.write("late"), (e) => e instanceof SandboxError && /no stdin/.test(e.message));
      const q = await sb.spawn("cat");
      assert.equal((await q.wait()).exitCode, 0);
      await assert.rejects(sb.spawn("cat", { stdin: "yes" }), TypeError);
    } finally {
      await sb.destroy();
    }
  }));
