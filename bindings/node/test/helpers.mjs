// Shared by the tests: which hull to use, and small byte builders (PNG, tar.gz) for fixtures.
import { existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { deflateSync, gzipSync, crc32 as zcrc32 } from "node:zlib";

// The tests run the real binary: HULL_BIN, else this checkout's debug build.
if (!process.env.HULL_BIN) {
  const built = resolve(dirname(fileURLToPath(import.meta.url)), "../../../target/debug/hull");
  if (existsSync(built)) process.env.HULL_BIN = built;
}

function crc32(buf) {
  if (zcrc32) return zcrc32(buf);
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

/** A valid w x h red PNG. */
export function png(w = 1, h = 1) {
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, "latin1"), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td) >>> 0);
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const row = Buffer.concat([Buffer.from([0]), Buffer.from("ff0000".repeat(w), "hex")]);
  const raw = Buffer.concat(Array.from({ length: h }, () => row));
  return Buffer.concat([
    Buffer.from("89504e470d0a1a0a", "hex"),
    chunk("IHDR", ihdr),
    chunk("IDAT", deflateSync(raw)),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

/** One ustar header + data for a member {name, type ('0' file, '1' hard link, '2' symlink,
 * '3' char device, '6' FIFO, '5' dir), link, data}. */
function tarMember({ name, type = "0", link = "", data = Buffer.alloc(0) }) {
  const h = Buffer.alloc(512);
  const put = (s, off, len) => h.write(s, off, len, "utf8");
  const oct = (n, off, len) => put(n.toString(8).padStart(len - 1, "0") + "\0", off, len);
  put(name, 0, 100);
  oct(type === "5" ? 0o755 : 0o644, 100, 8);
  oct(0, 108, 8);
  oct(0, 116, 8);
  oct(type === "0" ? data.length : 0, 124, 12);
  oct(1_700_000_000, 136, 12);
  put("        ", 148, 8);
  put(type, 156, 1);
  put(link, 157, 100);
  put("ustar\0", 257, 6);
  put("00", 263, 2);
  let sum = 0;
  for (const b of h) sum += b;
  put(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
  const body = type === "0" ? Buffer.concat([data, Buffer.alloc((512 - (data.length % 512)) % 512)]) : Buffer.alloc(0);
  return Buffer.concat([h, body]);
}

/** A gzipped tar of the given members. */
export function targz(members) {
  return gzipSync(Buffer.concat([...members.map(tarMember), Buffer.alloc(1024)]));
}

/** Polls `cond` until it holds or `ms` pass. */
export async function waitFor(cond, ms = 5000) {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return cond();
}
