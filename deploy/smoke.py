"""Smoke test of the docker-compose cluster (deploy/smoke.sh runs it; the cluster is up).

Through every site's router, with auth: insert with w:majority and read back. Then a writer
keeps inserting through site A's router while the primary's container is stopped
(`docker stop`): writes must resume on a new primary, every acknowledged write must be
readable through every router, and the stopped member must rejoin after `docker start`.
Prints one line per step and exits non-zero on the first failure.
"""

import subprocess
import time

import pymongo
from pymongo.errors import PyMongoError

from smoke_lib import FAILOVER_BOUND_S, MAJORITY, PORTS, USER, Writer, client, fail, step, wait_for


def coll(c):
    return c.smoke.get_collection("c", write_concern=MAJORITY)


def primary(c):
    """The container name of the shard primary, from replSetGetStatus through a router
    (which sends it to the member it takes for the primary)."""
    status = c.admin.command("replSetGetStatus")
    for m in status["members"]:
        if m["stateStr"] == "PRIMARY":
            return m["name"].split(":")[0], status
    # None also while the arbiter leads: it does so only to catch a data member up, and
    # hands over within about a second.
    return None, status


clients = {site: client(site) for site in PORTS}

# 1. Every router: authenticate, write with w:majority, read back through every router.
coll(clients["A"]).drop()
for site, c in clients.items():
    try:
        c.admin.command("ping")
        r = coll(c).insert_one({"_id": f"site-{site}", "site": site})
    except PyMongoError as e:
        fail(f"site {site} router (port {PORTS[site]}): {e}")
    if not r.acknowledged:
        fail(f"site {site}: write not acknowledged")
step(f"authenticated as {USER} and wrote with w:majority through routers {dict(PORTS)}")
for site, c in clients.items():
    got = sorted(d["_id"] for d in coll(c).find({}))
    if got != ["site-A", "site-B", "site-C"]:
        fail(f"site {site} router reads {got}")
step("every router reads the three writes (primary reads)")

# Site-affine reads: nearest through site B's router is served in site B (a secondary there
# may lag by a heartbeat, so wait for it).
wait_for(
    "a nearest read through site B's router seeing the writes",
    lambda: coll(clients["B"]).with_options(read_preference=pymongo.ReadPreference.NEAREST)
    .count_documents({}) == 3,
    10,
)
step("nearest read through site B's router sees the writes")

old, status = primary(clients["A"])
if not old:
    fail(f"no primary in replSetGetStatus: {status}")
step(f"primary is {old} (term {status.get('term')})")

# 2. A writer through site A's router while the primary's container is stopped.
w = Writer(coll(client("A", retryWrites=True)), lambda i: {"_id": f"w{i}", "t": time.monotonic()})
acked, errors, stop_at = w.acked, w.errors, []
wait_for("the writer's first acknowledged write", lambda: len(acked) >= 20, 10)
before = len(acked)
stop_at.append(time.monotonic())
subprocess.run(["docker", "stop", "-t", "10", old], check=True, capture_output=True)
stopped_at = time.monotonic()
step(f"docker stop {old} ({stopped_at - stop_at[0]:.1f} s); {before} writes acknowledged before")

resumed = wait_for(
    "writes resuming after the primary stopped",
    lambda: next((ts for _, ts in acked if ts > stopped_at), None),
    FAILOVER_BOUND_S,
)
last_before = max((ts for _, ts in acked if ts <= stopped_at), default=stop_at[0])
wait_for("100 more acknowledged writes", lambda: sum(ts > stopped_at for _, ts in acked) >= 100, 30)
w.stop()
new, status = primary(clients["B"])
if not new or new == old:
    fail(f"no new primary after stopping {old}: {status}")
step(
    f"new primary {new}; writes resumed {resumed - stopped_at:.1f} s after the stop "
    f"(no acknowledged write for {resumed - last_before:.1f} s); "
    f"{len(acked)} acknowledged, {len(errors)} errors"
    + (f" (first: {errors[0][1]}: {errors[0][2]})" if errors else "")
)

# 3. Every acknowledged write is there, through every router; site writes still work.
want = {i for i, _ in acked}
for site, c in clients.items():
    try:
        have = {d["_id"] for d in coll(c).find({"_id": {"$regex": "^w"}}, {"_id": 1})}
        coll(c).insert_one({"_id": f"after-{site}"})
    except PyMongoError as e:
        fail(f"site {site} router after failover: {e}")
    missing = want - have
    if missing:
        fail(f"site {site} router misses {len(missing)} acknowledged writes, e.g. {sorted(missing)[:5]}")
step(f"all {len(want)} acknowledged writes read back through every router; each router writes")

# 4. The stopped member comes back and catches up.
subprocess.run(["docker", "start", old], check=True, capture_output=True)


def rejoined():
    _, s = primary(clients["A"])
    m = next(m for m in s["members"] if m["name"].split(":")[0] == old)
    p = next(m for m in s["members"] if m["stateStr"] == "PRIMARY")
    return m["health"] == 1 and m.get("optime") == p.get("optime") and m


m = wait_for(f"{old} rejoining and catching up", rejoined, 30)
step(f"{old} rejoined as {m['stateStr']} at the primary's optime")
step("OK")
