"""ACL 2.0's decision table, driven over real remoting: the users and ACL rules (created with the
AUTH_* admin requests, signed by the super user), and the cases, each a raw signed request whose
answer is classified allowed / denied. tests/broker/test_acl2.py runs it against mqbroker,
tests/reference/test_acl2_reference.py against Apache RocketMQ 5.3.3 (the same requests, the same
setup), so both answer the same table.

``APACHE`` records what Apache RocketMQ 5.3.3 answered (live, tests/reference/test_acl2_reference.py)
where it differs from mqbroker: 5.3.3's comparator of matching entries (AclAuthorizationHandler)
puts the *shorter* of two prefixes first and orders mixed patterns by their position in the rule,
a bug fixed after 5.3.3 (apache/rocketmq#9539); mqbroker uses the fixed order (most specific wins).
"""
from __future__ import annotations

import json
import time

from mqcore.acl import SessionCredentials
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, create_request

SUPER = ("rocketmq", "12345678")
ALICE = ("alice", "alicePassword1")
BOB = ("bob", "bobPassword1")
CAROL = ("carol", "carolPassword1")  # a user without any ACL
DAVE = ("dave", "davePassword1")  # disabled
EVE = ("eve", "evePassword1")  # Custom and Default policies
FRANK = ("frank", "frankPassword1")  # the cluster's admin
NOBODY = ("nobody", "nobodyPassword1")  # no such user

#: broker.conf for ACL 2.0 (mqbroker and Apache 5.3.3 alike)
CONF = {"authenticationEnabled": "true", "authorizationEnabled": "true",
        # Apache 5.3.3 checks nothing without the providers named (mqbroker: these are its defaults)
        "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
        "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
        "authenticationMetadataProvider":
            "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
        "authorizationMetadataProvider":
            "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
        "initAuthenticationUser": json.dumps({"username": SUPER[0], "password": SUPER[1]}),
        "innerClientAuthenticationCredentials": json.dumps({"accessKey": SUPER[0], "secretKey": SUPER[1]})}


def entry(resource, actions, decision="Allow", ips=None) -> dict:
    e = {"resource": resource, "actions": actions, "decision": decision}
    if ips:
        e["sourceIps"] = ips
    return e


#: user -> (password, userType, userStatus)
USERS = {ALICE: "Normal", BOB: "Normal", CAROL: "Normal", DAVE: "Normal", EVE: "Normal", FRANK: "Normal"}
#: user -> its policies (in the order the entries are created: 5.3.3's answers depend on it)
ACLS = {
    ALICE: [{"policyType": "Custom", "entries": [
        entry("Topic:orders", ["Pub"]),
        entry("Topic:order*", ["Sub"]),
        entry("Topic:orderSecret", ["Pub", "Sub"], "Deny"),
        entry("Topic:pay*", ["Pub"]),
        entry("Topic:payroll*", ["Pub"], "Deny"),
        entry("Topic:payrollPublic", ["Pub"]),
        entry("Group:*", ["Sub"]),
        entry("Group:gDeny*", ["Sub"], "Deny"),
        entry("Topic:ipOnly", ["Pub"], ips=["10.0.0.0/8"]),
        entry("Topic:ipLocal", ["Pub"], ips=["127.0.0.1"]),
        entry("Topic:ipLocalCidr", ["Pub"], ips=["192.168.0.1", "127.0.0.0/8"]),
        entry("Topic:all", ["All"]),
        entry("Topic:created", ["Create"]),
    ]}],
    BOB: [{"policyType": "Custom", "entries": [
        entry("*", ["Pub", "Sub"]),
        entry("Topic:bobNo", ["Pub"], "Deny"),
    ]}],
    EVE: [{"policyType": "Custom", "entries": [entry("Topic:eveCustom", ["Pub"], "Deny")]},
          {"policyType": "Default", "entries": [entry("*", ["Pub"])]}],
    FRANK: [{"policyType": "Custom", "entries": [entry("Cluster:*", ["Get", "Update"])]}],
}


def sign(cmd, account):
    if account is not None:
        SessionCredentials(*account).sign(cmd)
    return cmd


def setup(rc, addr: str) -> None:
    """Users and ACLs, created as the super user; a failure says which."""
    for (name, password), utype in USERS.items():
        body = json.dumps({"username": name, "password": password, "userType": utype}).encode()
        r = rc.invoke(addr, sign(create_request(3001, {"username": name}, body), SUPER), 5000)
        assert r.code == ResponseCode.SUCCESS, (name, r.code, r.remark)
    body = json.dumps({"username": DAVE[0], "userStatus": "disable"}).encode()
    r = rc.invoke(addr, sign(create_request(3002, {"username": DAVE[0]}, body), SUPER), 5000)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    for (name, _), policies in ACLS.items():
        subject = f"User:{name}"
        body = json.dumps({"subject": subject, "policies": policies}).encode()
        r = rc.invoke(addr, sign(create_request(3006, {"subject": subject}, body), SUPER), 5000)
        assert r.code == ResponseCode.SUCCESS, (name, r.code, r.remark)


def _send(topic, group):
    return RC.SEND_MESSAGE_V2, {"a": group or "PG_acl2", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
                                "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false",
                                "m": "false"}, b"acl2"


def _pull(topic, group):
    return RC.PULL_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0",
                             "maxMsgNums": "1", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
                             "subscription": "*", "subVersion": "0"}, b""


def _create(topic, group):
    return RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1",
                                        "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                        "topicSysFlag": "0", "order": "false"}, b""


def _heartbeat(topic, group):
    body = {"clientID": "acl2-client", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "classFilterMode": False, "tagsSet": [],
                                 "codeSet": [], "subVersion": 0, "expressionType": "TAG"}]}]}
    return RC.HEART_BEAT, {}, json.dumps(body).encode()


def _offset(topic, group):
    return RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0"}, b""


def _max_offset(topic, group):
    return RC.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"}, b""


def _get_user(topic, group):
    return 3004, {"username": ALICE[0]}, b""


def _list_acl(topic, group):
    return 3010, {}, b""


KINDS = {"send": _send, "pull": _pull, "create": _create, "heartbeat": _heartbeat, "offset": _offset,
         "max_offset": _max_offset, "get_user": _get_user, "list_acl": _list_acl}

#: name -> (account (None: unsigned), kind, topic, group, allowed by mqbroker)
CASES = {
    "super_sends_anywhere": (SUPER, "send", "anyTopic", "PG_acl2", True),
    "super_creates_topic": (SUPER, "create", "superTopic", "", True),
    "super_reads_users": (SUPER, "get_user", "", "", True),
    "unsigned_refused": (None, "send", "orders", "PG_acl2", False),
    "unknown_user_refused": (NOBODY, "send", "orders", "PG_acl2", False),
    "bad_signature_refused": ((ALICE[0], "wrongPassword1"), "send", "orders", "PG_acl2", False),
    "disabled_user_refused": (DAVE, "send", "orders", "PG_acl2", False),
    "user_without_acl_refused": (CAROL, "send", "orders", "PG_acl2", False),
    "literal_topic_pub": (ALICE, "send", "orders", "PG_acl2", True),
    "prefix_topic_sub": (ALICE, "pull", "orders", "gA", True),
    "prefix_sub_does_not_give_pub": (ALICE, "send", "orderX", "PG_acl2", False),
    "literal_deny_beats_prefix_allow": (ALICE, "pull", "orderSecret", "gA", False),
    "literal_deny_on_pub": (ALICE, "send", "orderSecret", "PG_acl2", False),
    "prefix_allow": (ALICE, "send", "payA", "PG_acl2", True),
    "longer_prefix_deny_beats_shorter_allow": (ALICE, "send", "payrollX", "PG_acl2", False),
    "literal_allow_beats_prefix_deny": (ALICE, "send", "payrollPublic", "PG_acl2", True),
    "group_wildcard_allow": (ALICE, "pull", "orders", "gOther", True),
    "group_prefix_deny_beats_wildcard": (ALICE, "pull", "orders", "gDenyX", False),
    "source_ip_outside_cidr": (ALICE, "send", "ipOnly", "PG_acl2", False),
    "source_ip_exact": (ALICE, "send", "ipLocal", "PG_acl2", True),
    "source_ip_in_cidr_list": (ALICE, "send", "ipLocalCidr", "PG_acl2", True),
    "action_all_covers_pub": (ALICE, "send", "all", "PG_acl2", True),
    "action_all_covers_create": (ALICE, "create", "all", "", True),
    "pub_does_not_give_create": (ALICE, "create", "orders", "", False),
    "create_action": (ALICE, "create", "created", "", True),
    "normal_user_no_cluster_get": (ALICE, "get_user", "", "", False),
    "offset_query_needs_sub_or_get": (ALICE, "offset", "orders", "gA", True),
    "heartbeat_allowed": (ALICE, "heartbeat", "orders", "gA", True),
    "heartbeat_denied_group": (ALICE, "heartbeat", "orders", "gDenyX", False),
    "get_action_missing": (ALICE, "max_offset", "orders", "", False),
    "retry_topic_send_is_group_sub": (ALICE, "send", "%RETRY%gA", "gA", True),
    "retry_topic_send_denied_group": (ALICE, "send", "%RETRY%gDenyX", "gDenyX", False),
    "retry_topic_pull_checks_group_only": (ALICE, "pull", "%RETRY%gA", "gA", True),
    "any_resource_allows": (BOB, "send", "anyTopic", "PG_acl2", True),
    "typed_deny_beats_any_resource": (BOB, "send", "bobNo", "PG_acl2", False),
    "any_resource_lacks_create": (BOB, "create", "bobTopic", "", False),
    "any_resource_lacks_cluster_get": (BOB, "get_user", "", "", False),
    "custom_policy_before_default": (EVE, "send", "eveCustom", "PG_acl2", False),
    "default_policy_when_custom_misses": (EVE, "send", "eveOther", "PG_acl2", True),
    "cluster_get": (FRANK, "get_user", "", "", True),
    "cluster_get_lists_acls": (FRANK, "list_acl", "", "", True),
    "cluster_admin_no_topic_pub": (FRANK, "send", "orders", "PG_acl2", False),
}

#: Apache RocketMQ 5.3.3's answer where it differs from mqbroker's (see the module's docstring);
#: every other case was answered the same by 5.3.3 (tests/reference/test_acl2_reference.py)
APACHE = {
    # 5.3.3 sorts the shorter prefix (pay*, Allow) first
    "longer_prefix_deny_beats_shorter_allow": True,
}

#: the remarks of an ACL refusal (Apache's AuthenticationException / AuthorizationException texts)
_DENIAL_MARKS = ("has no permission to access", "check signature failed", "is not found", "not found.",
                 "is disabled", "username cannot be null", "Authorization failed")


def is_denial(code: int, remark: str | None) -> bool:
    return code == ResponseCode.NO_PERMISSION and any(m in (remark or "") for m in _DENIAL_MARKS)


def run_case(rc, addr: str, name: str) -> tuple[int, str | None]:
    account, kind, topic, group, _ = CASES[name]
    code, ext, body = KINDS[kind](topic, group)
    r = rc.invoke(addr, sign(create_request(code, ext, body), account), 5000)
    return r.code, r.remark


def decisions(rc, addr: str) -> dict[str, tuple[bool, int, str | None]]:
    """name -> (allowed?, response code, remark) for every case."""
    out = {}
    for name in CASES:
        code, remark = run_case(rc, addr, name)
        out[name] = (not is_denial(code, remark), code, remark)
    return out
