#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ and runs each for a few seconds from its seed corpus
# (fuzz/corpus/TARGET). Any crash, panic, failed assertion, leak or hang fails the run; the
# input that did it is kept under fuzz/artifacts/TARGET/ with the command that reproduces it.
#
# What `cargo fuzz run` does, with plain cargo: the same coverage and AddressSanitizer flags.
# `-Zsanitizer` is unstable, so a stable toolchain is told to allow it (RUSTC_BOOTSTRAP=1);
# machines of this project's kind carry one stable toolchain and cannot fetch a nightly.
#
#   bash scripts/fuzz.sh                    every target, HULL_FUZZ_SECONDS (default 8) each
#   bash scripts/fuzz.sh cell_frame 60      one target for a minute
#   bash scripts/fuzz.sh --build            build only
#
# New inputs a run finds go to a temporary directory, not into the committed corpus; to keep
# one, copy it into fuzz/corpus/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
triple=$(rustc -vV | sed -n 's/^host: //p')
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth --cfg fuzzing -Zsanitizer=address -Cdebug-assertions -Coverflow-checks"
# Its own target directory under fuzz/ (as cargo-fuzz keeps it), whatever CARGO_TARGET_DIR says.
export CARGO_TARGET_DIR="$PWD/target"
echo "fuzz.sh: building the fuzz targets (release, ASan, coverage) for $triple"
cargo build --locked --release --target "$triple" --bins
[ "${1:-}" = "--build" ] && exit 0
bin="$CARGO_TARGET_DIR/$triple/release"
if [ $# -gt 0 ]; then
    targets="$1"
    secs="${2:-${HULL_FUZZ_SECONDS:-8}}"
else
    targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^hull-fuzz$')
    secs="${HULL_FUZZ_SECONDS:-8}"
fi
status=0
for t in $targets; do
    [ -d "corpus/$t" ] || { echo "fuzz.sh: no seed corpus fuzz/corpus/$t" >&2; status=1; continue; }
    work=$(mktemp -d "/tmp/hull-fuzz-$t-XXXXXX")
    mkdir -p "artifacts/$t"
    # -timeout: one input taking 10 s is a hang; -rss_limit_mb: one using 2 GiB is a blow-up.
    if "$bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="artifacts/$t/" "$work" "corpus/$t" \
        >"$work.log" 2>&1; then
        echo "fuzz $t: ok, $(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log") runs in ${secs}s, $(ls "corpus/$t" | wc -l) seeds + $(ls "$work" | wc -l) new inputs"
    else
        status=1
        echo "fuzz $t: FAILED:" >&2
        # What went wrong (a panic's message, a sanitizer's or libFuzzer's verdict), then the end.
        grep -m4 -A3 -E "panicked at|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|SUMMARY:" "$work.log" >&2 || true
        echo "..." >&2
        grep -v '^#\|^INFO\|^stat::\|^    #' "$work.log" | tail -12 >&2
        for a in "artifacts/$t"/*; do
            [ -e "$a" ] && echo "fuzz $t: reproduce with: bash scripts/fuzz.sh --build && fuzz/target/$triple/release/$t fuzz/$a" >&2
        done
    fi
    rm -rf "$work" "$work.log"
done
exit $status
