"""ACL permission bits and the rule that compares a needed permission with an owned one
(RocketMQ 4.x ``acl.common.Permission``; the values are the ones 4.x uses, so a
permission reads the same in logs and docs on both sides)."""
from __future__ import annotations

from mqcore.errors import AclConfigError
from mqcore.remoting.codes import RequestCode as RC

DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

#: the spellings ``plain_acl.yml`` accepts (``PUB|SUB`` and ``SUB|PUB`` are the same)
_BY_NAME = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}

#: request codes only an ``admin: true`` account may send (4.9.8's five, plus the offset
#: reset, which rewrites any group's progress, and ACL 2.0's AUTH_* requests: mqcore's additions)
ADMIN_CODES = frozenset({
    RC.UPDATE_AND_CREATE_TOPIC, RC.UPDATE_BROKER_CONFIG, RC.DELETE_TOPIC_IN_BROKER,
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RC.DELETE_SUBSCRIPTIONGROUP,
    RC.INVOKE_BROKER_TO_RESET_OFFSET,
    # ACL 2.0's user and rule requests (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010): who may
    # read passwords or make users is an admin under ACL 1.0
    *range(3001, 3011),
})


def parse_perm(text: object, what: str) -> int:
    """``"PUB|SUB"`` -> bits. Java maps an unknown word to DENY without a word; here it is
    an error naming ``what``, so a typo cannot silently lock an account out."""
    if not isinstance(text, str) or text.strip().upper() not in _BY_NAME:
        raise AclConfigError(f"{what}: {text!r} is not a permission (DENY, PUB, SUB or PUB|SUB)")
    return _BY_NAME[text.strip().upper()]


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return "|".join(name for name, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit) or "DENY"


def allows(needed: int, owned: int) -> bool:
    """Does ``owned`` grant ``needed``? DENY wins over everything; ANY is met by PUB or SUB."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)
