"""Why is it queued? Per runner type, the causes, most important first (pure).

On-call gets "[P2] ... max_queue_time_mins=62" and then has to work out *why*: is the
pool at its maximum, out of capacity, failing to launch, are instances booting, do jobs
ask for a label nobody serves, is the picture stale? The tick already knows each of these
facts; :func:`diagnose` names them, the way cluster-autoscaler records per pending pod why
it did or did not scale up. It is a function of what the tick has (snapshot, observation,
the scaling stage's pools, plan and state, its problems, config, poll freshness, dry run,
now) and nothing else, so ``once``, ``explain``, the alert, the page and the simulator all
say the same thing.

Each :class:`~autoscaler.domain.Cause` has a stable ``code`` (:data:`CODES`, in the order
they are listed) and a one-line ``detail`` that names the numbers. Only runner types with
queued jobs get causes; queued jobs no type serves are diagnosed under :data:`UNMATCHED`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase

from autoscaler.config import Config, RunnerTypeConfig
from autoscaler.domain import (
    ActivityStatus,
    Cause,
    InstanceLifecycle,
    Job,
    JobStatus,
    Observation,
    PoolState,
    QueueSnapshot,
    QueueStats,
    RunnerType,
    ScalingActivity,
    ScalingProblem,
)
from autoscaler.observe.queue import is_ghost, is_hosted, match_job
from autoscaler.ports import instance_id_of
from autoscaler.scale.plan import (
    LAUNCH_FAILED,
    LAUNCH_REFUSED,
    STUCK,
    Decision,
    Plan,
    ScalingState,
)

#: Every cause code, most important first (a type's causes are listed in this order).
CODES: tuple[str, ...] = (
    "github_stale",  # the picture is old: nothing below may still be true, nothing scales
    "scaling_disabled",  # nothing will add capacity for this type
    "dry_run",  # this tick planned capacity and did not ask for it
    "pool_missing",  # a configured pool does not exist
    "permanent_error",  # the cloud refused a call for good (AccessDenied, ...)
    "capacity_backoff",  # a pool is out of capacity and skipped for a while
    "launch_failing",  # launches fail, or instances never become runners
    "at_max",  # the type's own ``max`` is reached
    "pool_max_size",  # every pool is at its MaxSize
    "budget_exhausted",  # a shared budget is spent
    "booting",  # instances launched, runners not registered yet
    "runners_offline",  # runners of the type are offline
    "idle_runners_not_assigned",  # idle runners exist and GitHub does not give them the jobs
    "no_runner_type",  # jobs ask for labels no runner type serves
    "demand_met",  # the capacity is asked for and on its way
)
_RANK = {code: i for i, code in enumerate(CODES)}

#: Each code in words, for the status page and the demo (a person's first read).
WORDS: Mapping[str, str] = {
    "github_stale": "The picture is stale: GitHub was not read recently",
    "scaling_disabled": "Nothing scales this runner type",
    "dry_run": "Dry run: capacity planned, not asked",
    "pool_missing": "A configured pool does not exist",
    "permanent_error": "The cloud refused a call for good",
    "capacity_backoff": "A pool is out of capacity and backed off",
    "launch_failing": "Launches fail, or instances never become runners",
    "at_max": "The runner type is at its max",
    "pool_max_size": "Every pool is at its MaxSize",
    "budget_exhausted": "A shared budget is spent",
    "booting": "Instances are booting",
    "runners_offline": "Runners are offline",
    "idle_runners_not_assigned": "Idle runners, yet GitHub does not assign the jobs",
    "no_runner_type": "Jobs ask for labels no runner type serves",
    "demand_met": "Capacity is asked for and on its way",
}

UNMATCHED = "(unmatched)"
"""The key under which :func:`diagnose` lists queued jobs no runner type serves."""

#: Idle runners and a job older than this (and two poll intervals) mean GitHub is not
#: handing out the job: assignment normally takes seconds.
ASSIGN_GRACE_SECONDS = 60.0
#: A pool short of its desired capacity with no new instance for this share of
#: ``boot_timeout`` is called stuck (at the full timeout the policy releases it).
STUCK_SHARE = 0.5
#: Label sets shown for unmatched jobs, and characters per label (labels come from
#: workflow files: bounded before they reach an alert).
MAX_LABEL_SETS, MAX_LABEL_CHARS = 3, 64


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


def diagnose(
    snapshot: QueueSnapshot | None,
    observation: Observation | None,
    config: Config,
    now: datetime,
    *,
    scaling: ScalingView | None = None,
    problems: Sequence[ScalingProblem] = (),
    observation_fresh: bool = True,
    last_successful_poll: datetime | None = None,
    dry_run: bool = False,
) -> dict[str, tuple[Cause, ...]]:
    """Runner type name -> its causes, most important first, for every type with queued
    jobs; :data:`UNMATCHED` -> ``no_runner_type`` when jobs no type serves wait."""
    if snapshot is None:
        return {}
    out: dict[str, tuple[Cause, ...]] = {}
    tick = _Tick(
        config, now, scaling, problems, observation_fresh, last_successful_poll, dry_run,
        registered=frozenset(
            iid
            for r in (observation.runners if observation is not None else ())
            if (iid := instance_id_of(r.name)) is not None
        ),
    )  # fmt: skip
    for rt in config.runner_types:
        stats = snapshot.per_type.get(rt.name)
        if stats is None or stats.queue_size <= 0:
            continue
        causes = tick.causes(rt, stats)
        out[rt.name] = tuple(sorted(causes, key=lambda c: _RANK[c.code]))
    if snapshot.unmatched_jobs > 0:
        jobs = observation.jobs if observation is not None else ()
        out[UNMATCHED] = (_unmatched(jobs, config, snapshot.unmatched_jobs),)
    return out


def cause_line(causes: Sequence[Cause], limit: int = 8) -> str:
    """``at_max (linux.4xlarge 50/50 instances); booting (3 instances, ...)``: the
    ``Cause:`` line of an alert (``none found`` when empty), at most ``limit`` causes."""
    if not causes:
        return "none found"
    shown = [f"{c.code} ({c.detail})" for c in causes[:limit]]
    if len(causes) > limit:
        shown.append(f"+{len(causes) - limit} more")
    return "; ".join(shown)


# --- formatting


def fmt_age(seconds: float) -> str:
    """``45s``, ``4m``, ``1h02m``: short, for one-line details."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds)}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def plural(count: int, one: str, many: str | None = None) -> str:
    """``1 instance``, ``3 instances``."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def _clock(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%H:%M:%S UTC")


# --- the per-type diagnosis


@dataclass(frozen=True)
class _Tick:
    config: Config
    now: datetime
    scaling: ScalingView | None
    problems: Sequence[ScalingProblem]
    fresh: bool
    last_poll: datetime | None
    dry_run: bool
    registered: frozenset[str]
    """Instance ids that have a registered runner (read once per tick, not per type)."""

    def causes(self, rt: RunnerTypeConfig, stats: QueueStats) -> list[Cause]:
        out: list[Cause] = []
        if not self.fresh:
            out.append(self._stale())
        if not self.config.scaling.enabled:
            out.append(Cause("scaling_disabled", "scaling.enabled is false: pools are not changed"))
        elif not rt.pools:
            out.append(Cause("scaling_disabled", f"{rt.name} has no pools configured"))
        out += [
            Cause("permanent_error", _permanent(p))
            for p in self.problems
            # "launch": a Failed activity a person must fix (quota, image), paged each tick
            if p.kind in ("permanent", "launch") and p.runner_type in (rt.name, "")
        ]
        view = self.scaling
        if view is None or not rt.pools or view.plan is None:
            return out + self._runner_causes(rt, stats, ())
        present = [view.pools[name] for name in rt.pools if name in view.pools]
        out += [
            Cause("pool_missing", f"{name} not found in the cloud")
            for name in rt.pools
            if name not in view.pools
        ]
        decisions = {d.pool: d for d in view.decisions if d.runner_type == rt.name}
        out += self._pool_causes(rt, present, decisions)
        out += self._limit_causes(rt, stats, present, decisions)
        return out + self._runner_causes(rt, stats, present)

    def _age(self, since: datetime) -> float:
        return (self.now - since).total_seconds()

    def _stale(self) -> Cause:
        if self.last_poll is None:
            return Cause("github_stale", "no successful poll of GitHub yet: nothing scales")
        age = (self.now - self.last_poll).total_seconds()
        return Cause(
            "github_stale",
            f"last good poll {fmt_age(age)} ago (poll_interval"
            f" {fmt_age(self.config.poll_interval)}): pools held",
        )

    def _pool_causes(
        self, rt: RunnerTypeConfig, present: list[PoolState], decisions: Mapping[str, Decision]
    ) -> list[Cause]:
        assert self.scaling is not None
        state, out = self.scaling.state, []
        plan = self.scaling.plan
        orphans = Counter(o.pool for o in plan.orphans) if plan is not None else Counter[str]()
        for p in present:
            if state.in_backoff(p.name, self.now):
                out.append(Cause("capacity_backoff", self._backoff(rt, p.name, state)))
                continue
            failed = _failed_since_success(p)
            if failed:
                last = failed[0]
                said = f": {last.message}" if last.message else ""
                many = "Failed scaling activities"
                out.append(
                    Cause(
                        "launch_failing",
                        f"{p.name}: {plural(len(failed), 'Failed scaling activity', many)},"
                        f" last at {_clock(last.started_at)}{said}",
                    )
                )
            if orphans[p.name]:
                out.append(
                    Cause(
                        "launch_failing",
                        f"{p.name}: {plural(orphans[p.name], 'instance')} never registered a runner"
                        f" within boot_timeout {fmt_age(rt.boot_timeout)}",
                    )
                )
            age = self._stuck_for(p, rt)
            if age is not None and not failed:
                out.append(
                    Cause(
                        "launch_failing",
                        f"{p.name}: {p.desired_capacity - p.live_instances} short of desired"
                        f" {p.desired_capacity} for {fmt_age(age)} with no new instance"
                        f" (released at boot_timeout {fmt_age(rt.boot_timeout)})",
                    )
                )
        if self.dry_run and plan is not None:
            ups = [
                (d.pool, d.desired - d.current)
                for d in decisions.values()
                if d.desired > d.current and d.action == "scale_up"
            ]
            if ups:
                where = ", ".join(f"+{n} in {pool}" for pool, n in ups)
                out.append(Cause("dry_run", f"{where} planned, not asked (dry run)"))
        return out

    def _backoff(self, rt: RunnerTypeConfig, pool: str, state: ScalingState) -> str:
        until = state.backoff_until[pool]
        seconds = state.backoff_seconds.get(pool, 0.0)
        since = until.timestamp() - seconds
        text = (
            f"{pool} since {_clock(datetime.fromtimestamp(since, UTC))},"
            f" skipped until {_clock(until)}"
        )
        assert self.scaling is not None
        failure = self.scaling.failures.get(pool)
        if failure is None:
            return text
        if failure.reason == STUCK:
            return text + f"; no instance launched within boot_timeout {fmt_age(rt.boot_timeout)}"
        if failure.reason == LAUNCH_REFUSED:  # its words are in the permanent_error cause
            return text + f"; launch refused ({failure.code or 'no code'}): a person must act"
        words = ": ".join(w for w in (failure.code, failure.message) if w)
        if failure.reason == LAUNCH_FAILED:
            return text + "; Failed scaling activity" + (f", AWS: {words}" if words else "")
        return text + (f"; AWS: {words}" if words else "")

    def _limit_causes(
        self,
        rt: RunnerTypeConfig,
        stats: QueueStats,
        present: list[PoolState],
        decisions: Mapping[str, Decision],
    ) -> list[Cause]:
        """at_max, pool_max_size, budget_exhausted, demand_met: what was asked vs wanted."""
        demand = stats.queue_size + stats.runners.busy + rt.min_idle.at(self.now)
        asked = {p.name: self._asked(p, decisions) for p in present}
        total = sum(asked.values())
        out: list[Cause] = []
        if rt.max is not None and demand > rt.max and total >= rt.max:
            out.append(Cause("at_max", f"{rt.name} {total}/{rt.max} instances"))
        # the pools that can still deliver; a pool out of capacity adds nothing
        working = [p for p in present if not self._failing(p, rt)]
        full = bool(working) and all(asked[p.name] >= p.max_size for p in working)
        if full and demand > sum(asked[p.name] for p in working):
            sizes = ", ".join(f"{p.name} {asked[p.name]}/{p.max_size}" for p in working)
            out.append(Cause("pool_max_size", f"MaxSize reached: {sizes}"))
        assert self.scaling is not None and self.scaling.plan is not None
        use = self.scaling.plan.budget_use
        for b in self.config.budgets:
            covered = any(fnmatchcase(rt.name, pattern) for pattern in b.runner_types)
            if covered and use.get(b.name, 0) >= b.max_instances and demand > total:
                out.append(
                    Cause(
                        "budget_exhausted",
                        f"budget {b.name} {use[b.name]}/{b.max_instances} instances",
                    )
                )
        coming = sum(asked[p.name] for p in working)
        registered = stats.runners.idle + stats.runners.busy + stats.runners.offline
        if present and coming >= demand and coming > registered:
            out.append(
                Cause(
                    "demand_met",
                    f"{plural(coming, 'instance')} asked for a demand of {demand},"
                    f" {coming - registered} on their way: the queue should drain within"
                    f" boot_timeout {fmt_age(rt.boot_timeout)}",
                )
            )
        return out

    def _stuck_for(self, p: PoolState, rt: RunnerTypeConfig) -> float | None:
        """Seconds the pool has been short with no new instance, once that is at least
        :data:`STUCK_SHARE` of ``boot_timeout``; None otherwise."""
        assert self.scaling is not None
        short = self.scaling.state.short_since.get(p.name)
        if short is None or p.desired_capacity <= p.live_instances:
            return None
        age = self._age(short[0])
        return age if age >= rt.boot_timeout * STUCK_SHARE else None

    def _failing(self, p: PoolState, rt: RunnerTypeConfig) -> bool:
        """In capacity back-off, its launches fail or are stuck, or its instances never
        become runners: what it was asked will not come."""
        assert self.scaling is not None
        plan = self.scaling.plan
        return (
            self.scaling.state.in_backoff(p.name, self.now)
            or bool(_failed_since_success(p))
            or self._stuck_for(p, rt) is not None
            or (plan is not None and any(o.pool == p.name for o in plan.orphans))
        )

    def _asked(self, p: PoolState, decisions: Mapping[str, Decision]) -> int:
        """Instances the pool holds or was asked for once this tick's plan is carried out
        (a dry run carries out nothing)."""
        d = decisions.get(p.name)
        target = d.desired if d is not None and not self.dry_run else p.desired_capacity
        return max(target, p.live_instances)

    def _runner_causes(
        self, rt: RunnerTypeConfig, stats: QueueStats, present: Sequence[PoolState]
    ) -> list[Cause]:
        out: list[Cause] = []
        registered = self.registered
        booting = [
            i
            for p in present
            for i in p.instances
            if (
                i.lifecycle is InstanceLifecycle.PENDING
                or (i.lifecycle is InstanceLifecycle.IN_SERVICE and i.id not in registered)
            )
            # past boot_timeout it is an orphan (launch_failing), not booting
            and (i.launched_at is None or self._age(i.launched_at) < rt.boot_timeout)
        ]
        if booting:
            ages = [self._age(i.launched_at) for i in booting if i.launched_at is not None]
            pools = ", ".join(sorted({i.pool for i in booting}))
            oldest = f", oldest {fmt_age(max(ages))}" if ages else ""
            out.append(
                Cause(
                    "booting",
                    f"{plural(len(booting), 'instance')} in {pools}{oldest}"
                    f" (boot_timeout {fmt_age(rt.boot_timeout)})",
                )
            )
        counts = stats.runners
        if counts.offline:
            total = counts.idle + counts.busy + counts.offline
            out.append(
                Cause("runners_offline", f"{counts.offline}/{total} {rt.name} runners offline")
            )
        grace = max(ASSIGN_GRACE_SECONDS, 2 * self.config.poll_interval)
        if counts.idle and stats.max_queue_time_seconds >= grace:
            out.append(
                Cause(
                    "idle_runners_not_assigned",
                    f"{plural(counts.idle, 'idle ' + rt.name + ' runner')} while"
                    f" {plural(stats.queue_size, 'job')} wait"
                    f" (oldest {fmt_age(stats.max_queue_time_seconds)}): GitHub does not"
                    " assign them (runner group or label mismatch?)",
                )
            )
        return out


def _permanent(p: ScalingProblem) -> str:
    return p.message or f"{p.pool or 'all pools'}: {p.code or p.kind}"


def _failed_since_success(p: PoolState) -> list[ScalingActivity]:
    """The pool's Failed activities newer than its newest Successful one, newest first."""
    out = []
    for a in p.activities:
        if a.status is ActivityStatus.SUCCESSFUL:
            break
        if a.status is ActivityStatus.FAILED:
            out.append(a)
    return out


def _unmatched(jobs: Sequence[Job], config: Config, count: int) -> Cause:
    """``no_runner_type``: the label sets of queued jobs no runner type serves."""
    types = [rt.runner_type for rt in config.runner_types]
    sets: Counter[frozenset[str]] = Counter(
        job.labels
        for job in jobs
        if job.status is JobStatus.QUEUED
        and not is_ghost(job)
        and match_job(job.labels, types) is None
        and not is_hosted(job.labels, config.github.hosted_labels)
    )
    shown = []
    for labels, n in sets.most_common(MAX_LABEL_SETS):
        text = "[" + ", ".join(sorted(label[:MAX_LABEL_CHARS] for label in labels)) + "]"
        text += f" x{n}" + _nearest(labels, types)
        shown.append(text)
    if len(sets) > MAX_LABEL_SETS:
        shown.append(f"+{len(sets) - MAX_LABEL_SETS} more label sets")
    detail = f"{plural(count, 'queued job')} no runner type serves, by labels"
    return Cause("no_runner_type", detail + (": " + ", ".join(shown) if shown else ""))


def _nearest(labels: frozenset[str], types: Sequence[RunnerType]) -> str:
    """`` (linux.4xlarge lacks gpu)``: the type sharing most labels, and what it lacks."""
    best = max(types, key=lambda t: (len(t.labels & labels), -len(t.labels)), default=None)
    if best is None or not best.labels & labels - {"self-hosted"}:
        return ""
    missing = ", ".join(sorted(label[:MAX_LABEL_CHARS] for label in labels - best.labels))
    return f" ({best.name} lacks {missing})"
