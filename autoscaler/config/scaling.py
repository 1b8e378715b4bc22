"""What to scale and how: the ``runner_types`` (each with its pools, limits, timeouts and
queue-time SLO), the shared ``budgets``, and the ``scaling`` section's limits and back-off.

The sections the policy (:mod:`autoscaler.scale.policy`) decides with; read into
:class:`~autoscaler.config.schema.RunnerTypeConfig`,
:class:`~autoscaler.config.schema.BudgetConfig` and
:class:`~autoscaler.config.schema.ScalingConfig` by :mod:`autoscaler.config.load`. How they
combine (a budget naming an unknown type, a pool in two types) is
:mod:`autoscaler.config.checks`.
"""

from __future__ import annotations

from typing import Any

from autoscaler.config.jit import DEFAULT_MODE, DEFAULT_RUNNER_GROUP_ID, MODES
from autoscaler.config.reader import Reader, join_path
from autoscaler.config.schedule import read_min_idle
from autoscaler.config.schema import (
    BudgetConfig,
    QueueObjective,
    RunnerTypeConfig,
    ScalingConfig,
)
from autoscaler.domain import normalize_labels

MIN_BOOT_TIMEOUT = 10.0
"""The shortest ``boot_timeout`` accepted, in seconds. No EC2 instance boots and registers
a runner faster; below it every new instance would be judged an orphan (``0s`` made each
one a candidate the moment it launched). The orphan check's clock-skew guard, a quarter of
``boot_timeout``, must also stay above the one-second resolution of the ``Date`` headers
and launch times it compares."""


def read_runner_types(r: Reader, value: Any) -> tuple[RunnerTypeConfig, ...]:
    path = "runner_types"
    if value is None:
        r.problem(path, "is required (at least one runner type)")
        return ()
    if not isinstance(value, dict) or not value:
        r.problem(path, "must be a non-empty mapping of name -> {labels: [...]}")
        return ()
    out = []
    for name, body in value.items():
        p = join_path(path, str(name))
        m = r.mapping(
            body,
            p,
            (
                "labels",
                "pools",
                "min_idle",
                "max",
                "priority",
                "idle_timeout",
                "boot_timeout",
                "slo",
                "mode",
                "runner_group_id",
            ),
        )
        boot_timeout = r.duration(m.get("boot_timeout"), f"{p}.boot_timeout", 900.0)
        if boot_timeout < MIN_BOOT_TIMEOUT:
            r.problem(
                f"{p}.boot_timeout",
                f"must be at least {MIN_BOOT_TIMEOUT:.0f}s: an instance needs that long to"
                " boot and register its runner, or it is terminated as an orphan",
            )
        out.append(
            RunnerTypeConfig(
                name=str(name),
                labels=normalize_labels(r.string_list(m.get("labels"), f"{p}.labels")),
                pools=r.string_list(m["pools"], f"{p}.pools") if "pools" in m else (),
                min_idle=read_min_idle(r, m.get("min_idle"), f"{p}.min_idle"),
                max=r.optional_integer(m.get("max"), f"{p}.max"),
                priority=r.integer(m.get("priority"), f"{p}.priority", 0),
                idle_timeout=r.duration(
                    m.get("idle_timeout"), f"{p}.idle_timeout", RunnerTypeConfig.idle_timeout
                ),
                boot_timeout=boot_timeout,
                slo=_slo(r, m.get("slo"), f"{p}.slo"),
                mode=r.choice(m.get("mode"), f"{p}.mode", MODES, DEFAULT_MODE),
                runner_group_id=r.integer(
                    m.get("runner_group_id"),
                    f"{p}.runner_group_id",
                    DEFAULT_RUNNER_GROUP_ID,
                    minimum=1,
                ),
            )
        )
    return tuple(out)


def _slo(r: Reader, value: Any, p: str) -> QueueObjective | None:
    """``{queue_time: 5m, objective: 0.95}``; both keys required. A value already reported
    (not a mapping, not a number, an unset variable) gets no follow-on range problem."""
    if value is None:
        return None
    if not isinstance(value, dict):
        r.mapping(value, p, ())  # says what it got
        return None
    m = r.mapping(value, p, ("queue_time", "objective"))
    queue_time = r.duration(m.get("queue_time"), f"{p}.queue_time", positive=True)
    path = f"{p}.objective"
    objective = 0.99  # only where a problem refuses the file
    if m.get("objective") is None:
        r.problem(path, "is required (a share such as 0.95)")
    else:
        share = r.number(m["objective"], path, objective)
        if r.ok(path) and not 0 < share < 1:
            r.problem(path, f"must be between 0 and 1 (exclusive), got {share:g}")
        elif r.ok(path):
            objective = share
    return QueueObjective(queue_time=queue_time, objective=objective)


def read_budgets(r: Reader, value: Any) -> tuple[BudgetConfig, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        r.problem("budgets", "must be a mapping of name -> {max_instances, runner_types}")
        return ()
    out = []
    for name, body in value.items():
        p = join_path("budgets", str(name))
        m = r.mapping(body, p, ("max_instances", "runner_types"))
        out.append(
            BudgetConfig(
                name=str(name),
                max_instances=r.integer(m.get("max_instances"), f"{p}.max_instances"),
                runner_types=r.string_list(m.get("runner_types"), f"{p}.runner_types"),
            )
        )
    return tuple(out)


def read_scaling(r: Reader, value: Any) -> ScalingConfig:
    p = "scaling"
    m = r.mapping(
        value,
        p,
        (
            "enabled",
            "max_scale_in_per_tick",
            "max_cleanup_per_tick",
            "capacity_backoff_initial",
            "capacity_backoff_max",
        ),
    )
    return ScalingConfig(
        enabled=r.boolean(m.get("enabled"), f"{p}.enabled", True),
        max_scale_in_per_tick=r.integer(
            m.get("max_scale_in_per_tick"),
            f"{p}.max_scale_in_per_tick",
            ScalingConfig.max_scale_in_per_tick,
        ),
        max_cleanup_per_tick=r.integer(
            m.get("max_cleanup_per_tick"), f"{p}.max_cleanup_per_tick", 5
        ),
        capacity_backoff_initial=r.duration(
            m.get("capacity_backoff_initial"), f"{p}.capacity_backoff_initial", 300.0
        ),
        capacity_backoff_max=r.duration(
            m.get("capacity_backoff_max"), f"{p}.capacity_backoff_max", 1800.0
        ),
    )
