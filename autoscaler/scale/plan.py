"""The values a scaling plan is made of: decisions, actions, and the policy's state.

:func:`autoscaler.scale.policy.decide` produces a :class:`Plan`;
:class:`autoscaler.scale.scaler.Scaler` executes it. Plain frozen values, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler.domain import WarmPoolSpec

if TYPE_CHECKING:
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
LAUNCH_FAILED, LAUNCH_REFUSED, STUCK = "launch_failed", "launch_refused", "stuck"
"""Why a pool could not provide the capacity it was asked for (``provisioning_failures``
reasons): a Failed scaling activity since our last scale-up (out of capacity, or
``launch_refused``: a reason a person must fix, such as a quota, an image, a launch
template or permissions), or desired above live instances with no progress for
``boot_timeout``."""

SKEW_FRACTION = 0.25
"""No orphan is terminated while a peer's clock is further from ours than this fraction of
the type's ``boot_timeout``. An orphan is judged by comparing the cloud's launch time with
our clock; a skew of ``f * boot_timeout`` shortens the boot window a runner really gets to
``(1 - f) * boot_timeout``. A quarter keeps at least three quarters of the window the
operator chose (15m -> at least 11m15s) and leaves a wide margin over the built-in 60 s
skew alert, so on-call hears about the clock long before cleanup stops."""


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
    """Terminate ``instance_id``: past ``boot_timeout`` with no runner in the poll's list.
    The scaler asks GitHub for :attr:`runner_name` once more first."""

    runner_type: str
    pool: str
    instance_id: str

    @property
    def runner_name(self) -> str:
        """The name its runner registers under (``f"{pool}-{instance_id}"``)."""
        return f"{self.pool}-{self.instance_id}"


@dataclass(frozen=True)
class PendingTermination:
    """An instance being scaled in, kept in the state store until it is terminated.

    A scale-in is written down before its runner is deregistered (``deregistered``
    False) and marked once GitHub confirmed the deregistration. A process that dies
    between the deregistration and the termination (kill -9, a lost lease) leaves it for
    its successor, which terminates the instance first thing: without it, the instance
    has no runner and looks like one still booting, counted as supply for its queued jobs
    until ``boot_timeout`` after its launch. A failed termination (throttled, say) stays
    here too and is retried first next tick."""

    runner_type: str
    pool: str
    instance_id: str
    runner_name: str
    since: datetime
    deregistered: bool = True
    """GitHub confirmed the runner's deregistration: nothing can run on the instance.
    False: the process may have died before it sent the deregistration, so the instance
    is terminated only if GitHub no longer knows its runner."""


@dataclass(frozen=True)
class LaunchRefused:
    """A pool whose launches fail for a reason a person must fix (quota, image, launch
    template, permissions): paged every tick until the pool launches again."""

    runner_type: str
    pool: str
    code: str
    message: str


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
    """:data:`LAUNCH_FAILED`, :data:`LAUNCH_REFUSED` or :data:`STUCK`."""
    failover: bool
    """Another pool of the type is not in back-off and takes the need."""
    code: str = ""
    """The cloud's code for a failed launch ("" when none was found, or stuck)."""
    message: str = ""
    """The cloud's own words for a failed launch (the activity's StatusMessage)."""


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
    pending_terminations: Mapping[str, PendingTermination] = field(default_factory=dict)
    """Instance id -> a termination that failed after its runner was deregistered."""
    refused: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Pool -> (code, message) of the launch failure a person must fix; cleared once the
    pool delivers what it was asked for."""
    observed_at: datetime | None = None
    """The last fresh observation (arrivals are counted since)."""
    watching_since: datetime | None = None
    """The first fresh observation: a rate needs a whole window of arrivals watched."""
    arrivals: Mapping[str, tuple[tuple[datetime, int], ...]] = field(default_factory=dict)
    """Runner type -> (observation, jobs that arrived since the one before) within its
    window (``min_idle.predict.window``, else :data:`~autoscaler.scale.forecast.RATE_WINDOW`)."""
    registered: frozenset[int] = frozenset()
    """Runner ids the last fresh observation saw (a runner not among them is new)."""
    boots: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Runner type -> seconds from launch to a registered runner of its last new runners
    (at most :data:`~autoscaler.scale.forecast.BOOTS_KEPT`)."""
    warm_held: Mapping[str, tuple[int, datetime]] = field(default_factory=dict)
    """Runner type -> the warm size kept and when it was last needed that large: a warm
    pool shrinks only once its size was not needed for
    :data:`~autoscaler.scale.sizing.WARM_HOLD` (a stopped instance dropped and prepared
    again costs a cold boot; kept, only its disks)."""
    removed_runners: Mapping[int, datetime] = field(default_factory=dict)
    """Runner id -> when this controller deleted it at GitHub (or GitHub answered 404:
    already gone). A webhook tick plans with the last poll's runner list
    (``Observation.runners_observed_at``), which still shows a runner deleted since,
    offline: without this memory the cleanup deleted it again every tick until the next
    reconcile, one 404 each. Forgotten once a list read after the deletion arrives."""

    def capacity_failing(self, pool: str) -> bool:
        """The pool failed for capacity and has not delivered since, in its back-off or
        retried after it (the memory is reset only by :meth:`capacity_ok`)."""
        return pool in self.backoff_until or pool in self.backoff_seconds

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

    def launch_refused(
        self, pool: str, now: datetime, scaling: ScalingConfig, code: str, message: str
    ) -> ScalingState:
        """Back the pool off for the longest back-off at once (retrying sooner cannot help
        until a person acts; the next try after it shows whether they did) and remember
        why, so the page stays up."""
        seconds = scaling.capacity_backoff_max
        return replace(
            self,
            backoff_until={**self.backoff_until, pool: now + timedelta(seconds=seconds)},
            backoff_seconds={**self.backoff_seconds, pool: seconds},
            scaled_up_at={k: v for k, v in self.scaled_up_at.items() if k != pool},
            refused={**self.refused, pool: (code, message)},
        )

    def scaled_up(self, pool: str, now: datetime) -> ScalingState:
        return replace(self, scaled_up_at={**self.scaled_up_at, pool: now})

    def capacity_ok(self, pool: str) -> ScalingState:
        if all(pool not in m for m in (self.backoff_seconds, self.backoff_until, self.refused)):
            return self
        return replace(
            self,
            backoff_until={k: v for k, v in self.backoff_until.items() if k != pool},
            backoff_seconds={k: v for k, v in self.backoff_seconds.items() if k != pool},
            refused={k: v for k, v in self.refused.items() if k != pool},
        )

    def termination_pending(self, pending: PendingTermination) -> ScalingState:
        return replace(
            self,
            pending_terminations={**self.pending_terminations, pending.instance_id: pending},
        )

    def runners_removed(self, runner_ids: Iterable[int], at: datetime) -> ScalingState:
        """Remember runners deleted at GitHub at ``at`` (see :attr:`removed_runners`)."""
        added = dict.fromkeys(runner_ids, at)
        if not added:
            return self
        return replace(self, removed_runners={**self.removed_runners, **added})

    def termination_done(self, instance_id: str) -> ScalingState:
        if instance_id not in self.pending_terminations:
            return self
        left = {k: v for k, v in self.pending_terminations.items() if k != instance_id}
        return replace(self, pending_terminations=left)


@dataclass(frozen=True)
class WarmSizing:
    """One runner type's decided hot and warm capacity, and why."""

    runner_type: str
    pool: str
    """The group whose warm pool holds the warm capacity."""
    hot: int
    """Idle running runners kept (joins the demand beside ``min_idle``)."""
    warm: int
    """Stopped instances asked of the warm pool (before ``min_size``/``max_prepared``)."""
    reason: str
    """``hot 2, warm 12: p90 arrivals in the next boot = 14; ...``"""
    refill: float
    """Seconds the group takes to prepare a new warm instance (compute a new runner
    costs besides its warm start)."""
    spec: WarmPoolSpec
    """What the pool's warm pool is put to: ``warm`` within ``min_size`` and
    ``max_prepared`` beside the group's desired capacity."""
    needed: int
    """The warm size the arrivals call for now (``warm`` is larger while a size needed
    within the last hour is held)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "hot": self.hot,
            "warm": self.warm,
            "warm_pool_size": self.spec.min_size,
            "reason": self.reason,
        }


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
    pending_terminations: tuple[PendingTermination, ...] = ()
    """Remembered terminations whose instance still lives: executed before anything else."""
    orphans_held: tuple[TerminateOrphan, ...] = ()
    """Orphans not terminated because a peer's clock is too far from ours
    (:data:`SKEW_FRACTION`)."""
    refused: tuple[LaunchRefused, ...] = ()
    """Pools of configured types whose launches a person must fix (paged every tick)."""
    warm_sizes: tuple[WarmSizing, ...] = ()
    """Hot and warm capacity decided from each type's objective (``size: slo`` pools)."""
