"""The fake GitHub's state records and their JSON shapes, as GitHub's REST API answers.

Each shape is the response schema of its operation in GitHub's OpenAPI description
(``@octokit/openapi``, REST API version 2022-11-28): every required property, nullable
ones as ``null``, enums within their values; ``tests/conformance`` validates the fake's
answers against it. Values the fake cannot know (a repository's description, counts,
commit messages) are what GitHub shows for a new, empty repository.
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


@dataclass
class FakeRepo:
    id: int
    name: str
    #: Private repositories are absent from ``/users/{owner}/repos`` (public only).
    private: bool = True


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"message": message, "documentation_url": DOCS, "status": str(status)}


#: A repository's API URL templates (RFC 6570, as GitHub spells them), after its API URL.
_REPO_URLS = {
    "archive_url": "/{archive_format}{/ref}",
    "assignees_url": "/assignees{/user}",
    "blobs_url": "/git/blobs{/sha}",
    "branches_url": "/branches{/branch}",
    "collaborators_url": "/collaborators{/collaborator}",
    "comments_url": "/comments{/number}",
    "commits_url": "/commits{/sha}",
    "compare_url": "/compare/{base}...{head}",
    "contents_url": "/contents/{+path}",
    "contributors_url": "/contributors",
    "deployments_url": "/deployments",
    "downloads_url": "/downloads",
    "events_url": "/events",
    "forks_url": "/forks",
    "git_commits_url": "/git/commits{/sha}",
    "git_refs_url": "/git/refs{/sha}",
    "git_tags_url": "/git/tags{/sha}",
    "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}",
    "issue_events_url": "/issues/events{/number}",
    "issues_url": "/issues{/number}",
    "keys_url": "/keys{/key_id}",
    "labels_url": "/labels{/name}",
    "languages_url": "/languages",
    "merges_url": "/merges",
    "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}",
    "pulls_url": "/pulls{/number}",
    "releases_url": "/releases{/id}",
    "stargazers_url": "/stargazers",
    "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers",
    "subscription_url": "/subscription",
    "tags_url": "/tags",
    "teams_url": "/teams",
    "trees_url": "/git/trees{/sha}",
}
#: A user's (or organization's) API URL templates, after its API URL.
_USER_URLS = {
    "followers_url": "/followers",
    "following_url": "/following{/other_user}",
    "gists_url": "/gists{/gist_id}",
    "starred_url": "/starred{/owner}{/repo}",
    "subscriptions_url": "/subscriptions",
    "organizations_url": "/orgs",
    "repos_url": "/repos",
    "events_url": "/events{/privacy}",
    "received_events_url": "/received_events",
}
#: The account that pushes the commits that start the fake's runs.
_ACTOR = ("demo-user", 2)
#: The fake owner's account id (an organization or a user).
_OWNER_ID = 1


def user_json(base: str, login: str, user_id: int, kind: str = "User") -> dict[str, Any]:
    """A "simple user": an account as GitHub embeds it (``kind`` User or Organization)."""
    api = f"{base}/users/{login}"
    return {
        "login": login,
        "id": user_id,
        "node_id": f"U_{user_id}" if kind == "User" else f"O_{user_id}",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{user_id}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"https://github.com/{login}",
        **{key: api + suffix for key, suffix in _USER_URLS.items()},
        "type": kind,
        "user_view_type": "public",
        "site_admin": False,
    }


def repo_json(
    base: str, owner: str, repo: FakeRepo, owner_kind: str = "org", *, embedded: bool = False
) -> dict[str, Any]:
    """A repository as "List organization repositories" shows it (a minimal repository);
    ``embedded``: as a workflow run embeds it, the required properties only.

    The fake knows no description, topics, sizes or counts: those are GitHub's defaults for
    a new empty repository. Its times are fixed (the fake has no repository history).
    """
    full = f"{owner}/{repo.name}"
    api = f"{base}/repos/{full}"
    kind = "User" if owner_kind == "user" else "Organization"
    created = "2024-01-01T00:00:00Z"
    required = {
        "id": repo.id,
        "node_id": f"R_{repo.id}",
        "name": repo.name,
        "full_name": full,
        "private": repo.private,
        "owner": user_json(base, owner, _OWNER_ID, kind),
        "html_url": f"https://github.com/{full}",
        "description": None,
        "fork": False,
        "url": api,
        **{key: api + suffix for key, suffix in _REPO_URLS.items()},
    }
    if embedded:
        return required
    return {
        **required,
        "git_url": f"git://github.com/{full}.git",
        "ssh_url": f"git@github.com:{full}.git",
        "clone_url": f"https://github.com/{full}.git",
        "svn_url": f"https://github.com/{full}",
        "mirror_url": None,
        "homepage": None,
        "language": None,
        "forks_count": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "size": 0,
        "default_branch": "main",
        "open_issues_count": 0,
        "is_template": False,
        "topics": [],
        "has_issues": True,
        "has_projects": True,
        "has_wiki": False,
        "has_pages": False,
        "has_downloads": True,
        "has_discussions": False,
        "archived": False,
        "disabled": False,
        "visibility": "private" if repo.private else "public",
        "pushed_at": created,
        "created_at": created,
        "updated_at": created,
        "permissions": {
            "admin": True,
            "maintain": True,
            "push": True,
            "triage": True,
            "pull": True,
        },
        "allow_forking": False,
        "web_commit_signoff_required": False,
        "forks": 0,
        "open_issues": 0,
        "watchers": 0,
    }


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
        "ephemeral": False,
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
