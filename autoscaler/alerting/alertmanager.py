"""Alertmanager's v2 API, spoken as Prometheus speaks it: the pure half.

Why Alertmanager is not one more notification receiver: it keeps an alert active only
until the alert's ``endsAt``, so a sender must re-post every alert while it fires, and
say when it stopped. Prometheus does exactly that (``rules/alerting.go``, ``notifier``):
each firing alert is re-sent at least every resend delay (1m) with ``endsAt`` four times
max(resend delay, evaluation interval) ahead; a resolved one is sent with ``endsAt`` = the
time it resolved, and re-sent for 15 minutes in case a post was lost. If the sender dies,
Alertmanager expires its alerts at ``endsAt`` instead of keeping a page open forever.

So ``type: alertmanager`` receivers are not served from the outbox of transitions; each
tick, :func:`batch` turns the alert states (firing, and resolved within
:data:`RESOLVED_RETENTION`) into the JSON array ``POST /api/v2/alerts`` takes (Alertmanager's
OpenAPI ``postableAlerts``), and :func:`due` says whether a target needs it now.
``alerting/alertmanager_sync.py`` does the posting, off the tick.

What Alertmanager sees of one alert:

- ``labels`` (its identity, what routes match on): ``alertname`` (the rule's name as one
  identifier, the shipped Prometheus rules' name for the same alert), ``team``,
  ``priority`` (P0..P4), ``severity`` (critical/error/warning/info, as in the shipped
  Prometheus rules) and, for an alert per runner type, ``runner_type``. Every value comes
  from the configuration: nothing unbounded (no job id, no repository, no number).
- ``annotations`` (what on-call reads): ``summary`` (the ``[P2] <rule>`` title),
  ``description``, ``reason`` (the Reason line), ``cause`` (the Cause line, when the
  on-call text carries one), ``runbook_url``, ``dashboard_url``, ``fingerprint``.
- ``startsAt`` (when it started firing), ``endsAt``, ``generatorURL`` (the dashboard).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from autoscaler.alerting import render
from autoscaler.alerting.evaluation import FLEET, Evaluation
from autoscaler.alerting.lifecycle import AlertState, AlertStatus, Notification
from autoscaler.config import ReceiverConfig

#: The receiver type served here.
ALERTMANAGER = "alertmanager"
#: Alertmanager's endpoint for posting alerts (API v2; v1 is gone since 0.27).
API_PATH = "/api/v2/alerts"
#: Prometheus's default resend delay.
DEFAULT_RESEND = 60.0
#: A resolved alert is re-posted this long (Prometheus's ``resolvedRetention``).
RESOLVED_RETENTION = 15 * 60.0
#: Prometheus keeps a firing alert valid for this many resend/evaluation intervals.
VALID_INTERVALS = 4


def api_url(url: str) -> str:
    """The ``/api/v2/alerts`` URL of one Alertmanager, from its base URL (a route prefix
    such as ``http://host/alertmanager`` kept) or the full path as given."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith(API_PATH):
        path += API_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def api_urls(rc: ReceiverConfig) -> tuple[str, ...]:
    """Every Alertmanager of a receiver (``urls``; ``url`` when built without them)."""
    urls = rc.urls or ((rc.url,) if rc.url else ())
    return tuple(api_url(u.reveal()) for u in urls)


def valid_for(resend: float, interval: float) -> float:
    """Seconds a posted firing alert stays valid: 4 x max(resend delay, tick interval)."""
    return VALID_INTERVALS * max(resend, interval)


def alert_labels(ev: Evaluation) -> dict[str, str]:
    """The alert's identity in Alertmanager; empty values are left out (Prometheus drops
    empty labels too)."""
    out = {
        "alertname": ev.alertname,
        "team": ev.team,
        "priority": ev.priority,
        "severity": render.PAGERDUTY_SEVERITY.get(ev.priority, "error"),
        "runner_type": "" if ev.scope == FLEET else ev.scope,
    }
    return {k: v for k, v in out.items() if v}


def text_line(text: str, key: str) -> str:
    """The value of the ``Key: value`` line of the on-call text, or ``""``."""
    prefix = f"{key}: "
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :]
    return ""


def alert_annotations(n: Notification) -> dict[str, str]:
    """What on-call reads. ``cause`` is the on-call text's ``Cause:`` line: it appears here
    whenever an evaluation carries causes (it follows ``Reason:`` in the on-call text);
    nothing is made up otherwise."""
    ev = n.evaluation
    out = {
        "summary": render.title(ev),
        "description": ev.description,
        "reason": ev.reason,
        "cause": text_line(render.text(n), "Cause"),
        "runbook_url": ev.runbook_url,
        "dashboard_url": ev.dashboard_url,
        "fingerprint": ev.fingerprint,
    }
    return {k: v for k, v in out.items() if v}


def postable(n: Notification, ends_at: datetime) -> dict[str, Any]:
    """One ``postableAlert``."""
    alert: dict[str, Any] = {
        "labels": alert_labels(n.evaluation),
        "annotations": alert_annotations(n),
        "startsAt": render.iso_time(n.started_at),
        "endsAt": render.iso_time(ends_at),
    }
    if n.evaluation.dashboard_url:
        alert["generatorURL"] = n.evaluation.dashboard_url
    return alert


def notification_alert(n: Notification, valid: float) -> dict[str, Any]:
    """One notification as a one-off post (``alerts test``): FIRING valid for ``valid``
    seconds from when it was decided, RESOLVED ending when it resolved."""
    if n.ended_at is not None:
        return postable(n, n.ended_at)
    return postable(n, n.created_at + timedelta(seconds=valid))


@dataclass(frozen=True)
class Batch:
    """What one receiver's Alertmanagers must hold now."""

    alerts: tuple[dict[str, Any], ...]
    keys: frozenset[tuple[str, str]]
    """(fingerprint, ``firing``/``resolved``) of each alert: a key not yet acknowledged by
    a target makes the batch due there at once."""


def _notification(state: AlertState, now: datetime) -> Notification:
    started = state.fired_at or state.since
    if state.status is AlertStatus.RESOLVED:
        return Notification("RESOLVED", state.evaluation, started, now, ended_at=state.since)
    return Notification("FIRING", state.evaluation, started, now)


def batch(states: Iterable[AlertState], receiver: str, now: datetime, valid: float) -> Batch:
    """The postable alerts for ``receiver``: each FIRING state valid ``valid`` seconds
    from ``now``, each RESOLVED one ending when it resolved; pending ones are not sent
    (Prometheus does not send pending alerts either). Sorted by fingerprint."""
    alerts: list[dict[str, Any]] = []
    keys: set[tuple[str, str]] = set()
    for s in sorted(states, key=lambda s: s.fingerprint):
        if receiver not in s.evaluation.receivers or s.status is AlertStatus.PENDING:
            continue
        n = _notification(s, now)
        ends = n.ended_at or now + timedelta(seconds=valid)
        alerts.append(postable(n, ends))
        keys.add((s.fingerprint, s.status.value))
    return Batch(tuple(alerts), frozenset(keys))


def retain_resolved(
    remembered: Mapping[str, AlertState],
    states: Mapping[str, AlertState],
    now: datetime,
    retention: float = RESOLVED_RETENTION,
) -> dict[str, AlertState]:
    """Resolved alerts to keep posting: the lifecycle forgets a RESOLVED state after one
    tick, but a post of it may have failed. Keeps each for ``retention`` seconds after it
    resolved, unless the alert is active again."""
    out = {
        fp: s
        for fp, s in remembered.items()
        if fp not in states and (now - s.since).total_seconds() < retention
    }
    out.update({fp: s for fp, s in states.items() if s.status is AlertStatus.RESOLVED})
    return out


def due(
    keys: frozenset[tuple[str, str]],
    acked: frozenset[tuple[str, str]],
    last_ok: datetime | None,
    now: datetime,
    resend: float,
) -> bool:
    """Whether a target needs the batch now: something it has not acknowledged (a new
    firing or resolved alert, or its last post failed), or ``resend`` seconds passed since
    its last successful post. Nothing to say: not due."""
    if not keys:
        return False
    if keys - acked or last_ok is None:
        return True
    return (now - last_ok).total_seconds() >= resend
