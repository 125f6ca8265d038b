#!/usr/bin/env bash
# `bulwark shard` and `bulwark router` as separate processes, configured one through a
# TOML file and one through BULWARK_* environment variables, talking over gRPC. A pymongo
# client writes through the router; the shard is restarted and the data is still there.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BULWARK_BIN:-target/debug/bulwark}
PY=${PYTHON:-python3}
TMP=$(mktemp -d)
RPORT=${BULWARK_ROLES_PORT:-27617}
SPORT=$((RPORT + 1))
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

"$BIN" shard --print-default-config | grep -q '^listen = ' || { echo "print-default-config failed"; exit 1; }
printf 'listen = "127.0.0.1:%s"\ndir = "%s/shard"\nno_such_key = 1\n' "$SPORT" "$TMP" >"$TMP/bad.toml"
if "$BIN" shard --config "$TMP/bad.toml" 2>"$TMP/bad.err"; then echo "unknown key accepted"; exit 1; fi
grep -q no_such_key "$TMP/bad.err" || { echo "unknown key not named in the error"; cat "$TMP/bad.err"; exit 1; }

printf 'listen = "127.0.0.1:%s"\ndir = "%s/shard"\n' "$SPORT" "$TMP" >"$TMP/shard.toml"
start_shard() { "$BIN" --log-format json shard --config "$TMP/shard.toml" 2>>"$TMP/shard.log" & pids+=($!); }
wait_port() { for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened"; exit 1; }
start_shard
BULWARK_LISTEN=127.0.0.1:$RPORT BULWARK_SHARD=127.0.0.1:$SPORT "$BIN" router 2>"$TMP/router.log" & pids+=($!)
wait_port "$SPORT"; wait_port "$RPORT"
grep -q '"message":"shard listening"' "$TMP/shard.log" || { echo "shard did not log JSON"; cat "$TMP/shard.log"; exit 1; }

"$PY" - "$RPORT" <<'PYEOF'
import sys, pymongo
c = pymongo.MongoClient(port=int(sys.argv[1]), host="127.0.0.1")
c.roles.c.insert_many([{"_id": i} for i in range(10)])
assert c.roles.c.count_documents({}) == 10
PYEOF
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
start_shard; wait_port "$SPORT"
"$PY" - "$RPORT" <<'PYEOF'
import sys, pymongo
c = pymongo.MongoClient(port=int(sys.argv[1]), host="127.0.0.1")
n = c.roles.c.count_documents({})
assert n == 10, n
print("separate roles: ok (10 documents survived a shard restart)")
PYEOF
