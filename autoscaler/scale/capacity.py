"""Pools that could not provide the capacity asked of them (pure).

EC2 Auto Scaling accepts SetDesiredCapacity and only then fails to launch (no capacity in
the zone, no spot capacity): the failure shows up asynchronously. Two signals, both
structured (never message text):

- a scaling activity with status ``FAILED`` that started at or after our last scale-up of
  the pool (:attr:`ScalingState.scaled_up_at`): reason :data:`LAUNCH_FAILED`;
- no API at all: the pool's desired capacity has exceeded its live (pending + in service)
  instances for longer than the runner type's ``boot_timeout`` without a new instance
  appearing (:attr:`ScalingState.short_since`): reason :data:`STUCK`.

Either is treated like a synchronous :class:`autoscaler.errors.CapacityError`: the pool is
backed off, its desired capacity goes back to what it has (:class:`Release`), and the need
fails over to the next pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from autoscaler.config import RunnerTypeConfig, ScalingConfig
from autoscaler.domain import ActivityStatus, PoolState
from autoscaler.scale.plan import LAUNCH_FAILED, STUCK, Release, ScalingState


def track_short(pools: Mapping[str, PoolState], state: ScalingState, now: datetime) -> ScalingState:
    """Update :attr:`ScalingState.short_since` from this description of the pools.

    A pool short of its desired capacity keeps its clock while no instance appears; a new
    instance (progress) restarts it; a pool not short has none. Back-off memory is reset
    (the pool delivered) when a pool we scaled up is no longer short.
    """
    short: dict[str, tuple[datetime, int]] = {}
    for p in pools.values():
        live = p.live_instances
        if p.desired_capacity <= live:
            continue
        prev = state.short_since.get(p.name)
        short[p.name] = prev if prev is not None and live <= prev[1] else (now, live)
    out = replace(state, short_since=short)
    for p in pools.values():
        delivered = p.desired_capacity <= p.live_instances and p.name in state.scaled_up_at
        if delivered and not state.in_backoff(p.name, now):
            out = out.capacity_ok(p.name)
    return out


def _failure(p: PoolState, rt: RunnerTypeConfig, state: ScalingState, now: datetime) -> str:
    since = state.scaled_up_at.get(p.name)
    if since is not None and any(
        a.status is ActivityStatus.FAILED and a.started_at >= since for a in p.activities
    ):
        return LAUNCH_FAILED
    short = state.short_since.get(p.name)
    if short is not None and now - short[0] >= timedelta(seconds=rt.boot_timeout):
        return STUCK
    return ""


def launch_failures(
    types: Iterable[tuple[RunnerTypeConfig, list[PoolState]]],
    state: ScalingState,
    now: datetime,
    scaling: ScalingConfig,
) -> tuple[ScalingState, list[Release]]:
    """Back off every pool (not already in back-off) whose launches failed; return the new
    state and one :class:`Release` per such pool, in configured order."""
    releases: list[Release] = []
    for rt, pools in types:
        failed: list[tuple[PoolState, str]] = []
        for p in pools:
            if state.in_backoff(p.name, now):
                continue
            reason = _failure(p, rt, state, now)
            if reason:
                failed.append((p, reason))
                state = state.capacity_failed(p.name, now, scaling)
                state = replace(
                    state, short_since={k: v for k, v in state.short_since.items() if k != p.name}
                )
        available = any(not state.in_backoff(p.name, now) for p in pools)
        for p, reason in failed:
            desired = max(p.min_size, min(p.desired_capacity, p.live_instances))
            releases.append(
                Release(rt.name, p.name, p.desired_capacity, desired, reason, available)
            )
    return state, releases
