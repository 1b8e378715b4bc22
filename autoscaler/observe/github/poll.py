"""One poll of GitHub: plan the budget, list what is due on the worker pool, assemble.

Order of work: the runner list (every tick: scale-in and orphan cleanup need it fresh) and
the owner's repositories first; then the runs of each repository that is due and the jobs
of each run that is due; a run seen for the first time has its jobs listed at once.
Polling alone, :mod:`.cadence` decides what is due from each unit's activity (a quiet
repository by its newest runs, every other tick; a run's jobs when they could have
changed; everything within the staleness limit). As the webhook reconcile (webhooks on:
``Settings.reconcile``, or a lean reconcile) every repository is listed whole, one
listing per status in :data:`RUN_STATUSES`, and the jobs as the reconcile decides (busy
units every poll interval while the budget allows, quiet ones as the plan stretches
them): the index is made what those listings show.

The budget bounds every poll: it spends at most what the token bucket
(:func:`~autoscaler.observe.github.budget.refill`) holds, the skeleton first, then busy
units (new runs included), then quiet ones; what it cannot afford is deferred to a later
tick (``github_deferred_listings_total``).

A poll ends early when a rate limit or its deadline cuts it: when the runner list and the
repository list are in, it returns the picture it has (units it did not reach keep their
last listing) and logs so; otherwise it raises (RateLimitedError, TransientError).
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

from autoscaler.domain import JobStatus, Observation, Runner
from autoscaler.errors import AutoscalerError, NotFoundError, RateLimitedError, TransientError
from autoscaler.observe.github.budget import BudgetPlan, pick_due
from autoscaler.observe.github.cadence import (
    RECENT_SLACK,
    cadence,
    jobs_due,
    repos_due,
    runner_signals,
    status_moved,
)
from autoscaler.observe.github.fetch import Deferred, Fetcher, Settings
from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.listing import Listed, PaginationError
from autoscaler.observe.github.parse import BadPage, Skips, merge_runners
from autoscaler.observe.github.poll_budget import PollBudgetKeeper, poll_budget
from autoscaler.observe.github.poll_tick import Lean, ListedScope, Tick
from autoscaler.observe.github.reconcile_plan import Reason, RunFacts
from autoscaler.observe.github.records import RunRef, skip_counts
from autoscaler.observe.github.units import (
    RUN_STATUSES,
    PollState,
    RepoUnit,
    RunUnit,
    average,
    fresh_queued,
)
from autoscaler.observe.github.workers import BUSY, FIRST, QUIET, Outcome, WorkerPool
from autoscaler.telemetry import Metrics

__all__ = ["Lean", "ListedScope", "Poll", "Settings"]

log = logging.getLogger("autoscaler.observe.github")

#: Completed runs kept for the job-retry reader at most (the oldest go first).
FINISHED_KEPT = 5000


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
        self.fetch = Fetcher(http, metrics, settings, skips)
        self.state = PollState()
        #: "org", "repos" (after the org runner endpoint's 404), or None until known.
        self.runner_scope: str | None = None
        self.runner_repos: dict[int, str] = {}
        self.budget = PollBudgetKeeper(metrics, settings, self.fetch)
        #: Runs seen complete, oldest first (:mod:`autoscaler.observe.github.failures`).
        self.finished: deque[RunRef] = deque(maxlen=FINISHED_KEPT)
        self._last: Tick | None = None

    def scope(self) -> ListedScope:
        """What the last poll listed (nothing before the first)."""
        tick = self._last
        if tick is None:
            return ListedScope(frozenset(), frozenset(), frozenset())
        runs, repos = self.state.runs, tick.listed_repos
        fresh = frozenset(r for r in tick.jobs_asked if r in runs and runs[r].last == tick.now)
        live = frozenset(r for r, unit in runs.items() if unit.ref.repo in repos)
        return ListedScope(fresh, frozenset(repos), live)

    def watched_repos(self) -> tuple[str, ...]:
        """The repositories the last poll watched (configured, or as last listed)."""
        return self.settings.repos or self.state.repo_names or ()

    # --- the poll
    def run(self, now: datetime, lean: Lean | None = None, *, runs: bool = True) -> Observation:
        """One poll. ``lean`` (a webhook reconcile): the jobs of known runs are listed
        only when ``lean`` gives a reason, decided once the runner list and every runs
        listing of this poll are in (a run no longer listed is dropped first; a new one
        waits for the decision too); the budget's cadence does not apply to them.
        ``runs=False`` (with ``lean``): no runs listing, the runner list and the jobs of
        the known runs ``lean`` names. :meth:`scope` tells what the poll listed."""
        wall = now.timestamp()
        deadline = time.monotonic() + self.settings.deadline
        tick = Tick(wall, deadline, self.pool.batch(), self.http.counted)
        tick.lean, tick.lean_poll = lean, lean is not None
        tick.alone = lean is None and not self.settings.reconcile
        tick.runs_listings = runs or lean is None
        self._last = tick
        try:
            if self.http.gate.limits.limit is None:
                # Free, and it tells the limit before anything is spent from it. It goes
                # out beside the skeleton (the runner and repository lists, spent first
                # whatever the plan): only the listings after them wait for the plan. In
                # series it was one more round trip on the critical path of every cold
                # tick (and of every tick on a GHES without rate limits).
                tick.batch.submit(("rate_limit",), self._rate_limit, tick.deadline, priority=FIRST)
                self._start_skeleton(tick)
            else:
                self._plan(tick)
                self._start(tick)
            self._drain(tick)
        finally:
            tick.batch.cancel()
            if tick.plan is None:
                self._plan(tick)
            self.budget.settle(tick.tokens, tick.allowance, wall)
        self.budget.report(
            self._planned(tick), tick.cadence, tick.allowance, tick.deferred, tick.busy_deferred
        )
        if tick.cut is not None:
            cause = "rate_limited" if isinstance(tick.cut, RateLimitedError) else "deadline"
            self.metrics.github_polls_cut.labels(cause).inc()
        if tick.runners is None or tick.names is None:
            raise tick.cut or TransientError("GitHub poll ended before the runner list came in")
        if tick.cut is not None:
            for repo in tick.runs_left:  # asked for, not completed: say so when never listed
                unit = self.state.repos.get(repo)
                if unit is not None and unit.whole_at is None:
                    unit.failed = f"poll cut short ({tick.cut.kind})"
            log.warning(
                "GitHub %s cut short (%s); %d repositories keep an earlier listing, "
                "%d were never listed",
                "poll" if tick.alone else "reconcile",
                tick.cut,
                len(tick.runs_left),
                self.state.unlisted(),
            )
        return self._observation(now, tick)

    def _plan(self, tick: Tick) -> BudgetPlan:
        """The budget for this poll, from the limits known now."""
        limits = self.http.gate.limits
        tick.plan, tick.tokens, tick.allowance = self.budget.plan(
            self.state, limits, tick.now, tick.start, cadence=tick.alone
        )
        if tick.alone:
            tick.cadence = cadence(tick.plan)
        return tick.plan

    @staticmethod
    def _planned(tick: Tick) -> BudgetPlan:
        if tick.plan is None:
            raise AssertionError("the poll has no plan yet")
        return tick.plan

    def _rate_limit(self, deadline: float) -> None:
        try:
            self.fetch.rate_limit(deadline)
        except AutoscalerError as exc:  # the skeleton's answers carry the limit too
            log.debug("GET /rate_limit failed: %s", exc)

    def _on_rate_limit(self, tick: Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        if error is not None:
            raise error
        self._plan(tick)
        self._start(tick)

    def _start_skeleton(self, tick: Tick) -> None:
        """What a poll lists before it has a plan: the runners, and the repositories when
        none are known yet."""
        st, s = self.state, self.settings
        if self.runner_scope != "repos":
            tick.runners_asked = True
            tick.batch.submit(("runners",), self.fetch.runners, None, tick.deadline, priority=FIRST)
        if s.repos is None and st.repo_names is None:
            tick.repos_asked = True
            tick.batch.submit(("repos", 0), self.fetch.repo_list, 0, tick.deadline, priority=FIRST)

    def _start(self, tick: Tick) -> None:
        st, s = self.state, self.settings
        plan = self._planned(tick)
        if not tick.runners_asked and self.runner_scope != "repos":
            tick.batch.submit(("runners",), self.fetch.runners, None, tick.deadline, priority=FIRST)
        if s.repos is not None:
            self._repos_known(tick, s.repos)
        elif tick.repos_asked:
            if tick.listed_names is not None:  # it came in before the plan
                self._repos_known(tick, tick.listed_names)
        elif st.repo_names is None or pick_due(
            [("list", st.repo_list.last)], plan.quiet_interval, s.poll_interval, tick.now
        ):
            tick.repos_asked = True
            tick.batch.submit(("repos", 0), self.fetch.repo_list, 0, tick.deadline, priority=FIRST)
            if st.repo_names is not None and tick.alone and self.runner_scope != "repos":
                # The runs listings start from the repositories known; the list, when it
                # comes, adds the new ones. Else they queued behind every jobs listing
                # below, and a cut poll listed no repository.
                self._repos_known(tick, st.repo_names)
        else:
            self._repos_known(tick, st.repo_names)
        if tick.lean_poll:
            # Known runs' jobs: when the runner list is in (_lean_jobs), or now if it came
            # in before the plan (a first poll's skeleton, a GHES without rate limits).
            self._lean_if_ready(tick)
            return
        if tick.cadence is not None:
            for ask in jobs_due(st, tick.cadence, s.poll_interval, tick.now):
                run = st.runs[int(ask.key)].ref
                self._ask_jobs(tick, run, BUSY if ask.urgent else QUIET, ask.reason)
            self._signals_if_ready(tick)
            return
        busy = [(r, u.last) for r, u in st.runs.items() if u.busy]
        quiet = [(r, u.last) for r, u in st.runs.items() if not u.busy]
        for run_id in pick_due(busy, plan.busy_interval, s.poll_interval, tick.now):
            self._ask_jobs(tick, st.runs[run_id].ref, BUSY, "reconcile")
        for run_id in pick_due(quiet, plan.quiet_interval, s.poll_interval, tick.now):
            self._ask_jobs(tick, st.runs[run_id].ref, QUIET, "reconcile")

    def _drain(self, tick: Tick) -> None:
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

    def _handle(self, tick: Tick, outcome: Outcome) -> None:
        tag, error = outcome.tag, outcome.error
        if isinstance(error, RateLimitedError):
            tick.cut = error
            return
        handler: Callable[[Tick, Any, Any, BaseException | None], None] = getattr(
            self, f"_on_{tag[0]}"
        )
        handler(tick, tag, outcome.value, error)

    # --- outcomes (coordinator thread)
    def _deferred(self, tick: Tick, busy: bool) -> None:
        tick.deferred += 1
        tick.busy_deferred |= busy
        self.metrics.github_deferred_listings.labels("busy" if busy else "quiet").inc()

    def _on_runners(self, tick: Tick, tag: Any, value: Any, error: BaseException | None) -> None:
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
        self, tick: Tick, tag: Any, value: Any, error: BaseException | None
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

    def _runners_in(self, tick: Tick, runners: list[Runner], listed: Listed | None) -> None:
        st = self.state
        st.runners = tick.runners = tuple(runners)
        if listed is not None:
            st.runner_list.cost = average(st.runner_list.cost, listed.counted)
            st.runner_list.skips = skip_counts(listed.records)
        st.runner_list.last = tick.now
        self._signals_if_ready(tick)  # without a plan yet: at the plan (_start)
        self._lean_if_ready(tick)

    def _signals_if_ready(self, tick: Tick) -> None:
        """Polling alone, once the plan and the runner list are in: the jobs of the runs
        one of whose jobs ended, by the runner list (:func:`.cadence.runner_signals`)."""
        if tick.cadence is None or tick.runners is None or tick.signalled:
            return
        tick.signalled = True
        for run_id in runner_signals(self.state, tick.runners):
            self._ask_jobs(tick, self.state.runs[run_id].ref, BUSY, "runner")

    def _lean_if_ready(self, tick: Tick) -> None:
        """Run ``lean`` once its inputs are in: the plan, the runner list, and every runs
        listing this poll asked for."""
        if tick.lean is None or tick.plan is None or tick.runners is None:
            return
        if tick.names is None or tick.runs_left:
            return
        self._lean_jobs(tick, tick.lean, {r.name: r.busy for r in tick.runners})

    def _lean_jobs(self, tick: Tick, lean: Lean, busy: Mapping[str, bool]) -> None:
        """A webhook reconcile: list the jobs of the known runs ``lean`` names."""
        tick.lean = None  # once a poll
        for run_id, unit in list(self.state.runs.items()):
            facts = RunFacts(
                run_id,
                unit.jobs,
                unit.last,
                run_id in tick.moved,
                created_at=unit.ref.created_at or None,
                listed_live=unit.ref.repo in tick.listed_repos,
            )
            reason = lean(facts, busy)
            self.metrics.webhook_reconcile_job_listings.labels(reason.value).inc()
            if reason is not Reason.SETTLED:
                self._ask_jobs(tick, unit.ref, BUSY if unit.busy else QUIET, "reconcile")

    def _on_repos(self, tick: Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        candidates = self.fetch.repo_candidates()
        if isinstance(error, NotFoundError) and tag[1] + 1 < len(candidates):
            index = tag[1] + 1
            tick.batch.submit(
                ("repos", index), self.fetch.repo_list, index, tick.deadline, priority=FIRST
            )
            return
        names, listed = self._result(value, error)
        if self.fetch.repo_list_path is None and candidates[tag[1]].startswith("/users/"):
            log.warning(
                "%s is a user: /users/%s/repos lists its public repositories only; "
                "set github.repos or use a GitHub App to watch private ones",
                self.settings.owner,
                self.settings.owner,
            )
        self.fetch.repo_list_path = candidates[tag[1]]
        st = self.state
        st.repo_list.cost = average(st.repo_list.cost, listed.counted)
        st.repo_list.skips = skip_counts(listed.records)
        st.repo_list.last = tick.now
        known = tick.names
        st.repo_names = tick.listed_names = tuple(dict.fromkeys(names))
        if known is not None:  # listing started from the repositories known (_start)
            added = set(st.repo_names) - set(known)
            tick.names = st.repo_names
            self.http.cache.drop(st.keep_repos(st.repo_names))
            if added:
                self._ask_runs(tick, tuple(n for n in st.repo_names if n in added))
        elif tick.plan is not None:  # else the plan, when it comes, lists them
            self._repos_known(tick, st.repo_names)

    def _on_runs(self, tick: Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        _, repo, _status = tag
        if isinstance(error, Deferred):
            unit = self.state.repos.get(repo)
            if tick.runs_left[repo] == len(RUN_STATUSES):  # count the repository once
                self._deferred(tick, unit is not None and self.state.repo_busy(unit))
            tick.incomplete.add(repo)
        elif isinstance(error, BadPage | TransientError):
            self._failed(tick, "runs_page", error, self.state.repos.get(repo))
            tick.incomplete.add(repo)
        elif error is not None:
            raise error
        elif repo in self.state.repos:  # else dropped by the repository list meanwhile
            runs, listed = value
            tick.runs_counted[repo] += listed.counted
            tick.runs_urls[repo] += listed.urls
            seen = tick.runs_seen[repo]
            for run in runs:
                seen.setdefault(run.id, run)
                known = self.state.runs.get(run.id)
                if known is None:
                    self.state.runs[run.id] = RunUnit(run, status=_status)
                    if not tick.lean_poll:  # else lean decides, once every listing is in
                        self._ask_jobs(tick, run, BUSY, "new")
                    continue
                if known.status and known.status != _status:
                    tick.moved.add(run.id)
                known.ref, known.status = run, _status
        tick.runs_left[repo] -= 1
        if tick.runs_left[repo] == 0:
            self._repo_done(tick, repo)

    def _repo_done(self, tick: Tick, repo: str) -> None:
        del tick.runs_left[repo]
        self._repo_listed(tick, repo)
        unit = self.state.repos.get(repo)
        if tick.cadence is not None and unit is not None and repo in tick.listed_repos:
            for run_id in status_moved(self.state, unit.runs):
                self._ask_jobs(tick, self.state.runs[run_id].ref, BUSY, "status")
        self._lean_if_ready(tick)

    def _on_recent(self, tick: Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        """A repository's newest runs (:mod:`.cadence`): a run not completed there is live
        (new: its jobs are listed now); a live one completed has ended. A listing that
        ended holds every run of the repository: it stands for a whole listing (a live run
        it does not show ended). Otherwise, when it did not reach the newest run of the
        last listing, or the repository was never listed whole, it is listed whole."""
        repo = tag[1]
        st = self.state
        unit = st.repos.get(repo)
        if isinstance(error, Deferred):
            self._deferred(tick, unit is not None and unit.last is None)
            return
        if isinstance(error, BadPage | TransientError):
            self._failed(tick, "runs_page", error, unit)
            if unit is not None and unit.whole_at is None:
                self._ask_whole(tick, repo, BUSY, "new")  # no picture of it yet
            return
        if error is not None:
            raise error
        if unit is None:
            return  # no longer watched
        runs: list[RunRef]
        runs, listed, reached, whole = value
        live = {run.id for run in runs if not run.completed}
        if whole:
            ended = sorted(r for r in unit.runs if r not in live and r in st.runs)
        else:
            ended = sorted(
                r.id for r in runs if r.completed and r.id in unit.runs and r.id in st.runs
            )
        for run in runs:
            if run.completed:
                continue
            known = st.runs.get(run.id)
            if known is None:
                st.runs[run.id] = RunUnit(run, status=run.status)
                self._ask_jobs(tick, run, BUSY, "new")
            else:
                known.ref, known.status = run, run.status
            unit.runs.add(run.id)
        self.finished.extend(st.runs[r].ref for r in ended)
        self.http.cache.drop(st.drop_runs(ended))
        unit.runs.difference_update(ended)
        for run_id in status_moved(st, unit.runs):
            self._ask_jobs(tick, st.runs[run_id].ref, BUSY, "status")
        self._newest(unit, runs)
        unit.recent_cost = (
            average(unit.recent_cost, listed.counted) if unit.recent_relisted else listed.counted
        )
        unit.recent_relisted = unit.last is not None
        unit.recent_urls = listed.urls
        unit.last = tick.now
        unit.ends = whole
        if whole:
            unit.whole_at = tick.now
            tick.listed_repos.add(repo)
        if unit.whole_at is not None:  # else a whole listing's failure this tick stands
            unit.failed = None
        if unit.whole_at is None:
            self._ask_whole(tick, repo, BUSY, "new")
        elif not reached:
            self._ask_whole(tick, repo, BUSY, "short")

    @staticmethod
    def _newest(unit: RepoUnit, runs: list[RunRef]) -> None:
        created = [run.created_at for run in runs]
        if created:
            unit.newest = max(created) if unit.newest is None else max(unit.newest, *created)

    def _repo_listed(self, tick: Tick, repo: str) -> None:
        unit = self.state.repos.get(repo)
        if unit is None or repo in tick.incomplete:
            return  # dropped meanwhile, or a page was bad: keep what we had, retry next tick
        seen = tick.runs_seen[repo]
        gone = unit.runs - seen.keys()
        # Out of every listing that can hold a queued job: completed (job retry reads them).
        self.finished.extend(self.state.runs[r].ref for r in sorted(gone) if r in self.state.runs)
        self.http.cache.drop(self.state.drop_runs(gone))
        unit.runs = set(seen)
        counted = tick.runs_counted[repo]
        unit.relisted = unit.whole_at is not None
        unit.cost = average(unit.cost, counted) if unit.relisted else float(counted)
        unit.urls = tick.runs_urls[repo]
        unit.last = unit.whole_at = tick.now
        self._newest(unit, list(seen.values()))
        unit.failed = None
        tick.listed_repos.add(repo)

    def _on_jobs(self, tick: Tick, tag: Any, value: Any, error: BaseException | None) -> None:
        unit = self.state.runs.get(tag[1])
        if isinstance(error, Deferred):
            self._deferred(tick, unit is not None and unit.busy)
            return
        if isinstance(error, NotFoundError):
            self.http.cache.drop(self.state.drop_runs([tag[1]]))  # the run was deleted
            return
        if isinstance(error, BadPage | TransientError):
            self._failed(tick, "jobs_page", error, unit)
            return
        if error is not None:
            raise error
        if unit is None:
            return  # its repository no longer lists it
        listed: Listed = value
        unit.jobs = tuple(listed.items)
        unit.listed_status = unit.status
        self._claim(tick, unit)
        unit.queued = fresh_queued(unit.jobs)
        unit.skips = skip_counts(listed.records)
        unit.urls = listed.urls
        unit.relisted = unit.last is not None
        unit.cost = average(unit.cost, listed.counted) if unit.relisted else float(listed.counted)
        unit.last = tick.now
        unit.failed = None

    def _claim(self, tick: Tick, unit: RunUnit) -> None:
        """The runners this listing shows running the run's jobs are its now. Polling
        alone, a run whose last listing had one of them running a job of its own has seen
        that job end: its jobs are listed too."""
        st = self.state
        for job in unit.jobs:
            if job.status is not JobStatus.IN_PROGRESS or not job.runner_name:
                continue
            before = st.claims.get(job.runner_name)
            st.claims[job.runner_name] = unit.ref.id
            if tick.cadence is None or before is None or before == unit.ref.id:
                continue
            other = st.runs.get(before)
            if other is not None and other.last is not None:
                self._ask_jobs(tick, other.ref, BUSY, "runner")

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

    def _failed(
        self,
        tick: Tick,
        kind: str,
        error: BadPage | TransientError,
        unit: RepoUnit | RunUnit | None,
    ) -> None:
        """A runs or jobs listing that could not be completed: its unit keeps its last
        listing; without one it is unlisted (:meth:`PollState.failed`), never an empty one.
        A bad page is also skipped and counted; a transient error (a 5xx after its
        retries, an endpoint closed by ``Retry-After``) is logged."""
        if isinstance(error, BadPage):
            self._skip_page(tick, kind, error)
            why = error.reason if isinstance(error, PaginationError) else "malformed page"
        else:  # an endpoint closed by Retry-After was logged once, when it closed
            level = logging.DEBUG if error.code == "retry_after" else logging.WARNING
            log.log(level, "GitHub listing not completed this poll: %s", error)
            why = f"{error.kind} ({error.code})" if error.code else error.kind
        if unit is not None:
            unit.failed = why

    def _skip_page(self, tick: Tick, kind: str, error: BadPage) -> None:
        if isinstance(error, PaginationError):
            endpoint = kind.removesuffix("_page")
            self.metrics.github_pagination_errors.labels(endpoint, error.reason).inc()
            log.error("GitHub pagination: %s", error)
        self.skips.skip(kind, str(error))
        tick.page_skips[kind] = tick.page_skips.get(kind, 0) + 1

    # --- submitting work
    def _repos_known(self, tick: Tick, names: tuple[str, ...]) -> None:
        tick.names = names
        self.http.cache.drop(self.state.keep_repos(names))
        if self.runner_scope == "repos":
            self._ask_repo_runners(tick, names)
        if tick.runs_listings:
            self._ask_runs(tick, names)
        # The runner list may have come in first, and no repository may be due.
        self._lean_if_ready(tick)

    def _ask_runs(self, tick: Tick, names: tuple[str, ...]) -> None:
        st, s = self.state, self.settings
        plan, poll, now = self._planned(tick), s.poll_interval, tick.now
        if tick.cadence is not None:
            for ask in repos_due(st, names, tick.cadence, poll, now):
                repo = str(ask.key)
                if ask.what in {"recent", "all"}:
                    priority = BUSY if ask.urgent else QUIET
                    self._ask_recent(tick, repo, ask.reason, priority, whole=ask.what == "all")
                else:
                    self._ask_whole(tick, repo, BUSY if ask.urgent else QUIET, ask.reason)
            return
        busy = [(n, st.repos[n].last) for n in names if st.repo_busy(st.repos[n])]
        quiet = [(n, st.repos[n].last) for n in names if not st.repo_busy(st.repos[n])]
        due = [(r, BUSY) for r in pick_due(busy, plan.busy_interval, poll, now)]
        due += [(r, QUIET) for r in pick_due(quiet, plan.quiet_interval, poll, now)]
        for repo, priority in due:
            self._ask_whole(tick, repo, priority, "reconcile")

    def _ask_whole(self, tick: Tick, repo: str, priority: int, reason: str) -> None:
        """The repository's runs in every status that can hold a queued job."""
        if repo in tick.whole_asked:
            return
        tick.whole_asked.add(repo)
        self.metrics.github_listings.labels("runs", reason).inc()
        tick.runs_left[repo] = len(RUN_STATUSES)
        tick.runs_seen[repo], tick.runs_counted[repo], tick.runs_urls[repo] = {}, 0, []
        for status in RUN_STATUSES:
            tick.batch.submit(
                ("runs", repo, status),
                self.fetch.runs,
                repo,
                status,
                tick.deadline,
                tick.allowance,
                priority=priority,
            )

    def _ask_recent(
        self, tick: Tick, repo: str, reason: str, priority: int, *, whole: bool = False
    ) -> None:
        """The repository's newest runs in every status, down to its newest run known
        (``whole``: to the end of the listing). A first one goes with the skeleton: one
        request shows a repository's live runs (and all of a short history), before the
        jobs and whole listings that follow from it."""
        newest = self.state.repos[repo].newest
        since = None if newest is None else newest - RECENT_SLACK
        if whole:
            since = 0.0  # no run is older: read until the listing ends
        if reason == "new":
            priority = FIRST
        self.metrics.github_listings.labels("all_runs" if whole else "recent_runs", reason).inc()
        tick.batch.submit(
            ("recent", repo),
            self.fetch.recent,
            repo,
            since,
            tick.deadline,
            tick.allowance,
            priority=priority,
        )

    def _ask_repo_runners(self, tick: Tick, names: tuple[str, ...]) -> None:
        tick.repo_runners_left = len(names)
        for repo in names:
            path = f"/repos/{self.settings.owner}/{quote(repo, safe='')}/actions/runners"
            tick.batch.submit(
                ("repo_runners", repo), self.fetch.runners, path, tick.deadline, priority=FIRST
            )
        if not names:
            self._runners_in(tick, [], None)

    def _ask_jobs(self, tick: Tick, run: RunRef, priority: int, reason: str) -> None:
        if run.id not in tick.jobs_asked:
            tick.jobs_asked.add(run.id)
            self.metrics.github_listings.labels("jobs", reason).inc()
            tick.batch.submit(
                ("jobs", run.id),
                self.fetch.jobs,
                run,
                tick.deadline,
                tick.allowance,
                priority=priority,
            )

    # --- the result
    def _observation(self, now: datetime, tick: Tick) -> Observation:
        st = self.state
        live = sum(1 for repo in st.repos.values() if repo.runs)
        self.metrics.github_repos.labels("live").set(live)
        self.metrics.github_repos.labels("quiet").set(len(st.repos) - live)
        self.metrics.github_unlisted_repos.set(st.unlisted())
        self.metrics.github_cache_entries.set(len(self.http.cache))
        skips = st.skips()
        for kind, count in tick.page_skips.items():
            skips[kind] = skips.get(kind, 0) + count
        plan = self._planned(tick)
        return Observation(
            observed_at=now,
            jobs=st.jobs(),
            runners=st.runners,
            skipped_items=sum(skips.values()),
            skipped_runners=skips.get("runner", 0),
            budget=poll_budget(plan, tick.busy_deferred, tick.cadence, live, len(st.repos) - live),
            unlisted_repos=tuple(sorted(st.failed().items())),
        )
