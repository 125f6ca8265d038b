"""Transactions through pymongo's APIs: the callback API (`with_transaction`), explicit
start/commit/abort, and the asyncio client (pymongo's successor to motor)."""

import asyncio
import os
import threading

import pymongo
import pytest
from pymongo.errors import OperationFailure


def test_with_transaction_commits_a_transfer(client, db):
    db.accounts.insert_many([{"_id": "a", "n": 100}, {"_id": "b", "n": 0}])

    def transfer(session):
        db.accounts.update_one({"_id": "a"}, {"$inc": {"n": -40}}, session=session)
        db.accounts.update_one({"_id": "b"}, {"$inc": {"n": 40}}, session=session)

    with client.start_session() as s:
        s.with_transaction(transfer)
    assert {d["_id"]: d["n"] for d in db.accounts.find()} == {"a": 60, "b": 40}


def test_an_aborted_transaction_leaves_nothing(client, db):
    db.c.insert_one({"_id": 1})
    with client.start_session() as s:
        s.start_transaction()
        db.c.insert_one({"_id": 2}, session=s)
        db.c.delete_one({"_id": 1}, session=s)
        assert sorted(d["_id"] for d in db.c.find({}, session=s)) == [2]
        s.abort_transaction()
    assert [d["_id"] for d in db.c.find()] == [1]


def test_a_raised_callback_aborts_and_reraises(client, db):
    db.c.insert_one({"_id": 1})

    def fails(session):
        db.c.insert_one({"_id": 2}, session=session)
        raise ValueError("the application changed its mind")

    with client.start_session() as s:
        with pytest.raises(ValueError):
            s.with_transaction(fails)
    assert db.c.count_documents({}) == 1


def test_concurrent_with_transaction_increments_all_count(client, db):
    db.counter.insert_one({"_id": 1, "n": 0})
    workers, each = 4, 10

    def bump(session):
        d = db.counter.find_one({"_id": 1}, session=session)
        db.counter.update_one({"_id": 1}, {"$set": {"n": d["n"] + 1}}, session=session)

    def worker():
        with client.start_session() as s:
            for _ in range(each):
                s.with_transaction(bump)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert db.counter.find_one({"_id": 1})["n"] == workers * each


def test_count_is_refused_in_a_transaction(client, db):
    with client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as e:
            db.command("count", "c", session=s)
        assert e.value.code == 263
        s.abort_transaction()


def test_the_asyncio_client_runs_a_transaction(db):
    uri = os.environ.get("BULWARK_URI", "mongodb://127.0.0.1:27017/")

    async def run():
        client = pymongo.AsyncMongoClient(uri, serverSelectionTimeoutMS=10000)
        coll = client[db.name].items
        await coll.insert_one({"_id": 0})

        async def add(session):
            await coll.insert_one({"_id": 1}, session=session)
            await coll.insert_one({"_id": 2}, session=session)

        async with client.start_session() as s:
            await s.with_transaction(add)
        ids = sorted([d["_id"] async for d in coll.find()])
        await client.close()
        return ids

    assert asyncio.run(run()) == [0, 1, 2]
