"""The words of a diagnosis: cause codes, what each means, and how causes are written.

:mod:`autoscaler.scale.diagnosis` finds the causes; the alert's ``Cause:`` line, the status
page and ``explain`` only show them. They share this vocabulary (the stable codes in their
order, their plain-language words, the unmatched-jobs key, short ages), so a reader of
causes never imports the analysis that finds them. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from autoscaler.domain import Cause

#: Every cause code, most important first (a type's causes are listed in this order).
CODES: tuple[str, ...] = (
    "github_stale",  # the picture is old: nothing below may still be true, nothing scales
    "scaling_disabled",  # nothing will add capacity for this type
    "dry_run",  # this tick planned capacity and did not ask for it
    "pool_missing",  # a configured pool does not exist
    "permanent_error",  # the cloud refused a call for good (AccessDenied, ...)
    "capacity_backoff",  # a pool is out of capacity and skipped for a while
    "launch_failing",  # launches fail, or instances never become runners
    "at_max",  # the type's own ``max`` is reached
    "pool_max_size",  # every pool is at its MaxSize
    "budget_exhausted",  # a shared budget is spent
    "booting",  # instances launched, runners not registered yet
    "runners_offline",  # runners of the type are offline
    "idle_runners_not_assigned",  # idle runners exist and GitHub does not give them the jobs
    "no_runner_type",  # jobs ask for labels no runner type serves
    "demand_met",  # the capacity is asked for and on its way
)
#: Code -> its place in :data:`CODES` (a sort key).
RANK = {code: i for i, code in enumerate(CODES)}

#: Each code in words, for the status page and the demo (a person's first read).
WORDS: Mapping[str, str] = {
    "github_stale": "The picture is stale: GitHub was not read recently",
    "scaling_disabled": "Nothing scales this runner type",
    "dry_run": "Dry run: capacity planned, not asked",
    "pool_missing": "A configured pool does not exist",
    "permanent_error": "The cloud refused a call for good",
    "capacity_backoff": "A pool is out of capacity and backed off",
    "launch_failing": "Launches fail, or instances never become runners",
    "at_max": "The runner type is at its max",
    "pool_max_size": "Every pool is at its MaxSize",
    "budget_exhausted": "A shared budget is spent",
    "booting": "Instances are booting",
    "runners_offline": "Runners are offline",
    "idle_runners_not_assigned": "Idle runners, yet GitHub does not assign the jobs",
    "no_runner_type": "Jobs ask for labels no runner type serves",
    "demand_met": "Capacity is asked for and on its way",
}

UNMATCHED = "(unmatched)"
"""The key under which :func:`autoscaler.scale.diagnosis.diagnose` lists queued jobs no
runner type serves."""


def cause_line(causes: Sequence[Cause], limit: int = 8) -> str:
    """``at_max (linux.4xlarge 50/50 instances); booting (3 instances, ...)``: the
    ``Cause:`` line of an alert (``none found`` when empty), at most ``limit`` causes."""
    if not causes:
        return "none found"
    shown = [f"{c.code} ({c.detail})" for c in causes[:limit]]
    if len(causes) > limit:
        shown.append(f"+{len(causes) - limit} more")
    return "; ".join(shown)


def fmt_age(seconds: float) -> str:
    """``45s``, ``4m``, ``1h02m``: short, for one-line details."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds)}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def plural(count: int, one: str, many: str | None = None) -> str:
    """``1 instance``, ``3 instances``."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def clock(t: datetime) -> str:
    """``14:02:07 UTC``: a moment in a one-line detail."""
    return t.astimezone(UTC).strftime("%H:%M:%S UTC")
