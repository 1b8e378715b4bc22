"""The ``pools`` section: settings of an Auto Scaling group itself, by group name.

```yaml
pools:
  ci-cpu:
    warm_pool: {state: stopped, min_size: 4, max_prepared: 12}
  ci-cpu-large:
    warm_pool: {size: slo, start: 40s, refill: 4m}   # sized from the type's slo
  ci-gpu-spot:
    capacity: spot      # AWS keeps no warm pool for Spot or mixed-instances groups
```

A group listed here is one whose warm pool the controller owns: each tick it makes the
group's EC2 Auto Scaling warm pool match ``warm_pool``, and removes the one a group
has when ``warm_pool`` is absent. A group not listed is left as it is (terraform may
own its warm pool). Which runner type a group serves stays under ``runner_types``.
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from autoscaler.config.values import Choice, Duration, Flag, Integer, Key, Section, fail
from autoscaler.domain import WarmPoolSpec

#: Warm pool states: EC2 Auto Scaling's ``PoolState`` values, as the file writes them.
STOPPED, HIBERNATED, RUNNING = "stopped", "hibernated", "running"
WARM_STATES = (STOPPED, HIBERNATED, RUNNING)

#: How the warm pool is sized: by hand (``min_size``), or from the runner type's ``slo``.
FIXED, SLO = "fixed", "slo"
SIZINGS = (FIXED, SLO)

#: How a group buys its instances. AWS keeps a warm pool only for ``on_demand``.
ON_DEMAND, SPOT, MIXED = "on_demand", "spot", "mixed"
CAPACITY_KINDS = (ON_DEMAND, SPOT, MIXED)

__all__ = [
    "CAPACITY_KINDS",
    "FIXED",
    "HIBERNATED",
    "MIXED",
    "ON_DEMAND",
    "RUNNING",
    "SIZINGS",
    "SLO",
    "SPOT",
    "STOPPED",
    "WARM_STATES",
    "PoolConfig",
    "WarmPoolConfig",
]


class WarmPoolConfig(Section):
    """Pre-initialised instances the group keeps beside its running ones: a scale-out
    takes one from here (seconds) before it launches one (minutes)."""

    state: Annotated[str, Choice(*WARM_STATES)] = STOPPED
    """`stopped`: billed for its EBS volumes only, starts in about 15-20 s; `hibernated`:
    the same, with its memory kept (the instance type and AMI must support it);
    `running`: billed as a running instance, and not yet serving."""
    size: Annotated[str, Choice(*SIZINGS)] = FIXED
    """`fixed`: AWS sizes the warm pool from `min_size` and `max_prepared`; `slo`: the
    controller sizes it each tick from the runner type's `slo` and its arrival rate,
    between `min_size` and `max_prepared`, and decides how many runners stay hot
    (running and idle) beside it. `slo` needs the type's `slo`."""
    min_size: Annotated[int, Integer()] = 0
    """Instances kept in the warm pool at least, whatever the group's desired capacity."""
    max_prepared: Annotated[int, Integer()] | None = None
    """Most instances the group and its warm pool hold together (AWS's
    `MaxGroupPreparedCapacity`); absent: the group's MaxSize."""
    start: Annotated[float, Duration(positive=True)] = 40.0
    """With `size: slo`: how long a warm instance takes from the scale-out to an online
    runner, a slow one (a stopped instance's p95 is about 40 s)."""
    refill: Annotated[float, Duration(positive=True)] = 120.0
    """With `size: slo`: how long the group takes to prepare a new warm instance (a cold
    launch and boot, a typical one); also what a new runner costs besides its warm start,
    when idle runners are weighed."""
    reuse: Annotated[bool, Flag()] = False
    """Put an instance the group scales in back into the warm pool instead of
    terminating it. Only for a runner type with `mode: persistent`: an ephemeral machine
    runs one job, and a used one never goes back."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max_prepared is not None and self.min_size > self.max_prepared:
            fail((("min_size",), f"must not exceed max_prepared ({self.max_prepared})"))
        return self

    @property
    def sized(self) -> bool:
        """The controller sizes it from the runner type's objective."""
        return self.size == SLO

    @property
    def spec(self) -> WarmPoolSpec:
        """The settings put as written (``size: fixed``)."""
        return WarmPoolSpec(self.state, self.min_size, self.max_prepared, self.reuse)

    def spec_for(self, decided: int, desired: int) -> WarmPoolSpec:
        """The settings put for a decided warm size (``size: slo``): an absolute size
        (AWS keeps exactly `MinSize` when `MaxGroupPreparedCapacity` equals it), at least
        ``min_size``, and within ``max_prepared`` beside the group's ``desired``."""
        size = decided
        if self.max_prepared is not None:
            size = min(size, max(0, self.max_prepared - desired))
        size = max(self.min_size, size)
        return WarmPoolSpec(self.state, size, size, self.reuse)


class PoolConfig(Section):
    """One Auto Scaling group's own settings."""

    name: SkipJsonSchema[Annotated[str, Key()]] = Field(default="", exclude=True)
    """The Auto Scaling group's name (its key under `pools`)."""
    capacity: Annotated[str, Choice(*CAPACITY_KINDS)] = ON_DEMAND
    """How the group buys instances: `on_demand` (a launch template), `spot` or `mixed`
    (a mixed instances policy; terraform's `spot`). AWS keeps warm pools for
    `on_demand` groups only."""
    warm_pool: WarmPoolConfig | None = None
    """The group's warm pool; absent: the group keeps none (one it has is removed)."""

    @property
    def warmable(self) -> bool:
        """AWS can keep a warm pool for this group (an on-demand group)."""
        return self.capacity == ON_DEMAND
