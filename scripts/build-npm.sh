#!/usr/bin/env bash
# Builds the Node SDK as npm tarballs that need no Rust: hull-sandbox-linux-x64 carrying the
# static hull (scripts/build-static.sh) as bin/hull, and hull-sandbox with that package in its
# optionalDependencies (added to the packed copy only: the repository's package.json stays
# installable while the platform package is not on a registry); then the AI SDK adapter,
# ai-sdk-sandbox-hull, depending on hull-sandbox by that version (its repository package.json
# names the SDK by path, `file:../../bindings/node`). Prints the three tarballs' paths.
#
#   bash scripts/build-npm.sh [OUT_DIR]     # default: dist/
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
case "$(uname -m)" in
    x86_64) platform=linux-x64 ;;
    *) echo "build-npm.sh: only x86_64 Linux has a platform package so far (this is $(uname -m))" >&2; exit 1 ;;
esac
bin=$(bash scripts/build-static.sh)
version=$(node -p 'require("./bindings/node/package.json").version')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The platform package: its package.json and the binary.
cp -r "bindings/node/npm/$platform" "$tmp/platform"
mkdir -p "$tmp/platform/bin"
install -m 755 "$bin" "$tmp/platform/bin/hull"
(cd "$tmp/platform" && npm pkg set version="$version" && npm pack --silent --pack-destination "$out" >&2)

# The SDK: built, then packed from a copy whose package.json names the platform package.
(cd bindings/node && npm run build --silent >&2)
mkdir "$tmp/sdk"
cp -r bindings/node/package.json bindings/node/README.md bindings/node/dist "$tmp/sdk/"
(cd "$tmp/sdk" && npm pkg set "optionalDependencies.hull-sandbox-$platform=$version" && npm pack --silent --pack-destination "$out" >&2)

# The adapter: built against the SDK in this checkout, packed from a copy that depends on the SDK
# by version (so it installs beside the tarball above, or from a registry once published).
(cd adapters/ai-sdk && npm ci --no-audit --no-fund --loglevel=error >&2 && npm run build --silent >&2)
adapter_version=$(node -p 'require("./adapters/ai-sdk/package.json").version')
mkdir "$tmp/adapter"
cp -r adapters/ai-sdk/package.json adapters/ai-sdk/README.md adapters/ai-sdk/dist "$tmp/adapter/"
(cd "$tmp/adapter" && npm pkg set "dependencies.hull-sandbox=$version" && npm pack --silent --pack-destination "$out" >&2)
echo "$out/hull-sandbox-$version.tgz"
echo "$out/hull-sandbox-$platform-$version.tgz"
echo "$out/ai-sdk-sandbox-hull-$adapter_version.tgz"
