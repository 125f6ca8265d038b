#!/usr/bin/env bash
# Every test Bulwark has, in tiers (see ARCHITECTURE.md):
#   1. unit tests of every crate, and the integration crate (in-process clusters driven by
#      the Rust `mongodb` driver); then the query crate's libFuzzer target over its corpus
#      (proto/query/fuzz/replay.sh, stable Rust with RUSTC_BOOTSTRAP=1);
#   2. pymongo tests against a live `bulwark local`;
#   3. MongoDB's specification suites (via pymongo's test tree) against the same cluster,
#      each with a pass-rate floor so a regression fails the run;
#   4. chaos scenarios (scripts/chaos.sh): faults against a three-site cluster of separate
#      processes, judged by the lost-write, linearizability, recovery and storm checkers.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== tier 1: cargo tests"
cargo build --bin bulwark
cargo test --workspace --no-fail-fast

status=0
echo "== tier 1b: the query fuzz target replays its corpus and fuzzes for 60 s"
bash proto/query/fuzz/replay.sh || status=1

echo "== tier 2/3: live cluster"
bash scripts/compat.sh || status=1

echo "== tier 4: chaos"
bash scripts/chaos.sh || status=1
exit $status
