"""pymongo against a live `bulwark local`: every command of the CRUD slice."""
import datetime
import time
import warnings

import pymongo
import pytest
from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, InsertOne, ReturnDocument, UpdateOne, DeleteOne, ReplaceOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure


def test_handshake(client):
    hello = client.admin.command("hello")
    assert hello["msg"] == "isdbgrid"
    assert hello["maxWireVersion"] >= 21
    assert client.admin.command("buildInfo")["version"].startswith("7.")
    assert "enableTestCommands" in client.admin.command("getParameter", "*")
    assert client.admin.command("serverStatus")["process"] == "mongos"
    assert "you" in client.admin.command("whatsmyuri")
    assert client.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == []
    assert "argv" in client.admin.command("getCmdLineOpts")


def test_crud_roundtrip(db):
    c = db.items
    ids = c.insert_many([{"i": i, "sq": i * i, "tags": ["t%d" % (i % 3)]} for i in range(120)]).inserted_ids
    assert len(ids) == 120 and all(isinstance(x, ObjectId) for x in ids)
    assert c.count_documents({"i": {"$gte": 100}}) == 20
    got = list(c.find({"tags": "t0"}, {"_id": 0, "i": 1}).sort("i", DESCENDING).skip(1).limit(2))
    assert got == [{"i": 114}, {"i": 111}]
    assert len(list(c.find().batch_size(5))) == 120
    assert sorted(c.distinct("tags")) == ["t0", "t1", "t2"]
    assert c.estimated_document_count() == 120
    # let variables reach $expr; comment is accepted
    got = list(c.find({"$expr": {"$eq": ["$i", "$$target"]}}, {"_id": 0, "i": 1}, let={"target": 7}, comment="by let"))
    assert got == [{"i": 7}]
    with pytest.raises(OperationFailure) as e:  # an undefined variable is an error, not "no match"
        c.count_documents({"$expr": {"$lt": ["$i", "$$n"]}}, comment="c")
    assert e.value.code == 17276
    r = c.update_many({"$expr": {"$lt": ["$i", "$$lim"]}}, [{"$set": {"low": "$$flag"}}], let={"lim": 2, "flag": True})
    assert r.modified_count == 2 and c.count_documents({"low": True}) == 2

    r = c.update_many({"i": {"$lt": 10}}, {"$inc": {"sq": 1}, "$push": {"tags": "low"}})
    assert (r.matched_count, r.modified_count) == (10, 10)
    assert c.find_one({"i": 3})["sq"] == 10
    r = c.update_one({"i": 1000}, {"$setOnInsert": {"new": True}, "$set": {"x": 1}}, upsert=True)
    assert r.upserted_id is not None
    assert c.find_one({"i": 1000}) == {"_id": r.upserted_id, "i": 1000, "new": True, "x": 1}
    assert c.delete_many({"i": {"$gte": 100}}).deleted_count == 21
    doc = c.find_one_and_update({"i": 5}, {"$set": {"s": "y"}}, return_document=ReturnDocument.AFTER)
    assert doc["s"] == "y"
    assert c.find_one_and_delete({"i": 6})["i"] == 6
    assert c.count_documents({}) == 99


def test_update_operators(db):
    c = db.ops
    c.insert_one({"_id": 1, "a": [1, 2, 3, 4], "n": 5, "o": {"x": 1}, "scores": [{"k": "a", "v": 1}, {"k": "b", "v": 2}]})
    c.update_one({"_id": 1}, {"$pull": {"a": {"$gte": 3}}, "$mul": {"n": 2}, "$rename": {"o": "p"}})
    c.update_one({"_id": 1}, {"$addToSet": {"a": {"$each": [2, 9]}}, "$max": {"n": 100}, "$unset": {"p": ""}})
    c.update_one({"_id": 1}, {"$push": {"a": {"$each": [0], "$sort": 1, "$slice": 3}}})
    c.update_one({"_id": 1, "scores.k": "b"}, {"$set": {"scores.$.v": 20}})
    c.update_one({"_id": 1}, {"$inc": {"scores.$[e].v": 5}}, array_filters=[{"e.k": "a"}])
    c.update_one({"_id": 1}, {"$currentDate": {"when": True}, "$pop": {"a": -1}})
    d = c.find_one({"_id": 1})
    assert d["a"] == [1, 2]
    assert d["n"] == 100
    assert "p" not in d and "o" not in d
    assert d["scores"] == [{"k": "a", "v": 6}, {"k": "b", "v": 20}]
    assert isinstance(d["when"], datetime.datetime)
    with pytest.raises(OperationFailure) as e:
        c.update_one({"_id": 1}, {"$set": {"a.b": 1}})
    assert e.value.code == 28


def test_bulk_write_ordered_and_unordered(db):
    c = db.bulk
    c.insert_one({"_id": 1})
    with pytest.raises(BulkWriteError) as e:
        c.bulk_write([InsertOne({"_id": 2}), InsertOne({"_id": 1}), InsertOne({"_id": 3})])
    assert [(w["index"], w["code"]) for w in e.value.details["writeErrors"]] == [(1, 11000)]
    assert c.count_documents({}) == 2
    with pytest.raises(BulkWriteError) as e:
        c.bulk_write([InsertOne({"_id": 1}), UpdateOne({"_id": 2}, {"$set": {"u": 1}}), InsertOne({"_id": 4}),
                      DeleteOne({"_id": 4}), ReplaceOne({"_id": 2}, {"r": 1})], ordered=False)
    details = e.value.details
    assert [(w["index"], w["code"]) for w in details["writeErrors"]] == [(0, 11000)]
    assert details["nInserted"] == 1 and details["nRemoved"] == 1 and details["nModified"] == 2
    assert c.find_one({"_id": 2}) == {"_id": 2, "r": 1}


def test_indexes_and_explain(db):
    c = db.idx
    c.insert_many([{"a": i, "b": i % 4, "at": datetime.datetime.utcnow()} for i in range(200)])
    assert c.create_index([("a", ASCENDING)], unique=True) == "a_1"
    c.create_index([("b", ASCENDING), ("a", DESCENDING)], name="b_a")
    c.create_index("h", name="h_hashed")  # plain index on a missing field
    names = [i["name"] for i in c.list_indexes()]
    assert names == ["_id_", "a_1", "b_a", "h_hashed"]
    plan = c.find({"a": 17}).explain()["queryPlanner"]["winningPlan"]
    assert plan["inputStage"]["stage"] == "IXSCAN" and plan["inputStage"]["indexName"] == "a_1"
    assert c.find({"nothing": 1}).explain()["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN"
    with pytest.raises(DuplicateKeyError) as e:
        c.insert_one({"a": 17})
    assert e.value.code == 11000 and e.value.details["keyValue"] == {"a": 17}
    c.drop_index("b_a")
    assert [i["name"] for i in c.list_indexes()] == ["_id_", "a_1", "h_hashed"]
    c.drop_indexes()
    assert [i["name"] for i in c.list_indexes()] == ["_id_"]


def test_ttl_expires(db):
    c = db.ttl
    c.create_index("at", expireAfterSeconds=1)
    c.insert_one({"_id": "old", "at": datetime.datetime.utcnow() - datetime.timedelta(minutes=5)})
    c.insert_one({"_id": "new", "at": datetime.datetime.utcnow() + datetime.timedelta(hours=1)})
    deadline = time.time() + 30  # bounds the wait for the background monitor
    while c.count_documents({"_id": "old"}) and time.time() < deadline:
        time.sleep(0.2)
    assert [d["_id"] for d in c.find()] == ["new"]


def test_aggregate(db):
    c = db.sales
    c.insert_many([{"item": "a", "q": 2, "p": 10}, {"item": "b", "q": 1, "p": 20}, {"item": "a", "q": 3, "p": 10}])
    got = list(c.aggregate([
        {"$group": {"_id": "$item", "revenue": {"$sum": {"$multiply": ["$q", "$p"]}}, "qs": {"$push": "$q"}}},
        {"$sort": {"_id": 1}},
    ]))
    assert got == [{"_id": "a", "revenue": 50, "qs": [2, 3]}, {"_id": "b", "revenue": 20, "qs": [1]}]
    assert list(c.aggregate([{"$count": "n"}])) == [{"n": 3}]
    assert len(list(c.aggregate([{"$sample": {"size": 2}}]))) == 2
    c.aggregate([{"$match": {"item": "a"}}, {"$out": "only_a"}])
    assert db.only_a.count_documents({}) == 2
    stats = list(c.aggregate([{"$collStats": {"count": {}}}]))
    assert stats[0]["count"]["count"] == 3


def test_collections_and_databases(client, db):
    db.create_collection("one")
    with pytest.raises(OperationFailure) as e:
        db.command("create", "one")
    assert e.value.code == 48
    db.two.insert_one({"x": 1})
    assert sorted(db.list_collection_names()) == ["one", "two"]
    assert [c["name"] for c in db.list_collections(filter={"name": "two"})] == ["two"]
    assert db.name in client.list_database_names()
    db.two.rename("three")
    assert sorted(db.list_collection_names()) == ["one", "three"]
    assert db.command("collStats", "three")["count"] == 1
    assert db.command("dbStats")["collections"] == 2
    db.drop_collection("one")
    assert db.list_collection_names() == ["three"]


def test_errors_have_mongodb_codes(db):
    with pytest.raises(OperationFailure) as e:
        db.command("notACommand")
    assert e.value.code == 59
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"a": {"$nope": 1}}))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", maxTimeMS=-5)
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.c.insert_one({"_id": [1, 2]})
    assert e.value.code == 53


def test_compressed_connection(client):
    host, port = client.address
    for comp in ("zlib", "zstd"):  # zstd through `backports.zstd`, which scripts/compat.sh installs
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # pymongo only warns when it cannot compress
            c = pymongo.MongoClient(host=host, port=port, compressors=comp)
        try:
            c.py_compressed.c.insert_one({"z": comp, "pad": "x" * 10000})
            assert c.py_compressed.c.find_one({"z": comp})["pad"] == "x" * 10000
        finally:
            c.drop_database("py_compressed")
            c.close()


def test_hostile_updates_fail_alone(db):
    """One update must never take the cluster down or leave the collection unwritable."""
    c = db.hostile
    # A dotted path of 100,000 parts overflowed a worker's stack and aborted every node.
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        c.update_one({}, {"$set": {".".join(["a"] * 100000): 1}}, upsert=True)
    assert e.value.code == 15, e.value.details
    # A date string cut inside a multi-byte character panicked, and the panic poisoned
    # the collection's lock: every later insert failed until a restart.
    c.insert_one({"_id": 1, "s": "2020-01-01T00:00+0000é"})
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        c.update_one({}, [{"$set": {"d": {"$dateFromString": {"dateString": "$s"}}}}])
    assert e.value.code == 241, e.value.details
    c.insert_one({"_id": 2})
    c.update_one({"_id": 2}, {"$set": {"x": 1}})
    assert c.count_documents({}) == 2
    db.client.admin.command("ping")


def test_wtimeout_loses_no_update(client, db):
    """Updates that return at their wtimeout are applied: the next ones build on them."""
    import threading

    from pymongo.errors import WriteConcernError
    from pymongo.write_concern import WriteConcern

    db.wt.insert_one({"_id": 1, "n": 0})
    c = db.get_collection("wt", write_concern=WriteConcern(w="majority", wtimeout=1))
    counts = {"ok": 0, "wce": 0, "other": 0}
    lock = threading.Lock()

    def work():
        for _ in range(100):
            try:
                c.update_one({"_id": 1}, {"$inc": {"n": 1}})
                key = "ok"
            except WriteConcernError:
                key = "wce"
            except pymongo.errors.PyMongoError:
                key = "other"
            with lock:
                counts[key] += 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    n = db.wt.find_one({"_id": 1})["n"]
    applied = counts["ok"] + counts["wce"]
    assert applied <= n <= applied + counts["other"], (n, counts)
