"""One plain_acl.yml and the scenarios the ACL tests share (tests/broker/test_acl*.py,
tests/reference/test_acl_reference.py), so mqbroker and the Java broker answer the same file."""
from __future__ import annotations

ADMIN = ("adminUser", "adminSecret1")
NORMAL = ("normalUser", "normalSecret1")
#: an account whose clients on 127.0.0.1 need no signature (and, as in RocketMQ, get no checks)
WHITE = ("whiteUser", "whiteSecret1")

PLAIN_ACL_YML = f"""\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: {NORMAL[0]}
    secretKey: {NORMAL[1]}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicPub=PUB
      - TopicSub=SUB
      - TopicBoth=PUB|SUB
      - TopicDenied=DENY
    groupPerms:
      - GroupDenied=DENY
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {WHITE[0]}
    secretKey: {WHITE[1]}
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
"""

#: name -> (account (ak, sk) or None for unsigned, kind, topic, group, allowed?)
RAW = {
    "send_ok": (NORMAL, "send", "TopicBoth", "PG_acl", True),
    "send_pub_only_topic": (NORMAL, "send", "TopicPub", "PG_acl", True),
    "send_wrong_secret": ((NORMAL[0], "wrongSecret1"), "send", "TopicBoth", "PG_acl", False),
    "send_unsigned": (None, "send", "TopicBoth", "PG_acl", False),
    "send_unknown_key": (("nobodyUser", "nobodySecret"), "send", "TopicBoth", "PG_acl", False),
    "send_denied_topic": (NORMAL, "send", "TopicDenied", "PG_acl", False),
    "send_sub_only_topic": (NORMAL, "send", "TopicSub", "PG_acl", False),
    "send_default_topic": (NORMAL, "send", "TopicOther", "PG_acl", False),
    "pull_sub_topic": (NORMAL, "pull", "TopicSub", "CG_acl", True),
    "pull_pub_only_topic": (NORMAL, "pull", "TopicPub", "CG_acl", False),
    "pull_denied_group": (NORMAL, "pull", "TopicBoth", "GroupDenied", False),
    "offset_ok": (NORMAL, "offset", "TopicSub", "CG_acl", True),
    "create_topic_non_admin": (NORMAL, "create", "TopicNew", "", False),
    "create_topic_admin": (ADMIN, "create", "TopicNewAdmin", "", True),
    "heartbeat_pub_only_topic": (NORMAL, "heartbeat", "TopicPub", "CG_acl", False),
    "heartbeat_ok": (NORMAL, "heartbeat", "TopicSub", "CG_acl", True),
    "send_admin_unlisted_topic": (ADMIN, "send", "TopicAdminOnly", "PG_acl", True),
    "send_white_account_wrong_secret": ((WHITE[0], "wrongSecret1"), "send", "TopicDenied", "PG_acl", True),
}

#: the message RocketMQ's AclException carries for each refused scenario
DENIAL = {
    "send_wrong_secret": "Check signature failed for accessKey=normalUser",
    "send_unsigned": "No accessKey is configured",
    "send_unknown_key": "No acl config for nobodyUser",
    "send_denied_topic": "No default permission for topic:TopicDenied",
    "send_sub_only_topic": "No default permission for topic:TopicSub",
    "send_default_topic": "No default permission for topic:TopicOther",
    "pull_pub_only_topic": "No default permission for topic:TopicPub",
    "pull_denied_group": "No default permission for group:GroupDenied",
    "create_topic_non_admin": "Need admin permission for request code=17, but accessKey=normalUser is not",
    "heartbeat_pub_only_topic": "No default permission for topic:TopicPub",
}


def driver_args(names=None) -> list[str]:
    """AclScenarios.java arguments for the raw scenarios."""
    out = []
    for name, (account, kind, topic, group, _ok) in RAW.items():
        if names is None or name in names:
            ak, sk = account or ("", "")
            out.append(f"{name}|{ak}|{sk}|{kind}|{topic}|{group}")
    return out


def parse_results(stdout: str) -> dict[str, str]:
    """'RESULT name rest' lines -> {name: rest}."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            _, name, rest = line.split(" ", 2)
            out[name] = rest
    return out
