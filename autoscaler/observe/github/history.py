"""``ci-autoscaler record``: an organization's completed jobs as a trace, within a budget.

Through the same instrumented HTTP helper as the poll (auth, ETag cache, retries, errors):

1. the repositories (the config's, else ``GET /orgs/{owner}/repos``);
2. per repository the completed runs created in the window,
   ``GET /repos/{o}/{r}/actions/runs?status=completed&created=>=YYYY-MM-DD``; GitHub
   returns at most 1,000 runs for a filtered listing, so a repository whose
   ``total_count`` says more is listed again one day at a time;
3. the jobs of each run (``filter=all``: every attempt used a runner), oldest run first,
   until the request budget is spent. The trace then covers a contiguous period from the
   start, fully, and the summary says where it stops.

A job becomes a trace line when a configured runner type serves its labels and it ran
(``started_at`` and ``completed_at`` set, a runner named): ``created_at``, ``labels``,
``duration`` = ``completed_at - started_at``, and ``queue_seconds`` = ``started_at -
created_at`` (what it really waited: informative only, the replay measures its own).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from autoscaler.config import Config
from autoscaler.config.durations import parse_duration
from autoscaler.domain import normalize_labels
from autoscaler.errors import ConfigError, NotFoundError, RateLimitedError, TransientError
from autoscaler.observe.github.auth import AppAuth, Auth, TokenAuth
from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.parse import BadItem, BadPage, JobItem, RunItem, decode, model
from autoscaler.observe.queue import match_job
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")

#: GitHub returns at most this many runs for a filtered run listing.
LISTING_CAP = 1000


#: Receives each recorded job: (created_at, labels as GitHub gave them, duration seconds,
#: queue seconds it really had).
Sink = Callable[[datetime, list[str], float, float], None]


class BudgetSpent(Exception):
    """The request budget is used up."""


@dataclass
class RecordSummary:
    repos: int = 0
    runs: int = 0
    runs_read: int = 0
    jobs_written: int = 0
    jobs_other_runners: int = 0
    """Jobs no configured runner type serves (GitHub-hosted, other pools)."""
    jobs_not_run: int = 0
    """Completed without running (skipped, cancelled while queued)."""
    requests: int = 0
    complete: bool = True
    """False: the budget ran out; the trace covers ``since`` to ``covered_until``."""
    covered_until: datetime | None = None
    stopped_by: str = ""
    """What ended it early: the request budget, or GitHub's rate limit."""

    def describe(self, since: datetime, budget: int) -> str:
        text = (
            f"{self.jobs_written} jobs from {self.runs_read} of {self.runs} completed runs in"
            f" {self.repos} repositories since {since:%Y-%m-%d %H:%M} UTC;"
            f" {self.requests} of {budget} requests;"
            f" {self.jobs_other_runners} jobs for other runners and {self.jobs_not_run}"
            " that never ran left out"
        )
        if not self.complete:
            until = self.covered_until
            text += (
                f"; {self.stopped_by} ran out: the trace covers up to {until:%Y-%m-%d %H:%M} UTC"
                if until is not None
                else f"; {self.stopped_by} ran out before any run was read"
            )
            if self.stopped_by == "the budget":
                text += " (raise --max-requests for more)"
        return text


@dataclass(frozen=True, order=True)
class _Run:
    created_at: datetime
    id: int
    repo: str


class JobHistory:
    """Reads completed runs and jobs, counting every request against ``max_requests``."""

    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        *,
        max_requests: int,
        listing_cap: int = LISTING_CAP,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        gh = config.github
        self._owner = quote(gh.owner, safe="")
        self._repos_config = gh.repos
        self._types = tuple(rt.runner_type for rt in config.runner_types)
        self._http = GitHubHttp(gh.api_url, gh.timeout, metrics, transport, sleep, wall_clock)
        auth: Auth
        if gh.app is not None:
            auth = AppAuth(gh.app, self._exchange, wall_clock)
        elif gh.token is not None:
            auth = TokenAuth(gh.token)
        else:
            raise ConfigError(["github: set github.token or github.app"])
        self._http.auth = auth
        self.max_requests = max_requests
        self.listing_cap = listing_cap
        self.summary = RecordSummary()

    def close(self) -> None:
        self._http.close()

    def _exchange(self, installation_id: int, authorization: str) -> Mapping[str, Any]:
        self._spend()
        path = f"/app/installations/{int(installation_id)}/access_tokens"
        answer = self._http.send("POST", path, "app_token", authorization=authorization)
        body = decode(answer.content)
        if not isinstance(body, dict):
            raise TransientError(f"GitHub POST {path}: the body is not a JSON object")
        return body

    def _spend(self) -> None:
        if self.summary.requests >= self.max_requests:
            raise BudgetSpent
        self.summary.requests += 1

    def _pages(self, path: str, endpoint: str, key: str | None) -> tuple[list[Any], int | None]:
        """Every item over the Link pages, and the first page's ``total_count``."""
        items: list[Any] = []
        total: int | None = None
        url: str | None = f"{path}{'&' if '?' in path else '?'}per_page=100"
        while url is not None:
            self._spend()
            answer = self._http.send("GET", url, endpoint)
            body = decode(answer.content)
            chunk = body if key is None else (body.get(key) if isinstance(body, dict) else None)
            if not isinstance(chunk, list):
                raise BadPage(f"{endpoint}: expected a list")
            if (
                total is None
                and isinstance(body, dict)
                and isinstance(body.get("total_count"), int)
            ):
                total = body["total_count"]
            items.extend(chunk)
            url = self._http.next_url(answer.headers.get("link"))
        return items, total

    # --- the steps
    def repos(self) -> list[str]:
        if self._repos_config is not None:
            return list(self._repos_config)
        try:
            items, _ = self._pages(f"/orgs/{self._owner}/repos", "repos", None)
        except NotFoundError:  # a user account: its public repositories (or list them)
            items, _ = self._pages(f"/users/{self._owner}/repos", "repos", None)
        return [
            str(i["name"])
            for i in items
            if isinstance(i, dict) and isinstance(i.get("name"), str) and not i.get("archived")
        ]

    def runs(self, repo: str, since: datetime, until: datetime) -> list[_Run]:
        base = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runs?status=completed"
        items, total = self._pages(
            f"{base}&created=%3E%3D{since:%Y-%m-%d}", "runs", "workflow_runs"
        )
        if total is not None and total > self.listing_cap:
            items = []
            day = since.date()
            while day <= until.date():
                more, _ = self._pages(f"{base}&created={day:%Y-%m-%d}", "runs", "workflow_runs")
                items.extend(more)
                day += timedelta(days=1)
        out: dict[int, _Run] = {}
        for item in items:
            try:
                run = model(RunItem, item)
            except BadItem:
                continue
            if since <= run.created_at < until:
                out[run.id] = _Run(run.created_at, run.id, repo)
        return list(out.values())

    def jobs(self, run: _Run, sink: Sink) -> None:
        path = (
            f"/repos/{self._owner}/{quote(run.repo, safe='')}/actions/runs/{run.id}/jobs?filter=all"
        )
        items, _ = self._pages(path, "jobs", "jobs")
        for item in items:
            if self._job(item, sink):
                self.summary.jobs_written += 1

    def _job(self, item: Any, sink: Sink) -> bool:
        try:
            job = model(JobItem, item)
        except BadItem:
            return False
        labels = list(job.labels)
        if match_job(normalize_labels(labels), self._types) is None:
            self.summary.jobs_other_runners += 1
            return False
        try:
            created = job.created
        except BadItem:
            created = None
        started, completed = job.started_at, job.completed_at
        if (
            created is None
            or started is None
            or completed is None
            or not job.runner_name
            or completed < started
        ):
            self.summary.jobs_not_run += 1
            return False
        duration = (completed - started).total_seconds()
        sink(created, labels, duration, max(0.0, (started - created).total_seconds()))
        return True

    def record(self, since: datetime, until: datetime, sink: Sink) -> RecordSummary:
        """Hand ``sink`` every completed job created in [since, until), oldest run first."""
        s = self.summary
        try:
            repos = self.repos()
            s.repos = len(repos)
            runs: list[_Run] = []
            for repo in repos:
                runs.extend(self.runs(repo, since, until))
            runs.sort()
            s.runs = len(runs)
            for run in runs:
                self.jobs(run, sink)
                s.runs_read += 1
                s.covered_until = run.created_at
        except BudgetSpent:
            s.complete, s.stopped_by = False, "the budget"
            log.warning("request budget of %d spent; the trace stops early", self.max_requests)
        except RateLimitedError as exc:
            s.complete, s.stopped_by = False, "GitHub's rate limit"
            log.warning("GitHub rate limit (%s); the trace stops early", exc)
        if s.complete:
            s.covered_until = until
        return s


def parse_since(text: str, now: datetime) -> datetime:
    """``7d`` / ``36h`` before ``now``, or an ISO date/time (UTC). Raises ValueError."""
    text = text.strip()
    if text[:1].isdigit() and not ("-" in text or "T" in text):
        return now - timedelta(seconds=parse_duration(text))
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
