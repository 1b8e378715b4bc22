"""``ci-autoscaler explain``: per runner type, the queue, the runners, the pools, the budgets,
the causes and the last decisions, from one tick; then what job retry decided per run.

:func:`reports` turns a :class:`~autoscaler.controller.TickResult` into one
:class:`TypeReport` per runner type (plus one for jobs no type serves); ``explain`` prints
them (:func:`format_explain`, :func:`explain_json`), and the status page and the demo show
the same reports, so every view says the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

from autoscaler.config import Config
from autoscaler.controller import TickResult
from autoscaler.domain import (
    STAGES,
    WARM_INSTANCE_STATES,
    Cause,
    CompletedJob,
    InstanceLifecycle,
    PollBudget,
    RunnerCounts,
    WarmPoolSpec,
    WarmPoolState,
)
from autoscaler.job_retry.decide import ASK, RERUN, RetryReport
from autoscaler.observe.waits import StageSummary
from autoscaler.scale.causes import UNMATCHED, fmt_age
from autoscaler.scale.plan import WarmSizing


@dataclass(frozen=True)
class PoolRow:
    """One pool as described this tick, and what the tick decided for it."""

    name: str
    desired: int | None = None
    in_service: int | None = None
    pending: int | None = None
    max_size: int | None = None
    backoff_until: datetime | None = None
    action: str = ""
    target: int | None = None
    reason: str = ""
    warm: WarmRow | None = None
    """Its warm pool, for a group listed under ``pools``."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "desired": self.desired,
            "in_service": self.in_service,
            "pending": self.pending,
            "max_size": self.max_size,
            "backoff_until": None if self.backoff_until is None else self.backoff_until.isoformat(),
            "decision": {"action": self.action, "desired": self.target, "reason": self.reason}
            if self.action
            else None,
            "warm_pool": None if self.warm is None else self.warm.as_dict(),
        }


@dataclass(frozen=True)
class WarmRow:
    """A listed group's warm pool: configured, found, and what the tick did about it."""

    configured: WarmPoolSpec | None
    found: WarmPoolState | None
    action: str
    reason: str
    done: bool
    sizing: WarmSizing | None = None
    """The hot and warm capacity decided from the type's objective (``size: slo``)."""

    def counts(self) -> dict[str, int]:
        """Warm instances by state (the states with any)."""
        if self.found is None:
            return {}
        return {s: n for s in WARM_INSTANCE_STATES if (n := self.found.count(s))}

    def text(self) -> str:
        """``stopped, min 2, max prepared 6; warm: 2 stopped`` (+ a change not made)."""
        said = "none" if self.configured is None else str(self.configured)
        counts = ", ".join(f"{n} {s}" for s, n in self.counts().items()) or "no instances"
        change = (
            ""
            if self.action == "keep"
            else f" ({self.action}{'' if self.done else ' planned'}: {self.reason})"
        )
        sized = "" if self.sizing is None else f"; sized: {self.sizing.reason}"
        return f"{said}; warm: {counts}{change}{sized}"

    def as_dict(self) -> dict[str, Any]:
        spec = self.configured
        return {
            "state": None if spec is None else spec.state,
            "min_size": None if spec is None else spec.min_size,
            "max_prepared": None if spec is None else spec.max_prepared,
            "reuse": None if spec is None else spec.reuse,
            "instances": self.counts(),
            "action": self.action,
            "done": self.done,
            "sized": None if self.sizing is None else self.sizing.as_dict(),
        }


@dataclass(frozen=True)
class TypeReport:
    """Everything on-call needs about one runner type, from one tick."""

    name: str
    queue_size: int
    max_queue_time_seconds: float
    runners: RunnerCounts
    causes: tuple[Cause, ...]
    pools: tuple[PoolRow, ...] = ()
    budgets: tuple[tuple[str, int, int], ...] = ()
    """(budget, instances held, limit) for each budget covering the type."""

    def as_dict(self) -> dict[str, Any]:
        """The ``explain --output json`` entry: exactly these keys."""
        return {
            "name": self.name,
            "queue_size": self.queue_size,
            "max_queue_time_seconds": round(self.max_queue_time_seconds, 3),
            "causes": [c.as_dict() for c in self.causes],
            "pools": [p.as_dict() for p in self.pools],
        }


def _pools(result: TickResult, config: Config, name: str) -> tuple[PoolRow, ...]:
    view = result.scaling
    plan = view.plan if view is not None else None
    sized = {w.pool: w for w in (plan.warm_sizes if plan is not None else ())}
    warm = {
        v.change.pool: WarmRow(
            v.change.spec,
            v.found,
            v.change.action,
            v.change.reason,
            v.done,
            sized.get(v.change.pool),
        )
        for v in (view.warm if view is not None else ())
    }
    rows = []
    for pool in config.runner_type(name).pools:
        if view is None:
            rows.append(PoolRow(pool))
            continue
        decision = next(
            (d for d in view.decisions if d.pool == pool and d.runner_type == name), None
        )
        decided: dict[str, Any] = (
            {}
            if decision is None
            else {"action": decision.action, "target": decision.desired, "reason": decision.reason}
        )
        p = view.pools.get(pool)
        if p is None:
            rows.append(PoolRow(pool, **decided))
            continue
        until = view.state.backoff_until.get(pool)
        rows.append(
            PoolRow(
                pool,
                # a live tick's decision is what the pool now has; a dry run's is a plan
                desired=decision.desired
                if decision is not None and not result.dry_run
                else p.desired_capacity,
                in_service=sum(
                    1 for i in p.instances if i.lifecycle is InstanceLifecycle.IN_SERVICE
                ),
                pending=sum(1 for i in p.instances if i.lifecycle is InstanceLifecycle.PENDING),
                max_size=p.max_size,
                backoff_until=until if view.state.in_backoff(pool, result.now) else None,
                warm=warm.get(pool),
                **decided,
            )
        )
    return tuple(rows)


def _budgets(result: TickResult, config: Config, name: str) -> tuple[tuple[str, int, int], ...]:
    plan = result.scaling.plan if result.scaling is not None else None
    if plan is None:
        return ()
    return tuple(
        (b.name, plan.budget_use.get(b.name, 0), b.max_instances)
        for b in config.budgets
        if any(fnmatchcase(name, pattern) for pattern in b.runner_types)
    )


def reports(result: TickResult, config: Config) -> list[TypeReport]:
    """One report per configured runner type, then one for unmatched jobs when any wait."""
    snap = result.snapshot
    out = []
    for rt in config.runner_types:
        stats = snap.per_type.get(rt.name) if snap is not None else None
        out.append(
            TypeReport(
                rt.name,
                stats.queue_size if stats else 0,
                stats.max_queue_time_seconds if stats else 0.0,
                stats.runners if stats else RunnerCounts(),
                tuple(result.causes.get(rt.name, ())),
                _pools(result, config, rt.name),
                _budgets(result, config, rt.name),
            )
        )
    if snap is not None and snap.unmatched_jobs:
        ages = snap.unmatched_ages_seconds
        out.append(
            TypeReport(
                UNMATCHED,
                snap.unmatched_jobs,
                ages[0] if ages else 0.0,
                RunnerCounts(),
                tuple(result.causes.get(UNMATCHED, ())),
            )
        )
    return out


def explain_json(
    types: Sequence[TypeReport],
    retries: RetryReport | None = None,
    budget: PollBudget | None = None,
) -> dict[str, Any]:
    """``{"runner_types": [{"name", "queue_size", "max_queue_time_seconds", "causes",
    "pools"}]}``, ``run_retries`` (job retry's decision per run attempt, as ``once
    --output json`` gives it) when job retry ran, and ``github_poll`` (how often GitHub is
    read) when the poll planned."""
    out: dict[str, Any] = {"runner_types": [t.as_dict() for t in types]}
    if retries is not None:
        out["run_retries"] = [c.as_dict() for c in retries.choices]
    if budget is not None:
        out["github_poll"] = {
            "poll_interval_seconds": budget.poll_interval,
            "busy_interval_seconds": budget.busy_interval,
            "quiet_interval_seconds": budget.quiet_interval,
            "staleness_limit_seconds": budget.staleness_limit,
            "live_repos": budget.live_repos,
            "quiet_repos": budget.quiet_repos,
            "budget_too_small": budget.too_small,
        }
    return out


def poll_line(budget: PollBudget) -> str:
    """How often GitHub is read, for a person: polling alone, the cadence and its
    staleness limit; as the webhook reconcile, the intervals."""
    if budget.staleness_limit is None:
        return (
            f"GitHub reconcile: busy units every {budget.busy_interval:g}s, "
            f"the others every {budget.quiet_interval:g}s"
        )
    return (
        f"GitHub poll: {budget.live_repos} live repositories every {budget.busy_interval:g}s, "
        f"{budget.quiet_repos} quiet ones by their newest runs every "
        f"{budget.quiet_interval:g}s; everything re-read at least every "
        f"{budget.staleness_limit:g}s (staleness limit)"
    )


def _jobs(jobs: Sequence[CompletedJob]) -> str:
    return ", ".join(j.name or f"job {j.job_id}" for j in jobs)


def format_retries(retries: RetryReport) -> list[str]:
    """Job retry's decisions for a person: per run attempt, the result and why, the lost
    jobs with their evidence, the jobs the loss cancelled, what was (or would be) asked."""
    if not retries.choices:
        return []
    lines = ["job retries (per run attempt):"]
    for c in retries.choices:
        run, v = c.run, c.verdict
        lines.append(f"  {run.repo} run {run.run_id} attempt {run.attempt}: {c.result}: {c.why}")
        lines.extend(f"    lost: {j.name or j.job_id}: {jv.evidence}" for j, jv in v.lost)
        if v.cancelled_by_loss:
            lines.append(f"    cancelled by the loss: {_jobs(v.cancelled_by_loss)}")
        lines.extend(
            f"    failed on its own: {j.name or j.job_id}: {jv.evidence}" for j, jv in v.own
        )
        if v.cancelled_before:
            lines.append(f"    cancelled, not by a loss: {_jobs(v.cancelled_before)}")
        if c.result == RERUN:
            lines.append(f"    asked: POST .../actions/runs/{run.run_id}/{ASK}")
    return lines


def _clock(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%H:%M:%S UTC")


def format_type(t: TypeReport, now: datetime, *, decisions: bool = True) -> list[str]:
    """One runner type for a person: a heading, runners, pools, budgets, causes, decisions."""
    oldest = f", oldest waiting {fmt_age(t.max_queue_time_seconds)}" if t.queue_size else ""
    lines = [f"{t.name}: {t.queue_size} queued{oldest}"]
    if t.name != UNMATCHED:
        r = t.runners
        lines.append(f"  runners: {r.idle} idle, {r.busy} busy, {r.offline} offline")
    for p in t.pools:
        if p.desired is None:
            lines.append(f"  pool {p.name}: not described")
            continue
        backoff = ""
        if p.backoff_until is not None:
            left = fmt_age((p.backoff_until - now).total_seconds())
            backoff = f", backed off until {_clock(p.backoff_until)} ({left} left)"
        lines.append(
            f"  pool {p.name}: desired {p.desired}, in service {p.in_service},"
            f" pending {p.pending}, MaxSize {p.max_size}{backoff}"
        )
        if p.warm is not None:
            lines.append(f"  warm pool {p.name}: {p.warm.text()}")
    lines.extend(f"  budget {b}: {used}/{limit} instances" for b, used, limit in t.budgets)
    if t.causes:
        lines.append("  causes:")
        lines.extend(f"    {c.code}: {c.detail}" for c in t.causes)
    elif t.queue_size:
        lines.append("  causes: none found")
    if decisions:
        for p in t.pools:
            if p.action:
                lines.append(f"  decision {p.name}: {p.action} -> {p.target}: {p.reason}")
    return lines


def format_explain(
    types: Sequence[TypeReport],
    result: TickResult,
    last_successful_poll: datetime | None,
    budget: PollBudget | None = None,
) -> str:
    """The ``explain`` text (``budget``: the last poll's plan, for how often GitHub is read)."""
    when = (result.snapshot.observed_at if result.snapshot else result.now).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )
    head = [f"observed at {when} (one dry-run tick: nothing was changed)"]
    if result.poll_error:
        head.append(f"poll failed: {result.poll_error}")
    if result.poll_partial:
        head.append(f"poll partial (their queued jobs are not counted): {result.poll_partial}")
    if last_successful_poll is None:
        head.append("no successful poll of GitHub")
    if budget is not None:
        head.append(poll_line(budget))
    lines = [*head, ""]
    for t in types:
        lines += [*format_type(t, result.now), ""]
    if result.retries is not None and result.retries.choices:
        lines += [*format_retries(result.retries), ""]
    names = {t.name for t in types}
    lines += [*format_waits([w for n, w in result.waits.items() if n in names]), ""]
    return "\n".join(lines)


def format_waits(waits: Sequence[StageSummary]) -> list[str]:
    """Where recent jobs' waits went: per runner type, each stage's median and p95."""
    if not waits:
        return ["where the waits went: no job has started on a runner this process asked for"]
    width = max(len("runner type"), *(len(w.runner_type) for w in waits))
    head = "  ".join(f"{s:>12}" for s in (*STAGES, "queue time"))
    lines = ["where the waits went (median / p95 seconds, jobs on runners we asked for):"]
    lines.append(f"  {'runner type':<{width}}  {'jobs':>5}  {head}")
    for w in waits:
        cells = [f"{w.p50[s]:.0f} / {w.p95[s]:.0f}" for s in STAGES]
        cells.append(f"{w.queue_p50:.0f} / {w.queue_p95:.0f}")
        row = "  ".join(f"{c:>12}" for c in cells)
        lines.append(f"  {w.runner_type:<{width}}  {w.jobs:>5}  {row}")
    return lines
