"""Act on the policy's plan: the part of a tick that changes the cloud and the CI provider.

Each tick :meth:`Scaler.step` describes the pools, asks :func:`autoscaler.scale.policy.decide`
for a plan and executes it (the acting itself is :mod:`autoscaler.scale.execute`), every
cloud call through one :class:`RetryPolicy`:

- protect new instances from scale-in (the group never picks a victim itself);
- scale up, failing over to the next pool on :class:`CapacityError` and backing the
  failed pool off (``capacity_backoff_initial`` doubling to ``capacity_backoff_max``,
  reset once the pool delivers);
- release pools whose launches failed after they accepted a scale-up (the policy found a
  Failed scaling activity or a pool stuck short past ``boot_timeout``, and backed it off):
  their desired capacity goes back to the instances they have, the need fails over;
- scale in: write the scale-in down in the state store, deregister the runner, and only
  when that succeeds terminate its instance; a runner that turned busy in between
  (:class:`RejectedError`) is left alone; a runner GitHub no longer knows
  (:class:`NotFoundError`) is gone, so its instance is an orphan candidate, left to the
  orphan sweep and its checks; a termination not done (it failed, or the process died
  or lost the lease after the deregistration) is retried first next tick, by whichever
  controller leads then;
- terminate orphan instances, each only after its credential was withdrawn and its runner
  made unable to take a job (:meth:`HandoverDuties.withdraw`): the poll's list can be
  seconds old, and a runner that registered in between may already run a job. Deregister
  runners whose instance is gone. A runner deleted (or found gone, GitHub's 404) is
  remembered until a runner list read after the deletion arrives: a webhook tick plans
  with the last poll's list, and deleted it again every tick until the next reconcile.

Capacity back-off, the last scale-up, refused launches and pending terminations are kept
in the state store (``memory``, :mod:`autoscaler.scale.memory`): read before a tick
decides, written before its scale-ins start and after it acted, so a restart or a
failover forgets none of them.

What on-call must hear about (permanent errors with their code, every pool of a type out
of capacity, a configured pool that does not exist) is in :attr:`Scaler.last_problems`.
``dry_run`` describes and decides, and changes nothing.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from autoscaler.config import Config
from autoscaler.domain import (
    ClockSkew,
    JobStart,
    JobWait,
    Observation,
    QueueSnapshot,
    ScalingProblem,
)
from autoscaler.errors import AutoscalerError, NotLeaderError, StateError
from autoscaler.observe.waits import wait_stages
from autoscaler.ports import JobSource, RunnerPool, WarmPools, instance_id_of
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.execute import PlanExecution, report_problem
from autoscaler.scale.handover import HandoverStore
from autoscaler.scale.handover_duties import HandoverDuties
from autoscaler.scale.memory import Recollection, ScalingMemoryStore
from autoscaler.scale.outcome import TickOutcome, record_pool_metrics, release_failures
from autoscaler.scale.plan import HOLD, Decision, Plan, ScalingState
from autoscaler.scale.policy import decide, pool_of_runner
from autoscaler.scale.provisioning import ProvisioningClock
from autoscaler.scale.registration import ParameterStore, RunnerRegistrar
from autoscaler.scale.view import CapacityFailure, ScalingView
from autoscaler.scale.warm import from_warm, warm_instances
from autoscaler.scale.warm_keeper import WarmPoolKeeper
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


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
        registrar: RunnerRegistrar,
        parameters: ParameterStore,
        handover_store: HandoverStore | None = None,
        memory: ScalingMemoryStore | None = None,
        warm_pools: WarmPools | None = None,
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
        #: Every instance's runner credential (JIT configs, registration tokens), spent
        #: ephemeral machines, and withdrawing an orphan's credential.
        self.handover = HandoverDuties(
            config, source, registrar, parameters, pool, metrics, self.retry, store=handover_store
        )
        #: Back-offs, last scale-ups, refused launches and pending terminations, kept in
        #: the state store across restarts and failovers.
        self.memory = None if memory is None else Recollection(memory, self._memory_failed)
        #: Instance id -> when it was last seen in a warm pool (its boot clock restarts
        #: when it leaves: :func:`autoscaler.scale.warm.from_warm`).
        self.warmed_at: dict[str, datetime] = {}
        #: The listed groups' warm pools (none without a port: a pool with no warm pools).
        self.warm = (
            None
            if warm_pools is None or not config.pools
            else WarmPoolKeeper(warm_pools, config, metrics, self.retry, report_problem)
        )

    # --- the tick

    def pool_interrupted(self, pool: str, now: datetime, code: str) -> None:
        """AWS warned it is taking an instance of ``pool`` (a Spot interruption or rebalance
        recommendation): the pool gets the capacity back-off a failed launch gets, so the
        type's demand moves to its next pool. Kept as it is while backed off."""
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
            report_problem(self.last_problems, exc, "", "", "describe")
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
        # Described before the decision (its instances are the warm pool's, not orphans);
        # put after it (a ``size: slo`` warm pool takes the size the policy decided).
        found = {} if self.warm is None else self.warm.describe(list(pools), self.last_problems)
        in_warm = warm_instances(found)
        self._remember_warm(in_warm, now)
        pools = from_warm(pools, self.warmed_at, self.pool.clock_skew() or 0.0)
        runners = observation.runners if observation is not None else ()
        fresh = observation_fresh and observation is not None
        if dry_run:
            # Another process may act meanwhile (a leader, when this one follows): read the
            # handover ledger again before this one acts next.
            self.handover.forget()
        else:
            # Spent and expired ephemeral instances go first: the policy plans without them.
            pools, runners = self.handover.step(
                pools,
                observation,
                now,
                observation_fresh=fresh,
                exclude=set(self.state.pending_terminations),
                warm=in_warm,
            )
            self.last_problems.extend(self.handover.problems)
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
            runners_seen_at=observation.runners_seen_at if observation is not None else None,
            warm=frozenset().union(*in_warm.values()),
        )
        self.last_plan = plan
        warm = (
            ()
            if self.warm is None
            else self.warm.apply(
                found,
                self.last_problems,
                dry_run=dry_run,
                sized={w.pool: w.spec for w in plan.warm_sizes},
            )
        )
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
            for key, n in self.handover.terminated.items():
                self.outcome.note(key, f"{n} ephemeral instance(s) done with their job terminated")
            problems = len(self.handover.problems)
            self._execute(plan, now)
            # The orphan sweep's withdrawals report through the duties' problem list.
            self.last_problems.extend(self.handover.problems[problems:])
            # Remembered for the ticks after this one: this tick's plan keeps a runner the
            # duties deleted but whose machine they could not terminate, on purpose (its
            # instance must not look like an orphan; the duties terminate it).
            self.state = self.state.runners_removed(self.handover.removed_runners, now)
            decisions, state = self.outcome.decisions(plan), self.state
            self.failures = failures = {
                p: f for p, f in self.failures.items() if p in self.state.backoff_seconds
            }
            if self.memory is not None:
                self.memory.remember(self.state)
        self.last_view = ScalingView(pools, plan, tuple(decisions), state, failures, warm)
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

    def job_waits(
        self, starts: Sequence[JobStart], observation: Observation | None
    ) -> list[JobWait]:
        """Where each started job's wait went, for the jobs that started on a runner this
        controller asked for (its runner answered one of our scale-ups); call after
        :meth:`step`, which saw the runners come online."""
        if observation is None or not starts:
            return []
        runners = {r.name: r for r in observation.runners}
        pools = self.last_view.pools if self.last_view is not None else {}
        out = []
        for start in starts:
            name, created, started = start.runner_name, start.created_at, start.started_at
            runner = runners.get(name or "")
            if runner is None or created is None or started is None:
                continue
            answer = self.provisioning.answer(runner.id)
            if answer is None:
                continue  # not a runner we asked for (warm before we watched, or not ours)
            asked, online = answer
            iid = instance_id_of(runner.name)
            pool_name = pool_of_runner(runner, list(self._type_of)) or ""
            pool = pools.get(pool_name)
            running = next(
                (i.launched_at for i in (pool.instances if pool else ()) if i.id == iid), None
            )
            stages = wait_stages(created, start.first_seen, asked, running, online, started)
            out.append(
                JobWait(
                    start.runner_type,
                    stages,
                    started_at=started,
                    created_at=created,
                    pool=pool_name,
                    repository=start.repository,
                    job_id=start.job_id,
                )
            )
        return out

    def _remember_warm(self, in_warm: Mapping[str, frozenset[str]], now: datetime) -> None:
        """When each instance was last seen in a warm pool (kept a day: an instance in
        service longer than that has had its boot clock long enough)."""
        for ids in in_warm.values():
            self.warmed_at.update(dict.fromkeys(ids, now))
        cutoff = now - timedelta(days=1)
        self.warmed_at = {i: at for i, at in self.warmed_at.items() if at >= cutoff}

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
        """Act on the plan (:mod:`autoscaler.scale.execute`), then keep the state it left."""
        run = PlanExecution(
            self.pool,
            self.source,
            self.config,
            self.metrics,
            self.retry,
            self.provisioning,
            state=self.state,
            failures=self.failures,
            outcome=self.outcome,
            problems=self.last_problems,
            clock_skew=self.last_clock_skew,
            handover=self.handover,
            record=None if self.memory is None else self.memory.remember,
        )
        run.execute(plan, now)
        self.state = run.state

    # --- helpers

    def _memory_failed(self, exc: StateError) -> None:
        """The state store could not keep the scaler's memory: it stays in the process."""
        log.log(
            logging.WARNING if isinstance(exc, NotLeaderError) else logging.ERROR,
            "scaling memory (back-offs, pending terminations) not kept: %s",
            exc,
        )
        self.metrics.state_store_errors.labels(exc.operation or "unknown", exc.code).inc()
