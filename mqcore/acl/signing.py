"""The request signature of RocketMQ 4.x ACL, shared by the checking side (broker, name
server) and the signing side (``mqcore.client``, the broker's own registrations).

A signed request carries, in its extFields, ``AccessKey``, ``Signature`` and optionally
``SecurityToken``. The signature is Base64(HMAC-SHA1(secretKey, content)) where content
is the UTF-8 of the values of every other extField, in key order (Java's ``TreeMap``),
concatenated without separators, followed by the body bytes. The client signs after it
has put ``AccessKey`` (and ``SecurityToken``) into the fields, so those are covered too.
The checking side leaves out ``Signature`` and ``_UNIQUE_KEY_QUERY`` (as 4.9.8 does).

Checked byte for byte against the official 4.9.8 Java client's ``AclClientRPCHook`` in
tests/reference/test_acl_reference.py.
"""
from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mqcore.errors import ConfigError

if TYPE_CHECKING:  # the commands are signed, not built, here
    from mqcore.remoting.command import Body, RemotingCommand

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: left out of the content by the checking side (``MixAll.UNIQUE_MSG_QUERY_FLAG``)
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


def body_bytes(body: Body | None) -> bytes:
    """A command's body as one bytes object (the send side may hold a list of buffers)."""
    if not body:
        return b""
    if isinstance(body, list):
        return b"".join(bytes(part) for part in body)
    return bytes(body)


def content(ext_fields: Mapping[str, str], body: Body | None, *, skip: frozenset[str] = frozenset({SIGNATURE})) -> bytes:
    text = "".join(str(ext_fields[k]) for k in sorted(ext_fields) if k not in skip)
    return text.encode("utf-8") + body_bytes(body)


def signature(data: bytes, secret_key: str) -> str:
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), data, hashlib.sha1).digest()).decode("ascii")


def keyed_hmac(secret_key: str) -> Any:
    """An HMAC-SHA1 with ``secret_key`` set up, to ``copy()`` per request: OpenSSL's own
    object (``_hashlib.HMAC``: copy, update and digest in C - ``hmac.HMAC.copy`` is Python -
    and update without the GIL, at hash speed, for a large body) where hmac.new gives one."""
    mac = hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)
    return getattr(mac, "_hmac", None) or mac


@functools.lru_cache(maxsize=1024)
def _keyed(secret_key: str) -> Any:
    """keyed_hmac, once per secret (half the cost of a small request's signature)."""
    return keyed_hmac(secret_key)


def request_signature(ext_fields: Mapping[str, str], body: Body | None, secret_key: str, *,
                      skip: frozenset[str] = frozenset({SIGNATURE})) -> str:
    """``signature(content(...))`` without joining header text and body into one copy (a
    body may be megabytes, and may arrive as a list of buffers)."""
    mac = _keyed(secret_key).copy()
    keys = sorted(ext_fields)
    if not skip.isdisjoint(keys):
        keys = [k for k in keys if k not in skip]
    try:
        text = "".join([ext_fields[k] for k in keys])
    except TypeError:  # a value that is not a str (a caller's int): its text, as Java's String.valueOf
        text = "".join([str(ext_fields[k]) for k in keys])
    mac.update(text.encode("utf-8"))
    if isinstance(body, list):
        for part in body:
            mac.update(part)
    elif body:
        mac.update(body)
    return binascii.b2a_base64(mac.digest(), newline=False).decode("ascii")


#: what the checking side leaves out of the content
CHECKED_SKIP = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """An account's keys as a client holds them (Java's ``SessionCredentials``)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ConfigError("session credentials need both an access key and a secret key")

    def __repr__(self) -> str:  # never print the secret
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key=***)"

    def sign_fields(self, keys: tuple[str, ...], values: tuple[Any, ...],
                    body: bytes) -> tuple[tuple[str, ...], tuple[Any, ...]] | None:
        """``keys``/``values`` of a request's extFields (the client's frame kernels' form:
        None is absent, bools and ints as the header writes them) with ``AccessKey``
        (``SecurityToken``) and ``Signature`` added after them - what ``sign`` adds to the same
        request as a command, in the same order. None for a value ``sign`` would not see the
        same way (the caller then builds the command)."""
        ext: dict[str, str] = {}
        for key, value in zip(keys, values):
            if value is None:
                continue
            if type(value) is str:
                ext[key] = value
            elif type(value) is bool:
                ext[key] = "true" if value else "false"
            elif type(value) is int:
                ext[key] = str(value)
            else:
                return None
        if len(ext) != sum(v is not None for v in values) or ACCESS_KEY in ext or SIGNATURE in ext \
                or SECURITY_TOKEN in ext or UNIQUE_MSG_QUERY_FLAG in ext:
            return None
        ext[ACCESS_KEY] = self.access_key
        added: tuple[str, ...] = (self.access_key,)
        names: tuple[str, ...] = (ACCESS_KEY,)
        if self.security_token is not None:
            ext[SECURITY_TOKEN] = self.security_token
            added, names = added + (self.security_token,), names + (SECURITY_TOKEN,)
        signature = request_signature(ext, body, self.secret_key)
        return keys + names + (SIGNATURE,), values + added + (signature,)

    def sign(self, request: RemotingCommand) -> None:
        """Add ``AccessKey`` (``SecurityToken``) and ``Signature`` to ``request``'s
        extFields, as ``AclClientRPCHook.doBeforeRequest`` does."""
        ext = request.ext_fields
        ext.pop(SIGNATURE, None)  # a retried command is signed afresh
        ext[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            ext[SECURITY_TOKEN] = self.security_token
        # request_signature's steps in place (every request a client sends pays them)
        try:
            text = "".join([ext[k] for k in sorted(ext)])
        except TypeError:  # a value that is not a str: its text
            text = "".join([str(ext[k]) for k in sorted(ext)])
        mac = _keyed(self.secret_key).copy()
        mac.update(text.encode("utf-8"))
        body = request.body
        if isinstance(body, list):
            for part in body:
                mac.update(part)
        elif body:
            mac.update(body)
        ext[SIGNATURE] = binascii.b2a_base64(mac.digest(), newline=False).decode("ascii")
