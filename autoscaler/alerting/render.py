"""Rendering: the on-call text (design.md, "Alert text") and one payload per receiver type.

Pure functions of a :class:`Notification`; no I/O. Payload shapes:

- webhook: our own flat JSON (title, state, team, priority, description, reason, values and
  flags as numbers, occurred_at, fingerprint, runbook_url, dashboard_url, text).
- slack: an incoming-webhook message: ``text`` (notification fallback) plus one attachment
  with a colour bar (red FIRING, green RESOLVED) holding Block Kit sections.
- pagerduty: Events API v2 ``trigger`` / ``resolve`` with ``dedup_key`` = fingerprint.
- alertmanager_webhook: the payload Alertmanager itself POSTs to its webhook receivers
  (``version: "4"``), one alert per message, for tools that consume those (PyTorch's alert
  normaliser reads ``alerts[0]`` labels/annotations and ``status``). Not for Alertmanager's
  own API: ``type: alertmanager`` posts postable alerts (alerting/alertmanager.py).
- github_issue: title, body, labels and comments for the issue the receiver keeps.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from autoscaler.alerting.lifecycle import Notification
from autoscaler.alerting.rules import FLEET, Evaluation

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
    """The full on-call text."""
    ev = n.evaluation
    return "\n".join(
        [
            f"Occurred At: {human_time(n.occurred_at)}",
            f"State: {n.status}",
            f"Team: {ev.team}",
            f"Priority: {ev.priority}",
            f"Description: {ev.description}",
            f"Reason: {ev.reason}",
            f"Runbook: {ev.runbook_url}",
            f"Dashboard: {ev.dashboard_url}",
            f"Fingerprint: {ev.fingerprint}",
        ]
    )


def webhook_payload(n: Notification) -> dict[str, Any]:
    ev = n.evaluation
    return {
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
    return {
        "text": f"{n.status}: {title(ev)}",
        "attachments": [{"color": color, "fallback": text(n), "blocks": blocks}],
    }


def pagerduty_payload(n: Notification, routing_key: str) -> dict[str, Any]:
    ev = n.evaluation
    if n.status == "RESOLVED":
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
            "custom_details": {"text": text(n), **dict(ev.values)},
        },
        "links": links,
    }


def alertmanager_labels(ev: Evaluation) -> dict[str, str]:
    return {
        "alertname": ev.rule,
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
    group_labels = {"alertname": ev.rule}
    return {
        "version": "4",
        "groupKey": '{}:{alertname="' + ev.rule.replace('"', '\\"') + '"}',
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


def github_issue_body(n: Notification) -> str:
    return f"```\n{text(n)}\n```\n"


def github_comment_body(n: Notification) -> str:
    head = "Still firing" if n.status == "FIRING" else "Resolved"
    return f"**{head}** at {human_time(n.created_at)}\n\n{github_issue_body(n)}"
