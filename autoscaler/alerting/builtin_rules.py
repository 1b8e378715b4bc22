"""The built-in alerts (pure): what the controller says about itself and the jobs no rule covers.

Unlike the configured rules (:mod:`autoscaler.alerting.rules`), these need no entry in
``alerts.rules``: each has a fixed name, is fleet-wide or per runner type by nature, and
takes its team, priority, receivers and links from ``alerts.builtin``
(:class:`~autoscaler.config.BuiltinAlertsConfig`; no receivers there means every
receiver). Each reads one observation of its own (unmatched jobs, the queue-time
objective's burn, the last successful poll, scaling problems, clock skew, the poll
budget), so they live together, apart from the rule-matching machinery.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from autoscaler.alerting.evaluation import FLEET, Causes, Evaluation, typed_causes
from autoscaler.config import BuiltinAlertsConfig
from autoscaler.config.durations import format_seconds
from autoscaler.domain import ClockSkew, PollBudget, QueueSnapshot, ScalingProblem
from autoscaler.observe.starts import FAST_BURN, SLOW_BURN, ObjectiveStatus
from autoscaler.observe.waits import StageRegression
from autoscaler.scale.causes import UNMATCHED

UNMATCHED_RULE = "Jobs no runner type serves"
UNREACHABLE_RULE = "GitHub unreachable"
PROVISIONING_RULE = "Runner pool provisioning failing"
CLOCK_SKEW_RULE = "Controller clock skewed"
BUDGET_RULE = "GitHub budget too small for this org"
OBJECTIVE_RULE = "Queue-time objective burning"
UNLISTED_RULE = "GitHub repositories not listed"
STAGE_RULE = "Job wait stage regressed"


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


def evaluate_unlisted(
    b: BuiltinAlertsConfig, unlisted: Sequence[str], all_receivers: tuple[str, ...]
) -> Evaluation:
    """Built-in: the poll worked but could not list some watched repositories (their pages
    loop, are malformed, or failed) and has no earlier listing of them: their queued jobs
    are not counted, and nothing scales for them. It resolves once each is listed."""
    values = {"unlisted_repos": len(unlisted), "threshold_breached": int(bool(unlisted))}
    description = (
        "The poll could not list some watched repositories and has no earlier listing of "
        "them: their queued jobs are not counted (`ci-autoscaler explain` names them)"
    )
    return _builtin(b, UNLISTED_RULE, description, values, all_receivers)


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


def evaluate_stage_regressions(
    b: BuiltinAlertsConfig,
    judged: Sequence[StageRegression],
    all_receivers: tuple[str, ...],
    causes: Causes | None = None,
) -> list[Evaluation]:
    """Built-in: a stage of a runner type's wait regressed (``alerts.builtin.
    stage_regression``: its p95 over the recent window against the baseline before it).
    One alert per runner type and stage; its description names both, with the two p95s
    ("boot p95 for gpu went from 95 s to 240 s over the last hour")."""
    rule = b.stage_regression
    recent, baseline = _span(rule.recent), _span(rule.baseline)
    out = []
    for r in judged:
        values = {
            "stage_p95_baseline_secs": round(r.baseline_p95),
            "stage_p95_recent_secs": round(r.recent_p95),
            "jobs_baseline": r.baseline_jobs,
            "jobs_recent": r.recent_jobs,
            "min_jobs": rule.min_jobs,
            "threshold_breached": int(r.regressed),
        }
        description = (
            f"{r.stage} p95 for {r.runner_type} went from {round(r.baseline_p95)} s to"
            f" {round(r.recent_p95)} s over the last {recent} (baseline: the {baseline}"
            " before)"
        )
        evaluation = _builtin(b, STAGE_RULE, description, values, all_receivers)
        out.append(
            replace(
                evaluation,
                scope=f"{r.runner_type}/{r.stage}",
                labels={"runner_type": r.runner_type, "stage": r.stage},
                causes=None if causes is None else typed_causes([r.runner_type], causes),
            )
        )
    return out


def _span(seconds: float) -> str:
    """``hour``, ``day``, or the duration (``30m``): "over the last hour"."""
    return {3600.0: "hour", 86400.0: "day"}.get(seconds, format_seconds(seconds))
