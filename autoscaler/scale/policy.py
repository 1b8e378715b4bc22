"""The scaling decision: a pure function of (snapshot, runners, pools, config, state, now).

Per runner type:

- demand = fresh queued jobs + busy runners on the type's instances + ``min_idle`` at
  ``now`` (a number, or a weekly UTC schedule; with ``predict``, at least the warm runners
  the recent arrival rate calls for, :mod:`autoscaler.scale.forecast`);
- supply = instances in service or pending in the type's pools (booting ones count, so a
  queued job is not provisioned twice);
- desired = demand clamped to the type's ``max``, to the pools' MaxSize and to the budgets.
  Budget headroom (limit minus what the covered types already hold) goes to the types by
  priority (higher first), then by the age of their oldest queued job (older first).

Scale up at once, filling the pools in order, skipping pools in capacity back-off and
never past a pool's MaxSize. Scale down only idle runners the demand does not need,
longest idle first: those past ``idle_timeout``, and those the arrivals expected before
the next poll will not take (:func:`autoscaler.scale.forecast.idle_to_keep`). Each
:class:`ScaleIn` says "deregister runner X, then terminate instance Y in pool P". Stale
observations never scale: every pool is held.
A pool whose launches failed after it accepted a scale-up (a Failed scaling activity, or
stuck short of its desired capacity past ``boot_timeout``; :mod:`autoscaler.scale.capacity`) is
backed off and released like one that refused synchronously, and the need fails over.
Orphans (an instance with no registered runner ``boot_timeout`` after launch, its age
read on the cloud's clock: our clock corrected by the measured skew) are terminated, but
never while a peer's clock is off by more than :data:`SKEW_FRACTION` of ``boot_timeout``;
the scaler asks GitHub for the runner once more before it terminates one. An offline
runner whose instance is gone is deregistered. Terminations that failed after their runner
was deregistered are retried first (:attr:`Plan.pending_terminations`) and count against
``max_scale_in_per_tick``. Only instances ``InService`` are protected from scale-in: AWS
refuses SetInstanceProtection for a ``Pending`` one, and fails the whole call with it.
Caps per tick come from :class:`ScalingConfig`.

Runner <-> instance: a runner is named ``f"{pool}-{instance_id}"`` (:func:`instance_id_of`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler.domain import ClockSkew, InstanceLifecycle, PoolState, QueueSnapshot, Runner
from autoscaler.ports import instance_id_of
from autoscaler.scale.capacity import launch_failures, track_short
from autoscaler.scale.forecast import (
    count_arrivals,
    count_boots,
    idle_to_keep,
    warm_runners,
)
from autoscaler.scale.plan import (
    HOLD,
    LAUNCH_FAILED,
    LAUNCH_REFUSED,
    MISSING,
    ORPHAN,
    PROTECT_PER_POOL,
    RANK,
    RELEASE,
    SCALE_IN,
    SCALE_UP,
    SKEW_FRACTION,
    STALE,
    Decision,
    DeregisterStale,
    LaunchRefused,
    PendingTermination,
    Plan,
    PoolSlot,
    Protect,
    Release,
    ScaleIn,
    ScaleUp,
    ScalingState,
    TerminateOrphan,
    WarmSizing,
    slot_target,
)
from autoscaler.scale.sizing import size_types

if TYPE_CHECKING:
    from autoscaler.config import BudgetConfig, Config, RunnerTypeConfig

__all__ = ["decide", "pool_of_runner", "without_removed"]

_LIVE = (InstanceLifecycle.PENDING, InstanceLifecycle.IN_SERVICE)


def budgets_of(name: str, budgets: Sequence[BudgetConfig]) -> list[BudgetConfig]:
    return [b for b in budgets if any(fnmatch.fnmatchcase(name, p) for p in b.runner_types)]


def pool_of_runner(runner: Runner, pools: Sequence[str]) -> str | None:
    """The pool a runner's name says it runs in (``f"{pool}-{instance_id}"``)."""
    iid = instance_id_of(runner.name)
    if iid is None:
        return None
    for pool in pools:
        if runner.name == f"{pool}-{iid}":
            return pool
    return None


def runners_by_pool(runners: Sequence[Runner]) -> dict[str, list[tuple[int, Runner]]]:
    """Each runner (with its position) under the pool its name says (``f"{pool}-{id}"``):
    read once per tick, not once per runner type (200 types x 3,000 runners was 600,000
    regular-expression searches a tick)."""
    out: dict[str, list[tuple[int, Runner]]] = {}
    for index, runner in enumerate(runners):
        iid = instance_id_of(runner.name)
        if iid is not None:
            out.setdefault(runner.name[: -len(iid) - 1], []).append((index, runner))
    return out


@dataclass
class _Type:
    rt: RunnerTypeConfig
    pools: list[PoolState]
    runners: list[tuple[Runner, str]]
    queued: int
    busy: int
    live: int
    demand: int
    desired: int
    oldest: datetime | None
    sizing: WarmSizing | None = None
    grant: int = 0


@dataclass
class _Builder:
    """Collects actions and per-pool notes while deciding."""

    pools: Mapping[str, PoolState]
    notes: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    actions: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    targets: dict[tuple[str, str], int] = field(default_factory=dict)
    scale_ups: list[ScaleUp] = field(default_factory=list)
    scale_ins: list[ScaleIn] = field(default_factory=list)
    orphans: list[TerminateOrphan] = field(default_factory=list)
    held: list[TerminateOrphan] = field(default_factory=list)
    stale: list[DeregisterStale] = field(default_factory=list)
    protect: list[Protect] = field(default_factory=list)
    out_of_capacity: list[str] = field(default_factory=list)

    def note(
        self, rt: str, pool: str, text: str, action: str | None = None, delta: int = 0
    ) -> None:
        key = (rt, pool)
        self.notes.setdefault(key, []).append(text)
        if action is not None:
            self.actions.setdefault(key, set()).add(action)
        self.targets[key] = self.targets.get(key, self.pools[pool].desired_capacity) + delta

    def decisions(self, config: Config) -> tuple[Decision, ...]:
        out: list[Decision] = []
        for rt in config.runner_types:
            for pool in rt.pools:
                if pool not in self.pools:
                    out.append(
                        Decision(rt.name, pool, 0, 0, "pool not found in the cloud", MISSING)
                    )
                    continue
                key, current = (rt.name, pool), self.pools[pool].desired_capacity
                action = min(self.actions.get(key) or {HOLD}, key=RANK.__getitem__)
                reason = "; ".join(self.notes.get(key, []))
                out.append(
                    Decision(rt.name, pool, current, self.targets.get(key, current), reason, action)
                )
        return tuple(out)


def _types(
    snapshot: QueueSnapshot,
    runners: Sequence[Runner],
    pools: Mapping[str, PoolState],
    config: Config,
    now: datetime,
    *,
    state: ScalingState,
    sizings: Mapping[str, WarmSizing],
) -> list[_Type]:
    out = []
    by_pool = runners_by_pool(runners)
    for rt in config.runner_types:
        present = [pools[name] for name in rt.pools if name in pools]
        names = dict.fromkeys(p.name for p in present)
        found = [(i, r, pn) for pn in names for i, r in by_pool.get(pn, ())]
        mine = [(r, pn) for _, r, pn in sorted(found, key=lambda f: f[0])]  # runner order
        stats = snapshot.per_type.get(rt.name)
        queued = stats.queue_size if stats is not None else 0
        busy = sum(1 for r, _ in mine if r.online and r.busy)
        sizing = sizings.get(rt.name)
        hot = 0 if sizing is None else sizing.hot
        demand = queued + busy + max(warm_runners(rt, state, now), hot)
        cap = sum(p.max_size for p in present)
        if rt.max is not None:
            cap = min(cap, rt.max)
        live = sum(p.live_instances for p in present)
        oldest = stats.oldest_queued_at if stats is not None else None
        out.append(
            _Type(rt, present, mine, queued, busy, live, demand, min(demand, cap), oldest, sizing)
        )
    return out


def _grant_budgets(
    types: list[_Type], budgets: Sequence[BudgetConfig], now: datetime
) -> dict[str, int]:
    """Set each type's ``grant`` (instances it may add); return each budget's use."""
    covered = {t.rt.name: budgets_of(t.rt.name, budgets) for t in types}
    headroom = {
        b.name: b.max_instances - sum(t.live for t in types if b in covered[t.rt.name])
        for b in budgets
    }
    never = datetime.max.replace(tzinfo=now.tzinfo)
    for t in sorted(types, key=lambda t: (-t.rt.priority, t.oldest or never, t.rt.name)):
        t.grant = min(
            [max(0, t.desired - t.live), *(max(0, headroom[b.name]) for b in covered[t.rt.name])]
        )
        for b in covered[t.rt.name]:
            headroom[b.name] -= t.grant
    return {b.name: b.max_instances - headroom[b.name] for b in budgets}


def _scale_up(t: _Type, state: ScalingState, now: datetime, out: _Builder) -> None:
    name = t.rt.name
    if t.desired < t.demand:
        for p in t.pools:
            out.note(name, p.name, f"clamped to {t.desired} by max/MaxSize")
    if t.grant < max(0, t.desired - t.live):
        for p in t.pools:
            out.note(name, p.name, f"budget allows +{t.grant}")
    if t.grant <= 0:
        return
    slots = tuple(
        PoolSlot(p.name, p.live_instances, p.desired_capacity, p.max_size)
        for p in t.pools
        if not state.in_backoff(p.name, now)
    )
    if not slots or all(state.capacity_failing(p.name) for p in t.pools):
        # Every pool failed and none delivered since: still out of capacity while a pool
        # whose back-off ended is retried (a retry that fails is no recovery).
        out.out_of_capacity.append(name)
    if not slots:
        for p in t.pools:
            out.note(name, p.name, f"need +{t.grant} but every pool is in capacity back-off", HOLD)
        return
    out.scale_ups.append(ScaleUp(name, t.grant, slots))
    need = t.grant
    for slot in slots:
        take, target = slot_target(slot, need)
        need -= take
        if target > slot.current:
            delta = target - slot.current
            out.note(name, slot.pool, f"scale up +{delta}", SCALE_UP, delta)


def _scale_in(  # noqa: PLR0917 (the type, its state and the tick's budget)
    t: _Type, state: ScalingState, now: datetime, left: int, out: _Builder, poll_interval: float
) -> int:
    """Plan scale-ins of idle runners (past idle_timeout, or beyond what the expected
    arrivals will take, :func:`idle_to_keep`), longest idle first, never below the
    demand; return how many were planned."""
    excess = min(t.live - t.desired, left)
    if excess <= 0:
        return 0
    in_service = {
        i.id for p in t.pools for i in p.instances if i.lifecycle is InstanceLifecycle.IN_SERVICE
    }
    cutoff = now - timedelta(seconds=t.rt.idle_timeout)
    idle = sorted(
        (
            (since, r, pool)
            for r, pool in t.runners
            if r.online
            and not r.busy
            and (since := state.idle_since.get(r.id)) is not None
            and instance_id_of(r.name) in in_service
        ),
        key=lambda x: (x[0], x[1].id),
    )
    past = sum(1 for since, _, _ in idle if since <= cutoff)
    refill = 0.0 if t.sizing is None else t.sizing.refill
    keep = idle_to_keep(t.rt, state, now, poll_interval, refill)
    count = min(excess, past if keep is None else max(past, len(idle) - keep))
    for since, r, pool in idle[:count]:
        out.scale_ins.append(ScaleIn(t.rt.name, pool, r.id, r.name, instance_id_of(r.name) or ""))
        if since <= cutoff:
            text = f"runner {r.name} idle past {t.rt.idle_timeout:.0f}s: scale in"
        else:
            text = (
                f"runner {r.name} idle, {keep} kept for the jobs expected before the next"
                " poll: scale in"
            )
        out.note(t.rt.name, pool, text, SCALE_IN, -1)
    return count


def _cleanup(
    t: _Type,
    runners: Sequence[Runner],
    snapshot: QueueSnapshot,
    live_ids: set[str],
    *,
    left: int,
    out: _Builder,
    skew: ClockSkew,
    pending: Mapping[str, PendingTermination],
    orphans: bool = True,
    registered: set[str | None],
) -> int:
    """Plan orphan terminations (when ``orphans``), then stale runner removals; return how
    many were planned.

    An instance's age is read on the cloud's clock (``launched_at`` is the cloud's): the
    poll's time plus the measured cloud skew. With any peer's clock further off than
    :data:`SKEW_FRACTION` of ``boot_timeout`` the orphans are held, not terminated."""
    name, used = t.rt.name, 0
    cloud_now = snapshot.observed_at + timedelta(seconds=skew.aws or 0.0)
    boot_cutoff = cloud_now - timedelta(seconds=t.rt.boot_timeout)
    skew_limit = SKEW_FRACTION * t.rt.boot_timeout
    for p in t.pools:
        for i in p.instances:
            if not (
                orphans
                and used < left
                and i.lifecycle in _LIVE
                and i.launched_at is not None
                and i.launched_at <= boot_cutoff
                and i.id not in registered
                and i.id not in pending
            ):
                continue
            orphan = TerminateOrphan(name, p.name, i.id)
            if skew.worst > skew_limit:
                out.held.append(orphan)
                text = (
                    f"instance {i.id} looks unregistered, but clocks are {skew.worst:.0f}s"
                    f" apart (over {skew_limit:.0f}s, a quarter of boot_timeout): kept"
                )
                out.note(name, p.name, text)
                continue
            out.orphans.append(orphan)
            text = f"instance {i.id} not registered after {t.rt.boot_timeout:.0f}s: terminate"
            out.note(name, p.name, text, ORPHAN, -1)
            used += 1
    for r, pool in t.runners:
        if used < left and not r.online and instance_id_of(r.name) not in live_ids:
            out.stale.append(DeregisterStale(name, pool, r.id, r.name))
            out.note(name, pool, f"offline runner {r.name} has no instance: deregister", STALE)
            used += 1
    return used


def without_removed(
    state: ScalingState, runners: Sequence[Runner], seen_at: datetime
) -> tuple[ScalingState, Sequence[Runner]]:
    """The runner list without the runners this controller deleted after it was read, and
    the state without the deletions a list read since has seen.

    Between webhook reconciles a tick plans with the last poll's runner list: an offline
    runner the cleanup deleted a tick ago is still in it, and was deleted again each tick
    (a 404 each) until the next reconcile. A deletion at or after ``seen_at`` is newer
    than the list, so the list's entry is out of date; one before it is old news (a list
    read after the deletion no longer has the runner, and if it does, GitHub has it)."""
    if not state.removed_runners:
        return state, runners
    newer = {rid: at for rid, at in state.removed_runners.items() if at >= seen_at}
    if len(newer) != len(state.removed_runners):
        state = replace(state, removed_runners=newer)
    if newer:
        runners = [r for r in runners if r.id not in newer]
    return state, runners


def _pending(
    pools: Mapping[str, PoolState], state: ScalingState, limit: int, out: _Builder
) -> tuple[ScalingState, list[PendingTermination]]:
    """The remembered terminations to retry now, oldest first and at most ``limit`` (they
    share ``max_scale_in_per_tick``, which bounds the AWS calls of a tick). Forget those
    whose instance is gone (the group replaced it, or someone terminated it: done)."""
    live = {i.id for p in pools.values() for i in p.instances if i.lifecycle in _LIVE}
    keep = sorted(
        (pt for pt in state.pending_terminations.values() if pt.instance_id in live),
        key=lambda pt: (pt.since, pt.instance_id),
    )
    now = [pt for pt in keep if pt.pool in pools][:limit]
    for pt in now:
        if pt.deregistered:
            text = f"runner {pt.runner_name} deregistered earlier: terminate its instance now"
        else:
            text = (
                f"scale-in of runner {pt.runner_name} not finished: terminate its instance"
                " unless GitHub still has the runner"
            )
        out.note(pt.runner_type, pt.pool, text, SCALE_IN, -1)
    state = replace(state, pending_terminations={pt.instance_id: pt for pt in keep})
    return state, now


def decide(  # noqa: PLR0917 (the signature the callers share)
    snapshot: QueueSnapshot,
    runners: Sequence[Runner],
    pools: Mapping[str, PoolState],
    config: Config,
    state: ScalingState,
    now: datetime,
    *,
    observation_fresh: bool,
    runners_complete: bool = True,
    clock_skew: ClockSkew | None = None,
    runners_seen_at: datetime | None = None,
    warm: Collection[str] = (),
) -> Plan:
    """The plan for this tick. Pure: the same arguments give the same plan.

    ``runners_complete`` False (the source skipped a malformed runner) plans no orphan
    termination: the skipped runner's instance would look unregistered, and it may be busy.
    ``clock_skew`` is how far GitHub's and the cloud's clocks are from ours (measured by the
    adapters from their answers): orphan ages are read on the cloud's clock, and no orphan
    is terminated while either skew exceeds :data:`SKEW_FRACTION` of ``boot_timeout``.
    ``runners_seen_at`` is when ``runners`` was read (a webhook tick's list is the last
    poll's; default: the snapshot's time): a runner this controller deleted since is
    planned without (:func:`without_removed`). ``warm`` are the ids of the instances in
    a warm pool: the pool's, whatever their state. Their runners (a persistent runner
    registered in an earlier stint) are planned without: no idle supply, no scale-in, no
    stale runner to deregister.
    """
    skew = clock_skew or ClockSkew()
    scaling = config.scaling
    if warm:
        runners = [r for r in runners if instance_id_of(r.name) not in warm]
    state, runners = without_removed(
        state, runners, snapshot.observed_at if runners_seen_at is None else runners_seen_at
    )
    if observation_fresh:
        launched = {
            i.id: i.launched_at - timedelta(seconds=skew.aws or 0.0)
            for p in pools.values()
            for i in p.instances
            if i.launched_at is not None
        }
        state = count_boots(config, runners, launched, state, snapshot.observed_at)
        state = count_arrivals(config, snapshot, runners, state)
        idle_since = {
            r.id: state.idle_since.get(r.id, snapshot.observed_at)
            for r in runners
            if r.online and not r.busy
        }
        state = replace(state, idle_since=idle_since)
    state = track_short(pools, state, now)
    sizings, state = size_types(config, state, now)
    types = _types(snapshot, runners, pools, config, now, state=state, sizings=sizings)
    budget_use = _grant_budgets(types, config.budgets, now)
    out = _Builder(pools)
    releases: list[Release] = []
    pending: list[PendingTermination] = []
    if observation_fresh and scaling.enabled:
        state, releases = launch_failures(((t.rt, t.pools) for t in types), state, now, scaling)
    if scaling.enabled:
        state, pending = _pending(pools, state, scaling.max_scale_in_per_tick, out)
    scale_in_left = max(0, scaling.max_scale_in_per_tick - len(pending))
    cleanup_left = scaling.max_cleanup_per_tick
    live_ids = {i.id for p in pools.values() for i in p.instances if i.lifecycle in _LIVE}
    registered = {instance_id_of(r.name) for r in runners}
    for t in types:
        summary = (
            f"demand {t.demand} (queued {t.queued} + busy {t.busy}"
            f" + {'min_idle' if t.sizing is None else 'min_idle/hot'}"
            f" {t.demand - t.queued - t.busy}),"
            f" supply {t.live}"
        )
        for p in t.pools:
            out.note(t.rt.name, p.name, summary)
            if t.sizing is not None and t.sizing.pool == p.name:
                out.note(t.rt.name, p.name, t.sizing.reason)
        for r in releases:
            if r.runner_type == t.rt.name:
                _note_release(r, state, out)
        for p in t.pools:
            unprotected = [
                i.id
                for i in p.instances
                if i.lifecycle is InstanceLifecycle.IN_SERVICE and not i.protected_from_scale_in
            ]
            if unprotected and scaling.enabled:
                ids = tuple(unprotected[:PROTECT_PER_POOL])
                out.protect.append(Protect(t.rt.name, p.name, ids))
        if not (observation_fresh and scaling.enabled):
            why = "scaling disabled" if not scaling.enabled else "observation stale"
            for p in t.pools:
                out.note(t.rt.name, p.name, f"{why}: hold", HOLD)
            continue
        _scale_up(t, state, now, out)
        scale_in_left -= _scale_in(t, state, now, scale_in_left, out, config.poll_interval)
        cleanup_left -= _cleanup(
            t,
            runners,
            snapshot,
            live_ids,
            left=cleanup_left,
            out=out,
            skew=skew,
            pending=state.pending_terminations,
            orphans=runners_complete,
            registered=registered,
        )
    refused = tuple(
        LaunchRefused(t.rt.name, p.name, *state.refused[p.name])
        for t in types
        for p in t.pools
        if p.name in state.refused
    )
    return Plan(
        decisions=out.decisions(config),
        scale_ups=tuple(out.scale_ups),
        scale_ins=tuple(out.scale_ins),
        orphans=tuple(out.orphans),
        stale_runners=tuple(out.stale),
        protect=tuple(out.protect),
        state=state,
        budget_use=budget_use,
        out_of_capacity=tuple(out.out_of_capacity),
        releases=tuple(releases),
        pending_terminations=tuple(pending),
        orphans_held=tuple(out.held),
        refused=refused,
        warm_sizes=_warm_sizes(types, pools, config, out),
    )


def _warm_sizes(
    types: Sequence[_Type], pools: Mapping[str, PoolState], config: Config, out: _Builder
) -> tuple[WarmSizing, ...]:
    """Each decided warm size, put within its pool's bounds beside the desired capacity
    this plan leaves the group at."""
    sized = []
    for t in types:
        s = t.sizing
        warm_pool = None if s is None else config.pool(s.pool).warm_pool
        if s is None or warm_pool is None:
            continue
        found = pools.get(s.pool)
        desired = out.targets.get((t.rt.name, s.pool), found.desired_capacity if found else 0)
        sized.append(replace(s, spec=warm_pool.spec_for(s.warm, desired)))
    return tuple(sized)


def _note_release(r: Release, state: ScalingState, out: _Builder) -> None:
    why = {
        LAUNCH_FAILED: "a scaling activity Failed",
        LAUNCH_REFUSED: f"refused: {r.code}, a person must fix it",
    }.get(r.reason, "no launch progress")
    text = f"launches failing ({why}): backed off {state.backoff_seconds[r.pool]:.0f}s"
    if r.failover:
        text += ", failing over"
    if r.desired < r.current:
        text += f"; desired back to {r.desired}"
    out.note(r.runner_type, r.pool, text, RELEASE, r.desired - r.current)
