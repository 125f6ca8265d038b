#!/usr/bin/env bash
# Runs chaos scenarios many times with different seeds and writes a summary table:
# runs, seeds, and the lost, duplicated, unexpected, linearizability-violation, diverged
# (dbHash) and invalid (validate) counts summed over the runs, the API workload's wrong
# counters and lost, resurrected or unexpected documents (effects), its failures no
# fault explains, the list-append transactions committed and the runs whose history is
# not valid under snapshot isolation (or lost a committed append), and the bank's snapshot
# reads and those that broke the total (or balances no history explains), plus how many
# runs failed any checker. Each run's report stays in $OUT; a failed run keeps its
# cluster's logs.
#
#   RUNS=100 SCENARIOS="kill-primary partition-site power-loss" bash scripts/soak.sh
#   LAYOUT=sharded RUNS=5 SCENARIOS="kill-primary power-loss" bash scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BULWARK_BIN:-target/debug/bulwark}
[ -x "$BIN" ] || cargo build --bin bulwark
RUNS=${RUNS:-10}
SCENARIOS=${SCENARIOS:-kill-primary partition-site power-loss}
DURATION=${CHAOS_DURATION:-40}
FIRST_SEED=${FIRST_SEED:-1}
LAYOUT=${LAYOUT:-replica-set}
OUT=${SOAK_OUT:-target/soak/$LAYOUT}
SUMMARY=$OUT/summary.md
mkdir -p "$OUT"
echo "| scenario ($LAYOUT) | runs | seeds | failed runs | lost | duplicated | unexpected | linearizability violations | diverged collections | invalid validates | wrong effects | unexplained errors | transactions committed | runs not SI | bank snapshot reads | bank violations |" >"$SUMMARY"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" >>"$SUMMARY"
for s in $SCENARIOS; do
  failed=0
  for i in $(seq 0 $((RUNS - 1))); do
    seed=$((FIRST_SEED + i))
    report=$OUT/$s-$seed.json
    echo "== soak $s seed $seed ($((i + 1))/$RUNS)"
    if ! timeout 600 "$BIN" chaos "$s" --target local --layout "$LAYOUT" --seed "$seed" --duration "$DURATION" \
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
committed = not_si = bank_reads = bank_bad = 0
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
    txn = r["checkers"].get("snapshot_isolation", {}).get("report", {})
    committed += txn.get("si", {}).get("committed", 0)
    not_si += int(not r["checkers"].get("snapshot_isolation", {}).get("passed", True))
    bank = r["checkers"].get("bank", {}).get("report", {})
    bank_reads += sum((bank.get("reads") or {}).values())
    bank_bad += bank.get("bad_read_count", 0) + len(bank.get("unexplained_balances") or [])
print(f"| {s} | {runs} | {first}-{first + runs - 1} | {failed} | {lost} | {dup} | {unexpected} | {violations} | {diverged} | {invalid} | {effects} | {unexplained} | {committed} | {not_si} | {bank_reads} | {bank_bad} |")
PY
done
cat "$SUMMARY"
