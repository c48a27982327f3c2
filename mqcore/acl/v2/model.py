"""The ACL 2.0 model (RocketMQ 5.3's ``auth`` module): users, ACL rules, how a rule matches.

A *user* has a name, a password (the secret its requests are signed with), a type (``Super``:
every request is allowed; ``Normal``: its ACL rules decide) and a status (``enable`` /
``disable``). An *ACL* belongs to a subject (``User:<name>``) and holds policies (``Custom``,
the ones operators write, and ``Default``), each a list of entries: a resource pattern, the
actions it covers, optional source IPs (addresses or CIDR blocks) and a decision (``Allow`` /
``Deny``).

Resource keys, as Apache spells them: ``*`` (anything), ``Cluster:<name>``, ``Topic:<name>``,
``Group:<name>``, ``Namespace:<name>``; a name ``*`` is every resource of that type, a name
ending in ``*`` a prefix. Names of types, actions, decisions and user types are read without
regard to case and written in Apache's spelling.

Deciding (``decide``), as Apache's ``AclAuthorizationHandler``: the entries of the Custom
policy that match the resource, one of the actions and the source IP; if none, those of the
Default policy; no entry: denied. Of the matching entries the most specific resource wins: a
literal name over a prefix, a longer prefix over a shorter one, a prefix over ``Type:*``, any
typed pattern over ``*``; between equally specific entries Deny wins. (5.3.3's comparator is
not a consistent order for mixed patterns, so its choice there depends on the entries' order;
apache/rocketmq#9539 fixed it after 5.3.3 to the order used here.)

Everything here is immutable once built: a reload or an admin change builds a new ``AuthData``.
"""
from __future__ import annotations

import dataclasses
import enum
import ipaddress
from typing import Any, Iterable, TypeVar


class AuthModelError(ValueError):
    """A user or ACL that cannot be stored (Apache's message, answered to the admin tool)."""


_E = TypeVar("_E", bound=enum.Enum)


def _by_name(enum_cls: type[_E], name: Any) -> _E | None:
    if not isinstance(name, str):
        return None
    for member in enum_cls:
        if member.value.lower() == name.strip().lower():
            return member
    return None


class UserType(enum.Enum):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(enum.Enum):
    ENABLE = "enable"
    DISABLE = "disable"


class Decision(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"


class PolicyType(enum.Enum):
    CUSTOM = "Custom"
    DEFAULT = "Default"


class Action(enum.Enum):
    ALL = "All"
    ANY = "Any"  # only in a request's needs ("any action on it"); never in a rule
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


class ResourceType(enum.Enum):
    ANY = "Any"
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    TOPIC = "Topic"
    GROUP = "Group"


class Pattern(enum.IntEnum):
    """How specific a pattern is: a smaller value wins."""
    LITERAL = 0
    PREFIXED = 1
    ANY = 2


RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


@dataclasses.dataclass(frozen=True)
class Resource:
    type: ResourceType
    name: str | None  # None for the ANY pattern
    pattern: Pattern

    @staticmethod
    def parse(key: Any) -> Resource | None:
        """``Topic:abc*`` -> a resource; None when the key is blank or of an unknown type."""
        if not isinstance(key, str) or not key.strip():
            return None
        if key == "*":
            return Resource(ResourceType.ANY, None, Pattern.ANY)
        type_name, _, name = key.partition(":")
        rtype = _by_name(ResourceType, type_name)
        if rtype is None or rtype is ResourceType.ANY:
            return None
        if name == "*":
            return Resource(rtype, None, Pattern.ANY)
        if name.endswith("*"):
            return Resource(rtype, name[:name.index("*")], Pattern.PREFIXED)
        return Resource(rtype, name, Pattern.LITERAL)

    @staticmethod
    def topic(name: str) -> Resource:
        return Resource(ResourceType.TOPIC, name, Pattern.LITERAL)

    @staticmethod
    def group(name: str) -> Resource:
        """A group; a retry topic ``%RETRY%g`` names its group g (as Apache's ``Resource.ofGroup``)."""
        if name.startswith(RETRY_PREFIX):
            name = name[len(RETRY_PREFIX):]
        return Resource(ResourceType.GROUP, name, Pattern.LITERAL)

    @staticmethod
    def cluster(name: str) -> Resource:
        return Resource(ResourceType.CLUSTER, name, Pattern.LITERAL)

    @property
    def key(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        if self.pattern is Pattern.ANY:
            return f"{self.type.value}:*"
        if self.pattern is Pattern.PREFIXED:
            return f"{self.type.value}:{self.name}*"
        return f"{self.type.value}:{self.name}"

    def matches(self, wanted: Resource) -> bool:
        """Does this pattern cover the (literal) resource ``wanted``?"""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not wanted.type:
            return False
        if self.pattern is Pattern.ANY:
            return True
        if self.pattern is Pattern.LITERAL:
            return wanted.name == self.name
        return wanted.name is not None and wanted.name.startswith(self.name or "")

    def specificity(self) -> tuple[int, int, int]:
        """Sort key: the most specific pattern first."""
        if self.type is ResourceType.ANY:
            return (1, 0, 0)
        return (0, int(self.pattern), -len(self.name or ""))


def _parse_ip(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """An address or a CIDR block (Apache's ``isValidIPOrCidr``); None when it is neither."""
    try:
        if "/" in text:
            return ipaddress.ip_network(text, strict=False)
        return ipaddress.ip_network(ipaddress.ip_address(text))
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class PolicyEntry:
    resource: Resource
    actions: frozenset[Action]
    source_ips: tuple[str, ...]
    decision: Decision
    #: parsed ``source_ips`` (empty: from anywhere)
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = dataclasses.field(
        default=(), compare=False, repr=False)

    def matches_actions(self, wanted: Iterable[Action]) -> bool:
        if not self.actions:
            return False
        wanted = tuple(wanted)
        if Action.ANY in wanted:
            return True
        return Action.ALL in self.actions or any(a in self.actions for a in wanted)

    def matches_ip(self, source_ip: str | None) -> bool:
        if not self.networks:
            return True
        if not source_ip:
            return False
        try:
            addr = ipaddress.ip_address(source_ip)
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr.version == net.version and addr in net for net in self.networks)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"resource": self.resource.key,
                               "actions": [a.value for a in Action if a in self.actions],
                               "decision": self.decision.value}
        if self.source_ips:
            out["sourceIps"] = list(self.source_ips)
        return out


@dataclasses.dataclass(frozen=True)
class Policy:
    type: PolicyType
    entries: tuple[PolicyEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {"policyType": self.type.value, "entries": [e.to_json() for e in self.entries]}


@dataclasses.dataclass(frozen=True)
class Acl:
    subject: str  # "User:<name>"
    policies: tuple[Policy, ...]

    def policy(self, ptype: PolicyType) -> Policy | None:
        for p in self.policies:
            if p.type is ptype:
                return p
        return None

    def merged(self, new: Acl) -> Acl:
        """Apache's ``updatePolicy``: each new policy's entries replace the old entries for the
        same resource and are added otherwise; a policy type not there yet is added."""
        policies = list(self.policies)
        for np in new.policies:
            for i, op in enumerate(policies):
                if op.type is np.type:
                    entries = list(op.entries)
                    for ne in np.entries:
                        for j, oe in enumerate(entries):
                            if oe.resource == ne.resource:
                                entries[j] = ne
                                break
                        else:
                            entries.append(ne)
                    policies[i] = Policy(op.type, tuple(entries))
                    break
            else:
                policies.append(np)
        return Acl(self.subject, tuple(policies))

    def without(self, ptype: PolicyType, resource: Resource) -> Acl:
        """Apache's ``deletePolicy``: the entry for ``resource`` gone; an emptied policy gone."""
        policies = []
        for p in self.policies:
            if p.type is ptype:
                entries = tuple(e for e in p.entries if e.resource != resource)
                if entries:
                    policies.append(Policy(p.type, entries))
            else:
                policies.append(p)
        return Acl(self.subject, tuple(policies))

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "policies": [p.to_json() for p in self.policies]}


@dataclasses.dataclass(frozen=True)
class User:
    username: str
    password: str
    user_type: UserType = UserType.NORMAL
    status: UserStatus = UserStatus.ENABLE

    def to_json(self) -> dict[str, Any]:
        return {"username": self.username, "password": self.password, "userType": self.user_type.value,
                "userStatus": self.status.value}

    def __repr__(self) -> str:  # never print the password
        return f"User({self.username!r}, {self.user_type.value}, {self.status.value})"


# --- reading Apache's JSON bodies (UserInfo, AclInfo) ---------------------------------------

def subject_of(text: Any) -> str | None:
    """``User:alice`` -> ``User:alice`` (the type read without regard to case); None if not a user."""
    if not isinstance(text, str):
        return None
    kind, sep, name = text.partition(":")
    if not sep or kind.strip().lower() != "user" or not name:
        return None
    return f"User:{name}"


def user_from_json(data: Any, *, username: str | None = None) -> tuple[str | None, str | None, UserType | None,
                                                                       UserStatus | None]:
    """A UserInfo body -> (username, password, type, status); absent or unknown parts are None
    (Apache's converter reads an unknown type or status as absent)."""
    if not isinstance(data, dict):
        data = {}
    name = username if username is not None else data.get("username")
    password = data.get("password")
    return (name if isinstance(name, str) else None, password if isinstance(password, str) else None,
            _by_name(UserType, data.get("userType")), _by_name(UserStatus, data.get("userStatus")))


def entry_from_json(data: Any) -> PolicyEntry:
    """A PolicyEntryInfo -> an entry, validated as Apache's ``AuthorizationMetadataManagerImpl``."""
    if not isinstance(data, dict):
        raise AuthModelError("The resource is null.")
    resource = Resource.parse(data.get("resource"))
    if resource is None:
        raise AuthModelError("The resource is null.")
    actions = set()
    for name in data.get("actions") or ():
        action = _by_name(Action, name)
        if action is not None:  # Apache drops an action name it does not know
            actions.add(action)
    if not actions:
        raise AuthModelError("The actions is empty.")
    if Action.ANY in actions:
        raise AuthModelError("The actions can not be Any.")
    ips = data.get("sourceIps") or []
    if not isinstance(ips, list):
        raise AuthModelError("The source ip is invalid.")
    networks = []
    for ip in ips:
        if not isinstance(ip, str) or not ip.strip():
            raise AuthModelError("The source ip is empty.")
        net = _parse_ip(ip)
        if net is None:
            raise AuthModelError("The source ip is invalid.")
        networks.append(net)
    decision = _by_name(Decision, data.get("decision"))
    if decision is None:
        raise AuthModelError("The decision is null or illegal.")
    return PolicyEntry(resource, frozenset(actions), tuple(ips), decision, tuple(networks))


def acl_from_json(data: Any, subject: str | None = None) -> Acl:
    """An AclInfo body (its subject, else ``subject``) -> an ACL, validated."""
    if not isinstance(data, dict) or not data.get("policies"):
        raise AuthModelError("The body of acl is null")
    subj = subject_of(data.get("subject")) or subject_of(subject)
    if subj is None:
        raise AuthModelError("The subject type is null.")
    policies: list[Policy] = []
    for p in data["policies"] if isinstance(data["policies"], list) else ():
        if not isinstance(p, dict):
            continue
        entries = p.get("entries")
        if not entries:
            continue  # Apache's converter skips a policy without entries
        ptype = _by_name(PolicyType, p.get("policyType")) or PolicyType.CUSTOM
        parsed = tuple(entry_from_json(e) for e in (entries if isinstance(entries, list) else [entries]))
        policies.append(Policy(ptype, parsed))
    if not policies:
        raise AuthModelError("The policies is empty.")
    return Acl(subj, tuple(policies))


# --- deciding ----------------------------------------------------------------------------------

def _best(entries: list[PolicyEntry]) -> PolicyEntry:
    return min(entries, key=lambda e: (*e.resource.specificity(), 0 if e.decision is Decision.DENY else 1))


def matching_entry(acl: Acl, resource: Resource, actions: Iterable[Action], source_ip: str | None) -> PolicyEntry | None:
    """The entry that decides (None: no entry matches, which denies)."""
    actions = tuple(actions)
    for ptype in (PolicyType.CUSTOM, PolicyType.DEFAULT):
        policy = acl.policy(ptype)
        if policy is None:
            continue
        found = [e for e in policy.entries
                 if e.resource.matches(resource) and e.matches_actions(actions) and e.matches_ip(source_ip)]
        if found:
            return _best(found)
    return None
