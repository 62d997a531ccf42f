// Workspace files: confined, symlinks never followed, snapshots round-trip, hostile archives refused.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { targz } from "./helpers.mjs";
import { FileOperationError, InvalidArgument, Sandbox } from "../dist/index.js";

let sb;
let tmp;
before(async () => {
  sb = await Sandbox.create();
  tmp = mkdtempSync(join(tmpdir(), "hull-node-test-"));
});
after(async () => {
  await sb.destroy();
  rmSync(tmp, { recursive: true, force: true });
});

test("write, read, list", async () => {
  await sb.writeFile("dir/sub/data.bin", Buffer.from([0, 1, 2, 255]));
  await sb.writeFile("/workspace/text.txt", "héllo");
  assert.deepEqual(await sb.readFile("dir/sub/data.bin"), Buffer.from([0, 1, 2, 255]));
  assert.equal((await sb.readFile("text.txt")).toString("utf8"), "héllo");
  assert.deepEqual(await sb.readFile("dir/sub/data.bin", { maxBytes: 4 }), Buffer.from([0, 1, 2, 255]));
  // A larger file is refused naming its size, never returned cut short.
  await assert.rejects(sb.readFile("dir/sub/data.bin", { maxBytes: 2 }), (e) => e instanceof InvalidArgument && e.arg === "maxBytes" && /dir\/sub\/data\.bin is 4 bytes, more than maxBytes=2/.test(e.message));
  const entries = Object.fromEntries((await sb.listFiles()).map((e) => [e.path, e]));
  assert.equal(entries["dir/sub/data.bin"].type, "file");
  assert.equal(entries["dir/sub/data.bin"].size, 4);
  assert.equal(entries["dir"].type, "dir");
  assert.deepEqual((await sb.listFiles("dir/sub")).map((e) => e.path), ["dir/sub/data.bin"]);
  assert.equal((await sb.run(["cat", "/workspace/text.txt"])).stdout, "héllo");
});

test("symlinks planted by the box are never followed", async () => {
  const r = await sb.run(["sh", "-c", "ln -s /etc/passwd passwd && ln -s /etc etc && ln -s / root"]);
  assert.equal(r.exitCode, 0, r.stderr);
  for (const path of ["passwd", "etc/passwd", "root/etc/passwd"]) {
    await assert.rejects(sb.readFile(path), (e) => e instanceof FileOperationError && /symlink/.test(e.message), path);
  }
  const passwd = readFileSync("/etc/passwd");
  for (const path of ["passwd", "etc/hull-owned", "root/tmp/hull-owned"]) {
    await assert.rejects(sb.writeFile(path, "owned"), FileOperationError, path);
  }
  assert.deepEqual(readFileSync("/etc/passwd"), passwd);
  assert.equal(existsSync("/etc/hull-owned"), false);
  const kinds = Object.fromEntries((await sb.listFiles()).map((e) => [e.path, e.type]));
  assert.equal(kinds.passwd, "symlink");
  assert.equal(kinds.etc, "symlink");
});

test("paths leaving the workspace are refused", async () => {
  for (const path of ["../x", "/etc/passwd", "a/../../x", "/workspace/../etc/passwd"]) {
    await assert.rejects(sb.readFile(path), FileOperationError, path);
  }
});

test("snapshot round trip", async () => {
  await sb.writeFile("keep/a.txt", "alpha");
  const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  await sb.writeFile("b.bin", all);
  const snap = join(tmp, "ws.tar.gz");
  const info = await sb.snapshot(snap);
  assert.ok(info.files >= 2, JSON.stringify(info));
  await sb.run(["sh", "-c", "rm -rf keep b.bin && echo junk > junk"]);
  await sb.restore(snap);
  assert.equal((await sb.readFile("keep/a.txt")).toString(), "alpha");
  assert.deepEqual(await sb.readFile("b.bin"), all);
  assert.ok(!(await sb.listFiles()).some((e) => e.path === "junk"));
  // A fresh sandbox restored from the snapshot sees the same files.
  const other = await Sandbox.create();
  try {
    await other.restore(snap);
    assert.equal((await other.runCode("print(open('keep/a.txt').read())")).stdout, "alpha\n");
  } finally {
    await other.destroy();
  }
});

const hostile = [
  { name: "../escape.txt", type: "0", data: Buffer.from("x") },
  { name: "/abs.txt", type: "0", data: Buffer.from("x") },
  { name: "a/../../escape.txt", type: "0", data: Buffer.from("x") },
  { name: "link", type: "2", link: "/etc/passwd" },
  { name: "hard", type: "1", link: "/etc/passwd" },
  { name: "dev", type: "3" },
  { name: "fifo", type: "6" },
];

test("an archive built here restores (so the refusals below are about their member)", async () => {
  const p = join(tmp, "good.tar.gz");
  writeFileSync(p, targz([{ name: "fine.txt", data: Buffer.from("ok") }, { name: "sub", type: "5" }, { name: "sub/x.txt", data: Buffer.from("x") }]));
  await sb.restore(p);
  assert.equal((await sb.readFile("fine.txt")).toString(), "ok");
  assert.equal((await sb.readFile("sub/x.txt")).toString(), "x");
});

for (const member of hostile) {
  test(`a hostile restore is refused: ${member.name} (type ${member.type})`, async () => {
    await sb.writeFile("precious.txt", "keep me");
    const p = join(tmp, "bad.tar.gz");
    writeFileSync(p, targz([{ name: "fine.txt", data: Buffer.from("ok") }, member]));
    await assert.rejects(sb.restore(p), (e) => e instanceof FileOperationError && e.message.includes(member.name));
    assert.equal((await sb.readFile("precious.txt")).toString(), "keep me");
    assert.equal(existsSync(join(tmp, "..", "escape.txt")), false);
  });
}

test("names that are not UTF-8 are listed distinctly and read back by their bytes", async () => {
  const r = await sb.run(["python3", "-c", "open(b'nu\\xff', 'w').write('ff'); open(b'nu\\xfe', 'w').write('fe')"]);
  assert.equal(r.exitCode, 0, r.stderr);
  const entries = (await sb.listFiles()).filter((e) => e.path.startsWith("nu"));
  assert.equal(entries.length, 2);
  assert.ok(entries.every((e) => e.path === "nu\ufffd" && e.pathBytes instanceof Buffer));
  const byName = new Map(entries.map((e) => [e.pathBytes.toString("hex"), e.pathBytes]));
  assert.deepEqual([...byName.keys()].sort(), ["6e75fe", "6e75ff"]);
  assert.equal((await sb.readFile(byName.get("6e75ff"))).toString(), "ff");
  assert.equal((await sb.readFile(byName.get("6e75fe"))).toString(), "fe");
  await sb.writeFile(Buffer.from([0x6e, 0x76, 0xfd]), "written");
  const back = await sb.run(["python3", "-c", "print(open(b'nv\\xfd').read())"]);
  assert.equal(back.stdout, "written\n");
  // UTF-8 names carry no pathBytes: their text is exact.
  await sb.writeFile("plain-utf8.txt", "p");
  const plain = (await sb.listFiles()).find((e) => e.path === "plain-utf8.txt");
  assert.equal(plain.pathBytes, undefined);
});
