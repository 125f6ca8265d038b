"""What the docker-compose smoke tests share (deploy/smoke.py, deploy/smoke_sharded.py):
the routers' addresses and credentials from the compose file's variables, and how a step
is printed, failed and waited for."""

import os
import sys
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
