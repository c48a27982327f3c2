"""Plain ACL in the broker's send fast path (``SendAcl`` in mqcore/_send_core.pxi, the
answers it may remember in mqcore/acl/fast.py): signed plain sends go through the C send
core with aclEnable=true, and every request gives exactly what the general path (every
request through the ACL hook as a command) gives - the same answer bytes, including each
refusal's code and remark, and the same store files.

* the same signed and unsigned requests (allowed, wrong signature, unknown or missing
  AccessKey, denied and default-denied topics, the account's own white address, the trace
  topic, a retry topic, an admin account, a SecurityToken, escaped property values, a
  1 MiB body) one per write and pipelined, with the fast path and without it;
* the fast path stores exactly the allowed plain sends;
* a plain_acl.yml reload reaches the very next send (nothing remembered outlives it).
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.acl import SessionCredentials
from mqcore.acl.signing import keyed_hmac
from mqcore.acl.signing import request_signature
from mqcore.remoting import RequestCode, create_request
from mqcore.remoting.command import encode_frame
from tests.support import acl
from tests.support.store import BORN, STORE, small_config

from mqcore import _pipeline  # the compiled kernel: a missing build fails here, never skips

pytestmark = pytest.mark.timeout(120)

ALLOWED_TOPICS = ("TopicBoth", "TopicPub", "TopicSub", "TopicDenied", "TopicOther", "TopicAdminOnly",
                  "RMQ_SYS_TRACE_TOPIC")


def _v2(topic="TopicBoth", **change):
    ext = {"a": "PG_acl", "b": topic, "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000123", "h": "0",
           "i": "UNIQ_KEY\x01U0\x02TAGS\x01tg\x02KEYS\x01k1 k2\x02", "j": "0", "k": "false", "m": "false"}
    ext.update(change)
    return {k: v for k, v in ext.items() if v is not None}


def _signed(account, ext, body, *, token=None):
    cmd = create_request(RequestCode.SEND_MESSAGE_V2, ext, body)
    if account is not None:
        SessionCredentials(*account, security_token=token).sign(cmd)
    return cmd


def _bad_signature(cmd):
    cmd.ext_fields["Signature"] = "A" * 27 + "="
    return cmd


#: (what it exercises, the request, taken by the fast path)
CASES = [
    ("allowed", lambda: _signed(acl.NORMAL, _v2(), b"ok0"), True),
    ("allowed, PUB only", lambda: _signed(acl.NORMAL, _v2("TopicPub"), b"ok1"), True),
    ("allowed, no properties", lambda: _signed(acl.NORMAL, _v2(i=None, j=None, k=None, m=None), b"ok2"), True),
    ("allowed, optional fields", lambda: _signed(acl.NORMAL, _v2(h="7", j="2", l="16", n="broker-x"), b"ok3"), True),
    ("allowed, SecurityToken", lambda: _signed(acl.NORMAL, _v2(), b"ok4", token="tok-1"), True),
    ("allowed, empty body", lambda: _signed(acl.NORMAL, _v2(), b""), True),
    ("admin, unlisted topic", lambda: _signed(acl.ADMIN, _v2("TopicAdminOnly"), b"ok5"), True),
    ("trace topic, default DENY", lambda: _signed(acl.NORMAL, _v2("RMQ_SYS_TRACE_TOPIC"), b"ok6"), True),
    ("white account, wrong secret", lambda: _signed((acl.WHITE[0], "wrongSecret1"), _v2("TopicDenied"), b"w0"),
     True),
    ("wrong secret", lambda: _signed((acl.NORMAL[0], "wrongSecret1"), _v2(), b"no0"), False),
    ("signature altered", lambda: _bad_signature(_signed(acl.NORMAL, _v2(), b"no1")), False),
    ("no signature", lambda: _signed(None, {**_v2(), "AccessKey": acl.NORMAL[0]}, b"no2"), False),
    ("unsigned", lambda: _signed(None, _v2(), b"no3"), False),
    ("unknown key", lambda: _signed(("nobodyUser", "nobodySecret"), _v2(), b"no4"), False),
    ("denied topic", lambda: _signed(acl.NORMAL, _v2("TopicDenied"), b"no5"), False),
    ("SUB-only topic", lambda: _signed(acl.NORMAL, _v2("TopicSub"), b"no6"), False),
    ("default-denied topic", lambda: _signed(acl.NORMAL, _v2("TopicOther"), b"no7"), False),
    # (the group's SUB lets it through the hook; the retry topic's one queue refuses it)
    ("retry topic", lambda: _signed(acl.NORMAL, _v2("%RETRY%PG_acl"), b"no8"), False),
    ("allowed after refusals", lambda: _signed(acl.NORMAL, _v2(e="3"), b"ok7"), True),
    ("signed over a changed body", lambda: _swap_body(_signed(acl.NORMAL, _v2(), b"ok8"), b"ok9"), False),
    # a frame larger than the receive ring is read whole by the Channel and never offered to
    # the core (with ACL off too): the hook checks it, over the body as it arrived
    ("1 MiB", lambda: _signed(acl.NORMAL, _v2(e="2"), b"m" * (1 << 20)), False),
    ("1 MiB, last byte changed", lambda: _swap_body(_signed(acl.NORMAL, _v2(e="2"), b"m" * (1 << 20)),
                                                     b"m" * ((1 << 20) - 1) + b"n"), False),
    ("allowed, last", lambda: _signed(acl.NORMAL, _v2(e="0"), b"ok10"), True),
]
# bodies around SHA-1's 64-byte blocks and the core's short/long HMAC threshold (2 KiB: its own
# HMAC below, OpenSSL's above), each signed right and then altered in its last byte
for _size in (1, 55, 56, 63, 64, 100, 119, 120, 1000, 2047, 2048, 2049, 4096, 30000):
    _body = bytes(range(256)) * (_size // 256) + bytes(range(_size % 256))
    CASES.append((f"{_size} B", lambda b=_body: _signed(acl.NORMAL, _v2(e="1"), b), True))
    CASES.append((f"{_size} B altered", lambda b=_body: _swap_body(_signed(acl.NORMAL, _v2(e="1"), b),
                                                                   b[:-1] + bytes([b[-1] ^ 1])), False))
# a secret longer than SHA-1's block is hashed first (RFC 2104)
LONG_SECRET = ("longUser", "L" * 70 + "-secret")
CASES.append(("long secret", lambda: _signed(LONG_SECRET, _v2(), b"long"), True))
CASES.append(("long secret, wrong", lambda: _signed((LONG_SECRET[0], "L" * 70 + "-secreT"), _v2(), b"long2"),
              False))
ACL_YML = acl.PLAIN_ACL_YML + f"""\
  - accessKey: {LONG_SECRET[0]}
    secretKey: {LONG_SECRET[1]}
    defaultTopicPerm: PUB
"""


def _swap_body(cmd, body):
    cmd.body = body
    return cmd


def _files(root):
    got = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.startswith(("commitlog", "consumequeue", "index")):
                with open(p, "rb") as f:
                    got[rel] = f.read()
    return got


def _broker(tmp_path, yml):
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    cfg = BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="aclcore", acl_enable=True,
                       acl_file=str(yml), broker_access_key=acl.ADMIN[0], broker_secret_key=acl.ADMIN[1])
    return Broker(cfg, small_config(tmp_path / "store", max_message_size_bytes=2 << 20,
                                     commitlog_file_size_bytes=8 << 20),
                  clock=lambda: 1_700_000_000_000)


def _run(tmp_path, monkeypatch, *, fast: bool, pipelined: bool):
    from mqcore import _compat
    from mqcore.broker.metadata import TopicConfig
    from mqcore.broker.processors import send as send_mod
    from mqcore.broker.processors import send_pipeline

    monkeypatch.setattr(send_mod, "peer_host", lambda channel: BORN)
    monkeypatch.setattr(send_pipeline, "peer_host", lambda channel: BORN)
    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline)
    if not fast:  # no core: the broker installs no frames processor under ACL
        monkeypatch.setattr(send_pipeline.SendPipeline, "use_core", False)
    tmp_path.mkdir()
    yml = tmp_path / "plain_acl.yml"
    yml.write_text(ACL_YML)
    taken: list[bytes] = []

    async def scenario():
        broker = _broker(tmp_path, yml)
        await broker.start()
        assert (broker.server._channel_class.__name__ == "CoreChannel") == fast
        broker.store_host = STORE
        for topic in ALLOWED_TOPICS:
            broker.topics.update(TopicConfig(topic, 4, 4))
        put = broker.store.put_plain_sends

        def recording(items, born, store_host):
            stored, refusal = put(items, born, store_host)
            taken.extend(item[10] for item in items[:len(stored)])
            return stored, refusal
        broker.store.put_plain_sends = recording
        answers = []
        try:
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            pending = []

            async def flush():
                writer.write(b"".join(pending))
                for _ in pending:
                    length = int.from_bytes(await reader.readexactly(4), "big")
                    answers.append(await reader.readexactly(length))
                pending.clear()

            for opaque, (_, make, _taken) in enumerate(CASES):
                cmd = make()
                cmd.opaque = opaque + 100
                pending.append(encode_frame(cmd))
                if not pipelined:
                    await flush()
            await flush()
            writer.close()
        finally:
            await broker.shutdown()
        return answers

    answers = asyncio.run(scenario())
    # pipelined answers may come back in another order (a request the hook checks waits for
    # its turn on the general path): in request order by opaque
    by_opaque = {}
    for a in answers:
        header_len = int.from_bytes(a[:4], "big") & 0xFFFFFF
        by_opaque[json.loads(a[4:4 + header_len])["opaque"]] = a
    return [by_opaque[i + 100] for i in range(len(CASES))], _files(tmp_path / "store"), taken


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-per-write", "pipelined"])
def test_signed_sends_through_the_core_give_the_hooks_answers_and_files(tmp_path, monkeypatch, pipelined):
    general, general_files, general_taken = _run(tmp_path / "general", monkeypatch, fast=False, pipelined=pipelined)
    monkeypatch.undo()
    fast, fast_files, fast_taken = _run(tmp_path / "fast", monkeypatch, fast=True, pipelined=pipelined)
    assert general_taken == []
    assert len(fast) == len(general) == len(CASES)
    for (what, _make, _t), g, f in zip(CASES, general, fast):
        assert f == g, what
    refused = [what for (what, _m, _t), g in zip(CASES, general) if b"AclException" in g]
    # (not taken, yet not refused: the retry topic, and the 1 MiB frame the core never sees)
    assert refused == [what for what, _m, ok in CASES if not ok and what not in ("retry topic", "1 MiB")]
    assert b'"code":0' in fast[[what for what, _m, _t in CASES].index("1 MiB")]
    assert fast_files == general_files
    # the allowed plain sends, and only they, went through the core
    expected = [make().body for what, make, ok in CASES if ok]
    # (pipelined: after a frame the hook checks, the channel offers the core the frames after it)
    assert fast_taken == expected


def test_a_reload_of_plain_acl_reaches_the_next_send(tmp_path, monkeypatch):
    from mqcore import _compat
    from mqcore.broker.metadata import TopicConfig
    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline)
    yml = tmp_path / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)

    async def scenario():
        broker = _broker(tmp_path, yml)
        await broker.start()
        assert broker.server._channel_class.__name__ == "CoreChannel"
        for topic in ("TopicBoth", "TopicOther"):
            broker.topics.update(TopicConfig(topic, 4, 4))
        taken = []
        put = broker.store.put_plain_sends

        def recording(items, born, store_host):
            stored, refusal = put(items, born, store_host)
            taken.extend(item[10] for item in items[:len(stored)])
            return stored, refusal
        broker.store.put_plain_sends = recording
        try:
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))

            async def send(account, topic, body):
                writer.write(encode_frame(_signed(account, _v2(topic), body)))
                length = int.from_bytes(await reader.readexactly(4), "big")
                return await reader.readexactly(length)

            assert b'"code":0' in await send(acl.NORMAL, "TopicBoth", b"a")
            assert b"No default permission for topic:TopicOther" in await send(acl.NORMAL, "TopicOther", b"b")
            # the account may now send anywhere, with a new secret; the old one is refused
            text = acl.PLAIN_ACL_YML.replace("defaultTopicPerm: DENY\n    defaultGroupPerm: SUB",
                                             "defaultTopicPerm: PUB\n    defaultGroupPerm: SUB")
            text = text.replace(acl.NORMAL[1], "newSecret22")
            assert text != acl.PLAIN_ACL_YML
            yml.write_text(text)
            broker.acl.load()
            assert b"Check signature failed for accessKey=normalUser" in await send(acl.NORMAL, "TopicBoth", b"c")
            assert b'"code":0' in await send((acl.NORMAL[0], "newSecret22"), "TopicOther", b"d")
            # the 127.0.0.1 clients become globally white: unsigned sends pass
            yml.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.1\n" + text.split("\n", 2)[2])
            broker.acl.load()
            assert b'"code":0' in await send(None, "TopicOther", b"e")
            writer.close()
        finally:
            await broker.shutdown()
        return taken

    assert asyncio.run(scenario()) == [b"a", b"d", b"e"]


def test_keyed_hmac_gives_the_validators_signature():
    mac = keyed_hmac("secret-ü")
    ext = {"AccessKey": "ak", "b": "T", "a": "G", "Signature": "ignored"}
    m = mac.copy()
    m.update(b"akGT")
    m.update(b"body")
    import base64
    assert base64.b64encode(m.digest()).decode() == request_signature(ext, b"body", "secret-ü")
    assert m.digest() == hmac.new("secret-ü".encode(), b"akGTbody", hashlib.sha1).digest()


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=200), a=st.binary(max_size=300), b=st.binary(max_size=3000))
def test_the_cores_hmac_sha1_is_pythons(key, a, b):
    """_sha1.h's HMAC-SHA1 (the core's for short signed sends) over every split of lengths
    around SHA-1's 64-byte blocks and keys longer than a block."""
    assert _pipeline.hmac_sha1(key, a, b) == hmac.new(key, a + b, hashlib.sha1).digest()
