"""Every metric the controller exports, defined once on an injected registry.

Names follow Prometheus conventions: prefix ``ci_autoscaler_``, base units, counters end
in ``_total``. Labels are bounded by the configuration (runner types, pools, receivers,
rules) or by code (operation, status, result); never a job id or a repository list.

The definitions live in autoscaler/metric_groups, one module per stage that sets them
(loop, github, alerting, state, scaling, webhooks, job_retry); ``Metrics`` inherits them
all, so every caller keeps one object and ``metrics.<name>``. The constructor registers
the groups in a fixed order: the order of /metrics is the order it always was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Info

from autoscaler import __version__
from autoscaler.domain import QueueSnapshot
from autoscaler.metric_groups.alerting import AlertMetrics
from autoscaler.metric_groups.common import P
from autoscaler.metric_groups.github import GitHubMetrics
from autoscaler.metric_groups.job_retry import JobRetryMetrics
from autoscaler.metric_groups.loop import LoopMetrics
from autoscaler.metric_groups.scaling import ScalingMetrics
from autoscaler.metric_groups.state import StateMetrics
from autoscaler.metric_groups.webhooks import WebhookMetrics
from autoscaler.observe.starts import JobStart, ObjectiveStatus


class Metrics(
    LoopMetrics,
    GitHubMetrics,
    AlertMetrics,
    StateMetrics,
    ScalingMetrics,
    WebhookMetrics,
    JobRetryMetrics,
):
    """The metric objects, registered on ``registry`` (a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        Info(P + "build", "Build information.", registry=r).info({"version": __version__})
        self._register_loop(r)
        self._register_github(r)
        self._register_alerts(r)
        self._register_state(r)
        self._register_alert_delivery(r)
        self._register_scaling(r)
        self._register_webhooks(r)
        self._register_job_retry(r)

    # --- the controller's Reporter port
    def poll_succeeded(self, snapshot: QueueSnapshot, now: datetime) -> None:
        self.polls.labels("ok").inc()
        report_queue(self, snapshot, now)

    def jobs_started(
        self, starts: Sequence[JobStart], objectives: Mapping[str, ObjectiveStatus]
    ) -> None:
        """Each newly started job's queue time; each objective's share over the last hour."""
        for start in starts:
            self.job_queue_seconds.labels(start.runner_type).observe(start.queue_seconds)
            if start.within_objective:
                self.jobs_within_objective.labels(start.runner_type).inc()
        for name, status in objectives.items():
            self.queue_time_objective.labels(name).set(status.objective.queue_time)
            self.queue_time_objective_ratio.labels(name).set(status.objective.objective)
            self.job_queue_seconds.labels(name)  # exported at 0 before the first job
            self.jobs_within_objective.labels(name)
            share = status.share(3600.0)
            self.queue_time_attained.labels(name).set(math.nan if share is None else share)

    def poll_failed(self, kind: str) -> None:
        self.polls.labels(kind).inc()

    def stage_failed(self, stage: str) -> None:
        self.stage_failures.labels(stage).inc()

    def tick_finished(self, seconds: float) -> None:
        self.tick_duration.observe(seconds)


def report_queue(metrics: Metrics, snapshot: QueueSnapshot, now: datetime) -> None:
    """Export one successful poll's queue picture."""
    for name, stats in snapshot.per_type.items():
        metrics.queue_size.labels(name).set(stats.queue_size)
        metrics.queue_max_age.labels(name).set(stats.max_queue_time_seconds)
        metrics.runners.labels(name, "idle").set(stats.runners.idle)
        metrics.runners.labels(name, "busy").set(stats.runners.busy)
        metrics.runners.labels(name, "offline").set(stats.runners.offline)
    metrics.unmatched_jobs.set(snapshot.unmatched_jobs)
    metrics.unmatched_max_age.set(
        snapshot.unmatched_ages_seconds[0] if snapshot.unmatched_ages_seconds else 0.0
    )
    metrics.ghost_jobs.set(snapshot.ghost_jobs)
    metrics.last_successful_poll.set(now.timestamp())
