"""Receivers that cannot run here, checked against what their services publish.

No Slack or PagerDuty runs on this machine (and only loopback is ever a target), so their
payloads are checked against the services' own published descriptions instead:

- PagerDuty Events API v2: the OpenAPI description PagerDuty publishes
  (github.com/PagerDuty/api-schema, ``reference/events-v2/openapiv3.json``: request body
  requires ``routing_key`` and ``event_action`` in trigger/acknowledge/resolve;
  ``dedup_key`` required unless triggering; ``payload`` requires ``summary``, ``severity``
  in critical/error/warning/info, ``source``; ``timestamp`` is a date-time; each link needs
  ``href``), and the "Send an Alert Event" guide (developer.pagerduty.com, Events API v2:
  ``summary`` at most 1024 characters). The schema below is our transcription of those.
- Slack incoming webhooks: Slack's own Python SDK (``slack_sdk.models``) parses and
  validates the Block Kit blocks and the attachment against the limits Slack documents
  (docs.slack.dev/reference/block-kit/blocks/section-block: section text at most 3000
  characters; context block at most 10 elements).
- alertmanager_webhook: the consumer it exists for, PyTorch's alert normaliser
  (github.com/pytorch/alerting-infra, ``lambdas/collector/src/transformers/index.ts``
  ``detectAlertSource`` and ``grafana.ts``): it takes a body with ``alerts``/``status``/
  ``receiver`` for an Alertmanager-style webhook and reads ``alerts[0]``'s ``status``
  (firing/resolved), label ``alertname``, ``team`` and ``priority`` (annotations or
  labels), annotation ``description`` and ``runbook_url``, ``startsAt`` and
  ``fingerprint``. The e2e suite compares its keys with a real Alertmanager's webhook.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
from slack_sdk.models.attachments import BlockAttachment
from slack_sdk.models.blocks import Block

from autoscaler.alerting import render
from autoscaler.alerting.evaluation import Evaluation
from autoscaler.alerting.lifecycle import Notification

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
T1 = datetime(2026, 11, 30, 4, 2, tzinfo=UTC)
ROUTING_KEY = "e93facc04764012d7bfb002500d5d1a6"  # 32 characters, as PagerDuty's are

PAGERDUTY_EVENT = {
    "type": "object",
    "required": ["routing_key", "event_action"],
    "properties": {
        "routing_key": {"type": "string", "minLength": 1},
        "event_action": {"enum": ["trigger", "acknowledge", "resolve"]},
        "dedup_key": {"type": "string", "minLength": 1},
        "client": {"type": "string"},
        "client_url": {"type": "string"},
        "payload": {
            "type": "object",
            "required": ["summary", "severity", "source"],
            "properties": {
                "summary": {"type": "string", "minLength": 1, "maxLength": 1024},
                "timestamp": {"type": "string"},
                "severity": {"enum": ["critical", "error", "warning", "info"]},
                "source": {"type": "string", "minLength": 1},
                "component": {"type": "string"},
                "group": {"type": "string"},
                "class": {"type": "string"},
                "custom_details": {"type": "object"},
            },
        },
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["href"],
                "properties": {"href": {"type": "string"}, "text": {"type": "string"}},
            },
        },
    },
    "allOf": [
        {
            "if": {"properties": {"event_action": {"const": "trigger"}}},
            "then": {"required": ["payload"]},
            "else": {"required": ["dedup_key"]},
        }
    ],
}


def evaluation(description: str = "Jobs wait too long for a runner", **kw: Any) -> Evaluation:
    values = {
        "max_queue_size": 7,
        "max_queue_time_mins": 62,
        "queue_size_threshold": 0,
        "queue_time_threshold": 1,
        "threshold_breached": 1,
    }
    fields: dict[str, Any] = {
        "rule": "Jobs queueing too long",
        "scope": "linux.g5.4xlarge.nvidia.gpu",
        "team": "pytorch-dev-infra",
        "priority": "P2",
        "description": description,
        "receivers": ("r",),
        "values": values,
        "runbook_url": "https://runbook.example/queue",
        "dashboard_url": "https://grafana.example/d/ci",
        **kw,
    }
    return Evaluation(**fields)


LONG = "A description a team wrote at length. " * 120  # ~4,500 characters

NOTIFICATIONS = {
    "firing": Notification("FIRING", evaluation(), started_at=T0, created_at=T0),
    "resolved": Notification("RESOLVED", evaluation(), T0, T1, ended_at=T1),
    "firing-long-description": Notification("FIRING", evaluation(LONG), T0, T0),
    "firing-long-rule-name": Notification(
        "FIRING", evaluation(rule="Queue " * 300, priority="P0"), T0, T0
    ),
    "firing-no-links": Notification("FIRING", evaluation(runbook_url="", dashboard_url=""), T0, T0),
}
CASES = pytest.mark.parametrize("n", NOTIFICATIONS.values(), ids=NOTIFICATIONS.keys())


@CASES
def test_pagerduty_event_matches_the_published_events_v2_schema(n: Notification) -> None:
    event = render.pagerduty_payload(n, ROUTING_KEY)
    jsonschema.validate(event, PAGERDUTY_EVENT)
    if n.status == "FIRING":
        assert event["event_action"] == "trigger"
        datetime.fromisoformat(event["payload"]["timestamp"])  # a date-time
    else:
        assert event["event_action"] == "resolve"
    assert event["dedup_key"] == n.fingerprint  # the resolve finds its trigger


@CASES
def test_slack_message_is_within_block_kit_limits(n: Notification) -> None:
    """A long rule description used to put the whole on-call text into one section over
    Slack's 3000-character limit, and Slack refuses such a message (invalid_blocks)."""
    message = render.slack_payload(n)
    assert message["text"]  # the notification fallback incoming webhooks require
    [attachment] = message["attachments"]
    for raw in attachment["blocks"]:
        block = Block.parse(raw)
        assert block is not None, raw
        block.validate_json()  # raises SlackObjectFormationError past a documented limit
    BlockAttachment(
        blocks=attachment["blocks"], color=attachment["color"], fallback=attachment["fallback"]
    ).validate_json()


@pytest.mark.parametrize(
    "n", [NOTIFICATIONS["firing"], NOTIFICATIONS["resolved"]], ids=["firing", "resolved"]
)
def test_alertmanager_webhook_has_what_the_pytorch_alert_normaliser_reads(
    n: Notification,
) -> None:
    body = render.alertmanager_payload(n, "normaliser")
    assert {"alerts", "status", "receiver"} <= set(body)  # detected as a webhook source
    alert = body["alerts"][0]
    assert alert["status"] == n.status.lower()
    assert alert["labels"]["alertname"] == "JobsQueueingTooLong"
    assert alert["labels"]["team"] == "pytorch-dev-infra"
    assert alert["labels"]["priority"] == "P2"
    assert alert["annotations"]["description"] == "Jobs wait too long for a runner"
    assert alert["annotations"]["runbook_url"] == "https://runbook.example/queue"
    assert alert["startsAt"] == "2026-11-30T03:12:00Z"
    assert alert["fingerprint"] == n.fingerprint
