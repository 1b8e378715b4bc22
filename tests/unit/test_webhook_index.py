"""The job index: deliveries lost, duplicated and reordered never leave it wrong for long.

Each table row is a sequence of deliveries (action, job id, delivery id) and what the
index must hold after them: the live jobs' statuses, the tombstones, and each outcome.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.domain import Job, JobStatus, Runner, RunnerType
from autoscaler.observe.github.webhook_index import JobIndex, Outcome, event_row
from autoscaler.observe.github.webhooks import WorkflowJobEvent, parse_workflow_job
from autoscaler.observe.queue import compute_queue
from tests.unit.webhook_payloads import body

NOW = datetime(2026, 11, 30, 3, 10, tzinfo=UTC)
A, D, S = Outcome.ACCEPTED, Outcome.DUPLICATE, Outcome.STALE


def event(action: str, job_id: int, delivery: str, **kwargs: object) -> WorkflowJobEvent:
    extra = dict(kwargs)
    if action in ("in_progress", "completed"):
        extra.setdefault("runner_name", "runner-i-0abc12345")
    return parse_workflow_job(body(action, job_id, **extra), delivery)


#: id, deliveries [(action, job, delivery)], outcomes, live {job: status}, completed ids
SEQUENCES = [
    ("queued", [("queued", 1, "a")], [A], {1: "queued"}, set()),
    (
        "lifecycle-in-order",
        [("queued", 1, "a"), ("in_progress", 1, "b"), ("completed", 1, "c")],
        [A, A, A],
        {},
        {1},
    ),
    (
        "redelivery-is-a-no-op",
        [("queued", 1, "a"), ("queued", 1, "a")],
        [A, D],
        {1: "queued"},
        set(),
    ),
    (
        "redelivered-queued-after-start-is-a-no-op",
        [("queued", 1, "a"), ("in_progress", 1, "b"), ("queued", 1, "a")],
        [A, A, D],
        {1: "in_progress"},
        set(),
    ),
    (
        "same-state-new-delivery-is-a-duplicate",
        [("queued", 1, "a"), ("queued", 1, "b")],
        [A, D],
        {1: "queued"},
        set(),
    ),
    (
        "older-state-never-undoes-a-newer-one",
        [("in_progress", 1, "b"), ("queued", 1, "a")],
        [A, S],
        {1: "in_progress"},
        set(),
    ),
    (
        "completed-first-then-the-rest-are-stale",
        [("completed", 1, "c"), ("in_progress", 1, "b"), ("queued", 1, "a")],
        [A, S, S],
        {},
        {1},
    ),
    (
        "a-late-queued-cannot-resurrect-an-unseen-completed-job",
        [("completed", 9, "c"), ("queued", 9, "a")],
        [A, S],
        {},
        {9},
    ),
    (
        "completed-twice-is-a-duplicate",
        [("completed", 1, "c"), ("completed", 1, "c2")],
        [A, D],
        {},
        {1},
    ),
    (
        "waiting-and-queued-share-a-rank",
        [("waiting", 1, "w"), ("queued", 1, "a")],
        [A, A],
        {1: "queued"},
        set(),
    ),
    (
        "jobs-are-independent",
        [("queued", 1, "a"), ("queued", 2, "b"), ("completed", 1, "c")],
        [A, A, A],
        {2: "queued"},
        {1},
    ),
]


@pytest.mark.parametrize(
    ("deliveries", "outcomes", "live", "completed"),
    [s[1:] for s in SEQUENCES],
    ids=[s[0] for s in SEQUENCES],
)
def test_ordering_rules(
    deliveries: list[tuple[str, int, str]],
    outcomes: list[Outcome],
    live: dict[int, str],
    completed: set[int],
) -> None:
    index = JobIndex()
    got = [index.apply(event(a, j, d), NOW) for a, j, d in deliveries]
    assert got == outcomes
    assert {job.id: job.status.value for job in index.jobs()} == live
    assert {c.job_id for c in index.completions()} == completed


def test_a_duplicate_changes_nothing_at_all() -> None:
    index = JobIndex()
    index.apply(event("queued", 1, "a"), NOW)
    before = index.jobs()
    assert index.apply(event("queued", 1, "a", labels=("gpu",)), NOW) is D
    assert index.jobs() == before


def test_completions_carry_what_job_retry_needs() -> None:
    """Job retry reads conclusion, runner name and run attempt."""
    index = JobIndex()
    index.apply(event("completed", 5, "c", conclusion="failure", run_attempt=2), NOW)
    done = index.completion(5)
    assert done is not None
    assert (done.conclusion, done.runner_name, done.run_attempt) == (
        "failure",
        "runner-i-0abc12345",
        2,
    )
    assert done.run_id == 10 and done.repo == "pytorch" and done.received_at == NOW


def test_busy_runners_come_from_in_progress_events() -> None:
    index = JobIndex()
    index.apply(event("in_progress", 1, "b", runner_name="r-1"), NOW)
    index.apply(event("queued", 2, "a"), NOW)
    assert index.busy_runners() == {"r-1": 1}


def test_memory_is_bounded_in_time_and_count() -> None:
    index = JobIndex(memory_seconds=60, max_remembered=3)
    for job_id in range(5):
        index.apply(event("completed", job_id, f"c{job_id}"), NOW)
    assert [c.job_id for c in index.completions()] == [2, 3, 4]
    later = NOW + timedelta(seconds=61)
    index.apply(event("queued", 100, "q"), later)
    assert index.completions() == ()
    # a delivery id forgotten after its time is applied again (not a duplicate)
    assert index.apply(event("queued", 101, "c4"), later) is A


def test_completions_since_a_cursor_are_only_the_new_ones() -> None:
    """Job retry looks at each completion once. It used to walk every remembered one each
    tick (20,000 in six busy hours); a cursor makes it as cheap as what is new, through
    trimming, expiry, a row rewritten by the store and a whole restore."""
    index = JobIndex(memory_seconds=60, max_remembered=3)
    for job_id in range(5):
        index.apply(event("completed", job_id, f"c{job_id}"), NOW)
    new, cursor = index.completions_since(0)
    assert [c.job_id for c in new] == [2, 3, 4]  # the two oldest trimmed
    assert index.completions_since(cursor) == ([], cursor)

    index.apply(event("completed", 5, "c5"), NOW)
    new, cursor = index.completions_since(cursor)
    assert [c.job_id for c in new] == [5]

    rewritten = event_row(event("completed", 4, "c4-again"), NOW + timedelta(seconds=1))
    index.apply_row(rewritten)
    new, cursor = index.completions_since(cursor)
    assert [c.job_id for c in new] == [4]

    index.restore([event_row(event("completed", 7, "c7"), NOW)])
    new, cursor = index.completions_since(cursor)
    assert [c.job_id for c in new] == [7]

    index.expire(NOW + timedelta(seconds=61))
    assert index.completions_since(0) == ([], cursor)


def polled(job_id: int, status: JobStatus) -> Job:
    return Job(
        id=job_id,
        run_id=10,
        repo="pytorch",
        name=f"build {job_id}",
        labels=frozenset({"self-hosted", "linux.4xlarge"}),
        status=status,
        created_at=datetime(2026, 11, 30, 3, tzinfo=UTC),
    )


Q, P = JobStatus.QUEUED, JobStatus.IN_PROGRESS
#: id, index deliveries, the poll's listing, corrections, live statuses after
RECONCILES = [
    ("agree", [("queued", 1, "a")], [polled(1, Q)], {}, {1: "queued"}),
    (
        "a-dropped-queued-is-missed",
        [],
        [polled(1, Q), polled(2, Q)],
        {"missed": 2},
        {1: "queued", 2: "queued"},
    ),
    (
        "a-dropped-in-progress-is-status",
        [("queued", 1, "a")],
        [polled(1, P)],
        {"status": 1},
        {1: "in_progress"},
    ),
    (
        "a-dropped-completed-is-gone",
        [("queued", 1, "a"), ("queued", 2, "b")],
        [polled(2, Q)],
        {"gone": 1},
        {2: "queued"},
    ),
    (
        "an-event-newer-than-the-listing-stays",
        [("in_progress", 1, "b")],
        [polled(1, Q)],
        {},
        {1: "in_progress"},
    ),
    ("a-tombstone-outranks-the-listing", [("completed", 1, "c")], [polled(1, Q)], {}, {}),
]


@pytest.mark.parametrize(
    ("deliveries", "listing", "corrections", "live"),
    [r[1:] for r in RECONCILES],
    ids=[r[0] for r in RECONCILES],
)
def test_reconcile_replaces_the_index_and_counts_corrections(
    deliveries: list[tuple[str, int, str]],
    listing: list[Job],
    corrections: dict[str, int],
    live: dict[int, str],
) -> None:
    index = JobIndex()
    for a, j, d in deliveries:
        index.apply(event(a, j, d), NOW)
    found = index.replace(listing, NOW)
    assert {k: n for k, n in found.items() if n} == corrections
    assert {job.id: job.status.value for job in index.jobs()} == live


def test_the_index_feeds_the_same_queue_math_as_the_poll() -> None:
    """Five queued and one started job, told by webhooks or listed by the poll: the same
    queue per runner type."""
    types = [RunnerType("cpu", frozenset({"self-hosted", "linux.4xlarge"}))]
    index = JobIndex()
    for job_id in range(1, 6):
        index.apply(event("queued", job_id, f"q{job_id}"), NOW)
    index.apply(event("in_progress", 6, "p6", started_at="2026-11-30T03:02:00Z"), NOW)
    runners = [
        Runner(1, "runner-i-0abc12345", frozenset({"self-hosted", "linux.4xlarge"}), True, True)
    ]
    listing = [*(polled(j, Q) for j in range(1, 6)), polled(6, P)]  # the poll lists both
    from_events = compute_queue(index.jobs(), runners, types, NOW)
    from_poll = compute_queue(listing, runners, types, NOW)
    assert from_events.per_type["cpu"].queue_size == 5
    assert from_events.per_type == from_poll.per_type


#: id, deliveries [(action, job, delivery)], whether run 1's last event time is set
RUN_EVENTS = [
    ("queued-marks-the-run", [("queued", 1, "a")], True),
    ("waiting-marks-the-run", [("waiting", 1, "a")], True),
    ("completed-marks-the-run", [("completed", 1, "a")], True),
    ("in-progress-alone-does-not", [("in_progress", 1, "a")], False),
    ("a-stale-event-does-not", [("completed", 1, "a"), ("queued", 1, "b")], True),
]


@pytest.mark.parametrize(
    ("deliveries", "marked"), [r[1:] for r in RUN_EVENTS], ids=[r[0] for r in RUN_EVENTS]
)
def test_run_events_the_reconcile_reads(
    deliveries: list[tuple[str, int, str]], marked: bool
) -> None:
    """The lean reconcile re-lists a run's jobs after an event that can add or end a job
    of it; an ``in_progress`` cannot (a lost one shows in the runner list instead)."""
    index = JobIndex()
    for n, (action, job_id, delivery) in enumerate(deliveries):
        index.apply(event(action, job_id, delivery, run_id=1), NOW + timedelta(seconds=n))
    assert (index.run_event_at(1) == NOW) is marked


def test_shared_runners_are_claimed_by_two_running_jobs() -> None:
    """A runner runs one job at a time: two jobs in progress on it in the index means
    the ``completed`` of one was lost."""
    index = JobIndex()
    index.apply(event("in_progress", 1, "a", runner_name="r-1"), NOW)
    index.apply(event("in_progress", 2, "b", runner_name="r-2"), NOW)
    assert index.shared_runners() == set()
    index.apply(event("in_progress", 3, "c", runner_name="r-1"), NOW)
    assert index.shared_runners() == {"r-1"}
    assert {j.run_id for j in index.jobs()} == set(index.live_by_run())


#: id, store reads [[(action, job, seconds after NOW)]], run 1's last event (seconds) or None
STORED_RUN_EVENTS = [
    ("queued-row-marks-the-run", [[("queued", 1, 0)]], 0),
    ("completed-row-marks-the-run", [[("completed", 1, 5)]], 5),
    ("in-progress-of-a-job-never-seen-marks-it", [[("in_progress", 1, 3)]], 3),
    (
        "in-progress-of-a-job-seen-queued-keeps-the-queued-time",
        [[("queued", 1, 0)], [("in_progress", 1, 3)]],
        0,
    ),
    ("a-later-sibling-moves-it", [[("queued", 1, 0)], [("queued", 1, 0), ("queued", 2, 7)]], 7),
]


@pytest.mark.parametrize(
    ("reads", "expected"),
    [r[1:] for r in STORED_RUN_EVENTS],
    ids=[r[0] for r in STORED_RUN_EVENTS],
)
def test_run_events_survive_the_state_store(
    reads: list[list[tuple[str, int, int]]], expected: int | None
) -> None:
    """With a state store the index is rebuilt from rows at every tick and never sees a
    delivery itself: the lean reconcile once found no run event there and skipped the
    runs whose siblings' deliveries may have been lost. The rows give the same events."""
    index = JobIndex()
    for rows in reads:
        index.restore(
            event_row(event(a, j, f"d{j}{a}", run_id=1), NOW + timedelta(seconds=s))
            for a, j, s in rows
        )
    got = index.run_event_at(1)
    assert got == (None if expected is None else NOW + timedelta(seconds=expected))


def test_a_scoped_reconcile_replaces_only_the_runs_it_listed() -> None:
    """A vouched reconcile lists some runs' jobs (their bound came up) and leaves the rest
    to the index: run 10's listing corrects run 10 (a job the webhooks never told of, one
    that ended), while run 20, known by its events only and not listed, keeps its job
    (a whole replace would have counted it ``gone`` and dropped real demand)."""
    index = JobIndex()
    index.apply(event("queued", 1, "a"), NOW)  # run 10
    index.apply(event("queued", 2, "b"), NOW)  # run 10, ended unseen
    index.apply(event("queued", 3, "c", run_id=20), NOW)
    listing = [polled(1, Q), polled(4, Q)]  # run 10: job 4 never delivered, job 2 gone
    found = index.replace(listing, NOW, {10})
    assert {k: n for k, n in found.items() if n} == {"missed": 1, "gone": 1}
    assert {job.id: job.run_id for job in index.jobs()} == {1: 10, 3: 20, 4: 10}
