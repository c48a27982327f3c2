"""RocketMQ 4.x remoting protocol: codes, frame codec, typed headers, asyncio server/client.

Modules: ``codes`` (numbers), ``command``
(RemotingCommand + frame/header codecs), ``headers``/``bodies`` (typed custom headers
and small JSON bodies), ``channel`` (one connection), ``dispatch`` (processor table),
``server`` and ``client``.
"""
from mqcore.jsonutil import java_hashmap_order, loads_lenient
from mqcore.remoting.channel import Channel
from mqcore.remoting.client import RemotingClient, SyncRemotingClient
from mqcore.remoting.codes import (
    CURRENT_VERSION,
    DEFAULT_MAX_FRAME_BYTES,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    MQVersion,
    PullSysFlag,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from mqcore.remoting.command import (
    RemotingCommand,
    create_request,
    create_response,
    decode_frame,
    encode,
    encode_frame,
)
from mqcore.remoting.server import RemotingServer

__all__ = [
    "Channel",
    "RemotingClient",
    "SyncRemotingClient",
    "RemotingServer",
    "RemotingCommand",
    "create_request",
    "create_response",
    "decode_frame",
    "encode",
    "encode_frame",
    "loads_lenient",
    "java_hashmap_order",
    "RequestCode",
    "ResponseCode",
    "LanguageCode",
    "SerializeType",
    "MQVersion",
    "PullSysFlag",
    "CURRENT_VERSION",
    "DEFAULT_MAX_FRAME_BYTES",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
]
