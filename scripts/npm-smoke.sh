#!/usr/bin/env bash
# The npm tarballs as a user without Rust installs them: builds them (scripts/build-npm.sh),
# installs both into a fresh directory with PATH holding no cargo and no hull and HULL_BIN
# unset, and runs code through the SDK, which finds the platform package's hull.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/hull-npm-XXXXXX)
trap 'rm -rf "$work"' EXIT
mapfile -t tarballs < <(bash scripts/build-npm.sh "$work/dist")
node_dir=$(dirname "$(command -v node)")
mkdir "$work/app"
cd "$work/app"
npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error "${tarballs[@]}" >/dev/null
unset HULL_BIN
export PATH="$node_dir:/usr/bin:/bin"
if command -v cargo >/dev/null || command -v hull >/dev/null; then
    echo "npm-smoke.sh: cargo or hull is still on PATH" >&2
    exit 1
fi
cat > smoke.mjs <<'JS'
import { Sandbox, runCode } from "hull-sandbox";
const r = await runCode("print(6 * 7)");
if (r.stdout !== "42\n") throw new Error(`runCode gave ${JSON.stringify(r)}`);
const sb = new Sandbox();
try {
  const k = await sb.kernel();
  const c = await k.runCode("21 * 2");
  if (c.results[0]?.text !== "42") throw new Error(`a kernel cell gave ${JSON.stringify(c)}`);
} finally {
  await sb.destroy();
}
console.log("npm-smoke.sh: runCode and a kernel work from the installed tarballs");
JS
node smoke.mjs
