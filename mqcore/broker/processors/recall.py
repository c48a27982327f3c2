"""RECALL_MESSAGE (370, RocketMQ 5.3): recall a timer message before it is delivered.

The checks and answers are the Java broker's (``RecallMessageProcessor``): recall off
(``recallMessageEnable=false``, the default) -> 16; a broker that refuses writes -> 14; an unknown topic -> 17; a handle that does not decode, names another
topic or another broker, or whose time has passed or is beyond ``timerMaxDelaySec`` -> 604
(ILLEGAL_OPERATION). Otherwise a recall marker is stored (``mqcore.store.timer.recall``) and
the answer is SUCCESS with the recalled ``msgId`` — also for a handle whose message does
not exist or was delivered already: the marker then recalls nothing, as on the Java broker.
"""
from __future__ import annotations

from typing import Any, Callable

from mqcore.broker.processors.send import peer_host
from mqcore.permissions import PERM_WRITE
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.headers import RecallMessageRequestHeader
from mqcore.store.timer.recall import check_recall, recall_marker


class RecallProcessor:
    def __init__(self, *, cfg: Callable[[], Any], topics: Any, store: Any, store_host: Callable[[], bytes],
                 clock: Callable[[], int]) -> None:
        self.cfg = cfg
        self.topics = topics
        self.store = store
        self.store_host = store_host
        self.clock = clock

    def recall(self, channel: Any, request: Any) -> Any:
        cfg = self.cfg()
        region = {"MSG_REGION": cfg.region_id}
        if not cfg.recall_message_enable:
            return create_response(request, ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden", region)
        h = RecallMessageRequestHeader.from_command(request)
        if not cfg.broker_permission & PERM_WRITE:
            return create_response(request, ResponseCode.SERVICE_NOT_AVAILABLE,
                                   "recall failed, broker service not available", region)
        if self.topics.get(h.topic) is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST,
                                   f"recall failed, the topic[{h.topic}] not exist", region)
        now = self.clock()
        check = check_recall(h.recall_handle, h.topic, cfg.broker_name, now, self.store.config.timer_max_delay_sec)
        if check.handle is None:
            return create_response(request, ResponseCode.ILLEGAL_OPERATION, check.remark, region)
        handle = check.handle
        marker = recall_marker(handle, h.producer_group, now, peer_host(channel), self.store_host())
        result = self.store.put_message(marker)
        if not result.status.stored:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "recall failed, execute error", region)
        return create_response(request, ResponseCode.SUCCESS, None, {**region, "msgId": handle.message_id})
