// The Node SDK's warm paths, as benches/sdk_warm.py measures the Python SDK's: a prewarmed
// runCode("print(1)") (prewarm 2), kernel() and a kernel cell "1+1", calls spaced as an agent
// spaces them; p50/p90 in ms and the load average.
//
//   (cd bindings/node && npm ci && npm run build)
//   HULL_BIN=target/release/hull node benches/sdk_warm.mjs [rounds] [spacing-ms]
import { loadavg } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";

const { Sandbox } = await import(new URL("../bindings/node/dist/index.js", import.meta.url));
const rounds = Number(process.argv[2] ?? 40);
const spacing = Number(process.argv[3] ?? 100);
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.round((p / 100) * (s.length - 1)))];
};
const time = async (f) => {
  const t = performance.now();
  const r = await f();
  return [performance.now() - t, r];
};

const sb = await Sandbox.create({ prewarm: 2 });
const k = await sb.kernel();
await k.runCode("0");
const times = { run_code: [], kernel_start: [], kernel_cell: [] };
for (let i = 0; i < rounds + 3; i++) {
  const [a, r] = await time(() => sb.runCode("print(1)"));
  if (r.stdout !== "1\n") throw new Error(JSON.stringify(r));
  await sleep(spacing);
  const [b] = await time(() => k.runCode("1+1"));
  const [c, k2] = await time(() => sb.kernel());
  await k2.close();
  await sleep(spacing);
  if (i >= 3) {
    times.run_code.push(a);
    times.kernel_cell.push(b);
    times.kernel_start.push(c);
  }
}
await k.close();
await sb.destroy();
console.log(`load average: ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
for (const [what, v] of Object.entries(times)) {
  console.log(`node   ${what.padEnd(13)} p50 ${pct(v, 50).toFixed(3)} ms  p90 ${pct(v, 90).toFixed(3)} ms`);
}
