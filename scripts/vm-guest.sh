#!/usr/bin/env bash
# The microVM tier's guest kernel (docs/vm.md): Debian's cloud kernel from bookworm-backports,
# extracted (never installed as this host's kernel) with the modules hull's guest init loads,
# into DEST (default /usr/local/lib/hull/vm), where `hull run --isolation vm` finds it.
#   DEST/vmlinuz                   the bzImage
#   DEST/modules/NAME.ko.xz        modules, loaded by the guest in the order of DEST/modules.order
#   DEST/SOURCE                    the package, its version and where its GPL source is
# Idempotent: does nothing when DEST already holds this version and these modules. Needs apt's bookworm-backports
# suite (scripts/setup.sh adds it). Run as root (or with DEST writable and apt-get download working).
set -euo pipefail
DEST="${1:-/usr/local/lib/hull/vm}"
# The kernel package and version hull's guest init is tested with.
PKG="linux-image-6.12.95+deb12-cloud-amd64"
VERSION="6.12.95-1~bpo12+1"
# virtio_mmio: QEMU microvm's devices (found through its ACPI tables); overlay: the guest's
# writable root over the image shared read-only; failover, net_failover and virtio_net (in
# their dependency order): the network device of a VM with the gateway network.
MODULES="kernel/drivers/virtio/virtio_mmio.ko.xz kernel/fs/overlayfs/overlay.ko.xz kernel/net/core/failover.ko.xz kernel/drivers/net/net_failover.ko.xz kernel/drivers/net/virtio_net.ko.xz"

if [ -f "$DEST/SOURCE" ] && grep -q "^version $VERSION\$" "$DEST/SOURCE" \
    && grep -qxF "modules $MODULES" "$DEST/SOURCE"; then
    exit 0
fi
work=$(mktemp -d /tmp/hull-vm-guest-XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
(cd "$work" && apt-get download -q "$PKG=$VERSION" >/dev/null 2>&1) || {
    echo "vm-guest.sh: could not download $PKG=$VERSION: is bookworm-backports in apt's sources (scripts/setup.sh adds it) and apt-get update run?" >&2
    exit 1
}
dpkg-deb -x "$work"/*.deb "$work/x"
kver="${PKG#linux-image-}"
stage="$DEST.new"
rm -rf "$stage"
mkdir -p "$stage/modules"
install -m 644 "$work/x/boot/vmlinuz-$kver" "$stage/vmlinuz"
: > "$stage/modules.order"
for m in $MODULES; do
    install -m 644 "$work/x/lib/modules/$kver/$m" "$stage/modules/"
    basename "$m" >> "$stage/modules.order"
done
cat > "$stage/SOURCE" <<EOF
package $PKG
version $VERSION
kernel $kver
modules $MODULES
source https://packages.debian.org/source/bookworm-backports/linux (linux $VERSION, GPL-2.0)
EOF
chmod -R a+rX "$stage"
rm -rf "$DEST"
mv "$stage" "$DEST"
