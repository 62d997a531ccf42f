#!/usr/bin/env bash
# The RUSTFLAGS of the static build (scripts/build-static.sh, build-wheel.sh): the caller's,
# crt-static, and the checkout's and cargo's paths remapped so the binary does not depend on
# where they are. Run from the checkout's root.
set -euo pipefail
echo "${RUSTFLAGS:-} -C target-feature=+crt-static --remap-path-prefix=$PWD=/hull --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
