#!/usr/bin/env bash
# Runs chaos scenarios many times with different seeds and writes a summary table:
# runs, seeds, and the lost, duplicated, unexpected, linearizability-violation, diverged
# (dbHash) and invalid (validate) counts summed over the runs, the API workload's wrong
# counters and lost, resurrected or unexpected documents (effects), and its failures no
# fault explains, plus how many runs failed any checker. Each run's report stays in
# $OUT; a failed run keeps its cluster's logs.
#
#   RUNS=100 SCENARIOS="kill-primary partition-site power-loss" bash scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BULWARK_BIN:-target/debug/bulwark}
[ -x "$BIN" ] || cargo build --bin bulwark
RUNS=${RUNS:-10}
SCENARIOS=${SCENARIOS:-kill-primary partition-site power-loss}
DURATION=${CHAOS_DURATION:-40}
FIRST_SEED=${FIRST_SEED:-1}
OUT=${SOAK_OUT:-target/soak}
SUMMARY=$OUT/summary.md
mkdir -p "$OUT"
echo "| scenario | runs | seeds | failed runs | lost | duplicated | unexpected | linearizability violations | diverged collections | invalid validates | wrong effects | unexplained errors |" >"$SUMMARY"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|" >>"$SUMMARY"
for s in $SCENARIOS; do
  failed=0
  for i in $(seq 0 $((RUNS - 1))); do
    seed=$((FIRST_SEED + i))
    report=$OUT/$s-$seed.json
    echo "== soak $s seed $seed ($((i + 1))/$RUNS)"
    if ! timeout 600 "$BIN" chaos "$s" --target local --seed "$seed" --duration "$DURATION" \
        --report "$report" --dir "$OUT/$s-$seed-cluster" >"$OUT/$s-$seed.out" 2>"$OUT/$s-$seed.log"; then
      failed=$((failed + 1))
      echo "== soak $s seed $seed FAILED: $(tail -1 "$OUT/$s-$seed.out")"
    else
      rm -rf "$OUT/$s-$seed-cluster"
    fi
  done
  python3 - "$s" "$RUNS" "$FIRST_SEED" "$failed" "$OUT" >>"$SUMMARY" <<'PY'
import glob, json, sys
s, runs, first, failed, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
lost = dup = unexpected = violations = diverged = invalid = effects = unexplained = 0
for seed in range(first, first + runs):
    try:
        r = json.load(open(f"{out}/{s}-{seed}.json"))
    except (OSError, ValueError):
        continue
    w = r["checkers"]["no_lost_or_duplicated_writes"]["report"]
    lost += len(w["lost"]); dup += len(w["duplicated"]); unexpected += len(w["unexpected"])
    violations += len(r["checkers"]["linearizable_registers"]["violations"])
    agree = r["checkers"].get("members_agree", {}).get("report", {})
    diverged += len(agree.get("differing") or [])
    invalid += len(agree.get("invalid") or [])
    fx = r["checkers"].get("effects", {}).get("report", {})
    effects += sum(1 for c in fx.get("counters", []) if not c["acknowledged"] <= c["found"] <= c["acknowledged"] + c["unknown"])
    for k in ("lost", "resurrected", "unexpected", "duplicates_admitted"):
        effects += len(fx.get(k) or [])
    unexplained += len(r["checkers"].get("errors_explained", {}).get("report", {}).get("unexplained") or [])
print(f"| {s} | {runs} | {first}-{first + runs - 1} | {failed} | {lost} | {dup} | {unexpected} | {violations} | {diverged} | {invalid} | {effects} | {unexplained} |")
PY
done
cat "$SUMMARY"
