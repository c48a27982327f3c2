"""Broker settings an operator may change while the broker runs (``updateBrokerConfig``).

Only keys whose every reader looks them up per request are listed: a change takes effect
on the next request, without a restart. Other keys are refused by name, never accepted
and ignored. The values go through the same converters as broker.conf.
"""
from __future__ import annotations

import dataclasses

from mqcore.broker.conf import BROKER_KEYS
from mqcore.errors import ConfigError

#: RocketMQ key -> BrokerConfig field, for the keys that change at run time
RUNTIME_BROKER_KEYS = (
    "brokerPermission",
    "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup",
    "longPollingEnable",
    "notifyConsumerIdsChangedEnable",
    "rejectTransactionMessage",
)


def parse_runtime_update(current, props: dict[str, str]):
    """The BrokerConfig ``current`` with ``props`` applied; ConfigError names a refused key."""
    changes = {}
    for key, value in props.items():
        if key not in RUNTIME_BROKER_KEYS:
            what = "is not a broker setting" if key not in BROKER_KEYS else "can not change at run time"
            raise ConfigError(f"{key} {what}; the keys updateBrokerConfig can change are: "
                              + ", ".join(RUNTIME_BROKER_KEYS))
        field, conv = BROKER_KEYS[key]
        try:
            changes[field] = conv(value)
        except ConfigError as e:
            raise ConfigError(f"{key}={value}: {e}") from e
        if key == "brokerPermission" and changes[field] not in (2, 4, 6):
            raise ConfigError(f"brokerPermission={value}: must be 2 (write), 4 (read) or 6 (read+write)")
    return dataclasses.replace(current, **changes)
