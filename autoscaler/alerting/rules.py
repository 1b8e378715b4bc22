"""Pure alert rule evaluation: one rule over one queue snapshot -> evaluations.

Conventions (documented once, here):

- ``max_queue_size`` and ``max_queue_time_mins`` are the observed *maxima* over the runner
  types a rule covers (the on-call alert format); a fleet-wide rule does not sum queues.
- Minutes are **floored** for display (62.9 min reads ``62``), as the seed alert implies.
  The checks compare the raw seconds: a time check with ``max_queue_time: 60m`` trips at
  60 min 1 s, which reads ``max_queue_time_mins=60, queue_time_threshold=1``.
- A check trips when the observed value is strictly *above* its threshold.
- ``min_job_age``: only jobs whose queue time is at least this old are counted.
- ``match: any`` fires when any configured check trips; ``all`` when every configured check
  trips. A check the rule does not configure reads ``0`` and takes no part in ``all``.

The alert instance (:class:`Evaluation`) is in :mod:`autoscaler.alerting.evaluation`, the
built-in alerts in :mod:`autoscaler.alerting.builtin_rules`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase

from autoscaler.alerting.evaluation import (
    FLEET,
    Causes,
    Evaluation,
    TypedCauses,
    typed_causes,
)
from autoscaler.config import AlertRuleConfig
from autoscaler.domain import QueueSnapshot, QueueStats


def covered_types(rule: AlertRuleConfig, names: Iterable[str]) -> list[str]:
    """Runner type names matching any ``runner_types`` glob and no exclusion, sorted."""
    return sorted(
        n
        for n in names
        if any(fnmatchcase(n, g) for g in rule.runner_types)
        and not any(fnmatchcase(n, g) for g in rule.exclude_runner_types)
    )


def _observed(stats: QueueStats, min_job_age: float) -> tuple[int, float]:
    """(queue size, max queue time seconds) counting only jobs at least min_job_age old."""
    if min_job_age <= 0:
        return stats.queue_size, stats.max_queue_time_seconds
    ages = [a for a in stats.queued_ages_seconds if a >= min_job_age]
    return len(ages), max(ages, default=0.0)


def reason_values(rule: AlertRuleConfig, size: int, seconds: float) -> dict[str, int]:
    """The Reason line numbers for observed maxima ``size`` and ``seconds``."""
    size_trip = rule.max_queue_size is not None and size > rule.max_queue_size
    time_trip = rule.max_queue_time is not None and seconds > rule.max_queue_time
    configured = [
        trip
        for trip, limit in ((size_trip, rule.max_queue_size), (time_trip, rule.max_queue_time))
        if limit is not None
    ]
    breached = all(configured) if rule.match == "all" else any(configured)
    return {
        "max_queue_size": size,
        "max_queue_time_mins": int(seconds // 60),
        "queue_size_threshold": int(size_trip),
        "queue_time_threshold": int(time_trip),
        "threshold_breached": int(bool(configured) and breached),
    }


def _from_rule(
    rule: AlertRuleConfig,
    scope: str,
    values: Mapping[str, int],
    causes: TypedCauses | None = None,
) -> Evaluation:
    labels = {} if scope == FLEET else {"runner_type": scope}
    return Evaluation(
        rule=rule.name,
        scope=scope,
        team=rule.team,
        priority=rule.priority,
        description=rule.description,
        receivers=rule.receivers,
        values=values,
        runbook_url=rule.runbook_url,
        dashboard_url=rule.dashboard_url,
        for_=rule.for_,
        repeat_interval=rule.repeat_interval,
        labels=labels,
        causes=causes,
    )


def evaluate_rule(
    rule: AlertRuleConfig, snapshot: QueueSnapshot, causes: Causes | None = None
) -> list[Evaluation]:
    """Evaluate one rule: one evaluation per covered type, or one fleet-wide.

    With ``causes`` each evaluation carries its types' causes; a fleet-wide one those of
    the covered types with counted jobs, the longest waiting first.
    """
    names = covered_types(rule, snapshot.per_type)
    observed = {n: _observed(snapshot.per_type[n], rule.min_job_age) for n in names}
    if rule.per_runner_type:
        return [
            _from_rule(
                rule,
                n,
                reason_values(rule, *observed[n]),
                None if causes is None else typed_causes([n], causes),
            )
            for n in names
        ]
    size = max((s for s, _ in observed.values()), default=0)
    seconds = max((t for _, t in observed.values()), default=0.0)
    fleet = None
    if causes is not None:
        waiting = sorted((n for n in names if observed[n][0] > 0), key=lambda n: -observed[n][1])
        fleet = typed_causes(waiting, causes)
    return [_from_rule(rule, FLEET, reason_values(rule, size, seconds), fleet)]


def evaluate_rules(
    rules: Sequence[AlertRuleConfig], snapshot: QueueSnapshot, causes: Causes | None = None
) -> list[Evaluation]:
    return [e for rule in rules for e in evaluate_rule(rule, snapshot, causes)]
