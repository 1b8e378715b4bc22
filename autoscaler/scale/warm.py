"""Warm pools, planned: what each listed group's EC2 Auto Scaling warm pool must become.

A group listed under ``pools`` is one whose warm pool the controller owns.
:func:`plan_warm_pools` compares the warm pools described this tick with the
configuration and says, per group, keep, put or delete (a ``size: slo`` warm pool is
put to the size the policy decided this tick, :mod:`autoscaler.scale.sizing`); the keeper
(:mod:`autoscaler.scale.warm_keeper`) acts on it. A group not listed is never touched
(terraform may own its warm pool). Pure.

An instance the group scales in is terminated, never put back in the warm pool
(``InstanceReusePolicy.ReuseOnScaleIn`` false), unless ``warm_pool.reuse`` asks for it,
which only a persistent runner type may: an ephemeral machine runs one job, and a used
one never serves another.

An instance in a warm pool is the pool's, whatever its state (``Warmed:Running`` too): not
an orphan, and its runner (a persistent one, registered in an earlier stint) is no idle
runner. :func:`warm_instances` says which they are; :func:`from_warm` restarts the boot
clock of an instance that left a warm pool: EC2 keeps the launch time of an instance that
waited running, so without it an instance put in service after hours warm would look
unregistered past ``boot_timeout`` the moment it left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler.domain import PoolState, WarmPoolSpec, WarmPoolState

if TYPE_CHECKING:
    from autoscaler.config import Config, WarmPoolConfig

#: What a tick does to a group's warm pool.
KEEP, PUT, DELETE = "keep", "put", "delete"


@dataclass(frozen=True)
class WarmPoolChange:
    """What a tick does, or would do, to one group's warm pool, and why."""

    pool: str
    runner_type: str
    action: str
    """:data:`KEEP`, :data:`PUT` or :data:`DELETE`."""
    spec: WarmPoolSpec | None
    """The configured warm pool (None: the group keeps none)."""
    reason: str


def plan_warm_pools(
    config: Config,
    found: Mapping[str, WarmPoolState | None],
    sized: Mapping[str, WarmPoolSpec] | None = None,
) -> tuple[WarmPoolChange, ...]:
    """One change per listed group that was described (``found`` has its key).
    ``sized``: the settings decided this tick for the ``size: slo`` groups; one with no
    decision (a tick that could not decide) keeps what it has."""
    types = {p: rt.name for rt in config.runner_types for p in rt.pools}
    decided = sized or {}
    out = []
    for pool in config.pools:
        if pool.name not in found:
            continue
        have, rt = found[pool.name], types.get(pool.name, "")
        warm = pool.warm_pool
        spec = warm_spec(pool.name, warm, decided, have)
        if spec is None:
            change = (
                WarmPoolChange(pool.name, rt, KEEP, None, "no warm pool")
                if have is None
                else WarmPoolChange(pool.name, rt, DELETE, None, "warm pool not configured")
            )
        elif have is None:
            change = WarmPoolChange(pool.name, rt, PUT, spec, f"create: {spec}")
        elif spec == have.spec:
            change = WarmPoolChange(pool.name, rt, KEEP, spec, str(spec))
        else:
            change = WarmPoolChange(pool.name, rt, PUT, spec, f"change {have.spec} to {spec}")
        out.append(change)
    return tuple(out)


def warm_spec(
    pool: str,
    warm: WarmPoolConfig | None,
    sized: Mapping[str, WarmPoolSpec],
    have: WarmPoolState | None = None,
) -> WarmPoolSpec | None:
    """What a listed group's warm pool must be: as written, or as sized this tick (no
    size decided: what it has, else ``min_size``)."""
    if warm is None:
        return None
    if not warm.sized:
        return warm.spec
    if pool in sized:
        return sized[pool]
    return have.spec if have is not None else warm.spec_for(0, 0)


@dataclass(frozen=True)
class WarmPoolView:
    """One group's warm pool as this tick left it (or, in a dry run, found it)."""

    change: WarmPoolChange
    found: WarmPoolState | None
    done: bool
    """The change was made (a keep is always done; a dry run does nothing)."""


def warm_instances(found: Mapping[str, WarmPoolState | None]) -> dict[str, frozenset[str]]:
    """Pool -> the ids of the instances in its warm pool, for every pool whose warm pool
    was described this tick (one without a warm pool holds none)."""
    return {pool: frozenset(s.instance_ids if s is not None else ()) for pool, s in found.items()}


def from_warm(
    pools: Mapping[str, PoolState], warmed_at: Mapping[str, datetime], skew: float
) -> dict[str, PoolState]:
    """The pools with each instance that was in a warm pool launched no earlier than when
    it was last seen there (``warmed_at``, our clock; ``skew``: the cloud's clock minus
    ours, as launch times are the cloud's)."""
    out: dict[str, PoolState] = {}
    for name, p in pools.items():
        instances = []
        for i in p.instances:
            seen = warmed_at.get(i.id)
            if seen is not None and i.launched_at is not None:
                left = seen + timedelta(seconds=skew)
                if i.launched_at < left:
                    i = replace(i, launched_at=left)  # noqa: PLW2901 (the instance, restarted)
            instances.append(i)
        out[name] = replace(p, instances=tuple(instances))
    return out
