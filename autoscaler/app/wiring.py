"""Builds the real controller from a Config: adapters are chosen here and nowhere else."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from autoscaler.alerting.alertmanager_sync import AlertmanagerSync
from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine
from autoscaler.app.backend import open_backend
from autoscaler.app.service import utc_now
from autoscaler.config import DYNAMODB, Config
from autoscaler.controller import Controller
from autoscaler.domain import Observation, RunProgress
from autoscaler.health import Health
from autoscaler.job_retry.interruptions import LONG_POLL, InterruptionHandler, RecordingPool
from autoscaler.job_retry.ledger import JobRetryStore
from autoscaler.job_retry.model import InstanceEvents
from autoscaler.job_retry.stage import CompletedRunSource, InstanceFates, JobRerunner, RetryStage
from autoscaler.observe.github.webhook_completions import PolledCompletions, WebhookCompletedRuns
from autoscaler.ports import JobSource, RunnerPool, WarmPools
from autoscaler.scale.registration import ParameterStore, RunnerRegistrar
from autoscaler.scale.scaler import Scaler
from autoscaler.state.fence import Fence, FencedPool, FencedSource, FencedWarmPools
from autoscaler.state.keeper import LeaseKeeper
from autoscaler.telemetry import Metrics
from autoscaler.tracing import build_tracer

if TYPE_CHECKING:
    import boto3

    from autoscaler.app.webhooks import Webhooks

log = logging.getLogger(__name__)


class AwsSession:
    """One boto3 session for every AWS adapter of a runtime, made on first use. Each new
    session loads the SDK's endpoint and service models again: with one per adapter that
    was about 40% of a controller's start-up CPU."""

    def __init__(self, session: boto3.session.Session | None = None) -> None:
        self._session = session

    def __call__(self) -> boto3.session.Session:
        if self._session is None:
            import boto3  # noqa: PLC0415 (light CLI start: only when AWS is used)

            self._session = boto3.session.Session()
        return self._session


@dataclass
class Runtime:
    """The controller and what must be closed when it stops."""

    controller: Controller
    closers: list[Callable[[], None]] = field(default_factory=list)
    keeper: LeaseKeeper | None = None
    """The leader lease's keeper (``state.backend: dynamodb``): ``run`` starts its thread,
    ``once`` steps it once; closing releases the lease."""
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
    parameters: ParameterStore | None = None,
    dry_run: bool = False,
    session: boto3.session.Session | None = None,
    wall_clock: Callable[[], float] = time.time,
    webhooks: bool = False,
) -> Runtime:
    """GitHub source, alerting (when rules exist) and AWS pools (when any type has pools).

    ``source``, ``pool`` and ``parameters`` (SSM: every instance's credential) override the real
    adapters (the demo passes a pool with moto's credentials; tests may pass fakes);
    ``session`` is the boto3 session of every AWS adapter and ``wall_clock`` the GitHub source's
    (the benchmark passes moto's credentials and its virtual clock). Scaling is wired only
    when enabled. With a lease (``state.backend: dynamodb``) every change to a pool, every
    deregistration and every notification passes the lease's fence first.
    ``webhooks``: with a ``webhook`` section, ticks read the webhook index between
    reconciles (``run`` and the demo; ``once`` and ``explain`` poll as always).
    """
    closers: list[Callable[[], None]] = []
    health = Health()  # the alert stage reports an unwritable state store; readiness reads it
    aws = AwsSession(session)
    dynamodb = config.state.backend == DYNAMODB
    backend = open_backend(config, metrics, health, session=aws() if dynamodb else None)
    store = backend.store
    closers.append(store.close)
    if backend.keeper is not None:
        # Released after the deliverer and the source closed (run in reverse): deliveries
        # in flight finish as the leader, then a follower takes over at once.
        keeper = backend.keeper
        closers.append(lambda: keeper.stop(release=True))
    if source is None:
        from autoscaler.observe.github.source import GitHubSource  # noqa: PLC0415 (light CLI start)

        # The poll's ETag cache lives in the state store: a restart is not a cold start.
        github = GitHubSource(
            config.github,
            metrics,
            poll_interval=config.poll_interval,
            cache_store=None if dry_run else store,
            wall_clock=wall_clock,
        )
        closers.append(github.close)
        source = github

    hooks = None
    # Job retry (reads completed jobs, re-runs) and runner registration (JIT configs,
    # registration tokens) go through the poll's source: the webhook wrapper only observes.
    polled = source
    if webhooks and config.webhook is not None:
        from autoscaler.app.webhooks import attach  # noqa: PLC0415

        # The job index lives in the state store: any replica writes what it receives, the
        # leader reads it every tick, a new leader starts with it.
        lease = backend.lease
        hooks = attach(
            config,
            metrics,
            source,
            store=store,
            acting=(lambda: True) if lease is None else lease.acting,
            shared=lease is not None,
            clock=lambda: datetime.fromtimestamp(wall_clock(), UTC),  # when it was received
        )
        closers.append(hooks.receiver.close)  # the deliveries in hand are written first
        source = hooks.source

    deliverer = Deliverer.from_config(
        config, metrics, dry_run=dry_run, health=health, gate=backend.gate
    )
    closers.append(deliverer.close)
    sync = None
    if any(rc.type == "alertmanager" for rc in config.alerts.receivers.values()):
        sync = AlertmanagerSync.from_config(config, metrics)
        closers.append(sync.close)  # waits a moment for the last posts (``once`` exits)
    alerts = AlertEngine(config.alerts, store, deliverer, metrics, health=health, alertmanager=sync)

    #: What happened to which instance (interruptions, our terminations): job retry reads it.
    events = InstanceEvents()
    runners: JobSource = source
    if backend.fence is not None:
        runners = FencedSource(source, backend.fence)
    scaler = None
    has_pools = any(rt.pools for rt in config.runner_types)
    if config.scaling.enabled and has_pools:
        if pool is None:
            from autoscaler.scale.aws.asg import AwsAsgPool  # noqa: PLC0415

            pool = AwsAsgPool(config.aws, metrics, session=aws())
        # Recorded only once the real call went through (inside the fence).
        acting: RunnerPool = RecordingPool(pool, events, utc_now)
        if backend.fence is not None:
            acting = FencedPool(acting, backend.fence)
        registrar, parameters = _handover_ports(config, metrics, polled, parameters, aws)
        warm: WarmPools | None = pool if isinstance(pool, WarmPools) else None
        if warm is not None and backend.fence is not None:
            warm = FencedWarmPools(warm, backend.fence)
        scaler = Scaler(
            acting,
            runners,
            config,
            metrics,
            memory=store,
            registrar=registrar,
            parameters=parameters,
            handover_store=store,
            warm_pools=warm,
        )

    completed: object = polled
    if hooks is not None and isinstance(polled, PolledCompletions):
        # The completed events first: a run that starts and ends between two reconciles
        # is never seen running by the poll.
        completed = WebhookCompletedRuns(hooks.source.index, polled)
    retries = _retry_stage(
        config,
        completed,
        polled,
        metrics,
        store,
        events=events,
        fence=backend.fence,
        fates=pool if isinstance(pool, InstanceFates) else None,
    )
    observed: list[Controller] = []
    interruptions = None
    if config.aws.interruption_queue_url and has_pools:
        interruptions = _interruption_handler(
            config,
            metrics,
            source=runners,
            pool=pool,
            scaler=scaler,
            events=events,
            observed=lambda: observed[0].last_observation,
            aws=aws,
        )
    tracer = build_tracer(config.telemetry)
    if tracer is not None:
        closers.append(tracer.close)  # exports what is queued first
    controller = Controller(
        config,
        source,
        metrics,
        alerts=alerts,
        scaler=scaler,
        health=health,
        leadership=backend.lease,
        retries=retries,
        interruptions=interruptions,
        tracer=tracer,
    )
    observed.append(controller)
    return Runtime(controller, closers, keeper=backend.keeper, webhooks=hooks)


def _handover_ports(
    config: Config,
    metrics: Metrics,
    source: JobSource,
    parameters: ParameterStore | None,
    aws: AwsSession,
) -> tuple[RunnerRegistrar, ParameterStore]:
    """GitHub's runner registration (the source, when it speaks it) and SSM: every new
    instance is handed its runner credential through them."""
    speaks = ("generate_jit_config", "create_registration_token")
    if not all(hasattr(source, name) for name in speaks):
        raise ValueError("scaling runner pools needs a source that can register runners")
    if parameters is None:
        from autoscaler.scale.aws.ssm import SsmParameters  # noqa: PLC0415

        parameters = SsmParameters(config.aws, metrics, session=aws())
    return cast("RunnerRegistrar", source), parameters


class FencedRerunner:
    """A re-run is a leader-only write: asked of the fence right before it is sent."""

    def __init__(self, rerunner: JobRerunner, fence: Fence) -> None:
        self.rerunner = rerunner
        self.fence = fence

    def rerun_failed_jobs(self, repo: str, run_id: int) -> None:
        self.fence.require("rerun", f"{repo} run {run_id}")
        self.rerunner.rerun_failed_jobs(repo, run_id)

    def run_progress(self, repo: str, run_id: int) -> RunProgress:
        return self.rerunner.run_progress(repo, run_id)  # a read: no fence


def _retry_stage(
    config: Config,
    completed: object,
    source: JobSource,
    metrics: Metrics,
    store: object,
    *,
    events: InstanceEvents,
    fence: Fence | None,
    fates: InstanceFates | None = None,
) -> RetryStage | None:
    """The job-retry stage, when enabled, ``completed`` gives completed runs and the
    source can re-run them. ``fates``: the cloud pool, asked how a failed job's instance
    ended when no event says (a read: no fence)."""
    if not config.job_retry.enabled:
        return None
    if not isinstance(completed, CompletedRunSource) or not isinstance(source, JobRerunner):
        log.warning("job_retry.enabled, but this CI source cannot re-run jobs: job retry is off")
        return None
    ledger = store if isinstance(store, JobRetryStore) else None
    if ledger is None:
        log.warning(
            "this state backend keeps no job-retry ledger: re-runs are remembered in "
            "memory only (a restart may re-run a job once more)"
        )
    rerunner: JobRerunner = source if fence is None else FencedRerunner(source, fence)
    return RetryStage(
        config, completed, rerunner, metrics, store=ledger, events=events, fates=fates
    )


def _interruption_handler(
    config: Config,
    metrics: Metrics,
    *,
    source: JobSource,
    pool: RunnerPool | None,
    scaler: Scaler | None,
    events: InstanceEvents,
    observed: Callable[[], Observation | None],
    aws: AwsSession,
) -> InterruptionHandler:
    from autoscaler.scale.aws.asg import AwsAsgPool  # noqa: PLC0415
    from autoscaler.scale.aws.sqs import SqsInterruptionQueue  # noqa: PLC0415

    url = config.aws.interruption_queue_url
    assert url is not None
    return InterruptionHandler(
        SqsInterruptionQueue(url, config.aws, metrics, session=aws()),
        pool if pool is not None else AwsAsgPool(config.aws, metrics, session=aws()),
        [p for rt in config.runner_types for p in rt.pools],
        source,
        events,
        interruptions=metrics.interruptions,
        errors=metrics.interruption_queue_errors,
        observed=observed,
        backoff=scaler,
        long_poll=min(LONG_POLL, config.poll_interval / 10),
    )
