#!/usr/bin/env bash
# Smoke test of the three-site docker-compose cluster: `make cluster-up` (base image when
# missing, release binary, image, compose up, wait until healthy; with BULWARK_BIN set,
# the image is built from that binary instead), then deploy/smoke.py
# (auth, w:majority writes and reads through each site's router, `docker stop` of the
# primary with a writer running: writes resume, nothing acknowledged is lost, the member
# rejoins), then `make cluster-down`. Exits non-zero on the first failure, within bounded
# time (cluster.sh's WAIT_SECS, smoke.py's FAILOVER_BOUND_S and client timeouts).
#
#   deploy/smoke.sh            KEEP=1 leaves the cluster running afterwards
#   LAYOUT=sharded deploy/smoke.sh   the sharded layout, checked by deploy/smoke_sharded.py and
#                              deploy/cluster.sh stranger (mutual TLS between nodes)
#   PYTHON=/path/to/python     a Python with pymongo (default: the project's compat venv,
#                              created with pymongo 4.20.1 from PyPI when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS

finish() {
  local rc=$?
  if [ $rc != 0 ]; then
    echo "== smoke test failed; cluster state:"
    bash deploy/cluster.sh compose ps || true
    for c in bulwark-router-a bulwark-router-b bulwark-router-c; do
      echo "--- last log lines of $c"; docker logs --tail 10 "$c" 2>&1 || true
    done
    echo "--- elections"
    for c in $(bash deploy/cluster.sh compose config --services 2>/dev/null | sed 's/^/bulwark-/'); do
      docker logs "$c" 2>&1 | grep -E "became primary|stepped down" | sed "s/^/$c: /" || true
    done
  fi
  if [ "${KEEP:-0}" != 1 ]; then
    echo "== cluster down"
    bash deploy/cluster.sh down 2>&1 | grep -E "warning|left|rror" || true
  fi
  echo "smoke test $([ $rc = 0 ] && echo passed || echo FAILED) in $((SECONDS - t0)) s"
}
trap finish EXIT

if [ -z "${PYTHON:-}" ]; then
  venv=${BULWARK_COMPAT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark-compat}/venv-4.20.1
  if ! "$venv/bin/python" -c 'import pymongo' 2>/dev/null; then
    echo "== creating $venv (pymongo 4.20.1)"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "pymongo==4.20.1"
  fi
  PYTHON=$venv/bin/python
fi

# A fresh cluster: leftovers of an earlier run (its data volumes above all) would make
# this a restart test.
bash deploy/cluster.sh down >/dev/null 2>&1 || true
if [ -n "${BULWARK_BIN:-}" ]; then
  # The image from the binary given (CI's debug build): nothing more to build.
  echo "== deploy/cluster.sh up (LAYOUT=${LAYOUT:-replica-set}, $BULWARK_BIN)"
  bash deploy/cluster.sh up
else
  echo "== make cluster-up (LAYOUT=${LAYOUT:-replica-set})"
  make --no-print-directory cluster-up
fi
up=$SECONDS
script=deploy/smoke.py
[ "${LAYOUT:-replica-set}" = sharded ] && script=deploy/smoke_sharded.py
echo "== $script"
"$PYTHON" "$script"
if [ "${LAYOUT:-replica-set}" = sharded ]; then
  # Mutual TLS between nodes: a container without the cluster's certificate is refused.
  # (CI runs the replica-set layout's check in scripts/chaos.sh.)
  echo "== deploy/cluster.sh stranger"
  bash deploy/cluster.sh stranger
fi
echo "cluster-up took $((up - t0)) s, the checks $((SECONDS - up)) s"
