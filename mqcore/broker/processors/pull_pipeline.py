"""The PULL pipeline: from a connection's received bytes to the answer bytes, in stages.

Every PULL_MESSAGE goes one way, through the stages of :class:`PullProcessor`; this module
runs their common case for all the plain pulls of a receive buffer at once:

1. **read** (kernel ``parse_pulls``): the complete frames at the head of the buffer that
   are plain PULL_MESSAGE requests - a JSON header with just the fields a 4.x client sends,
   ASCII without escapes, numbers in canonical form - read in C;
2. **check**: the names pass the request checks (``validate.pull_names_pass``: valid topic
   and group, the group may consume, the subscription parses), then the processor's
   **route** stage (topic exists and is readable, queue in range, group exists);
3. **filter**: a TAG subscription's hash codes (``PullProcessor.tag_codes``), from the
   request or the group's heartbeat;
4. **lookup** (``PullProcessor.lookup``, the store's ``get_message``: one ``pull_lookup``
   kernel call finds the consume-queue file, checks the offset's bounds, picks the units
   (``cq_runs``: the tag codes and the transfer caps - ``maxTransferCountOnMessageInMemory`` /
   ``...BytesOnMessageInMemory``), joins the records into runs and maps each run to one view
   of a mapped commitlog file, never past its committed end);
5. **commit**: the consumer's offset when the COMMIT_OFFSET flag asks for it;
6. **answer** (kernel ``pull_answer``): the answer's prefix and header, handed to the channel
   with the store's views behind it uncopied (``write_buffers_nowait``): every answer of
   the receive buffer leaves in one ``writelines``.

A pull any stage cannot finish exactly as the general path would stops the batch there,
before anything of it is done or counted: the channel decodes it and the general processor
(``PullProcessor.pull`` behind the request guard) runs the same stages plus the rest -
long-polling suspend (nothing found, a suspend timeout: the pull is parked in the hold
service), SQL92 and class filters, refusals and errors. The channel then offers the frames
after it to the pipelines again. ACL-enabled servers do not install the pipeline.
tests/broker/test_pull_pipeline.py pulls the same way both ways and compares the answers.

With the compiled kernels the same stages run in C for a receive buffer whose first frame is
a pull: the broker's connections are the send pipeline's ``CoreChannel``s, whose
``buffer_updated`` runs ``PullCore.take`` (mqcore/_pipeline_pull.pxi) and hands the answers -
prefixes and the commitlog's views - to one ``transport.writelines``. The core remembers the
check and route verdicts per (topic, group, subscription) while no topic changes, asks the
group's consume switch and existence per pull, looks up with the store kernels' ``PullReader``
(``pull_lookup`` with each mapped file's fixed parts read once; no result object), and commits
offsets and counts pulls in place (``in_place``). ``__call__`` is that path's reference, runs with the twin
kernels and for the frames after one the general path took; the cross-path tests run the
core, the compiled kernels under ``__call__`` (``use_core = False``) and the twin.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqcore._compat import default_pipeline_kernels
from mqcore.broker.filtering import is_tag_type
from mqcore.broker.metadata import ConsumerOffsetTable
from mqcore.broker.processors.pull import _CODE_BY_NAME, _PULL_KIND, PullProcessor
from mqcore.broker.stats import BrokerStats
from mqcore.broker.validate import pull_names_pass
from mqcore.errors import RemotingError
from mqcore.kernel_api import PipelineKernels
from mqcore.remoting import CURRENT_VERSION, PullSysFlag, ResponseCode
from mqcore.remoting.codes import DEFAULT_MAX_FRAME_BYTES
from mqcore.store.reader import MAX_FILTER_UNITS

if TYPE_CHECKING:
    from mqcore.remoting.channel import Channel

log = logging.getLogger(__name__)

__all__ = ["PullPipeline"]

_VERSION = int(CURRENT_VERSION)
_SUCCESS = int(ResponseCode.SUCCESS)
_NOT_FOUND = int(ResponseCode.PULL_NOT_FOUND)
_OFFSET_MOVED = int(ResponseCode.PULL_OFFSET_MOVED)
_COMMIT = int(PullSysFlag.COMMIT_OFFSET)
_SUSPEND = int(PullSysFlag.SUSPEND)
_FROM_REQUEST = int(PullSysFlag.SUBSCRIPTION)
#: filter verdicts remembered (a broker sees a few subscriptions; a flood of new ones only
#: empties the memory)
_MAX_FILTERS = 1024


class PullPipeline:
    """The remoting server's frames processor for pulls (see :class:`RequestPipelines`).

    Reads the processor's managers and settings per call, so a run-time change applies to
    both paths alike."""

    #: False: the C connection core does not take pulls (tests compare both paths)
    use_core = True

    def __init__(self, pull: PullProcessor, *, consume_enabled: Callable[[str], bool] | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, kernels: PipelineKernels | None = None) -> None:
        self.pull = pull
        self.consume_enabled = consume_enabled
        self.max_frame_bytes = max_frame_bytes
        self.k = kernels if kernels is not None else default_pipeline_kernels()
        #: status name -> its remark as bytes (keyed by the name: an enum member hashes in Python)
        self._remarks: dict[str, bytes] = {}
        #: the filter stage's verdicts: per (request expression, type), or per heartbeat
        #: subscription (by identity: a changed subscription is a new object; the entry
        #: holds it, so its id is not reused while remembered)
        self._filters: dict[Any, tuple[Any, bool, frozenset[int] | None]] = {}
        #: with the compiled kernels: this pipeline's stages in C for a receive buffer whose
        #: first frame is a pull (``PullCore``, run by the send pipeline's ``channel_class``
        #: connections straight from the event loop's ``buffer_updated``); None with the twin,
        #: whose ``__call__`` runs the same stages
        self.pull_core: Any = None
        #: (commit, count): the C core commits offsets and counts pulls in place, as
        #: ``ConsumerOffsetTable.commit`` and ``BrokerStats.on_pulled`` do, when the broker's
        #: offsets and counters are those classes' methods (else it calls them)
        self.in_place = (isinstance(pull.offsets, ConsumerOffsetTable)
                         and type(pull.offsets).commit is ConsumerOffsetTable.commit
                         and type(pull.offsets).key is ConsumerOffsetTable.key,
                         isinstance(pull.stats, BrokerStats) and type(pull.stats).on_pulled is BrokerStats.on_pulled)
        pull_core = getattr(self.k, "PullCore", None) if self.use_core else None
        store = pull.store
        if pull_core is not None and hasattr(store, "reader") and hasattr(getattr(store, "k", None), "pull_lookup"):
            self.pull_core = pull_core(self, pull_names_pass, {n: int(c) for n, c in _CODE_BY_NAME.items()},
                                       _PULL_KIND, (_SUCCESS, _NOT_FOUND, _OFFSET_MOVED), MAX_FILTER_UNITS, _VERSION)

    def __call__(self, channel: Channel, view: memoryview, start: int, end: int) -> int:
        # --- read ---
        items, _stop = self.k.parse_pulls(view, start, end, self.max_frame_bytes)
        if not items:
            return start
        pull = self.pull
        clients, stats, answer, consume_enabled = pull.clients, pull.stats, self.k.pull_answer, self.consume_enabled
        pos = start
        for (opaque, group, topic, queue_id, queue_offset, max_nums, sys_flag, commit_offset, suspend_ms,
             subscription, expression_type, frame_end) in items:
            # --- check ---
            if not pull_names_pass(topic, group, sys_flag, subscription, consume_enabled) \
                    or pull.route(topic, queue_id, group) is not None:
                break  # the general path answers the refusal
            # --- filter ---
            tag, codes = self._filter(sys_flag, subscription, expression_type, clients.subscription(group, topic))
            if not tag:
                break  # SQL92 (or its refusal): the general path's filter stage
            # --- lookup ---
            result, code = pull.lookup(topic, queue_id, queue_offset, max_nums, codes)
            if code == _NOT_FOUND and sys_flag & _SUSPEND and suspend_ms > 0:
                break  # nothing yet: the general path parks it (long polling)
            # --- commit ---
            if sys_flag & _COMMIT and commit_offset >= 0:
                pull.offsets.commit(group, topic, queue_id, commit_offset)
            stats.on_pull(group, topic, result, _PULL_KIND.get(int(code), "other"), False)
            # --- answer ---
            name = result.status._name_
            remark = self._remarks.get(name)
            if remark is None:
                remark = self._remarks[name] = result.status.value.encode("ascii")
            body = result.buffers if code == _SUCCESS else ()
            size = result.buffer_total_size if code == _SUCCESS else 0
            prefix = answer(code, opaque, remark, result.next_begin_offset, result.min_offset, result.max_offset,
                            size, _VERSION)
            try:
                channel.write_buffers_nowait([prefix, *body], len(prefix) + size)
            except RemotingError as e:
                log.debug("%s: a pull answer dropped: %s", channel, e)
            pos = frame_end
            if channel.reading_paused:
                break  # the peer is behind on its answers: the rest waits (memory bound per connection)
        return pos

    def _filter(self, sys_flag: int, subscription: str | None, expression_type: str | None,
                sub: Any) -> tuple[bool, frozenset[int] | None]:
        """(a TAG subscription?, its tag codes): the processor's filter stage, remembered."""
        if sys_flag & _FROM_REQUEST or sub is None:
            key: Any = (subscription, expression_type)
        else:
            key = id(sub)
        got = self._filters.get(key)
        if got is not None and (got[0] is sub or type(key) is tuple):
            return got[1], got[2]
        from_request = sys_flag & _FROM_REQUEST or sub is None
        tag = is_tag_type(expression_type if from_request else sub.expression_type)
        codes = self.pull.tag_codes(sys_flag, subscription, sub) if tag else None
        if len(self._filters) >= _MAX_FILTERS:
            self._filters.clear()
        self._filters[key] = (None if type(key) is tuple else sub, tag, codes)
        return tag, codes
