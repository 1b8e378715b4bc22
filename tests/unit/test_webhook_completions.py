"""Job retry's completed jobs with webhooks on (autoscaler.observe.github.webhook_completions).

With webhooks the poll runs every ``reconcile_interval``: a run that started and failed
between two reconciles was never seen running, and job retry, fed by the poll's finished
runs only, never judged its jobs. The ``completed`` events carry what it needs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.domain import Annotation, CompletedJob
from autoscaler.observe.github.webhook_completions import (
    ANNOTATE_PER_CALL,
    WebhookCompletedJobs,
)
from autoscaler.observe.github.webhook_index import JobIndex, event_row
from autoscaler.observe.github.webhooks import parse_workflow_job
from tests.unit.webhook_payloads import payload

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
LOST = Annotation("failure", "The runner has received a shutdown signal.")


def completed(job_id: int, conclusion: str, *, failed_step: bool | None = None) -> bytes:
    data: dict[str, Any] = payload(
        "completed", job_id, conclusion=conclusion, runner_name="runner-i-0abc12345"
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


@dataclass
class Polled:
    """The poll's source, by hand: its own finds, and annotations while affordable."""

    finds: list[CompletedJob] = field(default_factory=list)
    affordable: bool = True
    annotated: list[int] = field(default_factory=list)

    def completed_jobs(self, now: datetime) -> Sequence[CompletedJob]:
        finds, self.finds = self.finds, []
        return finds

    def annotate(self, job: CompletedJob) -> CompletedJob | None:
        if not self.affordable:
            return None
        self.annotated.append(job.job_id)
        return replace(job, annotations=(LOST,))


def index_with(*bodies: bytes) -> JobIndex:
    index = JobIndex()
    for n, raw in enumerate(bodies):
        index.apply(parse_workflow_job(raw, f"d{n}"), NOW)
    return index


def test_a_failed_event_is_handed_over_once_with_its_annotations() -> None:
    polled = Polled()
    feed = WebhookCompletedJobs(index_with(completed(1, "failure", failed_step=False)), polled)
    first = feed.completed_jobs(NOW)
    assert [(j.job_id, j.conclusion, j.annotations) for j in first] == [(1, "failure", (LOST,))]
    assert first[0].runner_name == "runner-i-0abc12345"
    assert first[0].failed_step is False
    assert feed.completed_jobs(NOW + timedelta(seconds=30)) == []
    assert polled.annotated == [1]


def test_a_successful_job_costs_no_request() -> None:
    polled = Polled()
    feed = WebhookCompletedJobs(index_with(completed(1, "success")), polled)
    assert [j.conclusion for j in feed.completed_jobs(NOW)] == ["success"]
    assert polled.annotated == []


def test_the_polls_find_of_the_same_job_is_not_handed_over_twice() -> None:
    polled = Polled()
    feed = WebhookCompletedJobs(index_with(completed(1, "failure")), polled)
    [event_job] = feed.completed_jobs(NOW)
    polled.finds = [replace(event_job, annotations=None)]
    assert feed.completed_jobs(NOW) == []


def test_a_job_only_the_poll_found_is_handed_over() -> None:
    """A lost ``completed`` delivery: the poll's finished runs still find the job."""
    polled = Polled()
    feed = WebhookCompletedJobs(JobIndex(), polled)
    lost = CompletedJob("pytorch", 10, 7, "build 7", "failure", 1)
    polled.finds = [lost]
    assert feed.completed_jobs(NOW) == [lost]


def test_while_the_rate_limit_is_kept_for_the_poll_failed_jobs_wait() -> None:
    polled = Polled(affordable=False)
    feed = WebhookCompletedJobs(index_with(completed(1, "failure")), polled)
    assert feed.completed_jobs(NOW) == []  # not handed over unannotated: it waits
    polled.affordable = True
    assert [j.annotations for j in feed.completed_jobs(NOW)] == [(LOST,)]


def test_annotations_are_read_for_a_bounded_number_of_jobs_a_call() -> None:
    n = ANNOTATE_PER_CALL + 5
    polled = Polled()
    feed = WebhookCompletedJobs(
        index_with(*(completed(i, "failure") for i in range(1, n + 1))), polled
    )
    assert len(feed.completed_jobs(NOW)) == ANNOTATE_PER_CALL
    assert len(feed.completed_jobs(NOW)) == 5


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
