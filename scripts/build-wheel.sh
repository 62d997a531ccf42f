#!/usr/bin/env bash
# Builds the Python SDK's wheel carrying the static `hull` (scripts/build-static.sh's build, by
# maturin): a py3-none wheel tagged manylinux2014 and musllinux_1_1 for this machine's
# architecture, which installs on any Linux with Python 3.9+ and needs no Rust. It installs
# `hull` and `hull-mcp` as console scripts. Prints the wheel's path on stdout.
#
#   bash scripts/build-wheel.sh [OUT_DIR]     # default: dist/
#
# The binary links no library (readelf finds no interpreter and no NEEDED entry), so the
# musllinux tag is as true as the manylinux one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
triple=$(rustc -vV | sed -n 's/^host: //p')
arch=${triple%%-*}
for tool in maturin readelf; do
    command -v "$tool" >/dev/null || { echo "build-wheel.sh: $tool not found (scripts/setup.sh installs it)" >&2; exit 1; }
done
python3 -c 'import wheel' 2>/dev/null || { echo "build-wheel.sh: the Python package wheel is missing (scripts/setup.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=$(bash scripts/static-rustflags.sh)
# The commit's time in every zip entry, so one commit builds to one wheel.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}"
(cd bindings/python && RUSTFLAGS="$flags" \
    maturin build --release --locked --target "$triple" --compatibility manylinux2014 -o "$tmp/built" >&2)
built=$(ls "$tmp"/built/*.whl)
# The binary inside must be the static one.
mkdir "$tmp/unpacked"
python3 -m zipfile -e "$built" "$tmp/unpacked"
bin=$(ls "$tmp"/unpacked/*.data/scripts/hull)
if readelf -l "$bin" | grep -q INTERP || readelf -d "$bin" 2>/dev/null | grep -q NEEDED; then
    echo "build-wheel.sh: the hull in $built is not static (readelf shows an interpreter or NEEDED libraries)" >&2
    exit 1
fi
python3 -m wheel tags --remove --platform-tag "manylinux_2_17_${arch}.manylinux2014_${arch}.musllinux_1_1_${arch}" "$built" >&2
wheel=$(ls "$tmp"/built/*.whl)
mv "$wheel" "$out/"
echo "$out/$(basename "$wheel")"
