"""Shared pieces for the webhook adapter tests: a configured receiver and signed posts."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from autoscaler.config import GitHubConfig, WebhookConfig
from autoscaler.domain import Job, Observation, Runner
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.observe.github.webhooks import sign
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics
from tests.unit.webhook_payloads import SECRET


def hook_config(**overrides: Any) -> WebhookConfig:
    values: dict[str, Any] = {"secret": Secret(SECRET.decode()), "listen": "0.0.0.0:0"}
    values.update(overrides)
    return WebhookConfig(**values)


def headers(
    raw: bytes, event: str = "workflow_job", delivery: str | None = None, secret: bytes = SECRET
) -> dict[str, str]:
    """What GitHub sends with a delivery (header names lower-cased, as parsed)."""
    return {
        "x-github-event": event,
        "x-github-delivery": delivery or str(uuid.uuid4()),
        "x-hub-signature-256": sign(secret, raw),
        "content-type": "application/json",
    }


def counted(metrics: Metrics, event: str, action: str, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_webhook_events_total",
        {"event": event, "action": action, "result": result},
    )
    return value or 0.0


def corrections(metrics: Metrics, kind: str) -> float:
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_webhook_reconcile_corrections_total", {"kind": kind}
    )
    return value or 0.0


def fresh_metrics() -> Metrics:
    return Metrics(CollectorRegistry())


class ListedSource:
    """A JobSource whose poll lists ``jobs`` and ``runners``; counts its polls."""

    def __init__(self, jobs: Sequence[Job] = (), runners: Sequence[Runner] = ()) -> None:
        self.jobs = list(jobs)
        self.runners = list(runners)
        self.polls = 0
        self.fail: Exception | None = None

    def observe(self, now: datetime) -> Observation:
        self.polls += 1
        if self.fail is not None:
            raise self.fail
        return Observation(observed_at=now, jobs=tuple(self.jobs), runners=tuple(self.runners))

    def remove_runner(self, runner_id: int) -> None:
        self.runners = [r for r in self.runners if r.id != runner_id]

    def find_runner(self, name: str) -> Runner | None:
        return next((r for r in self.runners if r.name == name), None)


def github_poll(fake: FakeGitHub, metrics: Metrics, now: Callable[[], datetime]) -> GitHubSource:
    """The poll of the fake GitHub's ``demo-org`` on a test's moving clock (``now``), with
    no real sleep: the source every webhook adapter test wraps."""
    config = GitHubConfig(owner="demo-org", api_url=fake.url, token=Secret("fake-token"))
    return GitHubSource(
        config,
        metrics,
        sleep=lambda _s: None,
        wall_clock=lambda: now().timestamp(),
        poll_interval=60.0,
    )
