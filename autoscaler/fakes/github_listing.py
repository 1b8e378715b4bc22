"""What the fake GitHub lists for a GET, filtered as GitHub documents it.

- ``GET /repos/{o}/{r}/actions/runs``: newest first; ``?status=`` matches the status the
  run *reports* or its conclusion (``status=success`` lists completed, successful runs);
  ``?created=`` takes GitHub's date syntax (``>=T``, ``<=T``, ``>T``, ``<T``, ``A..B``,
  ``*`` for an open end, a date or a date-time). A listing narrowed by ``status``,
  ``created``, ``actor``, ``branch``, ``event``, ``check_suite_id`` or ``head_sha``
  returns at most :attr:`GitHubState.RUN_LISTING_CAP` runs (1,000); ``total_count``
  still counts every match (the OpenAPI description: "up to 1,000 results for each
  search when using the following parameters").
- ``GET /repos/{o}/{r}/actions/runs/{run_id}`` (:func:`one_run`): one run, as listed.
- Both runner listings filter on the documented ``?name=`` (one runner, or none).
- ``GET /users/{u}/repos`` lists public repositories only; ``GET /installation/repositories``
  (an installation token's) lists every repository the installation can see.

Items are returned unrendered with a renderer, so a page renders only its own slice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.fakes.github_issues import ISSUES, issue_json
from autoscaler.fakes.github_records import FakeRepo, FakeRun, FakeRunner
from autoscaler.fakes.github_repo_shapes import repo_json
from autoscaler.fakes.github_reruns import ANNOTATIONS, annotations_of, latest_jobs
from autoscaler.fakes.github_shapes import job_json, run_json, runner_json
from autoscaler.fakes.github_state import GitHubState

_REPOS = re.compile(r"^/(orgs|users)/([^/]+)/repos$")
_INSTALLATION_REPOS = "/installation/repositories"
_RUNS = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runs$")
_JOBS = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runs/(\d+)/jobs$")
RUN = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runs/(\d+)$")
_RUNNERS = re.compile(r"^/orgs/([^/]+)/actions/runners$")
_REPO_RUNNERS = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runners$")
#: Parameters that make GitHub cap a runs listing at 1,000 results.
_CAPPING = ("actor", "branch", "check_suite_id", "created", "event", "head_sha", "status")


@dataclass
class Listing:
    """Every item of a listing (unrendered), how to render one, and the wrapper key
    (``None``: a bare JSON array). ``total`` is ``total_count`` when it differs from
    ``len(items)`` (a capped listing)."""

    key: str | None
    items: Sequence[Any]
    render: Callable[[Any], dict[str, Any]]
    total: int | None = None


class BadQuery(ValueError):
    """A query parameter GitHub would refuse (422)."""


class Forbidden(ValueError):
    """A request these credentials may not make (403)."""


def owner_serves(fake: GitHubState, owner: str, *, orgs: bool) -> bool:
    """The path's owner is ours, and an ``/orgs/`` path names an organization."""
    return owner.lower() == fake.owner.lower() and not (orgs and fake.owner_kind == "user")


def listing(
    fake: GitHubState, path: str, query: dict[str, str], *, installation: bool
) -> Listing | None:
    """The listing a GET names, or None for a 404. Call with ``fake.lock`` held.
    Raises BadQuery (422) or Forbidden (403).

    ``installation``: the request carries an installation token (a GitHub App's).
    """
    base, owner = fake.url, fake.owner
    if m := _REPOS.match(path):
        if not owner_serves(fake, m.group(2), orgs=m.group(1) == "orgs"):
            return None
        repos = sorted(fake._repos.values(), key=lambda r: r.id)
        if m.group(1) == "users":
            repos = [r for r in repos if not r.private]
        return Listing(None, repos, _repo_renderer(base, owner, fake.owner_kind))
    if path == _INSTALLATION_REPOS:
        if not installation:  # the OpenAPI description lists 401 and 403 here
            raise Forbidden("You must authenticate with an installation access token")
        repos = sorted(fake._repos.values(), key=lambda r: r.id)
        minimal = _repo_renderer(base, owner, fake.owner_kind)
        # A full "repository" here, not a minimal one: it requires ``license`` too.
        return Listing("repositories", repos, lambda repo: {**minimal(repo), "license": None})
    if m := _RUNNERS.match(path):
        if not owner_serves(fake, m.group(1), orgs=True):
            return None
        runners = _runners_named(fake, query.get("name"))
        return Listing("runners", [r for r in runners if not r.repos], runner_json)
    if m := _REPO_RUNNERS.match(path):
        if m.group(1).lower() != owner.lower() or m.group(2) not in fake._repos:
            return None
        runners = _runners_named(fake, query.get("name"))
        return Listing("runners", [r for r in runners if m.group(2) in r.repos], runner_json)
    if m := _RUNS.match(path):
        if m.group(1).lower() != owner.lower() or m.group(2) not in fake._repos:
            return None
        return _runs(fake, m.group(2), query)
    if (m := ISSUES.match(path)) and repo_of(fake, path) is not None:
        issues = fake.issue_tracker.listing(m.group(2), query)
        return Listing(None, issues, lambda issue: issue_json(base, owner, issue))
    if m := ANNOTATIONS.match(path):
        found = annotations_of(fake, m.group(1), m.group(2), int(m.group(3)))
        return None if found is None else Listing(None, found, dict)
    if m := _JOBS.match(path):
        job_run = fake._runs.get(int(m.group(3)))
        if m.group(1).lower() != owner.lower() or job_run is None or job_run.repo != m.group(2):
            return None
        now = fake.clock()
        every = query.get("filter", "latest") == "all"
        jobs = (
            [fake._jobs[j] for j in job_run.job_ids]
            if every
            else latest_jobs(fake, job_run.job_ids)
        )
        return Listing("jobs", jobs, lambda job: job_json(base, owner, job, now))
    return None


def repo_of(fake: GitHubState, path: str) -> str | None:
    """The repository a ``/repos/{owner}/{repo}/...`` path names, when the fake has it."""
    m = re.match(r"^/repos/([^/]+)/([^/]+)/", path)
    if m is None or m.group(1).lower() != fake.owner.lower() or m.group(2) not in fake._repos:
        return None
    return m.group(2)


def _runners_named(fake: GitHubState, name: str | None) -> list[FakeRunner]:
    """Every runner by id, or only the one named ``name``: the runner listings' documented
    ``name`` query parameter ("The name of a self-hosted runner")."""
    runners = sorted(fake._runners.values(), key=lambda r: r.id)
    return runners if name is None else [r for r in runners if r.name == name]


def _repo_renderer(base: str, owner: str, kind: str) -> Callable[[Any], dict[str, Any]]:
    def render(repo: FakeRepo) -> dict[str, Any]:
        return repo_json(base, owner, repo, kind)

    return render


def _runs(fake: GitHubState, repo: str, query: dict[str, str]) -> Listing:
    wanted = query.get("status")
    window = parse_created(query["created"]) if "created" in query else None
    rendered: list[tuple[FakeRun, str, str | None]] = []
    for run in fake.repo_runs(repo):
        status, conclusion = fake.run_status(run), fake.run_conclusion(run)
        if wanted is not None and wanted not in (status, conclusion):
            continue
        if window is not None and not window[0] <= run.created_at < window[1]:
            continue
        rendered.append((run, status, conclusion))
    total = len(rendered)
    if any(name in query for name in _CAPPING):
        rendered = rendered[: fake.RUN_LISTING_CAP]
    base, owner, kind, record = fake.url, fake.owner, fake.owner_kind, fake._repos[repo]

    def render(item: tuple[FakeRun, str, str | None]) -> dict[str, Any]:
        run, status, conclusion = item
        return run_json(base, owner, run, status, record, kind, conclusion)

    return Listing("workflow_runs", rendered, render, total)


def one_run(fake: GitHubState, owner: str, repo: str, run_id: int) -> dict[str, Any] | None:
    """``GET /repos/{o}/{r}/actions/runs/{run_id}``: the run as a listing shows it, or None
    for a 404. Call with ``fake.lock`` held."""
    run = fake._runs.get(run_id)
    if owner.lower() != fake.owner.lower() or run is None or run.repo != repo:
        return None
    status, conclusion = fake.run_status(run), fake.run_conclusion(run)
    record = fake._repos[repo]
    return run_json(fake.url, fake.owner, run, status, record, fake.owner_kind, conclusion)


_EARLIEST = datetime(1, 1, 1, tzinfo=UTC)
_LATEST = datetime(9999, 12, 31, tzinfo=UTC)


def parse_created(text: str) -> tuple[datetime, datetime]:
    """GitHub's date qualifier -> a half-open window [start, end). Raises BadQuery."""
    text = text.strip()
    if ".." in text:
        low, _, high = text.partition("..")
        start = _EARLIEST if low.strip() == "*" else _bound(low)[0]
        end = _LATEST if high.strip() == "*" else _bound(high)[1]
        return start, end
    for op in (">=", "<=", ">", "<"):
        if text.startswith(op):
            first, after = _bound(text[len(op) :])
            return {
                ">=": (first, _LATEST),
                ">": (after, _LATEST),
                "<=": (_EARLIEST, after),
                "<": (_EARLIEST, first),
            }[op]
    return _bound(text)


def _bound(text: str) -> tuple[datetime, datetime]:
    """A date (the whole day) or a date-time (that second): [first, after)."""
    text = text.strip()
    try:
        if "T" not in text:
            day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
            return day, day + timedelta(days=1)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadQuery(f"created: {text!r} is not a date or date-time") from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment, moment + timedelta(seconds=1)
