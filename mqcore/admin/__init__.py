"""Admin API and ``mqadmin`` for mqcore and Apache RocketMQ 4.x clusters (see docs/mqadmin.md)."""
from mqcore.admin.api import (BrokerAddrs, ClusterInfo, Connection, ConsumeRow, ConsumerConnection, ConsumeStats,
                              MessageTrack, MQAdmin, ResetRow, TopicOffset)

__all__ = ["MQAdmin", "ClusterInfo", "BrokerAddrs", "TopicOffset", "ConsumeRow", "ConsumeStats", "Connection",
           "ConsumerConnection", "MessageTrack", "ResetRow"]
