"""Client configuration defaults and validation."""
from __future__ import annotations

import pytest

from mqcore.client.config import (
    ConsumeFromWhere,
    MessageModel,
    ProducerConfig,
    PushConsumerConfig,
    build,
)
from mqcore.errors import ConfigError


def test_java_defaults():
    p = ProducerConfig()
    assert (p.send_msg_timeout_ms, p.retry_times_when_send_failed, p.retry_times_when_send_async_failed) == (3000, 2, 2)
    assert (p.compress_msg_body_over_howmuch, p.compress_level, p.max_message_size_bytes) == (4096, 5, 4 * 1024 * 1024)
    assert p.create_topic_key == "TBW102" and p.default_topic_queue_nums == 4 and not p.send_latency_fault_enable
    c = PushConsumerConfig()
    assert (c.pull_batch_size, c.consume_thread_max, c.pull_threshold_for_queue) == (1000, 20, 1000)
    assert (c.broker_suspend_max_time_ms, c.consumer_timeout_ms_when_suspend) == (15000, 30000)
    assert c.consume_timeout_min == 15 and c.effective_max_reconsume_times == 16
    assert c.message_model is MessageModel.CLUSTERING
    assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert c.heartbeat_broker_interval_ms == 30000 and c.persist_consumer_offset_interval_ms == 5000


def test_short_names_and_validation():
    c = PushConsumerConfig(consume_from_where="first", message_model="BROADCASTING")
    assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert c.message_model is MessageModel.BROADCASTING
    with pytest.raises(ConfigError):
        PushConsumerConfig(consume_from_where="middle")
    with pytest.raises(ConfigError):
        PushConsumerConfig(pull_batch_size=0)
    with pytest.raises(ConfigError):
        ProducerConfig(producer_group="bad group")
    with pytest.raises(ConfigError):
        ProducerConfig(namesrv_addr="")
    with pytest.raises(ConfigError):
        PushConsumerConfig(consume_timestamp="2024")


def test_build_reports_unknown_settings():
    with pytest.raises(ConfigError, match="send_timeout"):
        build(ProducerConfig, None, {"send_timeout": 1})
    base = ProducerConfig(producer_group="g")
    assert build(ProducerConfig, base, {"send_msg_timeout_ms": 10}).send_msg_timeout_ms == 10
    assert ProducerConfig(namesrv_addr="a:1;b:2").namesrv_addrs == ["a:1", "b:2"]


# --- typed settings ------------------------------------------------------------------------------------
import dataclasses as _dc  # noqa: E402
import subprocess as _sp  # noqa: E402
import sys as _sys  # noqa: E402
import typing as _typing  # noqa: E402

from mqcore.client import config as _config  # noqa: E402
from mqcore.client import settings as _settings  # noqa: E402
from mqcore.errors import SettingTypeError  # noqa: E402

_PAIRS = [(_settings.ProducerSettings, _config.ProducerConfig),
          (_settings.PushConsumerSettings, _config.PushConsumerConfig),
          (_settings.LitePullConsumerSettings, _config.LitePullConsumerConfig),
          (_settings.PullConsumerSettings, _config.PullConsumerConfig)]


@pytest.mark.parametrize("typed, config", _PAIRS, ids=lambda c: c.__name__)
def test_each_settings_typeddict_names_its_config_fields_with_their_types(typed, config):
    """A field added to a config dataclass without its TypedDict entry (or with another type) fails here."""
    fields = _typing.get_type_hints(config)
    keys = _typing.get_type_hints(typed)
    group = {"producer_group", "consumer_group"}  # the constructors' first parameter
    assert set(keys) == {f.name for f in _dc.fields(config)} - group
    for name, hint in keys.items():
        want = fields[name]
        if isinstance(want, type) and issubclass(want, _config.enum.Enum):
            want = want | str
        assert hint == want, (name, hint, want)


@pytest.mark.parametrize("setting, value, takes", [
    ("send_msg_timeout_ms", "3000", "int"),
    ("send_msg_timeout_ms", 3000.0, "int"),
    ("send_msg_timeout_ms", True, "int"),
    ("auto_batch", 1, "bool"),
    ("namesrv_addr", 9876, "str"),
    ("client_ip", 127, "str | None"),
    ("latency_max_ms", (50, "100"), "tuple[int, ...]"),
])
def test_a_wrong_type_is_refused_naming_the_setting(setting, value, takes):
    with pytest.raises(SettingTypeError, match=f"setting {setting} takes {_re_escape(takes)}, got"):
        build(ProducerConfig, None, {setting: value})
    with pytest.raises(TypeError):  # also what a Python programmer catches for a wrong type
        build(ProducerConfig, None, {setting: value})


def _re_escape(text: str) -> str:
    import re
    return re.escape(text)


def test_right_types_and_enum_names_are_taken():
    push = build(_config.PushConsumerConfig, None, {"message_model": "BROADCASTING", "consume_timeout_min": 1,
                                                    "client_ip": None, "consume_from_where": "first"})
    assert push.message_model is _config.MessageModel.BROADCASTING and push.consume_timeout_min == 1
    with pytest.raises(SettingTypeError, match="message_model takes MessageModel or its name"):
        build(_config.PushConsumerConfig, None, {"message_model": 1})
    assert build(ProducerConfig, None, {"latency_max_ms": [1, 2, 3, 4, 5, 6, 7]}).latency_max_ms[0] == 1


def test_mypy_catches_a_wrong_setting_type_in_user_code(tmp_path):
    """What a user's own mypy run says about ``send_msg_timeout_ms="3000"`` and a misspelt setting."""
    pytest.importorskip("mypy")
    app = tmp_path / "app.py"
    app.write_text('from mqcore.client import LitePullConsumer, Producer, PullConsumer, PushConsumer\n'
                   'p = Producer("g", send_msg_timeout_ms="3000")\n'
                   'c = PushConsumer("cg", pull_batch_sise=32)\n'
                   'ok = PushConsumer("cg", pull_batch_size=32, message_model="BROADCASTING")\n'
                   'lp = LitePullConsumer("lg", auto_commit="yes")\n'
                   'pc = PullConsumer("pg", consumer_pull_timeout_ms=1000)\n')
    r = _sp.run([_sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(app)], capture_output=True,
                text=True, timeout=600, cwd=tmp_path)
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert 'app.py:2: error: Argument "send_msg_timeout_ms" to "Producer" has incompatible type "str"' in out, out
    assert 'app.py:3: error: Unexpected keyword argument "pull_batch_sise"' in out, out
    assert 'app.py:5: error: Argument "auto_commit" to "LitePullConsumer"' in out, out
    assert "app.py:4" not in out and "app.py:6" not in out, out
