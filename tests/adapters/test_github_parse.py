"""GitHub JSON -> domain values: what the parser accepts, and what it skips."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.domain import JobStatus
from autoscaler.observe.github.parse import BadItem, parse_job
from autoscaler.observe.github.records import RunRef

RUN = RunRef(7, "app", completed=False)


def _job(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": 1,
        "status": "queued",
        "labels": ["self-hosted", "linux.4xlarge"],
        "created_at": "2026-11-30T03:00:00Z",
        "started_at": "2026-11-30T03:00:00Z",
        "steps": [],
    }
    body.update(fields)
    return body


def test_a_job_without_created_at_counts_from_started_at() -> None:
    """Regression: GitHub's own example of "List jobs for a workflow run" (and answers of
    that age) carries no ``created_at``. The parser required it, so such a queued job was
    skipped as malformed: never counted, never scaled for. Its ``started_at``, which GitHub
    sets when it queues the job, stands in."""
    body = _job(started_at="2026-11-30T02:50:00Z")
    del body["created_at"]
    job = parse_job(body, RUN)
    assert job is not None
    assert job.status is JobStatus.QUEUED
    assert job.created_at == datetime(2026, 11, 30, 2, 50, tzinfo=UTC)
    assert job.started_at is None  # a queued job has not started, whatever GitHub says


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"created_at": None}, id="null-created-at"),
        pytest.param({"created_at": "yesterday"}, id="not-iso-8601"),
        pytest.param({"labels": "self-hosted"}, id="labels-not-a-list"),
    ],
)
def test_a_malformed_job_is_a_bad_item(fields: dict[str, Any]) -> None:
    """A null ``created_at`` is no older shape: the description makes it required and not
    nullable, so it is malformed like any other wrong type."""
    with pytest.raises(BadItem):
        parse_job(_job(**fields), RUN)


def test_a_job_without_any_timestamp_is_a_bad_item() -> None:
    body = _job()
    del body["created_at"], body["started_at"]
    with pytest.raises(BadItem):
        parse_job(body, RUN)
