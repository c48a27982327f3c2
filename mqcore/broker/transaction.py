"""Transactional messages: half messages, their end (commit or rollback) and the check-back.

What RocketMQ 4.9 keeps, kept the same way so a store moves between mqbroker and the Java
broker in the middle of a transaction (docs/transactions.md):

* A half message (``TRAN_MSG=true``) is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with
  ``REAL_TOPIC``/``REAL_QID`` added and its sysflag's transaction bits cleared, so the half
  topic's own consume queue indexes it and no consumer of the real topic sees it.
* END_TRANSACTION commit writes a new record to the real topic and queue (commit sysflag,
  the half message's body and every property, the half message's commitlog offset as the
  prepared-transaction offset), then an op record; rollback writes the op record only. An
  op record is a message in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (same queue id as the half
  message), tag ``d``, whose body is the half message's queue offset in decimal.
* The check-back walks the half queue from the committed offset of the system group
  ``CID_RMQ_SYS_TRANS`` (consumerOffset.json) and the op queue from the same group's offset:
  a half message with no op record and older than ``transactionTimeOut`` is written again
  (a copy with ``TRANSACTION_CHECK_TIMES`` raised) and the producer group is asked for its
  state with CHECK_TRANSACTION_STATE about the copy; one checked ``transactionCheckMax``
  times goes to ``TRANS_CHECK_MAX_TIME_TOPIC`` instead. Nothing else is kept in memory, so
  a restart resumes from the store.

Threads: ``put_half`` and ``end`` run where the send processors run (the event loop, or the
SYNC_FLUSH put pool); ``check`` runs on the event loop (``TransactionCheckService``), where
the producer table and the channels live. The store serialises puts with its own lock.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import random
from typing import TYPE_CHECKING, Any, Callable

from mqcore.errors import MQError
from mqcore.format import layout as L
from mqcore.message import MessageExt, MessageExtBrokerInner, Prop, offset_msg_id, pack_host, properties_to_bytes
from mqcore.netaddr import parse_host_port
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.remoting import RequestCode, ResponseCode
from mqcore.remoting.command import create_request
from mqcore.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from mqcore.store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.groups import ConsumerOffsetManager
    from mqcore.broker.topics import TopicConfigManager
    from mqcore.remoting.command import RemotingCommand
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: the system group whose offsets on the half and op topics are the check-back's progress
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: the op record's tag: "this half message is done"
REMOVE_TAG = "d"
HALF_QUEUE_ID = 0
#: op records read per check round and half messages walked per round, so one round cannot
#: hold the event loop for long; the rest waits for the next round
MAX_OPS_PER_ROUND = 4096
MAX_HALF_PER_ROUND = 2048

_COMMIT, _ROLLBACK = L.SYSFLAG_TRANSACTION_COMMIT, L.SYSFLAG_TRANSACTION_ROLLBACK
_TX_MASK = L.SYSFLAG_TRANSACTION_MASK
_V6 = L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6


class EndOutcome(enum.Enum):
    """What an END_TRANSACTION did."""

    COMMITTED = "committed"        # the message is in its real topic; the half message is done
    ROLLED_BACK = "rolled_back"    # the half message is done, nothing delivered
    PENDING = "pending"            # state unknown (0) or an unknown value: nothing written, no answer
    REFUSED = "refused"            # not a half message of this group at these offsets: nothing written


@dataclasses.dataclass(frozen=True)
class EndResult:
    outcome: EndOutcome
    code: int = ResponseCode.SUCCESS
    remark: str | None = None

    @property
    def refused(self) -> bool:
        """Not a half message of this group at these offsets: nothing was written."""
        return self.outcome is EndOutcome.REFUSED


@dataclasses.dataclass
class TransactionStats:
    """Counters for the metrics endpoint (plain ints, updated where the work happens)."""

    half_messages: int = 0
    committed: int = 0
    rolled_back: int = 0
    refused: int = 0
    checked: int = 0
    discarded: int = 0
    #: half messages found unresolved by the last check round (a gauge)
    pending: int = 0


@dataclasses.dataclass(frozen=True)
class Check:
    """One check-back to send: to ``channel`` (a 4.x producer of ``group``; None when none is
    live), as ``command`` (CHECK_TRANSACTION_STATE), about ``half`` (the copy just written)."""

    group: str
    channel: Any
    command: Any
    half: MessageExt


@dataclasses.dataclass
class CheckRound:
    """What one check round did (tests and logs read it)."""

    checks: list[Check] = dataclasses.field(default_factory=list)
    discarded: int = 0
    pending: int = 0
    half_offset: int = 0
    op_offset: int = 0


class TransactionService:
    """The half-message store, END_TRANSACTION and the check-back, given only what they use.

    ``offsets`` is the broker's consumer offset table (the check-back's progress),
    ``topics`` its topic table (the half topic and TRANS_CHECK_MAX_TIME_TOPIC are created in
    it as RocketMQ creates them), ``store_host`` returns the broker's packed address,
    ``configs`` the current BrokerConfig and ``file_reserved_hours`` the store's retention.
    """

    def __init__(self, *, store: MessageStore, offsets: ConsumerOffsetManager, topics: TopicConfigManager,
                 store_host: Callable[[], bytes], configs: Callable[[], BrokerConfig],
                 clock: Callable[[], int], file_reserved_hours: Callable[[], int] = lambda: 72,
                 stats: TransactionStats | None = None) -> None:
        self.store = store
        self.offsets = offsets
        self.topics = topics
        self.store_host = store_host
        self.configs = configs
        self.clock = clock
        self.file_reserved_hours = file_reserved_hours
        self.stats = stats if stats is not None else TransactionStats()

    # --- half messages ----------------------------------------------------------------------------
    @staticmethod
    def prepare_half(msg: MessageExtBrokerInner) -> MessageExtBrokerInner:
        """The record a half message is stored as (RocketMQ ``parseHalfMessageInner``)."""
        props = dict(msg.properties)
        props[Prop.REAL_TOPIC] = msg.topic
        props[Prop.REAL_QID] = str(msg.queue_id)
        return dataclasses.replace(msg, topic=HALF_TOPIC, queue_id=HALF_QUEUE_ID, properties=props,
                                   sys_flag=msg.sys_flag & ~_TX_MASK)

    def put_half(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store ``msg`` (a producer's TRAN_MSG send) as a half message. The result answers
        the send as RocketMQ does: the queue id the producer chose, the half queue's offset."""
        result = self.store.put_message(self.prepare_half(msg))
        if result.status.stored:
            self.stats.half_messages += 1
            result.queue_id = msg.queue_id
        return result

    # --- END_TRANSACTION ------------------------------------------------------------------------------
    def end(self, h: EndTransactionRequestHeader) -> EndResult:
        """Commit or roll back the half message ``h`` names (RocketMQ ``EndTransactionProcessor``).

        The answers are RocketMQ's: SYSTEM_ERROR with "Find prepared transaction message
        failed" when nothing readable is at the offset, "The producer group wrong", "The
        transaction state table offset wrong", "The commit log offset wrong"; mqbroker also
        refuses, with the same code, a record that is not in the half topic (the Java broker
        fails on it with an exception). Nothing is written for a refusal. A repeated commit of a
        half message is applied again, as on the Java broker: the end is idempotent only
        through the producer sending it once."""
        kind = h.commit_or_rollback
        if kind not in (_COMMIT, _ROLLBACK):
            if kind == L.SYSFLAG_TRANSACTION_NOT:
                log.info("producer group %s: transaction of %s still unknown%s", h.producer_group, h.msg_id,
                         " (check-back answer)" if h.from_transaction_check else "")
            return EndResult(EndOutcome.PENDING)
        half = self._half_at(h.commit_log_offset)
        refusal = self._refusal(half, h)
        if refusal is not None:
            self.stats.refused += 1
            log.warning("END_TRANSACTION from group %s for commitlog offset %d refused: %s",
                        h.producer_group, h.commit_log_offset, refusal)
            return EndResult(EndOutcome.REFUSED, ResponseCode.SYSTEM_ERROR, refusal)
        assert half is not None
        if kind == _COMMIT:
            result = self.store.put_message(self._committed(half, h.commit_log_offset))
            if not result.status.stored:
                return EndResult(EndOutcome.REFUSED, *_put_failure(result))
            self.stats.committed += 1
        else:
            self.stats.rolled_back += 1
        self._put_op(half)
        return EndResult(EndOutcome.COMMITTED if kind == _COMMIT else EndOutcome.ROLLED_BACK)

    def _half_at(self, phy_offset: int) -> MessageExt | None:
        if phy_offset < 0:
            return None
        try:
            return self.store.look_message_by_offset(phy_offset)
        except (MQError, ValueError, IndexError) as e:  # an offset inside a record reads as garbage
            log.info("no record at commitlog offset %d: %s", phy_offset, e)
            return None

    @staticmethod
    def _refusal(half: MessageExt | None, h: EndTransactionRequestHeader) -> str | None:
        if half is None:
            return "Find prepared transaction message failed"
        if half.topic != HALF_TOPIC or Prop.REAL_TOPIC not in half.properties \
                or not half.properties.get(Prop.REAL_QID, "").isdigit():
            return (f"The message at commitlog offset {h.commit_log_offset} is not a half message "
                    f"(topic {half.topic})")
        if half.properties.get(Prop.PGROUP) != h.producer_group:
            return "The producer group wrong"
        if half.queue_offset != h.tran_state_table_offset:
            return "The transaction state table offset wrong"
        if half.commitlog_offset != h.commit_log_offset:
            return "The commit log offset wrong"
        return None

    def _committed(self, half: MessageExt, half_offset: int) -> MessageExtBrokerInner:
        """RocketMQ ``endMessageTransaction``: the record keeps every property of the half
        message as stored (REAL_TOPIC/REAL_QID included: the Java broker clears them from the
        map after the property string was made, so they stay in the record)."""
        props = dict(half.properties)
        props[Prop.WAIT] = "false"  # the store drops it; no flush wait for a producer that is not waiting
        return MessageExtBrokerInner(
            topic=half.properties[Prop.REAL_TOPIC], body=half.body, queue_id=int(half.properties[Prop.REAL_QID]),
            flag=half.flag, properties=props, sys_flag=(half.sys_flag & ~(_TX_MASK | _V6)) | _COMMIT,
            born_timestamp=half.born_timestamp, born_host=_packed(half.born_host),
            store_host=_packed(half.store_host), reconsume_times=half.reconsume_times,
            prepared_transaction_offset=half_offset)

    def _put_op(self, half: MessageExt) -> bool:
        """The op record that marks ``half`` done (RocketMQ ``addRemoveTagInTransactionOp``)."""
        host = self.store_host()
        op = MessageExtBrokerInner(topic=OP_TOPIC, body=str(half.queue_offset).encode(), queue_id=half.queue_id,
                                   properties={Prop.TAGS: REMOVE_TAG, Prop.WAIT: "false"},
                                   born_timestamp=self.clock(), born_host=host, store_host=host)
        result = self.store.put_message(op)
        if not result.status.stored:
            log.error("op record for half message at queue offset %d not written: %s %s", half.queue_offset,
                      result.status.value, result.remark)
        return result.status.stored

    # --- check-back ---------------------------------------------------------------------------------
    def check(self, now_ms: int | None = None,
              producer_channel: Callable[[str], Any] = lambda group: None) -> CheckRound:
        """One check round (RocketMQ ``TransactionalMessageServiceImpl.check``); returns the
        CHECK_TRANSACTION_STATE requests to send, each with the channel ``producer_channel``
        chose for its group (None: no live 4.x producer; a 5.x one may be reached through
        gRPC; the check still counts, as in RocketMQ)."""
        now = self.clock() if now_ms is None else now_ms
        cfg = self.configs()
        rnd = CheckRound()
        half_max = self.store.get_max_offset_in_queue(HALF_TOPIC, HALF_QUEUE_ID)
        if half_max <= 0:
            return rnd
        if self.topics.get(HALF_TOPIC) is None:  # as RocketMQ's fetchMessageQueues creates it
            self.topics.create_group_topic(HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        half_offset = self._progress(HALF_TOPIC)
        op_offset = self._progress(OP_TOPIC)
        rnd.half_offset, rnd.op_offset = half_offset, op_offset
        removed, done_ops = self._read_ops(op_offset, half_offset)
        i = new_offset = half_offset
        end = min(half_max, half_offset + MAX_HALF_PER_ROUND)
        while i < end:
            if i in removed:
                done_ops.append(removed.pop(i))
                i += 1
                new_offset = i
                continue
            msg = self._half_in_queue(i)
            if msg is None:  # gone (disk cleanup) or unreadable: passed over, as RocketMQ does
                i += 1
                new_offset = i
                continue
            action = self._action(msg, now, cfg, removed, done_ops)
            if action == "wait":
                break
            if action == "discard":
                self._discard(msg)
                rnd.discarded += 1
            elif action == "check":
                req = self._renew_and_ask(msg, producer_channel)
                if req is None:  # the copy was not written: try this one again next round
                    break
                rnd.checks.append(req)
            i += 1
            new_offset = i
        rnd.pending = len([1 for j in range(i, half_max) if j not in removed])
        self.stats.pending = rnd.pending
        if new_offset != half_offset:
            self.offsets.commit(CHECK_GROUP, HALF_TOPIC, HALF_QUEUE_ID, new_offset)
        new_op = _contiguous_end(done_ops, op_offset)
        if new_op != op_offset:
            self.offsets.commit(CHECK_GROUP, OP_TOPIC, HALF_QUEUE_ID, new_op)
        return rnd

    def _progress(self, topic: str) -> int:
        stored = self.offsets.query(CHECK_GROUP, topic, HALF_QUEUE_ID)
        if stored is None or stored < 0:
            return self.store.get_min_offset_in_queue(topic, HALF_QUEUE_ID)
        return stored

    def _read_ops(self, op_offset: int, half_offset: int) -> tuple[dict[int, int], list[int]]:
        """Op records from ``op_offset``: {half queue offset: op queue offset} for the ones
        still ahead of the half walk, and the op offsets already behind it."""
        removed: dict[int, int] = {}
        done: list[int] = []
        op_max = min(self.store.get_max_offset_in_queue(OP_TOPIC, HALF_QUEUE_ID), op_offset + MAX_OPS_PER_ROUND)
        for j in range(op_offset, op_max):
            op = self._in_queue(OP_TOPIC, j)
            if op is None:
                done.append(j)
                continue
            try:
                half_at = int(bytes(op.body).decode("utf-8", "replace"))
            except ValueError:
                half_at = -1
            if op.tags != REMOVE_TAG or half_at < 0:
                log.error("op record %d has tag %r and body %r: not a removal, ignored", j, op.tags, bytes(op.body)[:32])
                continue
            if half_at < half_offset:
                done.append(j)
            else:
                removed[half_at] = j
        return removed, done

    def _in_queue(self, topic: str, offset: int) -> MessageExt | None:
        units = self.store.get_consume_queue_units(topic, HALF_QUEUE_ID, offset, 1)
        if units is None or len(units[0]) == 0:
            return None
        return self._half_at(int(units[0][0]))

    def _half_in_queue(self, offset: int) -> MessageExt | None:
        return self._in_queue(HALF_TOPIC, offset)

    def _action(self, msg: MessageExt, now: int, cfg: BrokerConfig, removed: dict[int, int],
                done_ops: list[int]) -> str:
        """"discard", "check", "skip" (done or moved on) or "wait" (stop the walk here)."""
        props = msg.properties
        times = _int(props.get(Prop.TRANSACTION_CHECK_TIMES), 0)
        if times >= cfg.transaction_check_max \
                or now - msg.born_timestamp > self.file_reserved_hours() * 3_600_000:
            return "discard"
        if msg.store_timestamp >= now:
            return "wait"  # stored during this round
        age = now - msg.born_timestamp
        immunity_text = props.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS)
        if immunity_text is not None:
            immunity = _int(immunity_text, -1)
            immunity = cfg.transaction_timeout_ms if immunity == -1 else immunity * 1000
            if age < immunity:
                return self._immune(msg, removed, done_ops)
        elif 0 <= age < cfg.transaction_timeout_ms:
            return "wait"
        return "check"

    def _immune(self, msg: MessageExt, removed: dict[int, int], done_ops: list[int]) -> str:
        """A half message inside its CHECK_IMMUNITY_TIME_IN_SECONDS: done if its first
        offset has an op record, else carried forward as a copy that remembers that offset
        (RocketMQ ``checkPrepareQueueOffset``)."""
        first = msg.properties.get(Prop.TRAN_PREPARED_QUEUE_OFFSET)
        if first is not None:
            first_offset = _int(first, -1)
            if first_offset == -1:
                return "wait"
            if first_offset in removed:
                done_ops.append(removed.pop(first_offset))
                return "skip"
        props = dict(msg.properties)
        props.setdefault(Prop.TRAN_PREPARED_QUEUE_OFFSET, str(msg.queue_offset))
        result = self.store.put_message(self._renewed(msg, props))
        return "skip" if result.status is PutMessageStatus.PUT_OK else "wait"

    def _renewed(self, msg: MessageExt, props: dict[str, str]) -> MessageExtBrokerInner:
        """A copy of a half message at the end of the half queue (``renewHalfMessageInner``)."""
        props = dict(props)
        props[Prop.WAIT] = "false"
        return MessageExtBrokerInner(topic=HALF_TOPIC, body=msg.body, queue_id=msg.queue_id, flag=msg.flag,
                                     properties=props, sys_flag=msg.sys_flag & ~_V6,
                                     born_timestamp=msg.born_timestamp, born_host=_packed(msg.born_host),
                                     store_host=_packed(msg.store_host), reconsume_times=msg.reconsume_times)

    def _renew_and_ask(self, msg: MessageExt, producer_channel: Callable[[str], Any]) -> Check | None:
        props = dict(msg.properties)
        props[Prop.TRANSACTION_CHECK_TIMES] = str(_int(props.get(Prop.TRANSACTION_CHECK_TIMES), 0) + 1)
        result = self.store.put_message(self._renewed(msg, props))
        if result.status is not PutMessageStatus.PUT_OK:
            log.error("half message at queue offset %d not written back for its check: %s", msg.queue_offset,
                      result.status.value)
            return None
        self.stats.checked += 1
        group = props.get(Prop.PGROUP, "")
        copy = dataclasses.replace(msg, properties=props, queue_offset=result.queue_offset,
                                   commitlog_offset=result.phy_offset)
        channel = producer_channel(group) if group else None
        return Check(group, channel, self.check_request(copy), copy)

    def check_request(self, half: MessageExt) -> RemotingCommand:
        """CHECK_TRANSACTION_STATE about ``half`` (``Broker2Client.checkProducerTransactionState``):
        the header names the half record, the body is the message as a pull answer would
        carry it, with its real topic and queue."""
        uniq = half.properties.get(Prop.UNIQ_KEY)
        store_host = _packed(half.store_host)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=half.queue_offset, commit_log_offset=half.commitlog_offset, msg_id=uniq,
            transaction_id=uniq, offset_msg_id=offset_msg_id(store_host, half.commitlog_offset))
        return create_request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext(), self._encode(half), oneway=True)

    def _encode(self, half: MessageExt) -> bytes:
        topic = half.properties.get(Prop.REAL_TOPIC, half.topic).encode()
        props = properties_to_bytes(half.properties)
        born, stored = _packed(half.born_host), _packed(half.store_host)
        sys_flag = half.sys_flag & ~_V6
        if len(born) == L.HOST_V6_BYTES:
            sys_flag |= L.SYSFLAG_BORNHOST_V6
        if len(stored) == L.HOST_V6_BYTES:
            sys_flag |= L.SYSFLAG_STOREHOST_V6
        k = self.store.k
        out = bytearray(k.record_size(len(half.body), len(topic), len(props), sys_flag))
        k.encode_record(out, 0, topic, _int(half.properties.get(Prop.REAL_QID), half.queue_id), half.flag,
                        half.queue_offset, half.commitlog_offset, sys_flag, half.born_timestamp, born,
                        half.store_timestamp, stored, half.reconsume_times, half.prepared_transaction_offset,
                        bytes(half.body), props)
        return bytes(out)

    def _discard(self, msg: MessageExt) -> None:
        """Checked too often: parked in TRANS_CHECK_MAX_TIME_TOPIC and logged (RocketMQ
        ``DefaultTransactionalMessageCheckListener.resolveDiscardMsg``)."""
        log.error("half message %s (real topic %s, group %s) was checked %s times without an answer: moved to %s",
                  msg.properties.get(Prop.UNIQ_KEY), msg.properties.get(Prop.REAL_TOPIC),
                  msg.properties.get(Prop.PGROUP), msg.properties.get(Prop.TRANSACTION_CHECK_TIMES), CHECK_MAX_TOPIC)
        if self.topics.get(CHECK_MAX_TOPIC) is None:
            self.topics.create_group_topic(CHECK_MAX_TOPIC, 1, PERM_READ | PERM_WRITE)
        props = dict(msg.properties)
        props[Prop.WAIT] = "false"
        parked = MessageExtBrokerInner(topic=CHECK_MAX_TOPIC, body=msg.body, queue_id=random.randrange(1),
                                       flag=msg.flag, properties=props, sys_flag=msg.sys_flag & ~_V6,
                                       born_timestamp=msg.born_timestamp, born_host=_packed(msg.born_host),
                                       store_host=_packed(msg.store_host), reconsume_times=msg.reconsume_times)
        if self.store.put_message(parked).status.stored:
            self.stats.discarded += 1


def _packed(host: str) -> bytes:
    return pack_host(*parse_host_port(host))


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _contiguous_end(done: list[int], start: int) -> int:
    """The op offset after the run of done op records starting at ``start``."""
    end = start
    for off in sorted(set(done)):
        if off == end:
            end += 1
        elif off > end:
            break
    return end


def _put_failure(result: PutMessageResult) -> tuple[int, str]:
    if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
        return ResponseCode.SERVICE_NOT_AVAILABLE, "Service not available now."
    if result.status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
        return ResponseCode.MESSAGE_ILLEGAL, f"The message is illegal: {result.remark}"
    return ResponseCode.SYSTEM_ERROR, result.remark or result.status.value
