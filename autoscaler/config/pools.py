"""The ``pools`` section: settings of an Auto Scaling group itself, by group name.

```yaml
pools:
  ci-cpu:
    warm_pool: {state: stopped, min_size: 4, max_prepared: 12}
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

from autoscaler.config.values import Choice, Flag, Integer, Key, Section, fail
from autoscaler.domain import WarmPoolSpec

#: Warm pool states: EC2 Auto Scaling's ``PoolState`` values, as the file writes them.
STOPPED, HIBERNATED, RUNNING = "stopped", "hibernated", "running"
WARM_STATES = (STOPPED, HIBERNATED, RUNNING)

#: How a group buys its instances. AWS keeps a warm pool only for ``on_demand``.
ON_DEMAND, SPOT, MIXED = "on_demand", "spot", "mixed"
CAPACITY_KINDS = (ON_DEMAND, SPOT, MIXED)

__all__ = [
    "CAPACITY_KINDS",
    "HIBERNATED",
    "MIXED",
    "ON_DEMAND",
    "RUNNING",
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
    min_size: Annotated[int, Integer()] = 0
    """Instances kept in the warm pool at least, whatever the group's desired capacity."""
    max_prepared: Annotated[int, Integer()] | None = None
    """Most instances the group and its warm pool hold together (AWS's
    `MaxGroupPreparedCapacity`); absent: the group's MaxSize."""
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
    def spec(self) -> WarmPoolSpec:
        return WarmPoolSpec(self.state, self.min_size, self.max_prepared, self.reuse)


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
