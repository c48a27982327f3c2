"""Transactional messages over gRPC (RocketMQ 5.x), on the broker's one TransactionService.

* ``SendMessage`` of a ``TRANSACTION`` message stores a half message as a 4.x send does; the
  producer group is the topic's name, as RocketMQ 5's proxy sets it (5.x producers have no
  group), and ``orphaned_transaction_recovery_duration`` becomes
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``. The answer's ``transaction_id`` names the half record
  (its commitlog offset and half-queue offset, in hex): the client hands it back in
  ``EndTransaction``, so the broker keeps nothing in memory (the proxy keeps a table instead).
* ``EndTransaction`` is END_TRANSACTION: the same checks and answers, as a ``Status``.
* The check-back reaches a 5.x producer as a ``RecoverOrphanedTransactionCommand`` on the
  ``Telemetry`` stream of a live client publishing the topic; it answers with
  ``EndTransaction(source=SOURCE_SERVER_CHECK)``.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from mqcore.format import layout as L
from mqcore.grpc.convert import duration_ms, to_pb
from mqcore.grpc.source import EndResult
from mqcore.message import MessageExt, Prop
from mqcore.remoting.headers import EndTransactionRequestHeader

log = logging.getLogger(__name__)

#: the longest orphaned-transaction recovery duration a producer may ask for (the proxy's limit)
MAX_RECOVERY_S = 3600
_ID_DIGITS = 16


def transaction_id(phy_offset: int, queue_offset: int) -> str:
    """The id a 5.x producer gets for its half message: where the half record is."""
    return f"{phy_offset:0{_ID_DIGITS}X}{queue_offset:0{_ID_DIGITS}X}"


def parse_transaction_id(text: str) -> tuple[int, int] | None:
    if len(text) != 2 * _ID_DIGITS:
        return None
    try:
        return int(text[:_ID_DIGITS], 16), int(text[_ID_DIGITS:], 16)
    except ValueError:
        return None


# ``d``, ``s``, ``sp`` and requests are protobuf modules and messages built from descriptors at
# run time (no generated classes to name), typed Any as in grpc/auth.py
def half_properties(d: Any, sp: Any, topic: str, props: dict[str, str]) -> str | None:
    """Adds the half-message properties to ``props``; returns why the message cannot be a
    transaction, or None."""
    if sp.HasField("delivery_timestamp") or (sp.HasField("message_group") and sp.message_group):
        return "a transactional message has neither a delivery time nor a message group"
    props[Prop.TRAN_MSG] = "true"
    props[Prop.PGROUP] = topic
    if sp.HasField("orphaned_transaction_recovery_duration"):
        seconds = duration_ms(sp.orphaned_transaction_recovery_duration) // 1000
        if not 0 <= seconds <= MAX_RECOVERY_S:
            return f"the orphaned transaction recovery duration must be 0..{MAX_RECOVERY_S} s"
        props[Prop.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
    return None


def end_header(d: Any, topic: str, request: Any) -> EndTransactionRequestHeader | None:
    """``EndTransactionRequest`` as END_TRANSACTION's header; None for a malformed id."""
    where = parse_transaction_id(request.transaction_id)
    if where is None:
        return None
    kind = {d.COMMIT: L.SYSFLAG_TRANSACTION_COMMIT,
            d.ROLLBACK: L.SYSFLAG_TRANSACTION_ROLLBACK}.get(request.resolution, L.SYSFLAG_TRANSACTION_NOT)
    return EndTransactionRequestHeader(
        producer_group=topic, tran_state_table_offset=where[1], commit_log_offset=where[0],
        commit_or_rollback=kind, msg_id=request.message_id,
        from_transaction_check=request.source == d.SOURCE_SERVER_CHECK, transaction_id=request.transaction_id)


def end_status(d: Any, result: EndResult) -> tuple[int, str]:
    if result.refused:
        return d.INVALID_TRANSACTION_ID, f"the transaction cannot be ended: {result.remark}"
    return d.OK, "OK"


def recovery_command(d: Any, s: Any, half: MessageExt) -> Any:
    """``RecoverOrphanedTransactionCommand`` about ``half`` (a check-back's copy), shown with
    its real topic and queue."""
    topic = half.properties.get(Prop.REAL_TOPIC, half.topic)
    real = dataclasses.replace(half, topic=topic, queue_id=int(half.properties.get(Prop.REAL_QID, "0") or 0))
    msg = to_pb(d, real, topic=topic, namespace="", receipt_handle="", invisible_ms=0, attempt=1)
    cmd = s.RecoverOrphanedTransactionCommand(
        message=msg, transaction_id=transaction_id(half.commitlog_offset, half.queue_offset))
    return s.TelemetryCommand(recover_orphaned_transaction_command=cmd)


class Outboxes:
    """Server-initiated Telemetry commands, one queue per open stream (client id)."""

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[Any]] = {}

    def open(self, client_id: str) -> asyncio.Queue[Any]:
        q: asyncio.Queue[Any] = asyncio.Queue()
        self.queues[client_id] = q
        return q

    def close(self, client_id: str, q: asyncio.Queue[Any]) -> None:
        if self.queues.get(client_id) is q:
            del self.queues[client_id]

    def send_to_publisher(self, clients: dict[str, Any], topic: str, command: Any,
                          alive: Callable[[str], bool]) -> bool:
        """Queue ``command`` for one live client whose publishing settings name ``topic``."""
        for cid, q in self.queues.items():
            st = clients.get(cid)
            settings = getattr(st, "settings", None)
            if settings is None or settings.WhichOneof("pub_sub") != "publishing" or not alive(cid):
                continue
            if any((f"{t.resource_namespace}%{t.name}" if t.resource_namespace else t.name) == topic
                   for t in settings.publishing.topics):
                q.put_nowait(command)
                return True
        return False
