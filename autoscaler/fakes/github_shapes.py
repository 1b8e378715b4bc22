"""The fake GitHub's JSON shapes of runs, jobs, runners and the rate limit, and its replies.

Each shape is the response schema of its operation in GitHub's OpenAPI description
(``@octokit/openapi``, REST API version 2022-11-28): every required property, nullable
ones as ``null``, enums within their values; ``tests/conformance`` validates the fake's
answers against it. Values the fake cannot know (a repository's description, counts,
commit messages) are what GitHub shows for a new, empty repository.

The records the shapes render are in :mod:`autoscaler.fakes.github_records`; the
repository and account shapes (embedded in most answers) in
:mod:`autoscaler.fakes.github_repo_shapes`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from autoscaler.fakes.github_records import STEP_NAMES, FakeJob, FakeRepo, FakeRun, FakeRunner
from autoscaler.fakes.github_repo_shapes import repo_json, user_json

DOCS = "https://docs.github.com/rest"
_DEFAULT_LABELS = frozenset({"self-hosted", "linux", "x64", "windows", "macos", "arm64"})


def iso(ts: datetime | None) -> str | None:
    """GitHub's timestamp format: ``2026-01-20T09:42:40Z``."""
    return None if ts is None else ts.strftime("%Y-%m-%dT%H:%M:%SZ")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"message": message, "documentation_url": DOCS, "status": str(status)}


#: The account that pushes the commits that start the fake's runs.
_ACTOR = ("demo-user", 2)


def run_json(  # noqa: PLR0917
    base: str,
    owner: str,
    run: FakeRun,
    status: str,
    repo: FakeRepo | None = None,
    owner_kind: str = "org",
    conclusion: str | None = None,
) -> dict[str, Any]:
    """A workflow run as "List workflow runs for a repository" shows it.

    ``repo`` is the run's repository record (its id); the fake has one workflow (CI, id 1)
    triggered by pushes to main, no pull requests; ``run_attempt`` counts its re-runs.
    ``status`` and ``conclusion`` are what the run reports (GitHub's filter matches them).
    """
    full = f"{owner}/{run.repo}"
    url = f"{base}/repos/{full}/actions/runs/{run.id}"
    repository = repo_json(base, owner, repo or FakeRepo(0, run.repo), owner_kind, embedded=True)
    sha = f"{run.id:040x}"
    actor = user_json(base, *_ACTOR)
    pusher = {"name": _ACTOR[0], "email": f"{_ACTOR[0]}@users.noreply.github.com"}
    return {
        "id": run.id,
        "name": "CI",
        "node_id": f"WFR_{run.id}",
        "check_suite_id": run.id,
        "check_suite_node_id": f"CS_{run.id}",
        "head_branch": "main",
        "head_sha": sha,
        "path": ".github/workflows/ci.yml",
        "display_title": f"CI #{run.id}",
        "run_number": run.id,
        "event": "push",
        "status": status,
        "conclusion": conclusion,
        "workflow_id": 1,
        "url": url,
        "html_url": f"https://github.com/{full}/actions/runs/{run.id}",
        "pull_requests": [],
        "created_at": iso(run.created_at),
        "updated_at": iso(run.created_at),
        "actor": actor,
        "triggering_actor": actor,
        "run_attempt": run.attempt,
        "referenced_workflows": [],
        "run_started_at": iso(run.created_at),
        "jobs_url": f"{url}/jobs",
        "logs_url": f"{url}/logs",
        "check_suite_url": f"{base}/repos/{full}/check-suites/{run.id}",
        "artifacts_url": f"{url}/artifacts",
        "cancel_url": f"{url}/cancel",
        "rerun_url": f"{url}/rerun",
        "previous_attempt_url": (f"{url}/attempts/{run.attempt - 1}" if run.attempt > 1 else None),
        "workflow_url": f"{base}/repos/{full}/actions/workflows/1",
        "head_commit": {
            "id": sha,
            "tree_id": f"{run.id + 1:040x}",
            "message": f"CI #{run.id}",
            "timestamp": iso(run.created_at),
            "author": pusher,
            "committer": pusher,
        },
        "repository": repository,
        "head_repository": repository,
        "head_repository_id": repository["id"],
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
        failed = job.failed_step and job.status == "completed" and number == len(names)
        steps.append(
            {
                "name": name,
                "status": state,
                "conclusion": ("failure" if failed else "success")
                if state == "completed"
                else None,
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
        "run_attempt": job.run_attempt,
        "node_id": f"CR_{job.id}",
        "head_sha": f"{job.run_id:040x}",
        "url": f"{base}/repos/{full}/actions/jobs/{job.id}",
        "html_url": f"https://github.com/{full}/actions/runs/{job.run_id}/job/{job.id}",
        "status": job.status,
        "conclusion": (job.conclusion or "success") if job.status == "completed" else None,
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
        "ephemeral": runner.ephemeral,
        "labels": labels,
    }
    body.update(runner.overrides)
    return body


def rate_limit_json(limit: int, used: int, reset: int) -> dict[str, Any]:
    """``GET /rate_limit``: the fake meters ``core`` only; the other resources it lists
    (``search`` is required) are GitHub's defaults, never used."""
    core = {"limit": limit, "used": used, "remaining": max(0, limit - used), "reset": reset}
    others = {"search": 30, "graphql": 5000, "integration_manifest": 5000, "code_search": 10}
    resources = {"core": core}
    for name, other_limit in others.items():
        resources[name] = {
            "limit": other_limit,
            "used": 0,
            "remaining": other_limit,
            "reset": reset,
        }
    return {"resources": resources, "rate": core}


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
