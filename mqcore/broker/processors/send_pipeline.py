"""The SEND pipeline: from a connection's received bytes to the answer bytes, in stages.

Every send request goes one way, in named stages; this module runs the common case of
each stage for all the plain sends of a receive buffer at once:

1. **read** (kernel ``parse_plain_sends``): the complete frames at the head of the buffer
   that are plain SEND_MESSAGE_V2 requests - the usual short-key JSON header, an answer
   expected, no transaction bits, no DELAY / TRAN_MSG / CLUSTER property - with their header
   fields, the record's properties, tags code and index key hashes, read in C;
2. **route**: the topic exists and is writable, the queue is in range, the topic is neither
   a retry topic (retry/DLQ stage) nor a system topic a client may not send to (refusal
   stage). A topic that passed is remembered with its queue count until any topic changes
   (``TopicConfigManager.version``);
3. **store** (``MessageStore.put_plain_sends``): the records, consume-queue units and index
   entries of the batch under one hold of the put lock;
4. **answer** (kernel ``send_answers``): the answer frames of the whole batch in one bytes
   object, handed to the channel, which sends every answer of the receive buffer in one
   write; the put counters are added once per run of one topic.

A frame any stage cannot finish exactly as the general path would stops the batch there,
before anything of it is written or counted: the channel decodes it into a command and
dispatches it to the general processor (``SendProcessor.send`` behind the request guard),
whose stages handle the rest - topic auto-creation, the retry/DLQ redirect, delay levels,
transactions (``SendProcessor.transaction_stage``), batches, SYNC_FLUSH waits, SYNC_MASTER
waits for a slave (``SendProcessor.replicated``), refusals and errors. The channel then offers the frames after it to this pipeline again.

With plain ACL on (``acl``: ``mqcore.acl.fast.SendAclDecisions``) only the compiled core
runs, and it takes a signed send only when the ACL hook would let it through (``SendAcl`` in
mqcore/_send_core.pxi: the signature of each request, the file-derived answers remembered);
every other request passes the hook as a command first, as without the pipeline.
tests/broker/test_send_pipeline.py sends the same requests both ways and compares the
answer bytes and the store files.

With the compiled kernels the same stages run in C for a whole receive buffer: the broker's
connections are ``CoreChannel``s (``channel_class``: the kernels' ``ChannelCore`` under the
remoting Channel), whose ``buffer_updated`` runs ``SendCore.take`` (mqcore/_send_core.pxi) and
writes the answers itself, and the store stage is ``_pipeline.StorePlainSends``. ``__call__``
is that path's reference and runs with the twin kernels (and for the frames after one the
general path took); the cross-path tests run the core, the compiled kernels under
``__call__``, and the twin.
"""
from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING, Any

from mqcore._compat import default_pipeline_kernels
from mqcore.broker.processors.send import SendProcessor, peer_host
from mqcore.message import NOT_ALLOWED_SEND_TOPICS
from mqcore.errors import RemotingError
from mqcore.kernel_api import PipelineKernels
from mqcore.message import RETRY_GROUP_TOPIC_PREFIX
from mqcore.permissions import PERM_WRITE
from mqcore.remoting import CURRENT_VERSION
from mqcore.remoting.channel import Channel
from mqcore.remoting.codes import DEFAULT_MAX_FRAME_BYTES

if TYPE_CHECKING:
    from mqcore.acl.fast import SendAclDecisions
    from mqcore.broker.config import BrokerConfig

log = logging.getLogger(__name__)

__all__ = ["SendPipeline"]

_VERSION = int(CURRENT_VERSION)
_SEPARATORS = frozenset("\x01\x02")
#: routes remembered at most (a client sending to ever new topics must not grow the cache)
_MAX_ROUTES = 4096


@functools.cache
def _core_channel_class(channel_core: type) -> type[Channel]:
    """The remoting Channel on the C connection core (``_send_core.pxi``): the core's
    ``buffer_updated`` hands what it does not take to the Channel's own."""
    return type("CoreChannel", (channel_core, Channel), {"_buffer_updated_py": Channel.buffer_updated})


class SendPipeline:
    """The remoting server's frames processor for sends (``register_frames_processor``).

    Reads ``send``'s configuration, topics and store per call, so a run-time configuration
    change applies to both paths alike. Runs on the event loop (ASYNC_FLUSH only: under
    SYNC_FLUSH a put waits for its fsync, so every send takes the general path's pool)."""

    #: False: connections run ``__call__`` even with the compiled kernels (tests)
    use_core = True

    def __init__(self, send: SendProcessor, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 kernels: PipelineKernels | None = None, acl: SendAclDecisions | None = None) -> None:
        self.send = send
        #: plain ACL's answers for the compiled core; with it ``__call__`` runs the core too
        #: (the Python stages do not check signatures)
        self.acl = acl
        self.k = kernels if kernels is not None else default_pipeline_kernels()
        self.max_frame_bytes = max_frame_bytes
        #: (trace_on, region) -> the answer header's text around the queue id, or None when the
        #: region would need JSON escaping (the general encoder then writes it)
        self._answer_key: tuple[bool, str] | None = None
        self._answer_parts: tuple[bytes, bytes] | None = None
        self._cluster_key: str | None = None
        self._cluster: bytes | None = None
        self._host_key: bytes | None = None
        self._host_hex = b""
        self._cfg: BrokerConfig | None = None
        #: topic -> queue count of the topics that passed the route checks, valid while
        #: ``topics.version`` is ``_routes_version``
        self._routes: dict[str, int] = {}
        self._routes_version = -1
        #: with the compiled kernels: the common case of a receive buffer in C (``SendCore``),
        #: run by the connections of ``channel_class`` straight from the event loop's
        #: ``buffer_updated``; with the twin: None, and ``__call__`` runs the same stages
        self.core: Any = None
        self.channel_class: type[Channel] | None = None
        send_core = getattr(self.k, "SendCore", None) if self.use_core else None
        if send_core is not None:
            self.core = send_core(self, peer_host, NOT_ALLOWED_SEND_TOPICS, _VERSION, acl)
            # the twin has neither (kernel_api.PipelineKernels does not list them): looked up by name
            self.channel_class = _core_channel_class(getattr(self.k, "ChannelCore"))

    def __call__(self, channel: Channel, view: memoryview, start: int, end: int) -> int:
        if self.acl is not None:  # only the compiled core checks signatures (it takes what the hook would pass)
            if self.core is None:
                return start
            stop: int
            stop, answers = self.core.take(channel, view, start, end)
            if answers is not None:
                try:
                    channel.write_frame_nowait(answers)
                except RemotingError as e:
                    log.debug("%s: send answers dropped: %s", channel, e)
            return stop
        send = self.send
        cfg = send.cfg
        if cfg is not self._cfg:  # replaced as a whole by a run-time configuration change
            self.configure(cfg)
        parts, cluster = self._answer_parts, self._cluster
        # SYNC_FLUSH (waits in the pool), SYNC_MASTER (waits for a slave), a read-only broker,
        # a region or cluster name the kernels do not write: the general path
        if send.pool is not None or send.replica is not None or not cfg.broker_permission & PERM_WRITE \
                or parts is None or cluster is None:
            return start
        store = send.store
        # --- read ---
        items, _stop = self.k.parse_plain_sends(view, start, end, self.max_frame_bytes, cluster,
                                                store.index is not None)
        if not items:
            return start
        # --- route --- (a topic that passed keeps its queue count until a topic changes)
        topics = send.topics
        routes = self._routes
        if topics.version != self._routes_version:
            routes.clear()
            self._routes_version = topics.version
        routed = 0
        for item in items:
            topic = item[1]
            queues = routes.get(topic)
            if queues is None:
                tc = topics.get(topic)
                if tc is None or not tc.perm & PERM_WRITE or topic.startswith(RETRY_GROUP_TOPIC_PREFIX) \
                        or topic in NOT_ALLOWED_SEND_TOPICS:
                    break  # auto-creation, retry/DLQ, refusals: the general path's stages
                if len(routes) >= _MAX_ROUTES:
                    routes.clear()
                queues = routes[topic] = max(tc.read_queue_nums, tc.write_queue_nums)
            if item[2] >= queues:
                break  # the general path answers the queue id
            routed += 1
        if not routed:
            return start
        if routed < len(items):
            del items[routed:]
        # --- store ---
        store_host = send.store_host()
        t0 = time.perf_counter()
        stored, _refusal = store.put_plain_sends(items, peer_host(channel), store_host)
        if not stored:
            return start  # the general path answers the refusal of the first one
        send.stats.put_latency.observe(time.perf_counter() - t0)
        # --- answer --- (every answer of the batch in one kernel call, counters per run of a topic)
        on_put = send.stats.on_put_many
        run_topic, run_count, run_bytes = items[0][1], 0, 0
        for item, (_queue_offset, _phy, size) in zip(items, stored):
            if item[1] != run_topic:
                on_put(run_topic, run_count, run_bytes)
                run_topic, run_count, run_bytes = item[1], 0, 0
            run_count += 1
            run_bytes += size
        on_put(run_topic, run_count, run_bytes)
        frames = self.k.send_answers(parts[0], parts[1], self._hex(store_host), items, stored, _VERSION)
        try:
            channel.write_frame_nowait(frames)
        except RemotingError as e:
            log.debug("%s: %d send answers dropped: %s", channel, len(stored), e)
        return items[len(stored) - 1][11]

    def configure(self, cfg: BrokerConfig) -> None:
        """Read what the answers and records take from a (new) configuration."""
        self._cfg = cfg
        self._parts(cfg)
        self._cluster_bytes(cfg.broker_cluster_name)

    def _parts(self, cfg: BrokerConfig) -> tuple[bytes, bytes] | None:
        key = (cfg.trace_on, cfg.region_id)
        if key != self._answer_key:
            trace_on, region = key
            plain = region.isascii() and region.isprintable() and '"' not in region and "\\" not in region
            self._answer_parts = (
                b'{"code":0,"extFields":{"queueId":"',
                f'","TRACE_ON":"{"true" if trace_on else "false"}","MSG_REGION":"{region}","msgId":"'.encode(),
            ) if plain else None
            self._answer_key = key
        return self._answer_parts

    def _cluster_bytes(self, name: str) -> bytes | None:
        """The CLUSTER property value the store adds; None when the kernel cannot write it
        as the general path does (non-ASCII, a separator inside)."""
        if name != self._cluster_key:
            self._cluster = name.encode() if name.isascii() and not _SEPARATORS & set(name) else None
            self._cluster_key = name
        return self._cluster

    def _hex(self, store_host: bytes) -> bytes:
        if store_host != self._host_key:
            self._host_hex = bytes(store_host).hex().upper().encode()
            self._host_key = store_host
        return self._host_hex
