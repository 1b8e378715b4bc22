"""Warm and hot capacity sized from a runner type's queue-time objective (pure).

A job that finds an idle runner starts at once. One that does not waits for the
controller to see it (a poll interval, or the webhook's debounce and delivery) and then
for capacity: a warm instance (``warm_pool.start``) or, when the warm pool is empty, a
cold launch (``warm_pool.refill``). Hot runners cost an instance each; warm ones cost
their disks. So, per type with a ``size: slo`` warm pool, with ``objective`` as the
quantile:

- **hot** (running, idle): none when the reaction plus a warm start fits in
  ``slo.queue_time``; else the objective's quantile of the jobs expected in that time,
  so that many jobs find one idle before the warm pool's instances are up. The rate is
  burst-proof (:func:`~autoscaler.scale.forecast.steady_rate`): a matrix is no reason to
  keep machines running;
- **warm** (stopped): the objective's quantile of the jobs expected while the group
  refills its warm pool (a cold boot), at the arrival rate the predictor measures
  (:func:`~autoscaler.scale.forecast.arrival_rate`, bursts included: a stopped instance
  is cheap), or the most jobs seen arriving within that long over the rate's window
  when more (a matrix is not Poisson), less the hot runners.

A warm pool grows at once and shrinks only once its size was not needed for
:data:`WARM_HOLD`: a stopped instance dropped and prepared again costs a cold boot of
compute, one kept costs its disks.

The hot count joins the type's demand beside ``min_idle``; the warm size goes to the
type's ``size: slo`` pool (:meth:`WarmPoolConfig.spec_for`), which the keeper puts.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from autoscaler.scale.forecast import arrival_rate, poisson_quantile, steady_rate, window_of
from autoscaler.scale.plan import ScalingState, WarmSizing

if TYPE_CHECKING:
    from autoscaler.config import Config, PoolConfig, RunnerTypeConfig

#: Seconds a warm size is kept after it was last needed.
WARM_HOLD = 21600.0

#: Seconds GitHub takes to deliver a webhook (added to its debounce).
WEBHOOK_DELIVERY = 1.0


def reaction_seconds(config: Config) -> float:
    """How long a queued job waits before the controller decides for it, at worst: a
    poll interval, or with a webhook its debounce and delivery."""
    if config.webhook is not None:
        return config.webhook.debounce + WEBHOOK_DELIVERY
    return config.poll_interval


def sized_pool(config: Config, rt: RunnerTypeConfig) -> PoolConfig | None:
    """The type's pool whose warm pool is sized from its objective (one at most)."""
    for name in rt.pools:
        pool = config.pool(name)
        if pool.warm_pool is not None and pool.warm_pool.sized:
            return pool
    return None


def peak_arrivals(rt: RunnerTypeConfig, state: ScalingState, now: datetime, span: float) -> int:
    """The most jobs that arrived within ``span`` seconds of each other over the type's
    window: a matrix is not Poisson, and the warm pool should take the last one whole."""
    window = window_of(rt)
    seen = sorted(
        (at, n) for at, n in state.arrivals.get(rt.name, ()) if (now - at).total_seconds() < window
    )
    peak = total = first = 0
    for at, n in seen:
        total += n
        while (at - seen[first][0]).total_seconds() >= span:
            total -= seen[first][1]
            first += 1
        peak = max(peak, total)
    return peak


def size_warm(
    config: Config, rt: RunnerTypeConfig, state: ScalingState, now: datetime
) -> WarmSizing | None:
    """The type's hot and warm capacity (None: no ``size: slo`` pool, or no ``slo``)."""
    pool = sized_pool(config, rt)
    slo = rt.slo
    if pool is None or pool.warm_pool is None or slo is None:
        return None
    warm_pool, q = pool.warm_pool, slo.objective
    react = reaction_seconds(config)
    label = f"p{q * 100:g}"
    if react + warm_pool.start <= slo.queue_time:
        hot = 0
        why_hot = f"a warm start fits in {slo.queue_time:g}s"
    else:
        hot = poisson_quantile(steady_rate(rt, state, now) * (react + warm_pool.start), q)
        why_hot = f"{label} arrivals in a warm start = {hot}"
    span = react + warm_pool.refill
    expected = poisson_quantile(arrival_rate(rt, state, now) * span, q)
    need = max(expected, peak_arrivals(rt, state, now, span))
    warm = needed = max(0, need - hot)
    said = f"{label} arrivals" if need == expected else "most arrivals seen"
    kept = ""
    held = state.warm_held.get(rt.name)
    if held is not None and held[0] > warm and (now - held[1]).total_seconds() < WARM_HOLD:
        warm, kept = held[0], f"; {held[0]} warm held (needed {held[1]:%H:%M} UTC)"
    reason = f"hot {hot}, warm {warm}: {said} in the next boot = {need}; {why_hot}{kept}"
    spec = warm_pool.spec_for(warm, 0)
    return WarmSizing(rt.name, pool.name, hot, warm, reason, warm_pool.refill, spec, needed)


def size_types(
    config: Config, state: ScalingState, now: datetime
) -> tuple[dict[str, WarmSizing], ScalingState]:
    """Every type's sizing (:func:`size_warm`), and the state with the warm sizes held."""
    out: dict[str, WarmSizing] = {}
    held = dict(state.warm_held)
    for rt in config.runner_types:
        sizing = size_warm(config, rt, state, now)
        if sizing is None:
            held.pop(rt.name, None)
            continue
        out[rt.name] = sizing
        if sizing.warm == sizing.needed:  # needed now: held from now on
            held[rt.name] = (sizing.warm, now)
    if held == state.warm_held:
        return out, state
    return out, replace(state, warm_held=held)
