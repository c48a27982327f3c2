"""updateBrokerConfig outlives a restart of the mqbroker process, as on a RocketMQ broker: the
change is saved into the broker.conf given with ``-c`` (the same scenario runs against the
Java broker in tests/reference/test_mqadmin_cli_java.py)."""
from __future__ import annotations

import os

from tests.admin import scenarios
from tests.admin.scenarios import Target
from tests.support.processes import BrokerProcess


def test_update_broker_config_survives_restart(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"fileReservedTime": "48"}) as b:
        conf_path = b.argv[b.argv.index("-c") + 1]
        with open(conf_path, "a", encoding="utf-8") as f:  # the operator's own lines stay as written
            f.write("# kept: a comment\nbrokerClusterName = DefaultCluster\n")

        def restart():
            b._argv = lambda: b.argv  # start again from the file as the broker left it
            b.restart()
            return Target(b.namesrv_addr, b.broker_addr, b.broker_name)

        scenarios.config_survives_restart(Target(b.namesrv_addr, b.broker_addr, b.broker_name), conf_path, restart)
        text = open(conf_path, encoding="utf-8").read()
        # in place where the key was, appended where it was not, the rest untouched
        assert text.count("fileReservedTime=") == 1 and "fileReservedTime=7\n" in text
        assert text.endswith("maxTransferCountOnMessageInMemory=17\n")
        assert "# kept: a comment\nbrokerClusterName = DefaultCluster\n" in text

        # a key that cannot change at run time is refused and the file is left alone
        r = scenarios.Target(b.namesrv_addr, b.broker_addr, b.broker_name).run(
            "updateBrokerConfig", "-b", b.broker_addr, "-k", "listenPort", "-v", "1234")
        assert r.rc != 0 and "listenPort" in r.err
        assert open(conf_path, encoding="utf-8").read() == text

        # a file that cannot be saved into: applied all the same, and mqadmin says it was not saved
        os.remove(conf_path)
        t = Target(b.namesrv_addr, b.broker_addr, b.broker_name)
        r = t.ok("updateBrokerConfig", "-b", b.broker_addr, "-k", "fileReservedTime", "-v", "9")
        assert "warning" in r.err and "not saved" in r.err and conf_path in r.err, r.err
        assert t.ok("getBrokerConfig", "-b", b.broker_addr, "--json").json["fileReservedTime"] == "9"
        assert not os.path.exists(conf_path)


def test_write_back_keeps_the_file_readable(tmp_path):
    from mqcore.broker.conf import read_properties, write_back
    path = tmp_path / "broker.conf"
    path.write_text("# head\nbrokerName=a\ndeleteWhen: 04\nmessageDelayLevel=1s 5s \\\n  10s\nfileReservedTime 48\n"
                    "fileReservedTime=12\n")
    write_back(str(path), {"deleteWhen": "03", "messageDelayLevel": "1s", "fileReservedTime": "7",
                           "traceOn": "false"})
    text = path.read_text()
    assert text == "# head\nbrokerName=a\ndeleteWhen=03\nmessageDelayLevel=1s\nfileReservedTime=7\n" \
                   "fileReservedTime=7\ntraceOn=false\n"
    assert read_properties(text) == {"brokerName": "a", "deleteWhen": "03", "messageDelayLevel": "1s",
                                     "fileReservedTime": "7", "traceOn": "false"}
