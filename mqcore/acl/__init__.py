"""RocketMQ 4.x plain ACL: accounts from ``plain_acl.yml``, signed requests, per-topic and
per-group permissions, white addresses. Used by the broker and the name server (checking)
and by ``mqcore.client`` (signing). See docs/ACCESS_CONTROL.md.

Modules: ``permission`` (bits and the allow rule), ``addresses`` (white address patterns),
``config`` (the file format), ``signing`` (the signature), ``resources`` (what a request
touches), ``validator`` (the check and the server hooks), ``watch`` (the file, reloaded).
"""
from mqcore.acl.config import Account, PlainAclConfig, parse_plain_acl
from mqcore.acl.signing import SessionCredentials
from mqcore.acl.validator import BrokerAclHook, NamesrvAclHook, PlainAccessValidator
from mqcore.acl.watch import AclFile

__all__ = ["Account", "AclFile", "BrokerAclHook", "NamesrvAclHook", "PlainAccessValidator", "PlainAclConfig",
           "SessionCredentials", "parse_plain_acl"]
