"""The broker's Prometheus endpoint (``metricsPort``; off when 0).

Everything is computed when Prometheus scrapes, from state the broker keeps anyway
(offsets, consume queues, files) and from the few counters ``mqcore.broker.stats``
bumps once per request. Names follow the RocketMQ exporter (``rocketmq_producer_offset``,
``rocketmq_consumer_offset``, ``rocketmq_group_diff``, ``rocketmq_brokeruntime_*``) and
RocketMQ 5's own metrics (``rocketmq_messages_in_total``, ``rocketmq_throughput_in_total``)
where one exists; labels ``cluster`` and ``broker`` on every series, as the exporter has.

The HTTP server runs on the broker's event loop, so a scrape reads the broker's tables
on the same thread that changes them: no locks, no torn reads.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psutil
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from mqcore.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, SCHEDULE_TOPIC
from mqcore.remoting.budget import HEADER_TIMEOUT_S, HTTP_MAX_CONNECTIONS, ConnectionBudget

if TYPE_CHECKING:
    from mqcore.kernel_api import HistogramApi

log = logging.getLogger(__name__)

#: the mqcore.broker.broker.Broker served (not imported, even for typing: the broker imports this
#: module, and the layering rule forbids the cycle); the collector reads a dozen of its parts
Broker = Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: a request's line and headers longer than this are not read further (the connection is closed)
MAX_REQUEST_HEAD = 8192
#: seconds an answer has to be taken by the scraper once written; a peer that never reads is
#: closed, so its unsent answer (the whole exposition) is not held for ever
WRITE_TIMEOUT_S = 30.0


class BrokerCollector:
    """A prometheus-client collector over one broker."""

    def __init__(self, broker: Broker) -> None:
        self.b = broker

    def collect(self) -> Iterator[Metric]:
        b = self.b
        base = [b.cfg.broker_cluster_name, b.cfg.broker_name]
        yield from self._traffic(base)
        yield from self._offsets(base)
        yield from self._store(base)
        yield from self._schedule(base)
        yield from self._transactions(base)
        yield from self._clients(base)
        yield from self._replication(base)

    # --- per-request counters --------------------------------------------------------------------
    def _traffic(self, base: list[str]) -> Iterator[Metric]:
        st = self.b.stats
        msgs_in = CounterMetricFamily("rocketmq_messages_in", "Messages stored, per topic",
                                      labels=["cluster", "broker", "topic"])
        bytes_in = CounterMetricFamily("rocketmq_throughput_in", "Bytes stored (whole records), per topic",
                                       labels=["cluster", "broker", "topic"])
        for topic, (n, nbytes) in sorted(st.put.items()):
            msgs_in.add_metric(base + [topic], n)
            bytes_in.add_metric(base + [topic], nbytes)
        msgs_out = CounterMetricFamily("rocketmq_messages_out",
                                       "Messages delivered by pulls and 5.x receives, per group and topic",
                                       labels=["cluster", "broker", "topic", "group"])
        bytes_out = CounterMetricFamily("rocketmq_throughput_out",
                                        "Bytes delivered by pulls and 5.x receives, per group and topic",
                                        labels=["cluster", "broker", "topic", "group"])
        for (group, topic), (n, nbytes) in sorted(st.pulled.items()):
            msgs_out.add_metric(base + [topic, group], n)
            bytes_out.add_metric(base + [topic, group], nbytes)
        failures = CounterMetricFamily("rocketmq_put_failures", "Puts refused or failed, by store status",
                                       labels=["cluster", "broker", "status"])
        for status, n in sorted(st.put_failures.items()):
            failures.add_metric(base + [status], n)
        pulls = CounterMetricFamily("rocketmq_pull_requests", "Pull requests answered, by outcome",
                                    labels=["cluster", "broker", "result"])
        for kind, n in sorted(st.pull_requests.items()):
            pulls.add_metric(base + [kind], n)
        long_polls = CounterMetricFamily("rocketmq_pull_long_polling", "Pulls parked by long polling until a "
                                         "message arrived or the suspend timeout passed",
                                         labels=["cluster", "broker"])
        long_polls.add_metric(base, st.long_polls)
        held = GaugeMetricFamily("rocketmq_pull_long_polling_waiting", "Pulls parked right now",
                                 labels=["cluster", "broker"])
        held.add_metric(base, self.b.hold.waiting_count if self.b.hold is not None else 0)
        sent_back = CounterMetricFamily("rocketmq_send_back_messages", "Messages consumers sent back, by where "
                                        "they went (retry topic or DLQ)", labels=["cluster", "broker", "group", "to"])
        for (group, where), n in sorted(st.sent_back.items()):
            sent_back.add_metric(base + [group, where], n)
        yield from (msgs_in, bytes_in, msgs_out, bytes_out, failures, pulls, long_polls, held, sent_back)
        yield _histogram("rocketmq_put_latency_seconds", "Time to store one put request (a batch is one put)",
                         base, st.put_latency)
        yield _histogram("rocketmq_storage_flush_latency_seconds", "Time of commitlog flushes that wrote data",
                         base, self.b.store.flush_latency)

    # --- offsets and lag -------------------------------------------------------------------------------
    def _offsets(self, base: list[str]) -> Iterator[Metric]:
        store, offsets = self.b.store, self.b.offsets
        produced = GaugeMetricFamily("rocketmq_producer_offset", "Sum of the topic's queue max offsets",
                                     labels=["cluster", "broker", "topic"])
        max_of: dict[tuple[str, int], int] = {}
        per_topic: dict[str, int] = {}
        for cq in store.queues:
            m = cq.max_offset()
            max_of[(cq.topic, cq.queue_id)] = m
            per_topic[cq.topic] = per_topic.get(cq.topic, 0) + m
        for topic, total in sorted(per_topic.items()):
            produced.add_metric(base + [topic], total)
        consumed = GaugeMetricFamily("rocketmq_consumer_offset", "Sum of the group's committed offsets on a topic",
                                     labels=["cluster", "broker", "topic", "group"])
        diff = GaugeMetricFamily("rocketmq_group_diff", "Messages a group has yet to consume on a topic",
                                 labels=["cluster", "broker", "topic", "group"])
        queue_diff = GaugeMetricFamily("rocketmq_group_queue_diff", "Messages a group has yet to consume, per queue",
                                       labels=["cluster", "broker", "topic", "group", "queueid"])
        retry = GaugeMetricFamily("rocketmq_group_retrydiff", "Messages waiting in the group's retry topic",
                                  labels=["cluster", "broker", "topic", "group"])
        dlq = GaugeMetricFamily("rocketmq_group_dlqdiff", "Messages in the group's dead-letter queue",
                                labels=["cluster", "broker", "topic", "group"])
        for key, queues in sorted(offsets.snapshot().items()):
            topic, _, group = key.partition("@")
            total = lag = 0
            for qid, off in sorted(queues.items()):
                top = max_of.get((topic, qid), 0)
                total += off
                q_lag = max(0, top - off)
                lag += q_lag
                if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    queue_diff.add_metric(base + [topic, group, str(qid)], q_lag)
            consumed.add_metric(base + [topic, group], total)
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                retry.add_metric(base + [topic, group], lag)
            else:
                diff.add_metric(base + [topic, group], lag)
        for (topic, qid), top in sorted(max_of.items()):
            if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                cq = store.queues.get(topic, qid)
                lo = cq.min_offset() if cq is not None else 0
                dlq.add_metric(base + [topic, topic[len(DLQ_GROUP_TOPIC_PREFIX):]], max(0, top - lo))
        yield from (produced, consumed, diff, queue_diff, retry, dlq)

    # --- disk -------------------------------------------------------------------------------------------
    def _store(self, base: list[str]) -> Iterator[Metric]:
        store, cfg = self.b.store, self.b.store_config
        cl_bytes = GaugeMetricFamily("rocketmq_store_commitlog_bytes", "Bytes of the commitlog files on disk",
                                     labels=["cluster", "broker"])
        cl_bytes.add_metric(base, sum(mf.file_size for mf in list(store.commitlog.queue.files)))
        cq_bytes = GaugeMetricFamily("rocketmq_store_consumequeue_bytes", "Bytes of the consume queue files on disk",
                                     labels=["cluster", "broker"])
        cq_bytes.add_metric(base, sum(mf.file_size for cq in store.queues for mf in list(cq.queue.files)))
        yield from (cl_bytes, cq_bytes)
        for name, path in (("rocketmq_brokeruntime_commitlog_disk_ratio", cfg.commitlog_dir),
                           ("rocketmq_brokeruntime_consumequeue_disk_ratio", cfg.consume_queue_dir)):
            g = GaugeMetricFamily(name, f"Used fraction of the partition holding {path}",
                                  labels=["cluster", "broker"])
            try:
                g.add_metric(base, self.b.disk_ratio(path))
            except OSError:
                continue
            yield g
        thresholds = GaugeMetricFamily("rocketmq_store_disk_ratio_threshold",
                                       "Disk usage thresholds: cleanup at any hour, clean forcibly, refuse writes",
                                       labels=["cluster", "broker", "setting"])
        for key, value in (("diskMaxUsedSpaceRatio", cfg.disk_max_used_space_ratio),
                           ("diskSpaceCleanForciblyRatio", cfg.disk_space_clean_forcibly_ratio),
                           ("diskSpaceWarningLevelRatio", cfg.disk_space_warning_level_ratio)):
            thresholds.add_metric(base + [key], value / 100)
        yield thresholds
        behind = GaugeMetricFamily("rocketmq_storage_flush_behind_bytes", "Commitlog bytes written but not flushed",
                                   labels=["cluster", "broker"])
        behind.add_metric(base, max(0, store.commitlog.max_offset - store.commitlog.queue.flushed_offset()))
        yield behind
        st = self.b.cleanup.stats  # running totals of the disk cleanup service
        deleted = CounterMetricFamily("rocketmq_store_cleanup_deleted_files", "Commitlog files deleted by disk "
                                      "cleanup; forcibly = before fileReservedTime, the disk being too full",
                                      labels=["cluster", "broker", "reason"])
        deleted.add_metric(base + ["expired"], st.commitlog_files_deleted - st.commitlog_files_deleted_forcibly)
        deleted.add_metric(base + ["forcibly"], st.commitlog_files_deleted_forcibly)
        yield deleted
        lost = CounterMetricFamily("rocketmq_store_cleanup_unconsumed_messages", "Messages deleted by disk cleanup "
                                   "before a consuming group had consumed them", labels=["cluster", "broker", "topic",
                                                                                          "group"])
        for (topic, group), n in sorted(st.unconsumed_by_group.items()):
            lost.add_metric(base + [topic, group], n)
        yield lost

    # --- delay levels -------------------------------------------------------------------------------------
    def _schedule(self, base: list[str]) -> Iterator[Metric]:
        backlog = GaugeMetricFamily("rocketmq_schedule_backlog", "Delayed messages not yet delivered, per delay "
                                    "level", labels=["cluster", "broker", "delay_level"])
        for st in self.b.schedule.levels:
            top = self.b.store.get_max_offset_in_queue(SCHEDULE_TOPIC, st.queue_id)
            backlog.add_metric(base + [str(st.level)], max(0, top - st.offset))
        yield backlog

    def _transactions(self, base: list[str]) -> Iterator[Metric]:
        st = self.b.transactions.stats
        pending = GaugeMetricFamily("rocketmq_transaction_half_pending", "Half messages without a commit or "
                                    "rollback, as the last check round found them", labels=["cluster", "broker"])
        pending.add_metric(base, st.pending)
        yield pending
        ends = CounterMetricFamily("rocketmq_transaction_messages", "Transactional messages, by what happened: "
                                   "half (stored), committed, rolled_back, refused (bad END_TRANSACTION), "
                                   "checked (check-backs sent), discarded (checked too often)",
                                   labels=["cluster", "broker", "state"])
        for state in ("half_messages", "committed", "rolled_back", "refused", "checked", "discarded"):
            ends.add_metric(base + [state.replace("half_messages", "half")], getattr(st, state))
        yield ends

    # --- connections -----------------------------------------------------------------------------------------
    def _clients(self, base: list[str]) -> Iterator[Metric]:
        conns = GaugeMetricFamily("rocketmq_broker_connections", "Open client connections",
                                  labels=["cluster", "broker"])
        conns.add_metric(base, len(self.b.server.channels))
        consumers = GaugeMetricFamily("rocketmq_group_count", "Consumers online per group (heartbeats)",
                                      labels=["cluster", "broker", "group"])
        for group, info in sorted(self.b.clients.consumers.items()):
            consumers.add_metric(base + [group], len(info.client_ids()))
        yield from (conns, consumers)
        endpoint = self.b.grpc
        if endpoint is not None and endpoint.servicer is not None:
            # 5.x clients hold one HTTP/2 connection each; what the endpoint knows is the client
            # ids that sent a heartbeat or their settings within channelExpiredTimeout
            by_type: dict[str, int] = {}
            for c in endpoint.known_clients():
                by_type[c.client_type] = by_type.get(c.client_type, 0) + 1
            grpc_clients = GaugeMetricFamily("rocketmq_grpc_clients", "5.x clients known to the gRPC endpoint, "
                                             "by client type", labels=["cluster", "broker", "client_type"])
            for name, n in sorted(by_type.items()):
                grpc_clients.add_metric(base + [name], n)
            yield grpc_clients


    def _replication(self, base: list[str]) -> Iterator[Metric]:
        ha = getattr(self.b, "ha", None)
        slaves = ha.lag() if ha is not None else []
        count = GaugeMetricFamily("rocketmq_ha_slaves", "Slaves connected to the HA port", labels=["cluster", "broker"])
        count.add_metric(base, len(slaves))
        ack = GaugeMetricFamily("rocketmq_ha_slave_ack_offset", "Commitlog offset the slave last reported having",
                                labels=["cluster", "broker", "slave"])
        lag_bytes = GaugeMetricFamily("rocketmq_ha_slave_lag_bytes", "Commitlog bytes the master has and the slave "
                                      "has not acknowledged", labels=["cluster", "broker", "slave"])
        lag_s = GaugeMetricFamily("rocketmq_ha_slave_lag_seconds", "Age of the oldest data the slave has not "
                                  "acknowledged (0: it has everything)", labels=["cluster", "broker", "slave"])
        for s in slaves:
            ack.add_metric(base + [s["addr"]], s["ack_offset"])
            lag_bytes.add_metric(base + [s["addr"]], s["behind_bytes"])
            lag_s.add_metric(base + [s["addr"]], s["behind_ms"] / 1000)
        yield from (count, ack, lag_bytes, lag_s)


def _histogram(name: str, doc: str, base: list[str], hist: HistogramApi) -> HistogramMetricFamily:
    h = HistogramMetricFamily(name, doc, labels=["cluster", "broker"])
    h.add_metric(base, hist.cumulative(), hist.sum)
    return h


class MetricsServer:
    """``GET /metrics`` on ``host:port`` (port 0 picks one), served on the running loop.

    The port's :class:`ConnectionBudget` (``httpMaxConnections``, ``httpHeaderTimeoutSeconds``,
    as the dashboard's): connections over the cap are closed at accept, and one that has not
    sent its request head in time is closed; each holds at most ``MAX_REQUEST_HEAD`` bytes in
    and one answer out."""

    def __init__(self, broker: Broker, host: str, port: int, *, max_connections: int = HTTP_MAX_CONNECTIONS,
                 header_timeout_s: float = HEADER_TIMEOUT_S) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker))
        # the broker process itself (RSS, CPU seconds, open and max fds, start time; Python's GC
        # collections and the interpreter's version), on this registry, not the library's global one
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.host = host
        self.port = port
        self.budget = ConnectionBudget("metrics", max_connections, header_timeout_s, key="httpMaxConnections",
                                       logger=log)
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_REQUEST_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)
        return self.port

    async def shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.budget.admit():
            writer.transport.abort()  # closed at once: nothing is read or answered
            return
        try:
            await self._answer(reader, writer)
        finally:
            self.budget.release()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.budget.header_timeout_s)
            except asyncio.TimeoutError:
                self.budget.note("closed a connection that did not finish its request headers in %.0f s",
                                 self.budget.header_timeout_s)
                return
            line = head.split(b"\r\n", 1)[0].split()
            if len(line) != 3 or not line[2].startswith(b"HTTP/"):
                status, body, ctype = b"400 Bad Request", b"bad request\n", b"text/plain"
            elif line[0] not in (b"GET", b"HEAD"):
                status, body, ctype = b"405 Method Not Allowed", b"GET /metrics\n", b"text/plain"
            elif line[1].split(b"?")[0] not in (b"/metrics", b"/"):
                status, body, ctype = b"404 Not Found", b"GET /metrics\n", b"text/plain"
            else:
                try:
                    status, body, ctype = b"200 OK", self.render(), CONTENT_TYPE.encode()
                except Exception:  # noqa: BLE001 - a bug in a collector must not take the broker down
                    log.exception("metrics: collecting failed")
                    status, body, ctype = b"500 Internal Server Error", b"collecting failed, see broker.log\n", \
                        b"text/plain"
                if line[0] == b"HEAD":
                    body = b""
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            writer.transport.set_write_buffer_limits(high=0)  # drain waits until all of it is sent
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            pass  # a client that hung up, sent garbage or does not read: nothing more to answer
        except Exception:  # noqa: BLE001 - a scrape must never take the broker down
            log.exception("metrics request failed")
        finally:
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # an answer its peer does not take is dropped, not kept
            else:
                writer.close()
