"""Smoke test of the sharded docker-compose cluster (deploy/docker-compose.sharded.yml;
`LAYOUT=sharded deploy/smoke.sh` runs it once the cluster is up).

Through every site's router, with auth: both shards are in the catalog, each in its
site's zone; a hashed sharded
collection spreads over both and reads back whole through every router; an unsharded
collection lives on its database's primary shard. Then a writer inserts through site B's
router while shard0's preferred primary (`bulwark-shard0-a`) is stopped: writes resume,
and every acknowledged write is readable through every router. Last, `movePrimary` moves
the unsharded collection and every router follows. Prints one line per step and exits
non-zero on the first failure.
"""

import subprocess
import time


from smoke_lib import FAILOVER_BOUND_S, MAJORITY, PORTS, Writer, client, fail, step, wait_for

STOPPED = "bulwark-shard0-a"


clients = {site: client(site) for site in PORTS}
a = clients["A"]

# 1. The routers added both shards to the catalog.
shards = wait_for(
    "both shards in listShards",
    lambda: (lambda s: s if len(s) == 2 else None)(a.admin.command("listShards")["shards"]),
    60,
)
step("shards: " + ", ".join(f"{s['_id']} ({s['host']})" for s in shards))

# 1b. Each shard is in the zone of its preferred primary's site (`shard_zones`).
zones = wait_for(
    "each shard in its site's zone",
    lambda: (lambda z: z if z == {"shard0": ["A"], "shard1": ["B"]} else None)(
        {s["_id"]: s.get("tags", []) for s in a.admin.command("listShards")["shards"]}
    ),
    30,
)
step(f"zones: {zones}")

# 2. A hashed sharded collection spreads over both shards and reads back whole.
db = a.get_database("smoke", write_concern=MAJORITY)
db.drop_collection("h")
db.drop_collection("u")
a.admin.command("shardCollection", "smoke.h", key={"_id": "hashed"})
# Unordered: an ordered batch over a hashed key goes in runs of consecutive documents per
# shard, which here alternate, one majority write per run (about 15 s for 1000 with the
# debug binary, at the driver's socket timeout).
db.h.insert_many([{"_id": i, "v": i} for i in range(1000)], ordered=False)
per_shard = {k: v["count"] for k, v in db.command("collStats", "h")["shards"].items()}
if len(per_shard) != 2 or min(per_shard.values()) == 0:
    fail(f"the hashed collection did not spread: {per_shard}")
for site, c in clients.items():
    n = c.smoke.h.count_documents({})
    if n != 1000:
        fail(f"site {site} router counts {n} of 1000")
step(f"1000 documents over both shards {per_shard}, counted through every router")

# 3. An unsharded collection, written through every router.
for site, c in clients.items():
    c.get_database("smoke", write_concern=MAJORITY).u.insert_one({"_id": site})
primary_shard = a.config.databases.find_one({"_id": "smoke"})["primary"]
step(f"unsharded smoke.u written through every router (primary shard {primary_shard})")

# 4. A writer through site B's router while shard0's preferred primary is stopped.
w = Writer(
    client("B", retryWrites=True).get_database("smoke", write_concern=MAJORITY).h,
    lambda i: {"_id": 10_000 + i},
)
acked, errors = w.acked, w.errors
wait_for("the writer's first acknowledged writes", lambda: len(acked) >= 20, 10)
subprocess.run(["docker", "stop", "-t", "10", STOPPED], check=True, capture_output=True)
stopped_at = time.monotonic()
resumed = wait_for(
    "writes resuming after the member stopped",
    lambda: next((ts for _, ts in acked if ts > stopped_at), None),
    FAILOVER_BOUND_S,
)
wait_for("100 more acknowledged writes", lambda: sum(ts > stopped_at for _, ts in acked) >= 100, 30)
w.stop()
step(
    f"docker stop {STOPPED}: writes resumed {resumed - stopped_at:.1f} s later; "
    f"{len(acked)} acknowledged, {len(errors)} errors"
    + (f" (first: {errors[0][1]}: {errors[0][2]})" if errors else "")
)
want = {i for i, _ in acked}
for site, c in clients.items():
    have = {d["_id"] for d in c.smoke.h.find({"_id": {"$gte": 10_000}}, {"_id": 1})}
    if want - have:
        fail(f"site {site} router misses {len(want - have)} acknowledged writes")
step(f"all {len(want)} acknowledged writes read back through every router")
subprocess.run(["docker", "start", STOPPED], check=True, capture_output=True)

# 5. movePrimary: the unsharded collection moves, and every router follows.
other = next(s["_id"] for s in shards if s["_id"] != primary_shard)
a.admin.command("movePrimary", "smoke", to=other)
for site, c in clients.items():
    got = sorted(d["_id"] for d in c.smoke.u.find({}))
    if got != ["A", "B", "C"]:
        fail(f"site {site} router reads {got} after movePrimary")
step(f"movePrimary smoke to {other}: every router reads smoke.u")
step("OK")
