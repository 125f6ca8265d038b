#!/usr/bin/env bash
# The bounded chaos suite CI runs on every submission (tier 4): each scenario starts its
# own three-site cluster of separate processes on loopback, runs the workload through a
# fault, and fails when a checker fails. Reports and plots go to $CHAOS_OUT.
#
#   bash scripts/chaos.sh                     # the CI set
#   SCENARIOS="kill-primary" bash scripts/chaos.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BULWARK_BIN:-target/debug/bulwark}
[ -x "$BIN" ] || cargo build --bin bulwark
OUT=${CHAOS_OUT:-target/chaos}
SCENARIOS=${SCENARIOS:-connection-storm kill-primary partition-site pause-primary}
DURATION=${CHAOS_DURATION:-40}
mkdir -p "$OUT"
status=0
for s in $SCENARIOS; do
  echo "== chaos $s (${DURATION}s, local target)"
  # Bounded: the runner's own limits end a stuck cluster long before this.
  if ! timeout 600 "$BIN" chaos "$s" --target local --seed "${CHAOS_SEED:-1}" --duration "$DURATION" \
      --report "$OUT/$s.json" --dir "$OUT/$s-cluster" 2>"$OUT/$s.log"; then
    echo "== chaos $s FAILED (report $OUT/$s.json, cluster logs in $OUT/$s-cluster, runner log $OUT/$s.log)"
    tail -20 "$OUT/$s.log"
    for f in "$OUT/$s-cluster"/*.log; do [ -f "$f" ] && { echo "-- $f"; tail -15 "$f"; }; done
    status=1
  else
    rm -rf "$OUT/$s-cluster"
  fi
done
exit $status
