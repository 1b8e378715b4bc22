"""The tick: a failing CI source never ends the loop and never loses the last picture."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.alerting.builtin_rules import UNREACHABLE_RULE
from autoscaler.app.service import run_loop
from autoscaler.config import Config
from autoscaler.controller import Controller
from autoscaler.domain import (
    Cause,
    ClockSkew,
    Job,
    JobStart,
    JobStatus,
    JobWait,
    Observation,
    PollBudget,
    QueueSnapshot,
    Runner,
    ScalingProblem,
    normalize_labels,
)
from autoscaler.errors import AutoscalerError, TransientError
from autoscaler.job_retry.decide import RetryReport
from autoscaler.observe.starts import ObjectiveStatus
from autoscaler.observe.waits import StageRegression
from autoscaler.scale.view import ScalingView
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine, load_config

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def config() -> Config:
    return load_config(
        poll_interval="30s", runner_types={"cpu": {"labels": ["self-hosted", "cpu"]}}
    )


class FakeSource:
    """A JobSource that replays scripted observations or errors."""

    def __init__(self, script: Sequence[Observation | AutoscalerError]) -> None:
        self.script = list(script)
        self.calls = 0

    def observe(self, now: datetime) -> Observation:
        item = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if isinstance(item, AutoscalerError):
            raise item
        return item

    def remove_runner(self, runner_id: int) -> None:
        raise AssertionError("not used here")

    def find_runner(self, name: str) -> Runner | None:
        raise AssertionError("not used here")


def observation(queued: int, at: datetime) -> Observation:
    jobs = tuple(
        Job(
            i,
            1,
            "org/app",
            "b",
            normalize_labels(["cpu"]),
            JobStatus.QUEUED,
            at - timedelta(minutes=5),
        )
        for i in range(queued)
    )
    return Observation(observed_at=at, jobs=jobs, runners=())


@dataclass
class RecordingScaler:
    calls: list[tuple[int, bool]]
    last_problems: tuple[ScalingProblem, ...] = ()
    last_view: ScalingView | None = None
    last_clock_skew: ClockSkew = field(default_factory=ClockSkew)
    returned: list[Sequence[Any]] = field(default_factory=list)

    def step(
        self,
        snapshot: QueueSnapshot,
        observation: Observation,
        now: datetime,
        *,
        observation_fresh: bool,
        dry_run: bool = False,
    ) -> Sequence[Any]:
        self.calls.append((snapshot.per_type["cpu"].queue_size, observation_fresh))
        decisions = [{"call": len(self.calls), "fresh": observation_fresh}]
        self.returned.append(decisions)
        return decisions

    def job_waits(
        self, starts: Sequence[JobStart], observation: Observation | None
    ) -> Sequence[JobWait]:
        return []


class ExplodingAlerts:
    def step(self, *args: Any, **kwargs: Any) -> Sequence[Any]:
        raise RuntimeError("bug in a stage")


def test_failed_poll_keeps_last_picture_and_metrics() -> None:
    metrics = Metrics()
    source = FakeSource([observation(3, T0), TransientError("github down", code="502")])
    controller = Controller(config(), source, metrics)

    first = controller.tick(T0)
    second = controller.tick(T0 + timedelta(seconds=30))

    assert first.poll_error is None and second.poll_error is not None
    assert second.snapshot is first.snapshot
    assert controller.last_successful_poll == T0
    value = metrics.registry.get_sample_value
    assert value("ci_autoscaler_queue_size", {"runner_type": "cpu"}) == 3.0
    assert value("ci_autoscaler_last_successful_poll_timestamp_seconds") == T0.timestamp()
    assert value("ci_autoscaler_polls_total", {"result": "transient"}) == 1.0
    assert value("ci_autoscaler_polls_total", {"result": "ok"}) == 1.0


def test_readiness_fails_after_three_intervals_without_a_good_poll() -> None:
    source = FakeSource([observation(0, T0), TransientError("down")])
    controller = Controller(config(), source, Metrics())
    assert not controller.ready(T0), "never polled: not ready"
    controller.tick(T0)
    assert controller.ready(T0 + timedelta(seconds=90))
    controller.tick(T0 + timedelta(seconds=60))
    assert not controller.ready(T0 + timedelta(seconds=91))


def test_scaler_sees_stale_data_as_stale() -> None:
    scaler = RecordingScaler(calls=[])
    source = FakeSource([observation(2, T0), TransientError("down")])
    controller = Controller(config(), source, Metrics(), scaler=scaler)
    controller.tick(T0)
    result = controller.tick(T0 + timedelta(seconds=30))
    assert scaler.calls == [(2, True), (2, False)]
    # The stale tick reports what the scaler decided on that tick, not a replay of the last.
    assert result.decisions is scaler.returned[1]


def test_a_failing_stage_does_not_stop_the_others() -> None:
    scaler = RecordingScaler(calls=[])
    metrics = Metrics()
    controller = Controller(
        config(), FakeSource([observation(1, T0)]), metrics, alerts=ExplodingAlerts(), scaler=scaler
    )
    result = controller.tick(T0)
    assert result.alerts == []
    assert scaler.calls == [(1, True)]
    assert (
        metrics.registry.get_sample_value(
            "ci_autoscaler_stage_failures_total", {"stage": "alerting"}
        )
        == 1.0
    )


def test_loop_survives_failing_ticks_and_stops_on_event() -> None:
    source = FakeSource([TransientError("down")])
    controller = Controller(config(), source, Metrics())
    stop = threading.Event()
    ticks = run_loop(controller, 0.0, stop, clock=lambda: T0, max_ticks=5)
    assert ticks == 5 and source.calls == 5
    stop.set()
    assert run_loop(controller, 0.0, stop, clock=lambda: T0) == 0


@dataclass
class RecordingAlerts:
    problems: list[Sequence[ScalingProblem] | None]
    skews: list[ClockSkew | None] = field(default_factory=list)
    unlisted: list[Sequence[str] | None] = field(default_factory=list)
    stages: list[Sequence[StageRegression] | None] = field(default_factory=list)

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
    ) -> Sequence[Any]:
        self.problems.append(problems)
        self.skews.append(clock_skew)
        self.unlisted.append(unlisted)
        self.stages.append(stages)
        return []


def test_a_poll_that_left_repositories_out_is_partial_and_alerting_hears_which() -> None:
    """A repository the source could not list (and holds no listing of) is not an empty
    one: the tick says the poll is partial, names it, and alerting gets the names; a
    failed poll tells alerting nothing (None), so the condition is kept as it was."""
    gap = replace(observation(1, T0), unlisted_repos=(("gpu", "loop"),))
    alerts = RecordingAlerts(problems=[])
    source = FakeSource([gap, TransientError("down"), observation(1, T0)])
    controller = Controller(config(), source, Metrics(), alerts=alerts)
    partial = controller.tick(T0)
    failed = controller.tick(T0 + timedelta(seconds=30))
    whole = controller.tick(T0 + timedelta(seconds=60))
    assert partial.poll_error is None
    assert partial.poll_partial == "1 repositories not listed: gpu (loop)"
    assert failed.poll_partial is None and whole.poll_partial is None
    assert alerts.unlisted == [["gpu"], None, []]


def test_alerting_hears_this_ticks_scaling_problems() -> None:
    denied = ScalingProblem("permanent", "cpu", "ci-cpu", "AccessDenied", "not allowed")
    scaler = RecordingScaler(calls=[], last_problems=(denied,))
    alerts = RecordingAlerts(problems=[])
    controller = Controller(
        config(),
        FakeSource([TransientError("down"), observation(1, T0)]),
        Metrics(),
        alerts=alerts,
        scaler=scaler,
    )
    controller.tick(T0)  # no observation yet: scaling cannot run, its alerts stay as they are
    controller.tick(T0 + timedelta(seconds=30))
    assert alerts.problems == [None, (denied,)]


def test_the_tick_records_why_jobs_wait_and_alerting_hears_it() -> None:
    """The diagnosis runs in the tick, after scaling and before alerting, on the same
    values: here no pools are configured, and then the poll fails (the picture is stale)."""
    alerts = RecordingCauses()
    source = FakeSource([observation(2, T0), TransientError("down")])
    controller = Controller(config(), source, Metrics(), alerts=alerts)
    first = controller.tick(T0)
    assert first.causes == {"cpu": (Cause("scaling_disabled", "cpu has no pools configured"),)}
    second = controller.tick(T0 + timedelta(minutes=2))
    assert [c.code for c in second.causes["cpu"]] == ["github_stale", "scaling_disabled"]
    assert alerts.causes == [first.causes, second.causes]


def started_job(job_id: int, at: datetime, waited: float) -> Job:
    created = at - timedelta(seconds=waited)
    labels = normalize_labels(["cpu"])
    return Job(job_id, 1, "org/app", "b", labels, JobStatus.IN_PROGRESS, created, started_at=at)


def test_each_started_job_is_one_queue_time_observation() -> None:
    metrics = Metrics()
    job = started_job(7, T0 + timedelta(seconds=20), waited=95)
    source = FakeSource(
        [
            Observation(T0, (), ()),
            Observation(T0 + timedelta(seconds=30), (job,), ()),
            Observation(T0 + timedelta(seconds=60), (job,), ()),
        ]
    )
    controller = Controller(config(), source, metrics)
    for seconds in (0, 30, 60):
        controller.tick(T0 + timedelta(seconds=seconds))
    value = metrics.registry.get_sample_value
    labels = {"runner_type": "cpu"}
    assert value("ci_autoscaler_job_queue_seconds_count", labels) == 1
    assert value("ci_autoscaler_job_queue_seconds_sum", labels) == 95
    assert value("ci_autoscaler_job_queue_seconds_bucket", {**labels, "le": "120.0"}) == 1


def test_a_bug_in_the_diagnosis_does_not_silence_the_alerts() -> None:
    """Regression guard: a diagnosis that raises (here: a snapshot naming a type the config
    does not have is fine, so the scaler's view is made to lie) must leave the alert stage
    running and be counted."""
    alerts = RecordingCauses()
    scaler = RecordingScaler(calls=[], last_view=BrokenView())  # type: ignore[arg-type]
    metrics = Metrics()
    controller = Controller(
        config_with_pools(), FakeSource([observation(1, T0)]), metrics, alerts=alerts, scaler=scaler
    )
    result = controller.tick(T0)
    assert result.causes == {} and alerts.causes == [{}]
    value = metrics.registry.get_sample_value
    assert value("ci_autoscaler_stage_failures_total", {"stage": "diagnosis"}) == 1.0


class BrokenView:
    @property
    def plan(self) -> object:
        raise RuntimeError("bug")

    pools: dict[str, object] = {}


def config_with_pools() -> Config:
    return load_config(
        poll_interval="30s",
        runner_types={"cpu": {"labels": ["self-hosted", "cpu"], "pools": ["ci-cpu"]}},
    )


@dataclass
class RecordingCauses:
    causes: list[Mapping[str, Sequence[Cause]] | None] = field(default_factory=list)

    def step(
        self, *args: Any, causes: Mapping[str, Sequence[Cause]] | None = None, **kw: Any
    ) -> Sequence[Any]:
        self.causes.append(causes)
        return []


def test_a_late_rush_fires_the_queue_time_objective_alert_with_its_cause() -> None:
    """Ten cpu jobs start after waiting 10 minutes against a 5-minute, 95% objective:
    every window burns at 20x the budget, so the built-in alert fires, per runner type,
    with the type's Cause line (no pools here: scaling_disabled)."""
    cfg = load_config(
        poll_interval="30s",
        runner_types={
            "cpu": {
                "labels": ["self-hosted", "cpu"],
                "slo": {"queue_time": "5m", "objective": 0.95},
            }
        },
        state={"path": ":memory:"},
        alerts={"receivers": {"oncall": {"type": "webhook", "url": "http://127.0.0.1:9/"}}},
    )
    later = T0 + timedelta(seconds=30)
    late = tuple(started_job(100 + i, later, waited=600) for i in range(10))
    source = FakeSource(
        [observation(1, T0), Observation(later, observation(1, later).jobs + late, ())]
    )
    metrics = Metrics()
    engine = alert_engine(cfg.alerts, metrics=metrics)
    controller = Controller(cfg, source, metrics, alerts=engine)
    controller.tick(T0)
    result = controller.tick(later)
    [alert] = [a for a in result.alerts if a.rule == "Queue-time objective burning"]
    assert alert.state == "firing" and alert.title.endswith("(cpu)")
    assert alert.values["burn_rate_5m"] == 20 and alert.values["jobs_started_1h"] == 10
    assert alert.cause == "scaling_disabled (cpu has no pools configured)"
    value = metrics.registry.get_sample_value
    assert (
        value("ci_autoscaler_jobs_within_queue_time_objective_total", {"runner_type": "cpu"}) == 0
    )
    assert value("ci_autoscaler_queue_time_objective_attained_ratio", {"runner_type": "cpu"}) == 0


def test_alerting_hears_the_clock_skew_measured_this_tick() -> None:
    """The skew alert reads what the adapters measured: GitHub's from the poll when no
    scaler runs, both peers' from the scaler (which decided with them) when one does."""
    skewed = replace(observation(0, T0), clock_skew_seconds=-75.0)
    alerts = RecordingAlerts(problems=[])
    Controller(config(), FakeSource([skewed]), Metrics(), alerts=alerts).tick(T0)
    assert alerts.skews == [ClockSkew(github=-75.0)]

    measured = ClockSkew(github=-75.0, aws=3.0)
    scaler = RecordingScaler(calls=[], last_clock_skew=measured)
    alerts = RecordingAlerts(problems=[])
    Controller(config(), FakeSource([skewed]), Metrics(), alerts=alerts, scaler=scaler).tick(T0)
    assert alerts.skews == [measured]


class DeepJsonSource:
    """A source whose adapter let an exception escape (deeply nested JSON once did)."""

    def __init__(self) -> None:
        self.calls = 0

    def observe(self, now: datetime) -> Observation:
        self.calls += 1
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")

    def remove_runner(self, runner_id: int) -> None:
        raise AssertionError("not used here")

    def find_runner(self, name: str) -> Runner | None:
        raise AssertionError("not used here")


def test_an_exception_escaping_the_source_is_a_failed_poll_and_alerting_still_runs() -> None:
    """Deeply nested JSON from GitHub raised RecursionError out of observe(): the tick
    aborted, and with it the alerting stage, so "GitHub unreachable" never fired."""
    cfg = config()
    metrics = Metrics()
    engine = alert_engine(cfg.alerts, metrics=metrics)
    controller = Controller(cfg, DeepJsonSource(), metrics, alerts=engine)
    first = controller.tick(T0)
    later = controller.tick(T0 + timedelta(minutes=11))
    assert first.poll_error == "RecursionError: unexpected error in the CI source"
    value = metrics.registry.get_sample_value
    assert value("ci_autoscaler_polls_total", {"result": "error"}) == 2.0
    assert value("ci_autoscaler_stage_failures_total", {"stage": "alerting"}) is None
    assert [(a.rule, a.state) for a in later.alerts] == [(UNREACHABLE_RULE, "firing")]


def test_a_tick_longer_than_the_interval_is_logged_counted_and_the_next_starts_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A first poll of a large org can take longer than the interval. The loop waited
    `interval - took` (nothing), said nothing and counted nothing: a controller ticking
    back to back looked healthy. Ticks still never overlap; the overrun is logged and
    counted, and the next tick starts at once rather than an interval later."""
    clock = {"now": 0.0}
    durations = iter([45.0, 10.0, 10.0])

    class Slow(FakeSource):
        def observe(self, now: datetime) -> Observation:
            began.append(clock["now"])
            clock["now"] += next(durations)
            return super().observe(now)

    began: list[float] = []
    metrics = Metrics()
    controller = Controller(config(), Slow([observation(1, T0)]), metrics)
    waits: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            clock["now"] += timeout or 0.0
            return False

    with caplog.at_level(logging.WARNING, logger="autoscaler.app.service"):
        ticks = run_loop(
            controller, 30.0, Stop(), clock=lambda: T0, max_ticks=3, monotonic=lambda: clock["now"]
        )
    assert ticks == 3
    assert began == [0.0, 45.0, 75.0]  # one at a time; the second at once, the third on time
    assert waits == [0.0, 20.0]
    assert metrics.registry.get_sample_value("ci_autoscaler_tick_overruns_total") == 1.0
    assert [r.getMessage() for r in caplog.records] == [
        "tick took 45.0s, longer than the 30s poll interval; the next one starts now"
    ]


@dataclass
class WaitingScaler(RecordingScaler):
    """A scaler whose runners took jobs: each tick's waits are the next of ``waits``."""

    waits: list[list[JobWait]] = field(default_factory=list)

    def job_waits(
        self, starts: Sequence[JobStart], observation: Observation | None
    ) -> Sequence[JobWait]:
        return self.waits.pop(0) if self.waits else []


@dataclass
class RecordingTracer:
    traced: list[Sequence[JobWait]] = field(default_factory=list)
    fail: bool = False

    def job_waits(self, waits: Sequence[JobWait]) -> None:
        if self.fail:
            raise RuntimeError("a bug in the tracer")
        self.traced.append(waits)


def boots(n: int, seconds: float, start: datetime) -> list[JobWait]:
    return [
        JobWait("cpu", (1.0, 1.0, 10.0, seconds, 2.0), started_at=start + timedelta(minutes=i))
        for i in range(n)
    ]


def test_each_ticks_waits_are_traced_and_judged_for_a_regressed_stage() -> None:
    """The day before: 30 jobs booting in 90 s; the last hour: 30 booting in 240 s. The
    tracer gets each tick's waits, and alerting hears the boot stage regressed."""
    now = T0 + timedelta(days=1)
    day_before = boots(30, 90.0, now - timedelta(hours=12))
    last_hour = boots(30, 240.0, now - timedelta(minutes=40))
    scaler = WaitingScaler(calls=[], waits=[day_before, last_hour])
    alerts = RecordingAlerts(problems=[])
    tracer = RecordingTracer()
    controller = Controller(
        config(),
        FakeSource([observation(0, now)]),
        Metrics(),
        alerts=alerts,
        scaler=scaler,
        tracer=tracer,
    )
    controller.tick(now)
    controller.tick(now + timedelta(seconds=30))
    assert tracer.traced == [day_before, last_hour]
    first, second = alerts.stages
    assert first is not None and not any(s.regressed for s in first)  # no recent jobs yet
    assert second is not None
    assert [(s.runner_type, s.stage) for s in second if s.regressed] == [("cpu", "boot")]


def test_a_failing_tracer_does_not_stop_the_tick() -> None:
    scaler = WaitingScaler(calls=[], waits=[boots(1, 90.0, T0)])
    alerts = RecordingAlerts(problems=[])
    metrics = Metrics()
    controller = Controller(
        config(),
        FakeSource([observation(0, T0)]),
        metrics,
        alerts=alerts,
        scaler=scaler,
        tracer=RecordingTracer(fail=True),
    )
    controller.tick(T0)
    assert len(alerts.stages) == 1
    failed = metrics.registry.get_sample_value(
        "ci_autoscaler_stage_failures_total", {"stage": "tracing"}
    )
    assert failed == 1
