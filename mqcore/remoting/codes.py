"""Numeric constants of the RocketMQ 4.x remoting protocol.

Every number here is what a Java 4.9.8 peer puts on the wire (remoting-protocol.md
§1, §2, §4, §9), so the names follow RocketMQ's own (``RequestCode.java``,
``ResponseCode.java``, ``LanguageCode.java``, ``MQVersion.java``) to make
cross-reading the Java sources easy.
"""
from __future__ import annotations

import enum

__all__ = [
    "RequestCode",
    "ResponseCode",
    "LanguageCode",
    "SerializeType",
    "MQVersion",
    "PullSysFlag",
    "RPC_TYPE",
    "RPC_ONEWAY",
    "FLAG_RESPONSE",
    "FLAG_ONEWAY",
    "V3_0_6_SNAPSHOT",
    "V3_4_9",
    "V4_0_0",
    "V4_1_0_SNAPSHOT",
    "V4_4_0",
    "V4_5_2",
    "V4_9_0",
    "V4_9_3",
    "V4_9_4",
    "V4_9_7",
    "V4_9_8",
    "V5_0_0",
    "V5_3_3",
    "HIGHER_VERSION",
    "CURRENT_VERSION",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_NAMESRV_PORT",
    "DEFAULT_BROKER_PORT",
]


class RequestCode(enum.IntEnum):
    """Request codes (``RequestCode.java``; same numbers in 4.9.8 and 5.x)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    #: 5.x: a lite pull consumer's pull (DefaultLitePullConsumer), served as PULL_MESSAGE
    LITE_PULL_MESSAGE = 361
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205  # name server
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    # --- admin and tooling (mqadmin, DefaultMQAdminExt) ---
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307  # broker -> client when forwarded
    CONSUME_MESSAGE_DIRECTLY = 309  # broker -> client when forwarded
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327  # name server
    GET_TOPIC_CONFIG = 351  # 5.x
    GET_SUBSCRIPTIONGROUP_CONFIG = 352  # 5.x
    #: 5.3: recall a timer message by its handle
    RECALL_MESSAGE = 370
    #: 5.x: the broker assigns a group's queues to its clients (server-side rebalance)
    QUERY_ASSIGNMENT = 400
    #: 5.x: a topic's consumption mode (PULL or POP) for one group
    SET_MESSAGE_REQUEST_MODE = 401
    # 5.x only; never sent by 4.x clients.
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    BATCH_ACK_MESSAGE = 200151


class ResponseCode(enum.IntEnum):
    """Response codes (``RemotingSysResponseCode.java`` 0-4 and ``ResponseCode.java``)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29  # 5.x
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209  # 5.x pop
    POLLING_TIMEOUT = 210  # 5.x pop
    FLOW_CONTROL = 215
    #: 5.x: a request the broker will not carry out as asked (a bad recall handle)
    ILLEGAL_OPERATION = 604


class LanguageCode(enum.IntEnum):
    """``LanguageCode.java``: a name in JSON headers, one byte in binary headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class SerializeType(enum.IntEnum):
    """Header serialization, carried in the top byte of the frame's header-length word."""

    JSON = 0
    ROCKETMQ = 1


class MQVersion(enum.IntEnum):
    """``MQVersion.Version`` ordinals that matter to a 4.x broker (spec §9)."""

    V3_0_6_SNAPSHOT = 26
    V3_4_9 = 121
    V4_0_0 = 213
    V4_1_0_SNAPSHOT = 232
    V4_4_0 = 293
    V4_5_2 = 317  # what the Go client always sends
    V4_9_0 = 393
    V4_9_3 = 399
    V4_9_4 = 401
    V4_9_7 = 407
    V4_9_8 = 409
    V5_0_0 = 413
    V5_3_3 = 479
    HIGHER_VERSION = 612


V3_0_6_SNAPSHOT = MQVersion.V3_0_6_SNAPSHOT
V3_4_9 = MQVersion.V3_4_9
V4_0_0 = MQVersion.V4_0_0
V4_1_0_SNAPSHOT = MQVersion.V4_1_0_SNAPSHOT
V4_4_0 = MQVersion.V4_4_0
V4_5_2 = MQVersion.V4_5_2
V4_9_0 = MQVersion.V4_9_0
V4_9_3 = MQVersion.V4_9_3
V4_9_4 = MQVersion.V4_9_4
V4_9_7 = MQVersion.V4_9_7
V4_9_8 = MQVersion.V4_9_8
V5_0_0 = MQVersion.V5_0_0
V5_3_3 = MQVersion.V5_3_3
HIGHER_VERSION = MQVersion.HIGHER_VERSION

#: Version mqcore reports in requests and responses: Java clients refuse SQL92 pulls
#: from brokers older than V4_1_0_SNAPSHOT, so we claim to be a 4.9.8 broker/client.
CURRENT_VERSION = MQVersion.V4_9_8


class PullSysFlag(enum.IntFlag):
    """Bits of PullMessageRequestHeader.sysFlag (``PullSysFlag.java``)."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


# --- RemotingCommand.flag bits --------------------------------------------------
RPC_TYPE = 0  #: bit index: 1 = response, 0 = request
RPC_ONEWAY = 1  #: bit index: request expects no response
FLAG_RESPONSE = 1 << RPC_TYPE
FLAG_ONEWAY = 1 << RPC_ONEWAY

#: Java's ``com.rocketmq.remoting.frameMaxLength`` default (the frame length field's
#: value, i.e. excluding the 4-byte length prefix itself).
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024

DEFAULT_NAMESRV_PORT = 9876
DEFAULT_BROKER_PORT = 10911
