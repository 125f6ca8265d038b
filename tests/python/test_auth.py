"""pymongo against `bulwark local --auth`: SCRAM-SHA-256 and SCRAM-SHA-1 logins over plain
TCP and over TLS (requireTLS, certificates made with openssl), failures and a role check. Starts its own server (memory engine, a free port) from BULWARK_BIN or
target/{debug,release}/bulwark; fails, never skips, when there is none."""
import os
import socket
import subprocess
import time
from pathlib import Path

import pymongo
import pytest
from pymongo.errors import OperationFailure

ADMIN, ADMIN_PW = "admin", "admin-pw"


def _binary():
    root = Path(__file__).resolve().parents[2]
    candidates = [os.environ.get("BULWARK_BIN", "")]
    target = os.environ.get("CARGO_TARGET_DIR", str(root / "target"))
    candidates += [f"{target}/debug/bulwark", f"{target}/release/bulwark"]
    for c in candidates:
        if c and Path(c).is_file():
            return c
    raise RuntimeError(f"no bulwark binary among {candidates}; build it first")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(d, extra, **client_kwargs):
    """Starts `bulwark local --auth` in `d` with `extra` flags; yields its port once root
    can ping it."""
    port = _free_port()
    proc = subprocess.Popen(
        [_binary(), "local", "--port", str(port), "--dir", str(d / "data"), "--layout", "single",
         "--engine", "memory", "--auth", "--admin-user", ADMIN, "--admin-password", ADMIN_PW, *extra],
        stdout=subprocess.DEVNULL, stderr=open(d / "log", "w"))
    try:
        for _ in range(200):
            try:
                c = pymongo.MongoClient(f"mongodb://{ADMIN}:{ADMIN_PW}@127.0.0.1:{port}/",
                                        serverSelectionTimeoutMS=500, **client_kwargs)
                c.admin.command("ping")
                c.close()
                break
            except Exception:
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("auth"), [])


def _make_pki(d):
    """A CA and a server certificate for 127.0.0.1, made with the openssl command."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=bulwark-test-ca",
        "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
        "-CAcreateserial", "-days", "2", "-extfile", str(d / "san.ext"), "-out", str(d / "server.pem"))
    return d / "ca.pem"


@pytest.fixture(scope="module")
def tls_port(tmp_path_factory):
    d = tmp_path_factory.mktemp("auth-tls")
    ca = _make_pki(d)
    extra = ["--tls-mode", "requireTLS", "--tls-cert", str(d / "server.pem"), "--tls-key", str(d / "server.key")]
    for p in _serve(d, extra, tls=True, tlsCAFile=str(ca)):
        yield p, str(ca)


def _client(port, user, pw, mech, source="admin"):
    return pymongo.MongoClient(f"mongodb://127.0.0.1:{port}/", username=user, password=pw,
                               authSource=source, authMechanism=mech,
                               serverSelectionTimeoutMS=5000)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
def test_login_both_mechanisms(port, mech):
    c = _client(port, ADMIN, ADMIN_PW, mech)
    status = c.admin.command("connectionStatus")["authInfo"]
    assert status["authenticatedUsers"] == [{"user": ADMIN, "db": "admin"}]
    assert {"role": "root", "db": "admin"} in status["authenticatedUserRoles"]
    c.app.things.insert_one({"mech": mech})
    assert c.app.things.find_one({"mech": mech})["mech"] == mech


def test_default_mechanism_negotiation_and_saslprep(port):
    root = _client(port, ADMIN, ADMIN_PW, "SCRAM-SHA-256")
    root.app.command("createUser", "ünïcode", pwd="IX\u00ADpw", roles=["read"])
    # No mechanism given: pymongo asks saslSupportedMechs and picks SCRAM-SHA-256;
    # SASLprep maps the soft hyphen to nothing.
    c = pymongo.MongoClient(f"mongodb://127.0.0.1:{port}/", username="ünïcode", password="IXpw",
                            authSource="app", serverSelectionTimeoutMS=5000)
    c.app.command("ping")
    c.app.things.find_one()


@pytest.mark.parametrize("user,pw", [(ADMIN, "wrong"), ("nobody", ADMIN_PW)])
def test_bad_credentials_fail_with_18(port, user, pw):
    c = _client(port, user, pw, "SCRAM-SHA-256")
    with pytest.raises(OperationFailure) as e:
        c.admin.command("ping")
    assert e.value.code == 18


def test_read_role_cannot_write(port):
    root = _client(port, ADMIN, ADMIN_PW, "SCRAM-SHA-256")
    root.app.command("createUser", "reader", pwd="pw", roles=["read"], mechanisms=["SCRAM-SHA-1"])
    c = _client(port, "reader", "pw", "SCRAM-SHA-1", source="app")
    c.app.things.find_one()
    with pytest.raises(OperationFailure) as e:
        c.app.things.insert_one({"x": 1})
    assert e.value.code == 13


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
def test_login_over_tls(tls_port, mech):
    port, ca = tls_port
    c = pymongo.MongoClient(f"mongodb://127.0.0.1:{port}/", username=ADMIN, password=ADMIN_PW,
                            authMechanism=mech, tls=True, tlsCAFile=ca, serverSelectionTimeoutMS=5000)
    c.app.tls_things.insert_one({"mech": mech})
    assert c.app.tls_things.find_one({"mech": mech})["mech"] == mech


def test_plain_client_is_refused_on_a_require_tls_port(tls_port):
    port, _ = tls_port
    c = pymongo.MongoClient(f"mongodb://127.0.0.1:{port}/", username=ADMIN, password=ADMIN_PW,
                            serverSelectionTimeoutMS=1500)
    with pytest.raises(pymongo.errors.ServerSelectionTimeoutError):
        c.admin.command("ping")
