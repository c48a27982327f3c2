"""GET_BROKER_RUNTIME_INFO's table: the keys a 4.9 broker reports (``mqadmin brokerStatus``,
``clusterList``, ``DefaultMQAdminExt.fetchBrokerRuntimeStats``), from mqcore's own state.

The rates are differences of running totals sampled once a second (``ThroughputSampler``); the
counts are ``BrokerStats``' counters; put latencies come from its histogram; nothing is counted
on the send or pull paths for this table. Keys whose Java meaning has no counterpart here
answer what is true of this broker: requests run on one event loop, so no thread-pool queue
ever holds one (sizes and head waits 0; the capacities are the Java defaults an operator's
tools compare with), dispatch is synchronous (``dispatchBehindBytes`` 0), there is no transient
store pool (``remainTransientStoreBufferNumbs`` is Java's answer without one,
``Integer.MAX_VALUE``). ``getMessageEntireTimeMax`` is 0: pulls are not timed.
"""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqcore.broker.runtime_stats import ThroughputSampler, latency_texts
from mqcore.broker.stats_windows import DailyTotals, StatsWindows, stats_values
from mqcore.message import SCHEDULE_TOPIC

if TYPE_CHECKING:
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import DelayOffsetTable
    from mqcore.broker.stats import BrokerStats
    from mqcore.config import StoreConfig
    from mqcore.store.message_store import MessageStore

#: BrokerConfig's queue capacities in RocketMQ 4.9 (sendThreadPoolQueueCapacity ...)
JAVA_QUEUE_CAPACITIES = {"sendThreadPoolQueueCapacity": 10_000, "pullThreadPoolQueueCapacity": 100_000,
                         "queryThreadPoolQueueCapacity": 20_000, "EndTransactionThreadPoolQueueCapacity": 100_000}
JAVA_INT_MAX = 2_147_483_647
#: the version this broker reports (``MQVersion.Version.V4_9_8``'s ordinal, and its name marked
#: as mqcore's): one place for GET_BROKER_RUNTIME_INFO, clusterList and the dashboard's page
BROKER_VERSION = "409"
BROKER_VERSION_DESC = "V4_9_8 (mqcore)"


def human_bytes(n: int) -> str:
    """``MixAll.humanReadableByteCount`` (SI units off): 1.5 GiB -> "1.5 GiB"."""
    if n < 1024:
        return f"{n} B"
    units = "KMGTPE"
    exp = 0
    while n >= 1024 ** (exp + 2) and exp < len(units) - 1:
        exp += 1
    return f"{n / 1024 ** (exp + 1):.1f} {units[exp]}iB"


class RuntimeInfo:
    """Samples once a second (``sample``) and builds the table (``table``).

    ``configs`` returns the live (broker, store) configuration and ``disk_ratio(path)`` the used
    fraction of a path's partition as the disk cleanup measures it. Threads: the event loop."""

    def __init__(self, *, store: MessageStore, stats: BrokerStats, delay_offsets: DelayOffsetTable,
                 configs: Callable[[], tuple[BrokerConfig, StoreConfig]], disk_ratio: Callable[[str], float],
                 clock: Callable[[], int]):
        self.store = store
        self.stats = stats
        self.delay_offsets = delay_offsets
        self.configs = configs
        self.disk_ratio = disk_ratio
        self.clock = clock
        self.boot_timestamp = clock()
        self._started = time.monotonic()
        #: the HA server's ``lag()`` once the broker has one (its slaves' acks and lag)
        self.ha_lag: Callable[[], list[dict[str, Any]]] | None = None
        self.put_tps, self.transferred_tps = ThroughputSampler(), ThroughputSampler()
        self.found_tps, self.miss_tps, self.total_tps = ThroughputSampler(), ThroughputSampler(), ThroughputSampler()
        self.put_days, self.get_days = DailyTotals(), DailyTotals()
        self.windows = StatsWindows(lambda: stats_values(self.stats.put, self.stats.pulled,
                                                         self.configs()[0].broker_cluster_name))

    def started(self) -> None:
        """The broker serves from now on: uptime and ``bootTimestamp`` count from here."""
        self.boot_timestamp = self.clock()
        self._started = time.monotonic()
        # the rates' first sample at boot: the periodic one comes a second later, and what was
        # put or pulled before it (a client's first burst) was otherwise in no window at all
        self.sample()

    # --- sampling ---------------------------------------------------------------------------------
    def put_total(self) -> int:
        return sum(c[0] for c in list(self.stats.put.values()))

    def get_total(self) -> int:
        return sum(c[0] for c in list(self.stats.pulled.values()))

    def sample(self) -> None:
        now = self.clock()
        puts, gets = self.put_total(), self.get_total()
        requests = dict(self.stats.pull_requests)
        found = requests.get("found", 0)
        self.put_tps.sample(now, puts)
        self.transferred_tps.sample(now, gets)
        self.found_tps.sample(now, found)
        self.miss_tps.sample(now, sum(requests.values()) - found)
        self.total_tps.sample(now, sum(requests.values()))
        self.put_days.sample(now, puts)
        self.get_days.sample(now, gets)
        self.windows.sample(now)

    @staticmethod
    def _ha(slaves: list[dict[str, Any]]) -> dict[str, str]:
        """mqcore's own keys (Apache 4.9's master reports none): the connected slaves, and the
        best one's ack offset and lag, in bytes and ms; each slave's as ``haSlave_<addr>``."""
        out = {"haSlaveCount": str(len(slaves))}
        if slaves:
            best = min(slaves, key=lambda s: s["behind_bytes"])
            out.update({"haSlaveAckOffset": str(best["ack_offset"]), "haSlaveFallBehindBytes": str(best["behind_bytes"]),
                        "haSlaveFallBehindMs": str(best["behind_ms"])})
            for s in slaves:
                out[f"haSlave_{s['addr']}"] = f"ackOffset={s['ack_offset']},behindBytes={s['behind_bytes']}," \
                                               f"behindMs={s['behind_ms']}"
        return out

    # --- the table -------------------------------------------------------------------------------
    def runtime_text(self) -> str:
        up = int(time.monotonic() - self._started)
        return f"[ {up // 86400} days, {up // 3600 % 24} hours, {up // 60 % 60} minutes, {up % 60} seconds ]"

    def table(self) -> dict[str, str]:
        _, scfg = self.configs()
        s = self.store
        out = {"brokerVersion": BROKER_VERSION, "brokerVersionDesc": BROKER_VERSION_DESC,
               "runtime": self.runtime_text(), "bootTimestamp": str(self.boot_timestamp),
               "putTps": self.put_tps.text(), "getTransferedTps": self.transferred_tps.text(),
               "getFoundTps": self.found_tps.text(), "getMissTps": self.miss_tps.text(),
               "getTotalTps": self.total_tps.text(),
               "commitLogMinOffset": str(s.get_min_phy_offset()), "commitLogMaxOffset": str(s.get_max_phy_offset()),
               "earliestMessageTimeStamp": str(self._earliest()),
               "startAcceptSendRequestTimeStamp": "0", "dispatchBehindBytes": "0", "dispatchMaxBuffer": "0",
               "pageCacheLockTimeMills": "0", "getMessageEntireTimeMax": "0",
               "remainTransientStoreBufferNumbs": str(JAVA_INT_MAX),
               "remainHowManyDataToFlush": human_bytes(max(0, s.get_max_phy_offset() - self._flushed())),
               "EndTransactionQueueSize": "0"}
        out.update(self._puts())
        for kind, days, now in (("Put", self.put_days, self.put_total()), ("Get", self.get_days, self.get_total())):
            out[f"msg{kind}TotalTodayNow"] = str(now)
            out[f"msg{kind}TotalTodayMorning"] = str(days.today_morning)
            out[f"msg{kind}TotalYesterdayMorning"] = str(days.yesterday_morning)
        for pool in ("send", "pull", "query"):
            out[f"{pool}ThreadPoolQueueSize"] = "0"
            out[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
        out.update({k: str(v) for k, v in JAVA_QUEUE_CAPACITIES.items()})
        out.update(self._disk(scfg))
        if self.ha_lag is not None:
            out.update(self._ha(self.ha_lag()))
        for level, offset in sorted(self.delay_offsets.snapshot().items()):
            out[f"scheduleMessageOffset_{level}"] = f"{offset},{s.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)}"
        return out

    def _puts(self) -> dict[str, str]:
        st = self.stats
        messages = self.put_total()
        size = sum(c[1] for c in list(st.put.values()))
        times = messages or 1  # RocketMQ's divisor is never 0 (and it reports 1 for none)
        out = {"putMessageTimesTotal": str(times), "putMessageSizeTotal": str(size),
               "putMessageAverageSize": str(size / times),
               "putMessageFailedTimes": str(sum(st.put_failures.values()))}
        latency = st.put_latency
        out.update(latency_texts(tuple(latency.bounds), list(latency.counts)))
        return out

    def _earliest(self) -> int:
        s = self.store
        lo = s.get_min_phy_offset()
        if s.get_max_phy_offset() > lo:
            first = s.look_message_by_offset(lo)
            if first is not None:
                return first.store_timestamp
        return -1  # RocketMQ's answer for an empty store

    def _flushed(self) -> int:
        return self.store.commitlog.queue.flushed_offset()

    def _disk(self, scfg: StoreConfig) -> dict[str, str]:
        out: dict[str, str] = {}
        try:  # the cleanup's own measure of each partition, as RocketMQ reports it
            clog = scfg.commitlog_dir if os.path.isdir(scfg.commitlog_dir) else scfg.store_path
            ratio = self.disk_ratio(clog)
            out["commitLogDiskRatio"] = f"{ratio:.4f}"
            out[f"commitLogDiskRatio_{scfg.commitlog_dir}"] = f"{ratio:.4f}"
            cq = scfg.consume_queue_dir if os.path.isdir(scfg.consume_queue_dir) else scfg.store_path
            out["consumeQueueDiskRatio"] = f"{self.disk_ratio(cq):.4f}"
            du = shutil.disk_usage(scfg.store_path)
            out["commitLogDirCapacity"] = f"Total : {human_bytes(du.total)}, Free : {human_bytes(du.free)}."
        except OSError:
            pass  # the partition vanished: the keys are absent, as on RocketMQ when the dir is gone
        return out
