"""Wiring for GitHub webhooks: the receiver, the index-backed source, the wake-up and the
reaction clock. Chosen here (and in :mod:`autoscaler.app.wiring`) and nowhere else.

``ci_autoscaler_reaction_seconds`` is measured here, after each tick: a job whose
``queued`` event that tick applied, of a runner type the same tick scaled up, observes the
time from the event's arrival to the end of that tick (its ``SetDesiredCapacity`` call
was in it). A job whose event caused no capacity request (an idle runner was there, the
type was at its max) observes nothing: a later scale-up is not its reaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from autoscaler.app.service import Wakeup
from autoscaler.config import Config, WebhookConfig
from autoscaler.controller import Controller, TickResult
from autoscaler.domain import JobStatus, RunnerType
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.observe.queue import match_job
from autoscaler.ports import JobSource
from autoscaler.scale.plan import SCALE_UP
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Reactions:
    """Observes ``reaction_seconds`` from the source's queued events and a tick's scale-ups."""

    def __init__(
        self,
        source: WebhookSource,
        types: Sequence[RunnerType],
        metrics: Metrics,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.source = source
        self.types = tuple(types)
        self.metrics = metrics
        self.clock = clock

    def after_tick(self, result: TickResult | None) -> list[float]:
        """Observe the reactions this tick caused; returns them (seconds)."""
        if result is None:
            return []
        now = self.clock()
        scaled = {
            d.runner_type
            for d in result.decisions
            if getattr(d, "action", None) == SCALE_UP and not result.dry_run
        }
        observed: list[float] = []
        pending, self.source.queued_received = self.source.queued_received, {}
        for job_id, received in pending.items():
            job = self.source.index.get(job_id)
            if job is None or job.status is not JobStatus.QUEUED:
                continue
            rtype = match_job(job.labels, self.types)
            if rtype is not None and rtype.name in scaled:
                seconds = max(0.0, (now - received).total_seconds())
                self.metrics.reaction_seconds.observe(seconds)
                observed.append(seconds)
        return observed


@dataclass
class Webhooks:
    """The webhook parts of a runtime (``cmd_run`` serves the receiver)."""

    config: WebhookConfig
    receiver: WebhookReceiver
    source: WebhookSource
    wake: Wakeup
    reactions: Reactions

    def on_tick(self, controller: Controller) -> Callable[[], None]:
        """The loop's after-tick hook: observe the reactions of the tick just run."""

        def hook() -> None:
            self.reactions.after_tick(controller.last_result)

        return hook


def attach(config: Config, metrics: Metrics, source: JobSource) -> Webhooks:
    """Wrap ``source`` so ticks read the webhook index between reconciles."""
    hook = config.webhook
    if hook is None:
        raise ValueError("no webhook section")
    wake = Wakeup(hook.debounce)
    receiver = WebhookReceiver(hook, metrics, on_event=wake.notify)
    wrapped = WebhookSource(source, receiver, hook, metrics, poll_interval=config.poll_interval)
    types = [rt.runner_type for rt in config.runner_types]
    return Webhooks(hook, receiver, wrapped, wake, Reactions(wrapped, types, metrics))
