"""Offset commits of a group the broker has not seen yet, on mqbroker, Apache RocketMQ 4.9.7 and 5.3.3.

RocketMQ 5.x refuses UPDATE_CONSUMER_OFFSET for a subscription group it does not know
(SUBSCRIPTION_GROUP_NOT_EXIST, 26) and creates groups from the consumers' heartbeats
(``autoCreateSubscriptionGroup``, on by default); 4.9.7 and mqbroker take any group's commit.
The 5.x Java client heartbeats a broker as soon as it connects to it, so its group exists before
its first commit. mqcore.client does the same (a broker new to the client gets a heartbeat first),
sends a refused sync commit once more after a heartbeat, and when the broker still knows no
such group (it creates none itself) ``commit()`` raises ``ConsumerGroupNotFoundError`` naming the
group and the fix instead of dropping the offset.
"""
from __future__ import annotations

import json
import os

import pytest

from mqcore.client import PullConsumer
from mqcore.errors import ConsumerGroupNotFoundError
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.client.integration.helpers import create_topic

pytestmark = pytest.mark.timeout(300)


def _topic(broker, name):
    topic = f"{name}{os.getpid()}"
    create_topic(broker.broker_addr, broker.namesrv_addr, topic)
    return topic


def _set_broker_config(broker, **settings):
    body = "".join(f"{k}={v}\n" for k, v in settings.items()).encode()
    with SyncRemotingClient() as rc:
        r = rc.invoke(broker.broker_addr, create_request(RC.UPDATE_BROKER_CONFIG, None, body), 5000)
    assert r.code == ResponseCode.SUCCESS, r.remark


def test_a_new_groups_commit_lands_on_every_broker(any_broker):
    topic = _topic(any_broker, "CommitNew")
    group = f"cg-commit-new-{os.getpid()}"
    with PullConsumer(group, namesrv_addr=any_broker.namesrv_addr) as c:
        mqs = c.fetch_subscribe_message_queues(topic)
        c.update_consume_offset(mqs[0], 3)
        c.commit()
        assert c.fetch_consume_offset(mqs[0]) == 3
    with PullConsumer(group, namesrv_addr=any_broker.namesrv_addr) as again:  # and it stays
        assert again.fetch_consume_offset(mqs[0]) == 3


def test_a_broker_that_creates_no_groups_makes_commit_raise_naming_the_group_and_the_fix(java5_broker):
    broker = java5_broker
    topic = _topic(broker, "CommitNoGroup")
    group = f"cg-commit-none-{os.getpid()}"
    _set_broker_config(broker, autoCreateSubscriptionGroup="false")
    try:
        with PullConsumer(group, namesrv_addr=broker.namesrv_addr) as c:
            mqs = c.fetch_subscribe_message_queues(topic)
            c.update_consume_offset(mqs[0], 2)
            with pytest.raises(ConsumerGroupNotFoundError) as refused:
                c.commit()
            assert refused.value.code == 26 and refused.value.group == group
            assert group in str(refused.value) and "updateSubGroup" in str(refused.value)
            assert c.fetch_consume_offset(mqs[0]) == -1  # nothing was stored
            # the fix the error names: the group created by an admin, then the same commit lands
            body = json.dumps({"groupName": group}).encode()
            with SyncRemotingClient() as rc:
                r = rc.invoke(broker.broker_addr, create_request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body),
                              5000)
            assert r.code == ResponseCode.SUCCESS, r.remark
            c.commit()
            assert c.fetch_consume_offset(mqs[0]) == 2
    finally:
        _set_broker_config(broker, autoCreateSubscriptionGroup="true")
