"""The alerting stage the controller calls once per tick.

evaluate (rules + built-ins) -> advance the lifecycle -> persist states and the outbox in
one transaction -> deliver the outbox (bounded by the deliverer's deadline) -> keep the
Alertmanagers in step (alertmanager_sync; never waits) -> views.

``alertmanager`` receivers get no outbox items: Alertmanager needs the firing set re-posted
every tick or so, not one message per transition, so AlertmanagerSync serves them.

With ``dry_run`` nothing is persisted or delivered: the views show what would happen, and
the next real tick still sends every notification.

A follower (``state.backend: dynamodb``, another controller holds the lease) runs this
stage with ``dry_run``: it evaluates and exports ``alerts_firing`` over the leader's stored
states, persists and sends nothing.

A state store that cannot be used (corrupt, locked by another controller, read-only, ...)
stops this stage cleanly: one log line naming the file and what to do, a count in
``ci_autoscaler_state_store_errors_total{operation,code}``, and a ``state`` problem in
the controller's :class:`autoscaler.health.Health`, so ``/readyz`` fails until a save
succeeds again. Nothing is sent that could not be recorded first: the transitions stay
undecided (the stored state did not move) and go out once the store works.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoscaler.alerting import render
from autoscaler.alerting.alertmanager import ALERTMANAGER
from autoscaler.alerting.alertmanager_sync import AlertmanagerSync
from autoscaler.alerting.builtin_rules import (
    BUDGET_RULE,
    CLOCK_SKEW_RULE,
    OBJECTIVE_RULE,
    PROVISIONING_RULE,
    STAGE_RULE,
    UNLISTED_RULE,
    UNMATCHED_RULE,
    evaluate_budget,
    evaluate_clock_skew,
    evaluate_objective,
    evaluate_provisioning,
    evaluate_stage_regressions,
    evaluate_unlisted,
    evaluate_unmatched,
    evaluate_unreachable,
)
from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.evaluation import FLEET, Causes, Evaluation
from autoscaler.alerting.job_retry_alerts import DENIED_RULE, EXHAUSTED_RULE, evaluate_job_retries
from autoscaler.alerting.lifecycle import AlertState, AlertStatus, Notification, advance
from autoscaler.alerting.rules import evaluate_rules, reason_values
from autoscaler.alerting.runbook import with_runbook
from autoscaler.alerting.store import AlertStore
from autoscaler.config import AlertRuleConfig, AlertsConfig, ReceiverConfig
from autoscaler.domain import ClockSkew, PollBudget, QueueSnapshot, ScalingProblem
from autoscaler.errors import NotLeaderError, StateError
from autoscaler.health import STATE, Health
from autoscaler.job_retry.decide import RetryReport
from autoscaler.observe.starts import ObjectiveStatus
from autoscaler.observe.waits import StageRegression
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlertView:
    """One alert as ``once --output json`` shows it under ``"alerts"``."""

    rule: str
    state: str
    """``pending``, ``firing`` or ``resolved`` (resolved this tick)."""
    title: str
    text: str
    fingerprint: str
    values: Mapping[str, int]
    reason: str = ""
    """The Reason line's text (for the status page; not in ``once`` JSON)."""
    cause: str | None = None
    """The Cause line's text, None when the alert has none (not in ``once`` JSON)."""
    fired_at: datetime | None = None
    """When it started firing (the status page's "firing for"; not in ``once`` JSON)."""
    runbook_url: str = ""
    dashboard_url: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "state": self.state,
            "title": self.title,
            "text": self.text,
            "fingerprint": self.fingerprint,
            "values": dict(self.values),
        }


def _view(state: AlertState) -> AlertView:
    ev = state.evaluation
    started = state.fired_at or state.since
    ended = state.since if state.status is AlertStatus.RESOLVED else None
    n = Notification(
        state.status.value.upper(), ev, started_at=started, created_at=state.since, ended_at=ended
    )
    return AlertView(
        ev.rule,
        state.status.value,
        render.title(ev),
        render.text(n),
        ev.fingerprint,
        dict(ev.values),
        ev.reason,
        ev.cause,
        state.fired_at,
        ev.runbook_url,
        ev.dashboard_url,
    )


class AlertEngine:
    def __init__(
        self,
        config: AlertsConfig,
        store: AlertStore,
        deliverer: Deliverer | None,
        metrics: Metrics,
        *,
        started_at: datetime | None = None,
        health: Health | None = None,
        alertmanager: AlertmanagerSync | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.deliverer = deliverer
        self.metrics = metrics
        self.started_at = started_at
        #: Where a state store that cannot be written is reported (readiness reads it).
        self.health = health if health is not None else Health()
        self.alertmanager = alertmanager
        self._synced = {n for n, rc in config.receivers.items() if rc.type == ALERTMANAGER}
        self._firing_labels: set[tuple[str, str]] = set()

    def evaluate(
        self,
        snapshot: QueueSnapshot | None,
        last_successful_poll: datetime | None,
        now: datetime,
        problems: Sequence[ScalingProblem] | None = None,
        *,
        clock_skew: ClockSkew | None = None,
        budget: PollBudget | None = None,
        causes: Causes | None = None,
        objectives: Mapping[str, ObjectiveStatus] | None = None,
        retries: RetryReport | None = None,
        unlisted: Sequence[str] | None = None,
        stages: Sequence[StageRegression] | None = None,
    ) -> tuple[list[Evaluation], set[str]]:
        """This tick's evaluations, and the rules to keep as they are (no snapshot; no
        scaling run this tick: ``problems`` is None; no clock measured: ``clock_skew`` is
        None or empty; no budget plan this tick: ``budget`` is None). ``causes`` (runner
        type -> why its jobs wait) go on the queue alerts' ``Cause:`` line; ``objectives``
        feed the built-in queue-time objective alert, ``stages`` (each runner type's wait
        stages judged) the stage regression alert (None: not judged this tick)."""
        everyone = tuple(self.config.receivers)
        b = self.config.builtin
        evaluations: list[Evaluation] = []
        keep: set[str] = set()
        if snapshot is not None:
            evaluations += evaluate_rules(self.config.rules, snapshot, causes)
            if b.unmatched_jobs:
                evaluations.append(evaluate_unmatched(b, snapshot, everyone, causes))
            if b.queue_time_objective:
                evaluations += [
                    evaluate_objective(b, status, everyone, causes)
                    for status in (objectives or {}).values()
                ]
        else:
            keep = {r.name for r in self.config.rules} | {UNMATCHED_RULE, OBJECTIVE_RULE}
        if problems is None:
            keep.add(PROVISIONING_RULE)
        else:
            evaluations += evaluate_provisioning(b, problems, everyone)
        if b.github_budget and budget is not None:
            evaluations.append(evaluate_budget(b, budget, everyone))
        elif b.github_budget:
            keep.add(BUDGET_RULE)
        if b.github_unreachable_after > 0:
            started = self.started_at or now
            evaluations.append(
                evaluate_unreachable(b, last_successful_poll, started, now, everyone)
            )
            if unlisted is None:  # no poll this tick: unknown, not fine
                keep.add(UNLISTED_RULE)
            else:
                evaluations.append(evaluate_unlisted(b, unlisted, everyone))
        if b.clock_skew_max > 0:
            if clock_skew is None or (clock_skew.github is None and clock_skew.aws is None):
                keep.add(CLOCK_SKEW_RULE)
            else:
                evaluations.append(evaluate_clock_skew(b, clock_skew, everyone))
        if b.stage_regression.enabled and stages is None:
            keep.add(STAGE_RULE)
        elif b.stage_regression.enabled and stages is not None:
            evaluations += evaluate_stage_regressions(b, stages, everyone, causes)
        if retries is None:  # the retry stage did not run: unknown, not fine
            keep |= {EXHAUSTED_RULE, DENIED_RULE}
        else:
            evaluations += evaluate_job_retries(b, retries.exhausted, retries.denied, everyone)
        base = self.config.runbook_base_url
        return [with_runbook(e, base) for e in evaluations], keep

    def step(
        self,
        snapshot: QueueSnapshot | None,
        last_successful_poll: datetime | None,
        now: datetime,
        *,
        dry_run: bool = False,
        problems: Sequence[ScalingProblem] | None = None,
        clock_skew: ClockSkew | None = None,
        budget: PollBudget | None = None,
        causes: Causes | None = None,
        objectives: Mapping[str, ObjectiveStatus] | None = None,
        retries: RetryReport | None = None,
        unlisted: Sequence[str] | None = None,
        stages: Sequence[StageRegression] | None = None,
    ) -> list[AlertView]:
        """One tick: ``snapshot`` is a QueueSnapshot, or None when the poll failed;
        ``clock_skew`` the peers' clocks as last measured; ``budget`` the CI source's
        rate-limit plan of this tick, when it has one; ``causes`` why each runner type's
        jobs wait (the ``Cause:`` line); ``objectives`` each type's queue-time objective;
        ``retries`` the job-retry stage's report (None: it did not run this tick);
        ``stages`` the wait stages judged for regressions (None: not judged this tick)."""
        if self.started_at is None:
            self.started_at = now
        evaluations, keep = self.evaluate(
            snapshot,
            last_successful_poll,
            now,
            problems,
            clock_skew=clock_skew,
            budget=budget,
            causes=causes,
            objectives=objectives,
            retries=retries,
            unlisted=unlisted,
            stages=stages,
        )
        try:
            old = self.store.load_states()
        except StateError as exc:
            self.state_failed(exc)
            return []  # without the stored states every view would be a guess
        if dry_run:  # a follower (or --dry-run) only reads: reading is what must work
            self.health.report(STATE, None)
        new, notes = advance(old, evaluations, now, keep_rules=keep)
        if not dry_run:
            outbox = [
                (r, n) for n in notes for r in n.evaluation.receivers if r not in self._synced
            ]
            saved = True
            try:
                self.store.save(new, outbox)
            except StateError as exc:
                # Decided again next tick: the stored state is as it was. Nothing is sent
                # either: what cannot be marked delivered would go out again every tick.
                self.state_failed(exc)
                saved, notes = False, []
            else:
                self.health.report(STATE, None)
                self._count_transitions(old, new, notes)
            for n in notes:
                log.info(
                    "alert %s %s: %s", n.status, render.title(n.evaluation), n.evaluation.reason
                )
            if self.deliverer is not None and saved:
                try:
                    self.deliverer.deliver(self.store)
                except StateError as exc:
                    self.state_failed(exc)
            if self.alertmanager is not None:
                # Not an outbox: the evaluated set, re-posted until acknowledged. Kept up
                # while the store is broken, or Alertmanager would expire alerts that fire.
                self.alertmanager.sync(new, now)
        self._set_firing(new)
        return [
            _view(s)
            for _, s in sorted(
                new.items(), key=lambda kv: (kv[1].evaluation.rule, kv[1].evaluation.scope)
            )
        ]

    def state_failed(self, exc: StateError) -> None:
        """The state store failed: one line, a count, and readiness fails until a save works.

        A write fenced off because another controller took the lease is no failure of the
        store: this one is a follower from the next tick on (counted, not unready)."""
        if isinstance(exc, NotLeaderError):
            log.warning("alert state not saved: %s", exc)
            self.metrics.state_store_errors.labels(exc.operation or "unknown", exc.code).inc()
            return
        log.error("%s", exc)
        self.metrics.state_store_errors.labels(exc.operation or "unknown", exc.code).inc()
        self.metrics.stage_failed("alerting")
        self.health.report(STATE, str(exc))

    def _count_transitions(
        self,
        old: Mapping[str, AlertState],
        new: Mapping[str, AlertState],
        notes: list[Notification],
    ) -> None:
        t = self.metrics.alert_transitions
        for fp, s in new.items():
            before = old.get(fp)
            if s.status is AlertStatus.PENDING and (
                before is None or before.status is not AlertStatus.PENDING
            ):
                t.labels(s.evaluation.rule, "pending").inc()
        for n in notes:
            if not n.repeat:
                t.labels(n.evaluation.rule, n.status.lower()).inc()

    def _set_firing(self, states: Mapping[str, AlertState]) -> None:
        counts: dict[tuple[str, str], int] = {}
        for s in states.values():
            if s.status is AlertStatus.FIRING:
                key = (s.evaluation.rule, s.evaluation.priority)
                counts[key] = counts.get(key, 0) + 1
        for key in self._firing_labels | set(counts):
            self.metrics.alerts_firing.labels(*key).set(counts.get(key, 0))
        self._firing_labels |= set(counts)


SAMPLE_RULE = AlertRuleConfig(
    name="ci-autoscaler test alert",
    team="dev-infra",
    priority="P4",
    description="A test notification from `ci-autoscaler alerts test`; no action needed",
    receivers=(),
    max_queue_size=10,
    max_queue_time=3600.0,
)


def send_test(
    receiver: ReceiverConfig,
    now: datetime,
    deliverer: Deliverer,
    between: Callable[[Evaluation], dict[str, str]] | None = None,
) -> dict[str, str]:
    """Send a sample FIRING then RESOLVED to one receiver, now. Returns state -> result
    (``sent``, ``failed: <why>``, ``rejected: <why>``); nothing is stored. ``between``
    runs after a FIRING that was sent, before RESOLVED (Alertmanager: wait out
    ``group_wait`` and read the alert back); its lines join the results."""
    values = reason_values(SAMPLE_RULE, 7, 62 * 60.0)
    ev = Evaluation(
        rule=SAMPLE_RULE.name,
        scope=FLEET,
        team=SAMPLE_RULE.team,
        priority=SAMPLE_RULE.priority,
        description=SAMPLE_RULE.description,
        receivers=(receiver.name,),
        values=values,
    )
    results: dict[str, str] = {}
    firing = Notification("FIRING", ev, started_at=now, created_at=now)
    out = deliverer.send_one(receiver, firing)
    results["FIRING"] = out.result + (f": {out.error}" if out.error else "")
    if between is not None and out.result == "sent":
        results |= between(ev)
    issue = out.issue[1] if out.issue is not None else None
    cleared = ev.with_values(reason_values(SAMPLE_RULE, 0, 0.0))
    resolved = Notification("RESOLVED", cleared, started_at=now, created_at=now, ended_at=now)
    out = deliverer.send_one(receiver, resolved, issue)
    results["RESOLVED"] = out.result + (f": {out.error}" if out.error else "")
    return results
