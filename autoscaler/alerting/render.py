"""Rendering: the on-call text (docs/alerts.md) and one payload per receiver type.

Pure functions of a :class:`Notification`; no I/O. Every payload carries the
notification's ``event_id`` (:attr:`Notification.event_id`) where its format allows, so a
receiver that gets a notification twice (delivery is at least once) can drop the second.
Payload shapes:

- webhook: our own flat JSON (event_id, title, state, team, priority, description, reason,
  values and flags as numbers, occurred_at, fingerprint, runbook_url, dashboard_url, causes,
  text).

The webhook and Slack payloads carry ``causes: [{runner_type, code, detail}]``, PagerDuty's
in ``custom_details``; Alertmanager's model holds strings only, so both Alertmanager
payloads carry the ``cause`` annotation (the Cause line) and keep their exact shape; the
text carries them as the ``Cause:`` line right after ``Reason:`` (queue alerts only;
``Reason:`` never changes).
- slack: an incoming-webhook message: ``text`` (notification fallback) plus one attachment
  with a colour bar (red FIRING, green RESOLVED) holding Block Kit sections, the last a
  context line with the fingerprint and event id; the event id also in ``metadata``.
- pagerduty: Events API v2 ``trigger`` / ``resolve`` with ``dedup_key`` = fingerprint
  (PagerDuty needs one key for the trigger and its resolve; a duplicate trigger merges into
  the open alert, a duplicate resolve is a no-op) and, on a trigger, the event id in
  ``custom_details`` (a resolve carries no payload).
- alertmanager_webhook: the payload Alertmanager itself POSTs to its webhook receivers
  (``version: "4"``), one alert per message, for tools that consume those (PyTorch's alert
  normaliser reads ``alerts[0]`` labels/annotations and ``status``); the event id is an
  annotation. Not for Alertmanager's
  own API: ``type: alertmanager`` posts postable alerts (alerting/alertmanager.py).
- github_issue: title, body, labels and comments for the issue the receiver keeps; body and
  comments end with an HTML-comment marker (:func:`github_marker`) holding the fingerprint
  and event id, which the receiver looks up before opening an issue.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from autoscaler.alerting.evaluation import FLEET, Evaluation
from autoscaler.alerting.lifecycle import Notification

#: PagerDuty severities (critical, error, warning, info) by priority.
PAGERDUTY_SEVERITY = {
    "P0": "critical",
    "P1": "critical",
    "P2": "error",
    "P3": "warning",
    "P4": "info",
}
SOURCE = "ci-autoscaler"
#: Slack refuses a section block whose text is longer (Block Kit reference, section).
SLACK_SECTION_MAX = 3000
_ZERO_TIME = "0001-01-01T00:00:00Z"


def human_time(t: datetime) -> str:
    """``2026-11-30 03:12:00 UTC``."""
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_time(t: datetime) -> str:
    """``2026-11-30T03:12:00Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def title(ev: Evaluation) -> str:
    """``[P2] <rule name>``; a per-runner-type alert appends ``(<runner type>)``."""
    base = f"[{ev.priority}] {ev.rule}"
    return base if ev.scope == FLEET else f"{base} ({ev.scope})"


def text(n: Notification) -> str:
    """The full on-call text; queue alerts carry a ``Cause:`` line right after ``Reason:``."""
    ev = n.evaluation
    cause = [] if ev.cause is None else [f"Cause: {ev.cause}"]
    return "\n".join(
        [
            f"Occurred At: {human_time(n.occurred_at)}",
            f"State: {n.status}",
            f"Team: {ev.team}",
            f"Priority: {ev.priority}",
            f"Description: {ev.description}",
            f"Reason: {ev.reason}",
            *cause,
            f"Runbook: {ev.runbook_url}",
            f"Dashboard: {ev.dashboard_url}",
            f"Fingerprint: {ev.fingerprint}",
        ]
    )


def webhook_payload(n: Notification) -> dict[str, Any]:
    ev = n.evaluation
    return {
        "event_id": n.event_id,
        "title": title(ev),
        "state": n.status,
        "team": ev.team,
        "priority": ev.priority,
        "rule": ev.rule,
        "scope": ev.scope,
        "description": ev.description,
        "reason": ev.reason,
        "values": dict(ev.values),
        "occurred_at": iso_time(n.occurred_at),
        "started_at": iso_time(n.started_at),
        "ended_at": None if n.ended_at is None else iso_time(n.ended_at),
        "repeat": n.repeat,
        "fingerprint": ev.fingerprint,
        "runbook_url": ev.runbook_url,
        "dashboard_url": ev.dashboard_url,
        "causes": ev.causes_as_dicts(),
        "text": text(n),
    }


def _fit(s: str, limit: int) -> str:
    return s if len(s) <= limit else s[: limit - 1] + "…"


def slack_payload(n: Notification) -> dict[str, Any]:
    ev = n.evaluation
    firing = n.status == "FIRING"
    icon, color = (":rotating_light:", "#d00000") if firing else (":white_check_mark:", "#2eb886")
    headline = f"{icon} *{n.status}*: {title(ev)}"
    links = " | ".join(
        f"<{url}|{name}>"
        for name, url in (("Runbook", ev.runbook_url), ("Dashboard", ev.dashboard_url))
        if url
    )
    body = f"```{_fit(text(n), SLACK_SECTION_MAX - 6)}```"
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _fit(headline, SLACK_SECTION_MAX)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": body}},
    ]
    if links:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": links}]})
    ids = f"fingerprint `{ev.fingerprint}` · event `{n.event_id}`"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": ids}]})
    return {
        "text": f"{n.status}: {title(ev)}",
        "attachments": [{"color": color, "fallback": text(n), "blocks": blocks}],
        "causes": ev.causes_as_dicts(),
        "metadata": {
            "event_type": "ci_autoscaler_alert",
            "event_payload": {
                "event_id": n.event_id,
                "fingerprint": ev.fingerprint,
                "state": n.status,
            },
        },
    }


def pagerduty_payload(n: Notification, routing_key: str) -> dict[str, Any]:
    ev = n.evaluation
    if n.status == "RESOLVED":
        # A resolve event has no payload in Events API v2: dedup_key is all it carries,
        # and resolving twice is a no-op.
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": ev.fingerprint}
    links = [
        {"href": url, "text": name}
        for name, url in (("Runbook", ev.runbook_url), ("Dashboard", ev.dashboard_url))
        if url
    ]
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": ev.fingerprint,
        "payload": {
            "summary": f"{title(ev)}: {ev.reason}"[:1024],
            "source": SOURCE,
            "severity": PAGERDUTY_SEVERITY.get(ev.priority, "error"),
            "timestamp": iso_time(n.occurred_at),
            "component": ev.scope,
            "group": ev.team,
            "class": ev.rule,
            "custom_details": {
                "event_id": n.event_id,
                "text": text(n),
                **dict(ev.values),
                "causes": ev.causes_as_dicts(),
            },
        },
        "links": links,
    }


def alertmanager_labels(ev: Evaluation) -> dict[str, str]:
    return {
        "alertname": ev.alertname,
        "team": ev.team,
        "priority": ev.priority,
        "severity": PAGERDUTY_SEVERITY.get(ev.priority, "error"),
        "scope": ev.scope,
        **dict(ev.labels),
    }


def alertmanager_payload(n: Notification, receiver: str, external_url: str = "") -> dict[str, Any]:
    ev = n.evaluation
    status = n.status.lower()
    labels = alertmanager_labels(ev)
    annotations = {
        "summary": title(ev),
        "description": ev.description,
        "reason": ev.reason,
        "runbook_url": ev.runbook_url,
        "dashboard_url": ev.dashboard_url,
        **({} if ev.cause is None else {"cause": ev.cause}),
        "event_id": n.event_id,
    }
    alert = {
        "status": status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": iso_time(n.started_at),
        "endsAt": _ZERO_TIME if n.ended_at is None else iso_time(n.ended_at),
        "generatorURL": ev.dashboard_url or external_url,
        "fingerprint": ev.fingerprint,
    }
    group_labels = {"alertname": ev.alertname}
    return {
        "version": "4",
        "groupKey": '{}:{alertname="' + ev.alertname + '"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": external_url,
        "alerts": [alert],
    }


def github_issue_labels(ev: Evaluation, extra: tuple[str, ...] = ()) -> list[str]:
    return [f"team:{ev.team}", f"priority:{ev.priority}", *extra]


_MARKER = re.compile(r"<!-- ci-autoscaler fingerprint=(\w+) event_id=(\w+) -->")


def github_marker(n: Notification) -> str:
    """An HTML comment (invisible on GitHub) naming the alert and the event."""
    return f"<!-- ci-autoscaler fingerprint={n.fingerprint} event_id={n.event_id} -->"


def parse_github_marker(body: str | None) -> tuple[str, str] | None:
    """(fingerprint, event_id) of the first marker in ``body``, or None."""
    match = _MARKER.search(body or "")
    return None if match is None else (match.group(1), match.group(2))


def github_issue_body(n: Notification) -> str:
    return f"```\n{text(n)}\n```\n{github_marker(n)}\n"


def github_comment_body(n: Notification) -> str:
    head = "Still firing" if n.status == "FIRING" else "Resolved"
    return f"**{head}** at {human_time(n.created_at)}\n\n{github_issue_body(n)}"
