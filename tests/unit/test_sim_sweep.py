"""``--sweep``: parsing knobs, the grid of configs, the Pareto front; percentiles."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from autoscaler.sim.metrics import PolicyResult, format_table, percentile
from autoscaler.sim.oracle import Floor, FrontierPoint, TypeFloor
from autoscaler.sim.sweep import SweepError, grid, pareto_front, parse_sweep
from tests.factories import load_config

CONFIG = load_config(
    runner_types={
        "a": {
            "labels": ["a"],
            "pools": ["pa"],
            "min_idle": {
                "default": 1,
                "schedule": [{"from": "08:00", "to": "18:00", "min_idle": 3}],
            },
        },
        "b": {"labels": ["b"], "pools": ["pb"]},
    },
)


def result(name: str, p95: float, hours: float) -> PolicyResult:
    return PolicyResult(name, 1, 0, 0, 0.0, p95, p95, 0, hours, 0.0, 0.0, hours, 0, 0, 0.0)


def test_a_grid_is_every_combination_applied_to_every_runner_type() -> None:
    knobs = parse_sweep(["min_idle=0,2", "idle_timeout=5m,90", "reaction=none,1s"])
    combos = grid(CONFIG, knobs)
    assert len(combos) == 8
    label, config = combos[3]
    assert label == "min_idle=0 idle_timeout=90 reaction=1s"
    nine = datetime(2026, 11, 30, 9, tzinfo=UTC)  # inside type a's schedule window
    assert [rt.min_idle.at(nine) for rt in config.runner_types] == [0, 0]
    assert {rt.idle_timeout for rt in config.runner_types} == {90.0}
    assert config.simulation.reaction == 1.0
    assert grid(CONFIG, parse_sweep(["poll_interval=10s"]))[0][1].poll_interval == 10.0
    assert (
        grid(CONFIG, parse_sweep(["max_scale_in_per_tick=50"]))[0][1].scaling.max_scale_in_per_tick
        == 50
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["min_idle"], "expected KNOB=V1,V2"),
        (["speed=1,2"], "expected KNOB=V1,V2"),
        (["min_idle="], "no values"),
        (["min_idle=1,x"], "not a whole number"),
        (["idle_timeout=soon"], "not a duration"),
        (["min_idle=1", "min_idle=2"], "given twice"),
    ],
    ids=["no-values-sign", "unknown-knob", "empty", "not-int", "not-duration", "twice"],
)
def test_bad_sweeps_say_what_is_wrong(args: list[str], message: str) -> None:
    with pytest.raises(SweepError, match=message):
        parse_sweep(args)


def test_the_pareto_front_keeps_what_nothing_beats_on_both_cheapest_first() -> None:
    a, b, c, d = (
        result("a", 60, 100),
        result("b", 30, 150),
        result("c", 70, 140),
        result("d", 30, 150),
    )
    assert pareto_front([a, b, c, d]) == [a, b, d]


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 95) == 0.0
    assert percentile([10.0], 99) == 10.0
    assert percentile([0.0, 10.0, 20.0, 30.0], 50) == 15.0
    assert percentile(list(map(float, range(101))), 95) == 95.0


def test_the_table_has_a_row_per_policy_with_the_cost_over_the_oracle() -> None:
    r = replace(result("ci-autoscaler", 95.0, 11.5), busy_hours=10.0, boot_hours=0.0)
    oracle = Floor((TypeFloor("a", 3, 9.0, 10.0, (FrontierPoint(0.0, 10.0),)),))
    table = format_table([r], oracle)
    assert table.splitlines()[0].split() == [
        "policy",
        "p50",
        "p95",
        "p99",
        "runner-h",
        "idle-h",
        "x",
        "oracle",
        "actions",
        ">10m",
        "storage-h",
    ]
    assert table.splitlines()[2].split() == [
        "ci-autoscaler",
        "0s",
        "95s",
        "95s",
        "11.5",
        "0.0",
        "1.15",
        "0",
        "0",
        "0.0",
    ]
