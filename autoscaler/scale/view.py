"""What the scaling stage saw and decided in one tick, as the rest of the tick reads it.

The scaler writes a :class:`ScalingView` each tick (and keeps a :class:`CapacityFailure` per
backed-off pool); the diagnosis, the controller, ``explain`` and the status page read them.
Plain frozen values in their own module so that readers need not import the scaler (which
drives the adapters) nor the diagnosis. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from autoscaler.domain import PoolState
from autoscaler.scale.plan import Decision, Plan, ScalingState

if TYPE_CHECKING:  # the keeper acts through the scaler's edge; the view only holds values
    from autoscaler.scale.warm import WarmPoolView


@dataclass(frozen=True)
class CapacityFailure:
    """The last time a pool could not provide capacity, as the scaler remembers it."""

    pool: str
    at: datetime
    reason: str = "capacity"
    """``capacity`` (SetDesiredCapacity refused), :data:`LAUNCH_FAILED` (a Failed scaling
    activity: capacity), :data:`LAUNCH_REFUSED` (a Failed activity a person must fix: a
    quota, an image) or :data:`STUCK` (no launch progress for ``boot_timeout``)."""
    code: str = ""
    """AWS's error code: of a synchronous refusal, or the one the adapter found in the
    Failed activity (``InsufficientInstanceCapacity``, ``VcpuLimitExceeded``)."""
    message: str = ""
    """AWS's own words: the Failed activity's StatusMessage. Shown, never matched on."""


@dataclass(frozen=True)
class ScalingView:
    """What the scaling stage saw and decided in one tick."""

    pools: Mapping[str, PoolState]
    """The pools as described this tick (empty when describing failed)."""
    plan: Plan | None
    """The policy's plan (None when the pools could not be described)."""
    decisions: Sequence[Decision] = ()
    """What happened to each pool this tick (the plan's decisions as carried out)."""
    state: ScalingState = field(default_factory=ScalingState)
    """The policy's state after this tick (back-offs included)."""
    failures: Mapping[str, CapacityFailure] = field(default_factory=dict)
    """Pool -> its last capacity failure, kept while the pool is backed off."""
    warm: Sequence[WarmPoolView] = ()
    """The warm pools of the groups listed under ``pools``, as this tick left them."""
