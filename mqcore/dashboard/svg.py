"""Charts drawn on the server as inline SVG (no script, no chart library): a group's consume
TPS and lag over time, and one small line per queue. The numbers are the samples given; the
drawing only scales them. Text in a chart is escaped (it is markup once inserted)."""
from __future__ import annotations

import datetime
from collections.abc import Sequence

from markupsafe import Markup, escape


def _fmt(v: float) -> str:
    if v >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def line_chart(t: Sequence[float], ys: Sequence[float], *, width: int = 420, height: int = 140,
               label: str = "", chart_id: str = "") -> Markup:
    """A line of ``ys`` over ``t`` (epoch seconds), y from 0; the last value and the range's
    ends written on it. ``data-last`` carries the newest value as given (tests read it)."""
    if len(t) < 2:
        return Markup('<p class="empty"{}>Collecting samples: the chart starts with the second.</p>').format(
            Markup(f' id="{escape(chart_id)}"') if chart_id else "")
    left, right, top, bottom = 44, 8, 10, 22
    w, h = width - left - right, height - top - bottom
    t0, t1 = t[0], t[-1]
    hi = max(max(ys), 1e-9)
    span = (t1 - t0) or 1.0
    pts = " ".join(f"{left + (x - t0) / span * w:.1f},{top + h - (y / hi) * h:.1f}" for x, y in zip(t, ys))
    hms = [datetime.datetime.fromtimestamp(x, datetime.timezone.utc).strftime("%H:%M:%S") for x in (t0, t1)]
    ident = Markup(f' id="{escape(chart_id)}"') if chart_id else Markup("")
    return Markup(
        '<svg class="line" role="img"{ident} viewBox="0 0 {W} {H}" '
        'data-last="{last}" data-points="{n}"><title>{label}</title>'
        '<line x1="{l}" y1="{b}" x2="{r}" y2="{b}" class="axis"/>'
        '<line x1="{l}" y1="{tp}" x2="{l}" y2="{b}" class="axis"/>'
        '<text x="{tl}" y="{ty}" class="tick" text-anchor="end">{hi}</text>'
        '<text x="{tl}" y="{b}" class="tick" text-anchor="end">0</text>'
        '<text x="{l}" y="{H1}" class="tick">{h0}</text>'
        '<text x="{r}" y="{H1}" class="tick" text-anchor="end">{h1} UTC</text>'
        '<polyline points="{pts}" class="series"/></svg>').format(
        ident=ident, W=width, H=height, last=_fmt(ys[-1]), n=len(ys), label=label, l=left, r=left + w,
        b=top + h, tp=top, tl=left - 4, ty=top + 8, hi=_fmt(hi), H1=height - 6, h0=hms[0], h1=hms[1], pts=pts)


def sparkline(ys: Sequence[float], *, width: int = 120, height: int = 22, label: str = "") -> Markup:
    """A small line of ``ys`` (one per sample), y from 0, for a table cell."""
    if len(ys) < 2:
        return Markup("")
    hi = max(max(ys), 1e-9)
    step = (width - 2) / (len(ys) - 1)
    pts = " ".join(f"{1 + i * step:.1f},{height - 1 - (y / hi) * (height - 2):.1f}" for i, y in enumerate(ys))
    return Markup('<svg class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" data-last="{last}" '
                  'data-points="{n}"><title>{label}</title><polyline points="{pts}" class="series"/></svg>').format(
        w=width, h=height, last=_fmt(ys[-1]), n=len(ys), label=label, pts=pts)
