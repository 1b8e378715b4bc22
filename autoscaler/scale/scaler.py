"""Act on the policy's plan: the part of a tick that changes the cloud and the CI provider.

Each tick :meth:`Scaler.step` describes the pools, asks :func:`autoscaler.scale.policy.decide`
for a plan and executes it, every cloud call through one :class:`RetryPolicy`:

- protect new instances from scale-in (the group never picks a victim itself);
- scale up, failing over to the next pool on :class:`CapacityError` and backing the
  failed pool off (``capacity_backoff_initial`` doubling to ``capacity_backoff_max``,
  reset once the pool delivers);
- release pools whose launches failed after they accepted a scale-up (the policy found a
  Failed scaling activity or a pool stuck short past ``boot_timeout``, and backed it off):
  their desired capacity goes back to the instances they have, the need fails over;
- scale in: deregister the runner first, and only when that succeeds terminate its
  instance; a runner that turned busy in between (:class:`RejectedError`) is left alone;
  a runner GitHub no longer knows (:class:`NotFoundError`) is gone, so its instance is an
  orphan candidate, left to the orphan sweep and its checks; a termination that fails
  after the runner was deregistered is remembered and retried first next tick;
- terminate orphan instances, each only after GitHub, asked once more by the runner's
  name, says no runner registered since the poll (the poll's list can be seconds old: a
  runner that registered in between may already run a job). Deregister runners whose
  instance is gone.

Capacity back-off, the last scale-up, refused launches and pending terminations are kept
in the state store (``memory``, :mod:`autoscaler.scale.memory`): read before a tick
decides, written after it acted, so a restart or a failover forgets none of them.

What on-call must hear about (permanent errors with their code, every pool of a type out
of capacity, a configured pool that does not exist) is in :attr:`Scaler.last_problems`.
``dry_run`` describes and decides, and changes nothing.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import partial

from autoscaler.config import Config
from autoscaler.domain import (
    ClockSkew,
    Observation,
    QueueSnapshot,
    ScalingProblem,
)
from autoscaler.errors import (
    AutoscalerError,
    CapacityError,
    NotFoundError,
    NotLeaderError,
    PermanentError,
    RejectedError,
    StateError,
)
from autoscaler.ports import JobSource, RunnerPool
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.diagnosis import CapacityFailure, ScalingView
from autoscaler.scale.ephemeral import JitLedgerStore
from autoscaler.scale.jit import EphemeralRunners, ParameterStore, RunnerRegistrar
from autoscaler.scale.memory import Recollection, ScalingMemoryStore
from autoscaler.scale.outcome import TickOutcome, record_pool_metrics, release_failures
from autoscaler.scale.plan import (
    HOLD,
    LAUNCH_REFUSED,
    ORPHAN,
    RELEASE,
    SCALE_IN,
    SCALE_UP,
    STALE,
    Decision,
    PendingTermination,
    Plan,
    Release,
    ScaleIn,
    ScaleUp,
    ScalingState,
    TerminateOrphan,
    slot_target,
)
from autoscaler.scale.policy import decide, pool_of_runner
from autoscaler.scale.provisioning import ProvisioningClock
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

#: What deregistering a runner came to.
REMOVED, BUSY, GONE, FAILED = "removed", "busy", "gone", "failed"


class Scaler:
    """Executes the scaling plan each tick; keeps the policy's state between ticks."""

    def __init__(
        self,
        pool: RunnerPool,
        source: JobSource,
        config: Config,
        metrics: Metrics,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        registrar: RunnerRegistrar | None = None,
        parameters: ParameterStore | None = None,
        jit_store: JitLedgerStore | None = None,
        memory: ScalingMemoryStore | None = None,
    ) -> None:
        self.pool = pool
        self.source = source
        self.config = config
        self.metrics = metrics
        self.retry = RetryPolicy(
            config.aws.retry, metrics, sleep=sleep, rng=rng, monotonic=monotonic
        )
        self.state = ScalingState()
        self.last_problems: list[ScalingProblem] = []
        self.last_plan: Plan | None = None
        #: The peers' clock skew the last step decided with (the alert stage reads it).
        self.last_clock_skew = ClockSkew()
        #: What this tick saw, decided and did, for diagnosis, ``explain`` and the page.
        self.last_view: ScalingView | None = None
        #: Pool -> its last capacity failure (code, AWS's message), while backed off.
        self.failures: dict[str, CapacityFailure] = {}
        self.provisioning = ProvisioningClock()
        self._type_of = {p: rt.name for rt in config.runner_types for p in rt.pools}
        #: What this tick did per (type, pool), for the decisions it returns.
        self.outcome = TickOutcome()
        #: Ephemeral pools' duties (JIT configs, spent machines), when a type is ephemeral.
        self.ephemeral: EphemeralRunners | None = None
        if registrar is not None and parameters is not None:
            self.ephemeral = EphemeralRunners(
                config, source, registrar, parameters, pool, metrics, self.retry, store=jit_store
            )
        #: Back-offs, last scale-ups, refused launches and pending terminations, kept in
        #: the state store across restarts and failovers.
        self.memory = None if memory is None else Recollection(memory, self._memory_failed)

    # --- the tick

    def pool_interrupted(self, pool: str, now: datetime, code: str) -> None:
        """AWS warned it is taking an instance of ``pool`` (a Spot interruption or rebalance
        recommendation): the pool gets the capacity back-off a failed launch gets, so the
        type's demand moves to its next pool (issue 14). Kept as it is while backed off."""
        if self.state.in_backoff(pool, now):
            return
        self.state = self.state.capacity_failed(pool, now, self.config.scaling)
        self.failures[pool] = CapacityFailure(pool, now, code="SpotInterruption", message=code)

    def step(
        self,
        snapshot: QueueSnapshot,
        observation: Observation | None,
        now: datetime,
        *,
        observation_fresh: bool,
        dry_run: bool = False,
    ) -> list[Decision]:
        """Describe, decide, act. Returns one decision per configured pool."""
        if self.memory is not None:
            self.state = self.memory.recall(self.state, acting=not dry_run)
        self.last_problems = []
        self.last_view = None
        names = [p for rt in self.config.runner_types for p in rt.pools]
        if not names:
            return []
        try:
            pools = self.retry.call(
                lambda: self.pool.describe(names), pool="all", operation="describe"
            )
        except AutoscalerError as exc:
            self._measure_skew(observation)
            self._problem(exc, "", "", "describe")
            reason = f"cannot describe pools ({exc.kind} {exc.code}): hold"
            held = [Decision(self._type_of[n], n, 0, 0, reason, HOLD) for n in names]
            self.last_view = ScalingView({}, None, held, self.state, dict(self.failures))
            return held
        for name in names:
            if name not in pools:
                msg = f"pool {name} not found in the cloud"
                self.last_problems.append(
                    ScalingProblem("missing", self._type_of[name], name, "NotFound", msg)
                )
        runners = observation.runners if observation is not None else ()
        fresh = observation_fresh and observation is not None
        if self.ephemeral is not None and dry_run:
            # Another process may act meanwhile (a leader, when this one follows): read the
            # JIT ledger again before this one acts next.
            self.ephemeral.forget()
        if self.ephemeral is not None and not dry_run:
            # Spent and expired ephemeral instances go first: the policy plans without them.
            pools, runners = self.ephemeral.step(
                pools,
                observation,
                now,
                observation_fresh=fresh,
                exclude=set(self.state.pending_terminations),
            )
            self.last_problems.extend(self.ephemeral.problems)
        plan = decide(
            snapshot,
            runners,
            pools,
            self.config,
            self.state,
            now,
            observation_fresh=fresh,
            runners_complete=observation is None or observation.skipped_runners == 0,
            clock_skew=self._measure_skew(observation),
        )
        self.last_plan = plan
        for lr in plan.refused:  # a pool a person must fix is paged every tick until it works
            msg = f"{lr.pool} cannot launch instances ({lr.code}): {lr.message}"
            self.last_problems.append(
                ScalingProblem("launch", lr.runner_type, lr.pool, lr.code, msg)
            )
        if observation is not None:
            self._provisioned(observation, names)
        failures = {**self.failures, **release_failures(plan, now)}
        if dry_run:  # remember what was observed, not the failures acted on
            self.state = replace(
                self.state, idle_since=plan.state.idle_since, short_since=plan.state.short_since
            )
            decisions, state = list(plan.decisions), plan.state
        else:
            self.state, self.failures = plan.state, failures
            self.outcome = TickOutcome()
            if self.ephemeral is not None:
                for key, n in self.ephemeral.terminated.items():
                    self.outcome.note(
                        key, f"{n} ephemeral instance(s) done with their job terminated"
                    )
            self._execute(plan, now)
            decisions, state = self.outcome.decisions(plan), self.state
            self.failures = failures = {
                p: f for p, f in self.failures.items() if p in self.state.backoff_seconds
            }
            if self.memory is not None:
                self.memory.remember(self.state)
        self.last_view = ScalingView(pools, plan, tuple(decisions), state, failures)
        record_pool_metrics(
            self.metrics,
            self.config,
            self.state,
            pools=pools,
            decisions=decisions,
            plan=plan,
            now=now,
        )
        return decisions

    def _measure_skew(self, observation: Observation | None) -> ClockSkew:
        github = observation.clock_skew_seconds if observation is not None else None
        self.last_clock_skew = ClockSkew(github=github, aws=self.pool.clock_skew())
        return self.last_clock_skew

    def _provisioned(self, observation: Observation, names: list[str]) -> None:
        """Observe how long each runner newly online took since its pool was asked."""
        online = [
            (r.id, pool)
            for r in observation.runners
            if r.online and (pool := pool_of_runner(r, names)) is not None
        ]
        for pool, seconds in self.provisioning.observed(online, observation.observed_at):
            self.metrics.provisioning_seconds.labels(self._type_of[pool], pool).observe(seconds)

    def _execute(self, plan: Plan, now: datetime) -> None:
        for pt in plan.pending_terminations:
            self._retry_termination(pt)
        for r in plan.releases:
            self._release(r)
        for p in plan.protect:
            self._cloud(
                p.runner_type,
                p.pool,
                "protect",
                partial(self.pool.protect_instances, p.pool, p.instance_ids),
            )
        for up in plan.scale_ups:
            self._scale_up(up, now)
        for rt in plan.out_of_capacity:
            self._out_of_capacity(rt)
        for si in plan.scale_ins:
            self._scale_in(si, now)
        for o in plan.orphans:
            self._orphan(o)
        for o in plan.orphans_held:
            self.metrics.orphans_kept.labels(o.runner_type, o.pool, "clock_skew").inc()
        if plan.orphans_held:
            log.warning(
                "%d orphan instance(s) kept: clocks disagree by %.0fs (github %s, aws %s)",
                len(plan.orphans_held),
                self.last_clock_skew.worst,
                self.last_clock_skew.github,
                self.last_clock_skew.aws,
            )
        for st in plan.stale_runners:
            outcome = self._deregister(st.runner_type, st.pool, st.runner_id, st.runner_name)
            if outcome == REMOVED:
                self.metrics.scale_actions.labels(st.runner_type, st.pool, "deregister_stale").inc()
                self.outcome.done((st.runner_type, st.pool), 0, STALE)
                log.info("deregistered offline runner %s (instance gone)", st.runner_name)

    def _scale_in(self, si: ScaleIn, now: datetime) -> None:
        key = (si.runner_type, si.pool)
        outcome = self._deregister(si.runner_type, si.pool, si.runner_id, si.runner_name)
        if outcome == GONE:
            self.outcome.note(
                key, f"runner {si.runner_name} already gone: instance left to orphan sweep"
            )
            return
        if outcome != REMOVED:
            self.outcome.note(key, f"runner {si.runner_name} kept")
            return
        if self._terminate(si.runner_type, si.pool, si.instance_id):
            log.info(
                "scaled in %s: runner %s deregistered, instance %s terminated",
                si.pool,
                si.runner_name,
                si.instance_id,
            )
            return
        pending = PendingTermination(si.runner_type, si.pool, si.instance_id, si.runner_name, now)
        self.state = self.state.termination_pending(pending)
        self.metrics.deferred_terminations.labels(si.runner_type, si.pool).inc()
        self.outcome.note(key, f"terminate {si.instance_id} failed: retried first next tick")
        log.warning(
            "runner %s deregistered but instance %s not terminated; retried first next tick",
            si.runner_name,
            si.instance_id,
        )

    def _retry_termination(self, pt: PendingTermination) -> None:
        """A termination that failed after its runner was deregistered, tried again."""
        key = (pt.runner_type, pt.pool)
        if self._terminate(pt.runner_type, pt.pool, pt.instance_id):
            self.state = self.state.termination_done(pt.instance_id)
            log.info(
                "terminated instance %s of runner %s (deregistered %s)",
                pt.instance_id,
                pt.runner_name,
                pt.since.isoformat(),
            )
        else:
            self.metrics.deferred_terminations.labels(pt.runner_type, pt.pool).inc()
            self.outcome.note(key, f"terminate {pt.instance_id} failed again: retried next tick")

    def _terminate(self, runner_type: str, pool: str, instance_id: str) -> bool:
        """Terminate the instance of a deregistered runner (a scale-in)."""
        if not self._cloud(
            runner_type,
            pool,
            "terminate",
            partial(self.pool.terminate_instance, pool, instance_id),
        ):
            return False
        self.metrics.scale_actions.labels(runner_type, pool, "scale_in").inc()
        self.outcome.done((runner_type, pool), -1, SCALE_IN)
        return True

    def _orphan(self, o: TerminateOrphan) -> None:
        """Terminate an orphan, unless GitHub knows its runner by now (or cannot say)."""
        key = (o.runner_type, o.pool)
        try:
            runner = self.source.find_runner(o.runner_name)
        except AutoscalerError as exc:
            self.metrics.orphans_kept.labels(o.runner_type, o.pool, "lookup_failed").inc()
            self._problem(exc, o.runner_type, o.pool, "find_runner")
            self.outcome.note(key, f"cannot ask GitHub about {o.runner_name}: {o.instance_id} kept")
            return
        if runner is not None:
            self.metrics.orphans_kept.labels(o.runner_type, o.pool, "registered").inc()
            self.outcome.note(key, f"runner {o.runner_name} registered since the poll: kept")
            log.info(
                "instance %s registered its runner after the poll (%s); not an orphan",
                o.instance_id,
                runner.state.value,
            )
            return
        if self._cloud(
            o.runner_type,
            o.pool,
            "terminate",
            partial(self.pool.terminate_instance, o.pool, o.instance_id),
        ):
            self.metrics.scale_actions.labels(o.runner_type, o.pool, "terminate_orphan").inc()
            self.metrics.provisioning_failures.labels(o.runner_type, o.pool, "boot_timeout").inc()
            self.outcome.done(key, -1, ORPHAN)
            log.warning(
                "terminated orphan instance %s in %s (never registered)", o.instance_id, o.pool
            )
        else:
            self.outcome.note(key, f"terminate {o.instance_id} failed")

    def _scale_up(self, up: ScaleUp, now: datetime) -> None:
        need, failed_over = up.need, False
        for index, slot in enumerate(up.slots):
            key = (up.runner_type, slot.pool)
            take, target = slot_target(slot, need)
            if take <= 0:
                continue
            if target <= slot.current:  # the group is already on its way there
                need -= take
                continue
            try:
                self.retry.call(
                    partial(self.pool.set_desired_capacity, slot.pool, target),
                    pool=slot.pool,
                    operation="set_desired_capacity",
                )
            except CapacityError as exc:
                self.state = self.state.capacity_failed(slot.pool, now, self.config.scaling)
                self.failures[slot.pool] = CapacityFailure(slot.pool, now, code=exc.code)
                seconds = self.state.backoff_seconds[slot.pool]
                self.metrics.provisioning_failures.labels(
                    up.runner_type, slot.pool, "capacity"
                ).inc()
                more = index + 1 < len(up.slots)
                if more:
                    self.metrics.pool_failovers.labels(up.runner_type, slot.pool).inc()
                    failed_over = True
                self.outcome.note(
                    key,
                    f"{exc.code}: backed off {seconds:.0f}s" + (", failing over" if more else ""),
                )
                log.warning(
                    "pool %s out of capacity (%s); backed off %.0fs", slot.pool, exc.code, seconds
                )
                continue
            except AutoscalerError as exc:
                self._problem(exc, up.runner_type, slot.pool, "set_desired_capacity")
                self.outcome.note(key, f"scale up failed ({exc.kind} {exc.code})")
                return
            self.state = self.state.scaled_up(slot.pool, now)
            self.provisioning.asked(slot.pool, target - slot.current, now)
            self.metrics.scale_actions.labels(up.runner_type, slot.pool, "scale_up").inc()
            text = f"scale up +{target - slot.current} after failover" if failed_over else ""
            self.outcome.done(key, target - slot.current, SCALE_UP, text)
            log.info("scaled up %s (%s): %d -> %d", slot.pool, up.runner_type, slot.current, target)
            need -= take
        if need > 0:
            self._out_of_capacity(up.runner_type)

    def _release(self, r: Release) -> None:
        """A pool the policy found failing to launch (and backed off): count it, and take
        its desired capacity back to what it has."""
        key = (r.runner_type, r.pool)
        self.metrics.provisioning_failures.labels(r.runner_type, r.pool, r.reason).inc()
        if r.failover:
            self.metrics.pool_failovers.labels(r.runner_type, r.pool).inc()
        log.log(
            logging.ERROR if r.reason == LAUNCH_REFUSED else logging.WARNING,
            "pool %s failed to launch (%s %s); backed off %.0fs%s",
            r.pool,
            r.reason,
            r.code or "-",
            self.state.backoff_seconds.get(r.pool, 0.0),
            f": {r.message}" if r.message else "",
        )
        if r.desired >= r.current:
            self.outcome.done(key, 0, RELEASE)
        elif self._cloud(
            r.runner_type,
            r.pool,
            "set_desired_capacity",
            partial(self.pool.set_desired_capacity, r.pool, r.desired),
        ):
            self.provisioning.released(r.pool, r.current - r.desired)
            self.outcome.done(key, r.desired - r.current, RELEASE)
        else:
            self.outcome.note(key, f"lowering desired to {r.desired} failed")

    # --- helpers

    def _memory_failed(self, exc: StateError) -> None:
        """The state store could not keep the scaler's memory: it stays in the process."""
        log.log(
            logging.WARNING if isinstance(exc, NotLeaderError) else logging.ERROR,
            "scaling memory (back-offs, pending terminations) not kept: %s",
            exc,
        )
        self.metrics.state_store_errors.labels(exc.operation or "unknown", exc.code).inc()

    def _out_of_capacity(self, runner_type: str) -> None:
        rt = self.config.runner_type(runner_type)
        pools = list(rt.pools)
        now_out = [p for p in pools if p in self.state.backoff_until]
        if pools and len(now_out) == len(pools):
            msg = f"every pool of {runner_type} is out of capacity: {', '.join(pools)}"
            log.error(msg)
            self.last_problems.append(ScalingProblem("out_of_capacity", runner_type, "", "", msg))

    def _cloud(self, runner_type: str, pool: str, operation: str, fn: Callable[[], None]) -> bool:
        try:
            self.retry.call(fn, pool=pool, operation=operation)
        except AutoscalerError as exc:
            self._problem(exc, runner_type, pool, operation)
            return False
        return True

    def _deregister(self, runner_type: str, pool: str, runner_id: int, name: str) -> str:
        """Deregister a runner: :data:`REMOVED`, :data:`BUSY` (GitHub's 422: it took a job;
        leave it), :data:`GONE` (GitHub's 404: it no longer exists, nothing to remove) or
        :data:`FAILED` (anything else; a permanent error is a problem)."""
        try:
            self.source.remove_runner(runner_id)
        except RejectedError:
            log.info("runner %s turned busy before removal; left alone", name)
            return BUSY
        except NotFoundError:
            log.info("runner %s is already gone at GitHub", name)
            return GONE
        except AutoscalerError as exc:
            self._problem(exc, runner_type, pool, "remove_runner")
            return FAILED
        return REMOVED

    def _problem(self, exc: AutoscalerError, runner_type: str, pool: str, operation: str) -> None:
        if isinstance(exc, PermanentError):
            msg = f"{operation} on {pool or 'pools'} failed permanently: {exc.code or exc.kind}"
            log.error(msg)
            self.last_problems.append(ScalingProblem("permanent", runner_type, pool, exc.code, msg))
        else:
            log.warning(
                "%s on %s failed (%s %s); next tick retries",
                operation,
                pool or "pools",
                exc.kind,
                exc.code,
            )
