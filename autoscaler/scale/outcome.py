"""What a tick's scaling did, per (runner type, pool), and the metrics that show it.

The policy's plan says what it wants; the scaler's calls can fail, fail over or find a
runner busy. :class:`TickOutcome` collects what actually happened (the net change of the
desired capacity, the actions taken, notes for the reason text) and turns the plan's
decisions into the decisions that were carried out: what ``once``, the status page, the
decision log and ``explain`` show. :func:`record_pool_metrics` exports the pools after it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from autoscaler.config import Config
from autoscaler.domain import InstanceLifecycle, PoolState
from autoscaler.scale.plan import HOLD, MISSING, RANK, Decision, Plan, ScalingState
from autoscaler.scale.view import CapacityFailure
from autoscaler.telemetry import Metrics

Key = tuple[str, str]
"""(runner type, pool)."""


class TickOutcome:
    """Net change, actions and notes per (runner type, pool), for one tick."""

    def __init__(self) -> None:
        self._deltas: dict[Key, int] = {}
        self._actions: dict[Key, set[str]] = {}
        self._notes: dict[Key, list[str]] = {}

    def done(self, key: Key, delta: int, action: str, text: str = "") -> None:
        """``action`` happened and changed the desired capacity by ``delta``."""
        self._deltas[key] = self._deltas.get(key, 0) + delta
        self._actions.setdefault(key, set()).add(action)
        if text:
            self.note(key, text)

    def note(self, key: Key, text: str) -> None:
        """A line for the decision's reason (a failure, a runner kept...)."""
        self._notes.setdefault(key, []).append(text)

    def decisions(self, plan: Plan) -> list[Decision]:
        """The plan's decisions as carried out: the strongest action taken (HOLD if none),
        the desired capacity after the changes made, the plan's reason and the notes."""
        out = []
        for d in plan.decisions:
            key = (d.runner_type, d.pool)
            if d.action == MISSING:
                out.append(d)
                continue
            action = min(self._actions.get(key) or {HOLD}, key=RANK.__getitem__)
            reason = "; ".join([d.reason, *self._notes.get(key, [])])
            out.append(
                replace(
                    d, desired=d.current + self._deltas.get(key, 0), action=action, reason=reason
                )
            )
        return out


def record_pool_metrics(
    metrics: Metrics,
    config: Config,
    state: ScalingState,
    *,
    pools: dict[str, PoolState],
    decisions: list[Decision],
    plan: Plan,
    now: datetime,
) -> None:
    """Pool gauges (desired, max, instances by lifecycle, back-off, pending terminations)
    and budget gauges, after the tick acted."""
    m = metrics
    for d in decisions:
        rt, name, p = d.runner_type, d.pool, pools.get(d.pool)
        if p is None:
            continue
        m.pool_desired_capacity.labels(rt, name).set(d.desired)
        m.pool_max_size.labels(rt, name).set(p.max_size)
        for lc in InstanceLifecycle:
            count = sum(1 for i in p.instances if i.lifecycle is lc)
            m.pool_instances.labels(rt, name, lc.value).set(count)
        until = state.backoff_until.get(name)
        m.pool_backoff_remaining.labels(name).set(
            max(0.0, (until - now).total_seconds()) if until else 0.0
        )
        pending = state.pending_terminations.values()
        m.pending_terminations.labels(rt, name).set(sum(1 for p in pending if p.pool == name))
    for b in config.budgets:
        m.budget_instances.labels(b.name).set(plan.budget_use.get(b.name, 0))
        m.budget_max_instances.labels(b.name).set(b.max_instances)


def release_failures(plan: Plan, now: datetime) -> dict[str, CapacityFailure]:
    """The pools the policy found failing to launch this tick, with AWS's code and last
    words (the Failed activity's, as the adapter classified it)."""
    return {
        r.pool: CapacityFailure(r.pool, now, r.reason, code=r.code, message=r.message)
        for r in plan.releases
    }
