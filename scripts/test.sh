#!/usr/bin/env bash
# Runs hull's whole test suite: set-up, every crate's tests as root, then the black-box and
# kernel tests and the SDKs' named-sandbox tests again as an unprivileged user (the rootless
# path), a short run of every fuzz
# target, and the skip check: every skipped test is listed, and one that scripts/expected-skips
# does not expect on CI's machines fails the run. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
# .ci/run has run set-up already (HULL_SETUP_DONE=1).
[ -n "${HULL_SETUP_DONE:-}" ] || bash scripts/setup.sh
TEST_USER="${HULL_TEST_USER:-hulltest}"
# Loopback registries with test images for `hull pull` (stopped on exit).
bash scripts/registry.sh start
trap 'bash scripts/registry.sh stop' EXIT
# Where skipped tests are recorded (scripts/skips.py reads it at the end): the Rust tests'
# records (hull_testkit, both passes write them) and the JUnit reports of pytest and node.
skips=$(mktemp -d /tmp/hull-skips-XXXXXX)
chmod 755 "$skips"
install -m 666 /dev/null "$skips/rust.tsv"
export HULL_SKIP_LOG="$skips/rust.tsv"
trap 'rm -rf "$skips"; bash scripts/registry.sh stop' EXIT

# The static hull first: the microVM tier's tests boot it as the guest's init (HULL_VM_AGENT),
# and its own pass below runs the boundary tests against it.
static_bin="$PWD/$(bash scripts/build-static.sh)"
export HULL_VM_AGENT="$static_bin"

echo "== tests as root"
cargo build --workspace --bins
# hull bench --sdk's test drives the built Node SDK (tsc only; its own tests run below).
(cd bindings/node && npm ci --no-audit --no-fund --loglevel=error && npm run build)
cargo test --workspace --no-fail-fast

echo "== hull mcp: the official Python and TypeScript MCP clients over stdio"
# -rs: each skip's reason in pytest's summary; node's junit reporter lists skips for the check.
junit() { echo "--test-reporter=spec --test-reporter-destination=stdout --test-reporter=junit --test-reporter-destination=$skips/$1.xml"; }
HULL_BIN="$PWD/target/debug/hull" python3 -m pytest -q -rs --junitxml="$skips/pytest-mcp.xml" tests/mcp
(cd tests/mcp/node && HULL_BIN="$PWD/../../../target/debug/hull" NODE_OPTIONS="$(junit node-mcp)" node --test)

echo "== Python SDK: install the wheel (it carries hull), then pytest against it"
# The wheel reuses the debug build made above (MATURIN_PEP517_ARGS); a plain `pip install` builds release.
MATURIN_PEP517_ARGS="--profile dev" python3 -m pip install -q --root-user-action=ignore ./bindings/python
python3 -m pytest -q -rs --junitxml="$skips/pytest-sdk.xml" bindings/python/tests

echo "== Node SDK: npm ci, build (tsc), node --test against the debug hull"
(cd bindings/node && npm ci --no-audit --no-fund && npm run build && HULL_BIN="$PWD/../../target/debug/hull" NODE_OPTIONS="$(junit node-sdk)" npm test)

echo "== AI SDK adapter (adapters/ai-sdk): its node image, npm ci, build (tsc), node --test against the debug hull"
# The image is built from this host's node and Debian packages (no download), pushed to the
# local test registry and pulled back with `hull pull`, as a user's node image comes.
HULL_AI_SDK_REGISTRY=127.0.0.1:5055 HULL_BIN="$PWD/target/debug/hull" bash adapters/ai-sdk/scripts/node-image.sh
(cd adapters/ai-sdk && npm ci --no-audit --no-fund --loglevel=error && npm run build && HULL_BIN="$PWD/../../target/debug/hull" NODE_OPTIONS="$(junit node-ai-sdk)" npm test)

# `NAME PATH` of each test binary in cargo's JSON messages on stdin.
test_executables() {
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])'
}

echo "== the static binary (scripts/build-static.sh): the boundary, leak, serve and pull tests against it"
# One static executable (no loader, no shared library, no NSS module) must behave as the
# dynamic build does; its pull pass names the registries (localhost:5055), so hull resolves them.
cargo test -p hull-cli --test boundary --test leaks --test serve --test pull --no-run --message-format=json 2>/dev/null \
    | test_executables \
    | while read -r name exe; do
        echo "-- $name against $static_bin"
        HULL_BIN="$static_bin" HULL_TEST_REGISTRY=localhost:5055 HULL_TEST_AUTH_REGISTRY=localhost:5056 "$exe" || exit 1
    done

echo "== the Python wheel carrying the static hull (scripts/wheel-smoke.sh): a fresh venv, no cargo on PATH"
bash scripts/wheel-smoke.sh
echo "== the npm tarballs carrying the static hull (scripts/npm-smoke.sh): a fresh directory, no cargo, no HULL_BIN"
bash scripts/npm-smoke.sh

echo "== tests as the unprivileged user $TEST_USER"
# The test binaries and hull are copied where the user can read them (the checkout may sit
# under /root); tests find hull through HULL_BIN.
stage=$(mktemp -d /tmp/hull-rootless-XXXXXX)
trap 'rm -rf "$stage" "$skips"; bash scripts/registry.sh stop' EXIT
cp target/debug/hull "$stage/hull"
cp "$static_bin" "$stage/hull-static"
cargo test --workspace --no-run --message-format=json 2>/dev/null \
    | test_executables \
    | while read -r name exe; do
        case "$name" in guest_boot|vm|boundary|kernel|notify|policy_matches_file|templates|gateway|gateway_process|brokering|serve_sandbox|serve|leaks|named|serve_named) cp "$exe" "$stage/$name" ;; esac
    done
chmod -R a+rX "$stage"
status=0
for t in "$stage"/guest_boot "$stage"/vm "$stage"/boundary "$stage"/kernel "$stage"/notify "$stage"/policy_matches_file "$stage"/templates "$stage"/gateway "$stage"/gateway_process "$stage"/brokering "$stage"/serve_sandbox "$stage"/serve "$stage"/leaks "$stage"/named "$stage"/serve_named; do
    [ -x "$t" ] || continue
    echo "-- $(basename "$t") as $TEST_USER"
    su "$TEST_USER" -s /bin/bash -c "cd /tmp && HULL_SKIP_LOG=$HULL_SKIP_LOG HULL_BIN=$stage/hull HULL_VM_AGENT=$stage/hull-static HULL_CGROUP_PARENT=hull-$TEST_USER $t" || status=1
done
# hull pull's tests as the unprivileged user too (the test registries listen on loopback).
pull_test=$(cargo test -p hull-cli --test pull --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "pull":
        print(m["executable"])')
cp "$pull_test" "$stage/pull" && chmod a+rx "$stage/pull"
echo "-- pull as $TEST_USER"
su "$TEST_USER" -s /bin/bash -c "cd /tmp && HULL_SKIP_LOG=$HULL_SKIP_LOG HULL_BIN=$stage/hull HULL_CGROUP_PARENT=hull-$TEST_USER $stage/pull" || status=1
# The SDKs' named-sandbox tests (and the LangChain shell policy's) as the user too, on the
# staged hull; their JUnit reports join the skip check as SUITE.rootless.xml.
bash scripts/sdk-rootless.sh "$stage" "$skips" "$TEST_USER" || status=1

echo "== fuzz: every parser of untrusted bytes, a few seconds each (scripts/fuzz.sh)"
bash scripts/fuzz.sh || status=1

python3 scripts/skips.py "$skips" || status=1
exit $status
