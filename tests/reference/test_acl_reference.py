"""Plain ACL against Apache RocketMQ: the Java 4.9.7 broker with ``aclEnable=true`` and the
same plain_acl.yml as mqbroker (tests/support/acl.py), asked the same requests by the official
4.9.8 Java client's ``AclClientRPCHook``; the Java client's signature is our signer's test vector."""
from __future__ import annotations

import json

import pytest

from mqcore.acl.signing import SIGNATURE, content, signature
from mqcore.acl.validator import DENIED_CODE, EXCEPTION_NAME
from tests.support import acl
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, JavaNamesrv, run_java_driver

pytestmark = pytest.mark.timeout(400)

VECTOR = f"vector|{acl.NORMAL[0]}|{acl.NORMAL[1]}|vector||"


def _remark_core(remark: str) -> str:
    """Java appends the throwing stack frame (", org.apache...validate(File.java:663)")."""
    return remark.split(", org.apache.rocketmq.acl.plain.", 1)[0]


def _outcomes(stdout: str) -> dict[str, tuple[int, str]]:
    out = {}
    for name, rest in acl.parse_results(stdout).items():
        if name in acl.RAW:
            assert rest.startswith("code="), (name, rest)
            code, _, remark = rest.partition(" remark=")
            out[name] = (int(code[5:]), _remark_core(remark))
    return out


@pytest.fixture(scope="module")
def java_outcomes(tmp_path_factory):
    work = tmp_path_factory.mktemp("rmq-acl")
    with JavaNamesrv(work) as ns:
        broker = JavaBroker(work / "store", ns.addr, conf={"aclEnable": "true"})
        (broker.home / "conf" / "plain_acl.yml").write_text(acl.PLAIN_ACL_YML)
        with broker:
            p = run_java_driver("AclScenarios.java", [broker.addr, ns.addr, VECTOR, *acl.driver_args()])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_our_signature_is_the_java_clients_byte_for_byte(java_outcomes):
    line = next(x for x in java_outcomes.splitlines() if x.startswith("VECTOR vector "))
    _, _, fields, body_hex = line.split(" ", 3)
    ext = json.loads(fields)
    body = bytes.fromhex(body_hex)
    assert ext["AccessKey"] == acl.NORMAL[0] and len(ext) > 10  # the whole V2 send header was signed
    assert signature(content(ext, body), acl.NORMAL[1]) == ext[SIGNATURE]


def test_java_broker_refuses_as_the_scenario_table_says(java_outcomes):
    outcomes = _outcomes(java_outcomes)
    assert set(outcomes) == set(acl.RAW)
    for name, (_acct, _kind, _topic, _group, allowed) in acl.RAW.items():
        code, remark = outcomes[name]
        if allowed:
            assert EXCEPTION_NAME not in remark, (name, code, remark)
        else:
            assert (code, remark) == (DENIED_CODE, f"{EXCEPTION_NAME}: {acl.DENIAL[name]}"), name


def test_mqbroker_answers_the_java_clients_requests_as_the_java_broker(java_outcomes, tmp_path):
    yml = tmp_path / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)
    conf = {"aclEnable": "true", "plainAclFile": str(yml), "brokerAccessKey": acl.ADMIN[0],
            "brokerSecretKey": acl.ADMIN[1]}
    java_client = [f"jprod_ok|{acl.NORMAL[0]}|{acl.NORMAL[1]}|produce|TopicBoth|PG_java",
                   f"jprod_bad_secret|{acl.NORMAL[0]}|wrongSecret1|produce|TopicBoth|PG_java",
                   f"jprod_sub_only|{acl.NORMAL[0]}|{acl.NORMAL[1]}|produce|TopicSub|PG_java",
                   f"jconsume|{acl.NORMAL[0]}|{acl.NORMAL[1]}|consume|TopicBoth|CG_java"]
    with BrokerProcess(tmp_path / "store", conf=conf) as b:
        p = run_java_driver("AclScenarios.java", [b.broker_addr, b.namesrv_addr, *acl.driver_args(), *java_client])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ours = _outcomes(p.stdout)
    java = _outcomes(java_outcomes)
    for name in acl.RAW:
        if acl.RAW[name][4]:
            assert EXCEPTION_NAME not in ours[name][1], (name, ours[name])
        else:
            assert ours[name] == java[name], name
    results = acl.parse_results(p.stdout)
    assert results["jprod_ok"] == "OK status=SEND_OK"
    assert results["jprod_bad_secret"].startswith(f"FAIL code={DENIED_CODE} {EXCEPTION_NAME}: Check signature failed")
    assert results["jprod_sub_only"].startswith(f"FAIL code={DENIED_CODE} {EXCEPTION_NAME}: No default permission "
                                                "for topic:TopicSub")
    assert results["jconsume"].startswith("OK got=") and int(results["jconsume"][7:]) >= 1, results["jconsume"]
