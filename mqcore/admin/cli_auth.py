"""mqadmin's ACL 2.0 commands: createUser, updateUser, deleteUser, getUser, listUser, createAcl,
updateAcl, deleteAcl, getAcl and listAcl, with Apache RocketMQ 5.3.3 mqadmin's flags and printed
lines, over the broker's AUTH requests (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010;
mqcore.acl.v2.admin answers them on mqbroker).
``-b`` asks one broker, ``-c`` every broker of a cluster, masters and slaves (Apache's
``fetchMasterAndSlaveAddrByClusterName``: users are kept by each broker). Sign the requests
with ``--accessKey``/``--secretKey`` of a user allowed to change users (Apache's tool reads
them from conf/tools.yml).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from mqcore.admin.api import MQAdmin
from mqcore.admin.cli_tools import UsageError
from mqcore.jsonutil import dumps_compact

Command = Callable[[MQAdmin, argparse.Namespace, TextIO], object]
Adder = Callable[[str, Command, str], argparse.ArgumentParser]

AUTH_CREATE_USER, AUTH_UPDATE_USER, AUTH_DELETE_USER, AUTH_GET_USER, AUTH_LIST_USER = range(3001, 3006)
AUTH_CREATE_ACL, AUTH_UPDATE_ACL, AUTH_DELETE_ACL, AUTH_GET_ACL, AUTH_LIST_ACL = range(3006, 3011)

#: the columns of getUser and listUser, as Apache's tool pads them
_ROW = "{:<16}  {:<22}  {:<22}  {:<20}  "
_HEAD = _ROW.format("#UserName", "#Password", "#UserType", "#UserStatus")
#: the columns of getAcl and listAcl: one line per entry of each policy
_ACL_ROW = "{:<16}  {:<10}  {:<22}  {:<20}  {:<24}  {:<10}"
_ACL_HEAD = _ACL_ROW.format("#Subject", "#PolicyType", "#Resource", "#Actions", "#SourceIp", "#Decision")


def _targets(admin: MQAdmin, a: argparse.Namespace) -> list[str]:
    if a.brokerAddr:
        return [a.brokerAddr]
    if a.clusterName:
        admin.cluster_info().master_addrs(a.clusterName)  # an unknown cluster is refused by name
        return [addr for b in admin.cluster_info().brokers(a.clusterName) for _id, addr in sorted(b.addrs.items())]
    raise UsageError("give a broker address (-b host:port) or a cluster name (-c)")


def _user_body(a: argparse.Namespace) -> bytes:
    info = {"username": a.username, "password": a.password, "userType": a.userType,
            "userStatus": getattr(a, "userStatus", None)}
    return dumps_compact({k: v for k, v in info.items() if v is not None})


def _print_users(users: list[dict[str, Any]], out: TextIO) -> None:
    if not users:
        return  # Apache's tool prints nothing, not even the head
    print(_HEAD, file=out)
    for u in users:
        print(_ROW.format(*(str(u.get(k) or "") for k in ("username", "password", "userType", "userStatus"))),
              file=out)


def _change(code: int, verb: str) -> Command:
    def run(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
        addrs = _targets(admin, a)
        body = b"" if code == AUTH_DELETE_USER else _user_body(a)
        for addr in addrs:
            admin._invoke(addr, code, {"username": a.username}, body)
            if not a.json:
                print(f"{verb} user to {addr} success.", file=out)
        return {"brokers": addrs, "username": a.username} if a.json else None
    return run


def _objects(admin: MQAdmin, addr: str, code: int, ext: dict[str, Any]) -> list[dict[str, Any]]:
    """The users or ACLs a get (one object) or list (a list) request answers, as a list."""
    answer = MQAdmin._json(admin._invoke(addr, code, ext))
    if not answer:
        return []
    return [answer] if isinstance(answer, dict) else [x for x in answer if isinstance(x, dict)]


def _show(code: int, ext: Callable[[argparse.Namespace], dict[str, Any]],
          printer: Callable[[list[dict[str, Any]], TextIO], None]) -> Command:
    """A get or list command: each target broker's answer, printed (or returned for --json)."""
    def run(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
        found = {addr: _objects(admin, addr, code, ext(a)) for addr in _targets(admin, a)}
        if a.json:
            return found
        for objects in found.values():
            printer(objects, out)
        return None
    return run


def _java_list(v: Any) -> str:
    """A JSON list as Java's List.toString prints it ("[Pub, Sub]"), null as "null"."""
    return "null" if v is None else "[" + ", ".join(str(x) for x in v) + "]"


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def _acl_change(code: int, verb: str) -> Command:
    def run(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
        addrs = _targets(admin, a)
        # AclInfo.of: one Custom policy, an entry per resource, each with the actions, IPs, decision
        entries = [{k: v for k, v in (("resource", r), ("actions", _split(a.actions)), ("sourceIps", _split(a.sourceIp)),
                                      ("decision", a.decision)) if v is not None}
                   for r in _split(a.resources) or []]
        body = dumps_compact({"subject": a.subject, "policies": [{"entries": entries}]})
        for addr in addrs:
            admin._invoke(addr, code, {"subject": a.subject}, body)
            if not a.json:
                print(f"{verb} acl to {addr} success.", file=out)
        return {"brokers": addrs, "subject": a.subject} if a.json else None
    return run


def cmd_delete_acl(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    addrs = _targets(admin, a)
    for addr in addrs:
        admin._invoke(addr, AUTH_DELETE_ACL, {"subject": a.subject, "resource": a.resources})
        if not a.json:
            print(f"delete acl to {addr} success.", file=out)
    return {"brokers": addrs, "subject": a.subject} if a.json else None


def _print_acls(acls: list[dict[str, Any]], out: TextIO) -> None:
    if not acls:
        return  # Apache's tool prints nothing, not even the head
    print(_ACL_HEAD, file=out)
    for acl in acls:
        for policy in acl.get("policies") or []:
            for e in policy.get("entries") or []:
                print(_ACL_ROW.format(str(acl.get("subject")), str(policy.get("policyType")), str(e.get("resource")),
                                      _java_list(e.get("actions")), _java_list(e.get("sourceIps")),
                                      str(e.get("decision"))), file=out)


def _broker_or_cluster(p: argparse.ArgumentParser, what: str) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-b", "--brokerAddr", help=f"{what} which broker (host:port)")
    g.add_argument("-c", "--clusterName", help=f"{what} every broker of this cluster, masters and slaves")


def register(add: Adder) -> None:
    """Add these commands to mqadmin's parser (``add(name, fn, help)`` returns the subparser)."""
    p = add("createUser", _change(AUTH_CREATE_USER, "create"), "Create user to cluster.")
    _broker_or_cluster(p, "create the user on")
    p.add_argument("-u", "--username", required=True)
    p.add_argument("-p", "--password", required=True)
    p.add_argument("-t", "--userType", help="Super or Normal (default Normal)")
    p = add("updateUser", _change(AUTH_UPDATE_USER, "update"), "Update user to cluster.")
    _broker_or_cluster(p, "update the user on")
    p.add_argument("-u", "--username", required=True)
    change = p.add_mutually_exclusive_group(required=True)  # one change a call, as Apache's option group
    change.add_argument("-p", "--password")
    change.add_argument("-t", "--userType", help="Super or Normal")
    change.add_argument("-s", "--userStatus", help="enable or disable")
    p = add("deleteUser", _change(AUTH_DELETE_USER, "delete"), "Delete user from cluster.")
    _broker_or_cluster(p, "delete the user from")
    p.add_argument("-u", "--username", required=True)
    p = add("getUser", _show(AUTH_GET_USER, lambda a: {"username": a.username}, _print_users), "Get user from cluster.")
    _broker_or_cluster(p, "get the user from")
    p.add_argument("-u", "--username", required=True)
    p = add("listUser", _show(AUTH_LIST_USER, lambda a: {"filter": a.filter}, _print_users), "List user from cluster.")
    _broker_or_cluster(p, "list the users of")
    p.add_argument("-f", "--filter", help="only users whose name contains this")
    for name, code, verb in (("createAcl", AUTH_CREATE_ACL, "create"), ("updateAcl", AUTH_UPDATE_ACL, "update")):
        p = add(name, _acl_change(code, verb), f"{verb.capitalize()} acl to cluster.")
        _broker_or_cluster(p, f"{verb} the acl on")
        p.add_argument("-s", "--subject", required=True, help="User:<name>")
        p.add_argument("-r", "--resources", required=True, help="e.g. Topic:orders*,Group:workers")
        p.add_argument("-a", "--actions", required=True, help="e.g. Pub,Sub")
        p.add_argument("-i", "--sourceIp", help="e.g. 10.0.0.0/8,127.0.0.1")
        p.add_argument("-d", "--decision", required=True, help="Allow or Deny")
    p = add("deleteAcl", cmd_delete_acl, "Delete acl from cluster.")
    _broker_or_cluster(p, "delete the acl from")
    p.add_argument("-s", "--subject", required=True, help="User:<name>")
    p.add_argument("-r", "--resources", help="only this resource's entry (without: the whole acl)")
    p = add("getAcl", _show(AUTH_GET_ACL, lambda a: {"subject": a.subject}, _print_acls), "Get acl from cluster.")
    _broker_or_cluster(p, "get the acl from")
    p.add_argument("-s", "--subject", required=True, help="User:<name>")
    p = add("listAcl", _show(AUTH_LIST_ACL, lambda a: {"subjectFilter": a.subject, "resourceFilter": a.resource},
                            _print_acls), "List acl from cluster.")
    _broker_or_cluster(p, "list the acls of")
    p.add_argument("-s", "--subject", help="only subjects containing this")
    p.add_argument("-r", "--resource", help="only entries whose resource contains this")


__all__ = ["register"]
