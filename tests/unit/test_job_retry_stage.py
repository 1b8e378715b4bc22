"""The retry stage over hand-written fakes: re-run once, 403 said once, 422 a no-op,
idempotent across ticks, restarts and a second controller on the same ledger."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.job_retry_alerts import DENIED_RULE, EXHAUSTED_RULE
from autoscaler.config import Config
from autoscaler.domain import Annotation, CompletedJob, RunProgress
from autoscaler.errors import (
    AuthenticationError,
    NotFoundError,
    RejectedError,
    StateUnusableError,
    TransientError,
)
from autoscaler.job_retry.decide import ALREADY, DEFERRED, DENIED, EXHAUSTED, FAILED, RERUN, SKIP
from autoscaler.job_retry.ledger import DENIED_PAUSE
from autoscaler.job_retry.model import SPOT_INTERRUPTION, InstanceEvent
from autoscaler.job_retry.stage import SETTLE, RetryStage
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine, load_config

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
INSTANCE = "i-0abc123def4567890"
LOST = "The self-hosted runner: ci-gpu-i-0abc123def4567890 lost communication with the server."


def config(**retry: Any) -> Config:
    return load_config(
        runner_types={"gpu": {"labels": ["self-hosted", "gpu"]}},
        job_retry={"enabled": True, **retry},
    )


def job(job_id: int = 1, *, attempt: int = 1, **kw: Any) -> CompletedJob:
    base = CompletedJob(
        repo="pytorch",
        run_id=100 + job_id,
        job_id=job_id,
        name=f"test {job_id}",
        conclusion="failure",
        run_attempt=attempt,
        runner_name=f"ci-gpu-{INSTANCE}",
        labels=frozenset({"self-hosted", "gpu"}),
        started_at=NOW - timedelta(minutes=30),
        completed_at=NOW - timedelta(minutes=5),
        failed_step=True,
        annotations=(Annotation("failure", LOST),),
    )
    return replace(base, **kw)


class Source:
    """Hands each scripted batch once, like the poll hands each completed run once."""

    def __init__(self, *batches: Sequence[CompletedJob]) -> None:
        self.batches = list(batches)

    def completed_jobs(self, now: datetime) -> Sequence[CompletedJob]:
        return self.batches.pop(0) if self.batches else ()


#: A finished run at its first attempt: a 403 on its job's re-run means no permission.
COMPLETE = RunProgress("completed", 1)


class Rerunner:
    """Answers re-runs with ``error`` (None: 201) and run lookups with ``progress``."""

    def __init__(
        self,
        error: Exception | None = None,
        progress: RunProgress | Exception = COMPLETE,
    ) -> None:
        self.calls: list[tuple[str, int]] = []
        self.looked_up: list[tuple[str, int]] = []
        self.error = error
        self.progress = progress

    def rerun_job(self, repo: str, job_id: int) -> None:
        self.calls.append((repo, job_id))
        if self.error is not None:
            raise self.error

    def run_progress(self, repo: str, run_id: int) -> RunProgress:
        self.looked_up.append((repo, run_id))
        if isinstance(self.progress, Exception):
            raise self.progress
        return self.progress


class Store:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.fail = False

    def load_job_retries(self) -> dict[str, str]:
        if self.fail:
            raise StateUnusableError("broken", path="x", code="io", operation="load")
        return dict(self.data)

    def save_job_retries(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        if self.fail:
            raise StateUnusableError("broken", path="x", code="io", operation="save")
        for k in drop:
            self.data.pop(k, None)
        self.data.update(put)


def stage(
    source: Source, rerunner: Rerunner, store: Store | None = None, **retry: Any
) -> tuple[RetryStage, Metrics]:
    metrics = Metrics(CollectorRegistry())
    return RetryStage(config(**retry), source, rerunner, metrics, store=store), metrics


def count(metrics: Metrics, reason: str, result: str, runner_type: str = "gpu") -> float:
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_job_retries_total",
        {"runner_type": runner_type, "reason": reason, "result": result},
    )
    return value or 0.0


def test_a_lost_runner_is_rerun_once_and_counted() -> None:
    rerunner = Rerunner()
    s, metrics = stage(Source([job(1)], [job(1)]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [RERUN]
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [ALREADY]
    assert rerunner.calls == [("pytorch", 1)]
    assert count(metrics, "runner_lost", RERUN) == 1


def test_a_users_failure_is_never_rerun() -> None:
    rerunner = Rerunner()
    s, metrics = stage(Source([job(1, annotations=())]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [SKIP]
    assert rerunner.calls == []
    assert count(metrics, "user", SKIP) == 1


def test_a_fresh_failure_waits_for_a_late_interruption_event() -> None:
    """The Spot warning's event can reach the queue after GitHub reports the failure: a
    failure with no evidence is judged only after SETTLE, and the event turns it."""
    fresh = job(1, annotations=(), completed_at=NOW - timedelta(seconds=10))
    rerunner = Rerunner()
    s, _ = stage(Source([fresh]), rerunner)
    assert s.step(NOW).choices == ()
    assert list(s.pending) == [fresh.key]
    s.events.add(InstanceEvent(INSTANCE, SPOT_INTERRUPTION, NOW - timedelta(minutes=3)))
    (choice,) = s.step(NOW + SETTLE).choices
    assert (choice.result, choice.verdict.reason) == (RERUN, "spot_interruption")


def test_403_is_said_once_alerted_once_and_stops_trying(caplog: pytest.LogCaptureFixture) -> None:
    denied = AuthenticationError("GitHub POST /x: 403 Forbidden", code="403")
    rerunner = Rerunner(denied)
    s, _ = stage(Source([job(1), job(2)], [job(3)]), rerunner)
    first = s.step(NOW)
    assert [c.result for c in first.choices] == [DENIED, DENIED]
    second = s.step(NOW + timedelta(seconds=30))
    assert {c.result for c in second.choices} == {DENIED}
    assert rerunner.calls == [("pytorch", 1)]  # one call, then nothing in that repository
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    assert "Actions: read and write" in errors[0].getMessage()
    assert set(second.denied) == {"pytorch"}


def test_a_denial_stays_one_incident_across_the_probes_until_a_re_run_goes_through() -> None:
    """Regression: the denial was forgotten when the pause ended, so "Job re-runs not
    permitted" resolved although nothing was fixed, and fired again when the next probe
    was refused. It stays until a re-run in that repository goes through."""
    rerunner = Rerunner(AuthenticationError("403", code="403"))
    s, _ = stage(Source([job(1)], [], [job(2)], [], [job(3)]), rerunner)
    assert set(s.step(NOW).denied) == {"pytorch"}
    after_pause = NOW + DENIED_PAUSE + timedelta(minutes=1)
    assert set(s.step(after_pause).denied) == {"pytorch"}  # paused no more, still denied
    assert set(s.step(after_pause + timedelta(minutes=1)).denied) == {"pytorch"}  # probe: 403
    assert len(rerunner.calls) == 2
    later = after_pause + DENIED_PAUSE + timedelta(minutes=2)
    rerunner.error = None  # the permission was granted
    assert s.step(later).denied == {}  # the next probe goes through: the incident ends
    assert rerunner.calls[2:] == [("pytorch", 1), ("pytorch", 2)]  # what waited, re-run


@pytest.mark.parametrize(
    ("progress", "result", "paused"),
    [
        pytest.param(RunProgress("completed", 2), ALREADY, False, id="lost-201-sent-again"),
        pytest.param(RunProgress("in_progress", 3), ALREADY, False, id="someone-reran-it"),
        pytest.param(RunProgress("in_progress", 1), DEFERRED, False, id="run-still-going"),
        pytest.param(RunProgress("completed", 1), DENIED, True, id="no-permission"),
        pytest.param(TransientError("503", code="503"), DENIED, True, id="run-unreadable"),
    ],
)
def test_a_403_pauses_the_repository_only_when_it_means_no_permission(
    progress: RunProgress | Exception, result: str, paused: bool
) -> None:
    """GitHub answers a re-run 403 for three reasons. A re-run whose 201 was lost and is
    sent again gets 403 ("not the latest attempt"); so does a run re-run by someone else or
    still in progress. Before, each of them paused the repository for hours and paged
    "Job re-runs not permitted". Now the run is read first: a newer attempt means the job
    was re-run (never asked again), a run still going is asked again later, and only a
    complete run at the failed job's attempt (or one that cannot be read) means permission.
    """
    rerunner = Rerunner(AuthenticationError("403", code="403"), progress)
    s, metrics = stage(Source([job(1)], [job(1)]), rerunner)
    report = s.step(NOW)
    assert [c.result for c in report.choices] == [result]
    assert rerunner.looked_up == [("pytorch", 101)]
    assert (set(report.denied) == {"pytorch"}) is paused
    assert count(metrics, "runner_lost", result) == 1
    again = s.step(NOW + timedelta(seconds=30)).choices
    if result == ALREADY:  # recorded as re-run: never sent again
        assert [c.result for c in again] == [ALREADY]
        assert rerunner.calls == [("pytorch", 1)]


def test_422_already_rerun_is_a_no_op_never_asked_again() -> None:
    rerunner = Rerunner(RejectedError("422 already re-run", code="422"))
    s, metrics = stage(Source([job(1)], [job(1)]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [ALREADY]
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [ALREADY]
    assert rerunner.calls == [("pytorch", 1)]
    assert count(metrics, "runner_lost", ALREADY) == 2


def test_a_deleted_job_is_not_asked_again() -> None:
    rerunner = Rerunner(NotFoundError("404", code="404"))
    s, _ = stage(Source([job(1)]), rerunner)
    s.step(NOW)
    s.step(NOW + timedelta(seconds=30))
    assert rerunner.calls == [("pytorch", 1)]


def test_a_transient_failure_is_tried_again_next_tick() -> None:
    rerunner = Rerunner(TransientError("503", code="503"))
    s, metrics = stage(Source([job(1)]), rerunner)
    s.step(NOW)
    rerunner.error = None
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [RERUN]
    assert rerunner.calls == [("pytorch", 1), ("pytorch", 1)]
    assert count(metrics, "runner_lost", FAILED) == 1


def test_the_hourly_bound_defers_the_rest_to_a_later_tick() -> None:
    rerunner = Rerunner()
    s, _ = stage(Source([job(1), job(2), job(3)]), rerunner, max_per_hour=2)
    assert [c.result for c in s.step(NOW).choices] == [RERUN, RERUN, DEFERRED]
    assert [c.result for c in s.step(NOW + timedelta(minutes=30)).choices] == [DEFERRED]
    later = s.step(NOW + timedelta(minutes=61)).choices
    assert [(c.job.job_id, c.result) for c in later] == [(3, RERUN)]
    assert len(rerunner.calls) == 3


def test_a_rerun_that_fails_again_alerts_once_with_the_details() -> None:
    rerunner = Rerunner()
    s, _ = stage(Source([job(9, attempt=2)]), rerunner)
    report = s.step(NOW)
    assert [c.result for c in report.choices] == [EXHAUSTED]
    assert rerunner.calls == []
    (e,) = report.exhausted
    assert (e.repo, e.job_id, e.attempt, e.runner) == ("pytorch", 9, 2, f"ci-gpu-{INSTANCE}")
    assert "lost communication" in e.evidence


def test_a_restart_and_a_second_controller_never_rerun_twice() -> None:
    """Idempotent across restarts and a change of leader: the ledger is in the store, and
    is read again before anything is re-run."""
    store = Store()
    first_rerunner = Rerunner()
    first, _ = stage(Source([job(1)]), first_rerunner, store)
    first.step(NOW)
    restarted_rerunner = Rerunner()
    restarted, _ = stage(Source([job(1)]), restarted_rerunner, store)
    assert [c.result for c in restarted.step(NOW + timedelta(minutes=1)).choices] == [ALREADY]
    # a standby that loaded the ledger before the leader re-ran, then took over
    standby, _ = stage(Source([], [job(2)], [job(2)]), Rerunner(), store)
    standby.step(NOW)
    first_again = stage(Source([job(2)]), first_rerunner, store)[0]
    first_again.step(NOW + timedelta(minutes=2))
    assert [c.result for c in standby.step(NOW + timedelta(minutes=3)).choices] == [ALREADY]
    assert first_rerunner.calls == [("pytorch", 1), ("pytorch", 2)]
    assert restarted_rerunner.calls == []


def test_a_broken_store_keeps_the_ledger_in_memory_and_saves_later() -> None:
    store = Store()
    store.fail = True
    rerunner = Rerunner()
    s, _ = stage(Source([job(1)], [job(1)]), rerunner, store)
    s.step(NOW)
    store.fail = False
    s.step(NOW + timedelta(seconds=30))
    assert rerunner.calls == [("pytorch", 1)]
    assert "rerun:pytorch#1" in store.data


def test_dry_run_decides_and_changes_nothing() -> None:
    """A dry run (``once --dry-run``, a follower's tick) acts on nothing and keeps the job
    to be decided for real by the next real tick."""
    rerunner, store = Rerunner(), Store()
    s, _ = stage(Source([job(1)]), rerunner, store)
    assert [c.result for c in s.step(NOW, dry_run=True).choices] == [RERUN]
    assert rerunner.calls == []
    assert store.data == {}
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [RERUN]
    assert rerunner.calls == [("pytorch", 1)]


def test_disabled_looks_at_nothing() -> None:
    source, rerunner = Source([job(1)]), Rerunner()
    s, _ = stage(source, rerunner, enabled=False)
    assert s.step(NOW).choices == ()
    assert source.batches  # not even asked


def test_cancelled_and_successful_jobs_are_never_rerun() -> None:
    rerunner = Rerunner()
    s, metrics = stage(
        Source([job(1, conclusion="cancelled"), job(2, conclusion="success")]), rerunner
    )
    assert [c.result for c in s.step(NOW).choices] == [SKIP]
    assert rerunner.calls == []
    assert count(metrics, "cancelled", SKIP) == 1


def test_the_alert_stage_sends_exhausted_and_denied_once() -> None:
    metrics = Metrics(CollectorRegistry())
    cfg = config()
    store = SqliteStore(None)
    engine = alert_engine(cfg.alerts, store=store, metrics=metrics)
    rerunner = Rerunner(AuthenticationError("403 Forbidden", code="403"))
    s = RetryStage(cfg, Source([job(9, attempt=2), job(1)]), rerunner, metrics)
    report = s.step(NOW)
    views = engine.step(None, NOW, NOW, retries=report)
    firing = {(v.rule, v.state) for v in views}
    assert firing == {(EXHAUSTED_RULE, "firing"), (DENIED_RULE, "firing")}
    text = next(v.text for v in views if v.rule == EXHAUSTED_RULE)
    for part in ("pytorch", "run 109", "job 9", f"ci-gpu-{INSTANCE}", "lost communication"):
        assert part in text
    again = engine.step(None, NOW, NOW + timedelta(minutes=5), retries=s.step(NOW))
    assert {v.state for v in again} == {"firing"}
    transitions = metrics.registry.get_sample_value(
        "ci_autoscaler_alert_transitions_total", {"rule": EXHAUSTED_RULE, "state": "firing"}
    )
    assert transitions == 1
    store.close()


def test_instance_events_are_bounded_in_time_and_number() -> None:
    from autoscaler.job_retry.model import InstanceEvents  # noqa: PLC0415

    events = InstanceEvents(keep=timedelta(hours=1), limit=3)
    for i in range(5):
        events.add(InstanceEvent(f"i-{i:08x}", SPOT_INTERRUPTION, NOW + timedelta(minutes=i)))
    assert sum(len(v) for v in events.snapshot().values()) == 3
    assert events.of("i-00000004") and not events.of("i-00000000")  # the newest kept
    events.prune(NOW + timedelta(hours=2))
    assert events.snapshot() == {}


class BrokenRetries:
    def step(self, now: datetime, *, dry_run: bool = False) -> Any:
        raise RuntimeError("a bug in the retry stage")


def test_a_broken_retry_stage_never_ends_the_tick_and_alerts_keep_their_state() -> None:
    """The stage runs guarded like the others; with no report this tick, the alert stage
    keeps the job-retry alerts as they are (unknown is not fine)."""
    from autoscaler.controller import Controller  # noqa: PLC0415
    from autoscaler.domain import Observation  # noqa: PLC0415

    class PollSource:
        def observe(self, now: datetime) -> Observation:
            return Observation(now, (), ())

        def remove_runner(self, runner_id: int) -> None: ...

        def find_runner(self, name: str) -> None:
            return None

    metrics = Metrics(CollectorRegistry())
    cfg = config()
    store = SqliteStore(None)
    engine = alert_engine(cfg.alerts, store=store, metrics=metrics)
    s = RetryStage(cfg, Source([job(9, attempt=2)]), Rerunner(), metrics)
    engine.step(None, NOW, NOW, retries=s.step(NOW))
    controller = Controller(cfg, PollSource(), metrics, alerts=engine, retries=BrokenRetries())
    result = controller.tick(NOW + timedelta(minutes=1))
    assert [(a.rule, a.state) for a in result.alerts if a.rule == EXHAUSTED_RULE] == [
        (EXHAUSTED_RULE, "firing")
    ]
    failures = metrics.registry.get_sample_value(
        "ci_autoscaler_stage_failures_total", {"stage": "job_retry"}
    )
    assert failures == 1
    store.close()


def test_once_json_shows_what_job_retry_judged() -> None:
    from autoscaler.app.report import to_json  # noqa: PLC0415
    from autoscaler.controller import TickResult  # noqa: PLC0415

    s, _ = stage(Source([job(1), job(2, annotations=())]), Rerunner())
    result = TickResult(now=NOW, snapshot=None, retries=s.step(NOW))
    lines = to_json(result)["job_retries"]
    assert [(x["job_id"], x["reason"], x["result"]) for x in lines] == [
        (1, "runner_lost", RERUN),
        (2, "user", SKIP),
    ]
    assert json.dumps(lines)  # plain JSON
    assert "job_retries" not in to_json(TickResult(now=NOW, snapshot=None))


def test_past_the_bound_the_oldest_waiting_jobs_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression: the bound sorted completion times against a naive datetime.min, which
    cannot be compared with the aware times of GitHub's jobs (TypeError, the stage failed)."""
    jobs = [job(i, completed_at=NOW - timedelta(minutes=i)) for i in range(1, 6)]
    jobs.append(job(9, completed_at=None))
    metrics = Metrics(CollectorRegistry())
    cfg = config(max_per_hour=0)
    s = RetryStage(cfg, Source(jobs), Rerunner(), metrics, max_pending=3)
    s.step(NOW)
    assert sorted(j.job_id for j in s.pending.values()) == [1, 2, 3]
    assert "dropped" in caplog.text
