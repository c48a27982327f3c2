"""Paging past the 64 results of a topic's time-range search: every message of the range shows
on exactly one page, in the merged (stored time, queue, offset) order, with previous/next links
only where a page lies; page numbers outside 0..MAX_PAGE are 400s. In process, on a
``DashboardServer`` over a real store (tests/dashboard/test_queries.py's ``src``)."""
from __future__ import annotations

import re

from mqcore.dashboard import actions, messages
from mqcore.permissions import PERM_READ, PERM_WRITE
from tests.dashboard.test_guard import _get, _serve
from tests.dashboard.test_queries import _put, src  # noqa: F401 - the fixture

N = 150  # three pages of 64: 64, 64, 22


def _fill(src):
    actions.create_topic(src, "Paged", 2, 2, PERM_READ | PERM_WRITE)
    # Uneven queues (100 on queue 0, 50 on queue 1) so a page mixes queues.
    return [_put(src, "Paged", f"m{i}".encode(), 0 if i % 3 else 1) for i in range(N)]


def test_pages_cover_the_range_once_in_order(src):
    _fill(src)
    seen, more, page = [], True, 0
    while more:
        found, more = messages.by_time_page(src, "Paged", 0, 1 << 62, page)
        assert len(found) == (messages.MAX_RESULTS if more else N - page * messages.MAX_RESULTS)
        seen += found
        page += 1
    assert page == 3
    keys = [(m.store_timestamp, m.queue_id, m.queue_offset) for m in seen]
    assert keys == sorted(keys) and len(set(keys)) == N
    assert sorted(bytes(m.body) for m in seen) == sorted(f"m{i}".encode() for i in range(N))
    assert messages.by_time(src, "Paged", 0, 1 << 62) == seen[:messages.MAX_RESULTS]


def test_the_page_links_walk_the_pages(src):
    _fill(src)

    async def run(server):
        port = server.port
        ids, path, pages = [], "/messages?topic=Paged&begin=0&end=4000000000000", 0
        while path:
            status, _, body = await _get(port, path)
            assert status == 200, body[:300]
            html = body.decode()
            ids += re.findall(r'data-offset-id="([0-9A-F]+)"', html)
            pages += 1
            nxt = re.search(r'id="next" href="([^"]+)"', html)
            assert ('id="prev"' in html) == (pages > 1)
            path = nxt.group(1).replace("&amp;", "&") if nxt else ""
        assert pages == 3 and len(ids) == len(set(ids)) == N
        for bad in ("-1", str(messages.MAX_PAGE + 1), "x"):
            status, _, body = await _get(port, f"/messages?topic=Paged&page={bad}")
            assert status == 400, (bad, status)
            assert b"Traceback" not in body
    _serve(src, run)
