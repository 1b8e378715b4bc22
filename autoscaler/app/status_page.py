"""The page for on-call at ``/``: first one compact row per runner type (queued, oldest
wait, runners, pools, the top cause, the last hour's queue as a spark line), then the
firing alerts (how long, Reason in words, Cause, runbook and dashboard), then per runner
type the causes in full, recent decisions and the age of the picture. At 1400x1000 the
rows and the alerts of eight runner types fit above the fold.

HTML for a browser (no JavaScript at all: it refreshes itself with a meta refresh every
poll interval, at least every 5 s, and reads on a phone: one column of cards, wide tables
scroll sideways);
plain text at ``/?format=text``, for ``Accept: text/plain`` and for clients that do not ask
for HTML (curl); the ``explain`` JSON of the last tick at ``/?format=json``.

Runner type names, labels and AWS messages come from the config, GitHub and AWS: every
dynamic string is escaped, and the page is served with a Content-Security-Policy that
allows no script at all, so a hostile label can neither run nor load anything.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from autoscaler.app.explain import TypeReport, explain_json, format_type, format_waits, reports
from autoscaler.app.report import format_table
from autoscaler.controller import Controller, TickResult
from autoscaler.domain import STAGES
from autoscaler.scale.causes import UNMATCHED, WORDS, fmt_age

#: Seconds between the page's own reloads at least (a 1 s tick would hammer a phone).
MIN_REFRESH = 5
#: Recent decisions shown (the controller keeps more).
DECISIONS_SHOWN = 10
#: No script, no external anything: styles inline only.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_SEVERITY = {
    "demand_met": "ok",
    "booting": "warn",
    "runners_offline": "warn",
    "dry_run": "warn",
    "scaling_disabled": "warn",
}  # everything else is "bad": it keeps jobs waiting until someone acts


@dataclass(frozen=True)
class Page:
    body: bytes
    content_type: str
    headers: Mapping[str, str] = field(default_factory=dict)


def wants(target: str, accept: str) -> str:
    """``html``, ``text`` or ``json`` for a request to ``target`` with this Accept header."""
    fmt = parse_qs(urlsplit(target).query).get("format", [""])[0].lower()
    if fmt in ("html", "text", "json"):
        return fmt
    if "text/html" in accept.lower():
        return "html"
    return "text"


def respond(controller: Controller, now: datetime, target: str, accept: str) -> Page:
    """The page for ``GET target`` (path and query) as the controller stands at ``now``."""
    kind = wants(target, accept)
    result = controller.last_result
    if kind == "json":
        types = reports(result, controller.config) if result is not None else []
        body = json.dumps(explain_json(types), indent=2) + "\n"
        return Page(body.encode(), "application/json")
    if kind == "text":
        return Page(render_text(controller, now).encode(), "text/plain; charset=utf-8")
    return Page(
        render_html(controller, now).encode(),
        "text/html; charset=utf-8",
        {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"},
    )


def _poll_age(controller: Controller, now: datetime) -> str:
    last = controller.last_successful_poll
    if last is None:
        return "no successful poll yet"
    return f"last successful poll {fmt_age((now - last).total_seconds())} ago"


def _firing(result: TickResult | None) -> list[Any]:
    return [a for a in (result.alerts if result else ()) if getattr(a, "state", "") == "firing"]


def render_text(controller: Controller, now: datetime) -> str:
    """The plain-text page: the tick's table, then why jobs wait and what is firing."""
    result = controller.last_result
    if result is None:
        return "no tick yet\n"
    out = [format_table(result).rstrip("\n"), "", _poll_age(controller, now)]
    waiting = [t for t in reports(result, controller.config) if t.queue_size]
    if waiting:
        out += ["", "WHY JOBS WAIT"]
        for t in waiting:
            out += format_type(t, now, decisions=False)
    if result.waits:
        out += ["", *format_waits(list(result.waits.values()))]
    for alert in _firing(result):
        out += ["", f"FIRING {alert.title}", f"  Reason: {alert.reason}"]
        if alert.cause is not None:
            out.append(f"  Cause: {alert.cause}")
    return "\n".join(out) + "\n"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


_STYLE = """
*{box-sizing:border-box}
body{margin:0;font:15px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
 color:#1b1f24;background:#f3f4f6}
header{background:#1f3a5f;color:#fff;padding:12px 16px}
header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;font-size:13px;opacity:.9}
main{max-width:1380px;margin:0 auto;padding:8px}
table.overview{background:#fff;border-radius:8px;box-shadow:0 1px 2px rgba(0,0,0,.12)}
table.overview td,table.overview th{padding:3px 6px}
table.overview tr.bad td:first-child{border-left:5px solid #c62828}
table.overview tr.warn td:first-child{border-left:5px solid #ef8f00}
table.overview tr.ok td:first-child{border-left:5px solid #2e7d32}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.spark{font-family:ui-monospace,monospace;letter-spacing:-1px;color:#1f3a5f}
td.cause{white-space:normal;max-width:360px}
.alert h3{font-size:15px}.alert .meta{font:13px system-ui,sans-serif;color:#374151}
section{margin:12px 0}
h2{font-size:16px;margin:8px 4px;color:#374151}
.card{background:#fff;border-radius:8px;padding:12px;margin:8px 0;
 box-shadow:0 1px 2px rgba(0,0,0,.12);border-left:6px solid #9ca3af}
.card.bad{border-left-color:#c62828}.card.warn{border-left-color:#ef8f00}
.card.ok{border-left-color:#2e7d32}
.card h3{margin:0 0 6px;font-size:16px;word-break:break-all}
.stats{display:flex;flex-wrap:wrap;gap:4px 10px;margin:0 0 8px}
.stats div{min-width:56px}.stats dt{font-size:12px;color:#6b7280}
.stats dd{margin:0;font-size:18px;font-weight:600}
ul.causes{list-style:none;margin:6px 0;padding:0}
ul.causes li{margin:4px 0;padding:6px 8px;border-radius:6px;background:#fdecea}
ul.causes li.warn{background:#fff4e0}ul.causes li.ok{background:#e8f5e9}
ul.causes strong{display:block}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#eef0f3;
 padding:1px 4px;border-radius:4px}
.detail{display:block;font-size:13px;color:#374151;word-break:break-word}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 6px;border-bottom:1px solid #e5e7eb;white-space:nowrap}
td.reason{white-space:normal;min-width:220px}
.alert p{margin:4px 0;font:13px ui-monospace,SFMono-Regular,Menlo,monospace;
 word-break:break-word}
.quiet{color:#6b7280}
footer{font-size:12px;color:#6b7280;padding:8px 12px 24px;text-align:center}
"""


def _severity(t: TypeReport) -> str:
    if not t.causes:
        return "ok" if not t.queue_size else "warn"
    levels = {_SEVERITY.get(c.code, "bad") for c in t.causes}
    return "bad" if "bad" in levels else "warn" if "warn" in levels else "ok"


def _card(t: TypeReport, now: datetime) -> str:
    stats = [("queued", t.queue_size), ("oldest", fmt_age(t.max_queue_time_seconds))]
    if t.name != UNMATCHED:
        stats += [
            ("idle", t.runners.idle),
            ("busy", t.runners.busy),
            ("offline", t.runners.offline),
        ]
    parts = [
        f'<article class="card rt {_severity(t)}" data-runner-type="{_e(t.name)}">',
        f"<h3>{_e(t.name)}</h3>",
        '<dl class="stats">'
        + "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in stats)
        + "</dl>",
    ]
    if t.causes:
        parts.append('<ul class="causes">')
        for c in t.causes:
            words = WORDS.get(c.code, c.code)
            parts.append(
                f'<li class="{_SEVERITY.get(c.code, "bad")}" data-code="{_e(c.code)}">'
                f"<strong>{_e(words)}</strong> <code>{_e(c.code)}</code>"
                f'<span class="detail">{_e(c.detail)}</span></li>'
            )
        parts.append("</ul>")
    elif t.queue_size:
        parts.append('<p class="quiet">No cause found.</p>')
    if t.pools:
        parts.append(_pools_table(t, now))
    if t.budgets:
        parts.append(
            "<p>"
            + ", ".join(f"budget {_e(b)}: {used}/{limit}" for b, used, limit in t.budgets)
            + "</p>"
        )
    parts.append("</article>")
    return "".join(parts)


#: Spark line glyphs, lowest to highest; "·" marks a stretch with no poll.
SPARKS = "▁▂▃▄▅▆▇█"
SPARK_BUCKETS = 24
SPARK_SECONDS = 3600.0


def spark(history: Iterable[tuple[datetime, Mapping[str, int]]], name: str, now: datetime) -> str:
    """The last hour's queue of one runner type, in :data:`SPARK_BUCKETS` glyphs (each the
    largest queue in its stretch, scaled to the hour's largest)."""
    buckets: list[int | None] = [None] * SPARK_BUCKETS
    width = SPARK_SECONDS / SPARK_BUCKETS
    for at, sizes in history:
        age = (now - at).total_seconds()
        if 0 <= age < SPARK_SECONDS and name in sizes:
            i = SPARK_BUCKETS - 1 - int(age // width)
            buckets[i] = max(buckets[i] or 0, sizes[name])
    top = max((b for b in buckets if b is not None), default=0)
    return "".join(
        "·"
        if b is None
        else SPARKS[0]
        if top == 0
        else SPARKS[min(len(SPARKS) - 1, b * (len(SPARKS) - 1) // top)]
        for b in buckets
    )


def _overview(types: Sequence[TypeReport], controller: Controller, now: datetime) -> str:
    """One row per runner type, the first thing on the page."""
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "runner type",
            "queued",
            "oldest",
            "idle/busy/offline",
            "pools: desired/in service/max",
            "top cause",
            "queue, last hour",
        )
    )
    rows = []
    for t in types:
        runners = (
            "-" if t.name == UNMATCHED else f"{t.runners.idle}/{t.runners.busy}/{t.runners.offline}"
        )
        pools = ", ".join(
            f"{p.name} {_dash(p.desired)}/{_dash(p.in_service)}/{_dash(p.max_size)}"
            for p in t.pools
        )
        top = t.causes[0] if t.causes else None
        cause = (
            "-"
            if top is None
            else f"{_e(WORDS.get(top.code, top.code))} <code>{_e(top.code)}</code>"
        )
        line = spark(controller.queue_history, t.name, now)
        rows.append(
            f'<tr class="{_severity(t)}" data-row="{_e(t.name)}">'
            f"<td>{_e(t.name)}</td>"
            f'<td class="num queued">{t.queue_size}</td>'
            f'<td class="num">{_e(fmt_age(t.max_queue_time_seconds))}</td>'
            f'<td class="num">{_e(runners)}</td>'
            f"<td>{_e(pools or '-')}</td>"
            f'<td class="cause">{cause}</td>'
            f'<td class="spark" title="largest queue per {int(SPARK_SECONDS / SPARK_BUCKETS / 60)}'
            f' minutes, the last hour">{_e(line)}</td></tr>'
        )
    return (
        f'<div class="scroll"><table class="overview"><tr>{head}</tr>{"".join(rows)}</table></div>'
    )


def _pools_table(t: TypeReport, now: datetime) -> str:
    rows = []
    for p in t.pools:
        backoff = "-"
        if p.backoff_until is not None:
            backoff = f"{fmt_age((p.backoff_until - now).total_seconds())} left"
        cells = [
            p.name,
            _dash(p.desired),
            _dash(p.in_service),
            _dash(p.pending),
            _dash(p.max_size),
            backoff,
            "-" if p.warm is None else p.warm.text(),
        ]
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("pool", "desired", "in service", "pending", "MaxSize", "back-off", "warm pool")
    )
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(rows)}</table></div>'


def _waits(result: TickResult) -> str:
    """Per runner type, each stage's median and p95 over its recent jobs."""
    if not result.waits:
        return '<p class="quiet">No job has started on a runner this controller asked for.</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in ("runner type", "jobs", *STAGES, "queue time"))
    rows = []
    for w in result.waits.values():
        cells = [w.runner_type, str(w.jobs)]
        cells += [f"{fmt_age(w.p50[s])} / {fmt_age(w.p95[s])}" for s in STAGES]
        cells.append(f"{fmt_age(w.queue_p50)} / {fmt_age(w.queue_p95)}")
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return (
        '<div class="scroll"><table><caption class="quiet">median / p95</caption>'
        f"<tr>{head}</tr>{''.join(rows)}</table></div>"
    )


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


#: Reason keys' unit suffixes, as the page writes the unit after the number.
_UNITS = (("_mins", "m"), ("_seconds", "s"), ("_secs", "s"), ("_pct", "%"))


def reason_words(values: Mapping[str, int]) -> str:
    """The Reason line for a person: numbers by name, and the 0/1 flags as the checks that
    tripped (``queue_size_threshold=1`` reads as a threshold of 1; it means "the queue
    size check tripped")."""
    numbers, tripped = [], []
    for key, value in values.items():
        if key == "threshold_breached":
            continue
        if key.endswith("_threshold") and value in (0, 1):
            if value:
                tripped.append(key.removesuffix("_threshold").replace("_", " "))
            continue
        name, unit = key, ""
        for suffix, short in _UNITS:
            if key.endswith(suffix):
                name, unit = key.removesuffix(suffix), short
                break
        numbers.append(f"{name.replace('_', ' ')} {value}{unit}")
    text = ", ".join(numbers)
    checks = "; tripped: " + ", ".join(tripped) if tripped else ""
    return text + checks


def _link(url: str, label: str) -> str:
    if not url:
        return f'<span class="quiet">no {label}</span>'
    return f'<a class="{label}" href="{_e(url)}">{label}</a>'


def _alerts(alerts: Iterable[Any], now: datetime) -> str:
    cards = []
    for a in alerts:
        age = "" if a.fired_at is None else fmt_age((now - a.fired_at).total_seconds())
        meta = (
            f'<p class="meta"><span class="firing-for">firing for {_e(age or "-")}</span> · '
            f"{_link(a.runbook_url, 'runbook')} · {_link(a.dashboard_url, 'dashboard')}</p>"
        )
        lines = [meta, f'<p class="reason">Reason: {_e(reason_words(a.values))}</p>']
        if a.cause is not None:
            lines.append(f'<p class="cause-line">Cause: {_e(a.cause)}</p>')
        cards.append(
            f'<article class="card bad alert"><h3>{_e(a.title)}</h3>{"".join(lines)}</article>'
        )
    return "".join(cards) or '<p class="quiet">No alert is firing.</p>'


def _decisions(recent: Sequence[tuple[datetime, Any]]) -> str:
    if not recent:
        return '<p class="quiet">No scaling decision changed anything yet.</p>'
    rows = []
    for when, d in list(recent)[-DECISIONS_SHOWN:][::-1]:
        cells = [
            when.astimezone(UTC).strftime("%H:%M:%S"),
            getattr(d, "runner_type", ""),
            getattr(d, "pool", ""),
            getattr(d, "action", ""),
            f"{getattr(d, 'current', '')} -> {getattr(d, 'desired', '')}",
        ]
        tds = "".join(f"<td>{_e(c)}</td>" for c in cells)
        rows.append(f'<tr>{tds}<td class="reason">{_e(getattr(d, "reason", ""))}</td></tr>')
    head = "".join(
        f"<th>{h}</th>" for h in ("time", "runner type", "pool", "action", "desired", "why")
    )
    return f'<div class="scroll card"><table><tr>{head}</tr>{"".join(rows)}</table></div>'


def render_html(controller: Controller, now: datetime) -> str:
    """The HTML page (every dynamic string escaped)."""
    result = controller.last_result
    refresh = max(MIN_REFRESH, round(controller.config.poll_interval))
    head = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="refresh" content="{refresh}">'
        f"<title>ci-autoscaler</title><style>{_STYLE}</style></head><body>"
    )
    observed = ""
    if result is not None and result.snapshot is not None:
        observed = f" · observed {result.snapshot.observed_at.astimezone(UTC):%H:%M:%S} UTC"
    poll_error = ""
    if result is not None and result.poll_error:
        poll_error = f"<p>Last poll failed: {_e(result.poll_error)}</p>"
    if result is not None and result.poll_partial:
        poll_error += f"<p>Last poll partial: {_e(result.poll_partial)}</p>"
    header = (
        "<header><h1>ci-autoscaler</h1>"
        f'<p id="poll-age">{_e(_poll_age(controller, now))}{_e(observed)}'
        f" · refreshes every {refresh}s</p>{poll_error}</header>"
    )
    if result is None:
        body = '<main><p class="quiet">No tick yet.</p></main>'
    else:
        types = reports(result, controller.config)
        waiting = sorted(
            (t for t in types if t.queue_size), key=lambda t: -t.max_queue_time_seconds
        )
        quiet = [t for t in types if not t.queue_size]
        body = (
            "<main>"
            f'<section id="overview">{_overview(waiting + quiet, controller, now)}</section>'
            f'<section id="alerts"><h2>Firing alerts</h2>{_alerts(_firing(result), now)}</section>'
            '<section id="runner-types"><h2>Runner types in full</h2>'
            + "".join(_card(t, now) for t in waiting + quiet)
            + "</section>"
            f'<section id="waits"><h2>Where the waits went</h2>{_waits(result)}</section>'
            f'<section id="decisions"><h2>Recent decisions</h2>'
            f"{_decisions(controller.recent_decisions)}</section></main>"
        )
    footer = (
        '<footer><a href="/metrics">/metrics</a> · <a href="/?format=text">text</a> · '
        '<a href="/?format=json">json</a></footer></body></html>'
    )
    return head + header + body + footer
