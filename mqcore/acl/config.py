"""``plain_acl.yml``: the accounts and white addresses of RocketMQ 4.x plain ACL.

    globalWhiteRemoteAddresses:       # these clients need no signature at all
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ           # at least 7 characters, as in RocketMQ
        secretKey: 12345678           # at least 7 characters
        whiteRemoteAddress:           # optional: this account's clients from here need no signature
        admin: false                  # admin requests (create/delete topic...) need true
        defaultTopicPerm: DENY        # for topics not in topicPerms (default DENY)
        defaultGroupPerm: SUB         # for groups not in groupPerms (default DENY)
        topicPerms:
          - topicA=DENY
          - topicB=PUB|SUB
        groupPerms:
          - groupA=SUB

Parsing is strict where RocketMQ is lenient, because a silently misread ACL is a
security hole: an unknown permission word, a malformed ``name=PERM`` entry, a bad
address pattern, a short or duplicate key all raise :class:`AclConfigError` naming the
account and the entry. Keys this file format does not know are ignored, as RocketMQ
ignores them (``dataVersion`` is written there by its tools).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from mqcore.acl.addresses import AddressPattern, compile_pattern
from mqcore.acl.permission import DENY, parse_perm
from mqcore.errors import AclConfigError
from mqcore.message import RETRY_GROUP_TOPIC_PREFIX as RETRY_PREFIX

#: RocketMQ refuses keys of 6 characters or fewer
MIN_KEY_LENGTH = 7


def group_resource(group: str) -> str:
    """Groups are checked as their retry topic, as RocketMQ does (``%RETRY%<group>``)."""
    return RETRY_PREFIX + group


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_PREFIX)


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    white_address: AddressPattern
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    #: topic -> perm and ``%RETRY%group`` -> perm; None when the account lists none
    #: (which, for an admin, means every resource: RocketMQ's rule)
    resource_perms: Mapping[str, int] | None

    def __repr__(self) -> str:  # never print the secret
        return f"Account({self.access_key!r}, admin={self.admin})"


@dataclass(frozen=True)
class PlainAclConfig:
    global_white: tuple[AddressPattern, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=lambda: MappingProxyType({}))


def parse_plain_acl(text: str, source: str = "plain_acl.yml") -> PlainAclConfig:
    """Parse the YAML text of a plain_acl.yml; ``source`` names it in errors."""
    import yaml  # PyYAML, a dependency of mqcore; imported here so ACL-less use never loads it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AclConfigError(f"{source}: not valid YAML: {e}") from None
    return build_plain_acl(data, source)


def build_plain_acl(data: Any, source: str = "plain_acl.yml") -> PlainAclConfig:
    if data is None:  # an empty file: no accounts, nobody passes but white addresses (none)
        return PlainAclConfig()
    if not isinstance(data, dict):
        raise AclConfigError(f"{source}: the top level must be a mapping with accounts and "
                             f"globalWhiteRemoteAddresses, got {type(data).__name__}")
    whites = _list(data.get("globalWhiteRemoteAddresses"), f"{source}: globalWhiteRemoteAddresses")
    global_white = tuple(_pattern(w, f"{source}: globalWhiteRemoteAddresses") for w in whites)
    accounts: dict[str, Account] = {}
    for i, item in enumerate(_list(data.get("accounts"), f"{source}: accounts")):
        account = _account(item, f"{source}: accounts[{i}]")
        if account.access_key in accounts:
            raise AclConfigError(f"{source}: accessKey {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return PlainAclConfig(global_white, MappingProxyType(accounts))


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{what} must be a list, got {type(value).__name__}")
    return value


def _pattern(text: Any, what: str) -> AddressPattern:
    try:
        return compile_pattern(text)
    except AclConfigError as e:
        raise AclConfigError(f"{what}: {e}") from None


def _key(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # YAML reads 12345678 as a number; RocketMQ takes it as the text
    if not isinstance(value, str) or len(value) < MIN_KEY_LENGTH:
        raise AclConfigError(f"{where}: {name} must be text of at least {MIN_KEY_LENGTH} characters")
    return value


def _bool(value: Any, what: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclConfigError(f"{what}: {value!r} is not true or false")


def _account(item: Any, where: str) -> Account:
    if not isinstance(item, dict):
        raise AclConfigError(f"{where} must be a mapping with accessKey, secretKey...")
    access_key = _key(item, "accessKey", where)
    where = f"{where} ({access_key})"
    secret_key = _key(item, "secretKey", where)
    default_topic = item.get("defaultTopicPerm")
    default_group = item.get("defaultGroupPerm")
    perms: dict[str, int] = {}
    for name, is_topic in (("groupPerms", False), ("topicPerms", True)):
        for entry in _list(item.get(name), f"{where}: {name}"):
            resource, perm = _resource_perm(entry, f"{where}: {name}")
            perms[resource if is_topic else group_resource(resource)] = perm
    return Account(
        access_key=access_key, secret_key=secret_key,
        white_address=_pattern(item.get("whiteRemoteAddress"), f"{where}: whiteRemoteAddress"),
        admin=_bool(item.get("admin"), f"{where}: admin"),
        default_topic_perm=DENY if default_topic is None else parse_perm(default_topic, f"{where}: defaultTopicPerm"),
        default_group_perm=DENY if default_group is None else parse_perm(default_group, f"{where}: defaultGroupPerm"),
        resource_perms=MappingProxyType(perms) if perms else None)


def _resource_perm(entry: Any, what: str) -> tuple[str, int]:
    if not isinstance(entry, str):
        raise AclConfigError(f"{what}: {entry!r} is not of the form name=PERM")
    items = [x.strip() for x in entry.split("=") if x.strip()]
    if len(items) != 2:
        raise AclConfigError(f"{what}: {entry!r} is not of the form name=PERM (e.g. topicA=PUB|SUB)")
    return items[0], parse_perm(items[1], f"{what}: {entry!r}")
