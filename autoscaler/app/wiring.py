"""Builds the real controller from a Config: adapters are chosen here and nowhere else."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from autoscaler.alerting.alertmanager_sync import AlertmanagerSync
from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine
from autoscaler.alerting.store import StateStore
from autoscaler.config import Config
from autoscaler.controller import Controller
from autoscaler.ports import JobSource, RunnerPool
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics


@dataclass
class Runtime:
    """The controller and what must be closed when it stops."""

    controller: Controller
    closers: list[Callable[[], None]] = field(default_factory=list)

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
) -> Runtime:
    """GitHub source, alerting (when rules exist) and AWS pools (when any type has pools).

    ``source`` and ``pool`` override the real adapters (the demo passes a pool with
    moto's credentials; tests may pass fakes). Scaling is wired only when enabled.
    """
    closers: list[Callable[[], None]] = []
    if source is None:
        from autoscaler.observe.github.source import GitHubSource  # noqa: PLC0415 (light CLI start)

        github = GitHubSource(config.github, metrics)
        closers.append(github.close)
        source = github

    store = StateStore.from_config(config.state)
    closers.append(store.close)
    deliverer = Deliverer.from_config(config, metrics, dry_run=dry_run)
    closers.append(deliverer.close)
    sync = None
    if any(rc.type == "alertmanager" for rc in config.alerts.receivers.values()):
        sync = AlertmanagerSync.from_config(config, metrics)
        closers.append(sync.close)  # waits a moment for the last posts (``once`` exits)
    alerts = AlertEngine(config.alerts, store, deliverer, metrics, alertmanager=sync)

    scaler = None
    if config.scaling.enabled and any(rt.pools for rt in config.runner_types):
        if pool is None:
            from autoscaler.scale.aws.asg import AwsAsgPool  # noqa: PLC0415

            pool = AwsAsgPool(config.aws, metrics)
        scaler = Scaler(pool, source, config, metrics)

    controller = Controller(config, source, metrics, alerts=alerts, scaler=scaler)
    return Runtime(controller, closers)
