"""Carry out one tick's plan: the adapter calls a :class:`~autoscaler.scale.plan.Plan` asks for.

:class:`autoscaler.scale.scaler.Scaler` keeps what lasts between ticks and runs the tick
(describe, decide, record); the policy decides, purely. What is left, and lives here, is
acting: every cloud and GitHub call of one plan, each through the retry policy, in the order
the policy relies on, with the rules that make acting safe:

- scale up pool by pool, failing over on :class:`CapacityError` and backing the pool off;
- scale in by writing the scale-in down in the state store, then deregistering the
  runner, and terminating its instance only then (a runner that turned busy is left
  alone; a failed termination stays pending). A scale-in its process did not finish (it
  died, or lost the lease, between the two calls) is finished by the next leader: it
  terminates the instance if GitHub no longer knows the runner;
- terminate an orphan only once its credential is withdrawn and no runner that could take
  a job is left on it (:meth:`HandoverDuties.withdraw`);
- release the desired capacity of pools that failed to launch.

A :class:`PlanExecution` lives for one tick: it starts from the scaler's state, failures,
outcome and problem list, and the scaler reads the state back when the plan is done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial

from autoscaler.config import Config
from autoscaler.domain import ClockSkew, ScalingProblem
from autoscaler.errors import (
    AutoscalerError,
    CapacityError,
    NotFoundError,
    PermanentError,
    RejectedError,
)
from autoscaler.ports import JobSource, RunnerPool
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.handover_duties import TERMINATE, HandoverDuties
from autoscaler.scale.outcome import TickOutcome
from autoscaler.scale.plan import (
    LAUNCH_REFUSED,
    ORPHAN,
    RELEASE,
    SCALE_IN,
    SCALE_UP,
    STALE,
    PendingTermination,
    Plan,
    Release,
    ScaleIn,
    ScaleUp,
    ScalingState,
    TerminateOrphan,
    slot_target,
)
from autoscaler.scale.provisioning import ProvisioningClock
from autoscaler.scale.view import CapacityFailure
from autoscaler.telemetry import Metrics

#: The scaler's logger: its log lines keep the name they had before the acting moved here.
log = logging.getLogger("autoscaler.scale.scaler")

#: What deregistering a runner came to.
REMOVED, BUSY, GONE, FAILED = "removed", "busy", "gone", "failed"
#: Why an orphan candidate was kept, for the decision's reason.
_KEPT = {
    "registered": "its runner registered since the poll",
    "busy": "its runner took a job (GitHub refused to delete it)",
    "lookup_failed": "GitHub could not be asked about its runner",
    "withdraw_failed": "its credential or runner could not be withdrawn",
    "token_live": "it may still register with the token it took, until that expires",
}


@dataclass
class PlanExecution:
    """One tick's acting: the ports it calls and the tick's state it changes."""

    pool: RunnerPool
    source: JobSource
    config: Config
    metrics: Metrics
    retry: RetryPolicy
    provisioning: ProvisioningClock
    #: The scaling state; replaced by each action that changes it (read back by the scaler).
    state: ScalingState
    #: Pool -> its last capacity failure; a failed scale-up adds one (shared with the scaler).
    failures: dict[str, CapacityFailure]
    #: What this tick did per (type, pool).
    outcome: TickOutcome
    #: What on-call must hear about; appended to (shared with the scaler).
    problems: list[ScalingProblem]
    #: The clock skew the plan was decided with (for the log of orphans kept).
    clock_skew: ClockSkew
    #: Withdraws an orphan's credential before it is terminated.
    handover: HandoverDuties
    #: Writes the scaler's memory to the state store now; False if it could not be kept.
    #: None: no store (nothing outlives the process anyway).
    record: Callable[[ScalingState], bool] | None = None

    def execute(self, plan: Plan, now: datetime) -> None:
        """Every action of ``plan``, in the order the policy relies on."""
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
        for si in self._write_ahead(plan.scale_ins, now):
            self._scale_in(si, now)
        for o in plan.orphans:
            self._orphan(o, now)
        for o in plan.orphans_held:
            self.metrics.orphans_kept.labels(o.runner_type, o.pool, "clock_skew").inc()
        if plan.orphans_held:
            log.warning(
                "%d orphan instance(s) kept: clocks disagree by %.0fs (github %s, aws %s)",
                len(plan.orphans_held),
                self.clock_skew.worst,
                self.clock_skew.github,
                self.clock_skew.aws,
            )
        for st in plan.stale_runners:
            outcome = self._deregister(st.runner_type, st.pool, st.runner_id, st.runner_name, now)
            if outcome == REMOVED:
                self.metrics.scale_actions.labels(st.runner_type, st.pool, "deregister_stale").inc()
                self.outcome.done((st.runner_type, st.pool), 0, STALE)
                log.info("deregistered offline runner %s (instance gone)", st.runner_name)

    def _write_ahead(self, scale_ins: tuple[ScaleIn, ...], now: datetime) -> tuple[ScaleIn, ...]:
        """Write this tick's scale-ins down (pending terminations, not yet deregistered)
        before any runner is deregistered, so that a successor finishes them; none starts
        if the write fails."""
        if not scale_ins:
            return ()
        state = self.state
        for si in scale_ins:
            state = state.termination_pending(
                PendingTermination(
                    si.runner_type, si.pool, si.instance_id, si.runner_name, now, False
                )
            )
        if self.record is not None and not self.record(state):
            for si in scale_ins:
                self.outcome.note(
                    (si.runner_type, si.pool),
                    f"runner {si.runner_name} kept: the scale-in could not be written down",
                )
            log.warning(
                "%d scale-in(s) not started: the state store did not keep them", len(scale_ins)
            )
            return ()
        self.state = state
        return scale_ins

    def _scale_in(self, si: ScaleIn, now: datetime) -> None:
        key = (si.runner_type, si.pool)
        outcome = self._deregister(si.runner_type, si.pool, si.runner_id, si.runner_name, now)
        if outcome != REMOVED:
            self.state = self.state.termination_done(si.instance_id)
        if outcome == GONE:
            self.outcome.note(
                key, f"runner {si.runner_name} already gone: instance left to orphan sweep"
            )
            return
        if outcome != REMOVED:
            self.outcome.note(key, f"runner {si.runner_name} kept")
            return
        pending = self.state.pending_terminations[si.instance_id]
        self.state = self.state.termination_pending(replace(pending, deregistered=True))
        if self._terminate(si.runner_type, si.pool, si.instance_id):
            self.state = self.state.termination_done(si.instance_id)
            log.info(
                "scaled in %s: runner %s deregistered, instance %s terminated",
                si.pool,
                si.runner_name,
                si.instance_id,
            )
            return
        self.metrics.deferred_terminations.labels(si.runner_type, si.pool).inc()
        self.outcome.note(key, f"terminate {si.instance_id} failed: retried first next tick")
        log.warning(
            "runner %s deregistered but instance %s not terminated; retried first next tick",
            si.runner_name,
            si.instance_id,
        )

    def _retry_termination(self, pt: PendingTermination) -> None:
        """A termination not done yet, tried again. Of a scale-in whose process may have
        died before the deregistration, only when GitHub no longer knows the runner: one it
        still has was never deregistered, and may run a job; it is the policy's again."""
        key = (pt.runner_type, pt.pool)
        if not pt.deregistered:
            try:
                runner = self.source.find_runner(pt.runner_name)
            except AutoscalerError as exc:
                self._problem(exc, pt.runner_type, pt.pool, "find_runner")
                self.outcome.note(key, f"cannot ask GitHub about {pt.runner_name}: retried")
                return
            if runner is not None:
                self.state = self.state.termination_done(pt.instance_id)
                self.outcome.note(key, f"runner {pt.runner_name} still registered: kept")
                log.info(
                    "scale-in of %s did not reach its deregistration: runner kept",
                    pt.runner_name,
                )
                return
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

    def _orphan(self, o: TerminateOrphan, now: datetime) -> None:
        """Terminate an orphan once its credential is withdrawn and no runner that could
        take a job is left on it; otherwise keep it (counted, with the reason)."""
        key = (o.runner_type, o.pool)
        verdict, runner = self.handover.withdraw(o.runner_type, o.pool, o.instance_id, now)
        if verdict != TERMINATE:
            self.metrics.orphans_kept.labels(o.runner_type, o.pool, verdict).inc()
            self.outcome.note(key, f"{o.instance_id}: {_KEPT.get(verdict, verdict)}: kept")
            log.info(
                "orphan candidate %s kept: %s%s",
                o.instance_id,
                _KEPT.get(verdict, verdict),
                "" if runner is None else f" ({runner.name}, {runner.state.value})",
            )
            return
        if self._cloud(
            o.runner_type,
            o.pool,
            "terminate",
            partial(self.pool.terminate_instance, o.pool, o.instance_id),
        ):
            self.handover.terminated_orphan(o.instance_id)
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

    def _out_of_capacity(self, runner_type: str) -> None:
        """Every pool of the type failed for capacity and none delivered since (its
        back-off memory is reset only then): one problem per type and tick."""
        rt = self.config.runner_type(runner_type)
        pools = list(rt.pools)
        said = any(
            p.kind == "out_of_capacity" and p.runner_type == runner_type for p in self.problems
        )
        now_out = [p for p in pools if self.state.capacity_failing(p)]
        if pools and len(now_out) == len(pools) and not said:
            msg = f"every pool of {runner_type} is out of capacity: {', '.join(pools)}"
            log.error(msg)
            self.problems.append(ScalingProblem("out_of_capacity", runner_type, "", "", msg))

    def _cloud(self, runner_type: str, pool: str, operation: str, fn: Callable[[], None]) -> bool:
        try:
            self.retry.call(fn, pool=pool, operation=operation)
        except AutoscalerError as exc:
            self._problem(exc, runner_type, pool, operation)
            return False
        return True

    def _deregister(
        self, runner_type: str, pool: str, runner_id: int, name: str, now: datetime
    ) -> str:
        """Deregister a runner: :data:`REMOVED`, :data:`BUSY` (GitHub's 422: it took a job;
        leave it), :data:`GONE` (GitHub's 404: it no longer exists, nothing to remove; not
        an error, counted in ``runner_deletions_already_gone_total``) or :data:`FAILED`
        (anything else; a permanent error is a problem). A removed or gone runner is
        remembered (:attr:`ScalingState.removed_runners`) so a tick planning with an older
        runner list does not delete it again."""
        try:
            self.source.remove_runner(runner_id)
        except RejectedError:
            log.info("runner %s turned busy before removal; left alone", name)
            return BUSY
        except NotFoundError:
            self.metrics.runner_deletions_already_gone.labels(runner_type, pool).inc()
            log.info("runner %s is already gone at GitHub (404): nothing to remove", name)
            self.state = self.state.runners_removed((runner_id,), now)
            return GONE
        except AutoscalerError as exc:
            self._problem(exc, runner_type, pool, "remove_runner")
            return FAILED
        self.state = self.state.runners_removed((runner_id,), now)
        return REMOVED

    def _problem(self, exc: AutoscalerError, runner_type: str, pool: str, operation: str) -> None:
        report_problem(self.problems, exc, runner_type, pool, operation)


def report_problem(
    problems: list[ScalingProblem],
    exc: AutoscalerError,
    runner_type: str,
    pool: str,
    operation: str,
) -> None:
    """A failed call: a permanent error is a problem for on-call, a transient one a log line
    (the next tick retries)."""
    if isinstance(exc, PermanentError):
        msg = f"{operation} on {pool or 'pools'} failed permanently: {exc.code or exc.kind}"
        log.error(msg)
        problems.append(ScalingProblem("permanent", runner_type, pool, exc.code, msg))
    else:
        log.warning(
            "%s on %s failed (%s %s); next tick retries",
            operation,
            pool or "pools",
            exc.kind,
            exc.code,
        )
