"""``TransactionProducer``: transactional messages (RocketMQ's ``TransactionMQProducer``).

::

    def execute(msg, arg):            # your local transaction, run after the half message is stored
        db.insert_order(arg)
        return LocalTransactionState.COMMIT_MESSAGE

    def check(msg):                   # the broker asks about a transaction it never heard the end of
        return (LocalTransactionState.COMMIT_MESSAGE if db.has_order(msg.keys[0])
                else LocalTransactionState.ROLLBACK_MESSAGE)

    with TransactionProducer("order-tx", checker=check, namesrv_addr="127.0.0.1:9876") as p:
        result = p.send_message_in_transaction(Message("Orders", b"..", keys=["o-1"]), execute, arg=order)

The message is first stored as a *half message*, invisible to consumers; ``execute`` runs
only when that succeeded, and what it returns ends the transaction: ``COMMIT_MESSAGE``
delivers the message, ``ROLLBACK_MESSAGE`` drops it, ``UNKNOW`` (or an exception) leaves it
to the broker's check-back, which calls ``checker`` later (after ``transactionTimeOut``, 6 s by
default, and then every ``transactionCheckInterval``) until it gets an answer or gives up.
The end is sent oneway, as the Java client does: the broker does not answer it.

``checker`` runs on a thread of its own (``check_threads`` of them), never on the client's
event loop, so it may block on a database. ``asend_message_in_transaction`` is the asyncio
variant (``execute`` may then be a coroutine function).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Unpack

from mqcore.client.message import Message, MessageExt, SendResult, SendStatus, decode_messages
from mqcore.client.producer import Producer
from mqcore.client.route import TopicPublishInfo
from mqcore.client.settings import ProducerSettings
from mqcore.errors import IllegalArgumentError, MQError
from mqcore.format import layout as L
from mqcore.message import Prop, decode_offset_msg_id
from mqcore.remoting.codes import RequestCode
from mqcore.remoting.command import RemotingCommand, create_request
from mqcore.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader

if TYPE_CHECKING:
    from mqcore.remoting.channel import Channel

log = logging.getLogger(__name__)

__all__ = ["LocalTransactionState", "TransactionProducer", "TransactionSendResult"]


class LocalTransactionState(str, enum.Enum):
    """What a local transaction (or a check) says; RocketMQ's names, ``UNKNOW`` included."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"

    @property
    def wire_value(self) -> int:
        """``commitOrRollback`` of END_TRANSACTION."""
        return _WIRE[self]


_WIRE = {LocalTransactionState.COMMIT_MESSAGE: L.SYSFLAG_TRANSACTION_COMMIT,
         LocalTransactionState.ROLLBACK_MESSAGE: L.SYSFLAG_TRANSACTION_ROLLBACK,
         LocalTransactionState.UNKNOW: L.SYSFLAG_TRANSACTION_NOT}

LocalExecutor = Callable[[Message, Any], "LocalTransactionState | Awaitable[LocalTransactionState]"]
Checker = Callable[[MessageExt], LocalTransactionState]


@dataclasses.dataclass(slots=True)
class TransactionSendResult(SendResult):
    """A ``SendResult`` plus the local transaction's outcome."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


class TransactionProducer(Producer):
    """A :class:`Producer` that also sends transactional messages; see the module docstring.
    ``checker(msg)`` answers the broker's check-backs; settings as for ``Producer``."""

    def __init__(self, producer_group: str | None = None, *, checker: Checker, check_threads: int = 1,
                 **settings: Unpack[ProducerSettings]) -> None:
        if not callable(checker):
            raise IllegalArgumentError("checker must be a callable taking the message and returning a "
                                       "LocalTransactionState")
        super().__init__(producer_group, **settings)
        self.checker = checker
        self._check_pool = concurrent.futures.ThreadPoolExecutor(max(1, check_threads),
                                                                 thread_name_prefix="mqcore-tx-check")

    def start(self) -> TransactionProducer:
        self._instance.remoting.register_processor(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        self._instance.heartbeat_new_brokers = True
        # the brokers must hear from this producer before its first send, or a restarted
        # application is never asked about the transactions it left open: as the Java client
        # does, publish through the create-topic key's route, which names every broker
        key = self.config.create_topic_key
        self._impl.publish_info.setdefault(key, TopicPublishInfo(key, [], None))
        super().start()
        return self

    def shutdown(self) -> None:
        super().shutdown()
        self._check_pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> TransactionProducer:
        return self.start()

    # --- sending ----------------------------------------------------------------------------------
    def send_message_in_transaction(self, msg: Message, execute: Callable[[Message, Any], LocalTransactionState],
                                    arg: Any = None, *, timeout_ms: float | None = None) -> TransactionSendResult:
        """Store ``msg`` as a half message, run ``execute(msg, arg)``, end the transaction
        with what it returned. A failed half send raises and ``execute`` never runs."""
        self._check_running()
        self._check_blocking_allowed()
        sent = self.send(self._as_half(msg), timeout_ms=timeout_ms)
        state = self._run_local(execute, msg, arg, sent) if sent.status is SendStatus.SEND_OK \
            else LocalTransactionState.ROLLBACK_MESSAGE
        self._wait(self._instance.loop_thread.submit(self._end(sent, state)), timeout_ms)
        return _result(sent, state)

    async def asend_message_in_transaction(self, msg: Message, execute: LocalExecutor, arg: Any = None, *,
                                           timeout_ms: float | None = None) -> TransactionSendResult:
        """``send_message_in_transaction`` from an asyncio loop; ``execute`` may be async."""
        self._check_running()
        sent = await self.asend(self._as_half(msg), timeout_ms=timeout_ms)
        state = LocalTransactionState.ROLLBACK_MESSAGE
        if sent.status is SendStatus.SEND_OK:
            try:
                outcome = execute(msg, arg)
                state = _state(await outcome if inspect.isawaitable(outcome) else outcome)
            except Exception:  # user code: the check-back will ask again
                log.exception("local transaction of %s raised; its state is left UNKNOW", sent.msg_id)
                state = LocalTransactionState.UNKNOW
        await asyncio.wrap_future(self._instance.loop_thread.submit(self._end(sent, state)))
        return _result(sent, state)

    def _as_half(self, msg: Message) -> Message:
        if not isinstance(msg, Message):
            raise IllegalArgumentError(f"expected a Message, got {type(msg).__name__}")
        props = msg.properties
        props.pop(Prop.DELAY, None)  # a half message is never delayed (as in Java)
        props[Prop.TRAN_MSG] = "true"
        props[Prop.PGROUP] = self.config.producer_group
        return msg

    def _run_local(self, execute: Callable[[Message, Any], LocalTransactionState], msg: Message, arg: Any,
                   sent: SendResult) -> LocalTransactionState:
        try:
            return _state(execute(msg, arg))
        except Exception:  # user code: report, leave it to the check-back
            log.exception("local transaction of %s raised; its state is left UNKNOW", sent.msg_id)
            return LocalTransactionState.UNKNOW

    async def _end(self, sent: SendResult, state: LocalTransactionState) -> None:
        """END_TRANSACTION, oneway, to the broker that stored the half message."""
        try:
            _, _, phy = decode_offset_msg_id(sent.offset_msg_id or sent.msg_id)
        except IllegalArgumentError as e:
            log.error("transaction %s: the broker's message id %r is unreadable (%s); the check-back will "
                      "resolve it", sent.msg_id, sent.offset_msg_id, e)
            return
        header = EndTransactionRequestHeader(
            producer_group=self.config.producer_group, tran_state_table_offset=sent.queue_offset,
            commit_log_offset=phy, commit_or_rollback=state.wire_value, msg_id=sent.msg_id,
            from_transaction_check=False, transaction_id=sent.transaction_id or sent.msg_id)
        addr = self._instance.find_broker_address_in_publish(sent.message_queue.broker_name)
        if addr is None:
            log.error("transaction %s: no address for broker %s; the check-back will resolve it", sent.msg_id,
                      sent.message_queue.broker_name)
            return
        try:
            await self._instance.remoting.invoke_oneway(addr, create_request(
                RequestCode.END_TRANSACTION, header.to_ext(), oneway=True, remark=_remark(state)))
        except MQError as e:  # the half message stays; the check-back asks again
            log.warning("transaction %s: END_TRANSACTION to %s failed: %s", sent.msg_id, addr, e)

    # --- check-back (client loop) -------------------------------------------------------------------
    async def _on_check(self, channel: Channel, request: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE: ask ``checker`` off the loop, answer on the same connection."""
        try:
            h = CheckTransactionStateRequestHeader.from_command(request)
            msgs = decode_messages(bytes(request.body))
        except MQError as e:
            log.warning("unreadable transaction check from %s: %s", channel.remote_addr, e)
            return None
        if not msgs:
            log.warning("transaction check from %s without a message", channel.remote_addr)
            return None
        msg = msgs[0]
        msg.transaction_id = h.transaction_id or msg.properties.get(Prop.UNIQ_KEY)
        group = msg.properties.get(Prop.PGROUP)
        if group and group != self.config.producer_group:
            log.warning("transaction check for group %s reached producer %s; ignored", group,
                        self.config.producer_group)
            return None
        loop = asyncio.get_running_loop()
        try:
            state = _state(await loop.run_in_executor(self._check_pool, self.checker, msg))
        except Exception:  # user code or a shut-down pool: UNKNOW, the broker asks again
            log.exception("transaction checker raised for %s; answering UNKNOW", msg.transaction_id)
            state = LocalTransactionState.UNKNOW
        header = EndTransactionRequestHeader(
            producer_group=self.config.producer_group, tran_state_table_offset=h.tran_state_table_offset or 0,
            commit_log_offset=h.commit_log_offset or 0, commit_or_rollback=state.wire_value,
            msg_id=msg.properties.get(Prop.UNIQ_KEY) or h.msg_id or "", from_transaction_check=True,
            transaction_id=h.transaction_id)
        try:
            await channel.send_request_oneway(create_request(RequestCode.END_TRANSACTION, header.to_ext(),
                                                             oneway=True, remark=_remark(state)))
        except MQError as e:
            log.warning("answer to the transaction check of %s failed: %s", msg.transaction_id, e)
        return None


def _state(value: Any) -> LocalTransactionState:
    if isinstance(value, LocalTransactionState):
        return value
    if isinstance(value, str) and value in LocalTransactionState.__members__:
        return LocalTransactionState[value]
    log.error("a local transaction returned %r, not a LocalTransactionState; treated as UNKNOW", value)
    return LocalTransactionState.UNKNOW


def _remark(state: LocalTransactionState) -> str | None:
    return None if state is LocalTransactionState.COMMIT_MESSAGE else f"local transaction state: {state.value}"


def _result(sent: SendResult, state: LocalTransactionState) -> TransactionSendResult:
    fields = {f.name: getattr(sent, f.name) for f in dataclasses.fields(SendResult)}
    fields["transaction_id"] = sent.transaction_id or sent.msg_id
    return TransactionSendResult(**fields, local_transaction_state=state)
