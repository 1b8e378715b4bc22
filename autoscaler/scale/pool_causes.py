"""The causes a pool's state gives: back-off, failing launches, limits, demand met (pure).

A part of :func:`autoscaler.scale.diagnosis.diagnose`: the causes found in what the scaling
stage saw and decided (its :class:`~autoscaler.scale.view.ScalingView`: the pools, the plan,
the back-offs and their failures), as opposed to those found in the runners and the queue.
Why a type's capacity is not coming: a pool backed off or failing to launch, the type's
``max``, every pool at its MaxSize, a shared budget spent, or the capacity already asked for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from autoscaler.domain import (
    ActivityStatus,
    Cause,
    PoolState,
    QueueStats,
    ScalingActivity,
)
from autoscaler.scale.causes import clock, fmt_age, plural
from autoscaler.scale.plan import LAUNCH_FAILED, LAUNCH_REFUSED, STUCK, Decision, ScalingState
from autoscaler.scale.view import ScalingView

if TYPE_CHECKING:
    from autoscaler.config import Config, RunnerTypeConfig

#: A pool short of its desired capacity with no new instance for this share of
#: ``boot_timeout`` is called stuck (at the full timeout the policy releases it).
STUCK_SHARE = 0.5


@dataclass(frozen=True)
class PoolCauses:
    """One tick's pool-side causes, for each runner type with queued jobs."""

    config: Config
    now: datetime
    scaling: ScalingView
    dry_run: bool

    def _age(self, since: datetime) -> float:
        return (self.now - since).total_seconds()

    def pool_causes(
        self, rt: RunnerTypeConfig, present: list[PoolState], decisions: Mapping[str, Decision]
    ) -> list[Cause]:
        state, out = self.scaling.state, []
        plan = self.scaling.plan
        orphans = Counter(o.pool for o in plan.orphans) if plan is not None else Counter[str]()
        for p in present:
            if state.in_backoff(p.name, self.now):
                out.append(Cause("capacity_backoff", self._backoff(rt, p.name, state)))
                continue
            failed = _failed_since_success(p)
            if failed:
                last = failed[0]
                said = f": {last.message}" if last.message else ""
                many = "Failed scaling activities"
                out.append(
                    Cause(
                        "launch_failing",
                        f"{p.name}: {plural(len(failed), 'Failed scaling activity', many)},"
                        f" last at {clock(last.started_at)}{said}",
                    )
                )
            if orphans[p.name]:
                out.append(
                    Cause(
                        "launch_failing",
                        f"{p.name}: {plural(orphans[p.name], 'instance')} never registered a runner"
                        f" within boot_timeout {fmt_age(rt.boot_timeout)}",
                    )
                )
            age = self._stuck_for(p, rt)
            if age is not None and not failed:
                out.append(
                    Cause(
                        "launch_failing",
                        f"{p.name}: {p.desired_capacity - p.live_instances} short of desired"
                        f" {p.desired_capacity} for {fmt_age(age)} with no new instance"
                        f" (released at boot_timeout {fmt_age(rt.boot_timeout)})",
                    )
                )
        if self.dry_run and plan is not None:
            ups = [
                (d.pool, d.desired - d.current)
                for d in decisions.values()
                if d.desired > d.current and d.action == "scale_up"
            ]
            if ups:
                where = ", ".join(f"+{n} in {pool}" for pool, n in ups)
                out.append(Cause("dry_run", f"{where} planned, not asked (dry run)"))
        return out

    def _backoff(self, rt: RunnerTypeConfig, pool: str, state: ScalingState) -> str:
        until = state.backoff_until[pool]
        seconds = state.backoff_seconds.get(pool, 0.0)
        since = until.timestamp() - seconds
        text = (
            f"{pool} since {clock(datetime.fromtimestamp(since, UTC))},"
            f" skipped until {clock(until)}"
        )
        failure = self.scaling.failures.get(pool)
        if failure is None:
            return text
        if failure.reason == STUCK:
            return text + f"; no instance launched within boot_timeout {fmt_age(rt.boot_timeout)}"
        if failure.reason == LAUNCH_REFUSED:  # its words are in the permanent_error cause
            return text + f"; launch refused ({failure.code or 'no code'}): a person must act"
        words = ": ".join(w for w in (failure.code, failure.message) if w)
        if failure.reason == LAUNCH_FAILED:
            return text + "; Failed scaling activity" + (f", AWS: {words}" if words else "")
        return text + (f"; AWS: {words}" if words else "")

    def limit_causes(
        self,
        rt: RunnerTypeConfig,
        stats: QueueStats,
        present: list[PoolState],
        decisions: Mapping[str, Decision],
    ) -> list[Cause]:
        """at_max, pool_max_size, budget_exhausted, demand_met: what was asked vs wanted."""
        demand = stats.queue_size + stats.runners.busy + rt.min_idle.at(self.now)
        asked = {p.name: self._asked(p, decisions) for p in present}
        total = sum(asked.values())
        out: list[Cause] = []
        if rt.max is not None and demand > rt.max and total >= rt.max:
            out.append(Cause("at_max", f"{rt.name} {total}/{rt.max} instances"))
        # the pools that can still deliver; a pool out of capacity adds nothing
        working = [p for p in present if not self._failing(p, rt)]
        full = bool(working) and all(asked[p.name] >= p.max_size for p in working)
        if full and demand > sum(asked[p.name] for p in working):
            sizes = ", ".join(f"{p.name} {asked[p.name]}/{p.max_size}" for p in working)
            out.append(Cause("pool_max_size", f"MaxSize reached: {sizes}"))
        assert self.scaling.plan is not None
        use = self.scaling.plan.budget_use
        for b in self.config.budgets:
            covered = any(fnmatchcase(rt.name, pattern) for pattern in b.runner_types)
            if covered and use.get(b.name, 0) >= b.max_instances and demand > total:
                out.append(
                    Cause(
                        "budget_exhausted",
                        f"budget {b.name} {use[b.name]}/{b.max_instances} instances",
                    )
                )
        coming = sum(asked[p.name] for p in working)
        registered = stats.runners.idle + stats.runners.busy + stats.runners.offline
        if present and coming >= demand and coming > registered:
            out.append(
                Cause(
                    "demand_met",
                    f"{plural(coming, 'instance')} asked for a demand of {demand},"
                    f" {coming - registered} on their way: the queue should drain within"
                    f" boot_timeout {fmt_age(rt.boot_timeout)}",
                )
            )
        return out

    def _stuck_for(self, p: PoolState, rt: RunnerTypeConfig) -> float | None:
        """Seconds the pool has been short with no new instance, once that is at least
        :data:`STUCK_SHARE` of ``boot_timeout``; None otherwise."""
        short = self.scaling.state.short_since.get(p.name)
        if short is None or p.desired_capacity <= p.live_instances:
            return None
        age = self._age(short[0])
        return age if age >= rt.boot_timeout * STUCK_SHARE else None

    def _failing(self, p: PoolState, rt: RunnerTypeConfig) -> bool:
        """In capacity back-off, its launches fail or are stuck, or its instances never
        become runners: what it was asked will not come."""
        plan = self.scaling.plan
        return (
            self.scaling.state.in_backoff(p.name, self.now)
            or bool(_failed_since_success(p))
            or self._stuck_for(p, rt) is not None
            or (plan is not None and any(o.pool == p.name for o in plan.orphans))
        )

    def _asked(self, p: PoolState, decisions: Mapping[str, Decision]) -> int:
        """Instances the pool holds or was asked for once this tick's plan is carried out
        (a dry run carries out nothing)."""
        d = decisions.get(p.name)
        target = d.desired if d is not None and not self.dry_run else p.desired_capacity
        return max(target, p.live_instances)


def _failed_since_success(p: PoolState) -> list[ScalingActivity]:
    """The pool's Failed activities newer than its newest Successful one, newest first."""
    out = []
    for a in p.activities:
        if a.status is ActivityStatus.SUCCESSFUL:
            break
        if a.status is ActivityStatus.FAILED:
            out.append(a)
    return out
