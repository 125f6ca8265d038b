"""What the docker-compose smoke tests share (deploy/smoke.py, deploy/smoke_sharded.py):
the routers' addresses and credentials from the compose file's variables, and how a step
is printed, failed and waited for."""

import os
import sys
import threading
import time

import pymongo
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

USER = os.environ.get("BULWARK_ADMIN_USER", "admin")
PASSWORD = os.environ.get("BULWARK_ADMIN_PASSWORD", "bulwark")
PORTS = {
    "A": int(os.environ.get("BULWARK_PORT_A", "27017")),
    "B": int(os.environ.get("BULWARK_PORT_B", "27018")),
    "C": int(os.environ.get("BULWARK_PORT_C", "27019")),
}
FAILOVER_BOUND_S = float(os.environ.get("FAILOVER_BOUND_S", "30"))
MAJORITY = WriteConcern("majority", wtimeout=10_000)

start = time.monotonic()


def step(msg):
    print(f"[{time.monotonic() - start:6.1f}s] {msg}", flush=True)


def fail(msg):
    step(f"FAIL: {msg}")
    sys.exit(1)


def client(site, **kw):
    uri = f"mongodb://{USER}:{PASSWORD}@127.0.0.1:{PORTS[site]}/?authSource=admin"
    return pymongo.MongoClient(uri, serverSelectionTimeoutMS=10_000, socketTimeoutMS=15_000, **kw)


def wait_for(what, predicate, bound_s):
    deadline = time.monotonic() + bound_s
    last = None
    while time.monotonic() < deadline:
        try:
            v = predicate()
            if v:
                return v
        except PyMongoError as e:
            last = e
        time.sleep(0.2)
    fail(f"{what} not within {bound_s:.0f} s (last error: {last})")


class Writer:
    """Inserts `doc(i)` for i = 0, 1, ... into `coll` from a thread until `stop()`; `acked`
    holds (`_id`, time) of each acknowledged insert, `errors` (time, kind, message)."""

    def __init__(self, coll, doc):
        self.acked, self.errors = [], []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(coll, doc), daemon=True)
        self._thread.start()

    def _run(self, coll, doc):
        i = 0
        while not self._done.is_set():
            d = doc(i)
            try:
                coll.insert_one(d)
                self.acked.append((d["_id"], time.monotonic()))
            except PyMongoError as e:
                self.errors.append((time.monotonic(), type(e).__name__, str(e)[:200]))
                time.sleep(0.05)
            i += 1

    def stop(self):
        self._done.set()
        self._thread.join(timeout=20)
