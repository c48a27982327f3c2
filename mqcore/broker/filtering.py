"""SQL92 subscriptions on the broker: which filter a pull uses, CHECK_CLIENT_CONFIG, and
selecting the matching records from what the store read.

RocketMQ's rules, as the 4.9 broker answers them:

* ``enablePropertyFilter=false`` (the default): a SQL92 subscription is refused, by
  CHECK_CLIENT_CONFIG (46) and by every pull, with SYSTEM_ERROR "The broker does not
  support consumer to filter message by SQL92". The Java client's ``start()`` then fails.
* an expression that does not parse: CHECK_CLIENT_CONFIG and a pull carrying it answer
  SUBSCRIPTION_PARSE_FAILED (23) with the parser's message; a pull relying on the
  heartbeat's copy answers SUBSCRIPTION_NOT_EXIST (24), as Java keeps no filter for it.
* a record matches when the expression is TRUE over its properties (``TAGS`` included);
  records that do not match are skipped, and ``nextBeginOffset`` moves past them.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from mqcore._compat import default_kernels
from mqcore.errors import FilterExpressionError, MQError, ProtocolError
from mqcore.filter.sql92 import Sql92Filter, compile_sql92
from mqcore.kernel_api import StoreKernels
from mqcore.message import string_to_properties
from mqcore.remoting import PullSysFlag, RemotingCommand, ResponseCode, create_response
from mqcore.remoting.headers import PullMessageRequestHeader
from mqcore.jsonutil import loads_lenient
from mqcore.store.results import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from mqcore.remoting.channel import Channel

log = logging.getLogger(__name__)


class Subscription(Protocol):
    """What a pull's filter reads of a heartbeat subscription (``clients.Subscription``; named
    here, not imported: clients imports this module)."""

    expression_type: str
    sql_filter: Sql92Filter | None
    filter_error: str | None

TAG = "TAG"
SQL92 = "SQL92"
#: extracted records per decode call; a pull never returns more than a few hundred
_MAX_RECORDS = 1 << 20


def is_tag_type(expression_type: str | None) -> bool:
    return not expression_type or expression_type.upper() == TAG


def not_supported_remark(expression_type: str) -> str:
    return f"The broker does not support consumer to filter message by {expression_type}"


def compile_expression(expression_type: str, expression: str | None) -> Sql92Filter:
    """The filter for a non-TAG subscription; FilterExpressionError when it cannot be built."""
    if expression_type.upper() != SQL92:
        raise FilterExpressionError(f"unknown subscription expression type {expression_type!r} (TAG or SQL92)")
    return compile_sql92(expression or "")


def pull_filter(enabled: bool, request: RemotingCommand, h: PullMessageRequestHeader,
                sub: Subscription | None) -> Sql92Filter | None | tuple[RemotingCommand]:
    """The SQL92 filter a pull uses, None when it is not a SQL92 pull, or ``(response,)``
    refusing it. ``enabled``: enablePropertyFilter; ``sub``: the group's subscription from
    heartbeats (may be None)."""
    # the request's expression counts when it says so, or when no heartbeat named one yet
    from_request = bool(h.sys_flag & PullSysFlag.SUBSCRIPTION) or sub is None
    expression_type = h.expression_type if from_request else (sub.expression_type if sub else TAG)
    if is_tag_type(expression_type):
        return None
    expression_type = cast(str, expression_type)  # is_tag_type answered True for None and ""
    if not enabled:
        return (create_response(request, ResponseCode.SYSTEM_ERROR, not_supported_remark(expression_type)),)
    if from_request or sub is None:  # sub is None only when from_request (said so for mypy)
        try:
            return compile_expression(expression_type, h.subscription)
        except FilterExpressionError as e:
            return (create_response(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e)),)
    if sub.sql_filter is None:
        return (create_response(request, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                "The broker's consumer filter data is not exist!Your expression may be wrong! "
                                f"({sub.filter_error})"),)
    return sub.sql_filter


def select_matching(result: GetMessageResult, flt: Sql92Filter, k: StoreKernels | None = None) -> GetMessageResult:
    """Keep the records of ``result`` whose properties match ``flt``; a read that found
    records but none matching becomes NO_MATCHED_MESSAGE (the client pulls on at once)."""
    if result.status is not GetMessageStatus.FOUND:
        return result
    k = k or default_kernels()
    kept, total = [], 0
    for buf in result.buffers:
        pos = 0
        for rec in k.decode_records(buf, 0, len(buf), _MAX_RECORDS, False):
            size = rec.store_size
            if flt.matches(string_to_properties(rec.properties)):
                kept.append(buf[pos:pos + size])
                total += size
            pos += size
    status = GetMessageStatus.FOUND if kept else GetMessageStatus.NO_MATCHED_MESSAGE
    return GetMessageResult(status, result.next_begin_offset, result.min_offset, result.max_offset, kept,
                            len(kept), total, result.suggest_pulling_from_slave)


def check_client_config(property_filter_enabled: Callable[[], bool], channel: Channel,
                        request: RemotingCommand) -> RemotingCommand:
    """CHECK_CLIENT_CONFIG (46): the Java client asks before it starts a consumer whose
    subscription is not a tag expression."""
    try:
        # a received request's body is bytes (a list body is only ever sent)
        data = loads_lenient(cast(bytes, request.body)) if request.body else {}
    except ProtocolError as e:
        return create_response(request, ResponseCode.SYSTEM_ERROR, f"malformed CHECK_CLIENT_CONFIG body: {e}")
    sub = data.get("subscriptionData") if isinstance(data, dict) else None
    if not isinstance(sub, dict):
        return create_response(request, ResponseCode.SUCCESS)
    expression_type = str(sub.get("expressionType") or TAG)
    if is_tag_type(expression_type):
        return create_response(request, ResponseCode.SUCCESS)
    if not property_filter_enabled():
        return create_response(request, ResponseCode.SYSTEM_ERROR, not_supported_remark(expression_type))
    try:
        compile_expression(expression_type, sub.get("subString"))
    except MQError as e:
        return create_response(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e))
    return create_response(request, ResponseCode.SUCCESS)
