#!/usr/bin/env bash
# Builds the image `hull bench --sdk` (workload cold_image) and `hull bench --peers` (kern's
# workloads) run on: this host's /usr/bin/python3 with its standard library, the shared libraries
# it links and busybox-static as /bin/sh, as one OCI layer. Nothing is downloaded. Then imports it
# into hull's store as bench-python:1 and, when kern is installed, into kern's cache (`kern load`)
# as localhost/bench-python:1, so both run the same root.
#
#   bash benches/python-image.sh            # build, import into hull (HULL_BIN or PATH), load into kern
#   BENCH_IMAGE_DIR=/tmp/x bash benches/python-image.sh
set -euo pipefail

DIR="${BENCH_IMAGE_DIR:-/tmp/hull-bench-image}"
HULL="${HULL_BIN:-hull}"
NAME=bench-python
TAG=1
PY=$(readlink -f /usr/bin/python3)
for t in umoci skopeo busybox; do
    command -v "$t" >/dev/null || { echo "python-image.sh: $t not found (scripts/setup.sh installs it)" >&2; exit 1; }
done
[ -x "$PY" ] || { echo "python-image.sh: no /usr/bin/python3 on this host" >&2; exit 1; }
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

rm -rf "$DIR"
mkdir -p "$DIR"
root="$DIR/root"
mkdir -p "$root"/{bin,usr/bin,usr/lib,etc,tmp,workspace,proc,dev,sys}
cp -a "$PY" "$root/usr/bin/python$ver"
ln -s "python$ver" "$root/usr/bin/python3"
ln -s python3 "$root/usr/bin/python"
cp -a "/usr/lib/python$ver" "$root/usr/lib/"
# What no box of the bench imports: the static library and build config (25 MiB), tests, IDLE.
rm -rf "$root/usr/lib/python$ver/test" "$root/usr/lib/python$ver/idlelib" "$root/usr/lib/python$ver"/config-* "$root/usr/lib/python$ver/dist-packages"
# The loader and the libraries the interpreter and its extension modules link.
for f in "$PY" "$root/usr/lib/python$ver"/lib-dynload/*.so; do
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^[[:space:]]*\//{print $1}'
done | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
cp "$(command -v busybox)" "$root/bin/busybox"
for a in sh ls cat true env; do ln -sf busybox "$root/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"

layout="$DIR/oci"
umoci init --layout "$layout"
umoci new --image "$layout:$TAG"
umoci unpack --image "$layout:$TAG" "$DIR/bundle" >/dev/null
rm -rf "$DIR/bundle/rootfs"
mv "$root" "$DIR/bundle/rootfs"
umoci repack --image "$layout:$TAG" "$DIR/bundle" >/dev/null
umoci config --image "$layout:$TAG" --os linux --architecture "$(uname -m | sed "s/x86_64/amd64/;s/aarch64/arm64/")" \
    --config.env "PATH=/usr/local/bin:/usr/bin:/bin" --config.workingdir /workspace \
    --config.cmd /usr/bin/python3
rm -rf "$DIR/bundle"

"$HULL" rmi "$NAME:$TAG" >/dev/null 2>&1 || true
"$HULL" import "$layout" --name "$NAME:$TAG"
echo "python-image.sh: imported $NAME:$TAG into hull's store"
if command -v kern >/dev/null; then
    # Named under localhost/: were kern ever to look for it in a registry, it would ask loopback.
    kern rmi "localhost/$NAME:$TAG" >/dev/null 2>&1 || true
    skopeo copy -q "oci:$layout:$TAG" "docker-archive:$DIR/image.tar:localhost/$NAME:$TAG"
    kern load -i "$DIR/image.tar"
    rm -f "$DIR/image.tar"
    echo "python-image.sh: loaded localhost/$NAME:$TAG into kern's cache"
else
    echo "python-image.sh: kern not installed; not loading the image into its cache"
fi
