"""The fake GitHub's state records and their JSON shapes, as GitHub's REST docs show them.

Field names and types follow the documented responses of "List repositories for an
organization", "List workflow runs for a repository", "List jobs for a workflow run" and
"List self-hosted runners for an organization" / "... for a repository" (REST API version
2022-11-28).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

DOCS = "https://docs.github.com/rest"
#: The steps a running job goes through (``FakeJob.steps`` of them, in this order).
STEP_NAMES = (
    "Set up job",
    "Run actions/checkout@v4",
    "Build",
    "Test",
    "Post Run actions/checkout@v4",
    "Complete job",
)
_DEFAULT_LABELS = frozenset({"self-hosted", "linux", "x64", "windows", "macos", "arm64"})


def iso(ts: datetime | None) -> str | None:
    """GitHub's timestamp format: ``2026-01-20T09:42:40Z``."""
    return None if ts is None else ts.strftime("%Y-%m-%dT%H:%M:%SZ")


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


@dataclass
class FakeRepo:
    id: int
    name: str
    #: Private repositories are absent from ``/users/{owner}/repos`` (public only).
    private: bool = True


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"message": message, "documentation_url": DOCS, "status": str(status)}


def repo_json(base: str, owner: str, repo: FakeRepo, owner_kind: str = "org") -> dict[str, Any]:
    full = f"{owner}/{repo.name}"
    owner_type = "User" if owner_kind == "user" else "Organization"
    return {
        "id": repo.id,
        "node_id": f"R_{repo.id}",
        "name": repo.name,
        "full_name": full,
        "private": repo.private,
        "owner": {"login": owner, "id": 1, "type": owner_type},
        "html_url": f"https://github.com/{full}",
        "url": f"{base}/repos/{full}",
        "archived": False,
        "disabled": False,
        "default_branch": "main",
        "visibility": "private" if repo.private else "public",
    }


def run_json(
    base: str, owner: str, run: FakeRun, status: str, conclusion: str | None = None
) -> dict[str, Any]:
    full = f"{owner}/{run.repo}"
    url = f"{base}/repos/{full}/actions/runs/{run.id}"
    return {
        "id": run.id,
        "name": "CI",
        "node_id": f"WFR_{run.id}",
        "head_branch": "main",
        "head_sha": f"{run.id:040x}",
        "path": ".github/workflows/ci.yml",
        "display_title": f"CI #{run.id}",
        "run_number": run.id,
        "event": "push",
        "status": status,
        "conclusion": conclusion,
        "workflow_id": 1,
        "url": url,
        "html_url": f"https://github.com/{full}/actions/runs/{run.id}",
        "jobs_url": f"{url}/jobs",
        "created_at": iso(run.created_at),
        "updated_at": iso(run.created_at),
        "run_attempt": 1,
        "run_started_at": iso(run.created_at),
        "repository": {"id": 0, "name": run.repo, "full_name": full},
    }


def job_steps(job: FakeJob, now: datetime) -> list[dict[str, Any]]:
    """A queued job has no steps; a running one completes one every ``step_seconds``."""
    if job.status in ("queued", "waiting", "pending", "requested") or job.started_at is None:
        return []
    names = [STEP_NAMES[i % len(STEP_NAMES)] for i in range(max(1, job.steps))]
    if job.status == "completed":
        done = len(names)
    else:
        elapsed = (now - job.started_at).total_seconds()
        done = min(len(names) - 1, max(0, int(elapsed // job.step_seconds)))
    steps = []
    for number, name in enumerate(names, start=1):
        begun = job.started_at + timedelta(seconds=(number - 1) * job.step_seconds)
        ended = job.started_at + timedelta(seconds=number * job.step_seconds)
        if job.status == "completed" and number == len(names):
            ended = job.completed_at or ended
        state = "completed" if number <= done else "in_progress" if number == done + 1 else "queued"
        steps.append(
            {
                "name": name,
                "status": state,
                "conclusion": "success" if state == "completed" else None,
                "number": number,
                "started_at": iso(begun) if state != "queued" else None,
                "completed_at": iso(ended) if state == "completed" else None,
            }
        )
    return steps


def job_json(base: str, owner: str, job: FakeJob, now: datetime) -> dict[str, Any]:
    full = f"{owner}/{job.repo}"
    steps = job_steps(job, now)
    body: dict[str, Any] = {
        "id": job.id,
        "run_id": job.run_id,
        "workflow_name": "CI",
        "head_branch": "main",
        "run_url": f"{base}/repos/{full}/actions/runs/{job.run_id}",
        "run_attempt": 1,
        "node_id": f"CR_{job.id}",
        "head_sha": f"{job.run_id:040x}",
        "url": f"{base}/repos/{full}/actions/jobs/{job.id}",
        "html_url": f"https://github.com/{full}/actions/runs/{job.run_id}/job/{job.id}",
        "status": job.status,
        "conclusion": "success" if job.status == "completed" else None,
        "created_at": iso(job.created_at),
        # GitHub reports started_at even for a queued job (it equals created_at then).
        "started_at": iso(job.started_at or job.created_at),
        "completed_at": iso(job.completed_at),
        "name": job.name,
        "steps": steps,
        "check_run_url": f"{base}/repos/{full}/check-runs/{job.id}",
        "labels": list(job.labels),
        "runner_id": job.runner_id,
        "runner_name": job.runner_name,
        "runner_group_id": 1 if job.runner_id is not None else None,
        "runner_group_name": "Default" if job.runner_id is not None else None,
    }
    body.update(job.overrides)
    return body


def runner_json(runner: FakeRunner) -> dict[str, Any]:
    labels = [
        {
            "id": index + 1,
            "name": label,
            "type": "read-only" if label.lower() in _DEFAULT_LABELS else "custom",
        }
        for index, label in enumerate(runner.labels)
    ]
    body: dict[str, Any] = {
        "id": runner.id,
        "name": runner.name,
        "os": "Linux",
        "status": "online" if runner.online else "offline",
        "busy": runner.busy,
        "ephemeral": False,
        "labels": labels,
    }
    body.update(runner.overrides)
    return body


class Reply:
    """One response: status, headers, and a JSON body (or raw bytes)."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        self.status = status
        self.headers = dict(headers or {})
        self.content_type = "application/json; charset=utf-8"
        if body is None:
            self.raw = b""
        elif isinstance(body, bytes):
            self.raw = body
        else:
            self.raw = json.dumps(body, separators=(",", ":")).encode()


def error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, error_body(status, message), headers)
