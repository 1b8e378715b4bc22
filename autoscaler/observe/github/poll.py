"""One poll of GitHub: plan the budget, list what is due on the worker pool, assemble.

Order of work: the runner list (every tick: scale-in and orphan cleanup need it fresh) and
the owner's repositories first; then the runs of each repository that is due (one listing
per status in :data:`RUN_STATUSES`) and the jobs of each run that is due; a run seen for
the first time has its jobs listed at once. Busy units (with queued jobs) are due every
poll interval while the budget allows; quiet ones as the plan stretches them.

A poll ends early when a rate limit or its deadline cuts it: when the runner list and the
repository list are in, it returns the picture it has (units it did not reach keep their
last listing) and logs so; otherwise it raises (RateLimitedError, TransientError).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from autoscaler.domain import Observation, PollBudget, Runner
from autoscaler.errors import AutoscalerError, NotFoundError, RateLimitedError, TransientError
from autoscaler.observe.github.budget import BudgetPlan, pick_due, plan_budget
from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.listing import Listed, PaginationError, list_pages, list_runs
from autoscaler.observe.github.parse import (
    INSTALLATION_KEY,
    BadPage,
    Skips,
    compact_page,
    merge_runners,
)
from autoscaler.observe.github.records import PageRecord, RunRef, skip_counts
from autoscaler.observe.github.units import (
    RUN_STATUSES,
    PollState,
    RunUnit,
    average,
    fresh_queued,
)
from autoscaler.observe.github.workers import Batch, Outcome, WorkerPool
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")


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


@dataclass
class _Tick:
    """What one poll has gathered so far."""

    now: float
    deadline: float
    batch: Batch
    plan: BudgetPlan
    names: tuple[str, ...] | None = None
    runners: tuple[Runner, ...] | None = None
    by_repo: dict[str, list[Runner]] = field(default_factory=dict)
    repo_runners_left: int = 0
    repo_runner_pages: list[PageRecord] = field(default_factory=list)
    repo_runners_counted: int = 0
    runs_left: dict[str, int] = field(default_factory=dict)
    runs_seen: dict[str, dict[int, RunRef]] = field(default_factory=dict)
    runs_counted: dict[str, int] = field(default_factory=dict)
    runs_urls: dict[str, list[str]] = field(default_factory=dict)
    incomplete: set[str] = field(default_factory=set)
    jobs_asked: set[int] = field(default_factory=set)
    page_skips: dict[str, int] = field(default_factory=dict)
    cut: AutoscalerError | None = None


class Poll:
    """Runs polls for one source; keeps the :class:`PollState` between them."""

    def __init__(
        self,
        http: GitHubHttp,
        pool: WorkerPool,
        metrics: Metrics,
        settings: Settings,
        skips: Skips,
    ) -> None:
        self.http = http
        self.pool = pool
        self.metrics = metrics
        self.settings = settings
        self.skips = skips
        self.state = PollState()
        #: "org", "repos" (after the org runner endpoint's 404), or None until known.
        self.runner_scope: str | None = None
        self.runner_repos: dict[int, str] = {}
        self._repo_list_path: str | None = None
        self._too_small = False
        self._limits_asked = False

    # --- the poll
    def run(self, now: datetime) -> Observation:
        st, s = self.state, self.settings
        wall = now.timestamp()
        limits = self.http.gate.limits
        plan = plan_budget(
            st.activity(repo_list=s.repos is None),
            st.runner_list.cost,
            limits,
            wall,
            s.poll_interval,
            s.share,
        )
        self._report_plan(plan)
        tick = _Tick(wall, time.monotonic() + s.deadline, self.pool.batch(), plan)
        try:
            self._start(tick)
            self._drain(tick)
        finally:
            tick.batch.cancel()
        if tick.runners is None or tick.names is None:
            raise tick.cut or TransientError("GitHub poll ended before the runner list came in")
        if tick.cut is not None:
            log.warning(
                "GitHub poll cut short (%s); %d repositories keep an earlier listing, "
                "%d were never listed",
                tick.cut,
                len(tick.runs_left),
                st.unlisted(),
            )
        return self._observation(now, tick)

    def _start(self, tick: _Tick) -> None:
        st, s = self.state, self.settings
        if not self._limits_asked:
            self._limits_asked = True
            tick.batch.submit(("rate",), self._rate_limit)
        if self.runner_scope != "repos":
            tick.batch.submit(("runners",), self._runners, None, tick.deadline)
        if s.repos is not None:
            self._repos_known(tick, s.repos)
        elif st.repo_names is None or pick_due(
            [("list", st.repo_list.last)], tick.plan.quiet_interval, s.poll_interval, tick.now
        ):
            tick.batch.submit(("repos", 0), self._repo_list, 0, tick.deadline)
        else:
            self._repos_known(tick, st.repo_names)
        busy = [(r, u.last) for r, u in st.runs.items() if u.busy]
        quiet = [(r, u.last) for r, u in st.runs.items() if not u.busy]
        due = pick_due(busy, tick.plan.busy_interval, s.poll_interval, tick.now)
        due += pick_due(quiet, tick.plan.quiet_interval, s.poll_interval, tick.now)
        for run_id in due:
            self._ask_jobs(tick, st.runs[run_id].ref)

    def _drain(self, tick: _Tick) -> None:
        while tick.batch.outstanding and tick.cut is None:
            try:
                outcome = tick.batch.next(tick.deadline - time.monotonic())
            except queue.Empty:
                tick.cut = TransientError(
                    f"GitHub poll deadline ({self.settings.deadline:.0f}s) passed"
                )
                return
            if outcome.ran:
                self._handle(tick, outcome)

    def _handle(self, tick: _Tick, outcome: Outcome) -> None:
        tag, error = outcome.tag, outcome.error
        if isinstance(error, RateLimitedError):
            tick.cut = error
            return
        handler: Callable[[_Tick, Any, Any, BaseException | None], None] = getattr(
            self, f"_on_{tag[0]}"
        )
        handler(tick, tag, outcome.value, error)

    # --- outcomes (coordinator thread)
    def _on_rate(self, tick: _Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        if error is not None:
            log.debug("GET /rate_limit failed: %s", error)

    def _on_runners(self, tick: _Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        if isinstance(error, NotFoundError) and self.runner_scope is None:
            self.runner_scope = "repos"
            log.warning("%s; listing runners per repository instead", error)
            if tick.names is not None:
                self._ask_repo_runners(tick, tick.names)
            return
        runners, listed = self._result(value, error)
        self.runner_scope = "org"
        self._runners_in(tick, runners, listed)

    def _on_repo_runners(
        self, tick: _Tick, tag: Any, value: Any, error: BaseException | None
    ) -> None:
        runners, listed = self._result(value, error)
        tick.by_repo[tag[1]] = runners
        tick.repo_runner_pages += listed.records
        tick.repo_runners_counted += listed.counted
        tick.repo_runners_left -= 1
        if tick.repo_runners_left == 0 and tick.names is not None:
            merged, self.runner_repos = merge_runners(list(tick.names), tick.by_repo)
            pages = Listed(tick.repo_runner_pages, [], tick.repo_runners_counted)
            self._runners_in(tick, merged, pages)

    def _runners_in(self, tick: _Tick, runners: list[Runner], listed: Listed | None) -> None:
        st = self.state
        st.runners = tick.runners = tuple(runners)
        if listed is not None:
            st.runner_list.cost = average(st.runner_list.cost, listed.counted)
            st.runner_list.skips = skip_counts(listed.records)
        st.runner_list.last = tick.now

    def _on_repos(self, tick: _Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        candidates = self._repo_candidates()
        if isinstance(error, NotFoundError) and tag[1] + 1 < len(candidates):
            tick.batch.submit(("repos", tag[1] + 1), self._repo_list, tag[1] + 1, tick.deadline)
            return
        names, listed = self._result(value, error)
        if self._repo_list_path is None and candidates[tag[1]].startswith("/users/"):
            log.warning(
                "%s is a user: /users/%s/repos lists its public repositories only; "
                "set github.repos or use a GitHub App to watch private ones",
                self.settings.owner,
                self.settings.owner,
            )
        self._repo_list_path = candidates[tag[1]]
        st = self.state
        st.repo_list.cost = average(st.repo_list.cost, listed.counted)
        st.repo_list.skips = skip_counts(listed.records)
        st.repo_list.last = tick.now
        st.repo_names = tuple(dict.fromkeys(names))
        self._repos_known(tick, st.repo_names)

    def _on_runs(self, tick: _Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        _, repo, _status = tag
        if isinstance(error, BadPage):
            self._skip_page(tick, "runs_page", error)
            tick.incomplete.add(repo)
        elif error is not None:
            raise error
        else:
            runs, listed = value
            tick.runs_counted[repo] += listed.counted
            tick.runs_urls[repo] += listed.urls
            seen = tick.runs_seen[repo]
            for run in runs:
                seen.setdefault(run.id, run)
                known = self.state.runs.get(run.id)
                if known is None:
                    self.state.runs[run.id] = RunUnit(run)
                    self._ask_jobs(tick, run)
                else:
                    known.ref = run
        tick.runs_left[repo] -= 1
        if tick.runs_left[repo] == 0:
            self._repo_done(tick, repo)

    def _repo_done(self, tick: _Tick, repo: str) -> None:
        del tick.runs_left[repo]
        unit = self.state.repos.get(repo)
        if unit is None or repo in tick.incomplete:
            return  # dropped meanwhile, or a page was bad: keep what we had, retry next tick
        seen = tick.runs_seen[repo]
        self.http.cache.drop(self.state.drop_runs(unit.runs - seen.keys()))
        unit.runs = set(seen)
        counted = tick.runs_counted[repo]
        unit.cost = average(unit.cost, counted) if unit.last is not None else float(counted)
        unit.urls = tick.runs_urls[repo]
        unit.last = tick.now

    def _on_jobs(self, tick: _Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        unit = self.state.runs.get(tag[1])
        if isinstance(error, NotFoundError):
            self.http.cache.drop(self.state.drop_runs([tag[1]]))  # the run was deleted
            return
        if isinstance(error, BadPage):
            self._skip_page(tick, "jobs_page", error)
            return
        if error is not None:
            raise error
        if unit is None:
            return  # its repository no longer lists it
        listed: Listed = value
        unit.jobs = tuple(listed.items)
        unit.queued = fresh_queued(unit.jobs)
        unit.skips = skip_counts(listed.records)
        unit.urls = listed.urls
        first = unit.last is None
        unit.cost = float(listed.counted) if first else average(unit.cost, listed.counted)
        unit.last = tick.now

    def _result(self, value: Any, error: BaseException | None) -> tuple[Any, Listed]:
        """A runner or repository list, or the error that fails the poll."""
        if isinstance(error, PaginationError):
            self.metrics.github_pagination_errors.labels("list", error.reason).inc()
            log.error("GitHub pagination: %s", error)
        if isinstance(error, BadPage):
            raise TransientError(f"GitHub: malformed response ({error})") from None
        if error is not None:
            raise error
        listed: Listed = value
        return listed.items, listed

    def _skip_page(self, tick: _Tick, kind: str, error: BadPage) -> None:
        if isinstance(error, PaginationError):
            endpoint = kind.removesuffix("_page")
            self.metrics.github_pagination_errors.labels(endpoint, error.reason).inc()
            log.error("GitHub pagination: %s", error)
        self.skips.skip(kind, str(error))
        tick.page_skips[kind] = tick.page_skips.get(kind, 0) + 1

    # --- submitting work
    def _repos_known(self, tick: _Tick, names: tuple[str, ...]) -> None:
        st, s = self.state, self.settings
        tick.names = names
        self.http.cache.drop(st.keep_repos(names))
        if self.runner_scope == "repos":
            self._ask_repo_runners(tick, names)
        busy = [(n, st.repos[n].last) for n in names if st.repo_busy(st.repos[n])]
        quiet = [(n, st.repos[n].last) for n in names if not st.repo_busy(st.repos[n])]
        due = pick_due(busy, tick.plan.busy_interval, s.poll_interval, tick.now)
        due += pick_due(quiet, tick.plan.quiet_interval, s.poll_interval, tick.now)
        for repo in due:
            tick.runs_left[repo] = len(RUN_STATUSES)
            tick.runs_seen[repo], tick.runs_counted[repo], tick.runs_urls[repo] = {}, 0, []
            for status in RUN_STATUSES:
                tick.batch.submit(("runs", repo, status), self._runs, repo, status, tick.deadline)

    def _ask_repo_runners(self, tick: _Tick, names: tuple[str, ...]) -> None:
        tick.repo_runners_left = len(names)
        for repo in names:
            path = f"/repos/{self.settings.owner}/{quote(repo, safe='')}/actions/runners"
            tick.batch.submit(("repo_runners", repo), self._runners, path, tick.deadline)
        if not names:
            self._runners_in(tick, [], None)

    def _ask_jobs(self, tick: _Tick, run: RunRef) -> None:
        if run.id not in tick.jobs_asked:
            tick.jobs_asked.add(run.id)
            tick.batch.submit(("jobs", run.id), self._jobs, run, tick.deadline)

    # --- tasks (worker threads): I/O and parsing only, no state
    def _rate_limit(self) -> None:
        self.http.send("GET", "/rate_limit", "rate_limit", exempt=True)

    def _runners(self, path: str | None, deadline: float) -> Listed:
        path = path or f"/orgs/{self.settings.owner}/actions/runners"
        interner = self.http.cache.interner
        return list_pages(
            self.http,
            path,
            "runners",
            lambda body: compact_page("runners", body, self.skips, interner),
            deadline,
        )

    def _repo_candidates(self) -> list[str]:
        if self._repo_list_path is not None:
            return [self._repo_list_path]
        owner = self.settings.owner
        if self.settings.app:
            return ["/installation/repositories"]
        return [f"/orgs/{owner}/repos", f"/users/{owner}/repos"]

    def _repo_list(self, index: int, deadline: float) -> Listed:
        path = self._repo_candidates()[index]
        key = INSTALLATION_KEY if path.startswith("/installation/") else None
        interner = self.http.cache.interner
        return list_pages(
            self.http,
            path,
            "repos",
            lambda body: compact_page("repos", body, self.skips, interner, key=key),
            deadline,
        )

    def _runs(self, repo: str, status: str, deadline: float) -> tuple[list[RunRef], Listed]:
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

    def _jobs(self, run: RunRef, deadline: float) -> Listed:
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

    # --- the result
    def _observation(self, now: datetime, tick: _Tick) -> Observation:
        st = self.state
        self.metrics.github_unlisted_repos.set(st.unlisted())
        self.metrics.github_cache_entries.set(len(self.http.cache))
        skips = st.skips()
        for kind, count in tick.page_skips.items():
            skips[kind] = skips.get(kind, 0) + count
        plan = tick.plan
        return Observation(
            observed_at=now,
            jobs=st.jobs(),
            runners=st.runners,
            skipped_items=sum(skips.values()),
            skipped_runners=skips.get("runner", 0),
            budget=PollBudget(
                poll_interval=plan.poll_interval,
                busy_interval=plan.busy_interval,
                quiet_interval=plan.quiet_interval,
                budget_per_hour=plan.budget_per_hour,
                needed_per_hour=plan.needed_per_hour,
                too_small=plan.too_small,
            ),
        )

    def _report_plan(self, plan: BudgetPlan) -> None:
        m = self.metrics
        m.github_poll_interval.labels("busy").set(plan.busy_interval)
        m.github_poll_interval.labels("quiet").set(plan.quiet_interval)
        m.github_budget.set(plan.budget_per_hour)
        m.github_budget_needed.set(plan.needed_per_hour)
        if plan.too_small and not self._too_small:
            log.warning(
                "GitHub budget too small for this org: re-listing repositories with queued "
                "jobs every %.0fs needs ~%.0f requests/h, the budget is %.0f/h "
                "(github.rate_limit_share of the rate limit); they are re-listed every "
                "%.0fs instead. Webhooks (or a GitHub App's higher limit) fix this.",
                plan.poll_interval,
                plan.needed_per_hour,
                plan.budget_per_hour,
                plan.busy_interval,
            )
        elif not plan.too_small and self._too_small:
            log.info("GitHub budget fits again: busy repositories every %.0fs", plan.poll_interval)
        self._too_small = plan.too_small
        log.debug(
            "GitHub budget %.0f/h, needed %.0f/h, planned %.0f/h; busy every %.0fs, quiet "
            "every %.0fs",
            plan.budget_per_hour,
            plan.needed_per_hour,
            plan.planned_per_hour,
            plan.busy_interval,
            plan.quiet_interval,
        )
