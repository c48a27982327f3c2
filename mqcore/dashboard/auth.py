"""Who may open the dashboard: with ACL on, an admin account of the plain_acl.yml.

The browser sends the account's accessKey and secretKey with HTTP Basic (it asks once and
keeps them for the site). ACL off: the dashboard is as open as the broker's own port, which
is bound to the same address. The comparison is constant-time; the secret never appears in
a log or an answer.
"""
from __future__ import annotations

import base64
import binascii
import enum
import hmac

from mqcore.acl.config import PlainAclConfig

REALM = "mqcore dashboard"


class AuthResult(enum.Enum):
    OPEN = "open"            # ACL is off
    ADMIN = "admin"          # an admin account's keys
    MISSING = "missing"      # no credentials sent
    REFUSED = "refused"      # unknown account, wrong secret, or not an admin


def check_basic(acl: PlainAclConfig | None, authorization: str | None) -> tuple[AuthResult, str | None]:
    """The outcome and, when an account was named, its accessKey."""
    if acl is None:
        return AuthResult.OPEN, None
    if not authorization:
        return AuthResult.MISSING, None
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return AuthResult.MISSING, None
    try:
        access_key, sep, secret = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return AuthResult.REFUSED, None
    account = acl.accounts.get(access_key) if sep else None
    if account is None:
        # compare anyway, so an unknown name takes as long as a wrong secret
        hmac.compare_digest(secret.encode(), secret.encode())
        return AuthResult.REFUSED, access_key or None
    good = hmac.compare_digest(secret.encode(), account.secret_key.encode())
    if not good or not account.admin:
        return AuthResult.REFUSED, access_key
    return AuthResult.ADMIN, access_key
