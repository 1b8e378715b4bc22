"""What one poll gathers as it goes (:class:`Tick`), and the webhook reconcile's view of it.

Kept apart from :mod:`.poll` (which fills a :class:`Tick` from its handlers) so the
poll's state machine reads as the steps it takes; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from autoscaler.domain import Runner
from autoscaler.errors import AutoscalerError
from autoscaler.observe.github.budget import BudgetPlan
from autoscaler.observe.github.cadence import Cadence
from autoscaler.observe.github.fetch import Allowance
from autoscaler.observe.github.reconcile_plan import Reason, RunFacts
from autoscaler.observe.github.records import PageRecord, RunRef
from autoscaler.observe.github.workers import Batch

#: A webhook reconcile's choice of the known runs whose jobs to list again
#: (:func:`autoscaler.observe.github.reconcile_plan.jobs_reason`), given GitHub's runner
#: list of this poll (name -> busy).
Lean = Callable[[RunFacts, Mapping[str, bool]], Reason]


@dataclass(frozen=True)
class ListedScope:
    """What one poll listed, for a webhook reconcile that replaces only that part of its
    index (:meth:`Poll.scope`)."""

    fresh: frozenset[int]
    """Runs whose jobs it listed."""
    repos: frozenset[str]
    """Repositories whose runs listings it read completely."""
    live: frozenset[int]
    """The runs those listings show live: a run of those repositories missing here ended
    (or was deleted)."""


@dataclass
class Tick:
    """What one poll has gathered so far."""

    now: float
    deadline: float
    batch: Batch
    start: int
    """``GitHubHttp.counted`` when the poll began (its allowance counts from here)."""
    plan: BudgetPlan | None = None
    """None until the rate limit is known (a first poll asks beside the skeleton)."""
    cadence: Cadence | None = None
    """Polling alone, once the plan is known (:mod:`.cadence`); None as the reconcile."""
    alone: bool = True
    """Polling alone (not the webhook reconcile): the cadence decides what is listed."""
    signalled: bool = False
    """The runner list's signals were read (once a poll, with the plan and the list)."""
    allowance: Allowance = field(default_factory=lambda: Allowance(0, 0.0))
    tokens: float = 0.0
    runners_asked: bool = False
    repos_asked: bool = False
    listed_names: tuple[str, ...] | None = None
    """The repository list, when it came in before the plan."""
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
    whole_asked: set[str] = field(default_factory=set)
    """Repositories whose runs this poll lists whole."""
    page_skips: dict[str, int] = field(default_factory=dict)
    deferred: int = 0
    busy_deferred: bool = False
    cut: AutoscalerError | None = None
    lean: Lean | None = None
    lean_poll: bool = False
    moved: set[int] = field(default_factory=set)
    """Runs seen in another status's listing than at their last one."""
    runs_listings: bool = True
    """False: a webhook reconcile with evidence that no delivery was lost lists no runs
    listing: the runners (and the repositories when due), and the jobs of known runs
    ``lean`` names."""
    listed_repos: set[str] = field(default_factory=set)
    """Repositories whose runs listings this poll read completely."""
