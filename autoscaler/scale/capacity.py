"""Pools that could not provide the capacity asked of them (pure).

EC2 Auto Scaling accepts SetDesiredCapacity and only then fails to launch (no capacity in
the zone, no spot capacity, but also a vCPU quota, a deleted image, a broken launch
template, a missing instance profile): the failure shows up asynchronously. Two signals,
both structured (never message text):

- a scaling activity with status ``FAILED`` that started at or after our last scale-up of
  the pool (:attr:`ScalingState.scaled_up_at`). The adapter classified its cause from the
  cloud's error code (:attr:`ScalingActivity.permanent`): capacity (or no code found) is
  reason :data:`LAUNCH_FAILED`; a cause a person must fix is :data:`LAUNCH_REFUSED`;
- no API at all: the pool's desired capacity has exceeded its live (pending + in service)
  instances for longer than the runner type's ``boot_timeout`` without a new instance
  appearing (:attr:`ScalingState.short_since`): reason :data:`STUCK`.

Each is treated like a synchronous :class:`autoscaler.errors.CapacityError`: the pool is
backed off, its desired capacity goes back to what it has (:class:`Release`), and the need
fails over to the next pool. A refused launch is backed off for ``capacity_backoff_max``
at once and remembered (:attr:`ScalingState.refused`) so that it is paged every tick until
the pool launches again: failing over quietly, again and again, is not a fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler.domain import ActivityStatus, PoolState, ScalingActivity
from autoscaler.scale.plan import LAUNCH_FAILED, LAUNCH_REFUSED, STUCK, Release, ScalingState

if TYPE_CHECKING:
    from autoscaler.config import RunnerTypeConfig, ScalingConfig


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


def _failure(
    p: PoolState, rt: RunnerTypeConfig, state: ScalingState, now: datetime
) -> tuple[str, ScalingActivity | None]:
    """(reason, the Failed activity that says why) or ("", None) when launches are fine.
    A refused launch wins over a capacity one: capacity may come back, a quota will not."""
    since = state.scaled_up_at.get(p.name)
    if since is not None:
        failed = [
            a for a in p.activities if a.status is ActivityStatus.FAILED and a.started_at >= since
        ]
        refused = next((a for a in failed if a.permanent), None)
        if refused is not None:
            return LAUNCH_REFUSED, refused
        if failed:
            return LAUNCH_FAILED, failed[0]
    short = state.short_since.get(p.name)
    if short is not None and now - short[0] >= timedelta(seconds=rt.boot_timeout):
        return STUCK, None
    return "", None


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
        failed: list[tuple[PoolState, str, ScalingActivity | None]] = []
        for p in pools:
            if state.in_backoff(p.name, now):
                continue
            reason, activity = _failure(p, rt, state, now)
            if not reason:
                continue
            failed.append((p, reason, activity))
            if reason == LAUNCH_REFUSED and activity is not None:
                state = state.launch_refused(p.name, now, scaling, activity.code, activity.message)
            else:
                state = state.capacity_failed(p.name, now, scaling)
            state = replace(
                state, short_since={k: v for k, v in state.short_since.items() if k != p.name}
            )
        available = any(not state.in_backoff(p.name, now) for p in pools)
        for p, reason, activity in failed:
            desired = max(p.min_size, min(p.desired_capacity, p.live_instances))
            code, message = (activity.code, activity.message) if activity else ("", "")
            releases.append(
                Release(
                    rt.name, p.name, p.desired_capacity, desired, reason, available, code, message
                )
            )
    return state, releases
