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

The causes' vocabulary (codes, words, formatting) is :mod:`autoscaler.scale.causes`; the
causes found in the pools and the plan are :mod:`autoscaler.scale.pool_causes`; this module
runs the diagnosis and finds the rest (freshness, problems, runners, unmatched labels).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from autoscaler.domain import (
    Cause,
    InstanceLifecycle,
    Job,
    JobStatus,
    Observation,
    PoolState,
    QueueSnapshot,
    QueueStats,
    RunnerType,
    ScalingProblem,
)
from autoscaler.observe.queue import is_ghost, is_hosted, match_job
from autoscaler.ports import instance_id_of
from autoscaler.scale.causes import RANK, UNMATCHED, fmt_age, plural
from autoscaler.scale.pool_causes import PoolCauses
from autoscaler.scale.view import ScalingView

if TYPE_CHECKING:
    from autoscaler.config import Config, RunnerTypeConfig

#: Idle runners and a job older than this (and two poll intervals) mean GitHub is not
#: handing out the job: assignment normally takes seconds.
ASSIGN_GRACE_SECONDS = 60.0
#: Label sets shown for unmatched jobs, and characters per label (labels come from
#: workflow files: bounded before they reach an alert).
MAX_LABEL_SETS, MAX_LABEL_CHARS = 3, 64


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
        out[rt.name] = tuple(sorted(causes, key=lambda c: RANK[c.code]))
    if snapshot.unmatched_jobs > 0:
        jobs = observation.jobs if observation is not None else ()
        out[UNMATCHED] = (_unmatched(jobs, config, snapshot.unmatched_jobs),)
    return out


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
        pools = PoolCauses(self.config, self.now, view, self.dry_run)
        out += pools.pool_causes(rt, present, decisions)
        out += pools.limit_causes(rt, stats, present, decisions)
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
