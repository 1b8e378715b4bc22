"""The retry stage over hand-written fakes: a run attempt re-run once (its lost jobs and the
siblings the loss cancelled), 403 said once, 422 a no-op, idempotent across ticks, restarts
and a second controller on the same ledger."""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.job_retry_alerts import DENIED_RULE, EXHAUSTED_RULE
from autoscaler.config import Config
from autoscaler.domain import Annotation, CompletedJob, CompletedRun, RunProgress, completed_run
from autoscaler.errors import (
    AuthenticationError,
    NotFoundError,
    NotLeaderError,
    RejectedError,
    StateUnusableError,
    TransientError,
)
from autoscaler.job_retry.classify import Verdict
from autoscaler.job_retry.decide import (
    ALREADY,
    DEFERRED,
    DENIED,
    EXHAUSTED,
    FAILED,
    OUTAGE,
    RERUN,
    SKIP,
    Choice,
)
from autoscaler.job_retry.ledger import DENIED_PAUSE
from autoscaler.job_retry.model import SPOT_INTERRUPTION, InstanceEvent
from autoscaler.job_retry.stage import SETTLE, RetryStage
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine, load_config

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
INSTANCE = "i-0abc123def4567890"
LOST = "The self-hosted runner: ci-gpu-i-0abc123def4567890 lost communication with the server."
EXIT_1 = "Process completed with exit code 1."


def config(**retry: Any) -> Config:
    return load_config(
        runner_types={"gpu": {"labels": ["self-hosted", "gpu"]}},
        job_retry={"enabled": True, **retry},
    )


def job(job_id: int = 1, *, attempt: int = 1, **kw: Any) -> CompletedJob:
    """A job lost with its runner; its own run (``100 + job_id``) unless told."""
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


def cancelled(job_id: int, run_id: int, after: timedelta = timedelta(seconds=2)) -> CompletedJob:
    """A sibling cancelled ``after`` the lost job's completion (negative: before it)."""
    return job(
        job_id,
        run_id=run_id,
        conclusion="cancelled",
        failed_step=None,
        annotations=(),
        completed_at=NOW - timedelta(minutes=5) + after,
    )


def matrix(run_id: int = 200, attempt: int = 1) -> list[CompletedJob]:
    """A fail-fast matrix: leg 1 lost to a Spot reclaim, legs 2-4 cancelled after it."""
    lost = job(1, run_id=run_id, attempt=attempt, name="test (gpu, 1)")
    legs = [
        replace(cancelled(i, run_id), name=f"test (gpu, {i})", run_attempt=attempt)
        for i in (2, 3, 4)
    ]
    return [lost, *legs]


def runs(jobs: Sequence[CompletedJob]) -> list[CompletedRun]:
    by_run: dict[tuple[str, int], list[CompletedJob]] = {}
    for j in jobs:
        by_run.setdefault((j.repo, j.run_id), []).append(j)
    return [completed_run(repo, run_id, js) for (repo, run_id), js in by_run.items()]


class Source:
    """Hands each scripted batch of jobs once, as the completed runs they make up (like
    the poll hands each completed run once)."""

    def __init__(self, *batches: Sequence[CompletedJob]) -> None:
        self.batches = list(batches)

    def completed_runs(self, now: datetime) -> Sequence[CompletedRun]:
        return runs(self.batches.pop(0)) if self.batches else ()


#: A finished run at its first attempt: a 403 on its re-run means no permission.
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

    def rerun_failed_jobs(self, repo: str, run_id: int) -> None:
        self.calls.append((repo, run_id))
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
        #: Saves that still succeed (None: all of them).
        self.saves_left: int | None = None
        self.saves: list[dict[str, str]] = []

    def load_job_retries(self) -> dict[str, str]:
        if self.fail:
            raise StateUnusableError("broken", path="x", code="io", operation="load")
        return dict(self.data)

    def save_job_retries(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        if self.fail or self.saves_left == 0:
            raise StateUnusableError("broken", path="x", code="io", operation="save")
        if self.saves_left is not None:
            self.saves_left -= 1
        for k in drop:
            self.data.pop(k, None)
        self.data.update(put)
        self.saves.append(dict(put))


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


def runs_counted(metrics: Metrics, verdict: str, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_job_retry_runs_total", {"verdict": verdict, "result": result}
    )
    return value or 0.0


def first(choice: Choice) -> Verdict:
    """The verdict on the run's first failed or cancelled job."""
    return choice.verdict.jobs[0][1]


def test_a_lost_runner_is_rerun_once_and_counted() -> None:
    rerunner = Rerunner()
    s, metrics = stage(Source([job(1)], [job(1)]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [RERUN]
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [ALREADY]
    assert rerunner.calls == [("pytorch", 101)]
    assert count(metrics, "runner_lost", RERUN) == 1
    assert runs_counted(metrics, "lost", RERUN) == 1


def test_a_fail_fast_matrix_comes_back_whole_in_one_rerun() -> None:
    """GitHub's default ``strategy.fail-fast`` cancels a matrix's other legs when one fails.
    Re-running only the lost leg (``POST .../jobs/{id}/rerun``) left its three siblings
    ``cancelled`` in the new attempt, and the run failed again although every leg would
    have passed: cancelled jobs were "never re-run". Now the run attempt is judged whole:
    the cancels came after the loss, so one ``rerun-failed-jobs`` brings back all four."""
    rerunner = Rerunner()
    s, metrics = stage(Source(matrix()), rerunner)
    (choice,) = s.step(NOW).choices
    assert (choice.verdict.verdict, choice.result) == ("lost", RERUN)
    assert [j.job_id for j in choice.verdict.cancelled_by_loss] == [2, 3, 4]
    assert rerunner.calls == [("pytorch", 200)]
    assert count(metrics, "runner_lost", RERUN) == 1
    assert count(metrics, "cancelled_by_loss", RERUN) == 3
    assert s.ledger.reruns["pytorch#200#1"].jobs == (1, 2, 3, 4)


def test_three_lost_jobs_of_one_run_are_one_rerun() -> None:
    """A Spot reclaim of several instances at once: one job re-run per lost job asked
    GitHub for several attempts of the same run, and it refused the second while the first
    was in progress (some lost jobs were never re-run). Now: one ask for the run."""
    lost = [job(i, run_id=300) for i in (1, 2, 3)]
    rerunner = Rerunner()
    s, metrics = stage(Source(lost), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [RERUN]
    assert rerunner.calls == [("pytorch", 300)]
    assert count(metrics, "runner_lost", RERUN) == 3
    assert runs_counted(metrics, "lost", RERUN) == 1


@pytest.mark.parametrize(
    ("jobs", "verdict", "why"),
    [
        pytest.param(
            [job(1, run_id=400), job(2, run_id=400, annotations=(Annotation("failure", EXIT_1),))],
            "own_failure",
            "test 2 (job 2) failed on its own: no evidence of an infrastructure failure "
            "(exit code 1)",
            id="a-lost-job-and-an-exit-code-1",
        ),
        pytest.param(
            [job(1, run_id=400), cancelled(2, 400, after=-timedelta(minutes=3))],
            "cancelled_before_loss",
            "test 2 (job 2) was cancelled before the first loss (11:52:00 UTC, the loss at "
            "11:55:00 UTC): a person or another cause",
            id="a-humans-cancel-before-the-loss",
        ),
    ],
)
def test_a_run_with_a_failure_of_its_own_or_an_earlier_cancel_is_not_rerun(
    jobs: list[CompletedJob], verdict: str, why: str
) -> None:
    rerunner = Rerunner()
    s, metrics = stage(Source(jobs), rerunner)
    (choice,) = s.step(NOW).choices
    assert (choice.verdict.verdict, choice.result, choice.why) == (verdict, SKIP, why)
    assert rerunner.calls == []
    assert runs_counted(metrics, verdict, SKIP) == 1


def test_a_users_failure_is_never_rerun() -> None:
    rerunner = Rerunner()
    s, metrics = stage(Source([job(1, annotations=())]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [SKIP]
    assert rerunner.calls == []
    assert count(metrics, "user", SKIP) == 1


def test_a_fresh_failure_waits_for_a_late_interruption_event() -> None:
    """The Spot warning's event can reach the queue after GitHub reports the failure: a
    failure with no evidence is judged only after SETTLE (its run waits), and the event
    turns it."""
    fresh = job(1, annotations=(), completed_at=NOW - timedelta(seconds=10))
    rerunner = Rerunner()
    s, _ = stage(Source([fresh, cancelled(2, 101, after=timedelta(minutes=5))]), rerunner)
    assert s.step(NOW).choices == ()
    assert list(s.pending) == [("pytorch", 101)]
    s.events.add(InstanceEvent(INSTANCE, SPOT_INTERRUPTION, NOW - timedelta(minutes=3)))
    (choice,) = s.step(NOW + SETTLE).choices
    assert (choice.result, first(choice).reason) == (RERUN, "spot_interruption")


def test_403_is_said_once_alerted_once_and_stops_trying(caplog: pytest.LogCaptureFixture) -> None:
    denied = AuthenticationError("GitHub POST /x: 403 Forbidden", code="403")
    rerunner = Rerunner(denied)
    s, _ = stage(Source([job(1), job(2)], [job(3)]), rerunner)
    first_tick = s.step(NOW)
    assert [c.result for c in first_tick.choices] == [DENIED, DENIED]
    second = s.step(NOW + timedelta(seconds=30))
    assert {c.result for c in second.choices} == {DENIED}
    assert rerunner.calls == [("pytorch", 101)]  # one call, then nothing in that repository
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
    assert rerunner.calls[2:] == [("pytorch", 101), ("pytorch", 102)]  # what waited, re-run


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
    """GitHub answers a re-run 403 for three reasons: a re-run whose 201 was lost and is
    sent again ("not the latest attempt"), a run re-run by someone else or still in
    progress, and a missing permission. The run is read first: a newer attempt means it
    was re-run (never asked again), a run still going is asked again later, and only a
    complete run at the decided attempt (or one that cannot be read) means permission."""
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
        assert rerunner.calls == [("pytorch", 101)]


def test_422_already_rerun_is_a_no_op_never_asked_again() -> None:
    rerunner = Rerunner(RejectedError("422 already re-run", code="422"))
    s, metrics = stage(Source([job(1)], [job(1)]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [ALREADY]
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [ALREADY]
    assert rerunner.calls == [("pytorch", 101)]
    assert count(metrics, "runner_lost", ALREADY) == 2


def test_a_deleted_run_is_not_asked_again() -> None:
    rerunner = Rerunner(NotFoundError("404", code="404"))
    s, _ = stage(Source([job(1)], [job(1)]), rerunner)
    s.step(NOW)
    s.step(NOW + timedelta(seconds=30))
    assert rerunner.calls == [("pytorch", 101)]


def test_no_answer_the_next_tick_reads_the_run_before_asking_again() -> None:
    """A timeout may have reached GitHub: asking again could make a second attempt, or be
    refused with a 403 that looks like a missing permission. The record stays unanswered
    and the next tick reads the run first: at a newer attempt, it went through."""
    rerunner = Rerunner(TransientError("timed out", code="timeout"), RunProgress("queued", 2))
    s, metrics = stage(Source([job(1)]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [FAILED]
    assert count(metrics, "runner_lost", FAILED) == 1
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [ALREADY]
    assert rerunner.calls == [("pytorch", 101)]
    assert rerunner.looked_up == [("pytorch", 101)]
    assert s.ledger.reruns["pytorch#101#1"].asked


def test_no_answer_and_the_run_unchanged_is_asked_again() -> None:
    rerunner = Rerunner(TransientError("503", code="503"))
    s, _ = stage(Source([job(1)]), rerunner)
    s.step(NOW)
    rerunner.error = None
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [RERUN]
    assert rerunner.calls == [("pytorch", 101), ("pytorch", 101)]
    assert rerunner.looked_up == [("pytorch", 101)]


def test_a_request_the_fence_stopped_is_forgotten_and_tried_again() -> None:
    """Not sent (this controller lost the lease): nothing to confirm later."""
    rerunner = Rerunner(NotLeaderError("not the leader", path="t", operation="rerun"))
    s, _ = stage(Source([job(1)]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [FAILED]
    assert s.ledger.reruns == {}
    rerunner.error = None
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [RERUN]
    assert rerunner.looked_up == []


def test_the_record_is_saved_before_the_request() -> None:
    """Written first, unanswered; then answered. A store that refuses the first write
    stops the request (nothing would remember it was asked)."""
    store = Store()
    rerunner = Rerunner()
    s, _ = stage(Source([job(1)]), rerunner, store)
    s.step(NOW)
    asked = [json.loads(p["rerun:pytorch#101#1"])["asked"] for p in store.saves if p]
    assert asked == [False, True]
    broken = Store()
    broken.fail = True
    refused = Rerunner()
    s2, _ = stage(Source([job(1)]), refused, broken)
    assert [c.result for c in s2.step(NOW).choices] == [FAILED]
    assert refused.calls == []
    broken.fail = False
    assert [c.result for c in s2.step(NOW + timedelta(seconds=30)).choices] == [RERUN]


def test_the_hourly_bound_defers_the_rest_to_a_later_tick() -> None:
    rerunner = Rerunner()
    s, _ = stage(Source([job(1), job(2), job(3)]), rerunner, max_per_hour=2)
    assert [c.result for c in s.step(NOW).choices] == [RERUN, RERUN, DEFERRED]
    assert [c.result for c in s.step(NOW + timedelta(minutes=30)).choices] == [DEFERRED]
    later = s.step(NOW + timedelta(minutes=61)).choices
    assert [(c.run.run_id, c.result) for c in later] == [(103, RERUN)]
    assert len(rerunner.calls) == 3


def test_too_many_lost_jobs_in_one_run_is_an_outage_for_a_human() -> None:
    rerunner = Rerunner()
    s, _ = stage(Source([job(i, run_id=500) for i in range(1, 7)]), rerunner)
    assert [c.result for c in s.step(NOW).choices] == [OUTAGE]
    assert rerunner.calls == []


def test_a_rerun_that_is_lost_again_alerts_once_with_the_details() -> None:
    rerunner = Rerunner()
    s, _ = stage(Source(matrix(attempt=2)), rerunner)
    report = s.step(NOW)
    assert [c.result for c in report.choices] == [EXHAUSTED]
    assert rerunner.calls == []
    (e,) = report.exhausted
    assert (e.repo, e.run_id, e.job_id, e.attempt) == ("pytorch", 200, 1, 2)
    assert e.runner == f"ci-gpu-{INSTANCE}" and e.lost_jobs == 1
    assert "lost communication" in e.evidence


def test_a_restart_and_a_second_controller_never_rerun_twice() -> None:
    """Idempotent across restarts and a change of leader: the ledger is in the store, and
    is read again before anything is re-run."""
    store = Store()
    first_rerunner = Rerunner()
    first_stage, _ = stage(Source(matrix()), first_rerunner, store)
    first_stage.step(NOW)
    restarted_rerunner = Rerunner()
    restarted, _ = stage(Source(matrix()), restarted_rerunner, store)
    assert [c.result for c in restarted.step(NOW + timedelta(minutes=1)).choices] == [ALREADY]
    # a standby that loaded the ledger before the leader re-ran, then took over
    standby, _ = stage(Source([], [job(2)], [job(2)]), Rerunner(), store)
    standby.step(NOW)
    first_again = stage(Source([job(2)]), first_rerunner, store)[0]
    first_again.step(NOW + timedelta(minutes=2))
    assert [c.result for c in standby.step(NOW + timedelta(minutes=3)).choices] == [ALREADY]
    assert first_rerunner.calls == [("pytorch", 200), ("pytorch", 102)]
    assert restarted_rerunner.calls == []


def test_a_leader_that_died_before_the_answer_leaves_a_record_its_successor_checks() -> None:
    """The leader saved its record and sent the request; GitHub made the new attempt and
    the leader died before the answer was recorded. Its successor finds the unanswered
    record, reads the run (at attempt 2 now) and never asks."""
    store = Store()
    dying, _ = stage(Source(matrix()), Rerunner(), store)
    dying.step(NOW)
    entry = json.loads(store.data["rerun:pytorch#200#1"])
    store.data["rerun:pytorch#200#1"] = json.dumps({**entry, "asked": False})  # died here
    successor_rerunner = Rerunner(progress=RunProgress("queued", 2))
    successor, _ = stage(Source(matrix()), successor_rerunner, store)
    assert [c.result for c in successor.step(NOW + timedelta(seconds=5)).choices] == [ALREADY]
    assert successor_rerunner.calls == []
    assert successor_rerunner.looked_up == [("pytorch", 200)]
    assert json.loads(store.data["rerun:pytorch#200#1"])["asked"] is True


def test_a_broken_store_keeps_the_ledger_in_memory_and_saves_later() -> None:
    """The record went in before the request; the save of GitHub's answer failed. The
    answer stays in memory (the next tick asks nothing) and is saved when the store is
    back."""
    store = Store()
    store.saves_left = 1
    rerunner = Rerunner()
    s, _ = stage(Source([job(1)], [job(1)]), rerunner, store)
    assert [c.result for c in s.step(NOW).choices] == [RERUN]
    assert json.loads(store.data["rerun:pytorch#101#1"])["asked"] is False
    store.saves_left = None
    assert [c.result for c in s.step(NOW + timedelta(seconds=30)).choices] == [ALREADY]
    assert rerunner.calls == [("pytorch", 101)] and rerunner.looked_up == []
    assert json.loads(store.data["rerun:pytorch#101#1"])["asked"] is True


def test_dry_run_decides_and_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A dry run (``once --dry-run``, a follower's tick) acts on nothing and keeps the run
    to be decided for real by the next real tick. It counts nothing either: a follower
    used to count ``result="rerun"`` every tick for re-runs only the leader asked. It
    says its decision once per run attempt."""
    rerunner, store = Rerunner(), Store()
    s, metrics = stage(Source(matrix()), rerunner, store)
    caplog.set_level(logging.INFO, logger="autoscaler.job_retry.stage")
    for tick in range(3):
        at = NOW + timedelta(seconds=30 * tick)
        assert [c.result for c in s.step(at, dry_run=True).choices] == [RERUN]
    assert rerunner.calls == []
    assert store.data == {}
    assert runs_counted(metrics, "lost", "rerun") == 0
    said = [r.getMessage() for r in caplog.records if "nothing asked" in r.getMessage()]
    assert len(said) == 1 and "pytorch run 200 attempt 1: verdict lost, result rerun" in said[0]
    assert [c.result for c in s.step(NOW + timedelta(seconds=90)).choices] == [RERUN]
    assert rerunner.calls == [("pytorch", 200)]
    assert runs_counted(metrics, "lost", "rerun") == 1


def test_disabled_looks_at_nothing() -> None:
    source, rerunner = Source([job(1)]), Rerunner()
    s, _ = stage(source, rerunner, enabled=False)
    assert s.step(NOW).choices == ()
    assert source.batches  # not even asked


def test_cancelled_only_runs_are_skipped_and_successful_ones_not_judged() -> None:
    rerunner = Rerunner()
    s, metrics = stage(
        Source([cancelled(1, 101), job(2, conclusion="success", annotations=())]), rerunner
    )
    (choice,) = s.step(NOW).choices
    assert (choice.verdict.verdict, choice.result) == ("nothing_lost", SKIP)
    assert rerunner.calls == []
    assert count(metrics, "cancelled", SKIP) == 1


def test_the_newest_attempt_of_a_run_replaces_an_older_one_waiting() -> None:
    rerunner = Rerunner()
    s, _ = stage(Source([job(1, annotations=(), completed_at=NOW)], [job(1, attempt=2)]), rerunner)
    s.step(NOW)  # attempt 1 waits (fresh, no evidence)
    (choice,) = s.step(NOW + timedelta(seconds=30)).choices
    assert (choice.run.attempt, choice.result) == (2, EXHAUSTED)


def test_the_alert_stage_sends_exhausted_and_denied_once() -> None:
    metrics = Metrics(CollectorRegistry())
    cfg = config()
    store = SqliteStore(None)
    engine = alert_engine(cfg.alerts, store=store, metrics=metrics)
    rerunner = Rerunner(AuthenticationError("403 Forbidden", code="403"))
    lost_twice = [job(9, attempt=2), job(8, run_id=109, attempt=2)]
    s = RetryStage(cfg, Source([*lost_twice, job(1)]), rerunner, metrics)
    report = s.step(NOW)
    views = engine.step(None, NOW, NOW, retries=report)
    firing = {(v.rule, v.state) for v in views}
    assert firing == {(EXHAUSTED_RULE, "firing"), (DENIED_RULE, "firing")}
    text = next(v.text for v in views if v.rule == EXHAUSTED_RULE)
    for part in ("pytorch", "run 109", "job 8", "and 1 more", f"ci-gpu-{INSTANCE}", "lost comm"):
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


def test_once_json_says_per_run_what_was_lost_cancelled_asked_or_why_not() -> None:
    from autoscaler.app.report import to_json  # noqa: PLC0415
    from autoscaler.controller import TickResult  # noqa: PLC0415

    own = [job(5, run_id=400), job(6, run_id=400, annotations=(Annotation("failure", EXIT_1),))]
    human = [job(7, run_id=401), cancelled(8, 401, after=-timedelta(minutes=1))]
    s, _ = stage(Source([*matrix(), *own, *human]), Rerunner())
    result = TickResult(now=NOW, snapshot=None, retries=s.step(NOW))
    out = to_json(result)
    by_run = {r["run_id"]: r for r in out["run_retries"]}
    assert by_run[200]["result"] == RERUN and by_run[200]["asked"] == "rerun-failed-jobs"
    assert [j["job"] for j in by_run[200]["lost"]] == ["test (gpu, 1)"]
    assert [j["job_id"] for j in by_run[200]["cancelled_by_loss"]] == [2, 3, 4]
    assert (by_run[400]["result"], by_run[400]["verdict"]) == (SKIP, "own_failure")
    assert by_run[400]["asked"] is None and "failed on its own" in by_run[400]["why"]
    assert [j["job_id"] for j in by_run[400]["failed_on_their_own"]] == [6]
    assert (by_run[401]["result"], by_run[401]["verdict"]) == (SKIP, "cancelled_before_loss")
    assert "cancelled before the first loss" in by_run[401]["why"]
    assert [j["job_id"] for j in by_run[401]["cancelled_not_by_loss"]] == [8]
    lines = {(x["job_id"], x["reason"], x["result"]) for x in out["job_retries"]}
    assert {(1, "runner_lost", RERUN), (2, "cancelled_by_loss", RERUN)} <= lines
    assert {(6, "user", SKIP), (8, "cancelled", SKIP)} <= lines
    assert json.dumps(out)  # plain JSON
    assert "run_retries" not in to_json(TickResult(now=NOW, snapshot=None))


def test_explain_says_per_run_what_was_lost_cancelled_asked_or_why_not() -> None:
    from autoscaler.app.explain import explain_json, format_explain  # noqa: PLC0415
    from autoscaler.controller import TickResult  # noqa: PLC0415

    own = [job(5, run_id=400), job(6, run_id=400, annotations=(Annotation("failure", EXIT_1),))]
    s, _ = stage(Source([*matrix(), *own]), Rerunner())
    result = TickResult(now=NOW, snapshot=None, retries=s.step(NOW, dry_run=True))
    text = format_explain([], result, NOW)
    assert "pytorch run 200 attempt 1: rerun: 1 lost to infrastructure" in text
    assert "    lost: test (gpu, 1): annotation: the runner lost communication" in text
    assert "    cancelled by the loss: test (gpu, 2), test (gpu, 3), test (gpu, 4)" in text
    assert "    asked: POST .../actions/runs/200/rerun-failed-jobs" in text
    assert "pytorch run 400 attempt 1: skip: test 6 (job 6) failed on its own" in text
    assert "    failed on its own: test 6: no evidence of an infrastructure failure" in text
    runs = explain_json([], result.retries)["run_retries"]
    assert [(r["run_id"], r["result"], r["verdict"]) for r in runs] == [
        (200, RERUN, "lost"),
        (400, SKIP, "own_failure"),
    ]
    assert explain_json([]) == {"runner_types": []}


def test_past_the_bound_the_oldest_waiting_runs_are_dropped(
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
    assert sorted(run_id for _, run_id in s.pending) == [101, 102, 103]
    assert "dropped" in caplog.text
