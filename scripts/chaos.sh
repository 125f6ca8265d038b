#!/usr/bin/env bash
# The bounded chaos suite CI runs on every submission (tier 4): each scenario starts its
# own three-site cluster of separate processes on loopback, runs the workload through a
# fault, and fails when a checker fails. Then the same runner faults the docker-compose
# cluster of deploy/ (built from this binary on the debootstrapped base image) through the
# Docker CLI. Reports and plots go to $CHAOS_OUT.
#
#   bash scripts/chaos.sh                     # the CI set
#   SCENARIOS="kill-primary" COMPOSE_SCENARIOS="" bash scripts/chaos.sh
#   SCENARIOS="" SHARDED_SCENARIOS="power-loss" COMPOSE_SCENARIOS="" COMPOSE_SHARDED=0 bash scripts/chaos.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BULWARK_BIN:-target/debug/bulwark}
[ -x "$BIN" ] || cargo build --bin bulwark
OUT=${CHAOS_OUT:-target/chaos}
SCENARIOS=${SCENARIOS-connection-storm kill-primary partition-site pause-primary power-loss disk-full}
# The seed rotates with the commit (so every submission runs a different schedule) and is
# printed with every scenario: CHAOS_SEED=N reproduces a run.
SEED=${CHAOS_SEED:-$(( 0x$(git rev-parse --short=7 HEAD 2>/dev/null || echo 1) ))}
echo "== chaos seed $SEED (CHAOS_SEED=$SEED reproduces it)"
DURATION=${CHAOS_DURATION:-40}
mkdir -p "$OUT"
status=0
# One scenario on the local target: $1 the scenario, $2 the layout.
run_local() {
  local s=$1 layout=$2 name=$1
  [ "$layout" = replica-set ] || name="$layout-$1"
  echo "== chaos $s (${DURATION}s, local target, $layout layout)"
  # Bounded: the runner's own limits end a stuck cluster long before this.
  if ! timeout 600 "$BIN" chaos "$s" --target local --layout "$layout" --seed "$SEED" \
      --duration "$DURATION" --report "$OUT/$name.json" --dir "$OUT/$name-cluster" 2>"$OUT/$name.log"; then
    echo "== chaos $s ($layout) FAILED with seed $SEED (report $OUT/$name.json, cluster logs in $OUT/$name-cluster, runner log $OUT/$name.log)"
    tail -20 "$OUT/$name.log"
    for f in "$OUT/$name-cluster"/*.log; do [ -f "$f" ] && { echo "-- $f"; tail -15 "$f"; }; done
    status=1
  else
    rm -rf "$OUT/$name-cluster"
  fi
}
for s in $SCENARIOS; do
  run_local "$s" replica-set
done
# The sharded layout (two shards and the config servers, a member of each per site), where
# the list-append and bank transactions span both shards: one of its four scenarios per
# run, turning with the seed (docs/chaos.md has the soak table of all four).
SHARDED_ALL=(kill-primary partition-site pause-primary power-loss)
SHARDED_SCENARIOS=${SHARDED_SCENARIOS-${SHARDED_ALL[$(( SEED % 4 ))]}}
for s in $SHARDED_SCENARIOS; do
  run_local "$s" sharded
done

# The compose target: image from the same (debug) binary, so CI builds nothing more; the
# cluster starts fresh (no volumes from an earlier run) and is removed afterwards.
COMPOSE_SCENARIOS=${COMPOSE_SCENARIOS-kill-primary partition-site}
if [ -n "$COMPOSE_SCENARIOS" ]; then
  export BULWARK_BIN
  BULWARK_BIN=$(realpath "$BIN")
  bash deploy/cluster.sh down >/dev/null 2>&1 || true
  echo "== compose cluster up (deploy/cluster.sh up, log $OUT/compose-up.log)"
  if timeout 900 bash deploy/cluster.sh up >"$OUT/compose-up.log" 2>&1; then
    tail -1 "$OUT/compose-up.log"
    echo "== a stranger container on a site network (deploy/cluster.sh stranger)"
    bash deploy/cluster.sh stranger || status=1
    for s in $COMPOSE_SCENARIOS; do
      echo "== chaos $s (${DURATION}s, compose target)"
      if ! timeout 600 "$BIN" chaos "$s" --target compose --seed "$SEED" --duration "$DURATION" \
          --report "$OUT/compose-$s.json" 2>"$OUT/compose-$s.log"; then
        echo "== chaos $s on compose FAILED with seed $SEED (report $OUT/compose-$s.json, runner log $OUT/compose-$s.log)"
        tail -20 "$OUT/compose-$s.log"
        for c in $(bash deploy/cluster.sh compose ps -q 2>/dev/null); do
          echo "-- $(docker inspect -f '{{.Name}}' "$c")"; docker logs --tail 10 "$c" 2>&1 || true
        done
        status=1
      fi
    done
  else
    echo "== compose cluster did not come up"
    tail -30 "$OUT/compose-up.log"
    status=1
  fi
  bash deploy/cluster.sh down >/dev/null 2>&1 || true
fi

# The sharded compose layout (config servers and two shards, a member of each per site):
# up from the same binary, deploy/smoke_sharded.py (a shard member stopped under writes,
# movePrimary), down.
if [ "${COMPOSE_SHARDED-1}" = 1 ]; then
  echo "== sharded compose cluster (LAYOUT=sharded deploy/smoke.sh, log $OUT/compose-sharded.log)"
  if LAYOUT=sharded BULWARK_BIN=$(realpath "$BIN") timeout 900 bash deploy/smoke.sh \
      >"$OUT/compose-sharded.log" 2>&1; then
    grep -E "^\[|smoke test|stranger" "$OUT/compose-sharded.log" | tail -12
  else
    echo "== sharded compose smoke test FAILED"
    tail -40 "$OUT/compose-sharded.log"
    status=1
  fi
fi
exit $status
