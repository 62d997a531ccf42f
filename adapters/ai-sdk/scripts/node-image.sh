#!/usr/bin/env bash
# Builds the image the adapter's tests (and its bench) run on: this host's `node` binary, Debian's
# bash, dash (/bin/sh), coreutils, grep, sed, findutils, procps, and git and curl when installed,
# each with the shared libraries it links, and a `node` user (uid 1000, home /home/node), as one
# OCI layer. Nothing is downloaded. Then imports it into hull's store (HULL_BIN or PATH; the
# store of whoever runs it: run it as each user whose tests need it).
#
#   bash adapters/ai-sdk/scripts/node-image.sh             # build and import as ai-sdk-node:1
#   NODE_IMAGE_DIR=/tmp/x bash adapters/ai-sdk/scripts/node-image.sh
#   bash adapters/ai-sdk/scripts/node-image.sh --import-only   # import a layout built before
#
# With HULL_AI_SDK_REGISTRY=HOST:PORT (the local test registry scripts/registry.sh runs, as
# scripts/test.sh sets it), the image goes the way a user's node image comes instead: pushed to
# that registry (skopeo, plain HTTP on loopback) as hull-test/ai-sdk-node:1 and pulled back into
# the store with `hull pull --name ai-sdk-node:1`; `--import-only` then pulls only (a second user
# of a registry another already pushed to).
set -euo pipefail

DIR="${NODE_IMAGE_DIR:-/tmp/hull-ai-sdk-node-image}"
HULL="${HULL_BIN:-hull}"
NAME="${HULL_AI_SDK_IMAGE:-ai-sdk-node:1}"
layout="$DIR/oci"

REGISTRY="${HULL_AI_SDK_REGISTRY:-}"
pulled="$REGISTRY/hull-test/ai-sdk-node:1"
import() {
    "$HULL" rmi "$NAME" >/dev/null 2>&1 || true
    if [ -n "$REGISTRY" ]; then
        "$HULL" pull "$pulled" --name "$NAME"
        echo "node-image.sh: pulled $pulled into hull's store as $NAME"
    else
        "$HULL" import "$layout" --name "$NAME"
        echo "node-image.sh: imported $NAME into hull's store"
    fi
}
push() {
    [ -n "$REGISTRY" ] || return 0
    command -v skopeo >/dev/null || { echo "node-image.sh: skopeo not found (scripts/setup.sh installs it)" >&2; exit 1; }
    skopeo copy -q --dest-tls-verify=false "oci:$layout:1" "docker://$pulled"
    echo "node-image.sh: pushed $pulled"
}
if [ "${1:-}" = "--import-only" ]; then
    import
    exit 0
fi

for t in umoci dpkg ldd; do
    command -v "$t" >/dev/null || { echo "node-image.sh: $t not found (scripts/setup.sh installs umoci)" >&2; exit 1; }
done
NODE=$(readlink -f "$(command -v node)")

rm -rf "$DIR"
mkdir -p "$DIR"
root="$DIR/root"
mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/{etc,tmp,workspace,proc,dev,sys,root,home/node}
# A merged /usr, as Debian's.
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done

# Copies one host path to the same place in the root, its directories resolved as the host
# resolves them (so /bin/bash lands in /usr/bin/bash).
put() {
    local f=$1 real
    real="$(readlink -f "$(dirname "$f")")/$(basename "$f")"
    [ -e "$real" ] || [ -L "$real" ] || return 0
    mkdir -p "$root$(dirname "$real")"
    cp -a "$real" "$root$real"
}

packages="bash dash coreutils grep sed findutils procps gzip tar"
for p in git curl; do
    if dpkg -s "$p" >/dev/null 2>&1; then packages="$packages $p"; else echo "node-image.sh: $p is not installed here; the image goes without it" >&2; fi
done
for p in $packages; do
    dpkg -L "$p" | grep -Ev '^/usr/share/(doc|man|info|locale|lintian|bash-completion|zsh)|^/etc/(cron|logrotate)' | while read -r f; do
        [ -d "$f" ] && [ ! -L "$f" ] && continue
        put "$f"
    done
done
put "$NODE"
[ "$NODE" = /usr/bin/node ] || ln -sf "$NODE" "$root/usr/bin/node"

# The loader and every library the copied programs link.
find "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" -type f -perm -u+x 2>/dev/null | while read -r f; do
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^[[:space:]]*\//{print $1}'  || true
done | sort -u | while read -r lib; do
    real="$(readlink -f "$(dirname "$lib")")/$(basename "$lib")"
    mkdir -p "$root$(dirname "$real")"
    cp -L "$lib" "$root$real"
done

ln -sf dash "$root/usr/bin/sh"
printf 'root:x:0:0:root:/root:/bin/bash\nnode:x:1000:1000:node:/home/node:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnode:x:1000:\nnogroup:x:65534:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"

umoci init --layout "$layout"
umoci new --image "$layout:1"
umoci unpack --image "$layout:1" "$DIR/bundle" >/dev/null
rm -rf "$DIR/bundle/rootfs"
mv "$root" "$DIR/bundle/rootfs"
umoci repack --image "$layout:1" "$DIR/bundle" >/dev/null
umoci config --image "$layout:1" --os linux --architecture "$(uname -m | sed "s/x86_64/amd64/;s/aarch64/arm64/")" \
    --config.env "PATH=/usr/local/bin:/usr/bin:/bin" --config.workingdir /workspace --config.cmd /usr/bin/node
rm -rf "$DIR/bundle"
chmod -R a+rX "$DIR"
push
import
