"""The poll's tasks, run on the worker threads: I/O and parsing only, no poll state.

Each task lists one thing (the runners, the repositories, a repository's runs of one
status or its newest runs, a run's jobs) into a :class:`Listed` of compact records. A
re-list the poll can choose to skip first asks :meth:`Fetcher.afford`: when the requests
this poll counted against the rate limit reach its allowance (the budget's token bucket),
the task raises :class:`Deferred` and the unit keeps its last listing until a later tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from autoscaler.observe.github.cadence import RECENT_PAGES, RECENT_PER_PAGE
from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.listing import Listed, list_pages, list_recent, list_runs
from autoscaler.observe.github.parse import INSTALLATION_KEY, Skips, compact_page
from autoscaler.observe.github.records import RunRef
from autoscaler.telemetry import Metrics


@dataclass
class Settings:
    owner: str
    """URL-quoted owner."""
    repos: tuple[str, ...] | None
    app: bool
    """A GitHub App's installation token: list ``/installation/repositories``."""
    poll_interval: float
    deadline: float
    """Seconds one poll may take."""
    share: float
    concurrency: int = 16
    """Requests in flight at once (they may all still count after the budget is spent)."""
    reconcile: bool = False
    """The poll is the webhook reconcile (webhooks on): every repository listed whole,
    every run's jobs as the reconcile decides; no cadence (:mod:`.cadence`)."""


class Deferred(Exception):
    """This poll's share of the budget is spent: the listing waits for a later tick."""


@dataclass(frozen=True)
class Allowance:
    """What one poll may spend: requests counted against the primary limit."""

    start: int
    """``GitHubHttp.counted`` when the poll began."""
    requests: float


class Fetcher:
    def __init__(self, http: GitHubHttp, metrics: Metrics, settings: Settings, skips: Skips):
        self.http = http
        self.metrics = metrics
        self.settings = settings
        self.skips = skips
        #: The repository listing that worked (None until one did).
        self.repo_list_path: str | None = None

    def spent(self, allowance: Allowance) -> int:
        return self.http.counted - allowance.start

    def afford(self, allowance: Allowance) -> None:
        if self.spent(allowance) >= allowance.requests:
            raise Deferred

    def rate_limit(self, deadline: float | None = None) -> None:
        """``GET /rate_limit``: free, and tells the limit before anything is spent."""
        self.http.send("GET", "/rate_limit", "rate_limit", deadline=deadline, exempt=True)

    def runners(self, path: str | None, deadline: float) -> Listed:
        path = path or f"/orgs/{self.settings.owner}/actions/runners"
        interner = self.http.cache.interner
        return list_pages(
            self.http,
            path,
            "runners",
            lambda body: compact_page("runners", body, self.skips, interner),
            deadline,
        )

    def repo_candidates(self) -> list[str]:
        if self.repo_list_path is not None:
            return [self.repo_list_path]
        owner = self.settings.owner
        if self.settings.app:
            return ["/installation/repositories"]
        return [f"/orgs/{owner}/repos", f"/users/{owner}/repos"]

    def repo_list(self, index: int, deadline: float) -> Listed:
        path = self.repo_candidates()[index]
        key = INSTALLATION_KEY if path.startswith("/installation/") else None
        interner = self.http.cache.interner
        return list_pages(
            self.http,
            path,
            "repos",
            lambda body: compact_page("repos", body, self.skips, interner, key=key),
            deadline,
        )

    def runs(
        self, repo: str, status: str, deadline: float, allowance: Allowance
    ) -> tuple[list[RunRef], Listed]:
        self.afford(allowance)
        interner = self.http.cache.interner
        return list_runs(
            self.http,
            self.metrics,
            self.settings.owner,
            repo,
            status,
            lambda body: compact_page("runs", body, self.skips, interner, repo=repo),
            deadline,
        )

    def recent(
        self, repo: str, since: float | None, deadline: float, allowance: Allowance
    ) -> tuple[list[RunRef], Listed, bool, bool]:
        """The repository's newest runs in every status, down to ``since``
        (:func:`~autoscaler.observe.github.listing.list_recent`)."""
        self.afford(allowance)
        interner = self.http.cache.interner
        return list_recent(
            self.http,
            self.settings.owner,
            repo,
            lambda body: compact_page("runs", body, self.skips, interner, repo=repo),
            deadline,
            since,
            per_page=RECENT_PER_PAGE,
            max_pages=RECENT_PAGES,
        )

    def jobs(self, run: RunRef, deadline: float, allowance: Allowance) -> Listed:
        self.afford(allowance)
        path = (
            f"/repos/{self.settings.owner}/{quote(run.repo, safe='')}"
            f"/actions/runs/{run.id}/jobs?filter=latest"
        )
        interner = self.http.cache.interner
        return list_pages(
            self.http,
            path,
            "jobs",
            lambda body: compact_page("jobs", body, self.skips, interner, run=run),
            deadline,
        )
