"""mqcore.acl without a broker: the file format, white address patterns, the signature, the
order of the checks, the reload rules, and the name server's write protection."""
from __future__ import annotations

import asyncio
import logging
import os

import pytest

from mqcore.acl import AclFile, PlainAccessValidator, SessionCredentials, parse_plain_acl
from mqcore.acl.addresses import compile_pattern
from mqcore.acl.signing import content, signature
from mqcore.acl.validator import DENIED_CODE, EXCEPTION_NAME
from mqcore.clock import ManualClock
from mqcore.errors import AclConfigError
from mqcore.namesrv.config import NamesrvConfig
from mqcore.namesrv.server import NameServer
from mqcore.remoting import RemotingClient, RemotingServer
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, create_request
from tests.support import acl

# --- white remote addresses -------------------------------------------------------------------


@pytest.mark.parametrize("pattern, yes, no", [
    ("*", ["10.1.2.3", "::1"], []),
    ("*.*.*.*", ["10.1.2.3"], []),
    ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1", "10.168.0.1"]),
    ("192.168.1.1-10", ["192.168.1.1", "192.168.1.10"], ["192.168.1.11", "192.168.1.0", "192.168.2.5"]),
    ("10.2-5.*.*", ["10.2.0.1", "10.5.255.255"], ["10.6.0.1", "11.3.0.0"]),
    ("192.168.1.{1,2,3}", ["192.168.1.2"], ["192.168.1.4", "192.168.1.12"]),
    ("127.0.0.1,10.0.0.9", ["127.0.0.1", "10.0.0.9", "::ffff:127.0.0.1"], ["127.0.0.2"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
    ("", [], ["127.0.0.1"]),
])
def test_white_address_patterns(pattern, yes, no):
    compiled = compile_pattern(pattern)
    assert all(compiled.matches(a) for a in yes), pattern
    assert not any(compiled.matches(a) for a in no), pattern


@pytest.mark.parametrize("bad", ["300.1.1.1", "192.168.*.1", "192.168.1.10-2", "*.168.1.1", "host.example",
                                 "192.168.1.{}", "1.2.3.{x}", "10.0.0.1,nope"])
def test_bad_white_addresses_are_refused_with_the_pattern_named(bad):
    with pytest.raises(AclConfigError, match="white remote address"):
        compile_pattern(bad)


# --- the file ---------------------------------------------------------------------------------------


def test_the_file_format():
    cfg = parse_plain_acl(acl.PLAIN_ACL_YML)
    normal = cfg.accounts["normalUser"]
    assert not normal.admin and normal.secret_key == "normalSecret1"
    assert dict(normal.resource_perms) == {"TopicPub": 4, "TopicSub": 8, "TopicBoth": 12, "TopicDenied": 1,
                                           "%RETRY%GroupDenied": 1}
    assert (normal.default_topic_perm, normal.default_group_perm) == (1, 8)
    admin = cfg.accounts["adminUser"]
    assert admin.admin and admin.resource_perms is None and admin.default_topic_perm == 1
    assert [p.text for p in cfg.global_white] == ["10.10.103.*"]
    assert "normalSecret1" not in repr(cfg)  # secrets stay out of logs
    assert parse_plain_acl("").accounts == {}


@pytest.mark.parametrize("text, message", [
    ("accounts: [", "not valid YAML"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("accounts: {accessKey: x}", "accounts must be a list"),
    ("accounts:\n  - accessKey: shortk\n    secretKey: 12345678\n", "accessKey must be text of at least 7"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 1234\n", "(RocketMQ): secretKey must be"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    defaultTopicPerm: PUBLISH\n",
     "defaultTopicPerm: 'PUBLISH' is not a permission"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms: [topicA]\n",
     "'topicA' is not of the form name=PERM"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    groupPerms: [g=SUBB]\n", "'SUBB' is not"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    admin: maybe\n", "admin: 'maybe'"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678}\n  - {accessKey: RocketMQ, secretKey: 87654321}\n",
     "accessKey 'RocketMQ' appears twice"),
    ("globalWhiteRemoteAddresses: [10.10.103.300]\n", "globalWhiteRemoteAddresses: white remote address"),
])
def test_a_bad_file_is_refused_with_a_clear_error(text, message):
    with pytest.raises(AclConfigError) as info:
        parse_plain_acl(text, "conf/plain_acl.yml")
    assert message in str(info.value) and "conf/plain_acl.yml" in str(info.value)


# --- the signature ----------------------------------------------------------------------------------

#: what the official 4.9.8 Java client's AclClientRPCHook signed (tests/reference/test_acl_reference.py
#: derives it live from the Java client; kept here so the signer is checked in every run)
JAVA_SIGNED_EXT = {"AccessKey": "normalUser", "a": "PG_vector", "b": "TopicVector", "c": "TBW102", "d": "4", "e": "0",
                   "f": "0", "g": "1700000000000", "h": "0",
                   "i": "KEYS\u0001k1\u0002UNIQ_KEY\u0001AC1100010000000000000000000000000\u0002", "j": "0",
                   "k": "false", "m": "false"}
JAVA_BODY = "hello acl \u00e9".encode()
JAVA_SIGNATURE = "nxaZPVeRvAjoUy1gV/yc5v2fqiM="


def test_signature_matches_the_java_client():
    assert signature(content(JAVA_SIGNED_EXT, JAVA_BODY), "normalSecret1") == JAVA_SIGNATURE
    cmd = create_request(RC.SEND_MESSAGE_V2, {k: v for k, v in JAVA_SIGNED_EXT.items() if k != "AccessKey"},
                         [memoryview(JAVA_BODY[:5]), JAVA_BODY[5:]])  # a send may hold its body in pieces
    SessionCredentials("normalUser", "normalSecret1").sign(cmd)
    assert cmd.ext_fields["Signature"] == JAVA_SIGNATURE
    SessionCredentials("normalUser", "normalSecret1").sign(cmd)  # a retry re-signs: same signature
    assert cmd.ext_fields["Signature"] == JAVA_SIGNATURE
    tokened = create_request(RC.HEART_BEAT, None, b"{}")
    SessionCredentials("normalUser", "normalSecret1", "tok").sign(tokened)
    assert tokened.ext_fields["SecurityToken"] == "tok"
    assert tokened.ext_fields["Signature"] == signature(b"normalUsertok{}", "normalSecret1")


# --- the checks -------------------------------------------------------------------------------------


def _validator(text: str) -> PlainAccessValidator:
    cfg = parse_plain_acl(text)
    return PlainAccessValidator(lambda: cfg)


def _req(code, ext=None, body=b"", account=acl.NORMAL):
    cmd = create_request(code, ext, body)
    if account is not None:
        SessionCredentials(*account).sign(cmd)
    return cmd


def _send(topic, **kw):
    return _req(RC.SEND_MESSAGE_V2, {"a": "PG", "b": topic}, b"x", **kw)


def test_order_of_the_checks():
    v = _validator(acl.PLAIN_ACL_YML)
    assert v.check(_send("TopicBoth"), "127.0.0.1") is None
    assert v.check(_send("TopicBoth", account=None), "10.10.103.7") is None  # global white: unsigned is fine
    assert v.check(_send("TopicDenied", account=None), "10.10.103.7") is None  # ... and no permission check
    assert v.check(_send("TopicBoth", account=None), "127.0.0.1") == "No accessKey is configured"
    assert v.check(_send("TopicBoth", account=("someoneElse", "x" * 8)), "127.0.0.1") == "No acl config for someoneElse"
    tampered = _send("TopicBoth")
    tampered.ext_fields["b"] = "TopicSub"  # signed for one topic, sent to another
    assert v.check(tampered, "127.0.0.1") == "Check signature failed for accessKey=normalUser"
    body_changed = _send("TopicBoth")
    body_changed.body = b"y"
    assert v.check(body_changed, "127.0.0.1").startswith("Check signature failed")
    # the checking side leaves _UNIQUE_KEY_QUERY out, as 4.9.8 does
    q = _req(RC.QUERY_MESSAGE, {"topic": "TopicSub", "key": "k", "maxNum": "1", "beginTimestamp": "0",
                                "endTimestamp": "1"})
    q.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    assert v.check(q, "127.0.0.1") is None


def test_permissions():
    v = _validator(acl.PLAIN_ACL_YML)
    assert v.check(_send("TopicPub"), "127.0.0.1") is None
    assert v.check(_send("TopicSub"), "127.0.0.1") == "No default permission for topic:TopicSub"
    assert v.check(_send("TopicElse"), "127.0.0.1") == "No default permission for topic:TopicElse"  # default DENY
    # a send to a retry topic is the group's business (SUB on the group)
    assert v.check(_send("%RETRY%GroupDenied"), "127.0.0.1") == "No default permission for group:GroupDenied"
    assert v.check(_send("%RETRY%AnyGroup"), "127.0.0.1") is None  # defaultGroupPerm SUB
    # the trace topic is writable by any signed account, as in 4.9.8
    assert v.check(_send("RMQ_SYS_TRACE_TOPIC"), "127.0.0.1") is None
    pull = {"consumerGroup": "G", "topic": "TopicSub", "queueId": "0"}
    assert v.check(_req(RC.PULL_MESSAGE, pull), "127.0.0.1") is None
    assert v.check(_req(RC.PULL_MESSAGE, {**pull, "consumerGroup": "GroupDenied"}), "127.0.0.1") \
        == "No default permission for group:GroupDenied"
    assert v.check(_req(RC.QUERY_CONSUMER_OFFSET, {**pull, "topic": "TopicPub"}), "127.0.0.1") \
        == "No default permission for topic:TopicPub"
    lock = b'{"consumerGroup":"G","clientId":"c","mqSet":[{"topic":"TopicDenied","brokerName":"b","queueId":0}]}'
    assert v.check(_req(RC.LOCK_BATCH_MQ, None, lock), "127.0.0.1") == "No default permission for topic:TopicDenied"
    # the 5.x broker-side rebalance names its topic and group in the body: SUB on both
    for code in (RC.QUERY_ASSIGNMENT, RC.SET_MESSAGE_REQUEST_MODE):
        body = b'{"topic":"TopicPub","consumerGroup":"G","clientId":"c","messageModel":"CLUSTERING","mode":"POP"}'
        assert v.check(_req(code, None, body), "127.0.0.1") == "No default permission for topic:TopicPub"
        assert v.check(_req(code, None, body.replace(b"TopicPub", b"TopicSub")), "127.0.0.1") is None
    # a recall needs what a send to its topic needs
    recall = {"topic": "TopicSub", "recallHandle": "h", "producerGroup": "PG"}
    assert v.check(_req(RC.RECALL_MESSAGE, recall), "127.0.0.1") == "No default permission for topic:TopicSub"
    assert v.check(_req(RC.RECALL_MESSAGE, {**recall, "topic": "TopicPub"}), "127.0.0.1") is None
    # a producer's unregister names no consumer group: the signature is all it needs
    assert v.check(_req(RC.UNREGISTER_CLIENT, {"clientID": "c", "producerGroup": "PG"}), "127.0.0.1") is None
    assert v.check(_req(RC.HEART_BEAT, None, b"{not json"), "127.0.0.1").startswith("cannot read the request body")
    assert v.check(_req(RC.DELETE_TOPIC_IN_BROKER, {"topic": "TopicBoth"}), "127.0.0.1") \
        == "Need admin permission for request code=215, but accessKey=normalUser is not"
    # an admin without entries owns everything; with entries, the defaults apply to the rest
    assert v.check(_send("TopicElse", account=acl.ADMIN), "127.0.0.1") is None
    v2 = _validator(acl.PLAIN_ACL_YML.replace("    admin: true\n", "    admin: true\n    topicPerms: [A=PUB]\n"))
    assert v2.check(_send("TopicElse", account=acl.ADMIN), "127.0.0.1") == "No default permission for topic:TopicElse"
    assert v2.check(_req(RC.DELETE_TOPIC_IN_BROKER, {"topic": "A"}, account=acl.ADMIN), "127.0.0.1") is None


def test_account_white_address_skips_signature_and_permissions():
    v = _validator(acl.PLAIN_ACL_YML.replace("    whiteRemoteAddress:\n", "    whiteRemoteAddress: 192.168.1.*\n"))
    wrong = (acl.NORMAL[0], "wrongSecret1")
    assert v.check(_send("TopicDenied", account=wrong), "192.168.1.20") is None
    assert v.check(_send("TopicBoth", account=wrong), "192.168.2.20").startswith("Check signature failed")
    denied = v.denied(_send("TopicDenied"), "127.0.0.1")
    assert (denied.code, denied.remark) == (DENIED_CODE, f"{EXCEPTION_NAME}: No default permission for topic:TopicDenied")


# --- reloading ---------------------------------------------------------------------------------------


def test_reload_waits_for_the_file_to_settle_and_keeps_the_last_good_config(tmp_path, caplog):
    path = tmp_path / "plain_acl.yml"
    path.write_text(acl.PLAIN_ACL_YML)
    clock = ManualClock()
    f = AclFile(str(path), clock=clock)
    f.load()
    assert f.loaded_at_ms == clock() and "normalUser" in f.current.accounts
    assert not f.poll()
    path.write_text("accounts:\n  - {accessKey: otherUser, secretKey: otherSecret}\n")
    os.utime(path, ns=(1, 1))  # a status nothing else has: the change is seen even within one mtime tick
    assert not f.poll(), "a change must hold still for one poll before it is read"
    clock.advance(1000)
    assert f.poll() and set(f.current.accounts) == {"otherUser"} and f.loaded_at_ms == clock()
    with caplog.at_level(logging.ERROR, logger="mqcore.acl.watch"):
        path.write_text("accounts:\n  - {accessKey: otherUser, secretKey: otherSecret, defaultTopicPerm: ALL}\n")
        os.utime(path, ns=(2, 2))
        for _ in range(4):
            assert not f.poll()
    assert set(f.current.accounts) == {"otherUser"}  # the previous good config stays
    assert [r.getMessage() for r in caplog.records].count(next(r.getMessage() for r in caplog.records)) == 1
    assert "'ALL' is not a permission" in caplog.records[0].getMessage()
    path.unlink()
    assert not f.poll() and not f.poll() and set(f.current.accounts) == {"otherUser"}
    path.write_text(acl.PLAIN_ACL_YML)
    assert not f.poll() and f.poll() and "normalUser" in f.current.accounts


def test_a_missing_or_bad_file_fails_the_first_load(tmp_path):
    with pytest.raises(AclConfigError, match="cannot read ACL file"):
        AclFile(str(tmp_path / "absent.yml")).load()
    (tmp_path / "bad.yml").write_text("accounts: [")
    with pytest.raises(AclConfigError, match="not valid YAML"):
        AclFile(str(tmp_path / "bad.yml")).load()


def test_the_server_hook_wraps_nothing_when_acl_is_off():
    def processor(channel, request):
        return None
    plain = RemotingServer()
    plain.register_processor(RC.HEART_BEAT, processor)
    assert plain._table.lookup(RC.HEART_BEAT) is processor
    hooked = RemotingServer(before_request=lambda ch, req: None)
    hooked.register_processor(RC.HEART_BEAT, processor)
    assert hooked._table.lookup(RC.HEART_BEAT) is not processor


def test_a_signing_client_signs_on_every_path(tmp_path):
    """The loop's invoke and the blocking pool (Producer.send's path) both run before_request."""
    import socket
    import threading
    from mqcore.remoting.command import decode_frame, encode_frame
    seen = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def serve():  # one connection, one request, answered
            conn, _ = listener.accept()
            with conn:
                head = conn.recv(4)
                size = int.from_bytes(head, "big")
                data = b""
                while len(data) < size:
                    data += conn.recv(size - len(data))
                req = decode_frame(data)
                seen.append(req)
                resp = create_request(0, None)
                resp.opaque, resp.flag = req.opaque, 1
                conn.sendall(encode_frame(resp))
        t = threading.Thread(target=serve)
        t.start()
        client = RemotingClient(before_request=SessionCredentials(*acl.NORMAL).sign)
        try:
            client.invoke_blocking(f"127.0.0.1:{listener.getsockname()[1]}", create_request(RC.HEART_BEAT, None, b"{}"))
        finally:
            t.join(10)
            client.blocking.close()
    assert seen[0].ext_fields["AccessKey"] == "normalUser"
    assert seen[0].ext_fields["Signature"] == signature(b"normalUser{}", acl.NORMAL[1])
    assert RemotingClient().blocking.finalize is None  # nothing to pay without credentials


# --- the name server -------------------------------------------------------------------------------


def test_standalone_name_server_with_acl(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(acl.PLAIN_ACL_YML)

    async def scenario():
        ns = NameServer(NamesrvConfig(listen_port=0, acl_file=str(path)), ManualClock())
        port = await ns.start()
        addr = f"127.0.0.1:{port}"
        admin = RemotingClient(before_request=SessionCredentials(*acl.ADMIN).sign)
        anon = RemotingClient()
        try:
            kv = {"namespace": "NS", "key": "k", "value": "v"}
            refused = await anon.invoke(addr, create_request(RC.PUT_KV_CONFIG, kv))
            assert (refused.code, refused.remark) == (DENIED_CODE, f"{EXCEPTION_NAME}: No accessKey is configured")
            assert (await admin.invoke(addr, create_request(RC.PUT_KV_CONFIG, kv))).code == ResponseCode.SUCCESS
            got = await anon.invoke(addr, create_request(RC.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}))
            assert (got.code, got.ext_fields["value"]) == (ResponseCode.SUCCESS, "v")  # reads stay open
            assert (await anon.invoke(addr, create_request(RC.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k"}))
                    ).code == DENIED_CODE
        finally:
            await admin.shutdown()
            await anon.shutdown()
            await ns.shutdown()

    asyncio.run(scenario())
    path.write_text("accounts: [")
    with pytest.raises(AclConfigError):
        asyncio.run(NameServer(NamesrvConfig(listen_port=0, acl_file=str(path)), ManualClock()).start())


# --- broker configuration --------------------------------------------------------------------------


def test_broker_acl_keys():
    from mqcore.broker.conf import build_configs
    from mqcore.errors import ConfigError
    cfg = build_configs({"aclEnable": "true", "plainAclFile": "/etc/acl.yml", "brokerAccessKey": "brokerAdmin",
                         "brokerSecretKey": "brokerSecret"}).broker
    assert (cfg.acl_enable, cfg.acl_file, cfg.broker_access_key) == (True, "/etc/acl.yml", "brokerAdmin")
    with pytest.raises(ConfigError, match="plainAclFile"):
        build_configs({"aclEnable": "true"})
    with pytest.raises(ConfigError, match="embedded name server too"):  # its own registrations would be refused
        build_configs({"aclEnable": "true", "plainAclFile": "/etc/acl.yml"})
    assert build_configs({"aclEnable": "true", "plainAclFile": "/etc/acl.yml", "namesrvAddr": "10.0.0.1:9876"}
                         ).broker.broker_access_key is None  # an external name server may be open
    with pytest.raises(ConfigError, match="brokerAccessKey and brokerSecretKey go together"):
        build_configs({"brokerAccessKey": "brokerAdmin"})
    # the 5.x endpoint checks 5.x credentials against the same file (tests/grpc/test_acl_grpc.py)
    assert build_configs({"aclEnable": "true", "plainAclFile": "/etc/acl.yml", "grpcServerEnable": "true",
                          "namesrvAddr": "10.0.0.1:9876"}).broker.grpc_server_enable


def test_command_lines(tmp_path, monkeypatch, capsys):
    from mqcore.broker.cli import load_configs, parse_args
    from mqcore.namesrv.cli import main as namesrv_main
    conf = tmp_path / "broker.conf"
    conf.write_text("aclEnable=true\nbrokerAccessKey=brokerAdmin\nbrokerSecretKey=brokerSecret\n")
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    assert load_configs(parse_args(["-c", str(conf)])).broker.acl_file == str(tmp_path / "plain_acl.yml")
    monkeypatch.setenv("ROCKETMQ_HOME", "/opt/rocketmq")  # where RocketMQ looks
    assert load_configs(parse_args(["-c", str(conf)])).broker.acl_file == "/opt/rocketmq/conf/plain_acl.yml"
    bad = tmp_path / "bad.yml"
    bad.write_text("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, defaultGroupPerm: READ}\n")
    assert namesrv_main(["--acl", str(bad), "--port", "0", "--log-dir", str(tmp_path / "logs")]) == 2
    assert "defaultGroupPerm: 'READ' is not a permission" in capsys.readouterr().err
