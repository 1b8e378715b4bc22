"""The fake GitHub's state records: jobs, runs, runners, repositories, faults, requests.

What the fake *knows*, apart from how GitHub *shows* it (autoscaler.fakes.github_shapes
renders these as the REST API's JSON): the state, the listing, the webhooks and the
re-runs all read and change these records, and most of them never need a JSON shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

#: The steps a running job goes through (``FakeJob.steps`` of them, in this order).
STEP_NAMES = (
    "Set up job",
    "Run actions/checkout@v4",
    "Build",
    "Test",
    "Post Run actions/checkout@v4",
    "Complete job",
)


class FakeRequest(NamedTuple):
    """One request the fake answered (``fake.requests``)."""

    method: str
    #: The path with its query string, as the client sent it.
    path: str
    status: int


@dataclass
class Fault:
    pattern: re.Pattern[str]
    status: int | None  # None: a malformed 200 body
    times: int
    retry_after: float | None = None
    ratelimit_reset: float | None = None
    #: A secondary rate limit: GitHub's secondary-limit message, x-ratelimit-remaining
    #: left as it is, ``Retry-After`` only when ``retry_after`` is set.
    secondary: bool = False
    #: A raw body served as is with ``status`` (HTML error pages, deeply nested JSON).
    body: bytes | None = None
    content_type: str = "application/json; charset=utf-8"


@dataclass
class FakeJob:
    id: int
    run_id: int
    repo: str
    name: str
    labels: tuple[str, ...]
    created_at: datetime
    status: str = "queued"
    started_at: datetime | None = None
    completed_at: datetime | None = None
    runner_id: int | None = None
    runner_name: str | None = None
    #: Raw JSON fields that replace the rendered ones (to serve bad data on purpose).
    overrides: dict[str, Any] = field(default_factory=dict)
    #: Steps a running job goes through, one every ``step_seconds`` of the fake's clock:
    #: a running job's listing changes as it progresses, as on GitHub.
    steps: int = len(STEP_NAMES)
    step_seconds: float = 20.0
    #: How a completed job ended (None: ``success``); ``failure`` with ``failed_step``
    #: makes its last step conclude ``failure`` too (:mod:`autoscaler.fakes.github_reruns`).
    conclusion: str | None = None
    failed_step: bool = False
    #: The run attempt this job belongs to (a re-run makes a new job in the next attempt).
    run_attempt: int = 1
    #: The job this one re-runs (None: an original job).
    rerun_of: int | None = None
    #: Its check run's annotations, as ``GET .../check-runs/{id}/annotations`` lists them.
    annotations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FakeRun:
    id: int
    repo: str
    created_at: datetime
    job_ids: list[int] = field(default_factory=list)
    #: When set, the ``status`` the API reports instead of the one derived from its jobs
    #: (GitHub sometimes reports a run completed while a job of it stays queued; a run
    #: can be ``waiting``, ``requested`` or ``pending`` while jobs of it are queued).
    reported_status: str | None = None
    #: The conclusion a completed run reports (``success`` when unset).
    conclusion: str | None = None
    #: The run's latest attempt (1, then one more per re-run).
    attempt: int = 1


@dataclass
class FakeRunner:
    id: int
    name: str
    labels: tuple[str, ...]
    online: bool = True
    busy: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)
    #: The repositories it is registered on; empty for an org runner.
    repos: tuple[str, ...] = ()
    #: Registered just in time: takes one job, and GitHub removes it when that job ends.
    ephemeral: bool = False


@dataclass
class FakeRepo:
    id: int
    name: str
    #: Private repositories are absent from ``/users/{owner}/repos`` (public only).
    private: bool = True
