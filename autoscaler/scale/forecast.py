"""The recent arrival rate per runner type, and what it asks of the pools (pure).

Each fresh observation counts, per runner type, the jobs created since the observation
before: queued jobs and jobs in progress younger than the gap (where the source lists
jobs in progress; else runners that were idle then and are busy now stand for the jobs
GitHub handed straight to a warm runner). It also records, for each runner seen for the
first time, how long its instance took from launch to a registered runner
(:func:`count_boots`): what a new runner costs.

Two uses:

- **idle runners worth keeping** (:func:`idle_to_keep`, every type): keeping an idle
  runner until the next poll costs at most a poll interval; it saves a boot (the median
  of the type's recent ones; ``idle_timeout`` before any was seen) if a job takes it
  first. So the k-th idle runner stays while P(at least k arrivals before the next poll)
  >= poll_interval / boot (ski rental, decided again at every poll), the others go at
  once, and none stays past ``idle_timeout``. The rate is burst-proof
  (:func:`steady_rate`): a 300-job matrix is not a reason to keep runners idle after;
- **predicted warm runners** (``min_idle.predict``, an option): the ``quantile`` of a
  Poisson count with mean rate x ``lead`` (enough for the jobs expected before a new
  runner could be up, in that share of periods), at most ``max``; ``decide`` keeps at
  least that many idle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from autoscaler.domain import QueueSnapshot, Runner
from autoscaler.observe.queue import match_runner
from autoscaler.ports import instance_id_of
from autoscaler.scale.plan import ScalingState

if TYPE_CHECKING:
    from autoscaler.config import Config, RunnerTypeConfig

#: Seconds of arrivals the rate is measured over for a type without ``min_idle.predict``.
RATE_WINDOW = 900.0
#: Boots remembered per runner type (their median is what a new runner costs).
BOOTS_KEPT = 20


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
            queued = sum(1 for age in stats.queued_ages_seconds if age < gap) if stats else 0
            begun = sum(1 for age in stats.started_ages_seconds if age < gap) if stats else 0
            # jobs GitHub handed to a runner idle at the last poll are among those begun
            # when the source lists jobs in progress; else they are all that is seen
            new = queued + max(begun, started.get(rt.name, 0))
            kept = tuple(
                (at, n)
                for at, n in arrivals.get(rt.name, ())
                if (now - at).total_seconds() < window
            )
            arrivals[rt.name] = (*kept, (now, new))
    return replace(state, observed_at=now, arrivals=arrivals)


def count_boots(
    config: Config,
    runners: Sequence[Runner],
    launched: Mapping[str, datetime],
    state: ScalingState,
    now: datetime,
) -> ScalingState:
    """Record, per runner type, how long each runner first seen now took from its
    instance's launch (``launched``: instance id -> launch time, on our clock) to
    registered. The first observation only remembers who is there."""
    seen = frozenset(r.id for r in runners)
    if state.observed_at is None:
        return replace(state, registered=seen)
    types = [rt.runner_type for rt in config.runner_types]
    boots = dict(state.boots)
    for r in runners:
        if r.id in state.registered:
            continue
        iid = instance_id_of(r.name)
        at = launched.get(iid) if iid is not None else None
        t = match_runner(r.labels, types)
        if at is None or t is None:
            continue
        boots[t.name] = (*boots.get(t.name, ()), (now - at).total_seconds())[-BOOTS_KEPT:]
    return replace(state, registered=seen, boots=boots)


def boot_seconds(rt: RunnerTypeConfig, state: ScalingState) -> float:
    """The median of the type's recent boots; ``idle_timeout`` (about one boot, by its
    meaning) before any was seen."""
    seen = sorted(state.boots.get(rt.name, ()))
    if not seen:
        return rt.idle_timeout
    middle = len(seen) // 2
    return seen[middle] if len(seen) % 2 else (seen[middle - 1] + seen[middle]) / 2


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
    rt: RunnerTypeConfig,
    state: ScalingState,
    now: datetime,
    poll_interval: float,
    replacement: float = 0.0,
) -> int | None:
    """Idle runners of the type worth keeping until the next poll (see the module
    docstring); None until its arrivals were watched for a whole window (a controller
    just started has no rate to weigh: ``idle_timeout`` alone decides). ``replacement``:
    compute seconds a new runner costs besides its boot (a warm instance's cold boot
    into the warm pool, which the controller does not see)."""
    since = state.watching_since
    if since is None or (now - since).total_seconds() < window_of(rt):
        return None
    boot = boot_seconds(rt, state) + replacement
    if poll_interval >= boot:
        return 0
    mean = steady_rate(rt, state, now) * poll_interval
    return poisson_quantile(mean, 1.0 - poll_interval / boot)
