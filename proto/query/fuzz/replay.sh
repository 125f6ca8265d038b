#!/usr/bin/env bash
# CI entry point for the query crate's fuzz target: builds `query_ops`, replays every
# input of the committed corpus once (`-runs=0`), then fuzzes briefly from a sample of it
# copied to a temporary directory (the committed corpus is not modified). Exits non-zero
# on any crash, panic, timeout or out-of-memory, and prints how long it took.
#
# Works with only a stable toolchain (RUSTC_BOOTSTRAP=1 unlocks the sanitizer flags
# cargo-fuzz passes) and installs cargo-fuzz if it is missing.
#
#   proto/query/fuzz/replay.sh                     # replay + 60 s of fuzzing
#   QUERY_FUZZ_TIME=0 proto/query/fuzz/replay.sh   # replay only
#   QUERY_FUZZ_SANITIZER=none ...                  # without AddressSanitizer
set -euo pipefail

start=$(date +%s)
work=
report() {
    local rc=$?
    [ -n "$work" ] && rm -rf "$work"
    echo "replay.sh: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") in $(($(date +%s) - start)) s"
    exit "$rc"
}
trap report EXIT

cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
fuzz_time=${QUERY_FUZZ_TIME:-60}
sanitizer=${QUERY_FUZZ_SANITIZER:-address}
target=query_ops
corpus=corpus/$target
opts=(-rss_limit_mb=4096 -timeout=10 -max_len=2048 -print_final_stats=1)

# libfuzzer-sys compiles libFuzzer's C++ sources.
if ! command -v c++ >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq g++ >/dev/null
    else
        echo "replay.sh: a C++ compiler (g++) is needed to build libFuzzer" >&2
        exit 1
    fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    t=$(date +%s)
    cargo install --locked cargo-fuzz
    echo "replay.sh: installing cargo-fuzz took $(($(date +%s) - t)) s"
fi

t=$(date +%s)
cargo fuzz build -O --sanitizer "$sanitizer" "$target"
echo "replay.sh: build took $(($(date +%s) - t)) s"

t=$(date +%s)
n=$(find "$corpus" -type f | wc -l)
cargo fuzz run -O --sanitizer "$sanitizer" "$target" "$corpus" -- -runs=0 "${opts[@]}"
echo "replay.sh: replayed $n corpus inputs in $(($(date +%s) - t)) s"

if [ "$fuzz_time" -gt 0 ]; then
    # The corpus was just replayed: start the brief fuzz from a sample of it, so that
    # the time goes to mutation rather than to loading every input again.
    work=$(mktemp -d)
    find "$corpus" -type f | shuf -n 256 | xargs -r cp -t "$work"/
    cargo fuzz run -O --sanitizer "$sanitizer" "$target" "$work" -- \
        -max_total_time="$fuzz_time" "${opts[@]}"
fi
