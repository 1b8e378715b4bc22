"""The values a scaling plan is made of: decisions, actions, and the policy's state.

:func:`autoscaler.scale.policy.decide` produces a :class:`Plan`;
:class:`autoscaler.scale.scaler.Scaler` executes it. Plain frozen values, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from autoscaler.config import ScalingConfig

PROTECT_PER_POOL = 50  # instance ids protected per pool per tick (one API call)

SCALE_UP, SCALE_IN, RELEASE, ORPHAN, STALE, HOLD, MISSING = (
    "scale_up",
    "scale_in",
    "release",
    "terminate_orphan",
    "deregister_stale",
    "hold",
    "missing",
)
RANK = {SCALE_UP: 0, SCALE_IN: 1, RELEASE: 2, ORPHAN: 3, STALE: 4, HOLD: 5, MISSING: 6}
LAUNCH_FAILED, STUCK = "launch_failed", "stuck"
"""Why a pool could not provide the capacity it was asked for (``provisioning_failures``
reasons): a Failed scaling activity since our last scale-up, or desired above live
instances with no progress for ``boot_timeout``."""


@dataclass(frozen=True)
class Decision:
    """What happens to one pool this tick (``once --output json`` prints these)."""

    runner_type: str
    pool: str
    current: int
    desired: int
    reason: str
    action: str = HOLD

    def as_dict(self) -> dict[str, object]:
        return {
            "runner_type": self.runner_type,
            "pool": self.pool,
            "current": self.current,
            "desired": self.desired,
            "reason": self.reason,
            "action": self.action,
        }


@dataclass(frozen=True)
class PoolSlot:
    """A pool a scale-up may use, with what it held when described."""

    pool: str
    live: int
    current: int
    max_size: int


def slot_target(slot: PoolSlot, need: int) -> tuple[int, int]:
    """(instances this pool takes of ``need``, its new desired capacity) up to MaxSize."""
    take = max(0, min(need, slot.max_size - slot.live))
    return take, slot.live + take


@dataclass(frozen=True)
class ScaleUp:
    runner_type: str
    need: int
    """Instances to add beyond the supply."""
    slots: tuple[PoolSlot, ...]
    """Pools not in capacity back-off, in configured order (the failover chain)."""


@dataclass(frozen=True)
class ScaleIn:
    """Deregister runner ``runner_id``; only then terminate ``instance_id`` in ``pool``."""

    runner_type: str
    pool: str
    runner_id: int
    runner_name: str
    instance_id: str


@dataclass(frozen=True)
class TerminateOrphan:
    runner_type: str
    pool: str
    instance_id: str


@dataclass(frozen=True)
class DeregisterStale:
    runner_type: str
    pool: str
    runner_id: int
    runner_name: str


@dataclass(frozen=True)
class Release:
    """A pool could not launch what it was asked for: it is backed off, and its desired
    capacity goes back to the instances it has (``desired``), so it neither keeps trying
    nor overshoots later while the need fails over to the next pool."""

    runner_type: str
    pool: str
    current: int
    desired: int
    reason: str
    """:data:`LAUNCH_FAILED` or :data:`STUCK`."""
    failover: bool
    """Another pool of the type is not in back-off and takes the need."""


@dataclass(frozen=True)
class Protect:
    runner_type: str
    pool: str
    instance_ids: tuple[str, ...]


@dataclass(frozen=True)
class ScalingState:
    """What the policy remembers between ticks."""

    idle_since: Mapping[int, datetime] = field(default_factory=dict)
    """Runner id -> first observation that saw it idle (continuously since)."""
    backoff_until: Mapping[str, datetime] = field(default_factory=dict)
    """Pool -> end of its capacity back-off."""
    backoff_seconds: Mapping[str, float] = field(default_factory=dict)
    """Pool -> length of its last capacity back-off (doubles on each failure)."""
    scaled_up_at: Mapping[str, datetime] = field(default_factory=dict)
    """Pool -> when we last raised its desired capacity (a Failed scaling activity started
    after it means the pool could not launch what we asked for)."""
    short_since: Mapping[str, tuple[datetime, int]] = field(default_factory=dict)
    """Pool -> (since when its desired capacity exceeds its live instances, live count
    then). Restarts when an instance appears: only a pool making no progress is stuck."""
    observed_at: datetime | None = None
    """The last fresh observation (``min_idle.predict`` counts arrivals since)."""
    arrivals: Mapping[str, tuple[tuple[datetime, int], ...]] = field(default_factory=dict)
    """Runner type -> (observation, jobs that arrived since the one before) within its
    ``min_idle.predict.window``; only types that predict."""

    def in_backoff(self, pool: str, now: datetime) -> bool:
        until = self.backoff_until.get(pool)
        return until is not None and now < until

    def capacity_failed(self, pool: str, now: datetime, scaling: ScalingConfig) -> ScalingState:
        last = self.backoff_seconds.get(pool)
        seconds = scaling.capacity_backoff_initial if last is None else last * 2
        seconds = min(seconds, scaling.capacity_backoff_max)
        return replace(
            self,
            backoff_until={**self.backoff_until, pool: now + timedelta(seconds=seconds)},
            backoff_seconds={**self.backoff_seconds, pool: seconds},
            scaled_up_at={k: v for k, v in self.scaled_up_at.items() if k != pool},
        )

    def scaled_up(self, pool: str, now: datetime) -> ScalingState:
        return replace(self, scaled_up_at={**self.scaled_up_at, pool: now})

    def capacity_ok(self, pool: str) -> ScalingState:
        if pool not in self.backoff_seconds and pool not in self.backoff_until:
            return self
        return replace(
            self,
            backoff_until={k: v for k, v in self.backoff_until.items() if k != pool},
            backoff_seconds={k: v for k, v in self.backoff_seconds.items() if k != pool},
        )


@dataclass(frozen=True)
class Plan:
    decisions: tuple[Decision, ...]
    scale_ups: tuple[ScaleUp, ...]
    scale_ins: tuple[ScaleIn, ...]
    orphans: tuple[TerminateOrphan, ...]
    stale_runners: tuple[DeregisterStale, ...]
    protect: tuple[Protect, ...]
    state: ScalingState
    """The state after this plan's observations and the launch failures it found."""
    budget_use: Mapping[str, int]
    """Budget name -> instances its types hold once the scale-ups land."""
    out_of_capacity: tuple[str, ...]
    """Runner types that need instances while every pool is in capacity back-off."""
    releases: tuple[Release, ...] = ()
    """Pools whose launches failed: backed off in :attr:`state`, desired lowered."""
