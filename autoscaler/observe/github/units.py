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
#: Run statuses in which no job of the run has started yet: while a run stays in one, its
#: jobs listing cannot change (no job can start, end, or queue a dependent).
FROZEN = frozenset({"queued", "requested", "pending"})
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
    listed_status: str = ""
    """Its status when its jobs were last listed ("": never, or not known then)."""
    failed: str | None = None
    """Why its last jobs listing could not be completed (None: it was, or it waits)."""

    @property
    def busy(self) -> bool:
        return self.queued > 0 or self.last is None

    @property
    def frozen(self) -> bool:
        """Listed in a status where none of its jobs has started (queued, requested,
        pending) and still in it: none can have started or ended since."""
        return self.listed_status in FROZEN and self.status == self.listed_status


@dataclass(slots=True)
class RepoUnit:
    """A repository's runs: listed whole (one listing per status in RUN_STATUSES, or one
    without a status read to its end when its runs fit a few pages) or, while it holds no
    live run, by its newest runs in every status (:mod:`.cadence`)."""

    name: str
    last: float | None = None
    """Its last runs listing of either kind."""
    cost: float = float(len(RUN_STATUSES))
    """Counted requests per whole listing (an average)."""
    runs: set[int] = field(default_factory=set)
    """Its live runs (every run its listings show in a status that is not completed)."""
    skips: dict[str, int] = field(default_factory=dict)
    urls: list[str] = field(default_factory=list)
    relisted: bool = False
    failed: str | None = None
    """Why its last runs listing could not be completed (None: it was, or it waits)."""
    whole_at: float | None = None
    """Its last whole listing (every status that can hold a queued job)."""
    newest: float | None = None
    """The creation time (GitHub's clock) of the newest run any listing of it showed."""
    recent_cost: float = 1.0
    """Counted requests per listing of its newest runs (an average)."""
    recent_relisted: bool = False
    recent_urls: list[str] = field(default_factory=list)
    ends: bool = False
    """Its last listing of newest runs ended (every run it has fits in a few pages): read
    to its end, that one listing stands for a whole listing (:mod:`.cadence`)."""


@dataclass(slots=True)
class ListUnit:
    """A listing re-read as a whole: the owner's repositories, or the runners."""

    last: float | None = None
    cost: float = 1.0
    skips: dict[str, int] = field(default_factory=dict)


def _planned(units: list[tuple[str, bool, float, bool, float]]) -> list[Activity]:
    """(kind, busy, cost, relisted, share) -> activities: a unit re-listed on ``share`` of
    the ticks costs ``cost * share`` a tick; a unit not re-listed yet costs what its
    re-listed likes (same kind, same busy-ness) cost on average."""
    seen: dict[tuple[str, bool], list[float]] = {}
    for kind, busy, cost, relisted, _ in units:
        if relisted:
            seen.setdefault((kind, busy), []).append(cost)
    mean = {key: sum(costs) / len(costs) for key, costs in seen.items()}
    return [
        Activity(busy, share * (cost if relisted else mean.get((kind, busy), cost)))
        for kind, busy, cost, relisted, share in units
    ]


@dataclass
class PollState:
    repos: dict[str, RepoUnit] = field(default_factory=dict)
    runs: dict[int, RunUnit] = field(default_factory=dict)
    repo_list: ListUnit = field(default_factory=ListUnit)
    repo_names: tuple[str, ...] | None = None
    runner_list: ListUnit = field(default_factory=ListUnit)
    runners: tuple[Runner, ...] = ()
    claims: dict[str, int] = field(default_factory=dict)
    """Runner name -> the run whose jobs listing last showed a job in progress on it."""

    def repo_busy(self, repo: RepoUnit) -> bool:
        if repo.last is None:
            return True
        return any(self.runs[r].queued > 0 for r in repo.runs if r in self.runs)

    def activity(
        self, *, repo_list: bool, quiet_share: float = 1.0, stale_share: float = 1.0
    ) -> list[Activity]:
        """Every unit as the budget planner sees it, at the share of the ticks the
        cadence lists it on (1.0: every tick; :mod:`.cadence` passes its shares): the
        runner list is the fixed cost; ``repo_list``: the owner's repositories are
        listed, not configured. A repository that holds no live run costs its newest
        runs on ``quiet_share`` of the ticks and its whole listing on ``stale_share``; a
        run whose jobs cannot have changed unseen (no queued job, or none started) its
        jobs on ``stale_share`` (what its runners' signals add is not known ahead)."""
        units: list[tuple[str, bool, float, bool, float]] = []
        for r in self.repos.values():
            busy = self.repo_busy(r)
            if r.last is None or r.runs or quiet_share >= 1.0:
                units.append(("repo", busy, r.cost, r.relisted, 1.0))
                continue
            units.append(("repo", busy, r.cost, r.relisted, stale_share))
            units.append(("recent", busy, r.recent_cost, r.recent_relisted, quiet_share))
        for u in self.runs.values():
            every = u.last is None or (u.queued > 0 and not u.frozen)
            units.append(("run", u.busy, u.cost, u.relisted, 1.0 if every else stale_share))
        out = _planned(units)
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
            urls += repo.urls + repo.recent_urls + self.drop_runs(repo.runs)
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
        never = {name for name, r in self.repos.items() if r.whole_at is None}
        return len(never | set(self.failed()))

    def failed(self) -> dict[str, str]:
        """Repository -> why, for each one whose listing could not be completed and that
        has no earlier listing to keep: its runs, or the jobs of one of its runs. Their
        queued jobs are missing from the picture (a listing waiting for the budget is not
        here: it was not tried). A repository's newest runs alone are not a picture of it:
        it needs one whole listing."""
        out = {
            name: repo.failed
            for name, repo in self.repos.items()
            if repo.whole_at is None and repo.failed is not None
        }
        for unit in self.runs.values():
            if unit.last is None and unit.failed is not None:
                out.setdefault(unit.ref.repo, f"jobs of run {unit.ref.id}: {unit.failed}")
        return out
