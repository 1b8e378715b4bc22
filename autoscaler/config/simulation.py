"""The ``simulation`` section: how ``ci-autoscaler simulate`` emulates the fleet.

```yaml
simulation:
  seed: 1                            # boot times and GitHub's runner choice are seeded
  launch_time: {p50: 10s, p95: 30s}  # capacity asked -> instance running (not billed)
  boot_time: {p50: 90s, p95: 240s}   # running -> runner registered (billed), every pool...
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

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autoscaler.config.reader import Reader, join_path

#: The largest MaxSize assumed for a pool whose type has no ``max`` and whose simulated
#: group names none.
DEFAULT_MAX_SIZE = 1000

#: An outage edge: seconds from the trace's start, or an absolute UTC time.
TimePoint = float | datetime


@dataclass(frozen=True)
class BootTime:
    """A latency as a lognormal distribution fitted to two quantiles: the boot (instance
    running to runner registered) or the launch (capacity asked to instance running)."""

    p50: float = 90.0
    """Median seconds."""
    p95: float = 240.0
    """95th percentile of the same (>= p50; equal: every draw is exactly p50)."""


@dataclass(frozen=True)
class Launches:
    """How fast a raised desired capacity becomes instances: the throttles of a burst."""

    per_activity: int = 100
    """Instances one scaling activity of a group starts at most (``LaunchInstances``
    caps one launch at 100 instances); the rest wait for the group's next activity."""
    retry: float = 10.0
    """Seconds until a group's next activity launches what it still lacks."""
    bucket: int = 1000
    """EC2's ``RunInstances`` resource token bucket, per account and Region: this many
    instances at once..."""
    refill: float = 2.0
    """...then this many a second."""


@dataclass(frozen=True)
class SimPoolConfig:
    name: str
    """The pool (Auto Scaling group) name, as in ``runner_types.*.pools``."""
    boot_time: BootTime | None = None
    """This pool's boot time; None: the section's ``boot_time``."""
    max_size: int | None = None
    """The group's MaxSize; None: the runner type's ``max``, else :data:`DEFAULT_MAX_SIZE`."""


@dataclass(frozen=True)
class Outage:
    """A pool out of capacity from ``start`` to ``end``: scale-ups are accepted and fail
    later (a Failed scaling activity), the way EC2 Auto Scaling reports it."""

    pool: str
    """The pool that cannot launch."""
    start: TimePoint
    """Seconds from the trace's start, or a UTC time."""
    end: TimePoint
    """Exclusive; same forms as ``start``."""


@dataclass(frozen=True)
class SimulationConfig:
    seed: int = 0
    """Seeds boot times and which idle runner GitHub hands a job to."""
    boot_time: BootTime = BootTime()
    """Every pool's boot time unless ``pools`` overrides it."""
    pools: tuple[SimPoolConfig, ...] = ()
    """Per-pool overrides."""
    outages: tuple[Outage, ...] = ()
    """Capacity outages."""
    reaction: float | None = None
    """Webhooks: decide this many seconds after a job is queued (besides every
    ``poll_interval``); None: the config's webhook (its debounce plus a second for
    GitHub's delivery) if it has one, else polling only."""
    launch_time: BootTime = BootTime(10.0, 30.0)
    """Capacity asked to instance running (not billed): the group's activity and EC2's
    pending state."""
    boot_correlation: float = 0.5
    """Correlation (0-1) of the log boot times of a pool's instances launched within
    the same 5 minutes (one image pulled by many, one zone's load): a burst's boots are
    slow or fast together."""
    launches: Launches = Launches()
    """The throttles between a raised desired capacity and running instances."""
    billing_minimum: float = 60.0
    """Seconds an instance is billed at least (EC2 bills Linux instances by the second
    with a one-minute minimum), from running to terminated."""
    poll_latency: float = 5.0
    """Seconds between a poll's start and the tick acting on it: the controller sees the
    world this late. The ``github_poll`` bench measures 4.8 s for a cold tick at 100
    repositories (1,233 requests). A reaction (webhook) tick acts at once."""

    def pool(self, name: str) -> SimPoolConfig:
        for p in self.pools:
            if p.name == name:
                return p
        return SimPoolConfig(name)


def _boot_time(r: Reader, value: Any, path: str, default: BootTime) -> BootTime:
    m = r.mapping(value, path, ("p50", "p95"))
    p50 = r.duration(m.get("p50"), f"{path}.p50", default.p50)
    p95 = r.duration(m.get("p95"), f"{path}.p95", max(p50, default.p95))
    if p50 <= 0:
        r.problem(f"{path}.p50", "must be greater than zero")
        return default
    if p95 < p50:
        r.problem(f"{path}.p95", f"must be at least p50 ({p50:g}s)")
        return default
    return BootTime(p50, p95)


def _time_point(r: Reader, value: Any, path: str) -> TimePoint | None:
    """``10h`` / seconds from the trace's start, or an ISO-8601 UTC time (YAML may have
    parsed it already)."""
    if value is None:
        r.problem(path, 'is required (a duration from the trace start like 10h, or "...Z")')
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, str) and "T" in value:
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            r.problem(path, f"not an ISO-8601 time: {value!r}")
            return None
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    before = len(r.problems)
    seconds = r.duration(value, path)
    return None if len(r.problems) > before else seconds


def _seconds(point: TimePoint) -> float:
    return point.timestamp() if isinstance(point, datetime) else point


def _outage(r: Reader, value: Any, path: str) -> Outage | None:
    if not isinstance(value, dict):
        r.problem(path, "must be a mapping {pool, from, to}")
        return None
    m = r.mapping(value, path, ("pool", "from", "to"))
    pool = r.string(m.get("pool"), f"{path}.pool")
    start = _time_point(r, m.get("from"), f"{path}.from")
    end = _time_point(r, m.get("to"), f"{path}.to")
    if start is None or end is None or not pool:
        return None
    both_offsets = isinstance(start, float) and isinstance(end, float)
    both_times = isinstance(start, datetime) and isinstance(end, datetime)
    if (both_offsets or both_times) and _seconds(end) <= _seconds(start):
        r.problem(path, "from must be before to")
        return None
    return Outage(pool, start, end)


def _pools(r: Reader, value: Any, default: BootTime) -> tuple[SimPoolConfig, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        r.problem("simulation.pools", "must be a mapping of pool -> {boot_time, max_size}")
        return ()
    out = []
    for name, body in value.items():
        p = join_path("simulation.pools", str(name))
        m = r.mapping(body, p, ("boot_time", "max_size"))
        boot = (
            None
            if m.get("boot_time") is None
            else _boot_time(r, m["boot_time"], f"{p}.boot_time", default)
        )
        out.append(
            SimPoolConfig(
                str(name), boot, r.optional_integer(m.get("max_size"), f"{p}.max_size", minimum=1)
            )
        )
    return tuple(out)


def read_simulation(r: Reader, value: Any) -> SimulationConfig:
    """The ``simulation`` section (every key optional)."""
    path = "simulation"
    m = r.mapping(
        value,
        path,
        (
            "seed",
            "boot_time",
            "pools",
            "outages",
            "reaction",
            "launch_time",
            "boot_correlation",
            "launches",
            "billing_minimum",
            "poll_latency",
        ),
    )
    boot = _boot_time(r, m.get("boot_time"), f"{path}.boot_time", BootTime())
    reaction = r.optional_duration(m.get("reaction"), f"{path}.reaction")
    if reaction is not None and (reaction <= 0 or not math.isfinite(reaction)):
        r.problem(f"{path}.reaction", "must be greater than zero (or null: polling only)")
        reaction = None
    defaults = SimulationConfig()
    correlation = r.number(m.get("boot_correlation"), f"{path}.boot_correlation", 0.5)
    if not 0.0 <= correlation <= 1.0:
        r.problem(f"{path}.boot_correlation", f"must be between 0 and 1, got {correlation:g}")
        correlation = defaults.boot_correlation
    return SimulationConfig(
        seed=r.integer(m.get("seed"), f"{path}.seed", 0),
        boot_time=boot,
        pools=_pools(r, m.get("pools"), boot),
        outages=r.each(m.get("outages"), f"{path}.outages", lambda v, p: _outage(r, v, p)),
        reaction=reaction,
        launch_time=_boot_time(
            r, m.get("launch_time"), f"{path}.launch_time", defaults.launch_time
        ),
        boot_correlation=correlation,
        launches=_launches(r, m.get("launches"), f"{path}.launches"),
        billing_minimum=r.duration(
            m.get("billing_minimum"), f"{path}.billing_minimum", defaults.billing_minimum
        ),
        poll_latency=r.duration(
            m.get("poll_latency"), f"{path}.poll_latency", defaults.poll_latency
        ),
    )


def _launches(r: Reader, value: Any, path: str) -> Launches:
    m = r.mapping(value, path, ("per_activity", "retry", "bucket", "refill"))
    d = Launches()
    refill = r.number(m.get("refill"), f"{path}.refill", d.refill)
    if refill <= 0:
        r.problem(f"{path}.refill", "must be greater than zero (instances a second)")
        refill = d.refill
    return Launches(
        per_activity=r.integer(
            m.get("per_activity"), f"{path}.per_activity", d.per_activity, minimum=1
        ),
        retry=r.duration(m.get("retry"), f"{path}.retry", d.retry, positive=True),
        bucket=r.integer(m.get("bucket"), f"{path}.bucket", d.bucket, minimum=1),
        refill=refill,
    )


def check_pools(r: Reader, simulation: SimulationConfig, known: set[str]) -> None:
    """Every pool the section names must be a configured runner type's pool."""
    for p in simulation.pools:
        if p.name not in known:
            r.problem(join_path("simulation.pools", p.name), "not a pool of any runner type")
    for o in simulation.outages:
        if o.pool not in known:
            r.problem("simulation.outages", f"pool {o.pool!r} is not a pool of any runner type")
