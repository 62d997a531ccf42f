#!/usr/bin/env bash
# Test registries for `hull pull`: Debian's docker-registry serving on loopback only, filled
# with small images built here from busybox-static with umoci and pushed with skopeo.
#
#   bash scripts/registry.sh start   # start both registries, build and push the test images
#   bash scripts/registry.sh stop    # stop them (by their recorded pids) and remove the data
#
# 127.0.0.1:5055  anonymous:  hull-test/busybox:1   gzip layer, Cmd prints $GREETING and /hull-marker
#                             hull-test/busybox:zstd the same with a zstd layer (its own marker)
#                             hull-test/busybox:docker the same as a Docker v2 (schema 2) manifest
#                             hull-test/repull:1    the same as busybox:1; only the re-pull test pulls it
#                             hull-test/multi:1     an OCI index: linux/amd64 and linux/arm64 manifests
#                                                   (each with its own marker; both carry this host's busybox)
#                             hull-test/corrupt:1   a layer whose stored bytes were overwritten
# 127.0.0.1:5056  htpasswd (bcrypt) basic auth, user hullpull / password pull-secret-1:
#                             hull-test/busybox:1
# The registry access logs are $DIR/anon.log and $DIR/auth.log (tests count blob requests).
set -euo pipefail

DIR="${HULL_TEST_REGISTRY_DIR:-/tmp/hull-test-registry}"
ANON="${HULL_TEST_REGISTRY:-127.0.0.1:5055}"
AUTH="${HULL_TEST_AUTH_REGISTRY:-127.0.0.1:5056}"
USER_NAME=hullpull
USER_PASS=pull-secret-1

stop() {
    for n in anon auth; do
        if [ -f "$DIR/$n.pid" ]; then
            pid=$(cat "$DIR/$n.pid")
            # Only our own registry: the pid must still be a docker-registry with our config.
            if grep -q "docker-registry" "/proc/$pid/cmdline" 2>/dev/null; then
                kill "$pid" 2>/dev/null || true
            fi
            rm -f "$DIR/$n.pid"
        fi
    done
    rm -rf "$DIR"
}

wait_port() {
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "registry.sh: nothing listens on $1 after 10s; see $DIR/*.log" >&2
    return 1
}

serve() { # name addr [auth]
    local name=$1 addr=$2
    mkdir -p "$DIR/$name-data"
    {
        echo "version: 0.1"
        echo "log: {level: info, accesslog: {disabled: false}}"
        echo "storage: {filesystem: {rootdirectory: $DIR/$name-data}, delete: {enabled: true}}"
        echo "http: {addr: $addr}"
        if [ "${3:-}" = auth ]; then
            echo "auth: {htpasswd: {realm: hull-test, path: $DIR/htpasswd}}"
        fi
    } > "$DIR/$name.yml"
    nohup docker-registry serve "$DIR/$name.yml" > "$DIR/$name.log" 2>&1 &
    echo $! > "$DIR/$name.pid"
    wait_port "$addr"
}

# An OCI layout tag with busybox, /bin/sh, the marker and a config; $4 is the architecture.
build() { # layout tag marker arch
    local layout=$1 tag=$2 marker=$3 arch=$4 b
    b=$(mktemp -d "$DIR/bundle-XXXXXX")
    rmdir "$b"
    umoci new --image "$layout:$tag"
    umoci unpack --image "$layout:$tag" "$b" >/dev/null
    mkdir -p "$b/rootfs/bin" "$b/rootfs/srv" "$b/rootfs/tmp"
    cp /bin/busybox "$b/rootfs/bin/busybox"
    for l in sh cat echo ls pwd; do ln -sf busybox "$b/rootfs/bin/$l"; done
    printf '%s\n' "$marker" > "$b/rootfs/hull-marker"
    umoci repack --image "$layout:$tag" "$b" >/dev/null
    umoci config --image "$layout:$tag" --architecture "$arch" --os linux \
        --config.env GREETING=hello-from-pulled --config.workingdir /srv \
        --config.cmd /bin/sh --config.cmd -c --config.cmd 'echo $GREETING; cat /hull-marker'
    rm -rf "$b"
}

start() {
    for t in docker-registry umoci skopeo htpasswd python3; do
        command -v "$t" >/dev/null || { echo "registry.sh: $t is missing; run scripts/setup.sh" >&2; exit 1; }
    done
    stop
    mkdir -p "$DIR"
    # A failure half-way must not leave registries running.
    trap 'echo "registry.sh: start failed; stopping the registries" >&2; stop' ERR
    htpasswd -Bbn "$USER_NAME" "$USER_PASS" > "$DIR/htpasswd"
    serve anon "$ANON"
    serve auth "$AUTH" auth

    local layout="$DIR/layout" arch
    arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
    umoci init --layout "$layout"
    build "$layout" one "marker: hull-test/busybox" "$arch"
    build "$layout" amd64 "marker: multi linux/amd64" amd64
    build "$layout" arm64 "marker: multi linux/arm64" arm64
    build "$layout" corrupt "marker: hull-test/corrupt" "$arch"
    build "$layout" zstd "marker: hull-test/busybox zstd" "$arch"
    # The multi-platform index, made from the two single-platform manifests.
    python3 - "$layout" <<'EOF'
import hashlib, json, os, sys
layout = sys.argv[1]
index = json.load(open(f"{layout}/index.json"))
def tagged(tag):
    return next(m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
entries = []
for arch in ("amd64", "arm64"):
    m = dict(tagged(arch))
    m.pop("annotations", None)
    m["platform"] = {"os": "linux", "architecture": arch}
    entries.append(m)
blob = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}).encode()
digest = hashlib.sha256(blob).hexdigest()
open(f"{layout}/blobs/sha256/{digest}", "wb").write(blob)
index["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{digest}", "size": len(blob), "annotations": {"org.opencontainers.image.ref.name": "multi"}})
json.dump(index, open(f"{layout}/index.json", "w"))
EOF
    local cp="skopeo copy -q --dest-tls-verify=false"
    $cp "oci:$layout:one" "docker://$ANON/hull-test/busybox:1"
    $cp "oci:$layout:one" "docker://$ANON/hull-test/repull:1"
    $cp -f v2s2 "oci:$layout:one" "docker://$ANON/hull-test/busybox:docker"
    skopeo inspect --raw --tls-verify=false "docker://$ANON/hull-test/busybox:docker" | grep -q 'application/vnd.docker.distribution.manifest.v2+json' \
        || { echo "registry.sh: hull-test/busybox:docker is not a Docker v2 manifest" >&2; false; }
    # skopeo keeps a gzip layer as it is; through an uncompressed copy (its own content, so
    # skopeo's blob cache knows no gzip twin) it must compress, and compresses with zstd.
    skopeo copy -q --dest-decompress "oci:$layout:zstd" "dir:$DIR/zstd-dir"
    $cp --dest-compress-format zstd "dir:$DIR/zstd-dir" "docker://$ANON/hull-test/busybox:zstd"
    rm -rf "$DIR/zstd-dir"
    $cp --all "oci:$layout:multi" "docker://$ANON/hull-test/multi:1"
    $cp "oci:$layout:corrupt" "docker://$ANON/hull-test/corrupt:1"
    $cp --dest-creds "$USER_NAME:$USER_PASS" "oci:$layout:one" "docker://$AUTH/hull-test/busybox:1"

    # Overwrite the corrupt image's layer in the registry's storage with bytes of the same size.
    python3 - "$layout" "$DIR/anon-data" <<'EOF'
import json, os, sys
layout, data = sys.argv[1], sys.argv[2]
index = json.load(open(f"{layout}/index.json"))
desc = next(m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "corrupt")
manifest = json.load(open(f"{layout}/blobs/sha256/{desc['digest'][7:]}"))
hexd = manifest["layers"][0]["digest"][7:]
path = f"{data}/docker/registry/v2/blobs/sha256/{hexd[:2]}/{hexd}/data"
size = os.path.getsize(path)
with open(path, "r+b") as f:
    f.write(b"\0" * min(size, 4096))
EOF
    chmod -R a+rX "$DIR"
    trap - ERR
    echo "registry.sh: registries on $ANON (anonymous) and $AUTH (basic auth) are ready"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
