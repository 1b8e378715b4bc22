"""The re-run decision's bounds, and the ledger that makes it idempotent."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.config.job_retry import JobRetryConfig
from autoscaler.domain import CompletedJob
from autoscaler.job_retry.classify import SPOT, USER, Verdict
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


def results(choices: list[Choice]) -> list[tuple[int, str]]:
    return [(c.job.job_id, c.result) for c in choices]


DEFAULT = JobRetryConfig(enabled=True)
RERAN = record_rerun(Ledger(), decide([(job(1), INFRA)], Ledger(), DEFAULT, NOW)[0], NOW)


@pytest.mark.parametrize(
    ("judged", "ledger", "config", "expected"),
    [
        pytest.param([(job(1), INFRA)], Ledger(), DEFAULT, [(1, RERUN)], id="infra-first-attempt"),
        pytest.param([(job(1), USERS)], Ledger(), DEFAULT, [(1, SKIP)], id="users-failure"),
        pytest.param([(job(1), INFRA)], RERAN, DEFAULT, [(1, ALREADY)], id="already-rerun"),
        pytest.param(
            [(job(1, attempt=2), INFRA)],
            Ledger(),
            DEFAULT,
            [(1, EXHAUSTED)],
            id="rerun-failed-again-exhausted",
        ),
        pytest.param(
            [(job(1, attempt=2), INFRA)],
            Ledger(),
            DEFAULT.model_copy(update={"max_attempts": 3}),
            [(1, RERUN)],
            id="third-attempt-allowed",
        ),
        pytest.param(
            [(job(1), INFRA)],
            Ledger(),
            DEFAULT.model_copy(update={"max_attempts": 1}),
            [(1, SKIP)],
            id="max-attempts-1-never-reruns-nor-alerts",
        ),
        pytest.param(
            [(job(i), INFRA) for i in range(1, 7)],
            Ledger(),
            DEFAULT,
            [(i, OUTAGE) for i in range(1, 7)],
            id="six-failed-in-run-is-an-outage",
        ),
        pytest.param(
            [(job(i), INFRA if i < 3 else USERS) for i in range(1, 6)],
            Ledger(),
            DEFAULT,
            [(1, RERUN), (2, RERUN), (3, SKIP), (4, SKIP), (5, SKIP)],
            id="five-failed-in-run-is-within-bounds",
        ),
        pytest.param(
            [(job(i, run_id=i), INFRA) for i in range(1, 5)],
            Ledger(),
            DEFAULT.model_copy(update={"max_per_hour": 2}),
            [(1, RERUN), (2, RERUN), (3, DEFERRED), (4, DEFERRED)],
            id="hourly-limit-defers",
        ),
        pytest.param(
            [(job(2, run_id=2), INFRA)],
            RERAN,
            DEFAULT.model_copy(update={"max_per_hour": 1}),
            [(2, DEFERRED)],
            id="earlier-reruns-count-in-the-hour",
        ),
        pytest.param(
            [(job(2, run_id=2), INFRA)],
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
            [(job(1), INFRA)],
            record_denied(Ledger(), "r", NOW - timedelta(minutes=5)),
            DEFAULT,
            [(1, DENIED)],
            id="denied-repo",
        ),
        pytest.param(
            [(job(1, repo="other"), INFRA)],
            record_denied(Ledger(), "r", NOW),
            DEFAULT,
            [(1, RERUN)],
            id="denial-is-per-repository",
        ),
        pytest.param(
            [(job(1), INFRA)],
            record_denied(Ledger(), "r", NOW - DENIED_PAUSE),
            DEFAULT,
            [(1, RERUN)],
            id="denial-pause-over-one-probe",
        ),
    ],
)
def test_decide(
    judged: list[tuple[CompletedJob, Verdict]],
    ledger: Ledger,
    config: JobRetryConfig,
    expected: list[tuple[int, str]],
) -> None:
    assert results(decide(judged, ledger, config, NOW)) == expected


def test_oldest_completion_goes_first_under_the_hourly_limit() -> None:
    late = job(1, run_id=1, completed_at=NOW - timedelta(minutes=1))
    early = job(2, run_id=2, completed_at=NOW - timedelta(minutes=50))
    choices = decide(
        [(late, INFRA), (early, INFRA)],
        Ledger(),
        DEFAULT.model_copy(update={"max_per_hour": 1}),
        NOW,
    )
    assert results(choices) == [(2, RERUN), (1, DEFERRED)]


def test_deciding_twice_over_the_recorded_ledger_reruns_nothing_twice() -> None:
    """Idempotence across ticks: the second tick sees the first tick's record."""
    judged = [(job(1), INFRA), (job(2, run_id=2), INFRA)]
    ledger = Ledger()
    for c in decide(judged, ledger, DEFAULT, NOW):
        assert c.result == RERUN
        ledger = record_rerun(ledger, c, NOW)
    assert {c.result for c in decide(judged, ledger, DEFAULT, NOW)} == {ALREADY}


def test_the_ledger_round_trips_through_the_store_entries() -> None:
    first = decide([(job(1, attempt=2), INFRA)], Ledger(), DEFAULT, NOW)[0]
    ledger = record_exhausted(RERAN, first, NOW)
    ledger = record_denied(ledger, "other", NOW)
    assert decode(encode(ledger)) == ledger


def test_diff_writes_only_what_changed() -> None:
    newer = record_denied(RERAN, "other", NOW)
    put, drop = diff(RERAN, newer)
    assert list(put) == ["denied:other"]
    assert drop == set()
    put, drop = diff(newer, record_allowed(newer, "other"))
    assert (put, drop) == ({}, {"denied:other"})


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
def test_unreadable_entries_are_skipped(entries: Mapping[str, str]) -> None:
    assert decode({**entries, **encode(RERAN)}) == RERAN


def test_prune_keeps_what_still_matters() -> None:
    old = NOW - RETENTION
    ledger = replace(RERAN, reruns={k: replace(r, at=old) for k, r in RERAN.reruns.items()})
    ledger = record_denied(ledger, "r", NOW - RETENTION)
    assert ledger.pruned(NOW) == Ledger()
    # a denial outlives its pause: the incident lasts until a re-run goes through
    paused_no_more = record_denied(Ledger(), "r", NOW - DENIED_PAUSE)
    assert paused_no_more.pruned(NOW) == paused_no_more
    assert not paused_no_more.is_denied("r", NOW)


def test_an_exhausted_job_alerts_for_a_window_then_stops() -> None:
    choice = decide([(job(1, attempt=2), INFRA)], Ledger(), DEFAULT, NOW)[0]
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
    put, drop = diff(Ledger(), RERAN)
    store.save_job_retries(put, drop)
    restarted = decode(store.load_job_retries())
    assert results(decide([(job(1), INFRA)], restarted, DEFAULT, NOW)) == [(1, ALREADY)]
