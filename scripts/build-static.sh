#!/usr/bin/env bash
# Builds hull as one static executable: a static PIE linked against glibc (crt-static), with no
# dynamic loader, no shared library and no NSS module to load at run time, stripped. It starts
# faster than the dynamic build (no relocation of shared libraries) and runs on any x86_64 Linux
# kernel 3.2 or later. Prints the binary's path on stdout.
#
#   bash scripts/build-static.sh            # -> target/x86_64-unknown-linux-gnu/release/hull
#
# Why glibc and not musl: the musl target's standard library comes from rustup, which this
# project's machines cannot reach; glibc's static libraries come with Debian's libc6-dev.
# Name resolution (hull pull) needs no NSS module: glibc 2.34 and later build the `files` and
# `dns` services into libc itself, which is all a static binary consults (an nsswitch.conf
# naming others, e.g. mdns or resolve, falls through to them).
#
# `--target` is what keeps crt-static off the host's build scripts and proc-macros, which must
# stay dynamic; so the binary lands under target/<triple>/release, beside target/release's
# dynamic one.
set -euo pipefail
cd "$(dirname "$0")/.."

triple=$(rustc -vV | sed -n 's/^host: //p')
case "$triple" in
    x86_64-unknown-linux-gnu | aarch64-unknown-linux-gnu) ;;
    *)
        echo "build-static.sh: no static build for host $triple (x86_64 or aarch64 Linux with glibc only)" >&2
        exit 1
        ;;
esac
# Cargo's own flags for this target only; RUSTFLAGS from the caller are kept. The checkout's
# and cargo's paths are remapped out of the binary, so one commit builds to one hash wherever
# it is checked out (scripts/build-wheel.sh passes the same flags and shares this build).
RUSTFLAGS="$(bash scripts/static-rustflags.sh)" \
    cargo build --release --locked -p hull-cli --target "$triple" >&2
bin="target/$triple/release/hull"
# Whatever the caller's linker did, the result must need no loader: a PT_INTERP header would
# make it depend on this host's ld.so after all.
if readelf -l "$bin" | grep -q 'INTERP'; then
    echo "build-static.sh: $bin still asks for a program interpreter (readelf -l shows INTERP): it is not static" >&2
    exit 1
fi
if readelf -d "$bin" 2>/dev/null | grep -q 'NEEDED'; then
    echo "build-static.sh: $bin still needs shared libraries (readelf -d shows NEEDED entries)" >&2
    exit 1
fi
echo "$bin"
