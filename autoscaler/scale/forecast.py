"""The recent arrival rate per runner type, and what it asks of the pools (pure).

Each fresh observation counts, per runner type, the jobs that arrived since the
observation before: queued jobs younger than the gap, plus runners that were idle then
and are busy now (a job GitHub handed straight to a warm runner never shows as queued).
Jobs that arrive and start on a runner freed in between stay unseen, so the count is a
lower bound; it is exact when runners are idle, which is when warm runners matter.

Two uses:

- **idle runners worth keeping** (:func:`idle_to_keep`, every type): keeping an idle
  runner until the next poll costs at most a poll interval; it saves a boot (about
  ``idle_timeout``, by that knob's meaning) if a job takes it first. So the k-th idle
  runner stays while P(at least k arrivals before the next poll) >= poll_interval /
  idle_timeout (ski rental, decided again at every poll), the others go at once, and
  none stays past ``idle_timeout``. The rate is burst-proof (:func:`steady_rate`): a
  300-job matrix is not a reason to keep runners idle afterwards;
- **predicted warm runners** (``min_idle.predict``, an option): the ``quantile`` of a
  Poisson count with mean rate x ``lead`` (enough for the jobs expected before a new
  runner could be up, in that share of periods), at most ``max``; ``decide`` keeps at
  least that many idle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from autoscaler.config import Config, RunnerTypeConfig
from autoscaler.domain import QueueSnapshot, Runner
from autoscaler.observe.queue import match_runner
from autoscaler.scale.plan import ScalingState

#: Seconds of arrivals the rate is measured over for a type without ``min_idle.predict``.
RATE_WINDOW = 900.0


def window_of(rt: RunnerTypeConfig) -> float:
    predict = rt.min_idle.predict
    return RATE_WINDOW if predict is None else predict.window


def count_arrivals(
    config: Config, snapshot: QueueSnapshot, runners: Sequence[Runner], state: ScalingState
) -> ScalingState:
    """Record this observation's arrivals for every runner type; call before
    ``idle_since`` is replaced (it says who was idle last time)."""
    now = snapshot.observed_at
    if state.watching_since is None:
        state = replace(state, watching_since=now)
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
        for rt in config.runner_types:
            window = window_of(rt)
            stats = snapshot.per_type.get(rt.name)
            new = sum(1 for age in stats.queued_ages_seconds if age < gap) if stats else 0
            kept = tuple(
                (at, n)
                for at, n in arrivals.get(rt.name, ())
                if (now - at).total_seconds() < window
            )
            arrivals[rt.name] = (*kept, (now, new + started.get(rt.name, 0)))
    return replace(state, observed_at=now, arrivals=arrivals)


def arrival_rate(rt: RunnerTypeConfig, state: ScalingState, now: datetime) -> float:
    """Jobs per second over the type's window (``min_idle.predict.window``, else
    :data:`RATE_WINDOW`)."""
    window = window_of(rt)
    total = sum(
        n for at, n in state.arrivals.get(rt.name, ()) if (now - at).total_seconds() < window
    )
    return total / window


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


def steady_rate(
    rt: RunnerTypeConfig, state: ScalingState, now: datetime, bucket: float = 60.0
) -> float:
    """Jobs per second over the type's window, robust to bursts: the median of the
    arrivals per ``bucket`` seconds (a 300-job matrix fills one bucket, not the rate)."""
    window = window_of(rt)
    buckets = [0] * max(1, int(window // bucket))
    for at, n in state.arrivals.get(rt.name, ()):
        age = (now - at).total_seconds()
        if 0 <= age < len(buckets) * bucket:
            buckets[int(age // bucket)] += n
    ordered = sorted(buckets)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return median / bucket


def idle_to_keep(
    rt: RunnerTypeConfig, state: ScalingState, now: datetime, poll_interval: float
) -> int | None:
    """Idle runners of the type worth keeping until the next poll (see the module
    docstring); None until its arrivals were watched for a whole window (a controller
    just started has no rate to weigh: ``idle_timeout`` alone decides)."""
    since = state.watching_since
    if since is None or (now - since).total_seconds() < window_of(rt):
        return None
    if poll_interval >= rt.idle_timeout:
        return 0
    mean = steady_rate(rt, state, now) * poll_interval
    return poisson_quantile(mean, 1.0 - poll_interval / rt.idle_timeout)
