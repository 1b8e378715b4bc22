"""Pure: what a poll lists, and how often, from each repository's and run's activity.

Polling alone, a tick no longer re-reads everything. Per repository:

- **live** (its last listing showed a run that is not completed): its runs are listed
  whole, one listing per status that can hold a queued job (:data:`.units.RUN_STATUSES`),
  every tick (``busy`` when it holds queued jobs, as the budget plans it);
- **quiet** (no live run, and no delivery since its last listing: a webhook reconcile
  lists every repository whole): one listing of its **newest runs in every status**
  stands for the five, every :data:`QUIET_TICKS` ticks. A run created there since shows
  at its top (GitHub lists runs newest first, whatever their status): a queued job of a
  quiet repository is seen within two intervals. It is read down to the newest run of
  the last listing; when that takes more than a few pages the repository is listed
  whole in the same tick;
- **never listed**: its newest runs first, with the skeleton (a first picture, cheap
  under a budget), and whole once they are in, unless that listing ended: a listing
  without ``status`` that ends holds every run in every status, and stands for a whole
  one (whichever kind of listing ends that way);
- a repository whose last listing without a status **ended** within a few pages (a
  short history: every run it has fits) is listed whole by that one listing, read to its
  end, instead of one listing per status; when it no longer ends there, by status;
- and every repository whole at least once per **staleness limit**
  (:data:`STALE_TICKS` ticks): a re-run keeps its run's creation time, so a re-run of an
  old run of a quiet repository shows only there.

Per run, its jobs are listed when they could have changed:

- ``new``: never listed;
- ``busy``: it holds queued jobs and a job of it has started (they can start, or end
  and queue their dependents, at any moment: every tick);
- ``status``: GitHub reports it in another status than when its jobs were last listed
  (a queued run started, a held one was released, a completed one was re-run);
- ``runner``: a job the last listing shows in progress runs on a runner GitHub's runner
  list shows idle, offline or gone, or that a later listing shows running another job:
  that job ended, and its dependents may queue;
- ``stale``: its last listing is a staleness limit old (what no signal shows: a job on a
  runner not in our list, a GitHub-hosted one, ended and queued a dependent).

A run whose jobs are all queued in a run still ``queued`` (or ``requested``, ``pending``)
is not re-read: none of its jobs can have started. The budget stretches the quiet and
stale intervals first (:func:`cadence`), as it stretched quiet units before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autoscaler.domain import JobStatus, Runner
from autoscaler.observe.github.budget import QUIET_MAX_INTERVAL, BudgetPlan, pick_due
from autoscaler.observe.github.units import PollState

#: A quiet repository's newest runs are listed every this many ticks (so a run created
#: there is seen within two intervals).
QUIET_TICKS = 2
#: Every listing is re-read at least every this many ticks: the staleness limit.
STALE_TICKS = 10
#: The newest-runs listing reads down to this many seconds before the newest run of the
#: last listing (a run GitHub lists a little late keeps its creation time).
RECENT_SLACK = 300.0
#: Pages of newest runs read at most before a repository is listed whole instead.
RECENT_PAGES = 3
#: Runs a page of newest runs holds.
RECENT_PER_PAGE = 30


@dataclass(frozen=True)
class Cadence:
    """Seconds between re-lists, per kind of unit, as this poll's budget allows."""

    busy: float
    """Live repositories and runs with queued jobs (the poll interval, while it fits)."""
    live: float
    """Live repositories without queued jobs."""
    quiet: float
    """A quiet repository's newest runs."""
    staleness: float
    """The staleness limit: every repository listed whole, and every run's jobs listed,
    at least this often."""


def cadence(plan: BudgetPlan) -> Cadence:
    """The cadence the budget plan allows: the quiet and stale intervals stretched as
    the plan stretches quiet units (never past :data:`QUIET_MAX_INTERVAL`, or their own
    natural interval when that is longer)."""
    poll = plan.poll_interval
    stretch = plan.quiet_interval / poll

    def stretched(ticks: int) -> float:
        natural = ticks * poll
        return min(natural * stretch, max(natural, QUIET_MAX_INTERVAL))

    busy, live = plan.busy_interval, plan.quiet_interval
    return Cadence(busy, live, stretched(QUIET_TICKS), stretched(STALE_TICKS))


@dataclass(frozen=True, slots=True)
class Ask:
    """One listing a poll makes: ``what`` is ``whole`` (a repository's runs, one listing
    per status), ``all`` (its runs without a status, read to the end) or ``recent`` (its
    newest runs), or ``jobs`` (a run's); ``urgent`` goes before the budget's quiet work."""

    key: str | int
    what: str
    urgent: bool
    reason: str


def repos_due(
    state: PollState, names: Iterable[str], cad: Cadence, poll: float, now: float
) -> list[Ask]:
    """The runs listings of this poll, polling alone (see the module doc)."""
    live_busy: list[tuple[str, float | None]] = []
    live: list[tuple[str, float | None]] = []
    quiet_whole: list[tuple[str, float | None]] = []
    quiet_new: list[tuple[str, float | None]] = []
    asks: list[Ask] = []
    for name in names:
        unit = state.repos[name]
        if unit.whole_at is None:  # no picture of it yet
            if unit.last is None:  # its newest runs; whole after them, unless they end
                asks.append(Ask(name, "recent", True, "new"))
            else:
                asks.append(Ask(name, "whole", True, "new"))
        elif unit.runs:
            (live_busy if state.repo_busy(unit) else live).append((name, unit.last))
        else:
            quiet_whole.append((name, unit.whole_at))
            quiet_new.append((name, unit.last))

    def whole(name: str, urgent: bool, reason: str) -> Ask:
        """A whole listing: one listing without a status, read to its end, when the last
        one ended; else one per status."""
        return Ask(name, "all" if state.repos[name].ends else "whole", urgent, reason)

    asks += [whole(n, True, "live") for n in pick_due(live_busy, cad.busy, poll, now)]
    asks += [whole(n, False, "live") for n in pick_due(live, cad.live, poll, now)]
    stale = set(pick_due(quiet_whole, cad.staleness, poll, now))
    asks += [whole(n, False, "stale") for n in sorted(stale)]
    quiet = [(n, last) for n, last in quiet_new if n not in stale]
    for n in pick_due(quiet, cad.quiet, poll, now):
        asks.append(Ask(n, "all" if state.repos[n].ends else "recent", True, "quiet"))
    return asks


def jobs_due(state: PollState, cad: Cadence, poll: float, now: float) -> list[Ask]:
    """The jobs listings a poll decides at its start: runs never listed, runs with
    queued jobs that can start, and the stale ones."""
    busy: list[tuple[int, float | None]] = []
    rest: list[tuple[int, float | None]] = []
    for run_id, unit in state.runs.items():
        if unit.last is None or (unit.queued > 0 and not unit.frozen):
            busy.append((run_id, unit.last))
        else:
            rest.append((run_id, unit.last))
    asks = [
        Ask(r, "jobs", True, "new" if state.runs[r].last is None else "busy")
        for r in pick_due(busy, cad.busy, poll, now)
    ]
    asks += [Ask(r, "jobs", False, "stale") for r in pick_due(rest, cad.staleness, poll, now)]
    return asks


def status_moved(state: PollState, run_ids: Iterable[int]) -> list[int]:
    """Of these runs, those GitHub reports in another status than when their jobs were
    last listed."""
    out = []
    for run_id in run_ids:
        unit = state.runs.get(run_id)
        if unit is not None and unit.last is not None and unit.status != unit.listed_status:
            out.append(run_id)
    return out


def runner_signals(state: PollState, runners: Iterable[Runner]) -> list[int]:
    """Runs without a queued job that can start, one of whose jobs in progress (at its
    last listing) runs on a runner GitHub now shows idle, offline or gone, or that a later
    listing shows running another job: that job ended."""
    by_name: Mapping[str, Runner] = {r.name: r for r in runners}
    out = []
    for run_id, unit in state.runs.items():
        if unit.last is None or (unit.queued > 0 and not unit.frozen):
            continue  # listed anyway
        for job in unit.jobs:
            if job.status is not JobStatus.IN_PROGRESS:
                continue
            runner = by_name.get(job.runner_name or "")
            if runner is None or not runner.busy or not runner.online:
                out.append(run_id)
                break
            if state.claims.get(runner.name, run_id) != run_id:
                out.append(run_id)
                break
    return out
