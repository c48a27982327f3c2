"""The plain SEND_MESSAGE_V2: the request every producer sends for every message, answered
in a few steps.

Why: the general send path (request guard -> header object -> checks -> message object ->
``put_message`` -> result object -> response command -> encoder) costs the broker more
CPU per message than the socket work around it. For the request nearly every send is -
the usual header (:func:`~mqcore.remoting.headers.plain_send_v2_fields`), a topic that
exists and is writable, no retry topic, no transaction, no delay, no batch, ASYNC_FLUSH,
a JSON header, an answer expected - this module reads the fields once, hands them to
``MessageStore.put_plain`` and writes the answer frame in one step.

Every other request, and every request the fast path cannot finish exactly as the
general path would (a value with a separator inside, a region that needs JSON escaping),
goes to ``fallback``: the guarded general processor, untouched. Nothing is written,
counted or answered before that decision, so the fallback gives the same answer and the
same files it always did (tests/broker/test_send_fast_paths.py compares both paths'
answers and store files byte for byte).
"""
from __future__ import annotations

import logging
import struct
import time

from mqcore.broker.processors.send import SendProcessor, peer_host
from mqcore.broker.validate import send_v2_names_pass
from mqcore.errors import RemotingError
from mqcore.format import layout as L
from mqcore.message import RETRY_GROUP_TOPIC_PREFIX, Prop, offset_msg_id, string_to_properties
from mqcore.permissions import PERM_WRITE
from mqcore.remoting import CURRENT_VERSION, FLAG_ONEWAY, SerializeType
from mqcore.remoting.dispatch import Processor
from mqcore.remoting.headers import plain_send_v2_fields

log = logging.getLogger(__name__)

__all__ = ["PlainSendV2"]

_FRAME_PREFIX = struct.Struct(">ii")  # frame length, header word (JSON: the header length alone)
_INT32 = 1 << 31
_TX_MASK = L.SYSFLAG_TRANSACTION_MASK


class PlainSendV2:
    """SEND_MESSAGE_V2's processor: the plain request here, any other through ``fallback``
    (``guarded(SEND_MESSAGE_V2, send.send)``). Reads ``send``'s configuration per request,
    so a run-time configuration change applies to both paths alike."""

    def __init__(self, send: SendProcessor, fallback: Processor) -> None:
        self.send = send
        self.fallback = fallback
        #: (trace_on, region) -> the answer header's text around its variable parts, or
        #: None when the region would need JSON escaping (the general encoder then writes it)
        self._answer_key: tuple[bool, str] | None = None
        self._answer_parts: tuple[str, str] | None = None

    def __call__(self, channel, request):
        if request.flag & FLAG_ONEWAY or request.serialize_type != SerializeType.JSON:
            return self.fallback(channel, request)
        fields = plain_send_v2_fields(request.ext_fields)
        if fields is None:
            return self.fallback(channel, request)
        group, topic, queue_id, sys_flag, born_ts, flag, props_text, reconsume = fields
        send = self.send
        cfg = send.cfg
        if sys_flag & _TX_MASK or not cfg.broker_permission & PERM_WRITE or send.pool is not None \
                or topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or not send_v2_names_pass(topic, group):
            return self.fallback(channel, request)
        tc = send.topics.get(topic)
        if tc is None or not tc.perm & PERM_WRITE or queue_id >= max(tc.read_queue_nums, tc.write_queue_nums):
            return self.fallback(channel, request)
        props = string_to_properties(props_text)
        if Prop.DELAY in props or props.get(Prop.TRAN_MSG) == "true":
            return self.fallback(channel, request)
        parts = self._parts(cfg)
        opaque = request.opaque
        if parts is None or not -_INT32 <= opaque < _INT32:
            return self.fallback(channel, request)
        body = request.body
        if type(body) is not bytes:
            body = bytes(body)
        store_host = send.store_host()
        stats = send.stats
        t0 = time.perf_counter()
        stored = send.store.put_plain(topic, queue_id, flag, props, body, sys_flag, born_ts, peer_host(channel),
                                      store_host, reconsume)
        if stored is None:  # not the plain case after all; nothing was written
            return self.fallback(channel, request)
        stats.put_latency.observe(time.perf_counter() - t0)
        if type(stored) is not tuple:  # refused: the general answer for that result
            stats.on_put(topic, stored)
            return send.response(request, stored)
        queue_offset, phy, size = stored
        stats.on_put_one(topic, size)
        # the bytes SendProcessor.response + encode give for this answer (tests compare them)
        header = (f'{parts[0]}{queue_id}{parts[1]}{offset_msg_id(store_host, phy)}","queueOffset":"{queue_offset}'
                  f'"}},"flag":1,"language":"JAVA","opaque":{opaque},"serializeTypeCurrentRPC":"JSON",'
                  f'"version":{int(CURRENT_VERSION)}}}').encode()
        try:
            channel.write_frame_nowait(_FRAME_PREFIX.pack(len(header) + 4, len(header)) + header)
        except RemotingError as e:
            log.debug("%s: answer to opaque %d dropped: %s", channel, opaque, e)
        return None

    def _parts(self, cfg) -> tuple[str, str] | None:
        key = (cfg.trace_on, cfg.region_id)
        if key != self._answer_key:
            trace_on, region = key
            plain = region.isascii() and region.isprintable() and '"' not in region and "\\" not in region
            self._answer_parts = (
                '{"code":0,"extFields":{"queueId":"',
                f'","TRACE_ON":"{"true" if trace_on else "false"}","MSG_REGION":"{region}","msgId":"',
            ) if plain else None
            self._answer_key = key
        return self._answer_parts
