// The Node side of `hull bench --sdk`: one process holding the Node SDK's sandboxes, timing one
// call per command it reads. `hull bench` sends a workload name per line and reads one JSON line
// back per sample ({"ms": ...} or {"error": ...}); it does the spacing, the interleaving with the
// other sides and the statistics. Shipped inside hull (include_str!).
//
//   HULL_BENCH_NODE_SDK=/path/to/bindings/node/dist/index.js HULL_BIN=... \
//     node --input-type=module -e "$DRIVER" -- COLD_IMAGE
//   COLD_IMAGE: the image of cold_image ("" = no such workload)
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const coldImage = process.argv[process.argv.length - 1] || null;
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const elapsed = (t) => Number(process.hrtime.bigint() - t) / 1e6;

function checkPrint(r) {
  if (r.stdout !== "1\n" || r.exitCode !== 0) {
    throw new Error(`print(1) gave exit ${r.exitCode}, stdout ${JSON.stringify(r.stdout.slice(0, 200))}, stderr ${JSON.stringify(r.stderr.slice(-300))}`);
  }
}

function checkCell(r) {
  const text = r.results.length ? r.results[0].text : null;
  if (text !== "2") {
    throw new Error(`the cell 1+1 gave ${JSON.stringify(text)}, stderr ${JSON.stringify(r.stderr.slice(-300))}`);
  }
}

const made = [];
const calls = {};
let kernel;
let kernels;
try {
  const { Sandbox } = await import(pathToFileURL(process.env.HULL_BENCH_NODE_SDK).href);
  const warm = await Sandbox.create({ prewarm: 2 });
  made.push(warm);
  kernels = await Sandbox.create({ prewarm: 2 });
  made.push(kernels);
  const coldHost = await Sandbox.create({});
  made.push(coldHost);
  calls.prewarm = async () => checkPrint(await warm.runCode("print(1)"));
  calls.cold_host = async () => checkPrint(await coldHost.runCode("print(1)"));
  if (coldImage) {
    const coldImg = await Sandbox.create({ image: coldImage });
    made.push(coldImg);
    calls.cold_image = async () => checkPrint(await coldImg.runCode("print(1)"));
  }
  kernel = await kernels.kernel();
  checkCell(await kernel.runCode("1+1"));
  calls.kernel_cell = async () => checkCell(await kernel.runCode("1+1"));
} catch (e) {
  say({ fatal: String(e && e.message ? e.message : e) });
  for (const sb of made) await sb.destroy().catch(() => {});
  process.exit(1);
}
say({ ready: [...Object.keys(calls), "kernel_start"].sort() });

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const w = line.trim();
  if (w === "quit") break;
  try {
    if (w === "kernel_start") {
      const t = process.hrtime.bigint();
      const k = await kernels.kernel();
      const ms = elapsed(t);
      await k.close();
      say({ ms });
      continue;
    }
    const call = calls[w];
    if (!call) throw new Error(`no workload ${w}`);
    const t = process.hrtime.bigint();
    await call();
    say({ ms: elapsed(t) });
  } catch (e) {
    say({ error: String(e && e.message ? e.message : e) });
  }
}
lines.close();
await kernel.close().catch(() => {});
for (const sb of made) await sb.destroy().catch(() => {});
