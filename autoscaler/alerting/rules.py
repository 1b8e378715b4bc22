"""Pure alert rule evaluation: one rule over one queue snapshot -> evaluations.

An :class:`Evaluation` carries everything later stages need (metadata for rendering, the
numbers for the Reason line, ``for`` and ``repeat_interval`` for the lifecycle) so that a
stored alert can still be rendered and resolved after its rule left the configuration.

Conventions (documented once, here):

- ``max_queue_size`` and ``max_queue_time_mins`` are the observed *maxima* over the runner
  types a rule covers (design.md, "Alert text"); a fleet-wide rule does not sum queues.
- Minutes are **floored** for display (62.9 min reads ``62``), as the seed alert implies.
  The checks compare the raw seconds: a time check with ``max_queue_time: 60m`` trips at
  60 min 1 s, which reads ``max_queue_time_mins=60, queue_time_threshold=1``.
- A check trips when the observed value is strictly *above* its threshold.
- ``min_job_age``: only jobs whose queue time is at least this old are counted.
- ``match: any`` fires when any configured check trips; ``all`` when every configured check
  trips. A check the rule does not configure reads ``0`` and takes no part in ``all``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from autoscaler.config import AlertRuleConfig, BuiltinAlertsConfig
from autoscaler.domain import (
    Cause,
    ClockSkew,
    PollBudget,
    QueueSnapshot,
    QueueStats,
    ScalingProblem,
)
from autoscaler.observe.starts import FAST_BURN, SLOW_BURN, ObjectiveStatus
from autoscaler.scale.causes import UNMATCHED, cause_line

FLEET = "fleet"
UNMATCHED_RULE = "Jobs no runner type serves"
UNREACHABLE_RULE = "GitHub unreachable"
PROVISIONING_RULE = "Runner pool provisioning failing"
CLOCK_SKEW_RULE = "Controller clock skewed"
BUDGET_RULE = "GitHub budget too small for this org"
OBJECTIVE_RULE = "Queue-time objective burning"

#: Runner type -> its causes this tick (:func:`autoscaler.scale.diagnosis.diagnose`).
Causes = Mapping[str, Sequence[Cause]]
#: An alert's causes: (runner type, cause), most important first.
TypedCauses = tuple[tuple[str, Cause], ...]


def fingerprint(rule: str, scope: str) -> str:
    """Stable id of one alert: sha256 of rule name and scope, 16 hex digits."""
    return hashlib.sha256(f"{rule}\x00{scope}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Evaluation:
    """One alert instance (rule x scope) as evaluated at one instant."""

    rule: str
    scope: str
    team: str
    priority: str
    description: str
    receivers: tuple[str, ...]
    values: Mapping[str, int]
    """Reason line numbers, in display order; always ends with ``threshold_breached``."""
    runbook_url: str = ""
    dashboard_url: str = ""
    for_: float = 0.0
    repeat_interval: float = 4 * 3600.0
    labels: Mapping[str, str] = field(default_factory=dict)
    causes: TypedCauses | None = None
    """Why the jobs wait, per runner type; None where the rule has no ``Cause:`` line
    (alerts about the controller itself, and alerts stored before causes existed)."""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.rule, self.scope)

    @property
    def cause(self) -> str | None:
        """The ``Cause:`` line's text (None: the alert has no such line)."""
        return None if self.causes is None else cause_line([c for _, c in self.causes])

    def causes_as_dicts(self) -> list[dict[str, str]]:
        """``[{runner_type, code, detail}]``, as every receiver's payload carries them."""
        return [{"runner_type": rt, **c.as_dict()} for rt, c in self.causes or ()]

    @property
    def breached(self) -> bool:
        return self.values.get("threshold_breached", 0) == 1

    @property
    def reason(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "scope": self.scope,
            "team": self.team,
            "priority": self.priority,
            "description": self.description,
            "receivers": list(self.receivers),
            "values": dict(self.values),
            "runbook_url": self.runbook_url,
            "dashboard_url": self.dashboard_url,
            "for": self.for_,
            "repeat_interval": self.repeat_interval,
            "labels": dict(self.labels),
            **({} if self.causes is None else {"causes": self.causes_as_dicts()}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Evaluation:
        return cls(
            rule=str(d["rule"]),
            scope=str(d["scope"]),
            team=str(d["team"]),
            priority=str(d["priority"]),
            description=str(d["description"]),
            receivers=tuple(d["receivers"]),
            values={str(k): int(v) for k, v in d["values"].items()},
            runbook_url=str(d.get("runbook_url", "")),
            dashboard_url=str(d.get("dashboard_url", "")),
            for_=float(d.get("for", 0.0)),
            repeat_interval=float(d.get("repeat_interval", 4 * 3600.0)),
            labels={str(k): str(v) for k, v in d.get("labels", {}).items()},
            causes=None
            if d.get("causes") is None
            else tuple(
                (str(c["runner_type"]), Cause(str(c["code"]), str(c["detail"])))
                for c in d["causes"]
            ),
        )

    def with_values(self, values: Mapping[str, int]) -> Evaluation:
        return replace(self, values=dict(values))


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


def typed_causes(types: Sequence[str], causes: Causes) -> TypedCauses:
    """The causes of ``types`` in that order, each (runner type, cause) once."""
    out: list[tuple[str, Cause]] = []
    seen: set[tuple[str, str]] = set()
    for name in types:
        for c in causes.get(name, ()):
            if (c.code, c.detail) not in seen:
                seen.add((c.code, c.detail))
                out.append((name, c))
    return tuple(out)


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


def _builtin(
    b: BuiltinAlertsConfig,
    rule: str,
    description: str,
    values: dict[str, int],
    receivers: tuple[str, ...],
) -> Evaluation:
    return Evaluation(
        rule=rule,
        scope=FLEET,
        team=b.team,
        priority=b.priority,
        description=description,
        receivers=b.receivers or receivers,
        values=values,
        runbook_url=b.runbook_url,
        dashboard_url=b.dashboard_url,
        repeat_interval=4 * 3600.0,
    )


def evaluate_unmatched(
    b: BuiltinAlertsConfig,
    snapshot: QueueSnapshot,
    all_receivers: tuple[str, ...],
    causes: Causes | None = None,
) -> Evaluation:
    """Built-in: queued jobs whose labels no runner type serves (nothing will run them)."""
    ages = snapshot.unmatched_ages_seconds
    values = {
        "unmatched_jobs": snapshot.unmatched_jobs,
        "max_queue_time_mins": int(max(ages, default=0.0) // 60),
        "threshold_breached": int(snapshot.unmatched_jobs > 0),
    }
    evaluation = _builtin(
        b,
        UNMATCHED_RULE,
        "Queued jobs whose labels no configured runner type serves",
        values,
        all_receivers,
    )
    if causes is None:
        return evaluation
    return replace(evaluation, causes=typed_causes([UNMATCHED], causes))


def _floor(value: float) -> int:
    """Floored for display, forgiving float noise (0.5 / 0.05 reads 10, not 9)."""
    return math.floor(value + 1e-9)


def evaluate_objective(
    b: BuiltinAlertsConfig,
    status: ObjectiveStatus,
    all_receivers: tuple[str, ...],
    causes: Causes | None = None,
) -> Evaluation:
    """Built-in: a runner type's queue-time objective burns its error budget too fast
    (multi-window: 1h and 5m above 14.4, or 6h and 30m above 6). Burn rates and shares
    read floored in the Reason line; the check uses the exact values."""
    slo = status.objective
    long_fast, short_fast, _ = FAST_BURN
    long_slow, short_slow, _ = SLOW_BURN
    share = status.share(long_fast)
    values = {
        "queue_time_objective_secs": _floor(slo.queue_time),
        "objective_pct": _floor(slo.objective * 100),
        "jobs_started_1h": status.counts.get(long_fast, (0, 0))[1],
        "within_objective_pct_1h": 100 if share is None else _floor(share * 100),
        "burn_rate_5m": _floor(status.burn(short_fast)),
        "burn_rate_1h": _floor(status.burn(long_fast)),
        "burn_rate_30m": _floor(status.burn(short_slow)),
        "burn_rate_6h": _floor(status.burn(long_slow)),
        "threshold_breached": int(status.burning),
    }
    description = (
        f"Jobs of {status.runner_type} wait longer than {int(slo.queue_time)}s too often:"
        f" the {slo.objective:.4g} queue-time objective is burning its error budget"
    )
    evaluation = _builtin(b, OBJECTIVE_RULE, description, values, all_receivers)
    return replace(
        evaluation,
        scope=status.runner_type,
        labels={"runner_type": status.runner_type},
        causes=None if causes is None else typed_causes([status.runner_type], causes),
    )


def evaluate_unreachable(
    b: BuiltinAlertsConfig,
    last_successful_poll: datetime | None,
    started_at: datetime,
    now: datetime,
    all_receivers: tuple[str, ...],
) -> Evaluation:
    """Built-in: no successful poll of GitHub for longer than ``github_unreachable_after``.

    With no successful poll yet, the time since ``started_at`` (process start) counts.
    """
    since = last_successful_poll or started_at
    seconds = max(0.0, (now - since).total_seconds())
    values = {
        "mins_since_last_successful_poll": int(seconds // 60),
        "unreachable_threshold_mins": int(b.github_unreachable_after // 60),
        "threshold_breached": int(seconds > b.github_unreachable_after),
    }
    return _builtin(
        b, UNREACHABLE_RULE, "The controller cannot read the GitHub API", values, all_receivers
    )


def evaluate_provisioning(
    b: BuiltinAlertsConfig, problems: Sequence[ScalingProblem], all_receivers: tuple[str, ...]
) -> list[Evaluation]:
    """Built-in: scaling hit a permanent cloud error, or every pool of a type is out of
    capacity, or a configured pool does not exist. One alert per runner type; it fires at
    once and resolves when a tick of scaling runs without the problem."""
    by_type: dict[str, list[ScalingProblem]] = {}
    for problem in problems:
        by_type.setdefault(problem.runner_type, []).append(problem)
    out = []
    for runner_type, found in sorted(by_type.items()):
        kinds = [p.kind for p in found]
        values = {
            "permanent_errors": kinds.count("permanent") + kinds.count("launch"),
            "out_of_capacity": int("out_of_capacity" in kinds),
            "missing_pools": kinds.count("missing"),
            "threshold_breached": 1,
        }
        detail = "; ".join(_detail(p, runner_type) for p in found)
        evaluation = _builtin(
            b, PROVISIONING_RULE, f"Scaling {runner_type} failed ({detail})", values, all_receivers
        )
        out.append(replace(evaluation, scope=runner_type))
    return out


def _detail(p: ScalingProblem, runner_type: str) -> str:
    """``pool: code``; a refused launch also quotes the cloud's own words (what to fix)."""
    text = f"{p.pool or runner_type}: {p.code or p.kind.replace('_', ' ')}"
    return f"{text}: {p.message}" if p.kind == "launch" and p.message else text


def evaluate_clock_skew(
    b: BuiltinAlertsConfig, skew: ClockSkew, all_receivers: tuple[str, ...]
) -> Evaluation:
    """Built-in: GitHub's or AWS's clock (from their answers' ``Date``) is further than
    ``clock_skew_max`` from ours. Ages, launch times and the orphan check compare our clock
    with theirs; an unmeasured peer reads 0."""
    github, aws = (round(s or 0.0) for s in (skew.github, skew.aws))
    values = {
        "github_clock_skew_seconds": github,
        "aws_clock_skew_seconds": aws,
        "clock_skew_threshold_seconds": int(b.clock_skew_max),
        "threshold_breached": int(skew.worst > b.clock_skew_max),
    }
    return _builtin(
        b,
        CLOCK_SKEW_RULE,
        "The controller's clock disagrees with GitHub's or AWS's (check NTP on its host)",
        values,
        all_receivers,
    )


def evaluate_budget(
    b: BuiltinAlertsConfig, budget: PollBudget, all_receivers: tuple[str, ...]
) -> Evaluation:
    """Built-in: GitHub's rate limit (``github.rate_limit_share`` of it) cannot cover
    re-listing the repositories with queued jobs every poll interval, so the controller
    re-lists them less often: queued jobs are seen later. It resolves when the plan fits."""
    values = {
        "poll_interval_seconds": int(budget.poll_interval),
        "busy_interval_seconds": int(budget.busy_interval),
        "budget_requests_per_hour": int(budget.budget_per_hour),
        "needed_requests_per_hour": int(budget.needed_per_hour),
        "threshold_breached": int(budget.too_small),
    }
    description = (
        "Polling every repository with queued jobs each poll interval would spend more "
        "than github.rate_limit_share of the GitHub rate limit, so they are re-listed "
        f"every {int(budget.busy_interval)}s: queued jobs are seen late. Deliver jobs by "
        "webhook, use a GitHub App (a higher limit), or raise poll_interval."
    )
    return _builtin(b, BUDGET_RULE, description, values, all_receivers)
