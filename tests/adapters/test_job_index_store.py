"""The webhook job index in the state store, both backends.

Before this the index lived in the memory of the process whose listener received the
delivery: a follower's deliveries never counted (so the follower answered the load
balancer's health check 503), and a follower that took over started with an empty index
until its next reconcile. Now every replica writes what it receives to the store with a
conditional write carrying the webhook ordering rules, and the leader reads it back.

The rules are checked as tables of event sequences against SQLite and DynamoDB (moto's
server): the outcome of each write, and what the index holds after.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.domain import Job, JobStatus
from autoscaler.errors import NotLeaderError, StateError
from autoscaler.observe.github.webhook_index import JobIndex, event_row, poll_row
from autoscaler.observe.github.webhook_rows import (
    DONE_TTL,
    LIVE_TTL,
    IndexRow,
    JobIndexStore,
    Outcome,
)
from autoscaler.observe.github.webhooks import WorkflowJobEvent
from autoscaler.state.dynamodb import DynamoStore
from autoscaler.state.dynamodb_table import TTL_ATTRIBUTE
from autoscaler.state.port import StateStore
from autoscaler.state.sqlite import SqliteStore
from tests.adapters.test_state_dynamodb import (  # noqa: F401 (fixtures)
    dynamo_table,
    leading_store,
    lease_on,
    moto,
)

T0 = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
STATUS = {
    "queued": JobStatus.QUEUED,
    "waiting": JobStatus.WAITING,
    "in_progress": JobStatus.IN_PROGRESS,
    "completed": JobStatus.COMPLETED,
}


def follower_store(endpoint: str) -> DynamoStore:
    """A replica that does not hold the lease (the leader's is taken by leading_store)."""
    table = dynamo_table(endpoint)
    return DynamoStore(table, lease_on(table, "follower"))


def event(action: str, job_id: int = 7, *, runner: str | None = None, at: int = 0) -> IndexRow:
    status = STATUS[action]
    job = Job(
        id=job_id,
        run_id=70,
        repo="app",
        name="build",
        labels=frozenset({"self-hosted", "linux.4xlarge"}),
        status=status,
        created_at=T0,
        started_at=T0 + timedelta(seconds=5) if action in ("in_progress", "completed") else None,
        runner_name=runner,
    )
    e = WorkflowJobEvent(
        delivery=f"d-{action}-{at}",
        action=action,
        job=job,
        conclusion="success" if action == "completed" else None,
        completed_at=T0 + timedelta(seconds=9) if action == "completed" else None,
    )
    return event_row(e, T0 + timedelta(seconds=at))


A, D, S = Outcome.ACCEPTED, Outcome.DUPLICATE, Outcome.STALE


#: Sequences of one job's events: the outcome of each write, and the job's status after.
ORDERING = [
    pytest.param(["queued", "queued"], [A, D], "queued", id="redelivery-is-a-no-op"),
    pytest.param(["queued", "in_progress", "completed"], [A, A, A], None, id="in-order"),
    pytest.param(
        ["in_progress", "queued"], [A, S], "in_progress", id="older-state-never-moves-back"
    ),
    pytest.param(
        ["completed", "queued", "in_progress"],
        [A, S, S],
        None,
        id="completed-for-an-unseen-job-is-remembered",
    ),
    pytest.param(["completed", "completed"], [A, D], None, id="completed-twice"),
    pytest.param(
        ["queued", "waiting", "queued"],
        [A, A, A],
        "queued",
        id="same-rank-with-a-changed-job-is-taken",
    ),
    pytest.param(
        ["in_progress", "completed", "in_progress", "queued"],
        [A, A, S, S],
        None,
        id="late-events-after-completed-are-stale",
    ),
]


@pytest.mark.parametrize(("sequence", "outcomes", "final"), ORDERING)
def test_the_ordering_rules_hold_in_the_store(
    store: StateStore, sequence: list[str], outcomes: list[Outcome], final: str | None
) -> None:
    got = [record(store, event(a, at=i)) for i, a in enumerate(sequence)]
    assert got == outcomes
    index = JobIndex()
    index.restore(store.load_job_index(T0.timestamp()))
    job = index.get(7)
    if final is None:
        assert job is None
        completion = index.completion(7)
        assert completion is not None and completion.conclusion == "success"
    else:
        assert job is not None and job.status is STATUS[final]


@pytest.mark.parametrize(("sequence", "outcomes", "final"), ORDERING)
def test_the_ordering_rules_hold_within_one_batch(
    store: StateStore, sequence: list[str], outcomes: list[Outcome], final: str | None
) -> None:
    """The committer writes what waits as one batch: a job's later row in the same batch
    is decided against its earlier one, as if each had been written alone."""
    assert store.record_job_events([event(a, at=i) for i, a in enumerate(sequence)]) == outcomes
    index = JobIndex()
    index.restore(store.load_job_index(T0.timestamp()))
    job = index.get(7)
    if final is None:
        assert job is None and index.completion(7) is not None
    else:
        assert job is not None and job.status is STATUS[final]


def test_a_follower_writes_what_it_receives_and_the_leader_reads_it(moto: str) -> None:  # noqa: F811
    """No lease needed: an index write is an observation. The same delivery reaching both
    replicas (a retry through the load balancer) is one row, and the follower's
    ``queued`` cannot undo the ``in_progress`` the leader wrote."""
    leader = leading_store(moto)
    follower = follower_store(moto)
    assert follower.lease.token() is None
    assert record(follower, event("queued", 1)) is A
    assert record(leader, event("queued", 1)) is D
    assert record(leader, event("in_progress", 2, runner="r-1")) is A
    assert record(follower, event("queued", 2)) is S
    rows = {r.job_id: r for r in leader.load_job_index(T0.timestamp())}
    assert (rows[1].rank, rows[2].rank) == (0, 1)
    assert follower.load_job_index(T0.timestamp()) == list(rows.values())


def test_the_reconcile_is_the_leaders_and_never_overwrites_a_newer_event(store: StateStore) -> None:
    """The poll's page may be older than an event: the reconcile's put never lowers a row
    nor touches a tombstone, and a row it drops is dropped only if nobody rewrote it."""
    for row in (event("queued", 1), event("in_progress", 2), event("completed", 3)):
        record(store, row)
    stale_listing = [
        poll_row(replace_status(event("queued", 2)), T0),  # GitHub's page is older
        poll_row(replace_status(event("queued", 3)), T0),  # a tombstone stays
        poll_row(replace_status(event("queued", 4)), T0),  # missed by the webhooks
    ]
    record(store, event("in_progress", 5))
    read = {r.job_id: r for r in store.load_job_index(T0.timestamp())}
    # job 5 moves on (its runner is named) after the reconcile read it
    assert record(store, event("in_progress", 5, runner="r-5", at=1)) is A
    store.reconcile_job_index(stale_listing, [read[1], read[5]])
    rows = {r.job_id: r for r in store.load_job_index(T0.timestamp())}
    assert sorted(rows) == [2, 3, 4, 5]
    assert (rows[2].rank, rows[3].rank, rows[4].rank, rows[5].rank) == (1, 2, 0, 1)


def test_a_follower_cannot_write_the_reconcile(moto: str) -> None:  # noqa: F811
    leading_store(moto)
    follower = follower_store(moto)
    with pytest.raises(NotLeaderError):
        follower.reconcile_job_index([poll_row(replace_status(event("queued", 4)), T0)], [])


def test_old_rows_expire(store: StateStore) -> None:
    record(store, event("completed", 1))
    record(store, event("queued", 2))
    assert len(store.load_job_index(T0.timestamp() + DONE_TTL - 10)) == 2
    assert [r.job_id for r in store.load_job_index(T0.timestamp() + DONE_TTL + 10)] == [2]
    assert store.load_job_index(T0.timestamp() + LIVE_TTL + 10) == []


def test_dynamodb_rows_carry_the_ttl_attribute(moto: str) -> None:  # noqa: F811
    store = leading_store(moto)
    record(store, event("completed", 1))
    (item,) = store.table.query("job#0")
    assert int(item[TTL_ATTRIBUTE]["N"]) == int(T0.timestamp()) + DONE_TTL


def test_the_wake_up_token_moves_only_for_an_accepted_queued_event(moto: str) -> None:  # noqa: F811
    leader = leading_store(moto)
    follower = follower_store(moto)
    first = leader.job_index_version()
    record(follower, event("queued", 1))
    second = leader.job_index_version()
    assert second != first
    record(follower, event("queued", 1))  # a duplicate
    record(follower, event("in_progress", 1))
    assert leader.job_index_version() == second


def test_sqlite_has_no_other_writer_to_watch(tmp_path: Path) -> None:
    assert SqliteStore(tmp_path / "s.db").job_index_version() is None


def record(store: JobIndexStore, row: IndexRow) -> Outcome | StateError:
    """One delivery's write (the listener writes them in batches)."""
    (outcome,) = store.record_job_events([row])
    return outcome


def replace_status(row: IndexRow) -> Job:
    """The job a row holds (the poll lists jobs, not rows)."""
    index = JobIndex()
    index.restore([row])
    job = index.get(row.job_id)
    assert job is not None
    return job
