import subprocess
import sys

import pytest

from mqcore.broker.conf import build_configs, read_properties
from mqcore.config import FlushDiskType
from mqcore.errors import ConfigError

CONF = """
# a RocketMQ broker.conf
brokerClusterName = DefaultCluster
brokerName=broker-a
brokerId=0
listenPort: 10921
namesrvAddr=127.0.0.1:9876;127.0.0.1:9877
storePathRootDir=/data/rocketmq/store
mapedFileSizeCommitLog=1073741824
flushDiskType=SYNC_FLUSH
fileReservedTime=48
deleteWhen=04;16
diskMaxUsedSpaceRatio=88
messageDelayLevel=1s 2s \\
  3s
brokerRole=ASYNC_MASTER
autoCreateTopicEnable=false
fileReservedTme=12
"""


def test_broker_conf_with_rocketmq_keys():
    loaded = build_configs(read_properties(CONF))
    b, s = loaded.broker, loaded.store
    assert (b.broker_name, b.listen_port, b.namesrv_addr) == ("broker-a", 10921, "127.0.0.1:9876;127.0.0.1:9877")
    assert not b.embedded_namesrv and not b.auto_create_topic_enable
    assert s.store_path == "/data/rocketmq/store" and s.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert s.file_reserved_time_hours == 48 and s.delete_when == "04;16" and s.disk_max_used_space_ratio == 88
    assert s.delay_levels_ms == (1000, 2000, 3000)
    assert loaded.unknown_keys == ["fileReservedTme"]  # the typo is reported, not applied


@pytest.mark.parametrize("bad", ["listenPort=abc", "flushDiskType=SOMETIMES", "brokerRole=SLAVE",
                                 "messageDelayLevel=1x", "listenPort=70000", "namesrvListenPort=-1"])
def test_bad_values_are_clear_errors(bad):
    with pytest.raises(ConfigError, match=bad.split("=")[0]):
        build_configs(read_properties(bad))


def test_print_config_and_unknown_key_warning(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_text("brokerName=zz\nnoSuchKey=1\n")
    p = subprocess.run([sys.executable, "-m", "mqcore.broker.cli", "-c", str(conf), "-p"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0
    assert "brokerName=zz" in p.stdout and "storePathRootDir=" in p.stdout and "listenPort=10911" in p.stdout
    assert "noSuchKey" in p.stderr
    p = subprocess.run([sys.executable, "-m", "mqcore.broker.cli", "-c", str(tmp_path / "missing.conf")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "cannot read" in p.stderr


@pytest.mark.parametrize("argv", [["-m", "mqcore.broker.cli", "--listen-port", "70000"],
                                  ["-m", "mqcore.broker.cli", "--namesrv-port", "x"],
                                  ["-m", "mqcore.namesrv.cli", "--port", "99999"]])
def test_bad_ports_on_the_command_line_are_usage_errors(argv):
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "is not a TCP port" in p.stderr and "Traceback" not in p.stderr
