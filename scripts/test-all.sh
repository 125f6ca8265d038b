#!/usr/bin/env bash
# Every test Bulwark has, in tiers (see ARCHITECTURE.md):
#   1. unit tests of every crate, and the integration crate (in-process clusters driven by
#      the Rust `mongodb` driver);
#   2. pymongo tests against a live `bulwark local`;
#   3. MongoDB's specification suites (via pymongo's test tree) against the same cluster,
#      each with a pass-rate floor so a regression fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== tier 1: cargo tests"
cargo build --bin bulwark
cargo test --workspace --no-fail-fast

echo "== tier 2/3: live cluster"
bash scripts/compat.sh
