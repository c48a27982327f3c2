"""5.x ACL (aclEnable=true with the gRPC endpoint on): the official Python and Java 5.x clients
sign their requests (``authorization``: HMAC-SHA1 of ``x-mq-date-time``), and the endpoint
allows or refuses them by the same plain_acl.yml and the same rules as 4.x requests
(tests/support/acl.py: the accounts the 4.x ACL tests use)."""
from __future__ import annotations

import json

import pytest

from mqcore.grpc.auth import parse_authorization, sign, signature_matches
from tests.grpc.conftest import TEST_CONF, grpc_addr, run_py5_raw
from tests.grpc.rawclient import RawClient, d
from tests.grpc.test_java_client import check_all_once, run_java5
from tests.support import acl
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-acl")
    yml = root / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)
    conf = dict(TEST_CONF, aclEnable="true", plainAclFile=str(yml), brokerAccessKey=acl.ADMIN[0],
                brokerSecretKey=acl.ADMIN[1])
    with BrokerProcess(root / "store", conf=conf) as b:
        b.grpc_addr = grpc_addr(b)
        yield b


def _py5(b, account, steps) -> tuple[list, str | None]:
    """(results, the error of the step that failed or None)."""
    proc = run_py5_raw(b.py5, b.grpc_addr, steps, credentials=account)
    results, error = [], None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            results.append(json.loads(line[7:]))
        elif line.startswith("ERROR "):
            error = json.loads(line[6:])["error"]
    assert error is not None or proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return results, error


def _send(topic):
    return [{"op": "send", "topic": topic, "body": "acl"}]


def _receive(topic, group):
    return [{"op": "receive", "topic": topic, "group": group, "want": 1, "invisible_s": 30, "ack": True,
             "timeout_s": 15}]


# name -> (account, steps, allowed?, the refusal's words when refused) — the 4.x scenarios of
# tests/support/acl.py that a 5.x client can play
PY_CASES = {
    "send_ok": (acl.NORMAL, _send("TopicBoth"), True, None),
    "send_pub_only_topic": (acl.NORMAL, _send("TopicPub"), True, None),
    "send_wrong_secret": ((acl.NORMAL[0], "wrongSecret1"), _send("TopicBoth"), False,
                          "Check signature failed for accessKey=normalUser"),
    "send_unsigned": (("", ""), _send("TopicBoth"), False, "No accessKey is configured"),
    "send_unknown_key": (("nobodyUser", "nobodySecret"), _send("TopicBoth"), False, "No acl config for nobodyUser"),
    "send_denied_topic": (acl.NORMAL, _send("TopicDenied"), False, "TopicDenied"),
    "send_sub_only_topic": (acl.NORMAL, _send("TopicSub"), False, "No default permission for topic:TopicSub"),
    "receive_sub_topic": (acl.NORMAL, _receive("TopicSub", "CG_acl"), True, None),
    "receive_pub_only_topic": (acl.NORMAL, _receive("TopicPub", "CG_acl"), False,
                               "No default permission for topic:TopicPub"),
    "receive_denied_group": (acl.NORMAL, _receive("TopicBoth", "GroupDenied"), False,
                             "No default permission for group:GroupDenied"),
    "send_admin_unlisted_topic": (acl.ADMIN, _send("TopicAdminOnly"), True, None),
    "send_white_account_wrong_secret": ((acl.WHITE[0], "wrongSecret1"), _send("TopicDenied"), True, None),
}


@pytest.mark.parametrize("name", list(PY_CASES))
def test_python_client(acl_broker, py5_python, name):
    account, steps, allowed, words = PY_CASES[name]
    acl_broker.py5 = py5_python
    if steps[0]["op"] == "receive" and allowed:  # something to receive
        _, error = _py5(acl_broker, acl.ADMIN, _send(steps[0]["topic"]))
        assert error is None, error
    results, error = _py5(acl_broker, account, steps)
    if allowed:
        assert error is None and len(results) == len(steps), error
        if steps[0]["op"] == "receive":
            assert len(results[0]["messages"]) == 1
    else:
        # the client reports a refused route lookup without the broker's message (the raw test
        # below checks the messages); a refused send or receive carries it
        assert error is not None, results
        assert words in error or error == f"failed to fetch topic:{steps[0]['topic']} route.", error


def test_raw_refusals_carry_the_proxys_codes(acl_broker):
    """No or wrong credentials: UNAUTHORIZED; a missing permission: FORBIDDEN (the proxy's
    codes), with the 4.x message."""
    date = "20250101T120000Z"

    def meta(ak, sk):
        return [("x-mq-date-time", date),
                ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                                  f"Signature={sign(sk, date)}")]

    with RawClient(acl_broker.grpc_addr) as c:
        r = c.send("TopicBoth", b"x")
        assert (r.status.code, r.status.message) == (d.UNAUTHORIZED, "No accessKey is configured")
    with RawClient(acl_broker.grpc_addr, meta=meta(acl.NORMAL[0], "wrongSecret1")) as c:
        assert c.send("TopicBoth", b"x").status.code == d.UNAUTHORIZED
    with RawClient(acl_broker.grpc_addr, meta=meta(*acl.NORMAL)) as c:
        r = c.send("TopicSub", b"x")
        assert (r.status.code, r.status.message) == (d.FORBIDDEN, "No default permission for topic:TopicSub")
        assert c.send("TopicBoth", b"x").status.code == d.OK
        status, _ = c.receive("TopicPub", "CG_acl")
        assert status.code == d.FORBIDDEN


def test_signature_header():
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=ak1//Rocketmq, SignedHeaders=x-mq-date-time, "
                               "Signature=ABCD") == ("ak1", "ABCD")
    assert parse_authorization("Bearer x") == (None, None)
    good = sign("secret12", "20250101T120000Z")
    assert signature_matches(good, "secret12", "20250101T120000Z")
    assert signature_matches(good.upper(), "secret12", "20250101T120000Z")  # C#/C++ clients: upper case
    assert not signature_matches(good, "secret12", "20250101T120001Z")
    assert not signature_matches("zz", "secret12", "20250101T120000Z")
    assert not signature_matches(good, "secret12", None)


def test_java_client_with_tls_right_and_wrong_credentials(acl_broker, tmp_path):
    """The Java client with its defaults (TLS) and an account: every message once; a wrong
    secret, or a topic the account may not publish to, and the producer does not start."""
    proc, results = run_java5(acl_broker.grpc_addr, "JavaAcl", "CG_acl_java", tmp_path, ssl="true",
                              ak=acl.ADMIN[0], sk=acl.ADMIN[1], bulk=12, settleMs=1000)
    check_all_once(proc, results, 12)
    proc, results = run_java5(acl_broker.grpc_addr, "JavaAcl", "CG_acl_java", tmp_path, ssl="true",
                              ak=acl.ADMIN[0], sk="wrongSecret1")
    assert proc.returncode == 2 and "error" in results[-1], proc.stdout[-2000:] + proc.stderr[-2000:]
    proc, results = run_java5(acl_broker.grpc_addr, "TopicSub", "CG_acl_java", tmp_path, ssl="true",
                              ak=acl.NORMAL[0], sk=acl.NORMAL[1])  # no PUB on TopicSub
    assert proc.returncode != 0 and "error" in results[-1], proc.stdout[-2000:] + proc.stderr[-2000:]
