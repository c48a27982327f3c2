"""What the broker's send fast path (``SendCore`` in mqcore/_send_core.pxi) asks plain ACL.

The fast path checks a signed plain send in the validator's order (``validator.py``) but
keeps, per ``plain_acl.yml`` version (``PlainAclConfig``, replaced as a whole on reload), the
answers that depend only on the file, the peer's host, the access key and the topic: whether
the host is globally white, the account and its keyed HMAC-SHA1, whether the account's own
white address matches the host, and whether the account may send to the topic. The
signature covers the header and body of each request, so it is verified for every one.

Only "allowed" is taken by the fast path: anything refused (or not certain) goes to the
general path, whose ``BrokerAclHook`` answers it exactly as before.
"""
from __future__ import annotations

from typing import Any, Callable

from mqcore.acl.config import Account, PlainAclConfig, is_group_resource
from mqcore.acl.permission import PUB
from mqcore.acl.signing import keyed_hmac
from mqcore.acl.validator import TRACE_TOPIC, _check_perms
from mqcore.remoting.codes import RequestCode as RC

__all__ = ["SendAclDecisions", "keyed_hmac"]


class SendAclDecisions:
    """The file-derived answers for the fast path (each a pure function of its arguments
    and the config: the caller caches them while ``source()`` returns the same object)."""

    def __init__(self, source: Callable[[], PlainAclConfig]) -> None:
        self.source = source

    @staticmethod
    def host_white(config: PlainAclConfig, host: str) -> bool:
        return any(pattern.matches(host) for pattern in config.global_white)

    @staticmethod
    def account(config: PlainAclConfig, access_key: str) -> tuple[Account, Any] | None:
        account = config.accounts.get(access_key)
        return None if account is None else (account, keyed_hmac(account.secret_key))

    @staticmethod
    def account_white(account: Account, host: str) -> bool:
        return account.white_address.matches(host)

    @staticmethod
    def may_send(account: Account, topic: str) -> bool:
        """A SEND_MESSAGE_V2 to ``topic`` with a valid signature passes (a retry topic needs
        the group's SUB: not taken here, the general path decides)."""
        if is_group_resource(topic):
            return False
        need = {topic: PUB}
        if topic == TRACE_TOPIC:
            return True
        return _check_perms(RC.SEND_MESSAGE_V2, need, account) is None
