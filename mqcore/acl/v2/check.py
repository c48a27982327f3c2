"""ACL 2.0's check of a 4.x remoting request: who sent it (authentication), may they (authorization).

As Apache RocketMQ 5.3.3's broker (``AuthenticationPipeline`` then ``AuthorizationPipeline``):

Authentication (``authenticationEnabled``), unless the request code is in
``authenticationWhitelist``: the ``AccessKey`` extField names the user; no AccessKey, an unknown
user, a disabled user or a wrong ``Signature`` (HMAC-SHA1 of the request, as ACL 1.0 signs it,
with the user's password as the secret) refuses the request.

Authorization (``authorizationEnabled``), unless the code is in ``authorizationWhitelist``: each
resource the request touches (:func:`needs`) is decided for the user: a Super user may do
anything; a Normal user needs an ACL entry that allows it (``model.matching_entry``).

A refusal is answered with NO_PERMISSION (16) and Apache's message as the remark.
"""
from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any, Callable, Iterable

from mqcore.acl.signing import ACCESS_KEY, SIGNATURE, UNIQUE_MSG_QUERY_FLAG, request_signature
from mqcore.acl.v2.model import (
    RETRY_PREFIX,
    Action,
    Decision,
    Pattern,
    Resource,
    ResourceType,
    UserStatus,
    UserType,
    matching_entry,
)
from mqcore.acl.v2.store import AuthData
from mqcore.errors import ProtocolError
from mqcore.jsonutil import loads_lenient
from mqcore.remoting.codes import MQVersion, ResponseCode
from mqcore.remoting.command import RemotingCommand, create_response

if TYPE_CHECKING:
    from mqcore.remoting.channel import Channel

DENIED_CODE = ResponseCode.NO_PERMISSION
A = Action
_SUB_GET = (A.SUB, A.GET)

#: codes Apache decides from the request header's annotations (``@RocketMQAction`` and
#: ``@RocketMQResource`` in 5.3.3's remoting headers): code -> (actions, Cluster resource when
#: no field names one, [(extField, resource type, splitter)])
_T, _G, _C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
_ANNOTATED: dict[int, tuple[tuple[Action, ...], bool, tuple[tuple[str, ResourceType, str | None], ...]]] = {
    17: ((A.CREATE,), False, (("topic", _T, None),)),                     # UPDATE_AND_CREATE_TOPIC
    18: ((A.CREATE,), False, ()),                                          # UPDATE_AND_CREATE_TOPIC_LIST
    215: ((A.DELETE,), False, (("topic", _T, None),)),                    # DELETE_TOPIC_IN_BROKER
    207: ((A.DELETE,), False, (("groupName", _G, None),)),                # DELETE_SUBSCRIPTIONGROUP
    29: ((A.GET,), False, (("topic", _T, None),)),                       # SEARCH_OFFSET_BY_TIMESTAMP
    30: ((A.GET,), False, (("topic", _T, None),)),                       # GET_MAX_OFFSET
    31: ((A.GET,), False, (("topic", _T, None),)),                       # GET_MIN_OFFSET
    32: ((A.GET,), False, (("topic", _T, None),)),                       # GET_EARLIEST_MSG_STORETIME
    33: ((A.GET,), False, (("topic", _T, None),)),                       # VIEW_MESSAGE_BY_ID
    37: ((A.PUB,), False, (("topic", _T, None),)),                       # END_TRANSACTION
    39: ((A.PUB,), False, (("topic", _T, None),)),                       # CHECK_TRANSACTION_STATE
    100: ((A.UPDATE,), True, ()),                                          # PUT_KV_CONFIG
    101: ((A.GET,), True, ()),                                             # GET_KV_CONFIG
    102: ((A.UPDATE,), True, ()),                                          # DELETE_KV_CONFIG
    202: ((A.GET,), False, (("topic", _T, None),)),                      # GET_TOPIC_STATS_INFO
    203: ((A.GET,), False, (("consumerGroup", _G, None),)),              # GET_CONSUMER_CONNECTION_LIST
    204: ((A.GET,), True, ()),                                             # GET_PRODUCER_CONNECTION_LIST
    208: ((A.GET,), False, (("consumerGroup", _G, None), ("topic", _T, None), ("topicList", _T, ";"))),
    222: ((A.UPDATE,), False, (("group", _G, None), ("topic", _T, None))),  # INVOKE_BROKER_TO_RESET_OFFSET
    223: ((A.GET,), False, (("topic", _T, None), ("group", _G, None))),  # INVOKE_BROKER_TO_GET_CONSUMER_STATUS
    300: ((A.GET,), False, (("topic", _T, None),)),                      # QUERY_TOPIC_CONSUME_BY_WHO
    303: ((A.GET,), False, (("topic", _T, None), ("group", _G, None))),  # QUERY_CONSUME_TIME_SPAN
    307: ((A.GET,), False, (("consumerGroup", _G, None),)),              # GET_CONSUMER_RUNNING_INFO
    308: ((A.GET,), False, (("filterGroups", _G, ","), ("compareGroup", _G, None), ("topic", _T, None))),
    309: ((A.SUB,), False, (("consumerGroup", _G, None), ("topic", _T, None))),  # CONSUME_MESSAGE_DIRECTLY
    314: ((A.UPDATE,), False, (("destGroup", _G, None), ("topic", _T, None))),  # CLONE_GROUP_OFFSET
    315: ((A.GET,), True, ()),                                             # VIEW_BROKER_STATS_DATA
    317: ((A.GET,), True, ()),                                             # GET_BROKER_CONSUME_STATS
    321: ((A.GET,), False, (("topic", _T, None), ("consumerGroup", _G, None))),  # QUERY_CONSUME_QUEUE
    322: ((A.GET,), False, (("clusterName", _C, None),)),                # QUERY_DATA_VERSION
    323: ((A.UPDATE,), False, (("topic", _T, None),)),                   # RESUME_CHECK_HALF_MESSAGE
    328: ((A.GET,), True, ()),                                             # GET_ALL_PRODUCER_INFO
    343: ((A.GET,), False, (("group", _G, None),)),                      # QUERY_TOPICS_BY_CONSUMER
    345: ((A.GET,), False, (("group", _G, None), ("topic", _T, None))),  # QUERY_SUBSCRIPTION_BY_CONSUMER
    351: ((A.GET,), False, (("topic", _T, None),)),                      # GET_TOPIC_CONFIG
    352: ((A.GET,), False, (("group", _G, None),)),                      # GET_SUBSCRIPTIONGROUP_CONFIG
    40: ((A.SUB,), False, (("consumerGroup", _G, None),)),               # NOTIFY_CONSUMER_IDS_CHANGED
    200050: ((A.SUB,), False, (("consumerGroup", _G, None), ("topic", _T, None))),  # POP_MESSAGE
    200051: ((A.SUB,), False, (("consumerGroup", _G, None), ("topic", _T, None))),  # ACK_MESSAGE
    200052: ((A.SUB,), False, (("topic", _T, None), ("consumerGroup", _G, None))),  # PEEK_MESSAGE
    200053: ((A.SUB,), False, (("consumerGroup", _G, None), ("topic", _T, None))),  # CHANGE_INVISIBLETIME
    200054: ((A.SUB,), False, (("consumerGroup", _G, None), ("topic", _T, None))),  # NOTIFICATION
    200055: ((A.GET,), False, (("consumerGroup", _G, None), ("topic", _T, None))),  # POLLING_INFO
    901: ((A.GET,), False, (("clusterName", _C, None),)),                # GET_BROKER_MEMBER_GROUP
    # the ACL 2.0 admin requests: Cluster Update (changes) / Get (reads)
    3001: ((A.UPDATE,), True, ()), 3002: ((A.UPDATE,), True, ()), 3003: ((A.UPDATE,), True, ()),
    3004: ((A.GET,), True, ()), 3005: ((A.GET,), True, ()),
    3006: ((A.UPDATE,), True, ()), 3007: ((A.UPDATE,), True, ()), 3008: ((A.UPDATE,), True, ()),
    3009: ((A.GET,), True, ()), 3010: ((A.GET,), True, ()),
    # mqcore's additions (5.3.3 checks nothing for them: their requests have no annotated header):
    # changing the broker's settings is a change to the cluster
    25: ((A.UPDATE,), True, ()),                                           # UPDATE_BROKER_CONFIG
}


class NeedsParseError(Exception):
    """The request cannot be read well enough to know what it touches (it is refused)."""


def _is_retry(name: object) -> bool:
    return isinstance(name, str) and name.strip() != "" and name.startswith(RETRY_PREFIX)


def _body(request: RemotingCommand) -> dict[str, Any]:
    try:
        data = loads_lenient(bytes(request.body or b""))
    except (ProtocolError, ValueError, RecursionError) as e:
        raise NeedsParseError(f"parse authorization context error: {e}") from None
    if not isinstance(data, dict):
        raise NeedsParseError("parse authorization context error: the body is not a JSON object")
    return data


def needs(request: RemotingCommand, cluster: str) -> list[tuple[Resource, tuple[Action, ...]]]:
    """What the request touches and the actions of which one suffices for each (Apache 5.3.3's
    ``DefaultAuthorizationContextBuilder``). Empty: nothing to authorize."""
    code = request.code
    f = request.ext_fields or {}
    out: list[tuple[Resource, tuple[Action, ...]]] = []
    if code in (10, 310, 320):  # SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE
        topic, group = (f.get("topic"), f.get("group")) if code == 10 else (f.get("b"), f.get("a"))
        if _is_retry(topic):
            out.append((Resource.group(group if group and group.strip() else str(topic)), (A.SUB,)))
        else:
            out.append((Resource.topic(topic or ""), (A.PUB,)))
    elif code == 370:  # RECALL_MESSAGE
        out.append((Resource.topic(f.get("topic") or ""), (A.PUB,)))
    elif code == 37:  # END_TRANSACTION: only when it names its topic
        if f.get("topic", "").strip():
            out.append((Resource.topic(f["topic"]), (A.PUB,)))
    elif code == 36:  # CONSUMER_SEND_MSG_BACK
        out.append((Resource.group(f.get("group") or ""), (A.SUB,)))
    elif code in (11, 361):  # PULL_MESSAGE (LITE_PULL_MESSAGE: the same header)
        if not _is_retry(f.get("topic")):
            out.append((Resource.topic(f.get("topic") or ""), (A.SUB,)))
        out.append((Resource.group(f.get("consumerGroup") or ""), (A.SUB,)))
    elif code == 12:  # QUERY_MESSAGE
        out.append((Resource.topic(f.get("topic") or ""), _SUB_GET))
    elif code == 34:  # HEART_BEAT
        for item in _body(request).get("consumerDataSet") or ():
            if not isinstance(item, dict):
                raise NeedsParseError("parse authorization context error: a consumerDataSet entry is not an object")
            out.append((Resource.group(str(item.get("groupName") or "")), (A.SUB,)))
            for sub in item.get("subscriptionDataSet") or ():
                if isinstance(sub, dict) and not _is_retry(sub.get("topic")):
                    out.append((Resource.topic(str(sub.get("topic") or "")), (A.SUB,)))
    elif code == 35:  # UNREGISTER_CLIENT: a consumer's group; a producer leaving needs nothing
        if f.get("consumerGroup", "").strip():
            out.append((Resource.group(f["consumerGroup"]), (A.SUB,)))
    elif code == 38:  # GET_CONSUMER_LIST_BY_GROUP
        out.append((Resource.group(f.get("consumerGroup") or ""), _SUB_GET))
    elif code in (14, 15):  # QUERY_CONSUMER_OFFSET (Sub or Get), UPDATE_CONSUMER_OFFSET (Sub or Update)
        actions = _SUB_GET if code == 14 else (A.SUB, A.UPDATE)
        if not _is_retry(f.get("topic")):
            out.append((Resource.topic(f.get("topic") or ""), actions))
        out.append((Resource.group(f.get("consumerGroup") or ""), actions))
    elif code in (41, 42):  # LOCK_BATCH_MQ, UNLOCK_BATCH_MQ
        data = _body(request)
        out.append((Resource.group(str(data.get("consumerGroup") or "")), (A.SUB,)))
        for mq in data.get("mqSet") or ():
            if isinstance(mq, dict) and not _is_retry(mq.get("topic")):
                out.append((Resource.topic(str(mq.get("topic") or "")), (A.SUB,)))
    elif code in (400, 401):  # QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE (mqcore's addition:
        # 5.3.3 reads no resource from their bodies; SUB as for a pull of the same queues)
        data = _body(request)
        out.append((Resource.group(str(data.get("consumerGroup") or "")), (A.SUB,)))
        if not _is_retry(data.get("topic")):
            out.append((Resource.topic(str(data.get("topic") or "")), (A.SUB,)))
    elif code == 200:  # UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (mqcore's addition, as code 25)
        out.append((Resource.group(str(_body(request).get("groupName") or "")), (A.CREATE,)))
    elif code in _ANNOTATED:
        annotated_actions, cluster_wide, fields = _ANNOTATED[code]
        for name, rtype, splitter in fields:
            value = f.get(name)
            if value is None:
                continue
            for part in (value.split(splitter) if splitter else [value]):
                if splitter and not part:
                    continue
                if rtype is ResourceType.TOPIC and _is_retry(part):
                    out.append((Resource.group(part), annotated_actions))
                else:
                    out.append((Resource(rtype, part, Pattern.LITERAL), annotated_actions))
        if not out and cluster_wide:
            out.append((Resource.cluster(cluster), annotated_actions))
    return out


def _from_perms(need: dict[str, int]) -> list[tuple[Resource, tuple[Action, ...]]]:
    from mqcore.acl.permission import ANY, PUB, SUB

    out: list[tuple[Resource, tuple[Action, ...]]] = []
    for name, perm in need.items():
        if name.startswith(RETRY_PREFIX):
            out.append((Resource.group(name), (A.SUB,)))
            continue
        topic = Resource.topic(name)
        if perm & ANY:
            out.append((topic, (A.PUB, A.SUB)))
        if perm & PUB:
            out.append((topic, (A.PUB,)))
        if perm & SUB:
            out.append((topic, (A.SUB,)))
    return out


def _whitelist(text: str | None) -> frozenset[str]:
    return frozenset(p.strip() for p in (text or "").split(",") if p.strip())


def _signature_ok(request: RemotingCommand, password: str) -> bool:
    ext = request.ext_fields or {}
    # Apache leaves _UNIQUE_KEY_QUERY out of the signed content only for clients of 4.9.3 and older
    skip = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG}) if request.version <= MQVersion.V4_9_3 \
        else frozenset({SIGNATURE})
    expected = request_signature(ext, request.body, password, skip=skip)
    given = ext.get(SIGNATURE)
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("ascii"))


class AuthChecker:
    """Authentication and authorization against the data ``source()`` returns at the call."""

    def __init__(self, source: Callable[[], AuthData], *, authentication: bool, authorization: bool,
                 cluster: str, authentication_whitelist: str | None = None,
                 authorization_whitelist: str | None = None) -> None:
        self._source = source
        self.authentication = authentication
        self.authorization = authorization
        self.cluster = cluster
        self._authn_white = _whitelist(authentication_whitelist)
        self._authz_white = _whitelist(authorization_whitelist)

    def authenticate(self, username: str | None, signature_ok: Callable[[str], bool]) -> str | None:
        """None when ``username``'s signature checks out (``signature_ok(password)``), else why not."""
        if not username:
            return "username cannot be null."
        user = self._source().users.get(username)
        if user is None:
            return f"User:{username} is not found."
        if user.status is UserStatus.DISABLE:
            return f"User:{username} is disabled."
        if not signature_ok(user.password):
            return "check signature failed."
        return None

    def authorize(self, username: str | None, source_ip: str,
                  wanted: Iterable[tuple[Resource, tuple[Action, ...]]]) -> str | None:
        """None when the user may do each of ``wanted``, else Apache's message for the first refused."""
        wanted = list(wanted)
        if not wanted:
            return None
        if not username:
            return "Authorization failed. Please verify your access rights and try again."
        data = self._source()
        user = data.users.get(username)
        if user is None:
            return f"User:{username} not found."
        if user.status is UserStatus.DISABLE:
            return f"User:{username} is disabled."
        if user.user_type is UserType.SUPER:
            return None
        acl = data.acls.get(f"User:{username}")
        for resource, actions in wanted:
            entry = None if acl is None else matching_entry(acl, resource, actions, source_ip)
            if entry is None:
                return f"User:{username} has no permission to access {resource.key} from {source_ip}, no matched policies."
            if entry.decision is Decision.DENY:
                return f"User:{username} has no permission to access {resource.key} from {source_ip}, the decision is deny."
        return None

    def check_signed(self, username: str | None, remote_host: str, signature_ok: Callable[[str], bool],
                     need: dict[str, int]) -> tuple[bool, str] | None:
        """The check for a request signed another way (5.x gRPC: ``signature_ok(password)``)
        that needs ``need`` (ACL 1.0's shape, mqcore.grpc.auth: topic or ``%RETRY%<group>`` ->
        PUB/SUB/ANY bits): None when allowed, else (whether the caller was authenticated, why not).
        Apache's proxy asks Pub or Sub for QueryRoute (ANY here), Pub for sends, Sub for the rest."""
        if self.authentication:
            why = self.authenticate(username, signature_ok)
            if why is not None:
                return False, why
        if self.authorization:
            why = self.authorize(username, remote_host, _from_perms(need))
            if why is not None:
                return True, why
        return None

    def check(self, request: RemotingCommand, remote_host: str) -> str | None:
        """None when ``request`` from ``remote_host`` may run, else why not."""
        code = str(request.code)
        ext = request.ext_fields or {}
        username = ext.get(ACCESS_KEY)
        if self.authentication and code not in self._authn_white:
            why = self.authenticate(username, lambda password: _signature_ok(request, password))
            if why is not None:
                return why
        if self.authorization and code not in self._authz_white:
            try:
                wanted = needs(request, self.cluster)
            except NeedsParseError as e:
                return str(e)
            return self.authorize(username, remote_host, wanted)
        return None


class BrokerAuthHook:
    """The broker's ACL 2.0 check before every request (Apache's auth pipelines)."""

    def __init__(self, checker: AuthChecker) -> None:
        self.checker = checker

    def __call__(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        why = self.checker.check(request, channel.remote_host)
        return None if why is None else create_response(request, DENIED_CODE, why)
