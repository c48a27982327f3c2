"""The broker-side pieces behind brokerStatus and updateBrokerConfig, without a network."""
from __future__ import annotations

import pytest

from mqcore.broker.config import BrokerConfig
from mqcore.broker.runtime_config import parse_runtime_update
from mqcore.broker.runtime_stats import ThroughputSampler
from mqcore.errors import ConfigError


def test_sampler_rates_over_each_window():
    s = ThroughputSampler()
    for second in range(0, 601):  # 10 msg/s for 10 minutes, then a burst of 100 msg/s for 10 s
        s.sample(second * 1000, second * 10)
    for second in range(601, 611):
        s.sample(second * 1000, 6000 + (second - 600) * 100)
    ten_s, one_min, ten_min = (float(x) for x in s.text().split())
    assert ten_s == pytest.approx(100.0)
    assert one_min == pytest.approx((7000 - 5500) / 60)  # t=550 s -> t=610 s
    assert 10 < ten_min < 12


def test_sampler_never_reports_negative_or_without_history():
    s = ThroughputSampler()
    assert s.text() == "0.00 0.00 0.00"
    s.sample(0, 100)
    s.sample(1000, 40)  # a topic was deleted: the total went down
    assert s.rate(10_000) == 0.0


def test_runtime_update_converts_and_refuses_by_key():
    cfg = BrokerConfig(broker_name="b")
    new = parse_runtime_update(cfg, {"autoCreateTopicEnable": "false", "brokerPermission": "4"})
    assert (new.auto_create_topic_enable, new.broker_permission) == (False, 4)
    assert cfg.auto_create_topic_enable is True  # the old config is untouched
    with pytest.raises(ConfigError, match="listenPort can not change at run time"):
        parse_runtime_update(cfg, {"listenPort": "1"})
    with pytest.raises(ConfigError, match="bogus is not a broker setting"):
        parse_runtime_update(cfg, {"bogus": "1"})
    with pytest.raises(ConfigError, match="autoCreateTopicEnable=maybe"):
        parse_runtime_update(cfg, {"autoCreateTopicEnable": "maybe"})
