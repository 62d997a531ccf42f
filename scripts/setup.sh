#!/usr/bin/env bash
# Installs what hull's build and tests need on a fresh Debian/Ubuntu machine, creates the
# unprivileged test user, and delegates a cgroup subtree to it. Idempotent; run as root.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: run as root (it installs packages and delegates cgroups)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
PKGS="python3 python3-pip python3-venv busybox-static uidmap ca-certificates python3-numpy python3-pandas python3-matplotlib gcc git"
# The fuzz targets (scripts/fuzz.sh) build libFuzzer, which is C++.
PKGS="$PKGS g++"
missing=""
# hull pull's tests: a loopback registry and the tools that build and push images to it.
PKGS="$PKGS docker-registry skopeo umoci apache2-utils"
# hull bench --peers and its test: bubblewrap, one of the peers it runs beside hull.
PKGS="$PKGS bubblewrap"
# Named sandboxes' writable root where the kernel refuses overlayfs in a user namespace, and the
# test that forces it (HULL_OVERLAY=fuse).
PKGS="$PKGS fuse-overlayfs"
# hull-net's broker test drives curl (h2 and http/1.1) through an intercepted loopback connection.
PKGS="$PKGS curl"
# The AI SDK adapter's brokering test makes its loopback API's test CA and certificate.
PKGS="$PKGS openssl"
# `hull run -it`'s test drives a real terminal: bash in the box under tmux, keys sent, the pane read.
PKGS="$PKGS tmux"
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends $missing
fi

# The microVM tier (docs/vm.md): QEMU 10 and Debian's 6.12 cloud kernel come from
# bookworm-backports (QEMU 7.2 of bookworm failed 1 boot in 3 under TCG here); the guest kernel
# is extracted by scripts/vm-guest.sh, never installed as this host's kernel.
if grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat > /etc/apt/sources.list.d/hull-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -q
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
    if grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release; then
        apt-get install -y -q --no-install-recommends -t bookworm-backports qemu-system-x86
    else
        apt-get install -y -q --no-install-recommends qemu-system-x86
    fi
fi
bash "$(dirname "$0")/vm-guest.sh"
# virtiofsd serves a VM's root and workspace: the Rust one (crates.io; docs/vm.md says why),
# which builds against libseccomp and libcap-ng.
for p in libseccomp-dev libcap-ng-dev pkg-config; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || { apt-get update -q; apt-get install -y -q --no-install-recommends libseccomp-dev libcap-ng-dev pkg-config; break; }
done

if ! command -v cargo >/dev/null; then
    echo "setup.sh: cargo not found; install the Rust toolchain (rustup) first" >&2
    exit 1
fi
# The CI gates (.ci/run) need rustfmt and clippy; rustup toolchains carry them as components.
for tool in fmt clippy; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        component=$([ "$tool" = fmt ] && echo rustfmt || echo clippy)
        if ! command -v rustup >/dev/null || ! rustup component add "$component"; then
            echo "setup.sh: \`cargo $tool\` is missing and \`rustup component add $component\` failed; install the $component component of the toolchain" >&2
            exit 1
        fi
    fi
done

# virtiofsd for the microVM tier, installed where every user finds it.
if ! command -v virtiofsd >/dev/null; then
    cargo install -q --locked --root /usr/local virtiofsd@1.14.0
fi

# The Python SDK's build backend and test runner, for the interpreter that runs the SDK tests.
python3 -m pip install -q --root-user-action=ignore "maturin>=1.5,<2" pytest
# scripts/build-wheel.sh retags the SDK's wheel (manylinux and musllinux) with `wheel tags`.
python3 -m pip install -q --root-user-action=ignore "wheel>=0.40"
# hull_sandbox.langchain's optional dependencies, for its tests: langchain-core (the tool) and
# langchain (the shell middleware hull_execution_policy plugs into, and create_agent).
python3 -m pip install -q --root-user-action=ignore "langchain-core>=1,<2" "langchain>=1,<2"

# The SDK tests' rootless pass (scripts/sdk-rootless.sh) runs as the test user, who may not reach
# the interpreter above (pyenv's lives under /root): a venv of the system's python3, readable by
# all, with what those tests import (scripts/sdk-rootless.sh installs the wheel into it).
venv=${HULL_ROOTLESS_VENV:-/opt/hull-rootless-venv}
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q "maturin>=1.5,<2" pytest "langchain-core>=1,<2" "langchain>=1,<2"
chmod -R a+rX "$venv"

# hull bench --peers and its test: kern, the other peer (its wheel carries the kern binary). Pinned:
# the bench reads its Python API (Sandbox(image=, prewarm=), kernel()) as this version has it.
python3 -m pip install -q --root-user-action=ignore "kern-sandbox==0.2.49"

# The Node SDK's build and tests need node and npm (CI images carry them; else Debian's).
command -v npm >/dev/null || { apt-get update -q; apt-get install -y -q --no-install-recommends nodejs npm; }

# hull mcp's tests: the official MCP clients, Python (the `mcp` package, 1.x: protocol
# versions up to 2025-11-25) and TypeScript (@modelcontextprotocol/sdk, from the lock file).
python3 -m pip install -q --root-user-action=ignore "mcp>=1.20,<2"
if ! command -v npm >/dev/null; then
    echo "setup.sh: npm not found; install Node.js 20+ with npm (hull mcp's client test needs it)" >&2
    exit 1
fi
(cd "$(dirname "$0")/../tests/mcp/node" && npm ci --no-audit --no-fund --loglevel=error)

# The AI SDK adapter (adapters/ai-sdk): its npm dependencies (@ai-sdk/harness, from the lock
# file; hull-sandbox is bindings/node by path), and what its test image is built from: Debian's
# bash, coreutils, procps, git and curl beside this host's node (adapters/ai-sdk/scripts/node-image.sh).
(cd "$(dirname "$0")/../adapters/ai-sdk" && npm ci --no-audit --no-fund --loglevel=error)
for p in bash coreutils procps git curl; do
    dpkg -s "$p" >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q --no-install-recommends bash coreutils procps git curl; break; }
done

# The unprivileged user the rootless test pass runs as.
TEST_USER="${HULL_TEST_USER:-hulltest}"
id "$TEST_USER" >/dev/null 2>&1 || useradd -m "$TEST_USER"
# A sub-id range for it (useradd adds one only where login.defs says so), for `--subids` tests.
for f in subuid subgid; do
    if ! grep -q "^$TEST_USER:" "/etc/$f" 2>/dev/null; then
        # The first 65536 ids above every range already given out.
        start=$(awk -F: 'BEGIN { m = 100000 } { e = $2 + $3; if (e > m) m = e } END { print m }' "/etc/$f" 2>/dev/null || echo 100000)
        usermod "--add-sub${f#sub}s" "$start-$((start + 65535))" "$TEST_USER"
    fi
done

# Delegate a cgroup subtree to it, the way an administrator would: v1 hierarchies where the
# controllers live there (hybrid hosts), else a v2 directory with the controllers enabled.
for c in memory pids cpu; do
    if [ -d "/sys/fs/cgroup/$c" ] && grep -q " /sys/fs/cgroup/$c .* cgroup " /proc/self/mountinfo; then
        mkdir -p "/sys/fs/cgroup/$c/hull-$TEST_USER"
        chown -R "$TEST_USER" "/sys/fs/cgroup/$c/hull-$TEST_USER"
    fi
done
if grep -q " /sys/fs/cgroup cgroup2 " /proc/self/mountinfo 2>/dev/null || [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    d=/sys/fs/cgroup/hull-$TEST_USER
    mkdir -p "$d"
    for c in memory pids cpu; do echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true; done
    for c in memory pids cpu; do echo "+$c" > "$d/cgroup.subtree_control" 2>/dev/null || true; done
    chown -R "$TEST_USER" "$d"
fi

# /dev/fuse as distributions ship it (Debian, Ubuntu, Fedora: 0666; the kernel allows FUSE mounts
# in a user namespace since 4.18), for a rootless named sandbox's fuse-overlayfs root and its
# test (HULL_OVERLAY=fuse). Some machine images make it 0600 root; an administrator opens it
# the same way. A udev rule keeps it across reboots where udev runs.
fuse_mode=$(stat -c %a /dev/fuse 2>/dev/null || true)
if [ -c /dev/fuse ] && [ "$fuse_mode" != 666 ]; then
    chmod 0666 /dev/fuse
    echo "setup.sh: /dev/fuse was mode $fuse_mode; made it 0666, the distributions' default (rootless fuse-overlayfs)"
fi
if [ -d /etc/udev/rules.d ] && [ ! -f /etc/udev/rules.d/60-hull-fuse.rules ]; then
    echo 'KERNEL=="fuse", MODE="0666"' > /etc/udev/rules.d/60-hull-fuse.rules
fi
# /dev/net/tun likewise (Debian, Ubuntu, Fedora ship it 0666: opening it makes nothing; creating a
# TAP takes CAP_NET_ADMIN over a network namespace, which a rootless box has only in its own), for
# the gateway network (Network::Gateway: the box makes its TAP in its own network namespace) and
# its tests. This machine kind ships it 0600 root.
if [ ! -c /dev/net/tun ]; then
    modprobe tun 2>/dev/null || true
fi
tun_mode=$(stat -c %a /dev/net/tun 2>/dev/null || true)
if [ -c /dev/net/tun ] && [ "$tun_mode" != 666 ]; then
    chmod 0666 /dev/net/tun
    echo "setup.sh: /dev/net/tun was mode $tun_mode; made it 0666, the distributions' default (rootless gateway network)"
elif [ ! -c /dev/net/tun ]; then
    echo "setup.sh: no /dev/net/tun (the tun module is not loaded): the gateway network is unavailable"
fi
if [ -d /etc/udev/rules.d ] && [ ! -f /etc/udev/rules.d/60-hull-tun.rules ]; then
    echo 'KERNEL=="tun", MODE="0666"' > /etc/udev/rules.d/60-hull-tun.rules
fi
echo "setup.sh: ready (test user $TEST_USER, cgroup parent hull-$TEST_USER)"
