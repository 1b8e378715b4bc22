"""The webhook source and receiver with the job index in the state store.

Two "replicas" here are two receiver/source pairs on one store: what one receives, the
other's tick sees, without a poll. The store is SQLite (one file, as one process would
hold it) or DynamoDB on moto's server; a hand-written wrapper makes it fail on demand.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.app.webhooks import IndexWatcher
from autoscaler.domain import Job, JobStatus
from autoscaler.errors import StateError, StateUnavailableError
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_rows import Changes, IndexRow, JobIndexStore, Outcome
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.state.dynamodb import DynamoStore
from autoscaler.state.port import StateStore
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics
from tests.adapters.test_state_dynamodb import (  # noqa: F401 (fixtures)
    dynamo_table,
    leading_store,
    lease_on,
    moto,
)
from tests.adapters.webhook_support import (
    ListedSource,
    counted,
    fresh_metrics,
    headers,
    hook_config,
)
from tests.unit.webhook_payloads import body

T0 = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
LABELS = frozenset({"self-hosted", "linux.4xlarge"})


class FlakyStore:
    """A JobIndexStore that delegates, or raises what an unreachable DynamoDB raises."""

    def __init__(self, inner: JobIndexStore) -> None:
        self.inner = inner
        self.down = False
        #: Operations that fail while the rest work.
        self.failing: set[str] = set()
        #: The next read of the accepted rows says some were lost to the reader.
        self.lose = False

    def _check(self, operation: str) -> None:
        if self.down or operation in self.failing:
            raise StateUnavailableError(
                "dynamodb table t: unreachable", path="t", code="unreachable", operation=operation
            )

    def record_job_events(self, rows: Sequence[IndexRow]) -> list[Outcome | StateError]:
        self._check("record_job_events")
        return self.inner.record_job_events(rows)

    def load_job_index(self, now: float) -> list[IndexRow]:
        self._check("load_job_index")
        return self.inner.load_job_index(now)

    def job_index_changes(self, cursor: object | None) -> Changes:
        self._check("job_index_changes")
        changes = self.inner.job_index_changes(cursor)
        if self.lose and cursor is not None:
            self.lose = False
            return Changes((), changes.cursor, complete=False)
        return changes

    def prune_job_index(self, now: float) -> None:
        self._check("prune_job_index")
        self.inner.prune_job_index(now)

    def reconcile_job_index(self, put: Sequence[IndexRow], drop: Sequence[IndexRow]) -> None:
        self._check("reconcile_job_index")
        self.inner.reconcile_job_index(put, drop)

    def job_index_version(self) -> str | None:
        self._check("job_index_version")
        return self.inner.job_index_version()


@pytest.fixture(params=["sqlite", "dynamodb"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FlakyStore]:
    if request.param == "sqlite":
        s: StateStore = SqliteStore(tmp_path / "state.db")
    else:
        s = leading_store(request.getfixturevalue("moto"))
    yield FlakyStore(s)
    s.close()


class Replica:
    """One controller's webhook parts on the shared store."""

    def __init__(self, store: JobIndexStore, *, acting: bool, clock: datetime = T0) -> None:
        self.metrics: Metrics = fresh_metrics()
        self.inner = ListedSource()
        self.acting = acting
        self.now = clock
        hook = hook_config(reconcile_interval=300.0)
        self.receiver = WebhookReceiver(hook, self.metrics, clock=lambda: self.now, store=store)
        self.source = WebhookSource(
            self.inner,
            self.receiver,
            hook,
            self.metrics,
            poll_interval=60.0,
            store=store,
            acting=lambda: self.acting,
        )

    def deliver(self, action: str, job_id: int, delivery: str | None = None) -> int:
        raw = body(action, job_id)
        return self.receiver.handle(headers(raw, delivery=delivery), raw).status

    def tick(self, seconds: float) -> dict[int, JobStatus]:
        self.now = T0 + timedelta(seconds=seconds)
        return {j.id: j.status for j in self.source.observe(self.now).jobs}

    def whole_reads(self) -> dict[str, float]:
        return {
            reason: value
            for reason in ("start", "takeover", "lost")
            if (
                value := self.metrics.registry.get_sample_value(
                    "ci_autoscaler_webhook_index_reads_total", {"reason": reason}
                )
            )
        }

    def store_errors(self, operation: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "ci_autoscaler_webhook_store_errors_total",
            {"operation": operation, "code": "unreachable"},
        )
        return value or 0.0


def test_a_delivery_to_the_follower_counts_at_the_leaders_next_tick(shared: FlakyStore) -> None:
    """Before: the follower queued it in its own memory, the leader never saw it."""
    leader, follower = Replica(shared, acting=True), Replica(shared, acting=False)
    leader.tick(0)
    follower.tick(0)
    assert follower.deliver("queued", 1) == 202
    assert counted(follower.metrics, "workflow_job", "queued", "accepted") == 1
    assert leader.tick(1) == {1: JobStatus.QUEUED}
    assert leader.inner.polls == 1  # the index answered, GitHub was not asked
    assert leader.source.queued_received == {1: T0}  # its reaction clock runs


def test_a_follower_that_takes_over_has_the_leaders_index_without_a_reconcile(
    shared: FlakyStore,
) -> None:
    leader, follower = Replica(shared, acting=True), Replica(shared, acting=False)
    leader.tick(0)
    follower.tick(0)
    for job_id in (1, 2, 3):
        assert leader.deliver("queued", job_id) == 202
    leader.deliver("in_progress", 2)
    leader.deliver("completed", 3)
    follower.acting = True  # the leader died; the lease is the follower's now
    assert follower.tick(5) == {1: JobStatus.QUEUED, 2: JobStatus.IN_PROGRESS}
    assert follower.inner.polls == 1
    assert follower.source.index.completion(3) is not None


def test_the_same_delivery_to_both_replicas_is_one_event(shared: FlakyStore) -> None:
    """The load balancer retried on the other replica: no double count, no move back."""
    a, b = Replica(shared, acting=True), Replica(shared, acting=False)
    assert a.deliver("in_progress", 1, delivery="d-1") == 202
    assert b.deliver("in_progress", 1, delivery="d-1") == 202
    assert b.deliver("queued", 1) == 202  # late
    assert counted(b.metrics, "workflow_job", "in_progress", "duplicate") == 1
    assert counted(b.metrics, "workflow_job", "queued", "stale") == 1
    assert a.tick(0) == {}  # the start reconcile: GitHub lists nothing live
    b.deliver("completed", 1)
    b.deliver("queued", 1, delivery="resurrect")
    assert a.source.index.completion(1) is None  # the reconcile dropped it; now:
    a.tick(1)
    assert a.source.index.completion(1) is not None and a.source.index.get(1) is None


def test_an_unreachable_store_answers_503_counts_and_logs_and_a_redelivery_is_taken(
    shared: FlakyStore, caplog: pytest.LogCaptureFixture
) -> None:
    r = Replica(shared, acting=True)
    shared.down = True
    with caplog.at_level(logging.DEBUG):
        assert r.deliver("queued", 1, delivery="d-9") == 503
    assert r.store_errors("record") == 1
    assert counted(r.metrics, "workflow_job", "queued", "store_error") == 1
    assert any("state store" in m and "d-9" in m for m in caplog.messages)
    shared.down = False
    assert r.deliver("queued", 1, delivery="d-9") == 202  # GitHub's redelivery
    assert counted(r.metrics, "workflow_job", "queued", "accepted") == 1


def test_a_store_that_cannot_be_read_keeps_the_last_index_for_the_tick(
    shared: FlakyStore,
) -> None:
    r = Replica(shared, acting=True)
    r.tick(0)
    r.deliver("queued", 1)
    assert r.tick(1) == {1: JobStatus.QUEUED}
    shared.down = True
    assert r.tick(2) == {1: JobStatus.QUEUED}
    assert r.store_errors("load") == 1


def test_the_reconcile_writes_its_diff_and_a_follower_writes_nothing(shared: FlakyStore) -> None:
    leader, follower = Replica(shared, acting=True), Replica(shared, acting=False)
    for r in (leader, follower):
        r.tick(0)
    leader.deliver("queued", 1)
    leader.deliver("queued", 2)
    for r in (leader, follower):
        r.tick(1)
        r.inner.jobs = [Job(3, 30, "app", "missed", LABELS, JobStatus.QUEUED, T0)]
    follower.tick(301)  # its reconcile only changes its own view
    assert sorted(r.job_id for r in shared.load_job_index(T0.timestamp())) == [1, 2]
    assert leader.tick(301) == {3: JobStatus.QUEUED}
    assert [r.job_id for r in shared.load_job_index(T0.timestamp())] == [3]
    assert follower.tick(302) == {3: JobStatus.QUEUED}


def test_the_leader_wakes_when_another_replica_queues_a_job(moto: str) -> None:  # noqa: F811
    store = leading_store(moto)
    table = dynamo_table(moto)
    other = DynamoStore(table, lease_on(table, "follower"))
    woken: list[int] = []
    acting = {"now": True}
    watcher = IndexWatcher(store, lambda: acting["now"], lambda: woken.append(1), fresh_metrics())
    assert watcher.step() is False  # learns the token
    Replica(other, acting=False).deliver("queued", 1)
    assert watcher.step() is True and woken == [1]
    assert watcher.step() is False  # nothing new
    Replica(other, acting=False).deliver("in_progress", 1)
    assert watcher.step() is False  # only demand wakes the tick
    acting["now"] = False
    Replica(other, acting=False).deliver("queued", 2)
    assert watcher.step() is False  # a follower does not wake for it


def test_a_watch_that_fails_is_counted_not_raised(tmp_path: Path) -> None:
    flaky = FlakyStore(SqliteStore(tmp_path / "s.db"))
    flaky.down = True
    metrics = fresh_metrics()
    watcher = IndexWatcher(flaky, lambda: True, lambda: None, metrics)
    assert watcher.step() is False
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_webhook_store_errors_total", {"operation": "watch", "code": "unreachable"}
    )
    assert value == 1


def test_the_stored_index_is_read_whole_once_then_followed_and_again_at_a_takeover(
    shared: FlakyStore,
) -> None:
    """A tick used to select and parse every stored row: its cost grew with the six hours
    of completed jobs the index keeps. Now each process reads it whole once and then
    applies only the rows accepted since, its own and the other replica's."""
    leader, follower = Replica(shared, acting=True), Replica(shared, acting=False)
    assert leader.tick(0) == {}
    assert follower.tick(0) == {}
    follower.deliver("queued", 1)
    leader.deliver("queued", 2)
    assert leader.tick(1) == {1: JobStatus.QUEUED, 2: JobStatus.QUEUED}
    follower.deliver("in_progress", 1)
    leader.deliver("completed", 2)
    assert leader.tick(2) == {1: JobStatus.IN_PROGRESS}
    assert follower.tick(2) == {1: JobStatus.IN_PROGRESS}
    assert leader.whole_reads() == {"start": 1.0}
    assert follower.whole_reads() == {"start": 1.0}
    follower.acting = True  # the leader died; the follower reads whole as it takes over
    assert follower.tick(3) == {1: JobStatus.IN_PROGRESS}
    assert follower.whole_reads() == {"start": 1.0, "takeover": 1.0}


def test_a_reader_that_lost_rows_reads_whole_counts_and_warns(
    shared: FlakyStore, caplog: pytest.LogCaptureFixture
) -> None:
    r = Replica(shared, acting=True)
    r.tick(0)
    r.deliver("queued", 1)
    shared.lose = True  # the rows of job 1 are lost to the reader: only a whole read has them
    with caplog.at_level(logging.WARNING):
        assert r.tick(1) == {1: JobStatus.QUEUED}
    assert r.whole_reads() == {"start": 1.0, "lost": 1.0}
    assert any("lost to this reader" in m for m in caplog.messages)


def test_a_prune_that_fails_is_counted_and_the_tick_goes_on(
    shared: FlakyStore, caplog: pytest.LogCaptureFixture
) -> None:
    r = Replica(shared, acting=True)
    r.tick(0)
    r.deliver("queued", 1)
    shared.failing = {"prune_job_index"}
    with caplog.at_level(logging.WARNING):
        assert r.tick(61) == {1: JobStatus.QUEUED}  # a minute on: the prune is due
    assert r.store_errors("prune") == 1
    assert any("prune on the state store failed" in m for m in caplog.messages)
