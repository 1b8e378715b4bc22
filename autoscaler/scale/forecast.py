"""Predicted warm runners (``min_idle.predict``): the recent arrival rate, as a number (pure).

Each fresh observation counts, per runner type that predicts, the jobs that arrived since
the observation before: queued jobs younger than the gap, plus runners that were idle then
and are busy now (a job GitHub handed straight to a warm runner never shows as queued).
Jobs that arrive and start on a runner freed in between stay unseen, so the count is a
lower bound; it is exact when runners are idle, which is when warm runners matter.

The warm runners wanted are the ``quantile`` of a Poisson count with mean rate x ``lead``
(an Erlang-style sizing: enough for the jobs expected before a new runner could be up, in
that share of periods), at most ``max``. ``decide`` keeps at least that many idle, and the
usual ``idle_timeout`` lets the rest go.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from autoscaler.domain import QueueSnapshot, Runner
from autoscaler.observe.queue import match_runner
from autoscaler.scale.plan import ScalingState

if TYPE_CHECKING:
    from autoscaler.config import Config, RunnerTypeConfig


def count_arrivals(
    config: Config, snapshot: QueueSnapshot, runners: Sequence[Runner], state: ScalingState
) -> ScalingState:
    """Record this observation's arrivals for every type with ``min_idle.predict``; call
    before ``idle_since`` is replaced (it says who was idle last time)."""
    predicting = [rt for rt in config.runner_types if rt.min_idle.predict is not None]
    if not predicting:
        return state
    now = snapshot.observed_at
    arrivals = dict(state.arrivals)
    if state.observed_at is not None:
        gap = (now - state.observed_at).total_seconds()
        types = [rt.runner_type for rt in config.runner_types]
        started: dict[str, int] = {}
        for r in runners:
            if r.online and r.busy and r.id in state.idle_since:
                t = match_runner(r.labels, types)
                if t is not None:
                    started[t.name] = started.get(t.name, 0) + 1
        for rt in predicting:
            predict = rt.min_idle.predict
            assert predict is not None
            stats = snapshot.per_type.get(rt.name)
            new = sum(1 for age in stats.queued_ages_seconds if age < gap) if stats else 0
            kept = tuple(
                (at, n)
                for at, n in arrivals.get(rt.name, ())
                if (now - at).total_seconds() < predict.window
            )
            arrivals[rt.name] = (*kept, (now, new + started.get(rt.name, 0)))
    return replace(state, observed_at=now, arrivals=arrivals)


def arrival_rate(rt: RunnerTypeConfig, state: ScalingState, now: datetime) -> float:
    """Jobs per second over the type's prediction window (0 without one)."""
    predict = rt.min_idle.predict
    if predict is None:
        return 0.0
    total = sum(
        n
        for at, n in state.arrivals.get(rt.name, ())
        if (now - at).total_seconds() < predict.window
    )
    return total / predict.window


def poisson_quantile(mean: float, quantile: float) -> int:
    """The smallest k with P(Poisson(mean) <= k) >= quantile."""
    if mean <= 0:
        return 0
    k, term = 0, math.exp(-mean)
    cumulative = term
    while cumulative < quantile and k < 10_000:
        k += 1
        term *= mean / k
        cumulative += term
    return k


def warm_runners(rt: RunnerTypeConfig, state: ScalingState, now: datetime) -> int:
    """``min_idle`` at ``now``: the scheduled number, or more when the arrival rate asks."""
    scheduled = rt.min_idle.at(now)
    predict = rt.min_idle.predict
    if predict is None:
        return scheduled
    wanted = poisson_quantile(arrival_rate(rt, state, now) * predict.lead, predict.quantile)
    return max(scheduled, min(predict.max, wanted))
