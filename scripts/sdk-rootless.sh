#!/usr/bin/env bash
# The SDKs' named-sandbox tests as the unprivileged user (scripts/test.sh runs it after the Rust
# rootless pass; it can run alone too): bindings/python's test_named.py and
# test_langchain_shell.py, bindings/node's named.test.mjs, and the AI SDK adapter's tests
# (adapters/ai-sdk, built and its image made first by scripts/test.sh), against the hull in STAGE.
#
#   scripts/sdk-rootless.sh STAGE SKIPS [USER]
#
# STAGE is a directory the user can read holding `hull` (the checkout may sit under /root);
# SKIPS is scripts/skips.py's directory: the JUnit reports go there as SUITE.rootless.xml. Run as
# root, after bindings/node is built (dist/). Python: root's interpreter may sit under /root too,
# so the tests run on the rootless venv scripts/setup.sh makes from the system's python3 (pytest,
# langchain), with this checkout's wheel installed into it here.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=$1
skips=$2
user=${3:-${HULL_TEST_USER:-hulltest}}
venv=${HULL_ROOTLESS_VENV:-/opt/hull-rootless-venv}
if [ ! -x "$venv/bin/python" ]; then
    echo "sdk-rootless.sh: $venv/bin/python is missing: run scripts/setup.sh (it makes the venv)" >&2
    exit 1
fi
# The wheel from this checkout, reusing the debug build (as scripts/test.sh's root pass does),
# built by the venv's own maturin (no build isolation: nothing fetched).
MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/python" -m pip install -q --force-reinstall --no-deps --no-build-isolation ./bindings/python
mkdir -p "$stage/py" "$stage/node"
cp bindings/python/tests/conftest.py bindings/python/tests/test_named.py bindings/python/tests/test_langchain_shell.py bindings/python/tests/test_kernel_direct.py bindings/python/tests/test_vm.py scripts/busybox-image.py "$stage/py/"
cp -r bindings/node/dist bindings/node/test bindings/node/package.json scripts/busybox-image.py "$stage/node/"
# The AI SDK adapter's tests: its built package with its dependencies (the hull-sandbox link
# resolved), and its node image pulled into the user's own store from the local test registry
# adapters/ai-sdk/scripts/node-image.sh pushed it to.
mkdir -p "$stage/ai-sdk"
cp -r adapters/ai-sdk/dist adapters/ai-sdk/test adapters/ai-sdk/package.json adapters/ai-sdk/scripts/node-image.sh "$stage/ai-sdk/"
cp -rL adapters/ai-sdk/node_modules "$stage/ai-sdk/node_modules"
chmod -R a+rX "$stage"
for suite in pytest-sdk-named node-sdk-named node-ai-sdk; do install -m 666 /dev/null "$skips/$suite.rootless.xml"; done
status=0
as_user() {
    # HULL_VM_AGENT: the static hull the microVM tests boot as the guest's init (hull-static
    # in STAGE, as scripts/test.sh stages it; unset when it is not there).
    local agent=""
    [ -x "$stage/hull-static" ] && agent="HULL_VM_AGENT=$stage/hull-static"
    su "$user" -s /bin/bash -c "cd $1 && HULL_BIN=$stage/hull $agent HULL_CGROUP_PARENT=hull-$user $2" || status=1
}
echo "-- Python SDK named sandboxes as $user"
as_user "$stage/py" "$venv/bin/python -m pytest -q -rs -p no:cacheprovider --junitxml=$skips/pytest-sdk-named.rootless.xml test_named.py test_langchain_shell.py test_kernel_direct.py test_vm.py"
echo "-- Node SDK named sandboxes as $user"
junit="--test-reporter=spec --test-reporter-destination=stdout --test-reporter=junit --test-reporter-destination=$skips/node-sdk-named.rootless.xml"
as_user "$stage/node" "NODE_OPTIONS='$junit' node --test --test-concurrency=1 test/named.test.mjs test/vm.test.mjs"
echo "-- AI SDK adapter as $user"
as_user /tmp "HULL_AI_SDK_REGISTRY=127.0.0.1:5055 HULL_BIN=$stage/hull bash $stage/ai-sdk/node-image.sh --import-only"
junit="--test-reporter=spec --test-reporter-destination=stdout --test-reporter=junit --test-reporter-destination=$skips/node-ai-sdk.rootless.xml"
as_user "$stage/ai-sdk" "NODE_OPTIONS='$junit' node --test --test-concurrency=1 test/*.test.mjs"
exit $status
