"""The put-time side of timer messages (RocketMQ 5 ``HookUtils.handleScheduleMessage``).

A send that names a due time (``TIMER_DELAY_SEC``, else ``TIMER_DELAY_MS``, else
``TIMER_DELIVER_MS``, else ali-ons' ``__STARTDELIVERTIME``) in the future is stored in
``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC``/``REAL_QID`` and ``TIMER_OUT_MS``, the
due time rounded down to the timer precision (a due time exactly on a boundary goes one
slot earlier, so delivery is never late by a whole slot). A due time in the past or now is
stored in its topic at once. A delay level (``DELAY``) wins: the timer properties are
removed. A message already carrying ``TIMER_OUT_MS`` (a delivered timer, or its copy
sent back for a retry) is never held again.

Refusals, as the Java broker's: a value that is not a Java long, or a due time more than
``timerMaxDelaySec`` away -> ``WHEEL_TIMER_MSG_ILLEGAL`` (response code 13); a recall
marker whose time has passed -> the same; timers while ``timerWheelEnable=false`` ->
``WHEEL_TIMER_NOT_ENABLE`` (13).
"""
from __future__ import annotations

import dataclasses
import logging
import re

from mqcore.format import timer as T
from mqcore.message import Prop
from mqcore.store.results import PutMessageStatus

log = logging.getLogger(__name__)
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


@dataclasses.dataclass(frozen=True, slots=True)
class TimerPolicy:
    """The timer settings a put needs (timerWheelEnable, timerMaxDelaySec, timerPrecisionMs)."""

    enabled: bool = True
    max_delay_sec: int = 3 * 24 * 3600
    precision_ms: int = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class Held:
    """Store the message in the timer topic, due at ``out_ms`` (TIMER_OUT_MS)."""

    out_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    status: PutMessageStatus
    remark: str


def _java_long(text: str) -> int | None:
    """``Long.parseLong``: an optional sign and ASCII digits within 64 bits, nothing else."""
    if not _JAVA_LONG.fullmatch(text):
        return None
    v = int(text)
    return v if _LONG_MIN <= v <= _LONG_MAX else None


def _wrap(v: int) -> int:
    """Java long arithmetic (a huge delay in seconds wraps as it does in the Java broker)."""
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def is_timer_request(props: dict[str, str]) -> bool:
    return not props.keys().isdisjoint(T.TIMER_REQUEST_PROPS)


def rewrite(props: dict[str, str], topic: str, queue_id: int, now_ms: int, policy: TimerPolicy) -> Held | Refusal | None:
    """Decide a put with a timer property; ``props`` is changed in place (TIMER_OUT_MS,
    REAL_TOPIC, REAL_QID when held; the timer properties dropped under a delay level).
    None: store it where it was sent."""
    if topic == T.TIMER_TOPIC or T.PROP_TIMER_OUT_MS in props:
        return None  # a rolled or delivered timer
    try:
        delay_level = int(props.get(Prop.DELAY, "0"))
    except ValueError:
        delay_level = 0
    if delay_level > 0:
        for name in T.TIMER_REQUEST_PROPS:
            props.pop(name, None)
        return None
    if not policy.enabled:
        return Refusal(PutMessageStatus.WHEEL_TIMER_NOT_ENABLE,
                       "accurate timer message is not enabled, timerWheelEnable is false")
    for name, scale, absolute in _DUE_PROPS:
        raw = props.get(name)
        if raw is not None:
            value = _java_long(raw)
            if value is None:
                return _illegal(policy, f"{name}={raw[:40]!r} is not a number")
            deliver_ms = value if absolute else _wrap(now_ms + _wrap(value * scale))
            break
    else:  # pragma: no cover - the caller checked is_timer_request
        return None
    if deliver_ms <= now_ms:
        if T.PROP_TIMER_DEL_UNIQKEY in props:
            return _illegal(policy, "the recalled message's time has passed")
        return None
    if deliver_ms - now_ms > policy.max_delay_sec * 1000:
        return _illegal(policy, f"the due time is {deliver_ms - now_ms} ms away")
    p = policy.precision_ms
    out_ms = deliver_ms - p if deliver_ms % p == 0 else deliver_ms // p * p
    props[T.PROP_TIMER_OUT_MS] = str(out_ms)
    props[Prop.REAL_TOPIC] = topic
    props[Prop.REAL_QID] = str(queue_id)
    return Held(out_ms)


_DUE_PROPS = ((T.PROP_TIMER_DELAY_SEC, 1000, False), (T.PROP_TIMER_DELAY_MS, 1, False),
              (T.PROP_TIMER_DELIVER_MS, 1, True), (T.PROP_START_DELIVER_TIME, 1, True))


def due_ms(props: dict[str, str], stored_ms: int) -> int | None:
    """The due time a held message asked for, to the millisecond (TIMER_OUT_MS keeps only its
    slot): the property ``rewrite`` read, a delay counted from the store time (the put's clock
    reading, or a moment after it: never earlier than the due time the put computed). None when
    no property says it (a message held by an older mqcore)."""
    for name, scale, absolute in _DUE_PROPS:
        raw = props.get(name)
        if raw is not None:
            value = _java_long(raw)
            if value is None:
                return None
            return value if absolute else _wrap(stored_ms + _wrap(value * scale))
    return None


def _illegal(policy: TimerPolicy, why: str) -> Refusal:
    """The Java broker's answer, word for word (``why`` is for the log only)."""
    log.debug("timer message refused: %s", why)
    return Refusal(PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL,
                   f"timer message illegal, the delay time should not be bigger than the max delay "
                   f"{policy.max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than "
                   f"the current time")
