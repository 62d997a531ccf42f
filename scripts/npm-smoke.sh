#!/usr/bin/env bash
# The npm tarballs as a user without Rust installs them: builds them (scripts/build-npm.sh),
# installs the SDK's two into a fresh directory with PATH holding no cargo and no hull and
# HULL_BIN unset, and runs code through the SDK, which finds the platform package's hull; then
# the same for the AI SDK adapter's tarball with its peer dependencies from the registry, which
# runs a command in a session on the image adapters/ai-sdk/scripts/node-image.sh imported
# (HULL_AI_SDK_IMAGE, default ai-sdk-node:1).
set -euo pipefail
cd "$(dirname "$0")/.."
# The harness versions the adapter is built and tested against (its devDependencies).
harness=$(node -p 'require("./adapters/ai-sdk/package.json").devDependencies["@ai-sdk/harness"]')
provider_utils=$(node -p 'require("./adapters/ai-sdk/package.json").devDependencies["@ai-sdk/provider-utils"]')
image="${HULL_AI_SDK_IMAGE:-ai-sdk-node:1}"
work=$(mktemp -d /tmp/hull-npm-XXXXXX)
trap 'rm -rf "$work"' EXIT
mapfile -t tarballs < <(bash scripts/build-npm.sh "$work/dist")
node_dir=$(dirname "$(command -v node)")
mkdir "$work/app"
cd "$work/app"
npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error "${tarballs[@]:0:2}" >/dev/null
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

# The adapter, in a directory of its own: its tarball with the SDK's two (its dependency on
# hull-sandbox by version is met by the SDK's tarball, never fetched) and the harness.
mkdir "$work/adapter"
cd "$work/adapter"
npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error "${tarballs[@]}" "@ai-sdk/harness@$harness" "@ai-sdk/provider-utils@$provider_utils" >/dev/null
if ! node -e 'const p = require("./node_modules/hull-sandbox/package.json"); process.exit(p.optionalDependencies && p.optionalDependencies["hull-sandbox-linux-x64"] ? 0 : 1)'; then
    echo "npm-smoke.sh: the adapter's hull-sandbox is not the tarball's" >&2
    exit 1
fi
cat > smoke.mjs <<'JS'
import { createHullNetworkSandboxSession } from "ai-sdk-sandbox-hull";
const s = await createHullNetworkSandboxSession({ image: process.env.IMAGE, brokerCredentials: false });
try {
  const r = await s.run({ command: "node -e 'console.log(6 * 7)'" });
  if (r.stdout !== "42\n" || r.exitCode !== 0) throw new Error(`run gave ${JSON.stringify(r)}`);
  await s.writeTextFile({ path: "a.txt", content: "one\n" });
  const back = await s.readTextFile({ path: "a.txt" });
  if (!back.includes("one")) throw new Error(`a file came back as ${JSON.stringify(back)}`);
} finally {
  await s.destroy();
}
console.log("npm-smoke.sh: the AI SDK adapter runs a session from the installed tarballs");
JS
IMAGE="$image" HULL_SANDBOXES="$work/sandboxes" node smoke.mjs
