"""Checks that combine values: references across sections, bounds between two keys,
label sets that must differ.

Each runs after every value was read, and only on values not already found wrong
(:meth:`Reader.ok`): ``max: -3`` is one problem, not also ``min_idle: must not exceed max
(0)`` about the default that replaced it.
"""

from __future__ import annotations

from autoscaler.config.reader import Reader, format_seconds
from autoscaler.config.schema import Config
from autoscaler.config.simulation import check_pools


def cross_check(r: Reader, config: Config) -> None:
    _receivers(r, config)
    _runner_types(r, config)
    _backoffs(r, config)
    check_pools(r, config.simulation, {p for rt in config.runner_types for p in rt.pools})


def _receivers(r: Reader, config: Config) -> None:
    known = set(config.alerts.receivers)
    for i, rule in enumerate(config.alerts.rules):
        for name in rule.receivers:
            if name not in known:
                r.problem(f"alerts.rules[{i}].receivers", f"unknown receiver {name!r}")
    for name in config.alerts.builtin.receivers:
        if name not in known:
            r.problem("alerts.builtin.receivers", f"unknown receiver {name!r}")


def _runner_types(r: Reader, config: Config) -> None:
    pools: dict[str, str] = {}
    label_sets: dict[frozenset[str], str] = {}
    for rt in config.runner_types:
        p = f"runner_types.{rt.name}"
        for pool in rt.pools:
            if pool in pools:
                r.problem(
                    f"{p}.pools", f"pool {pool!r} is already used by runner type {pools[pool]!r}"
                )
            pools[pool] = rt.name
        if rt.labels and r.ok(f"{p}.labels"):
            if rt.labels in label_sets:
                r.problem(
                    f"{p}.labels",
                    f"same labels as runner type {label_sets[rt.labels]!r}: a job could not "
                    "tell the two apart (give each type a label of its own)",
                )
            else:
                label_sets[rt.labels] = rt.name
        over = rt.max is not None and rt.min_idle.maximum > rt.max
        if over and r.ok(f"{p}.max", f"{p}.min_idle"):
            r.problem(f"{p}.min_idle", f"must not exceed max ({rt.max})")


def _backoffs(r: Reader, config: Config) -> None:
    """A back-off that starts above its own cap is a typo in one of the two."""
    pairs = (
        (
            "scaling.capacity_backoff_initial",
            config.scaling.capacity_backoff_initial,
            "scaling.capacity_backoff_max",
            config.scaling.capacity_backoff_max,
        ),
        (
            "aws.retry.initial_backoff",
            config.aws.retry.initial_backoff,
            "aws.retry.max_backoff",
            config.aws.retry.max_backoff,
        ),
    )
    for initial_path, initial, max_path, maximum in pairs:
        if initial > maximum and r.ok(initial_path, max_path):
            key = max_path.rpartition(".")[2]
            r.problem(
                initial_path,
                f"must not exceed {key} ({format_seconds(maximum)}), got {format_seconds(initial)}",
            )
