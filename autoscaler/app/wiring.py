"""Builds the real controller from a Config: adapters are chosen here and nowhere else."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autoscaler.alerting.alertmanager_sync import AlertmanagerSync
from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine
from autoscaler.alerting.store import StateStore
from autoscaler.config import Config
from autoscaler.controller import Controller
from autoscaler.health import Health
from autoscaler.ports import JobSource, RunnerPool
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics

if TYPE_CHECKING:
    from autoscaler.app.webhooks import Webhooks


@dataclass
class Runtime:
    """The controller and what must be closed when it stops."""

    controller: Controller
    closers: list[Callable[[], None]] = field(default_factory=list)
    webhooks: Webhooks | None = None
    """The webhook receiver, source and wake-up (``webhook`` configured, ``run`` only)."""

    def close(self) -> None:
        for close in reversed(self.closers):
            close()


def build_runtime(
    config: Config,
    metrics: Metrics,
    *,
    source: JobSource | None = None,
    pool: RunnerPool | None = None,
    dry_run: bool = False,
    webhooks: bool = False,
) -> Runtime:
    """GitHub source, alerting (when rules exist) and AWS pools (when any type has pools).

    ``source`` and ``pool`` override the real adapters (the demo passes a pool with
    moto's credentials; tests may pass fakes). Scaling is wired only when enabled.
    ``webhooks``: with a ``webhook`` section, ticks read the webhook index between
    reconciles (``run`` and the demo; ``once`` and ``explain`` poll as always).
    """
    closers: list[Callable[[], None]] = []
    health = Health()  # the alert stage reports an unwritable state store; readiness reads it
    store = StateStore.from_config(config.state)
    closers.append(store.close)
    if source is None:
        from autoscaler.observe.github.source import GitHubSource  # noqa: PLC0415 (light CLI start)

        # The poll's ETag cache lives in the state store: a restart is not a cold start.
        github = GitHubSource(
            config.github,
            metrics,
            poll_interval=config.poll_interval,
            cache_store=None if dry_run else store,
        )
        closers.append(github.close)
        source = github

    hooks = None
    if webhooks and config.webhook is not None:
        from autoscaler.app.webhooks import attach  # noqa: PLC0415

        hooks = attach(config, metrics, source)
        source = hooks.source

    deliverer = Deliverer.from_config(config, metrics, dry_run=dry_run, health=health)
    closers.append(deliverer.close)
    sync = None
    if any(rc.type == "alertmanager" for rc in config.alerts.receivers.values()):
        sync = AlertmanagerSync.from_config(config, metrics)
        closers.append(sync.close)  # waits a moment for the last posts (``once`` exits)
    alerts = AlertEngine(config.alerts, store, deliverer, metrics, health=health, alertmanager=sync)

    scaler = None
    if config.scaling.enabled and any(rt.pools for rt in config.runner_types):
        if pool is None:
            from autoscaler.scale.aws.asg import AwsAsgPool  # noqa: PLC0415

            pool = AwsAsgPool(config.aws, metrics)
        scaler = Scaler(pool, source, config, metrics)

    controller = Controller(config, source, metrics, alerts=alerts, scaler=scaler, health=health)
    return Runtime(controller, closers, hooks)
