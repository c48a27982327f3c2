"""5.x ACL: the 5.x clients' signed ``authorization`` header, checked against the same
``plain_acl.yml`` accounts, white addresses and per-resource permissions as 4.x requests
(:class:`mqcore.acl.PlainAccessValidator`), as RocketMQ's proxy checks them.

Every 5.x request carries ``x-mq-date-time`` (``20250101T120000Z``) and

    authorization: MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is HMAC-SHA1 of the date-time text with the account's secret key, in hex
(lower case from the Java, Python and Node.js clients; upper case from C#/C++: compared as
bytes). Some clients add ``/<region>/<service>`` after the access key: only the part before
the first ``/`` names the account. Like the proxy, the date-time is not checked against the
clock (a captured header can be replayed; use TLS against eavesdroppers).

What each RPC needs (resource names with the namespace, groups as ``%RETRY%<group>``, as 4.x):

=============================================  ========================================
QueryRoute                                     the topic: PUB or SUB (either will do)
SendMessage, EndTransaction, RecallMessage     PUB on the topic(s)
ReceiveMessage, QueryAssignment, AckMessage,   SUB on the topic and on the group
ChangeInvisibleDuration, UpdateOffset,
GetOffset, ForwardMessageToDeadLetterQueue
QueryOffset                                    SUB on the topic
Heartbeat, NotifyClientTermination             SUB on the group (when one is named)
Telemetry                                      each Settings: PUB on the publishing topics;
                                               SUB on the subscription's group and topics
=============================================  ========================================

A refusal is answered as the proxy answers it: the response's status is ``UNAUTHORIZED``
(no, unknown or wrongly signed credentials) or ``FORBIDDEN`` (a permission missing), with
RocketMQ's message; a Telemetry stream is ended with gRPC ``PERMISSION_DENIED``.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Iterable
from typing import Any

from mqcore.acl.config import group_resource
from mqcore.acl.permission import ANY, PUB, SUB
from mqcore.acl.validator import PlainAccessValidator

log = logging.getLogger(__name__)

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"


def parse_authorization(value: str) -> tuple[str | None, str | None]:
    """(access key, signature) from the header; None for a part that is missing."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        return None, None
    fields = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if sep:
            fields[key.strip()] = val.strip()
    credential = fields.get("Credential") or ""
    return credential.split("/", 1)[0] or None, fields.get("Signature")


def sign(secret_key: str, date_time: str) -> str:
    """What a 5.x client puts in ``Signature=`` (lower-case hex)."""
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).hexdigest()


def signature_matches(given: str | None, secret_key: str, date_time: str | None) -> bool:
    if not given or date_time is None:
        return False
    try:
        raw = bytes.fromhex(given)
    except ValueError:
        return False
    expected = hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).digest()
    return hmac.compare_digest(raw, expected)


class GrpcAccessChecker:
    """Decides whether one 5.x request may go through. ``name(resource)`` is the endpoint's
    namespace-combined name of a ``Resource``.

    Requests, resources and settings are the 5.x protocol's protobuf messages, built from
    descriptors at run time (no generated classes to name), so they are typed ``Any``;
    ``metadata`` is grpc's invocation metadata, (key, value) pairs.
    """

    def __init__(self, validator: PlainAccessValidator | Any, name: Callable[[Any], str]) -> None:
        # ``validator``: ACL 1.0's PlainAccessValidator or ACL 2.0's AuthChecker (both check_signed)
        self.validator = validator
        self._name = name

    def check(self, method: str, request: Any, metadata: Iterable[tuple[str, str]] | None,
              remote_host: str) -> tuple[bool, str] | None:
        """None when allowed, else (authenticated?, why not)."""
        return self.check_needs(self.needed(method, request), metadata, remote_host)

    def check_needs(self, need: dict[str, int], metadata: Iterable[tuple[str, str]] | None,
                    remote_host: str) -> tuple[bool, str] | None:
        headers: dict[str, str] = {}
        for key, value in metadata or ():
            headers.setdefault(key, value)
        access_key, given = parse_authorization(headers.get(AUTHORIZATION, ""))
        date_time = headers.get(DATE_TIME)
        return self.validator.check_signed(access_key, remote_host,
                                           lambda secret: signature_matches(given, secret, date_time), need)

    # --- what a request touches ---------------------------------------------------------------------
    def _topic(self, resource: Any, perm: int, out: dict[str, int]) -> None:
        name = self._name(resource)
        if name:
            out[name] = out.get(name, 0) | perm

    def _group(self, resource: Any, out: dict[str, int]) -> None:
        name = self._name(resource)
        if name:
            out[group_resource(name)] = SUB

    def needed(self, method: str, request: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        if method == "QueryRoute":
            self._topic(request.topic, ANY, out)
        elif method == "SendMessage":
            for m in request.messages:
                self._topic(m.topic, PUB, out)
        elif method in ("EndTransaction", "RecallMessage"):
            self._topic(request.topic, PUB, out)
        elif method in ("ReceiveMessage", "UpdateOffset", "GetOffset"):
            self._topic(request.message_queue.topic, SUB, out)
            self._group(request.group, out)
        elif method in ("QueryAssignment", "AckMessage", "ChangeInvisibleDuration",
                        "ForwardMessageToDeadLetterQueue"):
            self._topic(request.topic, SUB, out)
            self._group(request.group, out)
        elif method == "QueryOffset":
            self._topic(request.message_queue.topic, SUB, out)
        elif method in ("Heartbeat", "NotifyClientTermination"):
            if request.HasField("group"):
                self._group(request.group, out)
        return out

    def settings_needed(self, settings: Any) -> dict[str, int]:
        """What a Telemetry ``Settings`` command asks for."""
        out: dict[str, int] = {}
        kind = settings.WhichOneof("pub_sub")
        if kind == "publishing":
            for topic in settings.publishing.topics:
                self._topic(topic, PUB, out)
        elif kind == "subscription":
            self._group(settings.subscription.group, out)
            for entry in settings.subscription.subscriptions:
                self._topic(entry.topic, SUB, out)
        return out
