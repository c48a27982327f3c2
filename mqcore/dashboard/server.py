"""The dashboard's HTTP server (aiohttp) on the broker's own event loop.

Pages are rendered on the server with Jinja2; the charts are uPlot (vendored under
``static/``) fed from ``/api/rates``. Served on the loop that runs the broker, so a page
reads the managers' tables on the thread that changes them, as the Prometheus endpoint
does: no locks, no torn reads.

With ACL on, every request must carry an admin account's keys (``auth``); a form post must
also come from the dashboard's own pages (its Origin), so another site cannot make a
logged-in browser delete a topic.
"""
from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
from aiohttp import web
from aiohttp.typedefs import Handler

from mqcore.dashboard import actions, admin_calls, messages, queries
from mqcore.dashboard import guard
from mqcore.dashboard.auth import REALM, AuthResult, check_basic
from mqcore.dashboard.history import MAX_GROUPS, MAX_TOPICS, SAMPLE_INTERVAL_MS, GroupHistory, QueueHistory, RateHistory
from mqcore.dashboard.svg import line_chart, sparkline
from mqcore.dashboard.source import DashboardSource
from mqcore.errors import MQError
from mqcore.format.trace import TRACE_TOPIC
from mqcore.message import MessageExt, validate_topic
from mqcore.netaddr import format_sockaddr
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.remoting.budget import ConnectionBudget

log = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))


def _fmt_ts(ms: float | None) -> str:
    if not ms or ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _fmt_sec(ms: float | None) -> str:
    """A time to the second, as ``mqadmin queryMsgTraceById`` prints it (in UTC here)."""
    if not ms or ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _fmt_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


#: the last millisecond of year 9999: a time past it cannot be shown or stored as a timestamp
MAX_TIME_MS = 253_402_300_799_999


def parse_time(text: str | None, default: int) -> int:
    """Epoch ms from a form field: a number of ms, or an ISO date/time read as UTC, within
    0 .. year 9999 (a time beyond overflowed the date arithmetic and failed the page)."""
    text = (text or "").strip()
    if not text:
        return default
    bad = f"{text[:64]!r} is not a time (2024-05-01T12:00 in UTC, or epoch milliseconds from 0 to {MAX_TIME_MS})"
    if text.lstrip("-").isdigit():
        if len(text) > 16 or not 0 <= int(text) <= MAX_TIME_MS:
            raise actions.ActionError(bad)
        return int(text)
    try:
        t = datetime.datetime.fromisoformat(text)
        if t.tzinfo is None:
            t = t.replace(tzinfo=datetime.timezone.utc)
        ms = int(t.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        raise actions.ActionError(bad) from None
    if not 0 <= ms <= MAX_TIME_MS:
        raise actions.ActionError(bad)
    return ms


def _int_field(form: Mapping[str, Any], name: str, default: int) -> int:
    try:
        return int(form.get(name, default))
    except (TypeError, ValueError):
        raise actions.ActionError(f"{name} must be a whole number") from None


class DashboardServer:
    """``start()`` binds ``host:port`` (port 0 picks one) on the running loop; ``shutdown()``."""

    def __init__(self, src: DashboardSource, host: str, port: int, *, clock: Callable[[], int],
                 sample_interval_ms: int = SAMPLE_INTERVAL_MS, allowed_hosts: Iterable[str] = (),
                 max_connections: int = guard.MAX_CONNECTIONS, header_timeout_s: float = guard.HEADER_TIMEOUT_S,
                 request_timeout_s: float = guard.REQUEST_TIMEOUT_S) -> None:
        self.src = src
        self.host = host
        self.port = port
        self.hosts = guard.HostAllowList(host, allowed_hosts)
        self.budget = ConnectionBudget("dashboard", max_connections, header_timeout_s, key="httpMaxConnections",
                                      logger=guard.log)
        self.request_timeout_s = request_timeout_s
        self.clock = clock
        self.sample_interval_ms = sample_interval_ms
        self.history = RateHistory(src.stats)
        self.group_history = GroupHistory()
        self.queue_history = QueueHistory()
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
                                      autoescape=jinja2.select_autoescape(("html",)), undefined=jinja2.StrictUndefined)
        self.env.filters.update(ts=_fmt_ts, sec=_fmt_sec, bytes=_fmt_bytes, q=lambda s: quote(str(s), safe=""))
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None
        self._sampler: asyncio.Task[None] | None = None

    # --- lifecycle ------------------------------------------------------------------------------------------
    async def start(self) -> int:
        app = web.Application(middlewares=[self._guard], client_max_size=64 * 1024)
        app.add_routes([
            web.get("/", self.page_broker), web.get("/topics", self.page_topics),
            web.post("/topics", self.post_topic), web.get("/topics/{name}", self.page_topic),
            web.post("/topics/{name}/delete", self.post_delete_topic),
            web.post("/topics/{name}/update", self.post_update_topic),
            web.get("/groups", self.page_groups), web.post("/groups", self.post_create_group),
            web.get("/groups/{name}", self.page_group),
            web.post("/groups/{name}/reset", self.post_reset),
            web.post("/groups/{name}/config", self.post_group_config),
            web.post("/groups/{name}/delete", self.post_delete_group),
            web.get("/groups/{name}/running", self.page_running_info),
            web.get("/clients", self.page_clients), web.get("/producers", self.page_producers),
            web.get("/messages", self.page_messages),
            web.post("/messages/resend", self.post_resend_many), web.get("/messages/export", self.get_export),
            web.get("/messages/{offset}", self.page_message),
            web.post("/messages/{offset}/resend", self.post_resend),
            web.post("/messages/{offset}/consume", self.post_consume_directly),
            web.get("/traces", self.page_traces),
            web.get("/send", self.page_send), web.post("/send", self.post_send),
            web.get("/api/rates", self.api_rates),
            web.static("/static", os.path.join(HERE, "static")),
        ])
        app.on_response_prepare.append(_security_headers)
        # a broker's shutdown waits at most this long for a page still being answered
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        assert self._runner.server is not None  # set up above
        try:
            # aiohttp's own site would serve unguarded connections: the budget's handlers instead
            self._server = await loop.create_server(guard.protocol_factory(self.budget, self._runner.server),
                                                    self.host or None, self.port, reuse_address=True)
        except OSError:
            await self._runner.cleanup()
            self._runner = None
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        self.history.sample(self.clock())
        self._sample_queues(self.clock())
        self._sampler = loop.create_task(self._sample_every())
        acl_on = self.src.acl() is not None
        log.info("dashboard on http://%s:%d/%s", _url_host(self.host), self.port,
                 " (admin accounts of the ACL only)" if acl_on else "")
        if not acl_on and not guard.is_loopback(self.host):
            log.warning("dashboard: http://%s:%d/ is reachable from other hosts and aclEnable is off: anyone who "
                        "reaches it can read messages and delete topics. Bind it to loopback (listenHost=127.0.0.1) "
                        "or turn the ACL on (docs/dashboard.md)", _url_host(self.host), self.port)
        return self.port

    async def shutdown(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _sample_every(self) -> None:
        while True:
            await asyncio.sleep(self.sample_interval_ms / 1000)
            now = self.clock()
            self.history.sample(now)
            self._sample_queues(now)
            await self._sample_groups(now)

    def _sample_queues(self, now_ms: int) -> None:
        """Each topic's queue offsets (the topic page's per-queue charts)."""
        names = sorted(self.src.topics.table.names())[:MAX_TOPICS]
        for topic in names:
            self.queue_history.add(topic, now_ms, queries.queue_offsets(self.src, topic))
        self.queue_history.retain(set(names))

    async def _sample_groups(self, now_ms: int) -> None:
        """Each group's consume stats as GET_CONSUME_STATS answers them (the broker's processor):
        the figures of the group page's charts."""
        known = set()
        for group in queries.group_names(self.src)[:MAX_GROUPS]:
            if not self.src.offsets.topics_of(group):
                continue
            try:
                stats = await admin_calls.consume_stats(self.src, group, "127.0.0.1:0")
            except (MQError, NotImplementedError):
                continue  # a group the request refuses, or a source without processors (in-process tests)
            known.add(group)
            self.group_history.add(group, now_ms, *stats)
        self.group_history.retain(known)

    # --- every request --------------------------------------------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        proto = request.protocol
        if isinstance(proto, guard.GuardedHandler):
            proto.request_started()
        try:
            return await asyncio.wait_for(self._serve(request, handler), self.request_timeout_s)
        except asyncio.TimeoutError:
            self.budget.note("a request did not finish in %.0f s (%s %s)", self.request_timeout_s,
                             request.method, request.path[:80])
            slow = web.Response(status=408, text="408: the request took too long\n")
            slow.force_close()  # what is left of its body is not read
            return slow
        finally:
            if isinstance(proto, guard.GuardedHandler):
                proto.request_done()

    async def _serve(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.hosts.allows(request.headers.get("Host")):
            # DNS rebinding: another site's name pointed at this address
            self.budget.note("refused a request for host %r (not a name of this dashboard; dashboardAllowedHosts "
                             "adds names)", (request.headers.get("Host") or "")[:80])
            return web.Response(status=421, text="421: this dashboard is not served under that host name "
                                "(dashboardAllowedHosts lists the names it answers to)\n")
        if len(request.raw_path) > guard.MAX_PATH_CHARS:
            return web.Response(status=400, text="400: the request's path is too long\n")
        outcome, who = check_basic(self.src.acl(), request.headers.get("Authorization"))
        if outcome in (AuthResult.MISSING, AuthResult.REFUSED):
            if outcome is AuthResult.REFUSED:
                log.warning("dashboard: refused %s from %s (not an admin account of the ACL, or a wrong secret)",
                            who or "a request", request.remote)
            return web.Response(status=401, text="401: the dashboard needs an admin account of the broker's ACL "
                                "(accessKey as user name, secretKey as password)\n",
                                headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})
        if request.method == "POST":
            origin = request.headers.get("Origin") or request.headers.get("Referer")
            if not origin or urlsplit(origin).netloc != request.host:
                return web.Response(status=403, text="403: changes are accepted from the dashboard's own pages only\n")
        try:
            return await handler(request)
        except actions.ActionError as e:
            return self._render("error.html", request, status=400, message=str(e))
        except web.HTTPException:
            raise
        except MQError as e:
            log.warning("dashboard: %s %s failed: %s", request.method, request.path, e)
            return self._render("error.html", request, status=500, message=str(e))
        except Exception:  # noqa: BLE001 - a bug in a page must not take the broker down
            log.exception("dashboard: %s %s failed", request.method, request.path)
            return self._render("error.html", request, status=500, message="the page failed; see broker.log")

    def _render(self, template: str, request: web.Request, status: int = 200, **ctx: Any) -> web.Response:
        html = self.env.get_template(template).render(
            nav=template.split(".")[0].rstrip("s"), broker=self.src.broker_name, cluster=self.src.cluster_name,
            notice=request.query.get("notice", ""), **ctx)
        return web.Response(text=html, content_type="text/html", status=status)

    @staticmethod
    def _redirect(path: str, notice: str = "") -> web.HTTPSeeOther:
        return web.HTTPSeeOther(path + (f"?notice={quote(notice)}" if notice else ""))

    # --- broker ------------------------------------------------------------------------------------------------
    async def page_broker(self, request: web.Request) -> web.Response:
        return self._render("broker.html", request, o=queries.broker_overview(self.src),
                            interval_s=self.sample_interval_ms / 1000)

    async def api_rates(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic") or None
        series: dict[str, Any] = {**self.history.series(topic), "interval_s": self.sample_interval_ms / 1000}
        return web.json_response(series)

    # --- topics ------------------------------------------------------------------------------------------------
    async def page_topics(self, request: web.Request) -> web.Response:
        show = request.query.get("show", "normal")
        rows = queries.topic_list(self.src, self.history.latest_rates())
        if show != "all":
            rows = [r for r in rows if r["kind"] == "normal"]
        return self._render("topics.html", request, topics=rows, show=show)

    async def post_topic(self, request: web.Request) -> web.Response:
        form = await request.post()
        perm = (PERM_READ if form.get("read_perm") else 0) | (PERM_WRITE if form.get("write_perm") else 0)
        tc = actions.create_topic(self.src, str(form.get("name", "")), _int_field(form, "read_queues", 8),
                                  _int_field(form, "write_queues", 8), perm)
        raise self._redirect(f"/topics/{quote(tc.topic_name, safe='')}", f"topic {tc.topic_name} created")

    async def page_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        t = queries.topic_detail(self.src, name)
        if t is None:
            return self._render("error.html", request, status=404, message=f"no topic {name!r} on this broker")
        h = self.queue_history.series(t["name"])
        lines = h["max"]
        assert isinstance(lines, dict)
        sparks = {q: sparkline(v, label=f"max offset of queue {q}") for q, v in lines.items()}
        chart = line_chart(h["t"], h["messages"], label="messages kept", chart_id="kept-chart")  # type: ignore[arg-type]
        top = max((q["max"] - q["min"] for q in t["queues"]), default=0)
        return self._render("topic.html", request, t=t, interval_s=self.sample_interval_ms / 1000,
                            sparks=sparks, kept_chart=chart, top_kept=top)

    async def post_delete_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        actions.delete_topic(self.src, name)
        raise self._redirect("/topics", f"topic {name} deleted")

    async def post_update_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        form = await request.post()
        perm = (PERM_READ if form.get("read_perm") else 0) | (PERM_WRITE if form.get("write_perm") else 0)
        await admin_calls.update_topic(self.src, name, _int_field(form, "read_queues", 0),
                                       _int_field(form, "write_queues", 0), perm, _remote(request))
        log.info("dashboard: topic %s updated by %s", name, _remote(request))
        raise self._redirect(f"/topics/{quote(name, safe='')}", f"topic {name} updated")

    # --- groups ------------------------------------------------------------------------------------------------
    async def page_groups(self, request: web.Request) -> web.Response:
        return self._render("groups.html", request, groups=queries.group_list(self.src))

    async def page_group(self, request: web.Request) -> web.Response:
        g = queries.group_detail(self.src, request.match_info["name"])
        top = max((r["lag"] for r in g["lag"]), default=0)
        h = self.group_history.series(g["name"])
        queue_lines = h["queues"]
        assert isinstance(queue_lines, dict)
        sparks = {k: sparkline(v, label=f"lag of {k[0]} queue {k[1]}") for k, v in queue_lines.items()}
        charts = {"tps": line_chart(h["t"], h["tps"], label="consume TPS", chart_id="tps-chart"),  # type: ignore[arg-type]
                  "lag": line_chart(h["t"], h["lag"], label="lag", chart_id="lag-chart")}  # type: ignore[arg-type]
        return self._render("group.html", request, g=g, top_lag=top, now_ms=self.clock(),
                            config=admin_calls.group_config(self.src, g["name"]), charts=charts, sparks=sparks,
                            interval_s=self.sample_interval_ms / 1000)

    async def post_create_group(self, request: web.Request) -> web.Response:
        form = await request.post()
        name = _text_field(form, "name")
        await admin_calls.update_group(self.src, name, admin_calls.group_form(form, None), _remote(request))
        log.info("dashboard: subscription group %s created by %s", name, _remote(request))
        raise self._redirect(f"/groups/{quote(name, safe='')}", f"group {name} created")

    async def post_group_config(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        form = await request.post()
        base = admin_calls.group_config(self.src, name)
        await admin_calls.update_group(self.src, name, admin_calls.group_form(form, base), _remote(request))
        log.info("dashboard: subscription group %s updated by %s", name, _remote(request))
        raise self._redirect(f"/groups/{quote(name, safe='')}", f"group {name} updated")

    async def post_delete_group(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        form = await request.post()
        await admin_calls.delete_group(self.src, name, bool(form.get("remove_offsets")), _remote(request))
        raise self._redirect("/groups", f"group {name} deleted")

    async def page_running_info(self, request: web.Request) -> web.Response:
        group = request.match_info["name"]
        client_id = _text_field(request.query, "client_id")
        if not client_id:
            raise actions.ActionError("which consumer? client_id names one of the group's members")
        info = await admin_calls.consumer_running_info(self.src, group, client_id, _remote(request))
        props = sorted((str(k), str(v)) for k, v in (info.get("properties") or {}).items())
        subs = [s for s in info.get("subscriptionSet") or [] if isinstance(s, dict)]
        status = sorted((str(t), v) for t, v in (info.get("statusTable") or {}).items() if isinstance(v, dict))
        return self._render("running.html", request, group=group, client_id=client_id, props=props, subs=subs,
                            queues=admin_calls.mq_rows(info), rt_tps=status,
                            raw=json.dumps(admin_calls.jsonable(info), indent=2, sort_keys=True, default=str))

    async def post_reset(self, request: web.Request) -> web.Response:
        group = request.match_info["name"]
        form = await request.post()
        ts = parse_time(str(form.get("time", "")), -1)
        text = await actions.reset_offset(self.src, group, str(form.get("topic", "")), ts)
        raise self._redirect(f"/groups/{quote(group, safe='')}", text)

    # --- clients -----------------------------------------------------------------------------------------------
    async def page_clients(self, request: web.Request) -> web.Response:
        return self._render("clients.html", request, clients=queries.client_list(self.src))

    async def page_producers(self, request: web.Request) -> web.Response:
        group = _text_field(request.query, "group")
        conns = await admin_calls.producer_connections(self.src, group, _remote(request)) if group else None
        return self._render("producers.html", request, groups=sorted(self.src.clients.producers), group=group,
                            conns=conns, version_name=queries.version_name)

    # --- traces and test messages ---------------------------------------------------------------------------
    async def page_traces(self, request: web.Request) -> web.Response:
        msg_id = _text_field(request.query, "msg_id", 128)
        topic = _text_field(request.query, "topic", 255) or TRACE_TOPIC
        try:
            validate_topic(topic)
        except MQError as e:
            raise actions.ActionError(str(e)) from None
        t = messages.traces(self.src, msg_id, topic) if msg_id else None
        return self._render("traces.html", request, t=t, msg_id=msg_id, topic=topic)

    async def page_send(self, request: web.Request) -> web.Response:
        topics = sorted(n for n in self.src.topics.table.names() if queries.topic_kind(n, self.src) == "normal")
        return self._render("send.html", request, topics=topics, result=None,
                            topic=_text_field(request.query, "topic"), tags="", keys="", body="")

    async def post_send(self, request: web.Request) -> web.Response:
        form = await request.post()
        topic, tags, keys = _text_field(form, "topic"), _text_field(form, "tags"), _text_field(form, "keys", 1024)
        body = str(form.get("body", "") or "")
        result = await admin_calls.send_test_message(self.src, topic, tags, keys, body, _remote(request),
                                                     self.clock())
        log.info("dashboard: test message %s sent to %s by %s", result["msg_id"], topic, _remote(request))
        topics = sorted(n for n in self.src.topics.table.names() if queries.topic_kind(n, self.src) == "normal")
        return self._render("send.html", request, topics=topics, result=result, topic=topic, tags=tags, keys=keys,
                            body=body)

    # --- messages ----------------------------------------------------------------------------------------------
    async def page_messages(self, request: web.Request) -> web.Response:
        q = request.query
        topic, key, msg_id = q.get("topic", "").strip(), q.get("key", "").strip(), q.get("msg_id", "").strip()
        now = self.clock()
        begin = parse_time(q.get("begin"), now - 3600_000)
        end = parse_time(q.get("end"), now + 60_000)
        found: list[MessageExt] = []
        searched = ""
        try:
            page = int(q.get("page", "0"))
        except ValueError:
            raise actions.ActionError(f"page {q.get('page', '')[:16]!r} is not a number") from None
        if not 0 <= page <= messages.MAX_PAGE:
            raise actions.ActionError(f"page {page} is outside 0..{messages.MAX_PAGE}")
        more = False
        if msg_id:
            found, searched = messages.by_id(self.src, msg_id, topic or None), f"message id {msg_id}"
        elif key and not topic:
            raise actions.ActionError("a search by key needs the topic (the index is kept per topic)")
        elif topic and key:
            found, searched = messages.by_key(self.src, topic, key), f"key {key} in {topic}"
        elif topic:
            (found, more), searched = messages.by_time_page(self.src, topic, begin, end, page), \
                f"{topic} from {_fmt_ts(begin) if begin > 0 else 'the first message'} to {_fmt_ts(end)} UTC"
        topics = sorted(n for n in self.src.topics.table.names())
        return self._render("messages.html", request, found=[messages.summary(m) for m in found],
                            searched=searched, topic=topic, key=key, msg_id=msg_id, topics=topics,
                            begin=_iso(begin), end=_iso(end), limit=messages.MAX_RESULTS,
                            page=page, more=more, begin_ms=begin, end_ms=end, back=request.path_qs,
                            dlq=any(messages.is_dead_letter(m) for m in found))

    def _message_at(self, request: web.Request) -> MessageExt:
        try:
            phy = int(request.match_info["offset"])
        except ValueError:
            raise actions.ActionError("a message is named by its commitlog offset") from None
        m = messages.at_offset(self.src, phy)
        if m is None:
            raise actions.ActionError(f"no message at commitlog offset {phy} (deleted by cleanup?)")
        return m

    async def page_message(self, request: web.Request) -> web.Response:
        m = self._message_at(request)
        trail = messages.trail(self.src, m)
        return self._render("message.html", request, m=messages.summary(m), props=sorted(m.properties.items()),
                            body=messages.body_views(bytes(m.body)), trail=trail,
                            phy=m.commitlog_offset, reconsume=m.reconsume_times, born_host=m.born_host,
                            store_host=m.store_host, is_dlq=m.topic.startswith("%DLQ%"),
                            consumers=queries.consumers_of(self.src, trail["origin_topic"]))

    async def post_resend(self, request: web.Request) -> web.Response:
        m = self._message_at(request)
        copy = await actions.resend_dlq(self.src, m)
        raise self._redirect(f"/messages/{copy.commitlog_offset}", f"resent to {copy.topic}")

    def _selected(self, values: list[str]) -> list[MessageExt]:
        """The messages named by a list of commitlog offsets (a batch's checkboxes)."""
        if not values:
            raise actions.ActionError("no message selected")
        if len(values) > messages.MAX_RESULTS:
            raise actions.ActionError(f"at most {messages.MAX_RESULTS} messages at once")
        out = []
        for v in dict.fromkeys(values):
            if not v.isdigit() or len(v) > 19:
                raise actions.ActionError(f"{v[:24]!r} is not a commitlog offset")
            m = messages.at_offset(self.src, int(v))
            if m is None:
                raise actions.ActionError(f"no message at commitlog offset {v} (deleted by cleanup?)")
            out.append(m)
        return out

    async def post_resend_many(self, request: web.Request) -> web.Response:
        form = await request.post()
        chosen = self._selected([str(v) for v in form.getall("offset", [])])
        bad = [m.offset_msg_id for m in chosen if not messages.is_dead_letter(m)]
        if bad:  # all or none: a half-done batch would leave the operator guessing
            raise actions.ActionError(f"not in a dead-letter queue: {', '.join(bad)}")
        copies = [await actions.resend_dlq(self.src, m) for m in chosen]
        # back to the search the batch was chosen on (only a search of this dashboard's)
        back = _text_field(form, "back", 1024)
        where = back if back.startswith("/messages?") and "notice=" not in back else "/messages?"
        text = f"{len(copies)} dead letter(s) resent to {', '.join(sorted({c.topic for c in copies}))}"
        raise web.HTTPSeeOther(f"{where}&notice={quote(text)}")

    async def get_export(self, request: web.Request) -> web.Response:
        chosen = self._selected(list(request.query.getall("offset", [])))
        rows = [messages.export(m) for m in chosen]
        name = "dead-letters.json" if all(messages.is_dead_letter(m) for m in chosen) else "messages.json"
        return web.Response(body=json.dumps(rows, indent=2, ensure_ascii=False).encode(), content_type="application/json",
                            headers={"Content-Disposition": f'attachment; filename="{name}"'})

    async def post_consume_directly(self, request: web.Request) -> web.Response:
        m = self._message_at(request)
        form = await request.post()
        # "group clientId": a group name has no space (its characters are [%|a-zA-Z0-9_-])
        group, _, client_id = _text_field(form, "consumer", 600).partition(" ")
        if not group or not client_id:
            raise actions.ActionError("consuming directly needs the group and one of its consumers (client_id)")
        result = await admin_calls.consume_directly(self.src, group, client_id, m.offset_msg_id, _remote(request))
        log.info("dashboard: %s consumed directly by %s of %s: %s", m.offset_msg_id, client_id, group,
                 result.get("consumeResult"))
        return self._render("consumed.html", request, m=messages.summary(m), group=group, client_id=client_id,
                            result=result)


def _remote(request: web.Request) -> str:
    """The browser's address as a connection's ``host:port`` (what a processor logs, and a test
    message's born host)."""
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return format_sockaddr(peer) if peer else "127.0.0.1:0"


def _text_field(data: Mapping[str, Any], name: str, limit: int = 255) -> str:
    value = str(data.get(name, "") or "").strip()
    if len(value) > limit:
        raise actions.ActionError(f"{name} is longer than {limit} characters")
    return value


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M")


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return f"{host or '0.0.0.0'} (every address)" if host != "::" else "[::] (every address)"
    return f"[{host}]" if ":" in host else host


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(guard.SECURITY_HEADERS)
