"""The ``simulation`` section: how ``ci-autoscaler simulate`` emulates the fleet.

```yaml
simulation:
  seed: 1                            # boot times and GitHub's runner choice are seeded
  launch_time: {p50: 10s, p95: 30s}  # capacity asked -> instance running (not billed)
  boot_time: {p50: 90s, p95: 240s}   # running -> runner registered (billed), every pool...
  warm_start: {p50: 20s, p95: 40s}   # a warm pool's stopped instance -> runner registered
  boot_correlation: 0.5              # boots launched together are slow or fast together
  pools:
    ci-gpu-spot:
      boot_time: {p50: 120s, p95: 300s}   # ...unless a pool says otherwise
      max_size: 40                   # the group's MaxSize (default: the type's max, else 1000)
  outages:                           # no capacity: launches accepted, nothing starts
    - {pool: ci-gpu-spot, from: 10h, to: 11h30m}   # from the trace's start...
    - {pool: ci-cpu, from: "2026-11-30T14:00:00Z", to: "2026-11-30T14:20:00Z"}   # ...or UTC
  reaction: null                     # e.g. 1s: decide within this long of a queued job
                                     # besides every poll_interval (default: with
                                     # webhook configured, its debounce + 1s; else null)
  poll_latency: 5s                   # a poll's answer is this old when the tick acts
  billing_minimum: 60s               # an instance is billed at least this long
  launches: {per_activity: 100, retry: 10s, bucket: 1000, refill: 2}   # throttles
```

The live controller never reads this section; it only shapes the emulated world the real
policy is replayed against (:mod:`autoscaler.sim`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic.functional_validators import ModelWrapValidatorHandler
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema

from autoscaler.config.values import (
    ByName,
    Duration,
    FileContext,
    Integer,
    Key,
    Required,
    Section,
    Text,
    Value,
    fail,
    together,
    type_name,
    wrong,
)

__all__ = [
    "BootTime",
    "LaunchTime",
    "Launches",
    "Outage",
    "SimPoolConfig",
    "SimulationConfig",
    "TimePoint",
    "WarmStart",
]


#: An outage edge: seconds from the trace's start, or an absolute UTC time.
TimePoint = float | datetime


class Moment(Value):
    """A duration from the trace's start (``10h``), or an ISO-8601 UTC time."""

    def check(self, value: Any, info: ValidationInfo) -> TimePoint:
        if isinstance(value, datetime):
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if isinstance(value, str) and "T" in value:
            try:
                parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                raise wrong(f"not an ISO-8601 time: {value!r}") from None
            return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
        return float(Duration().check(value, info))

    def json_schema(self) -> JsonSchemaValue:
        return {"anyOf": [Duration().json_schema(), {"type": "string", "format": "date-time"}]}


class Share(Value):
    """A number from 0 to 1, both included."""

    def check(self, value: Any, info: ValidationInfo) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong(f"must be a number, got {type_name(value)}")
        if not 0.0 <= value <= 1.0:  # a NaN fails this too
            raise wrong(f"must be between 0 and 1, got {value:g}")
        return float(value)

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "number", "minimum": 0, "maximum": 1}


class Rate(Value):
    """A number above zero (so many a second)."""

    def check(self, value: Any, info: ValidationInfo) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong(f"must be a number, got {type_name(value)}")
        if not value > 0 or value == float("inf"):
            raise wrong("must be greater than zero (instances a second)")
        return float(value)

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "number", "exclusiveMinimum": 0}


class BootTime(Section):
    """Instance running to registered runner, as a lognormal distribution fitted to two
    quantiles."""

    p50: Annotated[float, Duration(positive=True)] = 90.0
    """Median time from a running instance to a registered runner."""
    p95: Annotated[float, Duration(positive=True)] = Field(
        default_factory=lambda given: max(given.get("p50", 0.0), 240.0)
    )
    """95th percentile of the same (at least `p50`; equal: every boot takes exactly `p50`).
    Absent: 240s, or `p50` when that is longer."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.p95 < self.p50:
            fail((("p95",), f"must be at least p50 ({self.p50:g}s)"))
        return self

    def under(self, base: BootTime) -> BootTime:
        """This boot time with the quantiles it does not set taken from ``base`` (a p95
        below the p50 this gives is refused by the caller)."""
        given = self.model_fields_set
        p50 = self.p50 if "p50" in given else base.p50
        p95 = self.p95 if "p95" in given else max(p50, base.p95)
        return self.model_copy(update={"p50": p50, "p95": p95})


class LaunchTime(Section):
    """Capacity asked to instance running (not billed): the group's activity and EC2's
    pending state, as a lognormal distribution fitted to two quantiles."""

    p50: Annotated[float, Duration(positive=True)] = 10.0
    """Median time from a raised desired capacity to a running instance."""
    p95: Annotated[float, Duration(positive=True)] = Field(
        default_factory=lambda given: max(given.get("p50", 0.0), 30.0)
    )
    """95th percentile of the same (at least `p50`). Absent: 30s, or `p50` when that is
    longer."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.p95 < self.p50:
            fail((("p95",), f"must be at least p50 ({self.p50:g}s)"))
        return self


class WarmStart(Section):
    """Scale-out to registered runner for an instance taken from a warm pool (a stopped
    one started again), as a lognormal distribution fitted to two quantiles. Billed from
    the start."""

    p50: Annotated[float, Duration(positive=True)] = 20.0
    """Median time from a raised desired capacity to a registered runner, from the warm
    pool."""
    p95: Annotated[float, Duration(positive=True)] = Field(
        default_factory=lambda given: max(given.get("p50", 0.0), 40.0)
    )
    """95th percentile of the same (at least `p50`). Absent: 40s, or `p50` when that is
    longer."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.p95 < self.p50:
            fail((("p95",), f"must be at least p50 ({self.p50:g}s)"))
        return self


class Launches(Section):
    """How fast a raised desired capacity becomes instances: the throttles of a burst."""

    per_activity: Annotated[int, Integer(1)] = 100
    """Instances one scaling activity of a group starts at most (`LaunchInstances` caps
    one launch at 100 instances); the rest wait for the group's next activity."""
    retry: Annotated[float, Duration(positive=True)] = 10.0
    """Time until a group's next activity launches what it still lacks."""
    bucket: Annotated[int, Integer(1)] = 1000
    """EC2's `RunInstances` resource token bucket, per account and Region: this many
    instances at once..."""
    refill: Annotated[float, Rate()] = 2.0
    """...then this many a second."""


class SimPoolConfig(Section):
    """A pool's own emulation, over the section's."""

    name: SkipJsonSchema[Annotated[str, Key()]] = Field(default="", exclude=True)
    """The pool (Auto Scaling group) name, as in `runner_types.*.pools`."""
    boot_time: BootTime | None = None
    """This pool's boot time; absent: the section's `boot_time` (a quantile left out is
    the section's too)."""
    max_size: Annotated[int, Integer(1)] | None = None
    """The group's MaxSize; absent: the runner type's `max`, else 1000."""


class Outage(Section):
    """A pool out of capacity from `from` to `to`: scale-ups are accepted and fail later
    (a Failed scaling activity), the way EC2 Auto Scaling reports it."""

    pool: Annotated[str, Text()]
    """The pool that cannot launch."""
    start: Annotated[
        TimePoint, Moment(), Required('a duration from the trace start like 10h, or "...Z"')
    ] = Field(alias="from")
    """A duration from the trace's start (`10h`), or an ISO-8601 UTC time."""
    end: Annotated[
        TimePoint, Moment(), Required('a duration from the trace start like 10h, or "...Z"')
    ] = Field(alias="to")
    """Exclusive; same forms as `from`."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        same_kind = type(self.start) is type(self.end)
        if same_kind and self.end <= self.start:  # type: ignore[operator]
            fail(((), "from must be before to"))
        return self


class SimulationConfig(Section):
    """Only `ci-autoscaler simulate` reads this section: the emulated fleet's boot times
    and outages."""

    seed: Annotated[int, Integer()] = 0
    """Seeds boot times and which idle runner GitHub hands a job to."""
    boot_time: BootTime = Field(default_factory=BootTime)
    """Every pool's boot time unless `pools` overrides it."""
    pools: Annotated[tuple[SimPoolConfig, ...], ByName()] = ()
    """Per-pool overrides, by pool name."""
    outages: tuple[Outage, ...] = ()
    """Capacity outages."""
    reaction: Annotated[float, Duration(positive=True)] | None = None
    """Webhooks: decide this long after a job is queued (besides every `poll_interval`);
    absent: the config's `webhook` (its debounce plus a second for GitHub's delivery) if
    it has one, else polling only."""
    launch_time: LaunchTime = Field(default_factory=LaunchTime)
    """Capacity asked to instance running (not billed)."""
    warm_start: WarmStart = Field(default_factory=WarmStart)
    """Capacity asked to registered runner for an instance from a warm pool (the pools
    listed under `pools` with a `warm_pool`). A warm pool is refilled at cold speed
    (`launch_time` + `boot_time`); its stopped instances are billed for storage only."""
    boot_correlation: Annotated[float, Share()] = 0.5
    """Correlation (0-1) of the log boot times of a pool's instances launched within the
    same 5 minutes (one image pulled by many, one zone's load): a burst's boots are slow
    or fast together."""
    launches: Launches = Field(default_factory=Launches)
    """The throttles between a raised desired capacity and running instances."""
    billing_minimum: Annotated[float, Duration()] = 60.0
    """An instance is billed at least this long (EC2 bills Linux instances by the second
    with a one-minute minimum), from running to terminated."""
    poll_latency: Annotated[float, Duration()] = 5.0
    """Time between a poll's start and the tick acting on it: the controller sees the
    world this late. The `github_poll` bench measures 4.8 s for a cold tick at 100
    repositories. A reaction (webhook) tick acts at once."""

    @model_validator(mode="wrap")
    @classmethod
    def _known_pools(
        cls, value: Any, handler: ModelWrapValidatorHandler[SimulationConfig], info: ValidationInfo
    ) -> SimulationConfig:
        """Every pool named here is a runner type's (a check of the names, told with
        whatever else is wrong in the section)."""
        known = info.context.pools if isinstance(info.context, FileContext) else None
        if known is None or not isinstance(value, dict):
            return handler(value)
        problems: list[tuple[tuple[str | int, ...], str]] = []
        pools = value.get("pools")
        if isinstance(pools, dict):
            problems += [
                (("pools", str(n)), "not a pool of any runner type")
                for n in pools
                if n not in known
            ]
        outages = value.get("outages")
        for i, o in enumerate(outages if isinstance(outages, list) else []):
            pool = o.get("pool") if isinstance(o, dict) else None
            if isinstance(pool, str) and pool not in known:
                problems.append((("outages", i, "pool"), "not a pool of any runner type"))
        return together(value, handler, problems)  # type: ignore[no-any-return]

    @field_validator("pools")
    @classmethod
    def _pools_inherit(
        cls, pools: tuple[SimPoolConfig, ...], info: ValidationInfo
    ) -> tuple[SimPoolConfig, ...]:
        """A pool's boot time takes the quantiles it leaves out from the section's."""
        section = info.data.get("boot_time")
        if section is None or all(p.boot_time is None for p in pools):
            return pools
        out = []
        for p in pools:
            boot = None if p.boot_time is None else p.boot_time.under(section)
            if boot is not None and boot.p95 < boot.p50:
                fail(((p.name, "boot_time", "p95"), f"must be at least p50 ({boot.p50:g}s)"))
            out.append(p if boot is None else p.model_copy(update={"boot_time": boot}))
        return tuple(out)

    def pool(self, name: str) -> SimPoolConfig:
        for p in self.pools:
            if p.name == name:
                return p
        return SimPoolConfig(name=name)
