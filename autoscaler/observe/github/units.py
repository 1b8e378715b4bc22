"""What the poll remembers between ticks: per repository and per run, the last listing.

A repository whose runs were not re-listed this tick (stretched by the budget, or the tick
ended early on a rate limit) keeps its runs; a run whose jobs were not re-listed keeps its
jobs. Each unit knows when it was last listed and what a re-list costs (an exponential
average of the pages that counted against the rate limit), which is what
:func:`autoscaler.observe.github.budget.plan_budget` plans with. A unit listed only once
(every page of a first listing counts) is planned at what re-listing its like has cost,
once some were re-listed: else a cold start would look like the steady state.

Only the coordinator's thread touches these; workers return values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from autoscaler.domain import Job, JobStatus, Runner
from autoscaler.observe.github.budget import Activity
from autoscaler.observe.github.records import RunRef

#: Run statuses that can hold a queued job, in one place. The runs listing's ``status``
#: enum (GitHub's OpenAPI description) has these besides the conclusions and
#: ``completed``: a run ``waiting`` for an environment approval, ``requested`` or
#: ``pending`` (a concurrency group) can hold queued jobs too.
RUN_STATUSES = ("queued", "in_progress", "waiting", "requested", "pending")
#: Weight of the newest observation in a unit's cost average.
COST_WEIGHT = 0.5


def average(old: float, new: float) -> float:
    return (1 - COST_WEIGHT) * old + COST_WEIGHT * new


def fresh_queued(jobs: Iterable[Job]) -> int:
    """Queued jobs that are demand (a queued job with steps is a ghost)."""
    return sum(1 for j in jobs if j.status is JobStatus.QUEUED and not j.has_steps)


@dataclass(slots=True)
class RunUnit:
    """A run's jobs listing."""

    ref: RunRef
    last: float | None = None
    cost: float = 1.0
    jobs: tuple[Job, ...] = ()
    queued: int = 0
    skips: dict[str, int] = field(default_factory=dict)
    urls: list[str] = field(default_factory=list)
    relisted: bool = False
    status: str = ""
    """The status of the runs listing it was last seen in."""
    failed: str | None = None
    """Why its last jobs listing could not be completed (None: it was, or it waits)."""

    @property
    def busy(self) -> bool:
        return self.queued > 0 or self.last is None


@dataclass(slots=True)
class RepoUnit:
    """A repository's runs listings (one per status in RUN_STATUSES)."""

    name: str
    last: float | None = None
    cost: float = float(len(RUN_STATUSES))
    runs: set[int] = field(default_factory=set)
    skips: dict[str, int] = field(default_factory=dict)
    urls: list[str] = field(default_factory=list)
    relisted: bool = False
    failed: str | None = None
    """Why its last runs listing could not be completed (None: it was, or it waits)."""


@dataclass(slots=True)
class ListUnit:
    """A listing re-read as a whole: the owner's repositories, or the runners."""

    last: float | None = None
    cost: float = 1.0
    skips: dict[str, int] = field(default_factory=dict)


def _planned(units: list[tuple[bool, float, bool]]) -> list[Activity]:
    """(busy, cost, relisted) -> activities; a unit not re-listed yet costs what its
    re-listed likes (same kind, same busy-ness) cost on average."""
    seen: dict[bool, list[float]] = {True: [], False: []}
    for busy, cost, relisted in units:
        if relisted:
            seen[busy].append(cost)
    mean = {busy: sum(costs) / len(costs) for busy, costs in seen.items() if costs}
    return [
        Activity(busy, cost if relisted or busy not in mean else mean[busy])
        for busy, cost, relisted in units
    ]


@dataclass
class PollState:
    repos: dict[str, RepoUnit] = field(default_factory=dict)
    runs: dict[int, RunUnit] = field(default_factory=dict)
    repo_list: ListUnit = field(default_factory=ListUnit)
    repo_names: tuple[str, ...] | None = None
    runner_list: ListUnit = field(default_factory=ListUnit)
    runners: tuple[Runner, ...] = ()

    def repo_busy(self, repo: RepoUnit) -> bool:
        if repo.last is None:
            return True
        return any(self.runs[r].queued > 0 for r in repo.runs if r in self.runs)

    def activity(self, *, repo_list: bool) -> list[Activity]:
        """Every unit as the budget planner sees it (the runner list is its fixed cost;
        ``repo_list``: the owner's repositories are listed, not configured)."""
        repos = [(self.repo_busy(r), r.cost, r.relisted) for r in self.repos.values()]
        runs = [(u.busy, u.cost, u.relisted) for u in self.runs.values()]
        out = _planned(repos) + _planned(runs)
        if repo_list:
            out.append(Activity(False, self.repo_list.cost))
        return out

    def drop_runs(self, run_ids: Iterable[int]) -> list[str]:
        """Forget runs; returns the cache URLs they used."""
        urls: list[str] = []
        for run_id in run_ids:
            unit = self.runs.pop(run_id, None)
            if unit is not None:
                urls += unit.urls
        return urls

    def keep_repos(self, names: Iterable[str]) -> list[str]:
        """Watch exactly these repositories; returns the cache URLs of the dropped ones."""
        wanted = set(names)
        urls: list[str] = []
        for name in [n for n in self.repos if n not in wanted]:
            repo = self.repos.pop(name)
            urls += repo.urls + self.drop_runs(repo.runs)
        for name in wanted:
            self.repos.setdefault(name, RepoUnit(name))
        return urls

    def jobs(self) -> tuple[Job, ...]:
        return tuple(sorted((j for u in self.runs.values() for j in u.jobs), key=lambda j: j.id))

    def skips(self) -> dict[str, int]:
        """Malformed items on the pages the current picture comes from, per kind."""
        total: dict[str, int] = {}
        units: list[dict[str, int]] = [self.repo_list.skips, self.runner_list.skips]
        units += [r.skips for r in self.repos.values()] + [u.skips for u in self.runs.values()]
        for skips in units:
            for kind, count in skips.items():
                total[kind] = total.get(kind, 0) + count
        return total

    def unlisted(self) -> int:
        """Repositories with no picture yet: never listed (deferred, or failed), or holding
        a run whose jobs never were."""
        never = {name for name, r in self.repos.items() if r.last is None}
        return len(never | set(self.failed()))

    def failed(self) -> dict[str, str]:
        """Repository -> why, for each one whose listing could not be completed and that
        has no earlier listing to keep: its runs, or the jobs of one of its runs. Their
        queued jobs are missing from the picture (a listing waiting for the budget is not
        here: it was not tried)."""
        out = {
            name: repo.failed
            for name, repo in self.repos.items()
            if repo.last is None and repo.failed is not None
        }
        for unit in self.runs.values():
            if unit.last is None and unit.failed is not None:
                out.setdefault(unit.ref.repo, f"jobs of run {unit.ref.id}: {unit.failed}")
        return out
