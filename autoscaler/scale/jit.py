"""Carry out :func:`autoscaler.scale.ephemeral.plan_ephemeral` each tick, through ports.

Per instance of an ephemeral pool, in this order, so that no step leaves a registered
runner without a machine or a machine with two runners:

1. the *intent* (a :class:`JitRecord` without a runner id) is saved to the state store
   before GitHub is asked: a process that stops after GitHub answered finds it, and
   recovers instead of asking twice;
2. GitHub generates the runner (``generate-jitconfig``). Its 409 (the name is taken: ours
   from before a stop) is resolved by name: a runner online already is adopted; an
   offline one is deleted and the config asked for again, once;
3. the config is handed over: the SSM SecureString only that instance may read. If that
   fails (after the retry policy's attempts), the runner is deleted at GitHub again;
4. the record (runner id, parameter stored) is saved.

A permanent answer (422: labels or runner group refused; 403: the credentials lack
"Self-hosted runners: write") is paged every tick through :attr:`problems`; a transient
one (rate limit, 5xx) keeps the intent, and the next tick recovers. Every outcome is
counted in ``ci_autoscaler_jit_configs_total{runner_type,result}`` and logged.

Spent instances are terminated with the group's desired capacity decremented
(``ci_autoscaler_spent_instances_terminated_total{pool}``); a JIT runner never online
within ``boot_timeout`` is deleted, then its instance terminated as an orphan
(``provisioning_failures_total{reason="jit_never_online"}``). :meth:`EphemeralRunners.step`
returns the pools and runners as they are afterwards, for the policy to plan with.

Registering (steps 1-4) and the two ports it hands work to are in
:mod:`autoscaler.scale.jit_register` (a base class of :class:`EphemeralRunners`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import TypeVar

from autoscaler.config import Config
from autoscaler.domain import Observation, PoolState, Runner, ScalingProblem
from autoscaler.errors import AutoscalerError, NotFoundError, PermanentError, RejectedError
from autoscaler.ports import JobSource, RunnerPool
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.ephemeral import (
    EphemeralPlan,
    JitLedgerStore,
    JitRecord,
    NeverOnline,
    Spent,
    plan_ephemeral,
    without_instances,
)
from autoscaler.scale.jit_ledger import JitLedger
from autoscaler.scale.jit_register import JitRegistration, ParameterStore, RunnerRegistrar
from autoscaler.telemetry import Metrics

#: Importers of this module before the split keep their names.
__all__ = ["EphemeralRunners", "ParameterStore", "RunnerRegistrar"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class EphemeralRunners(JitRegistration):
    """The ephemeral duties of a tick, and the JIT ledger between ticks."""

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
        store: JitLedgerStore | None = None,
    ) -> None:
        self.config = config
        self.source = source
        self.registrar = registrar
        self.parameters = parameters
        self.pool = pool
        self.metrics = metrics
        self.retry = retry
        self.store = store
        self.ledger = JitLedger(store, metrics)
        self.swept = False
        self.problems: list[ScalingProblem] = []
        self.last_plan = EphemeralPlan()
        #: (runner type, pool) -> instances terminated this tick (spent or never online).
        self.terminated: dict[tuple[str, str], int] = {}
        #: Runner ids deleted at GitHub this tick (or found gone): the scaler remembers them,
        #: so a tick planning with an older runner list does not delete them again.
        self.removed_runners: list[int] = []

    # --- the tick

    def step(
        self,
        pools: dict[str, PoolState],
        observation: Observation | None,
        now: datetime,
        *,
        observation_fresh: bool,
        exclude: Collection[str] = (),
    ) -> tuple[dict[str, PoolState], tuple[Runner, ...]]:
        """Do this tick's duties; return the pools and runners the policy plans with."""
        self.problems, self.terminated, self.removed_runners = [], {}, []
        runners = observation.runners if observation is not None else ()
        if not self.ledger.load():
            return pools, runners
        listed = self._list_parameters()
        plan = plan_ephemeral(
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
        for stray in plan.stray_parameters:
            if self._delete_parameter(stray.pool, stray.instance_id):
                log.info(
                    "deleted JIT parameter of %s %s left behind", stray.pool, stray.instance_id
                )
        for r in plan.register:
            self._register(r, now)
        self.ledger.flush()
        left = tuple(r for r in runners if r.name not in deleted)
        return without_instances(pools, removed), left

    def forget(self) -> None:
        """Another process may change the ledger now (this one is not acting): read it
        again from the store before acting next."""
        self.ledger.forget()

    # --- duties

    def _spent(self, s: Spent) -> bool:
        if not self._terminate(s.runner_type, s.pool, s.instance_id):
            return False
        self.metrics.spent_instances_terminated.labels(s.pool).inc()
        log.info(
            "runner %s ran its job: instance %s terminated (desired capacity decremented)",
            s.record.runner_name,
            s.instance_id,
        )
        if s.record.parameter:
            self._delete_parameter(s.pool, s.instance_id)
        self.ledger.drop(s.instance_id)
        return True

    def _never_online(self, n: NeverOnline) -> bool:
        outcome = self._remove(n.runner_id, n.record.runner_name, n.runner_type, n.pool)
        if outcome == "busy":
            log.info("JIT runner %s connected just now and took a job: kept", n.record.runner_name)
            return False
        if outcome == "failed":
            return False
        self.metrics.provisioning_failures.labels(n.runner_type, n.pool, "jit_never_online").inc()
        log.warning(
            "JIT runner %s never came online within boot_timeout: deleted at GitHub",
            n.record.runner_name,
        )
        record = n.record
        if record.parameter and self._delete_parameter(n.pool, n.instance_id):
            record = replace(record, parameter=False)
        if self._terminate(n.runner_type, n.pool, n.instance_id):
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

    def _came_online(self, record: JitRecord) -> None:
        if record.parameter and not self._delete_parameter(record.pool, record.instance_id):
            return  # retried next tick (online_at stays unset)
        self.ledger.put(replace(record, parameter=False))
        log.info("JIT runner %s is online: its parameter is deleted", record.runner_name)

    def _gone(self, record: JitRecord, *, listed: bool) -> None:
        """The instance left its pool: no runner may stay registered without it."""
        if record.runner_id is not None and (listed or record.online_at is None):
            outcome = self._remove(
                record.runner_id, record.runner_name, record.runner_type, record.pool
            )
            if outcome == "failed":
                return
        if record.parameter and not self._delete_parameter(record.pool, record.instance_id):
            return
        self.ledger.drop(record.instance_id)

    # --- helpers

    def _terminate(self, runner_type: str, pool: str, instance_id: str) -> bool:
        try:
            self.retry.call(
                partial(self.pool.terminate_instance, pool, instance_id),
                pool=pool,
                operation="terminate",
            )
        except AutoscalerError as exc:
            self._problem(exc, runner_type, pool, "terminate")
            return False
        key = (runner_type, pool)
        self.terminated[key] = self.terminated.get(key, 0) + 1
        return True

    def _remove(self, runner_id: int, name: str, runner_type: str, pool: str) -> str:
        """Delete a runner at GitHub: ``removed``, ``gone`` (404), ``busy`` (422: it took
        a job) or ``failed``."""
        try:
            self.source.remove_runner(runner_id)
        except NotFoundError:
            self.metrics.runner_deletions_already_gone.labels(runner_type, pool).inc()
            log.info("JIT runner %s (id %d) is already gone at GitHub (404)", name, runner_id)
            self.removed_runners.append(runner_id)
            return "gone"
        except RejectedError:
            return "busy"
        except AutoscalerError as exc:
            self._problem(exc, runner_type, pool, "remove_runner")
            return "failed"
        log.info("deleted JIT runner %s (id %d)", name, runner_id)
        self.removed_runners.append(runner_id)
        return "removed"

    def _delete_parameter(self, pool: str, instance_id: str) -> bool:
        name = self.config.jit.parameter_name(pool, instance_id)
        try:
            self.retry.call(
                partial(self.parameters.delete, name), pool=pool, operation="delete_parameter"
            )
        except AutoscalerError as exc:
            self._problem(exc, "", pool, "delete_parameter")
            return False
        return True

    def _list_parameters(self) -> list[tuple[str, str]] | None:
        """The (pool, instance id) of parameters under the JIT path, once after a start
        (a stop can leave one behind); None on the other ticks."""
        if self.swept or not any(rt.ephemeral for rt in self.config.runner_types):
            return None
        root = self.config.jit.parameter_path + "/"
        names = self._call(lambda: self.parameters.list_names(self.config.jit.parameter_path))
        if names is None:
            return None
        self.swept = True
        out = []
        for name in names:
            pool, _, iid = name.removeprefix(root).rpartition("/")
            if name.startswith(root) and pool and "/" not in pool and iid:
                out.append((pool, iid))
        return out

    def _call(self, fn: Callable[[], T]) -> T | None:
        try:
            return self.retry.call(fn, operation="list_parameters")
        except AutoscalerError as exc:
            self._problem(exc, "", "", "list_parameters")
            return None

    def _count(self, runner_type: str, result: str) -> None:
        self.metrics.jit_configs.labels(runner_type, result).inc()

    def _problem(self, exc: AutoscalerError, runner_type: str, pool: str, operation: str) -> None:
        if isinstance(exc, PermanentError):
            where = pool or "ephemeral pools"
            msg = f"{operation} on {where} failed permanently: {exc.code or exc.kind}"
            log.error("%s (%s)", msg, exc)
            self.problems.append(ScalingProblem("permanent", runner_type, pool, exc.code, msg))
        else:
            log.warning(
                "%s on %s failed (%s %s); next tick retries",
                operation,
                pool or "ephemeral pools",
                exc.kind,
                exc.code,
            )
