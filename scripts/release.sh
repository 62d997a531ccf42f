#!/usr/bin/env bash
# Builds every artifact of a release into dist/ (or OUT_DIR) with a SHA256SUMS file: the static
# binary (hull-<version>-<arch>-linux), the Python wheel carrying it, and the npm tarballs (the
# SDK and its platform package). Publishing them to a registry is a release step outside this
# repository.
#
#   bash scripts/release.sh [OUT_DIR]
#
# Reproducible: the static build remaps the checkout's and cargo's paths out of the binary
# (--remap-path-prefix), so building twice from one commit gives the same hash, wherever the
# checkout is (see README, "Releases").
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
rm -f "$out"/hull-* "$out"/*.whl "$out"/*.tgz "$out"/SHA256SUMS
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(uname -m)
bin=$(bash scripts/build-static.sh)
install -m 755 "$bin" "$out/hull-$version-$arch-linux"
bash scripts/build-wheel.sh "$out" >/dev/null
bash scripts/build-npm.sh "$out" >/dev/null
(cd "$out" && sha256sum -- "hull-$version-$arch-linux" *.whl *.tgz > SHA256SUMS)
cat "$out/SHA256SUMS"
