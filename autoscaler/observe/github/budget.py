"""Pure: GitHub's rate limit as a budget. (activity, limits, now) -> how often to re-list.

The poll re-lists *units*: a repository's runs (one listing per run status) and a run's
jobs. A unit is **busy** when it holds queued jobs (or was never listed) and **quiet**
otherwise; each has a cost, the requests per re-list that count against the primary
limit (a 304 is free, so a unit whose pages did not change costs nothing). The runner
list is re-read every tick (scale-in and orphan cleanup need it fresh): a fixed cost.

:func:`plan_budget` keeps the counted requests under ``share`` of ``x-ratelimit-limit``
per hour (and under what the current window has left above the reserve the share keeps
for others): first every unit at the poll interval; if that does not fit, quiet units are
stretched (up to :data:`QUIET_MAX_INTERVAL`), never the busy ones first; when even that
does not fit, busy units are stretched too and the plan says ``too_small``.
:func:`pick_due` then spreads the re-lists of a stretched class over the ticks, the most
overdue first, so a stretched interval never becomes a burst every N ticks.

The plan works from estimates; :func:`refill` is the hard bound. A token bucket holds at
most :data:`BURST_SHARE` of the hourly budget (so a cold start can list a lot at once),
refills at the planned budget, and never holds more than the window has left above the
reserve. A poll spends from it and defers what it cannot afford to later ticks, busy
units first in line: the counted requests of an hour stay under the share.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

#: The limit assumed before GitHub has told it (a personal access token's).
DEFAULT_LIMIT = 5000
#: Quiet units are re-listed at least this often, whatever the budget.
QUIET_MAX_INTERVAL = 900.0
#: Busy units likewise (past this the budget is hopeless: the plan says so).
BUSY_MAX_INTERVAL = 900.0
#: Share of the hourly budget one tick may spend at once (a cold start).
BURST_SHARE = 0.25

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Limits:
    """The primary limit as the last response told it (None: not known yet)."""

    limit: int | None = None
    remaining: int | None = None
    reset: float | None = None
    """Unix time the window resets."""


@dataclass(frozen=True, slots=True)
class Activity:
    """One unit the poll re-lists."""

    busy: bool
    """It holds queued jobs, or was never listed."""
    cost: float
    """Requests per re-list counted against the primary limit (an estimate)."""


@dataclass(frozen=True)
class BudgetPlan:
    poll_interval: float
    busy_interval: float
    """Seconds between re-lists of a busy unit (the poll interval when it fits)."""
    quiet_interval: float
    """Seconds between re-lists of a quiet unit."""
    budget_per_hour: float
    """Counted requests per hour the plan may spend."""
    needed_per_hour: float
    """What re-listing everything every poll interval would cost."""
    planned_per_hour: float
    """What this plan costs."""
    too_small: bool
    """Busy units had to be stretched: the budget cannot cover this org."""


def _ticks(seconds: float, poll: float) -> float:
    """Round an interval up to whole ticks."""
    return poll * max(1, math.ceil(seconds / poll - 1e-9))


def budget_per_hour(limits: Limits, now: float, poll: float, share: float) -> float:
    """``share`` of the hourly limit, and no more than the window has left above the
    reserve (``1 - share`` of the limit) spread over the time to its reset."""
    limit = limits.limit if limits.limit is not None else DEFAULT_LIMIT
    budget = share * limit
    if limits.remaining is not None and limits.reset is not None and limits.reset > now:
        spendable = max(0.0, limits.remaining - (1 - share) * limit)
        hours = max(limits.reset - now, poll) / 3600
        budget = min(budget, spendable / hours)
    return budget


def plan_budget(  # noqa: PLR0917
    activity: Sequence[Activity],
    fixed_cost: float,
    limits: Limits,
    now: float,
    poll_interval: float,
    share: float,
) -> BudgetPlan:
    """How often to re-list busy and quiet units so the counted requests fit the budget."""
    poll = poll_interval
    ticks = 3600 / poll
    busy = sum(a.cost for a in activity if a.busy)
    quiet = sum(a.cost for a in activity if not a.busy)
    budget = budget_per_hour(limits, now, poll, share)
    needed = (fixed_cost + busy + quiet) * ticks
    available = budget - fixed_cost * ticks
    busy_interval = quiet_interval = poll
    if needed > budget:
        rest = available - busy * ticks
        quiet_interval = quiet * 3600 / rest if rest > 0 else math.inf
        if quiet_interval > QUIET_MAX_INTERVAL:
            quiet_interval = QUIET_MAX_INTERVAL
            rest = available - quiet * 3600 / QUIET_MAX_INTERVAL
            busy_interval = busy * 3600 / rest if rest > 0 else math.inf
            busy_interval = min(max(busy_interval, poll), BUSY_MAX_INTERVAL)
    busy_interval = _ticks(busy_interval, poll)
    quiet_interval = _ticks(max(quiet_interval, busy_interval), poll)
    planned = (fixed_cost + busy * poll / busy_interval + quiet * poll / quiet_interval) * ticks
    return BudgetPlan(
        poll_interval=poll,
        busy_interval=busy_interval,
        quiet_interval=quiet_interval,
        budget_per_hour=budget,
        needed_per_hour=needed,
        planned_per_hour=planned,
        too_small=busy > 0 and busy_interval > poll,
    )


def refill(  # noqa: PLR0917
    tokens: float | None,
    elapsed: float,
    limits: Limits,
    now: float,
    poll_interval: float,
    share: float,
    margin: float = 0.0,
) -> float:
    """The requests this poll may spend: the bucket after ``elapsed`` seconds of refill
    at the budget (full when ``tokens`` is None: the first poll), never more than
    :data:`BURST_SHARE` of the hourly budget nor what the window has left above the
    reserve (``1 - share`` of the limit) and ``margin`` (requests already in flight when
    the allowance runs out still count)."""
    limit = limits.limit if limits.limit is not None else DEFAULT_LIMIT
    capacity = BURST_SHARE * share * limit
    rate = budget_per_hour(limits, now, poll_interval, share)
    level = capacity if tokens is None else min(capacity, tokens + rate * elapsed / 3600)
    window_open = limits.reset is None or limits.reset > now
    if limits.remaining is not None and window_open:
        level = min(level, max(0.0, limits.remaining - (1 - share) * limit - margin))
    return level


def pick_due(
    units: Sequence[tuple[K, float | None]], interval: float, poll: float, now: float
) -> list[K]:
    """Which units to re-list this tick: every never-listed one (``None``), and of the
    others, not re-listed within half a tick, the ``ceil(n * poll / interval)`` most
    overdue: over ``interval`` each unit's turn comes once, spread over the ticks."""
    never = [key for key, last in units if last is None]
    listed = [(last, key) for key, last in units if last is not None and now - last >= poll / 2]
    quota = math.ceil((len(units) - len(never)) * poll / interval - 1e-9)
    if quota >= len(listed):
        return never + [key for _, key in listed]
    # the most overdue first; ties in a fixed order, so a tick's pick is reproducible
    listed.sort(key=lambda pair: (pair[0], str(pair[1])))
    return never + [key for _, key in listed[:quota]]
