"""Job retry's completed runs with webhooks on (autoscaler.observe.github.webhook_completions).

With webhooks the poll runs every ``reconcile_interval``: a run that started and failed
between two reconciles was never seen running, and job retry, fed by the poll's finished
runs only, never judged it. The ``completed`` events tell of the failure; job retry
decides per run attempt, so the run is read whole once it has completed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.domain import CompletedJob, CompletedRun, RunProgress
from autoscaler.errors import DeferredError, TransientError
from autoscaler.observe.github.webhook_completions import (
    READS_PER_CALL,
    RECHECK,
    WebhookCompletedRuns,
)
from autoscaler.observe.github.webhook_index import JobIndex, event_row
from autoscaler.observe.github.webhooks import parse_workflow_job
from tests.unit.webhook_payloads import payload

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def event(
    action: str,
    job_id: int,
    conclusion: str | None = None,
    *,
    run_id: int = 10,
    failed_step: bool | None = None,
) -> bytes:
    data: dict[str, Any] = payload(
        action, job_id, conclusion=conclusion, runner_name="runner-i-0abc12345", run_id=run_id
    )
    if failed_step is not None:
        data["workflow_job"]["steps"] = [
            {"name": "build", "status": "completed", "conclusion": "success"},
            {
                "name": "test",
                "status": "completed",
                "conclusion": "failure" if failed_step else "success",
            },
        ]
    return json.dumps(data).encode()


def completed(job_id: int, conclusion: str, **kw: Any) -> bytes:
    return event("completed", job_id, conclusion, **kw)


def whole(run_id: int = 10, *jobs: tuple[int, str], attempt: int = 1) -> CompletedRun:
    listed = tuple(CompletedJob("pytorch", run_id, j, f"build {j}", c, attempt) for j, c in jobs)
    return CompletedRun("pytorch", run_id, attempt, listed)


@dataclass
class Polled:
    """The poll's source, by hand: its own finds, and each run read as ``runs`` says
    (a CompletedRun, a RunProgress, or an error), the reads recorded."""

    finds: list[CompletedRun] = field(default_factory=list)
    runs: dict[int, CompletedRun | RunProgress | Exception] = field(default_factory=dict)
    reads: list[int] = field(default_factory=list)

    def completed_runs(self, now: datetime) -> list[CompletedRun]:
        finds, self.finds = self.finds, []
        return finds

    def read_run(self, repo: str, run_id: int) -> CompletedRun | RunProgress:
        self.reads.append(run_id)
        found = self.runs.get(run_id, whole(run_id, (1, "failure")))
        if isinstance(found, Exception):
            raise found
        return found


def index_with(*bodies: bytes) -> JobIndex:
    index = JobIndex()
    apply(index, *bodies)
    return index


def apply(index: JobIndex, *bodies: bytes) -> None:
    for raw in bodies:
        index.apply(parse_workflow_job(raw, f"d{len(index.completions())}-{hash(raw)}"), NOW)


def test_a_failed_event_has_its_run_read_whole_once() -> None:
    """The event of one failed job says nothing of its siblings: the run is read (every
    job, the cancelled legs too) and handed over once."""
    matrix = whole(10, (1, "failure"), (2, "cancelled"), (3, "cancelled"))
    polled = Polled(runs={10: matrix})
    feed = WebhookCompletedRuns(
        index_with(completed(1, "failure"), completed(2, "cancelled"), completed(3, "cancelled")),
        polled,
    )
    assert feed.completed_runs(NOW) == [matrix]
    assert feed.completed_runs(NOW + timedelta(seconds=30)) == []
    assert polled.reads == [10]


def test_runs_without_a_failure_cost_no_request() -> None:
    polled = Polled()
    feed = WebhookCompletedRuns(
        index_with(completed(1, "success"), completed(2, "cancelled", run_id=11)), polled
    )
    assert feed.completed_runs(NOW) == []
    assert polled.reads == []


def test_a_run_still_running_per_the_events_is_not_read_yet() -> None:
    """A fail-fast matrix: the lost leg's ``completed`` arrives while its siblings still
    run (GitHub cancels them a moment later). Read now, the run would be in progress."""
    index = index_with(event("in_progress", 2), completed(1, "failure"))
    polled = Polled(runs={10: whole(10, (1, "failure"), (2, "cancelled"))})
    feed = WebhookCompletedRuns(index, polled)
    assert feed.completed_runs(NOW) == []
    assert polled.reads == []
    apply(index, completed(2, "cancelled"))
    (run,) = feed.completed_runs(NOW + timedelta(seconds=5))
    assert [j.conclusion for j in run.jobs] == ["failure", "cancelled"]


def test_a_run_github_says_is_in_progress_is_read_again_at_its_next_event() -> None:
    """All jobs the events told of completed, but the run goes on (a dependent job about
    to queue): read again at the run's next event, or RECHECK later."""
    index = index_with(completed(1, "failure"))
    polled = Polled(runs={10: RunProgress("in_progress", 1)})
    feed = WebhookCompletedRuns(index, polled)
    assert feed.completed_runs(NOW) == []
    assert feed.completed_runs(NOW + timedelta(seconds=30)) == []
    assert polled.reads == [10]
    polled.runs[10] = whole(10, (1, "failure"), (2, "skipped"))
    apply(index, completed(2, "skipped"))
    assert len(feed.completed_runs(NOW + timedelta(seconds=60))) == 1
    assert polled.reads == [10, 10]


def test_a_run_in_progress_with_no_more_events_is_read_again_later() -> None:
    polled = Polled(runs={10: RunProgress("in_progress", 1)})
    feed = WebhookCompletedRuns(index_with(completed(1, "failure")), polled)
    feed.completed_runs(NOW)
    polled.runs[10] = whole(10, (1, "failure"))
    assert feed.completed_runs(NOW + RECHECK - timedelta(seconds=1)) == []
    assert len(feed.completed_runs(NOW + RECHECK)) == 1


def test_a_run_re_run_meanwhile_is_dropped() -> None:
    polled = Polled(runs={10: RunProgress("queued", 2)})
    feed = WebhookCompletedRuns(index_with(completed(1, "failure")), polled)
    assert feed.completed_runs(NOW) == []
    assert feed.completed_runs(NOW + RECHECK) == []
    assert polled.reads == [10]


def test_the_polls_find_of_the_same_run_is_not_handed_over_twice() -> None:
    polled = Polled()
    feed = WebhookCompletedRuns(index_with(completed(1, "failure")), polled)
    (run,) = feed.completed_runs(NOW)
    polled.finds = [run]
    assert feed.completed_runs(NOW) == []


def test_a_run_only_the_poll_found_is_handed_over() -> None:
    """A lost ``completed`` delivery: the poll's finished runs still find the run."""
    polled = Polled()
    feed = WebhookCompletedRuns(JobIndex(), polled)
    lost = whole(20, (7, "failure"))
    polled.finds = [lost]
    assert feed.completed_runs(NOW) == [lost]


def test_a_run_the_poll_handed_first_is_not_read() -> None:
    polled = Polled()
    feed = WebhookCompletedRuns(JobIndex(), polled)
    polled.finds = [whole(10, (1, "failure"))]
    feed.completed_runs(NOW)
    apply(feed.index, completed(1, "failure"))
    assert feed.completed_runs(NOW) == []
    assert polled.reads == []


@pytest.mark.parametrize(
    ("error", "read_again"),
    [
        pytest.param(DeferredError("rate limit kept for the poll"), NOW, id="rate-limit-kept"),
        pytest.param(TransientError("503", code="503"), NOW + RECHECK, id="unreadable"),
    ],
)
def test_a_run_not_read_waits(error: Exception, read_again: datetime) -> None:
    polled = Polled(runs={10: error})
    feed = WebhookCompletedRuns(index_with(completed(1, "failure")), polled)
    assert feed.completed_runs(NOW) == []
    polled.runs[10] = whole(10, (1, "failure"))
    if read_again > NOW:
        assert feed.completed_runs(NOW + timedelta(seconds=30)) == []
    assert len(feed.completed_runs(read_again)) == 1


def test_runs_are_read_for_a_bounded_number_a_call() -> None:
    n = READS_PER_CALL + 5
    polled = Polled()
    feed = WebhookCompletedRuns(
        index_with(*(completed(i, "failure", run_id=100 + i) for i in range(1, n + 1))), polled
    )
    assert len(feed.completed_runs(NOW)) == READS_PER_CALL
    assert len(feed.completed_runs(NOW)) == 5


#: id, steps in the payload, failed_step the stage sees
STEPS = [
    ("a-step-failed", True, True),
    ("no-step-failed", False, False),
    ("no-steps-listed", None, None),
]


@pytest.mark.parametrize(("steps", "want"), [s[1:] for s in STEPS], ids=[s[0] for s in STEPS])
def test_failed_step_survives_the_state_store(steps: bool | None, want: bool | None) -> None:
    """Job retry's ``no_runner`` evidence needs to know whether a step failed; the event
    says so, and so must the row another replica wrote."""
    event = parse_workflow_job(completed(1, "failure", failed_step=steps), "d")
    restored = JobIndex()
    restored.restore([event_row(event, NOW)])
    [completion] = restored.completions()
    assert completion.failed_step is want
    assert completion.started_at == event.job.started_at
