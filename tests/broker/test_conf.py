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


@pytest.mark.parametrize("bad", ["listenPort=abc", "flushDiskType=SOMETIMES", "brokerRole=BACKUP",
                                 "messageDelayLevel=1x", "listenPort=70000", "namesrvListenPort=-1",
                                 "defaultMessageRequestMode=PUSH"])
def test_bad_values_are_clear_errors(bad):
    with pytest.raises(ConfigError, match=bad.split("=")[0]):
        build_configs(read_properties(bad))


def test_the_default_request_mode_keys():
    b = build_configs(read_properties("defaultMessageRequestMode=pop\ndefaultPopShareQueueNum=2\n")).broker
    assert (b.default_message_request_mode, b.default_pop_share_queue_num) == ("POP", 2)


def test_print_config_and_unknown_keys_refused(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_text("brokerName=zz\n")
    p = subprocess.run([sys.executable, "-m", "mqcore.broker.cli", "-c", str(conf), "-p"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0
    assert "brokerName=zz" in p.stdout and "storePathRootDir=" in p.stdout and "listenPort=10911" in p.stdout
    # a typo'd key stops the start (and -p, which checks as a start does), naming the key it resembles
    conf.write_text("brokerName=zz\nlistenPrt=10999\nnoSuchKey=1\n")
    for extra in (["-p"], ["--log-dir", str(tmp_path / "logs")]):
        p = subprocess.run([sys.executable, "-m", "mqcore.broker.cli", "-c", str(conf), *extra], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "unknown configuration key 'listenPrt' (did you mean 'listenPort'?)" in p.stderr
        assert "unknown configuration key 'noSuchKey'" in p.stderr and "not started" in p.stderr
        assert "READY" not in p.stdout
    p = subprocess.run([sys.executable, "-m", "mqcore.broker.cli", "-c", str(tmp_path / "missing.conf")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "cannot read" in p.stderr


@pytest.mark.parametrize("argv", [["-m", "mqcore.broker.cli", "--listen-port", "70000"],
                                  ["-m", "mqcore.broker.cli", "--namesrv-port", "x"],
                                  ["-m", "mqcore.namesrv.cli", "--port", "99999"]])
def test_bad_ports_on_the_command_line_are_usage_errors(argv):
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "is not a TCP port" in p.stderr and "Traceback" not in p.stderr


# --- configuration that means what it says (issue 13) -------------------------------------------------
import dataclasses  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402

from mqcore.broker.config import BrokerConfig  # noqa: E402
from mqcore.broker.conf import update_runtime_config  # noqa: E402
from mqcore.config import StoreConfig  # noqa: E402
from mqcore.message import MessageExtBrokerInner  # noqa: E402
from mqcore.store.message_store import MessageStore  # noqa: E402

PY_FIELDS = {f.name for cls in (BrokerConfig, StoreConfig) for f in dataclasses.fields(cls) if "_" in f.name}


def _mqbroker(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "mqcore.broker.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_every_store_path_key_is_honoured(tmp_path):
    root, other = tmp_path / "root", tmp_path / "disk2"
    props = {"storePathRootDir": str(root), "storePathCommitLog": str(other / "cl"),
             "storePathConsumeQueue": str(other / "cq"), "storePathIndex": str(other / "idx"),
             "storeCheckpoint": str(other / "meta" / "ckpt"), "abortFile": str(other / "meta" / "abort"),
             "mappedFileSizeCommitLog": str(1 << 20), "maxHashSlotNum": "100", "maxIndexNum": "400"}
    store_cfg = build_configs(props).store
    with MessageStore(store_cfg) as store:
        assert os.path.exists(other / "meta" / "abort")  # the running marker is where abortFile says
        r = store.put_message(MessageExtBrokerInner(topic="T", body=b"x", properties={"KEYS": "k1"}))
        assert r.ok
        store._flush_logic()
    assert os.listdir(other / "cl") == ["%020d" % 0]
    assert os.listdir(other / "cq" / "T") == ["0"]
    assert len(os.listdir(other / "idx")) == 1
    assert os.path.getsize(other / "meta" / "ckpt") == 4096
    assert not os.path.exists(other / "meta" / "abort")  # removed by the clean shutdown
    # nothing of those went under the root: only the lock (and config) live there
    assert not {"commitlog", "consumequeue", "index", "checkpoint", "abort"} & set(os.listdir(root))


def test_several_commitlog_dirs_are_refused_not_misread():
    with pytest.raises(ConfigError, match=r"storePathCommitLog=/a:/b: several"):
        build_configs({"storePathCommitLog": "/a:/b"})


@pytest.mark.parametrize("bad, words", [
    ("fileReservedTime=-5", "fileReservedTime=-5: must be 0 or more"),
    ("diskMaxUsedSpaceRatio=200", "diskMaxUsedSpaceRatio=200: must be a percentage in 10..95"),
    ("diskSpaceWarningLevelRatio=0", "diskSpaceWarningLevelRatio=0"),
    ("deleteWhen=4am", "deleteWhen=4am"),
    ("brokerId=1", "brokerId=1: a master has brokerId 0"),
    ("brokerRole=SLAVE", "a SLAVE needs brokerId > 0"),
    ("haMasterAddress=nowhere", "haMasterAddress=nowhere: 'nowhere' is not host:port"),
    ("listenHost=0.0.0.0:1", "listenHost=0.0.0.0:1: '0.0.0.0:1' is not a host name or IP address (the port goes"),
    ("mappedFileSizeCommitLog=100", "mappedFileSizeCommitLog=100: must be at least 4096"),
    ("mapedFileSizeConsumeQueue=30", "mapedFileSizeConsumeQueue=30: must be a positive multiple of 20"),
    ("metricsPort=70000", "metricsPort=70000"),
    ("dashboardPort=-1", "dashboardPort=-1: -1 is not a TCP port"),
    ("dashboardPort=10911", "dashboardPort=10911: 10911 is also listenPort"),
    ("flushIntervalCommitLog=0", "flushIntervalCommitLog=0: must be positive"),
    ("grpcMinInvisibleTimeMillis=-5", "grpcMinInvisibleTimeMillis=-5: must be in 0..43200000 ms"),
    ("grpcDefaultInvisibleTimeMillis=0", "grpcDefaultInvisibleTimeMillis=0: must be in 1..43200000 ms"),
])
def test_out_of_range_values_are_refused_with_the_rocketmq_key(bad, words):
    with pytest.raises(ConfigError) as e:
        build_configs(read_properties(bad))
    assert words in str(e.value)
    assert not any(f in str(e.value) for f in PY_FIELDS), str(e.value)


def test_print_config_validates_as_a_start_does(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_text("deleteWhen=4am\n")
    p = _mqbroker("-c", str(conf), "-p")
    assert p.returncode == 2 and "deleteWhen=4am" in p.stderr and "Traceback" not in p.stderr
    p = _mqbroker("--log-level", "LOUD", "-p")
    assert p.returncode == 2 and "LOUD" in p.stderr and "DEBUG, INFO, WARNING" in p.stderr


def test_print_config_reads_back_as_the_same_config_without_warnings(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_text(CONF.replace("fileReservedTme=12\n", "") + "storePathCommitLog=/data/cl\nmetricsPort=5557\n"
                    "haListenPort=10912\n")
    first = _mqbroker("-c", str(conf), "-p")
    assert first.returncode == 0 and first.stderr == ""
    # the HA keys now take effect (docs/replication.md): printed as settings, not as ignored
    assert "brokerRole=ASYNC_MASTER" in first.stdout and "# ignored: brokerRole" not in first.stdout
    assert "haListenPort=10912" in first.stdout
    assert "storePathCommitLog=/data/cl" in first.stdout and "metricsPort=5557" in first.stdout
    again = tmp_path / "again.conf"
    again.write_text(first.stdout)
    second = _mqbroker("-c", str(again), "-p")
    assert second.returncode == 0 and second.stderr == ""
    settings = [line for line in first.stdout.splitlines() if not line.startswith("#")]
    assert [line for line in second.stdout.splitlines() if not line.startswith("#")] == settings
    a = build_configs(read_properties(first.stdout))
    b = build_configs(read_properties(CONF.replace("fileReservedTme=12\n", "") + "storePathCommitLog=/data/cl\n"
                                      "metricsPort=5557\nhaListenPort=10912\n"))
    assert (a.broker, a.store) == (b.broker, b.store)


def test_a_failed_start_leaves_no_abort_file(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        store = tmp_path / "store"
        p = _mqbroker("--store", str(store), "--listen-port", str(port), "--namesrv-port", "0",
                      "--log-dir", str(tmp_path / "logs"))
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert "address already in use" in p.stderr.lower()
        assert not (store / "abort").exists()
    finally:
        busy.close()
    # the lock held by another open store: refused, and the other's state untouched
    held = MessageStore(StoreConfig(store_path=str(tmp_path / "locked"), commitlog_file_size_bytes=1 << 20))
    held.load()
    try:
        p = _mqbroker("--store", str(tmp_path / "locked"), "--listen-port", "0", "--namesrv-port", "0",
                      "--log-dir", str(tmp_path / "logs"))
        assert p.returncode == 1 and "locked by another process" in p.stderr
        assert not (tmp_path / "locked" / "abort").exists()
    finally:
        held.shutdown()


def test_runtime_update_takes_runtime_keys_and_refuses_the_rest():
    loaded = build_configs({})
    broker, store = update_runtime_config(loaded.broker, loaded.store, {"fileReservedTime": "12",
                                                                        "brokerPermission": "4"})
    assert store.file_reserved_time_hours == 12 and broker.broker_permission == 4
    with pytest.raises(ConfigError, match="listenPort cannot change while the broker runs"):
        update_runtime_config(loaded.broker, loaded.store, {"listenPort": "1", "fileReservedTime": "1"})
    with pytest.raises(ConfigError, match="unknown key noSuchKey"):
        update_runtime_config(loaded.broker, loaded.store, {"noSuchKey": "1"})
    with pytest.raises(ConfigError, match="diskMaxUsedSpaceRatio=200"):
        update_runtime_config(loaded.broker, loaded.store, {"diskMaxUsedSpaceRatio": "200"})


def test_broker_update_config_changes_a_running_store(tmp_path):
    from mqcore.broker.broker import Broker
    from mqcore.store.results import PutMessageStatus
    loaded = build_configs({"storePathRootDir": str(tmp_path / "s"), "mappedFileSizeCommitLog": str(1 << 20),
                            "maxHashSlotNum": "100", "maxIndexNum": "400"})
    broker = Broker(loaded.broker, loaded.store)
    broker.store.load()
    broker.store.start()
    try:
        big = MessageExtBrokerInner(topic="T", body=b"x" * 2000)
        assert broker.store.put_message(big).ok
        changed = broker.update_config({"maxMessageSize": "1024", "fileReservedTime": "12", "deleteWhen": "04"})
        assert changed == ["maxMessageSize", "fileReservedTime"]  # deleteWhen was 04 already
        r = broker.store.put_message(MessageExtBrokerInner(topic="T", body=b"x" * 2000))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "maxMessageSize 1024" in r.remark
        assert broker.cleanup.policy.reserved_ms == 12 * 3600 * 1000
        with pytest.raises(ConfigError, match="storePathRootDir cannot change"):
            broker.update_config({"storePathRootDir": "/elsewhere"})
        assert broker.store_config.max_message_size_bytes == 1024  # the refused update applied nothing
    finally:
        broker.store.shutdown()


def test_tls_keys_and_the_tls_config_file(tmp_path):
    (tmp_path / "tls.properties").write_text("tls.server.mode=enforcing\ntls.server.need.client.auth=none\n"
                                             "tls.server.certPath=/c.pem\ntls.server.keyPath=/k.pem\n")
    loaded = build_configs({"tls.config.file": str(tmp_path / "tls.properties"), "tls.server.mode": "permissive"})
    assert loaded.broker.tls_server_mode == "permissive"  # broker.conf wins over the file
    assert (loaded.broker.tls_server_cert_path, loaded.broker.tls_server_key_path) == ("/c.pem", "/k.pem")
    assert not loaded.unknown_keys
    with pytest.raises(ConfigError, match="tls.server.mode=sometimes"):
        build_configs({"tls.server.mode": "sometimes"})
    with pytest.raises(ConfigError, match="tls.server.trustCertPath"):
        build_configs({"tls.server.mode": "enforcing", "tls.server.need.client.auth": "require"})
    with pytest.raises(ConfigError, match="cannot read it"):
        build_configs({"tls.config.file": str(tmp_path / "missing.properties")})
