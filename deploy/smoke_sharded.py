"""Smoke test of the sharded docker-compose cluster (deploy/docker-compose.sharded.yml;
`LAYOUT=sharded deploy/smoke.sh` runs it once the cluster is up).

Through every site's router, with auth: both shards are in the catalog, each in its
site's zone; a hashed sharded
collection spreads over both and reads back whole through every router; an unsharded
collection lives on its database's primary shard. Then a writer inserts through site B's
router, and transfers between accounts on both shards run in transactions through
pymongo's callback API (`with_transaction`), while shard0's preferred primary
(`bulwark-shard0-a`) is stopped: writes and transfers resume, every acknowledged write is
readable through every router, and every router's read in one transaction (after the
newest commit's operation time) finds the balances the committed transfers made. The asyncio client runs a transfer too. Last, `movePrimary`
moves the unsharded collection and every router follows. Prints one line per step and
exits non-zero on the first failure.
"""

import asyncio
import random
import subprocess
import threading
import time

import pymongo
from pymongo.errors import PyMongoError


from smoke_lib import (
    FAILOVER_BOUND_S,
    MAJORITY,
    PASSWORD,
    PORTS,
    USER,
    Writer,
    client,
    fail,
    step,
    wait_for,
)

STOPPED = "bulwark-shard0-a"
ACCOUNTS, START = 8, 100


class Transfers:
    """Moves money from a thread, one cross-shard transaction (`with_transaction`) at a
    time, until `stop()`: `done` holds each committed (from, to, amount), `unknown` those
    whose commit outcome stayed unknown, `errors` (time, kind, message)."""

    def __init__(self, c):
        self.done, self.unknown, self.errors = [], [], []
        self.latest = None  # the newest committed transfer's operation time
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(c,), daemon=True)
        self._thread.start()

    def _run(self, c):
        bank = c.get_database("smoke", write_concern=MAJORITY).bank
        rng = random.Random(7)
        while not self._done.is_set():
            a, b = rng.randrange(ACCOUNTS // 2), rng.randrange(ACCOUNTS // 2, ACCOUNTS)
            src, dst = (a, b) if rng.random() < 0.5 else (b, a)
            moved = []

            def transfer(s):
                have = bank.find_one({"_id": src}, session=s)["n"]
                amount = min(have, rng.randrange(1, 20))
                bank.update_one({"_id": src}, {"$inc": {"n": -amount}}, session=s)
                bank.update_one({"_id": dst}, {"$inc": {"n": amount}}, session=s)
                moved[:] = [(src, dst, amount)]

            try:
                with c.start_session() as s:
                    s.with_transaction(transfer)
                    self.seen(s.operation_time)
                self.done.extend(moved)
            except PyMongoError as e:
                if e.has_error_label("UnknownTransactionCommitResult"):
                    self.unknown.extend(moved)
                self.errors.append((time.monotonic(), type(e).__name__, str(e)[:200]))
                time.sleep(0.05)

    def seen(self, t):
        if t is not None and (self.latest is None or t > self.latest):
            self.latest = t

    def stop(self):
        self._done.set()
        self._thread.join(timeout=150)


def balances_in_one_snapshot(c, after):
    """Every balance, read in one transaction through `c` that starts after operation time
    `after` (the newest commit's): a read through another router carries it on, as a
    causally consistent client does, or its snapshot may predate that commit."""
    with c.start_session(causal_consistency=True) as s:
        s.advance_operation_time(after)
        with s.start_transaction():
            return {d["_id"]: d["n"] for d in c.smoke.bank.find({}, session=s)}


def check_balances(transfers, got, where):
    """`got` is what the committed transfers made of the start, give or take unknown ones."""
    want = {i: START for i in range(ACCOUNTS)}
    slack = {i: 0 for i in range(ACCOUNTS)}
    for src, dst, amount in transfers.done:
        want[src] -= amount
        want[dst] += amount
    for src, dst, amount in transfers.unknown:
        slack[src] += amount
        slack[dst] += amount
    if sum(got.values()) != ACCOUNTS * START or len(got) != ACCOUNTS:
        fail(f"{where}: the balances {got} do not hold the start's total")
    off = {i: (got.get(i), want[i]) for i in want if abs(got.get(i, 0) - want[i]) > slack[i]}
    if off:
        fail(f"{where}: balances (found, committed) {off}")


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

# 4. A writer and cross-shard transfers through site B's router while shard0's
# preferred primary is stopped.
bank = db.bank
db.drop_collection("bank")
bank.insert_many([{"_id": i, "n": START} for i in range(ACCOUNTS)])
a.admin.command("shardCollection", "smoke.bank", key={"_id": 1})
a.admin.command("split", "smoke.bank", middle={"_id": ACCOUNTS // 2})
a.admin.command("moveChunk", "smoke.bank", find={"_id": 0}, to="shard0")
a.admin.command("moveChunk", "smoke.bank", find={"_id": ACCOUNTS // 2}, to="shard1")
transfers = Transfers(client("B"))
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
before = len(transfers.done)
wait_for("10 more committed transfers", lambda: len(transfers.done) >= before + 10, FAILOVER_BOUND_S)
w.stop()
transfers.stop()
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
step(
    f"{len(transfers.done)} cross-shard transfers committed through the failover, "
    f"{len(transfers.unknown)} unknown, {len(transfers.errors)} errors"
    + (f" (first: {transfers.errors[0][1]}: {transfers.errors[0][2]})" if transfers.errors else "")
)
if not transfers.done:
    fail("no transfer committed")
for site, c in clients.items():
    check_balances(transfers, balances_in_one_snapshot(c, transfers.latest), f"site {site} router")
step("every router's snapshot read holds the committed transfers' balances")


async def one_async_transfer():
    """One cross-shard transfer through the asyncio client (pymongo's successor to motor)."""
    c = pymongo.AsyncMongoClient(f"mongodb://{USER}:{PASSWORD}@127.0.0.1:{PORTS['C']}/?authSource=admin")
    bank = c.get_database("smoke", write_concern=MAJORITY).bank

    async def transfer(s):
        await bank.update_one({"_id": 0}, {"$inc": {"n": -1}}, session=s)
        await bank.update_one({"_id": ACCOUNTS - 1}, {"$inc": {"n": 1}}, session=s)

    async with c.start_session() as s:
        await s.with_transaction(transfer)
        transfers.seen(s.operation_time)
    await c.close()


asyncio.run(one_async_transfer())
transfers.done.append((0, ACCOUNTS - 1, 1))
check_balances(transfers, balances_in_one_snapshot(a, transfers.latest), "after the asyncio transfer")
step("a cross-shard transfer through the asyncio client (site C's router)")
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
