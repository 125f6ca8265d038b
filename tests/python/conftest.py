import os

import pymongo
import pytest


@pytest.fixture(scope="session")
def client():
    uri = os.environ.get("BULWARK_URI", "mongodb://127.0.0.1:27017/")
    c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    c.admin.command("ping")  # fail loudly (not skip) when no server is running
    yield c
    c.close()


@pytest.fixture
def db(client, request):
    name = "py_" + request.node.name[:40]
    client.drop_database(name)
    yield client[name]
    client.drop_database(name)
