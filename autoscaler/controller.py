"""One reconcile tick: observe -> compute -> decide -> act -> report.

Scaling runs before alerting so that what scaling hit this tick (a permanent cloud error,
every pool of a type out of capacity) is alerted in the same tick, and so that the clock
skew the scaler measured (GitHub's from the poll, AWS's from its answers) is alerted on.

The controller owns no clock and no sleep: ``tick(now)`` is given the time, so the same
code runs in the live loop, in ``once --dry-run`` and under a virtual clock. The CI source
failing never ends the loop: the last good picture stays, its age shows in
``ci_autoscaler_last_successful_poll_timestamp_seconds`` and readiness fails once it is
older than three poll intervals. Readiness also fails while a stage reports a problem
into the injected :class:`autoscaler.health.Health` (the alert stage: its state store
cannot be written; the lease keeper: the state table cannot be reached), so the controller
stays pure: it reads what adapters reported. With several controllers on one state table
only the holder of the leader lease acts (``leadership``); the others' ticks are dry runs.
Whatever the source raises (a classified error, or an
exception that escaped its adapter) is a failed poll, so the alerting stage still runs
and "GitHub unreachable" still fires.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from autoscaler.domain import (
    Cause,
    ClockSkew,
    JobStart,
    JobWait,
    Observation,
    PollBudget,
    QueueSnapshot,
    RunnerType,
    ScalingProblem,
)
from autoscaler.errors import AutoscalerError
from autoscaler.health import Health
from autoscaler.job_retry.decide import RetryReport
from autoscaler.observe.queue import compute_queue
from autoscaler.observe.starts import ObjectiveStatus, StartTracker
from autoscaler.observe.waits import (
    RecentWaits,
    StageRegression,
    StageSummary,
    stage_regressions,
)
from autoscaler.ports import JobSource
from autoscaler.scale.diagnosis import diagnose
from autoscaler.scale.view import ScalingView

if TYPE_CHECKING:
    from autoscaler.config import Config

log = logging.getLogger(__name__)

#: Readiness fails once the last successful poll is older than this many intervals.
STALE_READY_INTERVALS = 3
#: Scaling in needs an observation younger than this many intervals.
FRESH_SCALE_INTERVALS = 2
#: Decisions that changed something, kept for the status page (newest last).
RECENT_DECISIONS = 20
#: How far back :attr:`Controller.queue_history` reaches (the page's spark lines).
QUEUE_HISTORY_SECONDS = 3600.0


class Reporter(Protocol):
    """Where the controller reports what it saw (autoscaler.telemetry.Metrics)."""

    def poll_succeeded(self, snapshot: QueueSnapshot, now: datetime) -> None: ...

    def jobs_started(
        self, starts: Sequence[JobStart], objectives: Mapping[str, ObjectiveStatus]
    ) -> None: ...

    def job_waits(self, waits: Sequence[JobWait]) -> None: ...

    def poll_failed(self, kind: str) -> None: ...

    def stage_failed(self, stage: str) -> None: ...

    def tick_finished(self, seconds: float) -> None: ...

    def tick_overran(self) -> None: ...


class WaitTracing(Protocol):
    """Where each job's wait goes as a trace (autoscaler.tracing.WaitTracer)."""

    def job_waits(self, waits: Sequence[JobWait]) -> None: ...


class AlertStep(Protocol):
    """The alerting stage (autoscaler.alerting.engine.AlertEngine)."""

    def step(
        self,
        snapshot: QueueSnapshot | None,
        last_successful_poll: datetime | None,
        now: datetime,
        *,
        dry_run: bool = False,
        problems: Sequence[ScalingProblem] | None = None,
        clock_skew: ClockSkew | None = None,
        budget: PollBudget | None = None,
        causes: Mapping[str, Sequence[Cause]] | None = None,
        objectives: Mapping[str, ObjectiveStatus] | None = None,
        retries: RetryReport | None = None,
        unlisted: Sequence[str] | None = None,
        stages: Sequence[StageRegression] | None = None,
    ) -> Sequence[Any]: ...


class RetryStep(Protocol):
    """The job-retry stage (autoscaler.job_retry.stage.RetryStage)."""

    def step(self, now: datetime, *, dry_run: bool = False) -> RetryReport: ...


class InterruptionStep(Protocol):
    """Reads the EC2 interruption queue (autoscaler.job_retry.interruptions.InterruptionHandler)."""

    def step(self, now: datetime, *, dry_run: bool = False) -> Any: ...


class ScaleStep(Protocol):
    """The scaling stage (autoscaler.scale.scaler.Scaler)."""

    @property
    def last_problems(self) -> Sequence[ScalingProblem]:
        """What the last step hit that on-call must hear about (the alert stage pages)."""
        ...

    @property
    def last_clock_skew(self) -> ClockSkew:
        """The peers' clock skew the last step decided with (the alert stage checks it)."""
        ...

    @property
    def last_view(self) -> ScalingView | None:
        """The pools, plan and state of the last step (None: it described nothing)."""
        ...

    def step(
        self,
        snapshot: QueueSnapshot,
        observation: Observation,
        now: datetime,
        *,
        observation_fresh: bool,
        dry_run: bool = False,
    ) -> Sequence[Any]: ...

    def job_waits(
        self, starts: Sequence[JobStart], observation: Observation | None
    ) -> Sequence[JobWait]:
        """Where each started job's wait went, for jobs on runners the stage asked for."""
        ...


class Leadership(Protocol):
    """Whether this controller may act: it holds the leader lease with its safety margin
    (``state.backend: dynamodb``; :class:`autoscaler.state.lease.Lease`)."""

    def acting(self) -> bool: ...


@dataclass
class TickResult:
    """What one tick saw and did; ``once`` prints it."""

    now: datetime
    snapshot: QueueSnapshot | None
    poll_error: str | None = None
    poll_partial: str | None = None
    """The poll worked but left repositories out (they have no listing): which, and why."""
    alerts: Sequence[Any] = field(default_factory=list)
    decisions: Sequence[Any] = field(default_factory=list)
    causes: Mapping[str, tuple[Cause, ...]] = field(default_factory=dict)
    """Runner type -> why its jobs wait (:func:`autoscaler.scale.diagnosis.diagnose`)."""
    scaling: ScalingView | None = None
    """The pools, plan and back-offs the scaling stage saw (None: it did not run)."""
    retries: RetryReport | None = None
    """What the job-retry stage judged and did this tick (None: it did not run)."""
    waits: Mapping[str, StageSummary] = field(default_factory=dict)
    """Runner type -> where its recent jobs' waits went (jobs on runners we asked for)."""
    dry_run: bool = False


#: Repositories named in a partial poll's description at most (the rest are counted).
PARTIAL_NAMED = 5


def partial(unlisted: Sequence[tuple[str, str]]) -> str | None:
    """What a partial poll left out, for people (None: nothing)."""
    if not unlisted:
        return None
    named = ", ".join(f"{repo} ({why})" for repo, why in unlisted[:PARTIAL_NAMED])
    more = len(unlisted) - PARTIAL_NAMED
    tail = f" and {more} more" if more > 0 else ""
    return f"{len(unlisted)} repositories not listed: {named}{tail}"


class Controller:
    """Holds the state between ticks; all I/O goes through the injected ports."""

    def __init__(
        self,
        config: Config,
        source: JobSource,
        reporter: Reporter,
        *,
        alerts: AlertStep | None = None,
        scaler: ScaleStep | None = None,
        health: Health | None = None,
        retries: RetryStep | None = None,
        interruptions: InterruptionStep | None = None,
        leadership: Leadership | None = None,
        tracer: WaitTracing | None = None,
    ) -> None:
        self.config = config
        #: Each job's wait as a trace (``telemetry.otlp_endpoint``); None: no traces.
        self.tracer = tracer
        #: Jobs lost to infrastructure: re-run after scaling, before alerting.
        self.retries = retries
        #: EC2 interruption warnings: read before scaling, so a warned pool is backed off.
        self.interruptions = interruptions
        self.source = source
        self.reporter = reporter
        self.alerts = alerts
        self.scaler = scaler
        #: What the stages report keeps the controller from being ready (see ready()).
        self.health = health if health is not None else Health()
        #: None: this controller is the only one (its state backend needs no lease).
        self.leadership = leadership
        self.types: tuple[RunnerType, ...] = tuple(rt.runner_type for rt in config.runner_types)
        self.last_observation: Observation | None = None
        self.last_snapshot: QueueSnapshot | None = None
        self.last_successful_poll: datetime | None = None
        self.last_result: TickResult | None = None
        self.starts = StartTracker(config)
        #: The jobs the last poll saw start (their waits are split after scaling).
        self.last_starts: Sequence[JobStart] = ()
        #: Where recent jobs' waits went, per runner type (``explain``, the page).
        rule = config.alerts.builtin.stage_regression
        self.waits = RecentWaits(window=rule.recent + rule.baseline)
        self.objectives: Mapping[str, ObjectiveStatus] = {}
        #: (when, decision) for decisions that changed something, newest last.
        self.recent_decisions: deque[tuple[datetime, Any]] = deque(maxlen=RECENT_DECISIONS)
        #: (observed at, runner type -> queued jobs) of each poll in the last hour, oldest
        #: first: the page's trend per type.
        self.queue_history: deque[tuple[datetime, Mapping[str, int]]] = deque()

    def tick(self, now: datetime, *, dry_run: bool = False) -> TickResult:
        dry_run = dry_run or not self.acting()  # a follower observes and decides; acts on nothing
        result = TickResult(now=now, snapshot=None, dry_run=dry_run)
        started = time.perf_counter()
        try:
            fresh = self._observe(now, result)
            observation_fresh = fresh and self.observation_is_fresh(now)
            alerts, scaler = self.alerts, self.scaler
            problems: Sequence[ScalingProblem] | None = None
            stages: Sequence[StageRegression] | None = None
            skew: ClockSkew | None = None
            if self.last_observation is not None:
                skew = ClockSkew(github=self.last_observation.clock_skew_seconds)
            interruptions = self.interruptions
            if interruptions is not None:
                self._guarded("interruptions", lambda: [interruptions.step(now, dry_run=dry_run)])
            if (
                scaler is not None
                and self.last_observation is not None
                and self.last_snapshot is not None
            ):
                observation, snapshot = self.last_observation, self.last_snapshot
                result.decisions = self._guarded(
                    "scaling",
                    lambda: scaler.step(
                        snapshot,
                        observation,
                        now,
                        observation_fresh=observation_fresh,
                        dry_run=dry_run,
                    ),
                )
                problems = scaler.last_problems
                skew = scaler.last_clock_skew
                result.scaling = scaler.last_view
                starts, self.last_starts = self.last_starts, ()
                waits = self._guarded("waits", lambda: scaler.job_waits(starts, observation))
                self.waits.add(waits)
                self.reporter.job_waits(waits)
                if self.tracer is not None:
                    self._trace(self.tracer, waits)
                rule = self.config.alerts.builtin.stage_regression
                stages = self._guarded(
                    "waits", lambda: stage_regressions(self.waits.all(), now, rule)
                )
            result.waits = self.waits.summary()
            try:
                result.causes = diagnose(
                    result.snapshot,
                    self.last_observation,
                    self.config,
                    now,
                    scaling=result.scaling,
                    problems=problems or (),
                    observation_fresh=observation_fresh,
                    last_successful_poll=self.last_successful_poll,
                    dry_run=dry_run,
                )
            except Exception:  # a bug in diagnosis must not silence the alerts
                log.exception("diagnosis failed; the loop goes on")
                self.reporter.stage_failed("diagnosis")
            retry_report: RetryReport | None = None
            if self.retries is not None:
                retry_step = self.retries
                reports = self._guarded(
                    "job_retry", lambda: [retry_step.step(now, dry_run=dry_run)]
                )
                retry_report = reports[0] if reports else None
                result.retries = retry_report
            if alerts is not None:
                budget = self.last_observation.budget if fresh and self.last_observation else None
                unlisted = (
                    [repo for repo, _ in self.last_observation.unlisted_repos]
                    if fresh and self.last_observation
                    else None
                )
                result.alerts = self._guarded(
                    "alerting",
                    lambda: alerts.step(
                        result.snapshot if fresh else None,
                        self.last_successful_poll,
                        now,
                        dry_run=dry_run,
                        problems=problems,
                        clock_skew=skew,
                        budget=budget,
                        causes=result.causes,
                        objectives=self.objectives,
                        retries=retry_report,
                        unlisted=unlisted,
                        stages=stages,
                    ),
                )
        finally:
            self.reporter.tick_finished(time.perf_counter() - started)
        if not dry_run:
            self.recent_decisions.extend(
                (now, d) for d in result.decisions if getattr(d, "action", "hold") != "hold"
            )
        self._remember_queues(result.snapshot)
        self.last_result = result
        return result

    def _remember_queues(self, snapshot: QueueSnapshot | None) -> None:
        if snapshot is None:
            return
        at = snapshot.observed_at
        sizes = {name: stats.queue_size for name, stats in snapshot.per_type.items()}
        self.queue_history.append((at, sizes))
        while (at - self.queue_history[0][0]).total_seconds() > QUEUE_HISTORY_SECONDS:
            self.queue_history.popleft()

    def acting(self) -> bool:
        """False on a follower: another controller holds the lease. Its ticks run as dry
        runs (poll, queue, decisions, alert views and metrics, nothing changed or sent), so
        it takes over with a warm picture."""
        return self.leadership is None or self.leadership.acting()

    def _observe(self, now: datetime, result: TickResult) -> bool:
        """Poll the source; on failure keep the last good picture. True when this poll worked."""
        try:
            observation = self.source.observe(now)
        except AutoscalerError as exc:
            self.reporter.poll_failed(exc.kind)
            result.poll_error = f"{type(exc).__name__}: {exc}"
            result.snapshot = self.last_snapshot
            log.warning("poll of the CI provider failed (%s): %s", exc.kind, exc)
            return False
        except Exception as exc:  # escaped the adapter (a bug, a RecursionError): the last line
            self.reporter.poll_failed("error")
            result.poll_error = f"{type(exc).__name__}: unexpected error in the CI source"
            result.snapshot = self.last_snapshot
            log.exception("poll of the CI provider failed unexpectedly; the tick goes on")
            return False
        snapshot = compute_queue(
            observation.jobs,
            observation.runners,
            self.types,
            now,
            self.config.github.hosted_labels,
        )
        self.last_observation, self.last_snapshot = observation, snapshot
        self.last_successful_poll = now
        result.poll_partial = partial(observation.unlisted_repos)
        if result.poll_partial is not None:
            log.warning("poll of the CI provider is partial: %s", result.poll_partial)
        self.reporter.poll_succeeded(snapshot, now)
        starts = self.starts.observe(observation.jobs, now)
        self.last_starts = starts
        self.objectives = self.starts.status(now)
        self.reporter.jobs_started(starts, self.objectives)
        result.snapshot = snapshot
        return True

    def _trace(self, tracer: WaitTracing, waits: Sequence[JobWait]) -> None:
        """Hand the waits to the tracer; a bug there never ends the loop."""
        try:
            tracer.job_waits(waits)
        except Exception:
            log.exception("tracing the job waits failed; the loop goes on")
            self.reporter.stage_failed("tracing")

    def _guarded(self, stage: str, run: Callable[[], Sequence[Any]]) -> Sequence[Any]:
        """Run a stage; a bug or outage in one stage never ends the loop or skips the others."""
        try:
            out: Sequence[Any] = run()
        except Exception:
            log.exception("%s stage failed; the loop goes on", stage)
            self.reporter.stage_failed(stage)
            return []
        return out

    def observation_is_fresh(self, now: datetime) -> bool:
        return self._poll_age_below(now, FRESH_SCALE_INTERVALS)

    def ready(self, now: datetime) -> bool:
        """Ready while the last successful poll is younger than three poll intervals and no
        stage reports a problem (:attr:`health`)."""
        return not self.not_ready_reasons(now)

    def not_ready_reasons(self, now: datetime) -> list[str]:
        """Why the controller is not ready, one line each; empty when it is."""
        reasons: list[str] = []
        if not self._poll_age_below(now, STALE_READY_INTERVALS):
            last = self.last_successful_poll
            reasons.append(
                "never polled"
                if last is None
                else f"last successful poll {last:%Y-%m-%d %H:%M:%S} UTC is stale"
            )
        reasons += [
            f"{name}: {problem}" for name, problem in sorted(self.health.problems().items())
        ]
        return reasons

    def _poll_age_below(self, now: datetime, intervals: int) -> bool:
        if self.last_successful_poll is None:
            return False
        age = (now - self.last_successful_poll).total_seconds()
        return age <= intervals * self.config.poll_interval
