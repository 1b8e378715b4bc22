"""Carry out :func:`autoscaler.scale.handover.plan_handover` each tick, through ports, and
withdraw an orphan's credential before the orphan sweep terminates it.

Each tick, in this order: spent ephemeral instances are terminated with the group's
desired capacity decremented (``ci_autoscaler_spent_instances_terminated_total{pool}``); a
JIT runner never online within ``boot_timeout`` is deleted at GitHub (refused while it runs
a job), then its instance terminated as an orphan
(``provisioning_failures_total{reason="jit_never_online"}``); parameters that served are
deleted; records of instances gone are dropped; new instances are handed their credential
(:mod:`autoscaler.scale.registration`). :meth:`HandoverDuties.step` returns the pools and
runners as they are afterwards, for the policy to plan with.

**Withdrawing an orphan's credential** (:meth:`HandoverDuties.withdraw`). The orphan
sweep picks an instance with no runner in the poll's list past ``boot_timeout``. Before it
is terminated, its runner is made unable to take a job, so no order of GitHub's events
can kill a busy runner:

1. the instance's parameter is deleted: from then on it can read no credential;
2. GitHub is asked for the runner by name;
3. ephemeral: a runner that exists is deleted at GitHub first. GitHub refuses (422) while
   it runs a job, and the instance stays; once deleted, its config is worthless. A JIT
   runner exists from the moment its config is made, so a config read before step 1
   belongs to a runner step 2 finds;
4. persistent: a runner that exists is not an orphan's (kept: the scale-in path owns it).
   With none, the instance may still hold a registration token it claimed before step 1
   and register a moment later. It can only if it claimed one: when step 1 deleted the
   parameter the machine never had the token (:attr:`HandoverRecord.withdrawn`), and the
   instance goes now; when the machine had claimed it, the instance is kept until the
   token expires (with a margin for the clocks), then looked at again. A token is
   recorded before it is stored, so a parameter the ledger does not know was never
   written, and an instance without a record never held a token.

The reasons an orphan is kept are counted in ``ci_autoscaler_orphans_kept_total{reason}``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from autoscaler.config import Config
from autoscaler.domain import Observation, PoolState, Runner, ScalingProblem
from autoscaler.errors import AutoscalerError
from autoscaler.ports import JobSource, RunnerPool
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.handover import (
    TOKEN,
    HandoverPlan,
    HandoverRecord,
    HandoverStore,
    NeverOnline,
    Spent,
    plan_handover,
    runner_name,
    without_instances,
)
from autoscaler.scale.handover_ledger import HandoverLedger
from autoscaler.scale.plan import SKEW_FRACTION
from autoscaler.scale.registration import (
    BUSY,
    FAILED,
    HandoverCalls,
    ParameterStore,
    Registration,
    RunnerRegistrar,
)
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

#: What :meth:`HandoverDuties.withdraw` decided: terminate, or keep (the reason, as counted
#: in ``orphans_kept_total``).
TERMINATE = "terminate"
KEPT_REGISTERED, KEPT_BUSY, KEPT_LOOKUP, KEPT_WITHDRAW, KEPT_TOKEN = (
    "registered",
    "busy",
    "lookup_failed",
    "withdraw_failed",
    "token_live",
)


class HandoverDuties:
    """The handover duties of a tick, the ledger between ticks, and orphan withdrawal."""

    def __init__(  # noqa: PLR0917 (the ports it drives)
        self,
        config: Config,
        source: JobSource,
        registrar: RunnerRegistrar,
        parameters: ParameterStore,
        pool: RunnerPool,
        metrics: Metrics,
        retry: RetryPolicy,
        *,
        store: HandoverStore | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.calls = HandoverCalls(config, source, registrar, parameters, pool, metrics, retry)
        self.ledger = HandoverLedger(store, metrics)
        self.registration = Registration(self.calls, self.ledger)
        self.swept = False
        self.last_plan = HandoverPlan()

    @property
    def problems(self) -> list[ScalingProblem]:
        """This tick's problems for on-call (the orphan sweep's withdrawals included)."""
        return self.calls.problems

    @property
    def terminated(self) -> dict[tuple[str, str], int]:
        """(runner type, pool) -> instances terminated this tick (spent or never online)."""
        return self.calls.terminated

    @property
    def removed_runners(self) -> list[int]:
        """Runner ids deleted at GitHub this tick (or found gone)."""
        return self.calls.removed_runners

    # --- the tick

    def step(
        self,
        pools: dict[str, PoolState],
        observation: Observation | None,
        now: datetime,
        *,
        observation_fresh: bool,
        exclude: Collection[str] = (),
        warm: Mapping[str, Collection[str]] | None = None,
    ) -> tuple[dict[str, PoolState], tuple[Runner, ...]]:
        """Do this tick's duties; return the pools and runners the policy plans with."""
        self.calls.new_tick()
        runners = observation.runners if observation is not None else ()
        if not self.ledger.load():
            return pools, runners
        listed = self._list_parameters()
        plan = plan_handover(
            self.config,
            pools,
            runners,
            self.ledger.records,
            now,
            # when the runner list was read: a webhook tick's is the last poll's, older than
            # a config asked for since (its runner is missing from it, not spent)
            observed_at=observation.runners_seen_at if observation is not None else None,
            observation_fresh=observation_fresh,
            runners_complete=observation is None or observation.skipped_runners == 0,
            parameters=listed,
            exclude=exclude,
            warm=warm,
        )
        self.last_plan = plan
        removed: set[str] = set()
        names = {r.name for r in runners}
        for s in plan.spent:
            if self._spent(s):
                removed.add(s.instance_id)
        deleted: set[str] = set()
        for n in plan.never_online:
            if self._never_online(n):
                removed.add(n.instance_id)
                deleted.add(n.record.runner_name)
        for record in plan.came_online:
            self._came_online(record)
        for record in plan.gone:
            self._gone(record, listed=record.runner_name in names)
        for record in plan.parked:
            self._parked(record)
        for stray in plan.stray_parameters:
            if self.calls.delete_parameter(stray.pool, stray.instance_id) is not None:
                log.info("deleted parameter of %s %s left behind", stray.pool, stray.instance_id)
        for r in plan.register:
            self.registration.register(r, now)
        self.ledger.flush()
        left = tuple(r for r in runners if r.name not in deleted)
        return without_instances(pools, removed), left

    def forget(self) -> None:
        """Another process may change the ledger now (this one is not acting): read it
        again from the store before acting next."""
        self.ledger.forget()

    # --- the orphan sweep

    def withdraw(
        self, runner_type: str, pool: str, instance_id: str, now: datetime
    ) -> tuple[str, Runner | None]:
        """Make the runner that could run on an orphan instance unable to take a job
        (the module docstring says how): :data:`TERMINATE`, or the reason it is kept, and
        the runner GitHub knows by the instance's name (if any)."""
        c = self.calls
        name = runner_name(pool, instance_id)
        ephemeral = self.config.runner_type(runner_type).ephemeral
        if not self.ledger.load():
            return KEPT_WITHDRAW, None
        record = self.ledger.records.get(instance_id)
        existed = c.delete_parameter(pool, instance_id)
        if existed is None:
            return KEPT_WITHDRAW, None
        if record is not None and (existed or record.parameter):
            withdrawn = record.withdrawn or (existed and record.kind == TOKEN)
            record = replace(record, parameter=False, withdrawn=withdrawn)
            self.ledger.put(record)
            self.ledger.flush()
        try:
            runner = c.source.find_runner(name)
        except AutoscalerError as exc:
            c.problem(exc, runner_type, pool, "find_runner")
            return KEPT_LOOKUP, None
        if runner is not None and not ephemeral:
            return KEPT_REGISTERED, runner
        if runner is not None:
            outcome = c.remove_runner(runner.id, runner.name, runner_type, pool)
            if outcome == BUSY:
                return KEPT_BUSY, runner
            if outcome == FAILED:
                return KEPT_WITHDRAW, runner
        if record is not None and record.kind == TOKEN and not record.withdrawn:
            # The machine claimed its token: it may register until the token expires on
            # GitHub's clock. Ours may be behind by up to the skew the orphan sweep
            # tolerates, plus a minute for the registration in flight.
            rt = self.config.runner_type(runner_type)
            margin = timedelta(seconds=SKEW_FRACTION * rt.boot_timeout + 60.0)
            if record.expires_at is None or now < record.expires_at + margin:
                return KEPT_TOKEN, None
        return TERMINATE, runner

    def terminated_orphan(self, instance_id: str) -> None:
        """The orphan sweep terminated ``instance_id``: its record goes."""
        if instance_id in self.ledger.records:
            self.ledger.drop(instance_id)
            self.ledger.flush()

    # --- duties

    def _spent(self, s: Spent) -> bool:
        c = self.calls
        if not c.terminate(s.runner_type, s.pool, s.instance_id):
            return False
        self.metrics.spent_instances_terminated.labels(s.pool).inc()
        log.info(
            "runner %s ran its job: instance %s terminated (desired capacity decremented)",
            s.record.runner_name,
            s.instance_id,
        )
        if s.record.parameter:
            c.delete_parameter(s.pool, s.instance_id)
        self.ledger.drop(s.instance_id)
        return True

    def _never_online(self, n: NeverOnline) -> bool:
        c = self.calls
        outcome = c.remove_runner(n.runner_id, n.record.runner_name, n.runner_type, n.pool)
        if outcome == BUSY:
            log.info("JIT runner %s connected just now and took a job: kept", n.record.runner_name)
            return False
        if outcome == FAILED:
            return False
        self.metrics.provisioning_failures.labels(n.runner_type, n.pool, "jit_never_online").inc()
        log.warning(
            "JIT runner %s never came online within boot_timeout: deleted at GitHub",
            n.record.runner_name,
        )
        record = n.record
        if record.parameter and c.delete_parameter(n.pool, n.instance_id) is not None:
            record = replace(record, parameter=False)
        if c.terminate(n.runner_type, n.pool, n.instance_id):
            self.metrics.scale_actions.labels(n.runner_type, n.pool, "terminate_orphan").inc()
            log.warning("terminated orphan instance %s in %s", n.instance_id, n.pool)
            if record.parameter:
                self.ledger.put(record)  # the gone duty deletes it once the instance is gone
            else:
                self.ledger.drop(n.instance_id)
            return True
        # The record stays (its runner is gone now): the next tick finds the instance spent
        # and terminates it, and never gives it a second config.
        self.ledger.put(record)
        return False

    def _came_online(self, record: HandoverRecord) -> None:
        c = self.calls
        if record.parameter and c.delete_parameter(record.pool, record.instance_id) is None:
            return  # retried next tick (online_at stays unset)
        self.ledger.put(replace(record, parameter=False))
        log.info("runner %s is online: its parameter is deleted", record.runner_name)

    def _parked(self, record: HandoverRecord) -> None:
        """The instance went back to the warm pool: its token is stale by the time it
        returns, so the parameter goes and the next stint gets a fresh one."""
        if (
            record.parameter
            and self.calls.delete_parameter(record.pool, record.instance_id) is None
        ):
            return  # retried next tick
        self.ledger.put(replace(record, parameter=False, warmed=True))
        log.info("%s went back to the warm pool: a fresh token when it returns", record.runner_name)

    def _gone(self, record: HandoverRecord, *, listed: bool) -> None:
        """The instance left its pool: no runner we created may stay registered without it."""
        c = self.calls
        if record.runner_id is not None and (listed or record.online_at is None):
            outcome = c.remove_runner(
                record.runner_id, record.runner_name, record.runner_type, record.pool
            )
            if outcome == FAILED:
                return
        if record.parameter and c.delete_parameter(record.pool, record.instance_id) is None:
            return
        self.ledger.drop(record.instance_id)

    def _list_parameters(self) -> list[tuple[str, str]] | None:
        """The (pool, instance id) of parameters under the path, once after a start (a stop
        can leave one behind); None on the other ticks."""
        if self.swept or not any(rt.pools for rt in self.config.runner_types):
            return None
        root = self.config.jit.parameter_path + "/"
        c = self.calls
        path = self.config.jit.parameter_path
        names = c.call(lambda: c.parameters.list_names(path), "list_parameters")
        if names is None:
            return None
        self.swept = True
        out = []
        for name in names:
            pool, _, iid = name.removeprefix(root).rpartition("/")
            if name.startswith(root) and pool and "/" not in pool and iid:
                out.append((pool, iid))
        return out
