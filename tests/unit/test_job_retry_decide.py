"""The re-run decision per run attempt, its bounds, and the ledger that makes it idempotent."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.config.job_retry import JobRetryConfig
from autoscaler.domain import CompletedJob, CompletedRun, completed_run
from autoscaler.job_retry.classify import (
    CANCELLED_REASON,
    SPOT,
    USER,
    RunVerdict,
    Verdict,
    judge_run,
)
from autoscaler.job_retry.decide import (
    ALREADY,
    DEFERRED,
    DENIED,
    EXHAUSTED,
    OUTAGE,
    RERUN,
    SKIP,
    Choice,
    decide,
    forget_rerun,
    record_allowed,
    record_denied,
    record_exhausted,
    record_rerun,
)
from autoscaler.job_retry.ledger import (
    ALERT_WINDOW,
    DENIED_PAUSE,
    RETENTION,
    Ledger,
    decode,
    diff,
    encode,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
INFRA = Verdict(True, SPOT, "instance i-0abc: spot_interruption")
USERS = Verdict(False, USER, "no evidence")
CANCEL = Verdict(False, CANCELLED_REASON, "cancelled")


def job(
    job_id: int = 1, *, run_id: int = 10, attempt: int = 1, repo: str = "r", **kw: object
) -> CompletedJob:
    base = CompletedJob(
        repo=repo,
        run_id=run_id,
        job_id=job_id,
        name=f"job {job_id}",
        conclusion="failure",
        run_attempt=attempt,
        runner_name="ci-i-0abc12345678",
        completed_at=NOW - timedelta(minutes=10) + timedelta(seconds=job_id),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def judged(
    *verdicts: Verdict, run_id: int = 10, attempt: int = 1, repo: str = "r", first: int = 1
) -> tuple[CompletedRun, RunVerdict]:
    """A run attempt whose jobs (ids from ``first``) have these verdicts, judged."""
    jobs = [
        (
            job(first + i, run_id=run_id, attempt=attempt, repo=repo)
            if v is not CANCEL
            else job(first + i, run_id=run_id, attempt=attempt, repo=repo, conclusion="cancelled")
        )
        for i, v in enumerate(verdicts)
    ]
    pairs = list(zip(jobs, verdicts, strict=True))
    return completed_run(repo, run_id, jobs), judge_run(pairs)


def results(choices: list[Choice]) -> list[tuple[int, str]]:
    return [(c.run.run_id, c.result) for c in choices]


DEFAULT = JobRetryConfig(enabled=True)
RERAN = record_rerun(Ledger(), decide([judged(INFRA)], Ledger(), DEFAULT, NOW)[0], NOW)


@pytest.mark.parametrize(
    ("runs", "ledger", "config", "expected"),
    [
        pytest.param([judged(INFRA)], Ledger(), DEFAULT, [(10, RERUN)], id="lost-first-attempt"),
        pytest.param(
            [judged(INFRA, CANCEL, CANCEL, CANCEL)],
            Ledger(),
            DEFAULT,
            [(10, RERUN)],
            id="fail-fast-siblings-cancelled-after-the-loss",
        ),
        pytest.param(
            [judged(INFRA, INFRA, INFRA)], Ledger(), DEFAULT, [(10, RERUN)], id="three-lost"
        ),
        pytest.param([judged(USERS)], Ledger(), DEFAULT, [(10, SKIP)], id="own-failure"),
        pytest.param(
            [judged(INFRA, USERS)], Ledger(), DEFAULT, [(10, SKIP)], id="lost-and-own-failure"
        ),
        pytest.param([judged(CANCEL)], Ledger(), DEFAULT, [(10, SKIP)], id="cancelled-only"),
        pytest.param([judged(INFRA)], RERAN, DEFAULT, [(10, ALREADY)], id="already-rerun"),
        pytest.param(
            [judged(INFRA, attempt=2)],
            Ledger(),
            DEFAULT,
            [(10, EXHAUSTED)],
            id="rerun-lost-again-exhausted",
        ),
        pytest.param(
            [judged(INFRA, attempt=2)],
            Ledger(),
            DEFAULT.model_copy(update={"max_attempts": 3}),
            [(10, RERUN)],
            id="third-attempt-allowed",
        ),
        pytest.param(
            [judged(INFRA)],
            Ledger(),
            DEFAULT.model_copy(update={"max_attempts": 1}),
            [(10, SKIP)],
            id="max-attempts-1-never-reruns-nor-alerts",
        ),
        pytest.param(
            [judged(*[INFRA] * 6)],
            Ledger(),
            DEFAULT,
            [(10, OUTAGE)],
            id="six-lost-in-a-run-is-an-outage",
        ),
        pytest.param(
            [judged(*[INFRA] * 5, CANCEL, CANCEL)],
            Ledger(),
            DEFAULT,
            [(10, RERUN)],
            id="five-lost-is-within-bounds-cancels-do-not-count",
        ),
        pytest.param(
            [judged(INFRA, run_id=i) for i in range(1, 5)],
            Ledger(),
            DEFAULT.model_copy(update={"max_per_hour": 2}),
            [(1, RERUN), (2, RERUN), (3, DEFERRED), (4, DEFERRED)],
            id="hourly-limit-counts-runs",
        ),
        pytest.param(
            [judged(INFRA, run_id=2)],
            RERAN,
            DEFAULT.model_copy(update={"max_per_hour": 1}),
            [(2, DEFERRED)],
            id="earlier-reruns-count-in-the-hour",
        ),
        pytest.param(
            [judged(INFRA, run_id=2)],
            replace(
                RERAN,
                reruns={
                    k: replace(r, at=NOW - timedelta(minutes=61)) for k, r in RERAN.reruns.items()
                },
            ),
            DEFAULT.model_copy(update={"max_per_hour": 1}),
            [(2, RERUN)],
            id="an-hour-later-the-budget-is-back",
        ),
        pytest.param(
            [judged(INFRA)],
            record_denied(Ledger(), "r", NOW - timedelta(minutes=5)),
            DEFAULT,
            [(10, DENIED)],
            id="denied-repo",
        ),
        pytest.param(
            [judged(INFRA, repo="other")],
            record_denied(Ledger(), "r", NOW),
            DEFAULT,
            [(10, RERUN)],
            id="denial-is-per-repository",
        ),
        pytest.param(
            [judged(INFRA)],
            record_denied(Ledger(), "r", NOW - DENIED_PAUSE),
            DEFAULT,
            [(10, RERUN)],
            id="denial-pause-over-one-probe",
        ),
    ],
)
def test_decide(
    runs: list[tuple[CompletedRun, RunVerdict]],
    ledger: Ledger,
    config: JobRetryConfig,
    expected: list[tuple[int, str]],
) -> None:
    assert results(decide(runs, ledger, config, NOW)) == expected


def test_the_oldest_run_goes_first_under_the_hourly_limit() -> None:
    late = judged(INFRA, run_id=1, first=500)
    early = judged(INFRA, run_id=2, first=1)
    choices = decide([late, early], Ledger(), DEFAULT.model_copy(update={"max_per_hour": 1}), NOW)
    assert results(choices) == [(2, RERUN), (1, DEFERRED)]


def test_deciding_twice_over_the_recorded_ledger_reruns_nothing_twice() -> None:
    """Idempotence across ticks: the second tick sees the first tick's record."""
    runs = [judged(INFRA), judged(INFRA, INFRA, run_id=2)]
    ledger = Ledger()
    for c in decide(runs, ledger, DEFAULT, NOW):
        assert c.result == RERUN
        ledger = record_rerun(ledger, c, NOW)
    assert {c.result for c in decide(runs, ledger, DEFAULT, NOW)} == {ALREADY}


def test_an_asking_never_answered_is_confirmed_not_asked_blindly() -> None:
    """The record is written before the request: a controller that finds it unanswered
    (its writer died before GitHub's answer was recorded) reads the run first; the
    re-run is not counted twice against the hourly bound."""
    first = decide([judged(INFRA)], Ledger(), DEFAULT, NOW)[0]
    asking = record_rerun(Ledger(), first, NOW, asked=False)
    (again,) = decide([judged(INFRA)], asking, DEFAULT.model_copy(update={"max_per_hour": 1}), NOW)
    assert (again.result, again.confirm) == (RERUN, True)
    answered = record_rerun(asking, again, NOW + timedelta(minutes=1))
    assert answered.reruns[first.run.key].at == NOW  # the time of the asking is kept
    assert forget_rerun(asking, first) == Ledger()


def test_the_ledger_round_trips_through_the_store_entries() -> None:
    first = decide([judged(INFRA, INFRA, attempt=2)], Ledger(), DEFAULT, NOW)[0]
    ledger = record_exhausted(RERAN, first, NOW)
    ledger = record_denied(ledger, "other", NOW)
    ledger = record_rerun(
        ledger, decide([judged(INFRA, run_id=3)], Ledger(), DEFAULT, NOW)[0], NOW, asked=False
    )
    assert decode(encode(ledger)) == ledger
    assert ledger.exhausted["r#10#2"].lost_jobs == 2


def test_diff_writes_only_what_changed() -> None:
    newer = record_denied(RERAN, "other", NOW)
    put, drop = diff(encode(RERAN), newer)
    assert list(put) == ["denied:other"]
    assert drop == set()
    put, drop = diff(encode(newer), record_allowed(newer, "other"))
    assert (put, drop) == ({}, {"denied:other"})


#: What the per-job ledger stored for a job it re-ran (job 7 of run 10, attempt 1).
PER_JOB = {
    "rerun:r#7": json.dumps(
        {
            "repo": "r",
            "run_id": 10,
            "job_id": 7,
            "attempt": 1,
            "at": NOW.isoformat(),
            "reason": "spot_interruption",
        }
    ),
    "exhausted:r#8": json.dumps(
        {
            "repo": "r",
            "run_id": 11,
            "job_id": 8,
            "job_name": "test",
            "runner": "ci-i-0abc",
            "attempt": 2,
            "reason": "runner_lost",
            "evidence": "annotation",
            "at": NOW.isoformat(),
        }
    ),
}


def test_entries_of_the_per_job_ledger_hold_their_run_attempt() -> None:
    """Before, the ledger was keyed by job (``rerun:repo#job_id``). A controller upgraded
    in the middle of a re-run must not ask again for that run attempt: the old entries
    read as their run attempt's, and the next save replaces them under the new keys."""
    ledger = decode(PER_JOB)
    assert set(ledger.reruns) == {"r#10#1"}
    assert ledger.reruns["r#10#1"].jobs == (7,)
    assert set(ledger.exhausted) == {"r#11#2"}
    assert results(decide([judged(INFRA)], ledger, DEFAULT, NOW)) == [(10, ALREADY)]
    put, drop = diff(PER_JOB, ledger)
    assert set(put) == {"rerun:r#10#1", "exhausted:r#11#2"}
    assert drop == set(PER_JOB)


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param({"rerun:r#1": "not json"}, id="not-json"),
        pytest.param({"rerun:r#1": "{}"}, id="missing-fields"),
        pytest.param({"rerun:r#1": "[]"}, id="not-an-object"),
        pytest.param({"mystery:x": '{"at": "2026-11-30T12:00:00+00:00"}'}, id="unknown-kind"),
        pytest.param({"denied:r": '{"at": "yesterday"}'}, id="bad-time"),
    ],
)
def test_unreadable_entries_are_skipped_and_left_alone(entries: Mapping[str, str]) -> None:
    """Skipped when read; never dropped by a save (a newer version may have written it)."""
    stored = {**entries, **encode(RERAN)}
    assert decode(stored) == RERAN
    assert diff(stored, RERAN) == ({}, set())


def test_prune_keeps_what_still_matters() -> None:
    old = NOW - RETENTION
    ledger = replace(RERAN, reruns={k: replace(r, at=old) for k, r in RERAN.reruns.items()})
    ledger = record_denied(ledger, "r", NOW - RETENTION)
    assert ledger.pruned(NOW) == Ledger()
    # a denial outlives its pause: the incident lasts until a re-run goes through
    paused_no_more = record_denied(Ledger(), "r", NOW - DENIED_PAUSE)
    assert paused_no_more.pruned(NOW) == paused_no_more
    assert not paused_no_more.is_denied("r", NOW)


def test_an_exhausted_run_alerts_for_a_window_then_stops() -> None:
    choice = decide([judged(INFRA, attempt=2)], Ledger(), DEFAULT, NOW)[0]
    ledger = record_exhausted(Ledger(), choice, NOW)
    (alert,) = ledger.alerting(NOW + ALERT_WINDOW - timedelta(seconds=1))
    assert (alert.repo, alert.run_id, alert.job_id, alert.attempt) == ("r", 10, 1, 2)
    assert alert.runner == "ci-i-0abc12345678"
    assert alert.evidence == INFRA.evidence
    assert ledger.alerting(NOW + ALERT_WINDOW) == ()


class MemoryStore:
    """A hand-written JobRetryStore."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def load_job_retries(self) -> dict[str, str]:
        return dict(self.data)

    def save_job_retries(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        for k in drop:
            self.data.pop(k, None)
        self.data.update(put)


def test_a_restart_reads_back_what_was_rerun() -> None:
    store = MemoryStore()
    put, drop = diff({}, RERAN)
    store.save_job_retries(put, drop)
    restarted = decode(store.load_job_retries())
    assert results(decide([judged(INFRA)], restarted, DEFAULT, NOW)) == [(10, ALREADY)]


def test_the_decision_says_what_was_lost_cancelled_and_asked() -> None:
    (choice,) = decide([judged(INFRA, CANCEL, CANCEL)], Ledger(), DEFAULT, NOW)
    entry = choice.as_dict()
    assert entry["verdict"] == "lost" and entry["result"] == RERUN
    assert entry["asked"] == "rerun-failed-jobs"
    assert [j["job_id"] for j in entry["lost"]] == [1]
    assert [j["job_id"] for j in entry["cancelled_by_loss"]] == [2, 3]
    assert entry["failed_on_their_own"] == entry["cancelled_not_by_loss"] == []
    lines = choice.job_lines()
    assert [(x["job_id"], x["reason"], x["result"]) for x in lines] == [
        (1, SPOT, RERUN),
        (2, "cancelled_by_loss", RERUN),
        (3, "cancelled_by_loss", RERUN),
    ]
    json.dumps(entry)
    json.dumps(lines)
